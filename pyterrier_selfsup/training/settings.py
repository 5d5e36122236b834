"""Each training method's settings: one frozen dataclass per method, the one place they are written.

A field carries its default and its help text. A trainer takes its settings object whole
(``Distillation(encoder, collection, teacher, DistillationSettings(rounds=3))``), and the
command line, ``selfsup list``, the settings reference (``docs/settings.md``) and the cache key
of a trained model all read names, defaults and help from the same fields. Where one setting
depends on another, the dependency is a documented property of the class (for example
:attr:`DistillationSettings.excludes_sources`), never a rewrite made elsewhere.

Changing a setting gives a new object::

    settings = DistillationSettings(rounds=3)
    settings.replace(lr=2e-5)         # a copy with lr changed; unknown names are refused
    DistillationSettings.parse('lr', '2e-5')   # a value typed from the command line

Each field says whether it enters a model's cache key (its ``key`` metadata):

- ``'yes'``: always;
- ``'changed'``: only where it differs from the value that trains as the models cached before
  the setting existed (its ``was`` metadata: the default, unless the default has changed since),
  so that those models are still found and none is taken for another's;
- ``'no'``: never: it does not change the weights (how often checkpoints are saved).

A field whose default depends on other settings is declared with the default None and takes
its value when the object is made (:meth:`MethodSettings.chosen_defaults`): distillation trains
one round with a frozen passage side on queries from the corpus, and five rounds with passage
offsets on a query log. The object, the cache key and the logs hold the value chosen, so a
model trained with the default is the model trained with that value named.
"""
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Optional, Tuple, Type, Union

from pyterrier_selfsup.models.names import MAX_PASSAGE_LENGTH, MINILM

# What a pipeline's ``queries`` may name besides a file of query texts or a collection's topics.
GENERATED = ('generated', 'roundtrip', 'sampled')  # written by a generator for a passage
CUT_FROM_CORPUS = ('sentences', 'spans', 'masked', 'titles')  # cut from the passage they name
QUERY_SOURCES = CUT_FROM_CORPUS + ('crossfold',) + GENERATED

# The groups a settings reference lists fields under, in this order.
GROUPS = ('queries', 'model', 'teacher', 'method', 'training', 'checkpoints')


def setting(default: Any, help: str, *, group: str = 'method', key: str = 'yes',
            choices: Optional[Tuple] = None, was: Any = dataclasses.MISSING):
    """A settings field: its default, its help text (one sentence or two), the group the
    settings reference lists it under (:data:`GROUPS`), whether it enters a model's cache key
    (``'yes'``, ``'changed'`` or ``'no'``: see the module's docstring) and, for a field that
    takes one of a few values, those values. ``was`` (with ``key='changed'``): the value that
    trains as models cached before the field existed, where the default has moved from it."""
    assert group in GROUPS and key in ('yes', 'changed', 'no'), (group, key)
    return field(default=default,
                 metadata={'help': help, 'group': group, 'key': key, 'choices': choices,
                           'was': default if was is dataclasses.MISSING else was})


