"""The dual encoder's model (the thesis' §4.2.1) as a sentence-transformers model, built from the
library's modules, so that ``SentenceTransformer(dir)`` loads what the package saves:

- tied, without projections: ``[Transformer, Pooling, Normalize]``;
- tied, with ``W_Q`` and ``W_P``: ``[Transformer, Pooling, Router(query=[Dense],
  document=[Dense]), Normalize]``, each ``Dense`` without bias or activation;
- untied: ``[Router(query=[Transformer, Pooling, Dense], document=[Transformer, Pooling,
  Dense]), Normalize]``.

``Normalize`` is there where the model normalises, and a ``Dense`` where it projects.

    model = DualEncoderModel.start(MINILM, dim=128)
    model.embed(input_ids, attention_mask, 'query')   # (batch, 128), with gradients
"""
import copy
import fnmatch
import logging

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import (
    Dense,
    Normalize,
    Pooling,
    Router,
    Transformer,
)

from pyterrier_selfsup.models.hub import read_saved_config
from pyterrier_selfsup.models.names import MODEL_CARD_PROMPTS

logger = logging.getLogger(__name__)

# the package's names for the library's pooling modes
POOLING_MODES = {'cls': 'cls', 'mean': 'mean', 'last': 'lasttoken'}
NO_PROMPTS = {'query': '', 'passage': ''}
SIDES = {'query': 'queries', 'passage': 'passages'}
TASKS = {'query': 'query', 'passage': 'document'}  # (the library's name for each side)
# the prompt names encode_document tries, in its order
DOCUMENT_PROMPTS = ('document', 'passage', 'corpus')


class UnreproducibleModel(ValueError):
    """A sentence-transformers model whose modules a DualEncoder does not run."""


