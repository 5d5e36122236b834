"""The sentence-transformers layout of a
:class:`~pyterrier_selfsup.models.dual_encoder.DualEncoder`: read from a sentence-transformers
model it starts from, and written beside a trained one, so that ``SentenceTransformer(dir)``
gives the package's vectors.

    export_sentence_transformers(encoder, 'out')   # after encoder.save_pretrained('out')
"""
import filecmp
import os
from pathlib import Path
from typing import Optional, Union

import torch

from pyterrier_selfsup.models.hub import read_saved_config

# (the passage tower's directory beside the query encoder's weights, as save_pretrained writes it)
PASSAGE_ENCODER_DIR = 'passage_encoder'


def export_sentence_transformers(encoder, path: Union[str, Path]) -> Path:
    """Writes ``encoder``'s sentence-transformers layout into ``path``, where
    :meth:`~pyterrier_selfsup.models.dual_encoder.DualEncoder.save_pretrained` has written its
    weights (:meth:`~pyterrier_selfsup.models.dual_encoder.DualEncoder.save_sentence_transformers`
    says what it holds)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (Dense, Normalize, Pooling,
                                                                    Router, Transformer)

    path = Path(path)

    def tower(directory: Path, max_length: int, proj: Optional[torch.nn.Linear]) -> list:
        # the tokenizer is saved once, beside the (query) encoder
        transformer = Transformer(str(directory), max_seq_length=max_length,
                                  tokenizer_name_or_path=str(path))
        modules = [transformer, Pooling(transformer.get_embedding_dimension(),
                                        pooling_mode=encoder.model.pooling)]
        if proj is not None:
            modules.append(Dense(proj.in_features, proj.out_features, bias=False,
                                 activation_function=torch.nn.Identity(),
                                 init_weight=proj.weight.detach().float().cpu().clone()))
        return modules + ([Normalize()] if encoder.model.normalize else [])

    passages = path if encoder.model.tied else path / PASSAGE_ENCODER_DIR
    if encoder.model.tied and encoder.model.dim is None:
        modules = tower(path, encoder.max_length, None)
    else:
        modules = [Router.for_query_document(
            query_modules=tower(path, encoder.query_max_length, encoder.model.query_proj),
            document_modules=tower(passages, encoder.max_length, encoder.model.passage_proj))]
    SentenceTransformer(modules=modules, device='cpu').save(str(path))
    if isinstance(modules[0], Router):  # (the towers' weights once on disk, not twice)
        for tower_dir, weights_dir in (('query_0_Transformer', path),
                                       ('document_0_Transformer', passages)):
            for name in ('model.safetensors', 'pytorch_model.bin'):
                _linked_if_equal(path / tower_dir / name, weights_dir / name)
    return path


def sentence_transformers_config(name_or_path: str) -> Optional[dict]:
    """A sentence-transformers model's pooling, normalisation and max length, read from its
    module files (a directory or the hub's cache); None where it is not one."""
    modules = read_saved_config(name_or_path, 'modules.json')
    if not modules:
        return None
    types = {m['type'].rsplit('.', 1)[-1]: m for m in modules}
    pooling_cfg = (read_saved_config(name_or_path, f'{types["Pooling"]["path"]}/config.json')
                   if 'Pooling' in types else {})
    if pooling_cfg.get('pooling_mode_cls_token'):
        pooling = 'cls'
    elif pooling_cfg.get('pooling_mode_mean_tokens', True):
        pooling = 'mean'
    else:
        raise ValueError(f'{name_or_path}: sentence-transformers pooling {pooling_cfg} is neither '
                         'cls nor mean')
    st = read_saved_config(name_or_path, 'sentence_bert_config.json') or {}
    return {'pooling': pooling, 'normalize': 'Normalize' in types,
            'max_length': st.get('max_seq_length', 512)}


def _linked_if_equal(copy: Path, original: Path) -> None:
    """Makes ``copy`` a hard link to ``original`` where both exist with the same bytes, so that
    the file is held once on disk; keeps the copy where the filesystem has no hard links."""
    if not (copy.is_file() and original.is_file()) or os.path.samefile(copy, original):
        return
    if not filecmp.cmp(copy, original, shallow=False):
        return
    linked = copy.with_name(copy.name + '.link')
    try:
        os.link(original, linked)
        os.replace(linked, copy)
    except OSError:
        linked.unlink(missing_ok=True)
