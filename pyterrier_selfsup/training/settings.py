"""Each training method's settings: one frozen dataclass per method, the one place they are written.

A field carries its default and its help text; how a class is declared and read is
:mod:`~pyterrier_selfsup.training.setting_fields`'s.
"""
from dataclasses import dataclass
from typing import Any

from pyterrier_selfsup.data.queries import CUT_FROM_CORPUS, GENERATED, GIVEN_LOG
from pyterrier_selfsup.models.names import (
    GPL_CROSS_ENCODER,
    GPL_MAX_LENGTH,
    GPL_MINERS,
    GPL_QUERY_TOKENS,
    GPL_WRITER,
    GPL_WRITER_TOP_K,
    MAX_PASSAGE_LENGTH,
    MINILM,
)
from pyterrier_selfsup.training.setting_fields import GROUPS, MethodSettings, parse_value, setting

__all__ = ['GROUPS', 'MethodSettings', 'parse_value', 'setting', 'TrainingSettings',
           'DistantSupervisionSettings', 'ReconstructionSettings', 'RumbartSettings',
           'AcrobartSettings', 'CrossDocumentAdjustmentSettings', 'DistillationSettings',
           'GPL', 'SETTINGS', 'encoder_options', 'prompts_of']


@dataclass(frozen=True)
class TrainingSettings(MethodSettings):
    """The training loop's settings alone: for a :class:`~pyterrier_selfsup.training.Trainer`
    subclass that has no settings class of its own."""
    epochs: int = setting(1, 'Passes over the training examples.', group='training')
    batch_size: int = setting(32, 'Examples a batch.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: int | str | None = setting(
        None, 'Steps between saved checkpoints (epoch: at each epoch\'s end; None: only the final '
              'model).', group='checkpoints', trains=False)


QUERIES_HELP = ('Where the training queries come from: corpus sentences, spans, masked sentences '
                'or titles, queries written by the generator (generated, sampled, roundtrip), a '
                'file of query texts, a collection whose topic texts are read (never its qrels), '
                'or crossfold (the evaluated collection\'s own topic texts, one model a fold).')
N_QUERIES_HELP = 'How many training queries: a longer query log is sampled down to this many.'


PROMPT_HELP = ('What each {side} text begins with, for the encoder that starts training. None: '
               'the model\'s own prompt; where it declares none, its model card\'s (e5: '
               '{e5!r}{bge}); an empty value: none.')


def prompt_setting(side: str):
    """The ``query_prompt`` or ``passage_prompt`` field of a method that starts from an encoder
    (:func:`encoder_options` reads them)."""
    bge = '; bge-*-en-v1.5: its query instruction' if side == 'query' else ''
    return setting(None, PROMPT_HELP.format(side=side, e5=f'{side}: ', bge=bge), group='model')


def prompts_of(query_prompt: str | None, passage_prompt: str | None) -> dict[str, str]:
    """The flat prompt settings, by side, those left at None left out: what
    ``DualEncoder.from_pretrained(..., prompts=)`` takes."""
    return {side: str(text) for side, text in (('query', query_prompt),
                                                ('passage', passage_prompt)) if text is not None}


def encoder_options(settings: MethodSettings) -> dict[str, Any]:
    """What ``DualEncoder.from_pretrained`` takes from a method's settings: its prompts and,
    where the method has them, its precision, normalisation and length.

        DualEncoder.from_pretrained(s.model_name, **encoder_options(s))
    """
    options = {'prompts': prompts_of(getattr(settings, 'query_prompt', None),
                                     getattr(settings, 'passage_prompt', None))}
    for name in ('precision', 'normalize'):
        if hasattr(settings, name):
            options[name] = getattr(settings, name)
    if getattr(settings, 'max_length', None) is not None:
        options['max_length'] = options['query_max_length'] = settings.max_length
    return options


def checkpoints_at_the_end_of(what: str):
    """The ``checkpoint_every`` setting of a method whose run resumes exactly at the end of each
    ``what`` (a round, an iteration)."""
    return setting('epoch', f'When checkpoints are saved: epoch (at each {what}\'s end, where a '
                            f'resumed run matches one never stopped), a number of steps, or None.',
                   group='checkpoints', trains=False)


_STEPS_CHECKPOINT = 25  # ds's steps between checkpoints, and RUMBArt's and ACROBArT's


