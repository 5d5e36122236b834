"""Several rankings of a query made one by normalised scores: the teacher of the
distillation trainer, and a hybrid retriever in its own right.

Each first stage returns its top ``depth`` for a query, its scores turned into per-query
z-scores over that list; a document a stage did not return takes that stage's lowest z; the
fused score is the weighted sum of the z-scores over the union of the lists. Optional
re-rankers score only the fused top ``rerank_depth`` and join the sum the same way. Where
every first stage is weighted 0 (GPL's ``0*student+ce``), the stages only choose the
candidates (with each query's own ``source_docno``) and the re-rankers alone score them.

    teacher = Fusion({'bm25': bm25, 'dense': minilm})                 # 1:1
    hybrid = Fusion({'bm25': bm25, 'dense': minilm}, weights={'dense': 2})
    with_gen = Fusion({'bm25': bm25, 'dense': minilm},
                      rerankers={'gen': collection.text_loader() >> gen.scorer(cache=...)})

Not PyTerrier's ``bm25 + dense`` (CombSUM of raw scores over the documents both return) nor
``pt.fusion``'s reciprocal-rank fusion, which drops the margins the teacher is made of.
"""
from typing import Optional

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_selfsup.retrieval.base import Retriever


def zscores(results: pd.DataFrame, column: str = 'score') -> pd.Series:
    """Per-query z-scores of ``column`` (a query whose scores are all equal gets zeros)."""
    grouped = results.groupby('qid', sort=False)[column]
    mean, std = grouped.transform('mean'), grouped.transform('std', ddof=0)
    return ((results[column] - mean) / std.where(std > 0, 1.0)).fillna(0.0)


def fuse(runs: dict[str, pd.DataFrame], weights: dict[str, float]) -> pd.DataFrame:
    """The union of ``runs`` (name -> result frame) with a ``z_<name>`` column for each run and
    ``score`` = Σ weights[name] · z_<name>."""
    merged = None
    for name, run in runs.items():
        part = run[['qid', 'docno']].assign(**{f'z_{name}': zscores(run).to_numpy()})
        merged = part if merged is None else merged.merge(part, on=['qid', 'docno'], how='outer')
    for name in runs:
        _lowest_where_missing(merged, f'z_{name}')
    merged['score'] = sum(weights.get(name, 1.0) * merged[f'z_{name}'] for name in runs)
    return merged


def _lowest_where_missing(frame: pd.DataFrame, column: str):
    """Fills ``column`` where a component did not score a document with its lowest value for
    the query (0 where it scored none), in place."""
    lowest = frame.groupby('qid', sort=False)[column].transform('min')
    frame[column] = frame[column].fillna(lowest).fillna(0.0)


def _by_score(frame: pd.DataFrame) -> pd.DataFrame:
    """Each query's rows by descending score, ties by docno."""
    return frame.sort_values(['qid', 'score', 'docno'], ascending=[True, False, True],
                             kind='stable')


