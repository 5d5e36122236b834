"""RUMBArt (thesis §4.3.1, Algorithms 1-2): the retriever marginalises over its k retrieved
passages, loss = -log Σ_k p_η(z_k|x) p_θ(x|z_k), computed in log space; the shared retrieval
and refreshes are :class:`~pyterrier_selfsup.training.reconstruction.RetrieveAndReconstruct`'s.

    trainer = Rumbart(DualEncoder.from_pretrained(MINILM),
                      Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF), 'classic/adi')
"""
import logging
import time

import numpy as np
import pandas as pd
import torch

from pyterrier_selfsup.data.queries.source import Query
from pyterrier_selfsup.models.score_cache import score_cache_dir
from pyterrier_selfsup.training.hooks import RANKING_CHUNK
from pyterrier_selfsup.training.losses import marginal_nll, reconstruction_kl
from pyterrier_selfsup.training.reconstruction import RetrieveAndReconstruct
from pyterrier_selfsup.training.settings import RumbartSettings

logger = logging.getLogger(__name__)


class Rumbart(RetrieveAndReconstruct):
    """RUMBArt: marginalisation over the k retrieved passages (thesis §4.3.1).

    A frozen generator's log p_θ(x|z) goes through an on-disk cache: after each refresh the pairs
    of all training queries are scored in one pass, and a batch only looks them up; a trainable
    generator is scored with gradients. ``teacher_temperature`` divides log p_θ before
    marginalising. With ``target='art'`` the loss is ART's KL divergence (:func:`reconstruction_kl`)
    instead of the thesis' marginal likelihood (:func:`marginal_nll`)."""
    description = 'RUMBArt'
    # its loss moves with the teacher's log p(x|z): the curve plots its excess over the bound
    curve, curve_label = 'excess loss', 'loss above its lower bound'

    Settings = RumbartSettings

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._teacher = None
        # the teacher's scores since the last fill, by (query, passage), for the steps' look-ups
        self._scores: dict[tuple[str, str], float] = {}
        if not self.generator.trainable:
            self._teacher = self.generator.scorer(normalise='sum', cache=score_cache_dir(
                self.collection, self.generator, self.cache_dir))

    def after_refresh(self, examples: list[Query]):
        if self._teacher is None:
            return
        t0 = time.time()
        mine = self.local_batch(examples)  # (all of them in one process)
        vectors = self.encoder.encode_queries([q.query for q in mine])
        self.train_mode(True)
        retrieved = {}
        for start in range(0, len(mine), RANKING_CHUNK):
            part = mine[start:start + RANKING_CHUNK]
            retrieved.update(zip([q.qid for q in part],
                                 self.retrieve(vectors[start:start + len(part)], part)))
        retrieved = self.gather(retrieved)
        docnos = [retrieved[q.qid] for q in examples]
        # one call for all pairs: the scorer goes by passage and commits as it goes
        pairs = self._pairs(examples, docnos, self.texts(docnos))
        self._teacher.fill(pairs)
        self._scores = {}
        self._remember(pairs)  # (every process: the cache holds all of them now)
        self.log.append({'step': self.state.get('step', 0), 'teacher seconds': time.time() - t0})

    def _remember(self, pairs: pd.DataFrame):
        """The teacher's scores of ``pairs``, through the score cache, kept in memory."""
        scored = self._teacher(pairs)
        self._scores.update(zip(zip(scored['query'], scored['docno']), scored['score']))

    @staticmethod
    def _pairs(batch: list[Query], docnos: list[list[str]], texts: list[list[str]]) -> pd.DataFrame:
        return pd.DataFrame({'qid': [q.qid for q, row in zip(batch, docnos) for _ in row],
                             'query': [q.query for q, row in zip(batch, docnos) for _ in row],
                             'docno': [d for row in docnos for d in row],
                             'text': [t for row in texts for t in row]})

    def teacher_logp(self, batch: list[Query], docnos: list[list[str]],
                     texts: list[list[str]]) -> torch.Tensor:
        """log p_θ(x | z) for each query's candidates, (b, k)."""
        if self._teacher is not None:
            keys = [(q.query, d) for q, row in zip(batch, docnos) for d in row]
            if any(key not in self._scores for key in keys):
                # candidates found since the last fill go through the score cache
                self._remember(self._pairs(batch, docnos, texts))
            values = torch.tensor(np.array([self._scores[key] for key in keys], dtype=np.float32))
        else:
            frame = self._pairs(batch, docnos, texts)
            values = self.generator.log_likelihood(frame['query'].tolist(), frame['text'].tolist())
        return values.view(len(batch), -1).to(self.encoder.device)

    def loss(self, batch: list[Query], rng: np.random.Generator) -> torch.Tensor:
        mine = self.local_batch(batch)
        docnos, texts, logits = self.candidates(mine)
        teacher = self.teacher_logp(mine, docnos, texts) / self.settings.teacher_temperature
        art = self.settings.target == 'art'
        rows = (reconstruction_kl if art else marginal_nll)(logits, teacher, per_row=True)
        # the marginal loss cannot go below -mean(max_z log p(x|z)), the KL not below 0: the
        # excess is what the retriever can still gain
        floor = 0.0 if art else teacher.max(dim=1).values
        self.record('excess loss', (rows.detach() + floor).mean().item(), len(mine))
        return rows.sum() / len(batch)  # this process's share of the batch's mean


# -- ACROBArT ---------------------------------------------------------------------------

# ACROBArT's queries whose k passages go through the generator at once (Acrobart's generator_batch)