@dataclass(frozen=True)
class DistantSupervisionSettings(MethodSettings):
    """Distant supervision (thesis §4.2.3): each training query's positive is BM25's top-1
    passage."""
    queries: str = setting('sentences', QUERIES_HELP, group='queries')
    n_queries: int = setting(5000, N_QUERIES_HELP, group='queries')
    generator: str = setting('smollm2', 'The generator that writes queries=generated, sampled or '
                                        'roundtrip (a name, a hub name or a path).',
                             group='queries')
    model_name: str = setting(MINILM, 'The encoder that starts training (a Hugging Face name or a '
                                      'path).', group='model')
    dim: int | None = setting(None, 'The dimension of the query and passage projections; None: '
                                       'no projection, the encoder\'s pooled output.',
                                 group='model')
    query_prompt: str | None = prompt_setting('query')
    passage_prompt: str | None = prompt_setting('passage')
    negatives: str = setting('none', 'One extra hard negative a query, shared by the batch: none, '
                                     'random, from BM25\'s ranks 2 to 31, or the '
                                     'retriever\'s own top.',
                             choices=('none', 'random', 'bm25', 'retriever'))
    epochs: int = setting(1, 'Passes over the training queries.', group='training')
    batch_size: int = setting(32, 'Queries a batch; the other queries\' positives are in-batch '
                                  'negatives.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: int | str | None = setting(
        _STEPS_CHECKPOINT, 'Steps between saved checkpoints (epoch: at each epoch\'s end; None: '
                           'only the final model).', group='checkpoints', trains=False)


@dataclass(frozen=True)
class ReconstructionSettings(MethodSettings):
    """What RUMBArt and ACROBArT share: a stale index refreshed every ``refresh_every`` steps,
    its top ``k`` scored by the generator."""
    queries: str = setting('sentences', QUERIES_HELP, group='queries')
    n_queries: int = setting(5000, N_QUERIES_HELP, group='queries')
    start: str = setting('minilm', 'What training starts from: minilm (all-MiniLM-L6-v2), ds (the '
                                   'ds pipeline\'s model on the same queries, trained first) or a '
                                   'path.', group='model')
    query_prompt: str | None = prompt_setting('query')
    passage_prompt: str | None = prompt_setting('passage')
    generator: str = setting('smollm2', 'The generator whose reconstruction teaches the retriever.',
                             group='teacher')
    max_passage_length: int = setting(MAX_PASSAGE_LENGTH, 'Generator tokens a passage is cut to.',
                                      group='teacher')
    k: int = setting(5, 'Passages retrieved a query and scored by the generator.')
    refresh_every: int | None = setting(25, 'Optimiser steps between rebuilds of the stale '
                                               'index (None: never).')
    refresh: str = setting(
        'sync', 'sync: training waits while the index is rebuilt, and a resumed run matches one '
                'never stopped; async: a thread rebuilds it from a copy of the weights while '
                'training goes on, and the new index is swapped in when ready (REALM), so runs '
                'depend on timing.', choices=('sync', 'async'))
    train_passages: bool = setting(
        True, 'Train the passage tower too; false: only the query tower trains, against a frozen '
              'copy of the start encoder (RAG).')
    epochs: int = setting(1, 'Passes over the training queries.', group='training')
    batch_size: int = setting(16, 'Queries a batch.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: int | str | None = setting(
        None, 'Steps between saved checkpoints. None: at each refresh (where a resumed run matches '
              'one never stopped), or every 25 steps where the index never changes.',
        group='checkpoints', trains=False)

    @property
    def start_settings(self) -> dict[str, Any]:
        """With ``start='ds'``: the settings of the distant-supervision model that training starts
        from, trained on the same queries with the same seed."""
        return {name: getattr(self, name) for name in ('queries', 'n_queries', 'seed')}

    @property
    def checkpoint_interval(self) -> int | str | None:
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
        '(a uniform prior) to the retriever\'s.', group='teacher',
        choices=('marginal', 'art'))


@dataclass(frozen=True)
class AcrobartSettings(ReconstructionSettings):
    """ACROBArT (thesis §4.3.2): β·p_η(z_j|x) added to the generator's attention towards
    passage j."""
    beta: float = setting(1.0, 'The starting weight of the retriever\'s probabilities in the '
                               'generator\'s attention logits (trained).')