class DualEncoderModel(SentenceTransformer):
    """A sentence-transformers model in one of the layouts above. Build one with :meth:`start`,
    or load one that the package saved with ``DualEncoderModel(path)``."""

    @classmethod
    def start(cls, name_or_path: str, *, pooling: str | None = None, dim: int | None = None,
              normalize: bool | None = None, device: str = 'cpu') -> 'DualEncoderModel':
        """The model to start from: a sentence-transformers model with its own modules (unless
        ``pooling`` or ``normalize`` is given), or any other encoder with ``cls`` pooling and no
        normalisation; with projections to ``dim`` where it is given, both the same orthogonal map,
        so that the start model ranks as its pooled encoder does."""
        if pooling is not None and pooling not in POOLING_MODES:
            raise ValueError(f'pooling must be one of {tuple(POOLING_MODES)}, not {pooling!r}')
        if is_sentence_transformer(name_or_path):
            library = SentenceTransformer(str(name_or_path), device=device)
            modules, prompts = _runnable(library, name_or_path), library_prompts(library)
        else:
            transformer = Transformer(str(name_or_path))
            modules = [transformer, Pooling(transformer.get_embedding_dimension(), 'cls')]
            prompts = {}
        pooling_module = modules[1]
        if pooling is not None and POOLING_MODES[pooling] != pooling_module.pooling_mode:
            modules[1] = Pooling(pooling_module.embedding_dimension, POOLING_MODES[pooling])
        normalised = isinstance(modules[-1], Normalize)
        if normalize is not None and normalize != normalised:
            modules = modules[:-1] if normalised else modules + [Normalize()]
        if dim is not None:
            hidden = modules[0].get_embedding_dimension()
            query, passage = (torch.nn.Linear(hidden, dim, bias=False) for _ in range(2))
            torch.nn.init.orthogonal_(query.weight)
            dense = [Dense(hidden, dim, bias=False, activation_function=torch.nn.Identity(),
                           init_weight=query.weight.detach().clone()) for _ in range(2)]
            modules.insert(2, Router.for_query_document(query_modules=[dense[0]],
                                                        document_modules=[dense[1]]))
        return cls(modules=modules, device=device,
                   prompts={TASKS[side]: text for side, text in prompts.items()})

    # -- the layout -----------------------------------------------------------------------

    @property
    def tied(self) -> bool:
        return not isinstance(self[0], Router)

    def route(self, side: str) -> list[torch.nn.Module]:
        """The modules a text of ``side`` (``'query'`` or ``'passage'``) goes through."""
        modules = []
        for module in self:
            modules += (list(module.sub_modules[TASKS[side]]) if isinstance(module, Router)
                        else [module])
        return modules

    def transformers(self) -> list[Transformer]:
        """The Transformer modules: one, or the query's and the passage's."""
        return [m for m in self.modules() if isinstance(m, Transformer)]

    @property
    def pooling(self) -> str:
        mode = next(m for m in self.route('query') if isinstance(m, Pooling)).pooling_mode
        return {library: ours for ours, library in POOLING_MODES.items()}[mode]

    @property
    def normalize(self) -> bool:
        return isinstance(self[-1], Normalize)

    def projections(self) -> tuple[Dense, Dense] | None:
        """The query's and the passage's ``Dense`` projection, or None where it has none."""
        query, passage = ([m for m in self.route(side) if isinstance(m, Dense)]
                          for side in TASKS)
        return (query[0], passage[0]) if query else None

    def projection_weights(self) -> tuple[torch.nn.Parameter, torch.nn.Parameter]:
        """``W_Q`` and ``W_P``: the weights of :meth:`projections`."""
        return self.query_proj.weight, self.passage_proj.weight

    @property
    def encoder(self) -> torch.nn.Module:
        """The Hugging Face model that encodes queries (and, while tied, passages)."""
        return self.transformers()[0].auto_model

    @property
    def passage_encoder(self) -> torch.nn.Module | None:
        """The Hugging Face model of the passage tower; None while tied."""
        return None if self.tied else self.transformers()[1].auto_model

    @property
    def query_proj(self) -> torch.nn.Linear | None:
        return None if self.projections() is None else self.projections()[0].linear

    @property
    def passage_proj(self) -> torch.nn.Linear | None:
        return None if self.projections() is None else self.projections()[1].linear

    @property
    def dim(self) -> int | None:
        projections = self.projections()
        return None if projections is None else projections[0].out_features

    @property
    def out_dim(self) -> int:
        return self.dim or self.transformers()[0].get_embedding_dimension()

    # -- training -------------------------------------------------------------------------

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
              side: str) -> torch.Tensor:
        """The vectors of one side's batch of token ids, routed to ``side``."""
        features = {'input_ids': input_ids, 'attention_mask': attention_mask}
        return self(features, task=TASKS[side])['sentence_embedding']

    def untie(self) -> 'DualEncoderModel':
        """Gives passages their own copy of the encoder and pooling; the Transformer goes on
        encoding queries only, and the projections stay each side's."""
        if not self.tied:
            return self
        cut = next(i for i, m in enumerate(self) if isinstance(m, Pooling)) + 1
        tower, rest = list(self)[:cut], list(self)[cut:]
        query, passage = tower, [copy.deepcopy(m) for m in tower]
        if rest and isinstance(rest[0], Router):
            query = query + list(rest[0].sub_modules['query'])
            passage = passage + list(rest[0].sub_modules['document'])
            rest = rest[1:]
        modules = [Router.for_query_document(query_modules=query, document_modules=passage)]
        for key in list(self._modules):
            del self._modules[key]
        for i, module in enumerate(modules + rest):
            self.add_module(str(i), module)
        return self

    def freeze_passage_tower(self) -> 'DualEncoderModel':
        """Unties the encoder and freezes the passages' copy (RAG): only queries are encoded with
        gradients from here on."""
        self.untie()
        for p in self.passage_parameters():
            p.requires_grad_(False)
        return self

    def passage_parameters(self) -> list[torch.nn.Parameter]:
        """What only passages go through (empty while tied): the passage tower and projection."""
        if self.tied:
            return []
        return list(self[0].sub_modules['document'].parameters())

    def passage_state(self) -> dict[str, torch.Tensor]:
        """The weights passage vectors depend on, by their place in the passages' route (equal for
        a tied model and an untied one whose passage tower is a frozen copy of it)."""
        return {f'{i}.{name}': value for i, module in enumerate(self.route('passage'))
                for name, value in module.state_dict().items()}


