"""Retrieve-and-reconstruct training (thesis §4.3): a generator teaches the retriever.

For each training query x, the k passages z_1..z_k that a MIPS index built with the
passage encoder returns (the index is stale between refreshes, REALM's trick) are
re-scored with the current encoder: p_η(z|x) = softmax over the k of q·p / temperature.

- :class:`Rumbart` (Algorithms 1-2) marginalises over them,
  loss = -log Σ_k p_η(z_k|x) p_θ(x|z_k), computed in log space (logsumexp). With a
  frozen generator p_θ(x|z) of a pair never changes: it is computed once, kept in an
  on-disk score cache, and reused across steps, refreshes and runs.
- :class:`Acrobart` (Algorithm 3) gives the generator all k passages at once and adds
  β·p_η(z_j|x) (β trainable) to the attention logits from the target's positions
  towards passage j's tokens (decoder cross-attention for seq2seq generators,
  self-attention for decoder-only ones); loss = -log p_θ(x | z_1..z_k, p_η).

Options from REALM: a null document (the empty passage, always a candidate) and, for
queries cut from the corpus, never retrieving the passage they came from. From RAG
(Lewis et al., 2020, §2.4): ``train_passages=False`` unties the encoder and freezes the
passage tower, so that only queries are encoded with gradients (a step costs a fraction
of the full one) and the index never goes stale (a refresh only re-retrieves).

    trainer = Rumbart(DualEncoder.from_pretrained(MINILM),
                      Generator.from_pretrained(SMOLLM2, gguf_file=...),
                      'beir/scifact/test', output_dir='runs/rumbart')
    trainer.fit(pt.get_dataset('irds:beir/scifact/train').get_topics())   # labels never read
"""
import copy
import logging
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from functools import cached_property
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import torch

from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries import Query, training_queries
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.generator import Generator
from pyterrier_selfsup.models.score_cache import score_cache_dir
from pyterrier_selfsup.models.reading import biased_log_likelihood, checkpointed_layers
from pyterrier_selfsup.retrieval.base import top_k_excluding
from pyterrier_selfsup.retrieval.dense import flex_index, fresh_index, search_stage
from pyterrier_selfsup.training.loop import DualEncoderTrainer
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.training.settings import (AcrobartSettings, ReconstructionSettings,
                                                 RumbartSettings)

logger = logging.getLogger(__name__)

NULL_DOCNO = '__null__'


def marginal_nll(retriever_logits: torch.Tensor, teacher_logp: torch.Tensor,
                 per_row: bool = False) -> torch.Tensor:
    """Mean over queries of -log Σ_z softmax(retriever_logits)_z · exp(teacher_logp_z):
    RUMBArt's loss (thesis Eq. 4.8-4.9) in log space, as RAG's ``get_nll`` computes it.
    ``per_row``: each query's term instead of their mean."""
    rows = -torch.logsumexp(torch.log_softmax(retriever_logits, dim=-1) + teacher_logp, dim=-1)
    return rows if per_row else rows.mean()


def reconstruction_kl(retriever_logits: torch.Tensor, teacher_logp: torch.Tensor,
                      per_row: bool = False) -> torch.Tensor:
    """Mean over queries of KL(q ‖ p_η), where q = softmax(teacher_logp) is the generator's
    reconstruction distribution over the candidates (a uniform prior, no gradient into the
    teacher) and p_η = softmax(retriever_logits) the retriever's: ART's loss (Sachan et al.,
    "Questions Are All You Need to Train a Dense Passage Retriever"). Unlike
    :func:`marginal_nll`, its target does not carry the retriever's own prior.
    ``per_row``: each query's term instead of their mean.

        reconstruction_kl(torch.zeros(1, 3), torch.zeros(1, 3))   # tensor(0.): the same
    """
    # (distillation's listwise_kl computes the same divergence; it is not called here because
    # its float rounding differs, and the committed rumbart_target runs were made with this one)
    target = torch.log_softmax(teacher_logp.detach(), dim=-1)
    rows = (target.exp() * (target - torch.log_softmax(retriever_logits, dim=-1))).sum(dim=-1)
    return rows if per_row else rows.mean()