class Fusion(Retriever):
    """The union of ``stages``' top ``depth`` ranked by Σ weight · per-query z-score.

    Args:
        stages: name -> first-stage retriever (a query frame in, a result frame out).
        weights: name -> weight (1 for a stage or re-ranker not named).
        depth: how many of each stage's results enter the fusion.
        rerankers: name -> a re-ranker of a result frame, run on the fused top ``rerank_depth``
            only and added like a stage.
        num_results: how many fused results come back per query.
        raw_labels: where the stages only mine and one re-ranker scores, its own scores are the
            result's, not their z-scores (GPL's Margin-MSE labels).
    The result has ``score``, ``rank`` and each component's ``z_<name>``.
    """

    def __init__(self, stages: dict[str, pt.Transformer], *,
                 weights: dict[str, float] | None = None, depth: int = 100,
                 rerankers: dict[str, pt.Transformer] | None = None, rerank_depth: int = 10,
                 num_results: int = 1000, raw_labels: bool = False):
        if not stages:
            raise ValueError('Fusion needs at least one first stage')
        unknown = set(weights or {}) - set(stages) - set(rerankers or {})
        if unknown:
            raise ValueError(f'weights name {", ".join(sorted(unknown))}, which are neither stages '
                             'nor re-rankers')
        self.stages = dict(stages)
        self.weights = dict(weights or {})
        self.depth = depth
        self.rerankers = dict(rerankers or {})
        self.rerank_depth = rerank_depth
        self.num_results = num_results
        self.raw_labels = raw_labels
        self._cut = {name: (stage % depth).compile() for name, stage in self.stages.items()}

    @property
    def mines_only(self) -> bool:
        """Whether the first stages only choose the candidates (every one weighted 0), and the
        re-rankers alone score them."""
        return bool(self.rerankers) and not any(self.weights.get(name, 1.0)
                                                for name in self.stages)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        stage_topics = topics.drop(columns='source_docno', errors='ignore')
        runs = {name: stage(stage_topics) for name, stage in self._cut.items()}
        fused = fuse(runs, self.weights)
        if self.rerankers:
            fused = self._rerank(topics, fused)
        fused = fused.merge(stage_topics, on='qid', how='left')
        fused = pt.model.add_ranks(_by_score(fused))
        return fused[fused['rank'] < self.num_results].reset_index(drop=True)

    def _rerank(self, topics: pd.DataFrame, fused: pd.DataFrame) -> pd.DataFrame:
        mined = fused
        if self.mines_only:
            mined = fused.assign(score=sum(fused[f'z_{name}'] for name in self.stages))
        top = _by_score(mined).groupby('qid', sort=False).head(self.rerank_depth)[['qid', 'docno']]
        if self.mines_only and 'source_docno' in topics.columns:  # each query's own passage too
            own = (topics[['qid', 'source_docno']].dropna()
                   .rename(columns={'source_docno': 'docno'}))
            top = pd.concat([top, own]).drop_duplicates(['qid', 'docno'])
            fused = pd.concat([fused, own.merge(fused[['qid', 'docno']], how='left',
                                                indicator=True)
                               .query('_merge == "left_only"').drop(columns='_merge')])
            for name in self.stages:  # (its stages' lowest where they did not return it)
                _lowest_where_missing(fused, f'z_{name}')
            fused['score'] = fused['score'].fillna(0.0)
        frame = top.merge(topics[['qid', 'query']], on='qid', how='left')
        for name, reranker in self.rerankers.items():
            scored = reranker(frame)
            part = scored[['qid', 'docno']].assign(**{f'z_{name}': zscores(scored).to_numpy(),
                                                      f'raw_{name}': scored['score'].to_numpy()})
            fused = fused.merge(part, on=['qid', 'docno'], how='left')
            if self.mines_only:  # (what no re-ranker scored is no candidate)
                fused = fused[fused[f'z_{name}'].notna()].copy()
            _lowest_where_missing(fused, f'z_{name}')
            fused['score'] = fused['score'] + self.weights.get(name, 1.0) * fused[f'z_{name}']
        if self.raw_labels and self.mines_only and len(self.rerankers) == 1:
            # one labeller: its own scores (z-scores would rescale each query's margins)
            name = next(iter(self.rerankers))
            fused['score'] = self.weights.get(name, 1.0) * fused[f'raw_{name}']
        return fused.drop(columns=[f'raw_{name}' for name in self.rerankers])

    def fuse_rank_cutoff(self, k: int) -> Optional['Fusion']:
        if k < self.num_results:
            return Fusion(self.stages, weights=self.weights, depth=self.depth,
                          rerankers=self.rerankers, rerank_depth=self.rerank_depth, num_results=k,
                          raw_labels=self.raw_labels)
        return None

    def __repr__(self):
        weights = ', '.join(f'{n}={self.weights.get(n, 1.0):g}'
                            for n in [*self.stages, *self.rerankers])
        return f'Fusion({", ".join(self.stages)}; {weights}; depth={self.depth})'


class FusedScores(pt.Transformer):
    """A fusion's scores as a re-ranker: each (query, document) row gets the ``fusion``'s
    score for it, or its lowest for the query (``teacher=0*student+fused``).

        fused = FusedScores(Fusion({'bm25': bm25, 'minilm': minilm}))
        (student % 30) >> fused   # the student's top 30, scored by BM25 and MiniLM fused
    """

    def __init__(self, fusion: 'Fusion'):
        self.fusion = fusion

    def transform(self, results: pd.DataFrame) -> pd.DataFrame:
        if results.empty:
            return results.assign(score=pd.Series(dtype=float))
        queries = results[['qid', 'query']].drop_duplicates('qid')
        scored = self.fusion(queries)[['qid', 'docno', 'score']]
        frame = results.drop(columns=['score', 'rank'], errors='ignore').merge(
            scored, on=['qid', 'docno'], how='left')
        lowest = scored.groupby('qid', sort=False)['score'].min()
        frame['score'] = frame['score'].fillna(frame['qid'].map(lowest)).fillna(0.0)
        return pt.model.add_ranks(_by_score(frame))


def softmax_by_query(results: pd.DataFrame, temperature: float = 1.0) -> np.ndarray:
    """softmax(score / temperature) within each query of a result frame, row-aligned."""
    scaled = results['score'].to_numpy(dtype=np.float64) / temperature
    shifted = (scaled - results.groupby('qid', sort=False)['score'].transform('max').to_numpy()
               / temperature)
    e = np.exp(shifted)
    return e / (pd.Series(e, index=results.index).groupby(results['qid'], sort=False)
                .transform('sum').to_numpy())