def _runnable(library: SentenceTransformer, name) -> list[torch.nn.Module]:
    """``library``'s modules where the package runs them (a Transformer, then its pooling, the
    prompt's tokens pooled); else :class:`UnreproducibleModel`."""
    modules = list(library)
    kinds = ', '.join(type(m).__name__ for m in modules)
    if (len(modules) < 2 or not isinstance(modules[0], Transformer)
            or not isinstance(modules[1], Pooling)):
        raise UnreproducibleModel(f'{name}: its modules ({kinds}) do not begin with a '
                                  'Transformer and a Pooling, which is what a DualEncoder runs')
    if modules[1].pooling_mode not in POOLING_MODES.values():
        raise UnreproducibleModel(f'{name}: sentence-transformers pooling '
                                  f'{modules[1].pooling_mode!r} is not one of '
                                  f'{", ".join(POOLING_MODES.values())}')
    if not modules[1].include_prompt:
        raise UnreproducibleModel(f'{name}: its pooling leaves the prompt\'s tokens out '
                                  '(include_prompt=False), which a DualEncoder does not run')
    return modules


def is_sentence_transformer(name_or_path: str) -> bool:
    """Whether ``name_or_path`` (a directory or a hub name in the local cache) is a
    sentence-transformers model (it has ``modules.json``)."""
    return read_saved_config(name_or_path, 'modules.json') is not None


def library_prompts(model: SentenceTransformer) -> dict[str, str]:
    """The prompt each side's texts begin with, as sentence-transformers' ``encode_query`` and
    ``encode_document`` choose them."""
    prompts, name = dict(model.prompts), model.default_prompt_name
    default = (prompts.get(name) if name else None) or ''
    passage = next((prompts[n] or '' for n in DOCUMENT_PROMPTS if n in prompts), default)
    return {'query': (prompts['query'] or '') if 'query' in prompts else default,
            'passage': passage}


def side_lengths(model: DualEncoderModel) -> tuple[int | None, int | None]:
    """The passages' and the queries' max length, as the model's Transformer declares them."""
    transformer = model.transformers()[-1]
    length = transformer.document_length or transformer.max_seq_length
    return length, transformer.query_length or length


def model_card_prompts(name: str) -> dict[str, str] | None:
    """The prompts the model card of ``name``'s family prescribes
    (:data:`~pyterrier_selfsup.models.names.MODEL_CARD_PROMPTS`), by hub name; None otherwise.

        model_card_prompts('intfloat/e5-small-v2')   # {'query': 'query: ', 'passage': 'passage: '}
    """
    name = str(name).lower()
    if name.endswith('-instruct'):
        return None
    for patterns, prompts in MODEL_CARD_PROMPTS:
        if any(fnmatch.fnmatchcase(name, pattern.lower()) for pattern in patterns):
            return dict(prompts)
    return None


def resolve_prompts(name: str, declared: dict[str, str] | None,
                    given: dict[str, str] | None = None, *, saved: bool = False
                    ) -> dict[str, str]:
    """Each side's prompt for the model ``name``: a side in ``given`` wins; the others are
    ``declared`` (the model's own). A model the package saved keeps its own; any other that
    declares none takes its model card's (:func:`model_card_prompts`), and a log line says so.

        resolve_prompts('intfloat/e5-small-v2', None)   # {'query': 'query: ', ...}
    """
    given = dict(given or {})
    if 'document' in given:  # (sentence-transformers' name for the passage side)
        given.setdefault('passage', given.pop('document'))
    unknown = set(given) - set(NO_PROMPTS)
    if unknown:
        raise ValueError(f'prompts are given for the sides query and passage (or document), not '
                         f'{", ".join(sorted(unknown))}')
    own = dict(NO_PROMPTS, **(declared or {}))
    card = None if saved or any(own.values()) else model_card_prompts(name)
    if card is not None:
        left = {side: card[side] for side in NO_PROMPTS if side not in given}
        if left:
            logger.info('%s declares no prompts: its model card\'s apply (%s); give prompts '
                        '(query_prompt=, passage_prompt=) to change them', name,
                        ', '.join(f'{SIDES[side]} begin with {text!r}' if text
                                  else f'{SIDES[side]} with none' for side, text in left.items()))
        own = card
    return dict(own, **given)