# all-MiniLM-L6-v2's zero-shot retrieval head: (layer from 0, head, special tokens)
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
    teacher_temperature: float = setting(
        1.0, 'The generator\'s log-likelihoods are divided by this.', group='teacher')
    k: int = setting(8, 'Close documents a query: BM25\'s, then the model\'s own each iteration.')
    alpha: float = setting(1.0, 'The weight of the adjustment\'s KL term.')
    epochs: int = setting(2, 'Iterations: each re-retrieves the close documents with the model as '
                             'it is.', group='training')
    batch_size: int = setting(8, 'Queries a batch; the others\' close documents are its random '
                                 'ones.', group='training')
    lr: float = setting(2e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: int | str | None = checkpoints_at_the_end_of('iteration')

    @property
    def retrieval_head(self) -> dict[str, Any]:
        """Which attention head retrieves: the keywords of ``ReAtt.from_pretrained``."""
        return {name: getattr(self, name) for name in REATT_HEAD}


@dataclass(frozen=True)
class DistillationSettings(MethodSettings):
    """Distillation of a fused teacher (BM25 and the student itself) into the student, in rounds."""
    queries: str = setting('sampled', QUERIES_HELP, group='queries')
    n_queries: int = setting(2000, N_QUERIES_HELP, group='queries')
    generator: str = setting('smollm2', 'The generator that writes queries: smollm2, qwen, or '
                                        'any hub name or path (an instruct model through its '
                                        'chat template with query_style=chat; a seq2seq '
                                        'doc2query model, such as GPL\'s '
                                        'BeIR/query-gen-msmarco-t5-base-v1, the passage '
                                        'alone).',
                             group='queries')
    query_style: str = setting('plain', 'The writer\'s prompt: plain or chat.', group='queries',
                               choices=('plain', 'chat'))
    query_examples: str | None = setting(
        None, 'A query log (a file or a collection) whose texts the writer is shown as the style '
              'to write in.', group='queries')
    example_pairs: str | None = setting(
        None, 'A collection whose judged pairs the writer is shown: 3 of its topics, each after '
              'the text of a passage judged relevant to it (its qrels are read: name another '
              'collection than the one the model adapts to).', group='queries')
    per_passage: int = setting(3, 'Queries the writer writes for each passage it draws '
                                  '(n_queries / per_passage passages are drawn).',
                               group='queries')
    top_k: int | None = setting(
        None, 'The writer samples from its top k tokens (None: the model\'s generation config\'s, '
              'else 50; GPL\'s: 25), within top_p 0.95.', group='queries')
    query_tokens: int = setting(32, 'The most tokens a written query takes (GPL\'s: 64).',
                                group='queries')
    model_name: str = setting(MINILM, 'The student that starts training.', group='model')
    query_prompt: str | None = prompt_setting('query')
    passage_prompt: str | None = prompt_setting('passage')
    normalize: bool | None = setting(
        None, 'Whether the student\'s vectors are L2-normalised, so that it scores by cosine '
              '(true), or not, so that it scores by dot product (false, as GPL trains). None: as '
              'the model is made.', group='model')
    max_length: int | None = setting(
        None, 'The tokens of a passage (and of a query) the student reads (GPL: 350). None: the '
              'model\'s own.', group='model')
    precision: str = setting('fp32', 'The student\'s precision while it trains: fp32, bf16 or '
                                     'auto.', group='model', choices=('fp32', 'bf16', 'auto'))
    teacher: str = setting('bm25+student', 'The teacher\'s parts and weights: bm25, student, '
                                           'miners (the dense retrievers the miners '
                                           'setting names), gen, ce (a cross-encoder), fused '
                                           '(BM25 and MiniLM fused, as a re-ranker), joined by '
                                           '+, each with an optional weight (2*bm25; '
                                           '0*miners+ce: the miners choose the candidates, the '
                                           'cross-encoder scores them).',
                           group='teacher')
    miners: str = setting(
        '+'.join(GPL_MINERS), 'The dense retrievers of the teacher\'s miners part, by hub name '
        'or path, joined by + (GPL\'s two by default); each searches the whole corpus by '
        'cosine and gives its top depth. One that is not on this machine, where the hub cannot '
        'be reached, is replaced by all-MiniLM-L6-v2, and the run says so.', group='teacher')
    cross_encoder: str = setting(
        GPL_CROSS_ENCODER, 'The cross-encoder that the teacher\'s ce part '
        'scores the fused candidates with (GPL\'s, by default), by hub name or path; read only '
        'where the teacher names ce.', group='teacher')
    fusion_depth: int = setting(100, 'How deep each part of the teacher ranks before fusion.',
                                group='teacher')
    depth: int = setting(30, 'The teacher\'s top this many are each query\'s candidates.',
                         group='teacher')
    teacher_temperature: float = setting(
        1.0, 'The teacher\'s distribution is softmax(score / this).', group='teacher')
    loss: str = setting('kl', 'kl: listwise KL from the teacher; margin_mse: GPL\'s Margin-MSE '
                              'over every pair of a query\'s candidates.',
                        choices=('kl', 'margin_mse'))
    negatives: int | None = setting(
        None, 'With loss=margin_mse, GPL\'s triples: each time a query is met it trains on its '
              'positive (the passage it was written for, or else the teacher\'s top candidate) '
              'and this many negatives drawn at random from the teacher\'s other candidates, '
              'the teacher\'s margins between them its target (GPL: 1). None: every pair of the '
              'teacher\'s candidates.')
    in_batch: bool = setting(True, 'With kl, the student\'s softmax also spans the other queries\' '
                                   'candidates in the batch (in-batch negatives).')
    passages: str | None = setting(
        None, 'How the passage side trains: frozen (the query tower trains against the start '
              'encoder\'s passage vectors), offsets (each candidate passage\'s vector also moves '
              'by a learned offset) or trained (both towers train; each round searches a freshly '
              'built index). None: frozen with queries from the corpus (written or cut), offsets '
              'with a query log.', choices=('frozen', 'offsets', 'trained'))
    offset_weight: float = setting(1.0, 'With passages=offsets, the weight of the L2 term that '
                                        'pulls each offset towards zero.')
    offset_lr: float = setting(1e-3, 'The learning rate of the passage offsets\' Adam.')
    rounds: int | None = setting(
        None, 'Rounds of self-training: each passes over the queries once, the teacher re-ranking '
              'with the student as it is. None: 1 with queries from the corpus (written or cut), '
              '5 with a query log.', group='training')
    batch_size: int = setting(32, 'Queries a batch.', group='training')
    lr: float = setting(5e-5, 'AdamW\'s peak learning rate.', group='training')
    checkpoint_every: int | str | None = checkpoints_at_the_end_of('round')

    @property
    def epochs(self) -> int:
        """The rounds, as the training loop counts them."""
        return self.rounds

    def chosen_defaults(self) -> dict[str, Any]:
        """``passages`` and ``rounds`` left at None follow the queries: one round with the
        passage side frozen for queries from the corpus, five with offsets for a query log."""
        corpus_only = self.queries in CUT_FROM_CORPUS + GENERATED
        return {'passages': 'frozen' if corpus_only else 'offsets',
                'rounds': 1 if corpus_only else 5}

    def validate(self):
        super().validate()
        if self.negatives is not None:
            if self.loss != 'margin_mse':
                raise ValueError(f'negatives={self.negatives} draws the pairs of Margin-MSE: '
                                 f'say loss=margin_mse with it, or leave negatives unset')
            if not 1 <= self.negatives < self.depth:
                raise ValueError(f'negatives must be at least 1 and below depth '
                                 f'({self.depth}), not {self.negatives}')

    def given(self, rows: int, with_sources: int) -> 'DistillationSettings':
        """These settings for training queries given to ``Distillation.fit`` directly: ``rows``
        queries, ``with_sources`` of them naming the passage they came from (``source_docno``).
        Queries that name none are a query log, whatever ``queries`` says; queries that all name one
        are the corpus-only source ``queries`` names. A frame with some of each is refused.

            DistillationSettings().given(35, 0).rounds   # 5: a query log
        """
        if 0 < with_sources < rows:
            raise ValueError(f'{with_sources} of {rows} training queries name the passage they '
                             f'came from (source_docno) and the others do not: give a query log '
                             f'with no source_docno, or corpus queries with one on every row')
        from_corpus = self.queries in CUT_FROM_CORPUS + GENERATED
        if with_sources and not from_corpus:
            raise ValueError(f'these training queries name the passage each came from '
                             f'(source_docno), and queries={self.queries!r} says a query log: '
                             f'pass queries=\'sampled\' (written for their passages) or '
                             f'queries=\'sentences\' (cut from them)')
        return self.replace(queries=GIVEN_LOG) if from_corpus and not with_sources else self

    @property
    def excludes_sources(self) -> bool:
        """Whether a query's ``source_docno`` is a passage it may not retrieve: yes for
        queries cut from a passage (a trivial match), no for queries written for one or a log."""
        return self.queries in CUT_FROM_CORPUS


# GPL's recipe (Wang et al., 2022, NAACL; github.com/UKPLab/gpl, gpl/train.py's defaults) as
# distillation's settings; docs/your-own-models.md says where the package differs from it
GPL: dict[str, Any] = dict(generator=GPL_WRITER, per_passage=3, top_k=GPL_WRITER_TOP_K,
                           query_tokens=GPL_QUERY_TOKENS, teacher='0*miners+ce',
                           miners='+'.join(GPL_MINERS), cross_encoder=GPL_CROSS_ENCODER,
                           loss='margin_mse', depth=50, negatives=1, passages='trained',
                           normalize=False, max_length=GPL_MAX_LENGTH, lr=2e-5, batch_size=32,
                           precision='fp32')

SETTINGS: dict[str, type[MethodSettings]] = {
    'distill': DistillationSettings,
    'ds': DistantSupervisionSettings,
    'rumbart': RumbartSettings,
    'acrobart': AcrobartSettings,
    'reatt': CrossDocumentAdjustmentSettings,
}
