"""The sentence-transformers layout of a
:class:`~pyterrier_selfsup.models.dual_encoder.DualEncoder`: read from a sentence-transformers
model it starts from, and written beside a trained one, so that ``SentenceTransformer(dir)``
gives the package's vectors.

    export_sentence_transformers(encoder, 'out')   # after encoder.save_pretrained('out')
"""
import filecmp
import fnmatch
import os
from pathlib import Path

import torch

from pyterrier_selfsup.models.hub import read_saved_config
from pyterrier_selfsup.models.names import MODEL_CARD_PROMPTS

# (the passage tower's directory beside the query encoder's weights, as save_pretrained writes it)
PASSAGE_ENCODER_DIR = 'passage_encoder'


def export_sentence_transformers(encoder, path: str | Path) -> Path:
    """Writes ``encoder``'s sentence-transformers layout into ``path``, where
    :meth:`~pyterrier_selfsup.models.dual_encoder.DualEncoder.save_pretrained` has written its
    weights (:meth:`~pyterrier_selfsup.models.dual_encoder.DualEncoder.save_sentence_transformers`
    says what it holds)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import (
        Dense,
        Normalize,
        Pooling,
        Router,
        Transformer,
    )

    path = Path(path)

    def tower(directory: Path, max_length: int, proj: torch.nn.Linear | None) -> list:
        # the tokenizer is saved once, beside the (query) encoder
        transformer = Transformer(str(directory), max_seq_length=max_length,
                                  tokenizer_name_or_path=str(path))
        mode = {name: mode for mode, name in POOLING_MODES.items()}[encoder.model.pooling]
        modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=mode)]
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
    prompts = {'query': encoder.prompts['query'], 'document': encoder.prompts['passage']}
    SentenceTransformer(modules=modules, device='cpu', prompts=prompts).save(str(path))
    if isinstance(modules[0], Router):  # (the towers' weights once on disk, not twice)
        for tower_dir, weights_dir in (('query_0_Transformer', path),
                                       ('document_0_Transformer', passages)):
            for name in ('model.safetensors', 'pytorch_model.bin'):
                _linked_if_equal(path / tower_dir / name, weights_dir / name)
    return path


# sentence-transformers' pooling modes and the package's names for them
POOLING_MODES = {'cls': 'cls', 'mean': 'mean', 'lasttoken': 'last'}


# the prompt names encode_document tries, in its order
DOCUMENT_PROMPTS = ('document', 'passage', 'corpus')


class UnreproducibleModel(ValueError):
    """A sentence-transformers model whose modules a DualEncoder does not reproduce."""


def is_sentence_transformer(name_or_path: str) -> bool:
    """Whether ``name_or_path`` (a directory or a hub name in the local cache) is a
    sentence-transformers model (it has ``modules.json``)."""
    return read_saved_config(name_or_path, 'modules.json') is not None


def side_prompts(prompts: dict[str, str], default_prompt_name: str | None) -> dict[str, str]:
    """The prompt each side's texts begin with, as sentence-transformers' ``encode_query`` and
    ``encode_document`` choose them: ``query`` for queries; the first of ``document``,
    ``passage`` and ``corpus`` for passages; else the default prompt; else none. (Since
    sentence-transformers 6 a model has ``query`` and ``document`` prompts, empty where it
    declares none, so a prompt named ``passage`` alone is not what ``encode_document`` reads.)"""
    default = (prompts.get(default_prompt_name) if default_prompt_name else None) or ''
    # (a name present with an empty prompt is chosen, and the side reads no prompt: as there)
    passage = next((prompts[n] or '' for n in DOCUMENT_PROMPTS if n in prompts), default)
    return {'query': (prompts['query'] or '') if 'query' in prompts else default,
            'passage': passage}


def model_card_prompts(name: str) -> dict[str, str] | None:
    """The prompts the model card of ``name``'s family prescribes
    (:data:`~pyterrier_selfsup.models.names.MODEL_CARD_PROMPTS`), by hub name; None for a name
    of no such family, a local path among them.

        model_card_prompts('intfloat/e5-small-v2')   # {'query': 'query: ', 'passage': 'passage: '}
    """
    name = str(name).lower()
    if name.endswith('-instruct'):
        return None
    for patterns, prompts in MODEL_CARD_PROMPTS:
        if any(fnmatch.fnmatchcase(name, pattern.lower()) for pattern in patterns):
            return dict(prompts)
    return None


def read_sentence_transformer(name_or_path: str) -> dict:
    """A sentence-transformers model as sentence-transformers loads it: its transformer and
    tokenizer, pooling (``cls``, ``mean`` or ``last``), normalisation, each side's max length,
    and each side's prompt (:func:`side_prompts`). A model whose modules the package cannot
    reproduce (a Dense layer, combined poolings, pooling that leaves the prompt out) is refused
    with what it has.

        read_sentence_transformer('intfloat/e5-small-v2')['prompts']   # where it declares them
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    model = SentenceTransformer(str(name_or_path), device='cpu')
    modules = list(model)
    kinds = [type(m).__name__ for m in modules]
    if (len(modules) not in (2, 3) or not isinstance(modules[0], Transformer)
            or not isinstance(modules[1], Pooling)
            or (len(modules) == 3 and not isinstance(modules[2], Normalize))):
        raise UnreproducibleModel(f'{name_or_path}: its modules ({", ".join(kinds)}) are not '
                                  'a Transformer, a Pooling and an optional Normalize, which is '
                                  'what a DualEncoder reproduces')
    pooling = modules[1]
    if pooling.pooling_mode not in POOLING_MODES:
        raise UnreproducibleModel(f'{name_or_path}: sentence-transformers pooling '
                                  f'{pooling.pooling_mode!r} is not one of '
                                  f'{", ".join(POOLING_MODES)}')
    if not pooling.include_prompt:
        raise UnreproducibleModel(f'{name_or_path}: its pooling leaves the prompt\'s tokens '
                                  'out (include_prompt=False), which a DualEncoder does not '
                                  'reproduce')
    transformer = modules[0]
    max_length = transformer.max_seq_length or 512
    return {'encoder': transformer.auto_model, 'tokenizer': transformer.tokenizer,
            'pooling': POOLING_MODES[pooling.pooling_mode], 'normalize': len(modules) == 3,
            # (sentence-transformers 6 may give each side a length of its own)
            'max_length': getattr(transformer, 'document_length', None) or max_length,
            'query_max_length': getattr(transformer, 'query_length', None) or max_length,
            'prompts': side_prompts(dict(model.prompts), model.default_prompt_name)}


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