@dataclass(frozen=True)
class MethodSettings:
    """The settings of one training method; each method has a subclass.

    Class attributes a subclass may set:

    - ``aliases``: old names of fields, still accepted (``{'epochs': 'rounds'}``);
    - ``removed``: settings removed from the package, with the value that did what the package
      does now: a pipeline that names one at that value (a results file's name) is accepted;
    - ``retired``: the removed settings that the cache key keeps at that value, so that the
      models trained before their removal are still found;
    - ``former``: the types of the names that are no longer fields (removed, or replaced by
      other fields, which :meth:`canonical` turns them into), for :meth:`parse`.
    """
    aliases: ClassVar[Dict[str, str]] = {'checkpointing': 'gradient_checkpointing'}
    removed: ClassVar[Dict[str, Any]] = {}
    retired: ClassVar[Tuple[str, ...]] = ()
    former: ClassVar[Dict[str, Any]] = {}

    seed: int = setting(0, 'Seeds the model\'s initialisation, the batches and the query sampling.',
                        group='training')
    warmup: float = setting(0.1, 'The share of the steps over which the learning rate rises '
                                 'linearly to lr; it then decays linearly to zero.',
                            group='training', key='changed')
    weight_decay: float = setting(0.01, 'AdamW\'s weight decay.', group='training', key='changed')
    accumulation: int = setting(1, 'Batches whose gradients are summed into one optimiser step.',
                                group='training', key='changed')
    gradient_checkpointing: Optional[bool] = setting(
        None, 'Recompute each layer\'s activations in the backward pass, holding only its input: '
              'less memory for a second forward pass, the same weights. None: the method\'s '
              'default (on where a step encodes passages with gradients).',
        group='checkpoints', key='no')

    def __post_init__(self):
        chosen = {name: value for name, value in self.chosen_defaults().items()
                  if getattr(self, name) is None}
        for name, value in chosen.items():  # (frozen: set once, here)
            object.__setattr__(self, name, value)
        object.__setattr__(self, '_chosen', frozenset(chosen))
        for f in dataclasses.fields(self):
            choices = f.metadata.get('choices')
            if choices and getattr(self, f.name) not in choices:
                raise ValueError(f'{f.name} must be one of {", ".join(map(str, choices))}, '
                                 f'not {getattr(self, f.name)!r}')
        self.validate()

    def chosen_defaults(self) -> Dict[str, Any]:
        """The fields whose default depends on other settings (declared with the default None),
        each with the value it takes here where it is left at None. None in the base class; a
        subclass documents its rule."""
        return {}

    def validate(self):
        """Refuses values that cannot train (a subclass adds its own rules)."""
        for name in ('batch_size', 'accumulation', 'epochs', 'per_passage'):
            if getattr(self, name, 1) < 1:
                raise ValueError(f'{name} must be at least 1, not {getattr(self, name)}')
        if not 0.0 <= self.warmup <= 1.0:
            raise ValueError(f'warmup is a share of the steps, in [0, 1], not {self.warmup}')
        every = getattr(self, 'checkpoint_every', None)
        if not (every is None or every == 'epoch'
                or (isinstance(every, int) and not isinstance(every, bool) and every > 0)):
            raise ValueError(f'checkpoint_every is a number of steps, epoch or None, not {every!r}')

    @property
    def checkpoint_interval(self) -> Union[int, str, None]:
        """When this run saves checkpoints: every this many steps, ``'epoch'`` (at each epoch's
        end) or None (the final model only). A method with a rule of its own says so."""
        return getattr(self, 'checkpoint_every', None)

    # -- reading the fields ---------------------------------------------------------

    @classmethod
    def fields(cls) -> List[dataclasses.Field]:
        """The fields, grouped as :data:`GROUPS` orders them (in declaration order within a
        group)."""
        declared = dataclasses.fields(cls)
        return sorted(declared, key=lambda f: GROUPS.index(f.metadata['group']))

    @classmethod
    def help(cls, name: str) -> str:
        return ({f.name: f for f in dataclasses.fields(cls)}[cls.aliases.get(name, name)]
                .metadata['help'])

    @classmethod
    def defaults(cls) -> dict:
        """Every setting at its default, in :meth:`fields` order."""
        return {f.name: f.default for f in cls.fields()}

    def asdict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in self.fields()}

    # -- changing them --------------------------------------------------------------

    @classmethod
    def names(cls) -> List[str]:
        return [f.name for f in cls.fields()]

    @classmethod
    def canonical(cls, changes: Dict[str, Any], current: Optional['MethodSettings'] = None
                  ) -> Dict[str, Any]:
        """``changes`` (to ``current``, or to the defaults) with old names (:attr:`aliases`)
        under their current ones; a removed setting (:attr:`removed`) is accepted at the value
        every model had before its removal, and dropped; a name the class does not know is
        refused, with the names it does."""
        out = {}
        for name, value in changes.items():
            name = cls.aliases.get(name, name)
            if name in cls.removed:
                if value != cls.removed[name]:
                    raise ValueError(f'{name} has been removed from {cls.__name__}; only '
                                     f'{name}={cls.removed[name]} (what it did) is accepted, and '
                                     f'CHANGELOG.md says why')
                continue
            if name not in cls.names():
                raise ValueError(f'{cls.__name__} has no setting {name!r}; its settings: '
                                 f'{", ".join(cls.names())}')
            out[name] = value
        return out

    @classmethod
    def of(cls, **changes) -> 'MethodSettings':
        """The defaults with ``changes`` (old names accepted)."""
        return cls(**cls.canonical(changes))

    def replace(self, **changes) -> 'MethodSettings':
        """A copy with ``changes`` (old names accepted), validated again. A field that took its
        value from :meth:`chosen_defaults` chooses it again, from the changed settings (which
        ``dataclasses.replace`` would not do: use this)."""
        if not changes:
            return self
        changes = self.canonical(changes, self)
        again = {name: None for name in self._chosen if name not in changes}
        return dataclasses.replace(self, **again, **changes)

    @classmethod
    def parse(cls, name: str, text: str) -> Any:
        """``text`` (as typed on the command line) as a value of setting ``name``, by its type:
        ``none`` for None, ``true``/``false`` for a flag, a number, or the text itself."""
        name = cls.aliases.get(name, name)
        hints = {**cls.former, **typing.get_type_hints(cls)}
        if name not in hints:
            raise ValueError(f'{cls.__name__} has no setting {name!r}; its settings: '
                             f'{", ".join(cls.names())}')
        return parse_value(text, hints[name])

    # -- the cache key --------------------------------------------------------------

    def key(self) -> dict:
        """What a trained model's cache key covers: the fields whose ``key`` metadata puts them
        in it, and each retired setting at its last value."""
        out = {name: self.removed[name] for name in self.retired}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if (f.metadata['key'] == 'yes' or
                    (f.metadata['key'] == 'changed' and value != f.metadata['was'])):
                out[f.name] = value
        return out