class RetrieveAndReconstruct(DualEncoderTrainer):
    """What RUMBArt and ACROBArT share: the stale MIPS index, its refreshes, retrieval of
    the k candidates and their re-scoring by the current encoder.

    Args:
        encoder: the dual encoder to train.
        generator: the generator whose reconstruction of each query teaches it.
        collection: the corpus, or its name.
        settings: :class:`~pyterrier_selfsup.training.settings.RumbartSettings` or
            :class:`~pyterrier_selfsup.training.settings.AcrobartSettings` (None: the
            defaults): k, the refresh interval, the null document, whether the passage tower
            trains, and the loop's settings.
        run, **changes: as for :class:`~pyterrier_selfsup.training.Trainer`.

    Each refresh rebuilds the index from the current passage encoder (REALM, thesis Alg. 2) and
    logs its time as ``refresh seconds``. With ``train_passages=False`` passages get their own
    frozen copy of the start encoder and only the query tower trains (RAG): candidates are
    scored against the index's own vectors, and a refresh re-retrieves without re-encoding.
    Resuming from a checkpoint rebuilds the index from the checkpoint's encoder (a refresh at
    the resume step), so a resumed run matches one never stopped exactly only when the
    checkpoint falls on a refresh. Under ``torchrun`` each process computes the loss of its
    share of each batch's queries, a refresh is encoded in shards
    (:func:`~pyterrier_selfsup.retrieval.dense.fresh_index`), and RUMBArt's teacher scores its
    share of the passages into the shared cache.

    With ``refresh='async'`` (one process only) training does not wait for a refresh: a thread
    encodes a copy of the weights of the refresh step, and the new index is swapped in after the
    first step that finds it ready (and at the latest at the next refresh step, which waits for
    it). The log records each swap's ``staleness``, the steps between the copy and the swap.
    Which step that is depends on how fast the machine runs, so such a run is not reproducible
    step for step, and a resumed run does not match one never stopped; the synchronous default
    is, and does.
    """
    Settings = ReconstructionSettings
    marker = 'refresh seconds'
    data_parallel = True

    def __init__(self, encoder: DualEncoder, generator: Generator,
                 collection: Union[str, Collection],
                 settings: Optional[ReconstructionSettings] = None,
                 run: Optional[RunContext] = None, **changes):
        super().__init__(encoder, collection, settings, run, **changes)
        self.generator = generator
        # the stale index: a FlexIndex of the passage encoder as it was at the last refresh
        self._index = None
        self._index_dir: Optional[tempfile.TemporaryDirectory] = None
        # refresh='async': the step of the weights being encoded, and the build's future
        self._building: Optional[Tuple[int, Future]] = None
        self._builder: Optional[ThreadPoolExecutor] = None

    def on_fit_start(self):
        # RAG: passages keep a frozen copy of the start encoder
        if not self.settings.train_passages:
            self.encoder.model.freeze_passage_tower()
        if self.settings.refresh == 'async' and self.world_size > 1:
            raise ValueError("refresh='async' runs in one process: a data-parallel refresh is "
                             "encoded in shards by every process at once (use refresh='sync')")
        if self.settings.train_passages:  # each refresh encodes the same passages again
            self.encoder.keep_passage_token_ids()

    def on_fit_end(self):
        super().on_fit_end()
        self.encoder.keep_passage_token_ids(None)
        if self._building is not None:  # a build the run no longer needs: waited for, removed
            _, future = self._building
            self._building = None
            future.result()[1].cleanup()
        if self._builder is not None:
            self._builder.shutdown()
            self._builder = None

    def parameters(self):
        yield from super().parameters()
        if self.generator.trainable:
            yield from self.generator.model.parameters()

    def train_mode(self, on: bool):
        super().train_mode(on)
        if self.generator.trainable:
            self.generator.model.train(on)

    def save_extra(self, path: Path):
        if self.generator.trainable:
            self.generator.save_pretrained(path / 'generator')

    def load_extra(self, path: Path):
        if self.generator.trainable:
            from safetensors.torch import load_file
            self.generator.model.load_state_dict(
                load_file(path / 'generator' / 'model.safetensors'), strict=False)

    # -- data and index ---------------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> List[Query]:
        return training_queries(topics)

    @cached_property
    def _null_vector(self) -> np.ndarray:
        return self.encoder.encode_docs([''])[0]

    def on_epoch_start(self, examples: List[Query], epoch: int, resumed: bool):
        if self._index is None:
            self.refresh(examples, initial=True)

    def on_step_end(self, examples: List[Query]):
        asynchronous = self.settings.refresh == 'async' and self.settings.train_passages
        if asynchronous:
            self._swap(examples, wait=False)
        if self.settings.refresh_every and self.state['step'] % self.settings.refresh_every == 0:
            if asynchronous:
                self._swap(examples, wait=True)  # one build at a time
                self._start_build()
            else:
                self.refresh(examples)

    def _start_build(self):
        """``refresh='async'``: a copy of the encoder as it is now, encoded into a fresh index
        on a thread of its own (on a GPU, on a CUDA stream of its own) while training goes on."""
        snapshot = copy.deepcopy(self.encoder)
        snapshot.model.eval()
        for parameter in snapshot.model.parameters():
            parameter.requires_grad_(False)
        stream = None
        if snapshot.device.type == 'cuda':
            stream = torch.cuda.Stream(snapshot.device)
            stream.wait_stream(torch.cuda.current_stream(snapshot.device))  # (the copy's)

        def build():
            t0 = time.time()
            with torch.cuda.stream(stream) if stream is not None else nullcontext():
                index, directory = fresh_index(self.collection, snapshot)
            return index, directory, time.time() - t0
        if self._builder is None:
            self._builder = ThreadPoolExecutor(max_workers=1, thread_name_prefix='refresh')
        self._building = (self.state['step'], self._builder.submit(build))

    def _swap(self, examples: List[Query], wait: bool):
        """``refresh='async'``: the index being built, swapped in if it is ready (or once it
        is, with ``wait``); logs its build time and its staleness, the optimiser steps taken
        between the copy of the weights it encodes and the swap."""
        if self._building is None or not (wait or self._building[1].done()):
            return
        (snapshot_step, future), self._building = self._building, None
        index, directory, seconds = future.result()
        self._replace_index(index, directory)
        self.log.append({'step': self.state['step'], 'refresh seconds': seconds,
                         'staleness': self.state['step'] - snapshot_step})
        logger.info('MIPS index of step %d swapped in at step %d (built in %.0f s)',
                    snapshot_step, self.state['step'], seconds)
        self.after_refresh(examples)

    def _replace_index(self, index, directory: Optional[tempfile.TemporaryDirectory]):
        """Searches ``index`` (kept in ``directory``) from now on; the last one's files go."""
        old, self._index, self._index_dir = self._index_dir, index, directory
        if old is not None:
            old.cleanup()

    def refresh(self, examples: List[Query], initial: bool = False):
        """Rebuilds the MIPS index from the current passage encoder. The start encoder's
        index is the cached FlexIndex (built once per passage side); a frozen passage
        tower's index never changes, so a refresh then only re-retrieves."""
        t0 = time.time()
        if initial:
            self._index = flex_index(self.collection, self.encoder, cache_dir=self.cache_dir,
                                     verbose=self.shows)
        elif self.settings.train_passages:
            # (sharded on several processes)
            self._replace_index(*fresh_index(self.collection, self.encoder, verbose=self.shows))
        self.train_mode(True)
        self.log.append({'step': self.state.get('step', 0), 'refresh seconds': time.time() - t0})
        logger.info('MIPS index %s in %.0f s', 'built' if initial else 'refreshed',
                    time.time() - t0)
        self.after_refresh(examples)

    def after_refresh(self, examples: List[Query]):
        """After each (re)build of the index (RUMBArt fills its teacher cache here)."""

    def retrieve(self, query_vectors: np.ndarray, batch: List[Query]) -> List[List[str]]:
        """Each query's top k from the stale index, excluded passages skipped (and the null
        document added, if asked for)."""
        top = top_k_excluding(search_stage(self._index, 'auto', 1000), batch, self.settings.k,
                              query_vectors=query_vectors)
        return [top[q.qid] + ([NULL_DOCNO] if self.settings.null_document else []) for q in batch]

    def candidates(self,
                   batch: List[Query]) -> Tuple[List[List[str]], List[List[str]], torch.Tensor]:
        """(docnos, texts, retriever logits (b, k)) for a batch, the logits with gradients:
        current query encoder, stale index, candidates re-encoded by the current encoder."""
        queries = self.encoder.encode([q.query for q in batch], 'query')
        docnos = self.retrieve(queries.detach().float().cpu().numpy(), batch)
        width = min(len(d) for d in docnos)
        # (a corpus smaller than k + the passages a query excludes: rows are cut to the
        # shortest, under data parallelism the shortest of this process's share, so that
        # there, and only there, several processes can differ from one)
        docnos = [d[:width] for d in docnos]
        texts = self.texts(docnos)
        if self.settings.train_passages:
            passages = (self.encoder.encode([t for row in texts for t in row], 'passage')
                        .view(len(batch), width, -1))
        else:  # the frozen tower's vectors, as the index holds them
            index_docnos, vectors, _ = self._index.payload()
            real = [d for row in docnos for d in row if d != NULL_DOCNO]
            found = iter(np.asarray(vectors[index_docnos.inv[real]], dtype=np.float32))
            passages = torch.from_numpy(np.stack([[self._null_vector if d == NULL_DOCNO
                                                   else next(found) for d in row]
                                                  for row in docnos])).to(queries.device)
        logits = torch.einsum('bd,bkd->bk', queries, passages) / self.encoder.temperature
        # the prior's share on the null document (the last candidate)
        if self.settings.null_document:
            self.record('null prior', torch.softmax(logits.detach(), dim=-1)[:, -1].mean().item(),
                        len(batch))
        return docnos, texts, logits

    def texts(self, docnos: List[List[str]]) -> List[List[str]]:
        flat = [d for row in docnos for d in row if d != NULL_DOCNO]
        lookup = dict(zip(flat, self.collection.texts(flat))) if flat else {}
        return [[lookup.get(d, '') for d in row] for row in docnos]


