"""Retrieve-and-reconstruct training (thesis §4.3): a generator teaches the retriever.

For each training query x, the k passages z_1..z_k that a stale MIPS index returns (REALM's
trick) are re-scored with the current encoder: p_η(z|x) = softmax over the k of
q·p / temperature.

- :class:`~pyterrier_selfsup.training.rumbart.Rumbart` (Algorithms 1-2) marginalises over
  them, loss = -log Σ_k p_η(z_k|x) p_θ(x|z_k), in log space; a frozen generator's p_θ(x|z)
  is kept in an on-disk score cache.
- :class:`~pyterrier_selfsup.training.acrobart.Acrobart` (Algorithm 3) gives the generator
  all k passages at once and adds β·p_η(z_j|x) (β trainable) to the attention logits from the
  target's positions towards passage j's tokens; loss = -log p_θ(x | z_1..z_k, p_η).

This module holds what they share (:class:`RetrieveAndReconstruct`). Queries cut from the
corpus never retrieve the passage they came from (REALM); ``train_passages=False`` freezes
the passage tower, so that only queries are encoded with gradients (RAG).

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
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.source import Query, training_queries
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.generator import Generator
from pyterrier_selfsup.retrieval.ann import search_stage
from pyterrier_selfsup.retrieval.base import top_k_excluding
from pyterrier_selfsup.retrieval.dense import flex_index, fresh_index
from pyterrier_selfsup.training.dual_encoder_trainer import DualEncoderTrainer
from pyterrier_selfsup.training.settings import ReconstructionSettings

logger = logging.getLogger(__name__)


class RetrieveAndReconstruct(DualEncoderTrainer):
    """What RUMBArt and ACROBArT share: the stale MIPS index, its refreshes, retrieval of
    the k candidates and their re-scoring by the current encoder.

    Args:
        encoder: the dual encoder to train.
        generator: the generator whose reconstruction of each query teaches it.
        collection: the corpus, or its name.
        settings: :class:`~pyterrier_selfsup.training.settings.RumbartSettings` or
            :class:`~pyterrier_selfsup.training.settings.AcrobartSettings` (None: the defaults).
        run, **changes: as for :class:`~pyterrier_selfsup.training.Trainer`.

    Each refresh rebuilds the index from the current passage encoder and logs its time as
    ``refresh seconds``; with ``train_passages=False`` a refresh only re-retrieves. Resuming
    rebuilds the index from the checkpoint's encoder, so a resumed run matches one never stopped
    only when the checkpoint falls on a refresh. Under ``torchrun`` each process computes the
    loss of its share of each batch's queries, and a refresh is encoded in shards.

    With ``refresh='async'`` (one process only) a thread encodes a copy of the weights while
    training goes on, and the new index is swapped in after the first step that finds it ready;
    the log records each swap's ``staleness``. Such a run depends on timing.
    """
    Settings = ReconstructionSettings
    marker = 'refresh seconds'
    data_parallel = True

    def __init__(self, encoder: DualEncoder, generator: Generator,
                 collection: str | Collection,
                 settings: ReconstructionSettings | None = None,
                 run: RunContext | None = None, **changes):
        super().__init__(encoder, collection, settings, run, **changes)
        self.generator = generator
        self._index = None
        self._index_dir: tempfile.TemporaryDirectory | None = None
        # refresh='async': the step of the weights being encoded, and the build's future
        self._building: tuple[int, Future] | None = None
        self._builder: ThreadPoolExecutor | None = None

    def on_fit_start(self):
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
        super().save_extra(path)
        if self.generator.trainable:
            self.generator.save_pretrained(path / 'generator')

    def load_extra(self, path: Path):
        if self.generator.trainable:
            from safetensors.torch import load_file
            self.generator.model.load_state_dict(
                load_file(path / 'generator' / 'model.safetensors'), strict=False)

    # -- data and index ---------------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> list[Query]:
        return training_queries(topics)

    def on_epoch_start(self, examples: list[Query], epoch: int, resumed: bool):
        if self._index is None:
            self.refresh(examples, initial=True)

    def on_step_end(self, examples: list[Query]):
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
        """``refresh='async'``: a copy of the encoder as it is now, encoded into a fresh index on
        a thread of its own (on a GPU, a CUDA stream of its own)."""
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

    def _swap(self, examples: list[Query], wait: bool):
        """``refresh='async'``: the index being built, swapped in if it is ready (or once it is,
        with ``wait``); logs its build time and its staleness."""
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

    def _replace_index(self, index, directory: tempfile.TemporaryDirectory | None):
        """Searches ``index`` (kept in ``directory``) from now on; the last one's files go."""
        old, self._index, self._index_dir = self._index_dir, index, directory
        if old is not None:
            old.cleanup()

    def refresh(self, examples: list[Query], initial: bool = False):
        """Rebuilds the MIPS index from the current passage encoder (at the start, the cached
        FlexIndex; with a frozen passage tower, only a re-retrieval)."""
        t0 = time.time()
        if initial:
            self._index = flex_index(self.collection, self.encoder, cache_dir=self.cache_dir,
                                     verbose=self.shows)
        elif self.settings.train_passages:
            self._replace_index(*fresh_index(self.collection, self.encoder, verbose=self.shows))
        self.train_mode(True)
        self.log.append({'step': self.state.get('step', 0), 'refresh seconds': time.time() - t0})
        logger.info('MIPS index %s in %.0f s', 'built' if initial else 'refreshed',
                    time.time() - t0)
        self.after_refresh(examples)

    def after_refresh(self, examples: list[Query]):
        """After each (re)build of the index (RUMBArt fills its teacher cache here)."""

    def retrieve(self, query_vectors: np.ndarray, batch: list[Query]) -> list[list[str]]:
        """Each query's top k from the stale index, excluded passages skipped."""
        top = top_k_excluding(search_stage(self._index, 'auto', 1000), batch, self.settings.k,
                              query_vectors=query_vectors)
        return [top[q.qid] for q in batch]

    def candidates(self,
                   batch: list[Query]) -> tuple[list[list[str]], list[list[str]], torch.Tensor]:
        """(docnos, texts, retriever logits (b, k)) for a batch, the logits with gradients."""
        queries = self.encoder.encode([q.query for q in batch], 'query')
        docnos = self.retrieve(queries.detach().float().cpu().numpy(), batch)
        width = min(len(d) for d in docnos)
        # (a corpus smaller than k + the excluded passages: rows cut to the shortest)
        docnos = [d[:width] for d in docnos]
        texts = self.texts(docnos)
        if self.settings.train_passages:
            passages = (self.encoder.encode([t for row in texts for t in row], 'passage')
                        .view(len(batch), width, -1))
        else:  # the frozen tower's vectors, as the index holds them
            index_docnos, vectors, _ = self._index.payload()
            found = np.asarray(vectors[index_docnos.inv[[d for row in docnos for d in row]]],
                               dtype=np.float32)
            passages = torch.from_numpy(found.reshape(len(batch), width, -1)).to(queries.device)
        logits = torch.einsum('bd,bkd->bk', queries, passages) / self.encoder.temperature
        return docnos, texts, logits

    def texts(self, docnos: list[list[str]]) -> list[list[str]]:
        flat = [d for row in docnos for d in row]
        lookup = dict(zip(flat, self.collection.texts(flat))) if flat else {}
        return [[lookup[d] for d in row] for row in docnos]