def parse_value(text: str, kind) -> Any:
    """``text`` as a value of type ``kind`` (a type hint: Optional, Union, bool, int, float,
    str)."""
    options = typing.get_args(kind) if typing.get_origin(kind) is Union else (kind,)
    if text.lower() == 'none' and type(None) in options:
        return None
    for option in options:
        if option is bool:
            if text.lower() in ('1', 'true', 'yes', 'on', '0', 'false', 'no', 'off'):
                return text.lower() in ('1', 'true', 'yes', 'on')
        elif option in (int, float):
            try:
                return option(text)
            except ValueError:
                continue
        elif option is str:
            return text
    kinds = [getattr(o, '__name__', str(o)) for o in options if o is not type(None)]
    raise ValueError(f'{text!r} is not a {" or ".join(kinds)}')


@dataclass(frozen=True)
class TrainingSettings(MethodSettings):
    """The training loop's settings alone: for a :class:`~pyterrier_selfsup.training.Trainer`
    subclass that has no settings class of its own."""
    epochs: int = setting(1, 'Passes over the training examples.', group='training')
    batch_size: int = setting(32, 'Examples a batch.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: Union[int, str, None] = setting(
        None, 'Steps between saved checkpoints (epoch: at each epoch\'s end; None: only the final '
              'model).', group='checkpoints', key='no')


QUERIES_HELP = ('Where the training queries come from: corpus sentences, spans, masked sentences '
                'or titles, queries written by the generator (generated, sampled, roundtrip), a '
                'file of query texts, a collection whose topic texts are read (never its qrels), '
                'or crossfold (the evaluated collection\'s own topic texts, one model a fold).')
N_QUERIES_HELP = 'How many training queries: a longer query log is sampled down to this many.'


# ds's steps between checkpoints, and RUMBArt's and ACROBArT's without refreshes
def checkpoints_at_the_end_of(what: str):
    """The ``checkpoint_every`` setting of a method whose run resumes exactly at the end of each
    ``what`` (a round, an iteration): ``'epoch'`` by default."""
    return setting('epoch', f'When checkpoints are saved: epoch (at each {what}\'s end, where a '
                            f'resumed run matches one never stopped), a number of steps, or None.',
                   group='checkpoints', key='no')


_STEPS_CHECKPOINT = 25