class Rumbart(RetrieveAndReconstruct):
    """RUMBArt: marginalisation over the k retrieved passages (thesis §4.3.1).

    A frozen generator's log p_θ(x|z) goes through an on-disk cache keyed by the
    generator's fingerprint and the corpus: after each refresh the pairs of all training
    queries are scored in one pass (passages shared across queries are encoded once),
    and a batch only looks them up. A trainable generator is scored with gradients.
    ``teacher_temperature`` divides log p_θ before marginalising (1: the thesis). With
    ``target='art'`` the loss is ART's KL divergence (:func:`reconstruction_kl`) instead of the
    thesis' marginal likelihood (:func:`marginal_nll`)."""
    description = 'RUMBArt'
    # its loss moves with the teacher's log p(x|z) of the batch: the curve plots its excess
    # over the batch's lower bound instead
    curve, curve_label = 'excess loss', 'loss above its lower bound'

    Settings = RumbartSettings

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._teacher = None
        # the teacher's scores of the pairs of the last fill and of the steps since, by (query,
        # passage): a step looks its pairs up here, not in the score cache's database
        self._scores: Dict[Tuple[str, str], float] = {}
        if not self.generator.trainable:
            self._teacher = self.generator.scorer(normalise='sum', cache=score_cache_dir(
                self.collection.corpus_id, self.generator, self.cache_dir))

    def after_refresh(self, examples: List[Query]):
        if self._teacher is None:
            return
        t0 = time.time()
        mine = self.local_batch(examples)  # (all of them in one process)
        vectors = self.encoder.encode_queries([q.query for q in mine])
        self.train_mode(True)
        retrieved = {}
        for start in range(0, len(mine), 1024):
            part = mine[start:start + 1024]
            retrieved.update(zip([q.qid for q in part],
                                 self.retrieve(vectors[start:start + 1024], part)))
        retrieved = self.gather(retrieved)
        docnos = [retrieved[q.qid] for q in examples]
        # one call for all pairs: the scorer goes by passage (each passage's prompt encoded
        # once for all its queries), commits to the cache as it goes, and splits the
        # passages between the processes of a data-parallel run
        pairs = self._pairs(examples, docnos, self.texts(docnos))
        self._teacher.fill(pairs)
        self._scores = {}
        self._remember(pairs)  # (every process: the cache holds all of them now)
        self.log.append({'step': self.state.get('step', 0), 'teacher seconds': time.time() - t0})

    def _remember(self, pairs: pd.DataFrame):
        """The teacher's scores of ``pairs``, through the score cache (which scores those it
        does not hold), kept in memory for the steps' look-ups."""
        scored = self._teacher(pairs)
        self._scores.update(zip(zip(scored['query'], scored['docno']), scored['score']))

    @staticmethod
    def _pairs(batch: List[Query], docnos: List[List[str]], texts: List[List[str]]) -> pd.DataFrame:
        return pd.DataFrame({'qid': [q.qid for q, row in zip(batch, docnos) for _ in row],
                             'query': [q.query for q, row in zip(batch, docnos) for _ in row],
                             'docno': [d for row in docnos for d in row],
                             'text': [t for row in texts for t in row]})

    def teacher_logp(self, batch: List[Query], docnos: List[List[str]],
                     texts: List[List[str]]) -> torch.Tensor:
        """log p_θ(x | z) for each query's candidates, (b, k)."""
        if self._teacher is not None:
            keys = [(q.query, d) for q, row in zip(batch, docnos) for d in row]
            if any(key not in self._scores for key in keys):
                # candidates the query encoder found since the last fill: the batch's pairs go
                # through the score cache, which scores those it lacks (in the batches it
                # would have scored them in before this look-up existed)
                self._remember(self._pairs(batch, docnos, texts))
            values = torch.tensor(np.array([self._scores[key] for key in keys], dtype=np.float32))
        else:
            frame = self._pairs(batch, docnos, texts)
            values = self.generator.log_likelihood(frame['query'].tolist(), frame['text'].tolist())
        return values.view(len(batch), -1).to(self.encoder.device)

    def loss(self, batch: List[Query], rng: np.random.Generator) -> torch.Tensor:
        mine = self.local_batch(batch)
        docnos, texts, logits = self.candidates(mine)
        teacher = self.teacher_logp(mine, docnos, texts) / self.settings.teacher_temperature
        art = self.settings.target == 'art'
        rows = (reconstruction_kl if art else marginal_nll)(logits, teacher, per_row=True)
        # the posterior's share on it: how often it explains the query best
        if self.settings.null_document:
            posterior = torch.softmax(torch.log_softmax(logits.detach(), dim=-1) + teacher, dim=-1)
            self.record('null posterior', posterior[:, -1].mean().item(), len(mine))
        # the marginal loss cannot go below -mean(max_z log p(x|z)) (all of p(z|x) on the
        # teacher's best), the KL not below 0: the excess is what the retriever can still gain,
        # comparable across batches
        floor = 0.0 if art else teacher.max(dim=1).values
        self.record('excess loss', (rows.detach() + floor).mean().item(), len(mine))
        return rows.sum() / len(batch)  # this process's share of the batch's mean