@dataclass(frozen=True)
class DistantSupervisionSettings(MethodSettings):
    """Distant supervision (thesis §4.2.3): each training query's positive is BM25's top-1
    passage."""
    queries: str = setting('sentences', QUERIES_HELP, group='queries')
    n_queries: int = setting(5000, N_QUERIES_HELP, group='queries')
    model_name: str = setting(MINILM, 'The encoder that starts training (a Hugging Face name or a '
                                      'path).', group='model')
    dim: Optional[int] = setting(None, 'The dimension of the query and passage projections; None: '
                                       'no projection, the encoder\'s pooled output.',
                                 group='model')
    negatives: str = setting('none', 'One extra hard negative a query, shared by the batch: none, '
                                     'random, from BM25\'s ranks 2 to bm25_depth + 1, or the '
                                     'retriever\'s own top.',
                             choices=('none', 'random', 'bm25', 'retriever'))
    bm25_depth: int = setting(30, 'How deep BM25 ranks each query for its positive and its '
                                  'negatives.', key='changed')
    epochs: int = setting(1, 'Passes over the training queries.', group='training')
    batch_size: int = setting(32, 'Queries a batch; the other queries\' positives are in-batch '
                                  'negatives.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: Union[int, str, None] = setting(
        _STEPS_CHECKPOINT, 'Steps between saved checkpoints (epoch: at each epoch\'s end; None: '
                           'only the final model).', group='checkpoints', key='no')


@dataclass(frozen=True)
class ReconstructionSettings(MethodSettings):
    """What RUMBArt and ACROBArT share: a stale index refreshed every ``refresh_every`` steps,
    its top ``k`` scored by the generator."""
    queries: str = setting('sentences', QUERIES_HELP, group='queries')
    n_queries: int = setting(5000, N_QUERIES_HELP, group='queries')
    start: str = setting('minilm', 'What training starts from: minilm (all-MiniLM-L6-v2), ds (the '
                                   'ds pipeline\'s model on the same queries, trained first) or a '
                                   'path.', group='model')
    generator: str = setting('smollm2', 'The generator whose reconstruction teaches the retriever.',
                             group='teacher')
    max_passage_length: int = setting(MAX_PASSAGE_LENGTH, 'Generator tokens a passage is cut to.',
                                      group='teacher')
    k: int = setting(5, 'Passages retrieved a query and scored by the generator.')
    refresh_every: Optional[int] = setting(25, 'Optimiser steps between rebuilds of the stale '
                                               'index (None: never).')
    refresh: str = setting(
        'sync', 'sync: training waits while the index is rebuilt, and a resumed run matches one '
                'never stopped; async: a thread rebuilds it from a copy of the weights while '
                'training goes on, and the new index is swapped in when ready (REALM), so runs '
                'depend on timing.', key='changed', choices=('sync', 'async'))
    null_document: bool = setting(False, 'Add the empty passage to every query\'s candidates '
                                         '(REALM).')
    train_passages: bool = setting(
        True, 'Train the passage tower too; false: only the query tower trains, against a frozen '
              'copy of the start encoder (RAG).')
    epochs: int = setting(1, 'Passes over the training queries.', group='training')
    batch_size: int = setting(16, 'Queries a batch.', group='training')
    accumulation: int = setting(1, 'Batches whose gradients are summed into one optimiser step.',
                                group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: Union[int, str, None] = setting(
        None, 'Steps between saved checkpoints. None: at each refresh (where a resumed run matches '
              'one never stopped), or every 25 steps where the index never changes.',
        group='checkpoints', key='no')

    @property
    def start_settings(self) -> Dict[str, Any]:
        """With ``start='ds'``: the settings of the distant-supervision model that training starts
        from, trained on the same queries with the same seed."""
        return {name: getattr(self, name) for name in ('queries', 'n_queries', 'seed')}

    @property
    def checkpoint_interval(self) -> Union[int, str, None]:
        """The steps between checkpoints this run saves (``checkpoint_every``, or its rule)."""
        if self.checkpoint_every is not None:
            return self.checkpoint_every
        return self.refresh_every or (None if self.train_passages else _STEPS_CHECKPOINT)


@dataclass(frozen=True)
class RumbartSettings(ReconstructionSettings):
    """RUMBArt (thesis §4.3.1): towards the posterior ∝ p_η(z|x)·p_θ(x|z) over the top k."""
    teacher_temperature: float = setting(
        1.0, 'The generator\'s log-likelihoods are divided by this.', group='teacher')
    target: str = setting(
        'marginal', 'What the retriever trains towards: marginal, the thesis\' marginal '
        'likelihood of the query over the top k, whose target carries the retriever\'s own '
        'prior; or art, ART\'s KL divergence from the generator\'s distribution over the top k '
        '(a uniform prior) to the retriever\'s.', group='teacher', key='changed',
        choices=('marginal', 'art'))


@dataclass(frozen=True)
class AcrobartSettings(ReconstructionSettings):
    """ACROBArT (thesis §4.3.2): β·p_η(z_j|x) added to the generator's attention towards
    passage j."""
    beta: float = setting(1.0, 'The starting weight of the retriever\'s probabilities in the '
                               'generator\'s attention logits (trained).')


# all-MiniLM-L6-v2's zero-shot retrieval head: the (layer, head, special tokens) whose r_h
# re-ranks BM25's top 100 best on beir/scifact/train (experiments/probes/reatt_heads.py; layers
# counted from 0, as ReAtt's retrieval_layer: the attention of the second layer)
REATT_HEAD = dict(retrieval_layer=1, head=1, special_tokens=False)


@dataclass(frozen=True)
class CrossDocumentAdjustmentSettings(MethodSettings):
    """ReAtt's cross-document adjustment (ReAtt §3): an attention head adjusted towards the
    generator's view of each query's close documents."""
    queries: str = setting('sentences', QUERIES_HELP, group='queries')
    n_queries: int = setting(5000, N_QUERIES_HELP, group='queries')
    model_name: str = setting(MINILM, 'The transformer whose attention head retrieves.',
                              group='model')
    retrieval_layer: int = setting(
        REATT_HEAD['retrieval_layer'], 'The layer (from 0) whose attention retrieves.',
        group='model')
    head: int = setting(REATT_HEAD['head'], 'The attention head that retrieves.', group='model')
    special_tokens: bool = setting(
        REATT_HEAD['special_tokens'], 'Whether [CLS] and [SEP] take part in the retrieval score.',
        group='model')
    generator: str = setting('smollm2', 'The generator that judges the close documents.',
                             group='teacher')
    target: str = setting('likelihood', 'The target distribution: the generator\'s per-document '
                                        'likelihood, or its attention to each document.',
                          group='teacher', choices=('likelihood', 'attention'))
    teacher_temperature: float = setting(
        1.0, 'The generator\'s log-likelihoods are divided by this.', group='teacher')
    k: int = setting(8, 'Close documents a query: BM25\'s, then the model\'s own each iteration.')
    alpha: float = setting(1.0, 'The weight of the adjustment\'s KL term.')
    epochs: int = setting(2, 'Iterations: each re-retrieves the close documents with the model as '
                             'it is.', group='training')
    batch_size: int = setting(8, 'Queries a batch; the others\' close documents are its random '
                                 'ones.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: Union[int, str, None] = checkpoints_at_the_end_of('iteration')

    @property
    def retrieval_head(self) -> Dict[str, Any]:
        """Which attention head retrieves: the keywords of ``ReAtt.from_pretrained``."""
        return {name: getattr(self, name) for name in REATT_HEAD}


@dataclass(frozen=True)
class DistillationSettings(MethodSettings):
    """Distillation of a fused teacher (BM25 and the student itself) into the student, in rounds."""
    aliases: ClassVar[Dict[str, str]] = {**MethodSettings.aliases, 'epochs': 'rounds'}
    removed: ClassVar[Dict[str, Any]] = {'stop_overlap': None, 'min_round_steps': 0,
                                         'source_share': 0.0, 'passage_layers': None}
    # (source_share and passage_layers were left out of the key at these values all along)
    retired: ClassVar[Tuple[str, ...]] = ('stop_overlap', 'min_round_steps')
    former: ClassVar[Dict[str, Any]] = {
        'train_passages': bool, 'passage_offsets': Optional[float], 'stop_overlap': Optional[float],
        'min_round_steps': int, 'source_share': float, 'passage_layers': Optional[int]}

    queries: str = setting('sampled', QUERIES_HELP, group='queries')
    n_queries: int = setting(2000, N_QUERIES_HELP, group='queries')
    generator: str = setting('smollm2', 'The generator that writes queries (smollm2 or qwen).',
                             group='queries')
    query_style: str = setting('plain', 'The writer\'s prompt: plain or chat.', group='queries',
                               choices=('plain', 'chat'))
    query_examples: Optional[str] = setting(
        None, 'A query log (a file or a collection) whose texts the writer is shown as the style '
              'to write in.', group='queries')
    example_pairs: Optional[str] = setting(
        None, 'A collection whose judged pairs the writer is shown: 3 of its topics, each after '
              'the text of a passage judged relevant to it (its qrels are read: name another '
              'collection than the one the model adapts to).', group='queries', key='changed')
    per_passage: int = setting(3, 'Queries the writer writes for each passage it draws '
                                  '(n_queries / per_passage passages are drawn).',
                               group='queries', key='changed')
    model_name: str = setting(MINILM, 'The student that starts training.', group='model')
    precision: str = setting('fp32', 'The student\'s precision while it trains: fp32, bf16 or '
                                     'auto.', group='model', choices=('fp32', 'bf16', 'auto'))
    teacher: str = setting('bm25+student', 'The teacher\'s parts and weights: bm25, student, '
                                           'minilm, gen, joined by +, each with an optional weight '
                                           '(2*bm25).', group='teacher')
    fusion_depth: int = setting(100, 'How deep each part of the teacher ranks before fusion.',
                                group='teacher')
    depth: int = setting(30, 'The teacher\'s top this many are each query\'s candidates.',
                         group='teacher')
    teacher_temperature: float = setting(
        1.0, 'The teacher\'s distribution is softmax(score / this).', group='teacher')
    loss: str = setting('kl', 'kl: listwise KL from the teacher; margin_mse: GPL\'s Margin-MSE '
                              'over every pair of a query\'s candidates.',
                        choices=('kl', 'margin_mse'))
    in_batch: bool = setting(True, 'With kl, the student\'s softmax also spans the other queries\' '
                                   'candidates in the batch (in-batch negatives).')
    passages: Optional[str] = setting(
        None, 'How the passage side trains: frozen (the query tower trains against the start '
              'encoder\'s passage vectors), offsets (each candidate passage\'s vector also moves '
              'by a learned offset) or trained (both towers train; each round searches a freshly '
              'built index). None: frozen with queries from the corpus (written or cut), offsets '
              'with a query log.', choices=('frozen', 'offsets', 'trained'))
    offset_weight: float = setting(1.0, 'With passages=offsets, the weight of the L2 term that '
                                        'pulls each offset towards zero.')
    offset_lr: float = setting(1e-3, 'The learning rate of the passage offsets\' Adam.')
    filter_depth: Optional[int] = setting(
        None, 'Round-trip filtering: keep a query written for a passage only if the start teacher '
              'ranks that passage in its top this many (None: keep all; queries cut from the '
              'corpus are never filtered).')
    verdict_share: float = setting(0.1, 'The share of the training queries held out for the '
                                        'label-free verdict (0: none; the last round is kept).')
    keep: str = setting('last', 'Which round ships: last (the last round, with the held-out '
                                'signal measured and reported beside it) or verdict (the best '
                                'round by the held-out signal, which is not known to predict '
                                'the real change).', key='changed', choices=('last', 'verdict'),
                        was='verdict')
    rounds: Optional[int] = setting(
        None, 'Rounds of self-training: each passes over the queries once, the teacher re-ranking '
              'with the student as it is. None: 1 with queries from the corpus (written or cut), '
              '5 with a query log.', group='training')
    batch_size: int = setting(32, 'Queries a batch.', group='training')
    lr: float = setting(5e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: Union[int, str, None] = checkpoints_at_the_end_of('round')

    @property
    def epochs(self) -> int:
        """The rounds, as the training loop counts them."""
        return self.rounds

    def chosen_defaults(self) -> Dict[str, Any]:
        """``passages`` and ``rounds`` left at None follow the queries. With queries from the
        corpus (written for a passage or cut from one): one round, the passage side frozen.
        With a query log (a file, a collection's topic texts, crossfold): five rounds with
        passage offsets. Offsets were chosen with real query texts and lower nDCG@10 with
        written ones on three of four collections; a single round without them is the rule
        chosen on scifact's train split (CHANGELOG.md)."""
        corpus_only = self.queries in CUT_FROM_CORPUS + GENERATED
        return {'passages': 'frozen' if corpus_only else 'offsets',
                'rounds': 1 if corpus_only else 5}

    @property
    def excludes_sources(self) -> bool:
        """Whether a query's ``source_docno`` is a passage it may not retrieve: yes for queries cut
        from a passage (a trivial match, as REALM prohibits), no for queries written for one (a
        genuine answer) or for a query log."""
        return self.queries in CUT_FROM_CORPUS

    @property
    def round_trip_depth(self) -> Optional[int]:
        """``filter_depth`` where the queries were written for a passage; None for other queries,
        which the round-trip filter keeps whole."""
        return self.filter_depth if self.queries in GENERATED else None

    @classmethod
    def canonical(cls, changes: Dict[str, Any], current: Optional['MethodSettings'] = None
                  ) -> Dict[str, Any]:
        """As :meth:`MethodSettings.canonical`, and the passage side's two old settings under
        ``passages``, as they combined before: ``train_passages=True`` is ``passages='trained'``
        (not with a ``passage_offsets`` weight); ``passage_offsets=W`` is
        ``passages='offsets', offset_weight=W``; ``passage_offsets=None`` turns offsets off,
        leaving a passage tower that trains as it is (``frozen`` otherwise)."""
        changes = dict(changes)
        old = {name: changes.pop(name) for name in ('train_passages', 'passage_offsets')
               if name in changes}
        if old:
            if 'passages' in changes:
                raise ValueError('name the passage side once: passages=frozen|offsets|trained, '
                                 'or its old spelling (train_passages, passage_offsets), not both')
            # (the side that the other changes leave or choose)
            base = current.replace(**changes) if current is not None else cls.of(**changes)
            now = base.passages
            trained = old.get('train_passages', now == 'trained')
            weight = old.get('passage_offsets', None if now != 'offsets' else base.offset_weight)
            if trained and weight is not None:
                raise ValueError('passage offsets move the vectors of a frozen passage tower: '
                                 'not with train_passages (passage_offsets=none)')
            changes['passages'] = 'trained' if trained else 'offsets' if weight is not None \
                else 'frozen'
            if weight is not None:
                changes['offset_weight'] = weight
        return super().canonical(changes, current)

    def key(self) -> dict:
        """As :meth:`MethodSettings.key`, with the passage side spelt by the two settings that
        named it before ``passages`` (``train_passages`` and ``passage_offsets``), so that the
        models trained before are still found."""
        out = super().key()
        passages, weight = out.pop('passages'), out.pop('offset_weight')
        out['train_passages'] = passages == 'trained'
        out['passage_offsets'] = weight if passages == 'offsets' else None
        return out


SETTINGS: Dict[str, Type[MethodSettings]] = {
    'distill': DistillationSettings,
    'ds': DistantSupervisionSettings,
    'rumbart': RumbartSettings,
    'acrobart': AcrobartSettings,
    'reatt': CrossDocumentAdjustmentSettings,
}


def parse_teacher(spec: str) -> Dict[str, float]:
    """A teacher named by its parts and their weights: ``bm25+student`` (1:1),
    ``2*bm25+student``, ``bm25+student+gen``. The parts are :data:`TEACHER_PARTS`."""
    weights = {}
    for term in spec.split('+'):
        weight, _, part = term.strip().rpartition('*')
        if part not in TEACHER_PARTS or part in weights:
            raise ValueError(f'teacher {spec!r}: {part!r} is not one of {", ".join(TEACHER_PARTS)} '
                             f'(or is named twice); e.g. bm25+student or 2*bm25+student+gen')
        weights[part] = float(weight) if weight else 1.0
    return weights


# bm25: BM25; student: the student as it is at each round; minilm: the start model, frozen;
# gen: the generator's query likelihood on the fused top ``rerank_depth`` (its scores cached)
TEACHER_PARTS = ('bm25', 'student', 'minilm', 'gen')