# -- ACROBArT ---------------------------------------------------------------------------

# ACROBArT's queries whose k passages go through the generator at once (Acrobart's generator_batch)
GENERATOR_BATCH = 4


class _Computed(torch.autograd.Function):
    """A loss whose gradient towards ``inputs`` was computed already: its value, and in the
    backward pass that gradient times the one that reaches the loss (ACROBArT's generator
    taken a few queries at a time)."""

    @staticmethod
    def forward(ctx, inputs, value, gradient):
        ctx.save_for_backward(gradient)
        return value.clone()

    @staticmethod
    def backward(ctx, grad_output):
        gradient, = ctx.saved_tensors
        return gradient * grad_output, None, None


class Acrobart(RetrieveAndReconstruct):
    """ACROBArT: the k passages go to the generator together, the retrieval scores bias
    its attention (thesis §4.3.2). β is trainable (initial value ``beta``); the
    reconstruction loss reaches the retriever through the bias.

    ``generator_batch``: the batch's queries go through the generator this many at a time, each
    group's backward pass run at once, so a step holds the generator's activations of that many
    queries × k passages, not of the whole batch (None: the whole batch at once). Not a setting:
    each row is padded as the whole batch pads it, and the loss and the gradients are those of the
    whole batch's pass, bit for bit on a CPU where ``accumulation`` is 1 (shipped) or a power of 2
    (tests/test_reconstruction.py; experiments/results/generator_batch.md). Otherwise equal up to
    rounding: 1/accumulation meets the gradient after the generator's backward pass rather than
    before, and on a GPU, kernels chosen by shape may sum in another order. A generator that trains
    (``trainable``) takes the whole batch at once."""
    description = 'ACROBArT'

    Settings = AcrobartSettings

    def __init__(self, *args, generator_batch: Optional[int] = GENERATOR_BATCH, **kwargs):
        super().__init__(*args, **kwargs)
        self.generator_batch = generator_batch
        self.beta = torch.nn.Parameter(torch.tensor(float(self.settings.beta),
                                                    device=self.encoder.device))

    def parameters(self):
        yield from super().parameters()
        yield self.beta

    def on_fit_start(self):
        super().on_fit_start()
        # the generator's activations (k passages a row, with gradients) are most of a step's
        checkpointed_layers(self.generator, self.uses_gradient_checkpointing)

    def on_fit_end(self):
        super().on_fit_end()
        checkpointed_layers(self.generator, False)

    def save_extra(self, path: Path):
        super().save_extra(path)
        torch.save({'beta': self.beta.detach().cpu()}, path / 'acrobart.pt')

    def load_extra(self, path: Path):
        super().load_extra(path)
        with torch.no_grad():
            self.beta.copy_(torch.load(path / 'acrobart.pt')['beta'])

    def loss(self, batch: List[Query], rng: np.random.Generator) -> torch.Tensor:
        mine = self.local_batch(batch)
        docnos, texts, logits = self.candidates(mine)
        self.record('beta', self.beta.item())  # the value this step uses, before its update
        weights = self.beta * torch.softmax(logits, dim=-1)
        queries = [q.query for q in mine]
        # (a generator that trains takes the whole batch: its own gradients must come from the
        # step's backward)
        chunk = len(mine) if self.generator.trainable else self.generator_batch or len(mine)
        if chunk >= len(mine):  # this process's share of the batch's mean
            return (-biased_log_likelihood(self.generator, queries, texts, weights).sum()
                    / len(batch))
        # a few rows at a time through the generator, each backward at once: the gradients
        # reach the weights, which carry them to β and the retriever in the step's backward
        held, rows_logp = weights.detach().requires_grad_(), []
        for start in range(0, len(mine), chunk):
            rows = slice(start, start + chunk)
            logp = biased_log_likelihood(self.generator, queries, texts, held[rows], rows=rows)
            (-logp.sum() / len(batch)).backward()
            rows_logp.append(logp.detach())
        # (summed as the whole batch's pass sums it)
        value = -torch.cat(rows_logp).sum() / len(batch)
        return _Computed.apply(weights, value, held.grad)
