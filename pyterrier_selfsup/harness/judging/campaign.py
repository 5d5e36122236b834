"""A judging campaign: the pooled, blinded passages of two or more pipelines for a set of
queries, and the grades a user gives them, kept in one directory.

The directory holds ``campaign.json`` (the collection, the pipelines' names, the pool's depth),
``queries.tsv`` (the queries, in the order they are judged), ``pool.tsv`` (each query's pooled
passages in the shuffled order shown), ``runs/<n>.res`` (each pipeline's run, TREC format, for
the report) and ``grades.jsonl``, the append-only log of every grade: each line is flushed and
synced to disk before the grade is acknowledged, so a closed tab or a killed server loses none,
and the last grade of a passage wins. ``qrels.txt`` and ``topics.tsv``, the standard files the
report and ``selfsup run --qrels`` read, are rewritten from the log after each grade.
"""
import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd
import pyterrier as pt

from pyterrier_selfsup._cache import written_whole
from pyterrier_selfsup.harness.judging import DEPTH

logger = logging.getLogger(__name__)
GRADES = {0: 'not relevant', 1: 'partly relevant', 2: 'relevant'}
CAMPAIGN_FILE, QUERIES_FILE, POOL_FILE = 'campaign.json', 'queries.tsv', 'pool.tsv'
GRADES_FILE, QRELS_FILE, TOPICS_FILE, RUNS_DIR = 'grades.jsonl', 'qrels.txt', 'topics.tsv', 'runs'


class CampaignError(ValueError):
    """A campaign directory that cannot be created or read as asked."""


@dataclass(frozen=True)
class Passage:
    """One pooled passage of a query, as the page shows it: no pipeline is named."""
    qid: str
    docno: str
    text: str


class Campaign:
    """A judging campaign in ``directory`` (see the module's docstring for its files).

    Create one with :meth:`create`, reopen it with ``Campaign(directory)``; grade with
    :meth:`grade`, and read the standard files it writes, or :func:`~.reporting.report`.

        campaign = Campaign.create('judged', collection, {'bm25': bm25, 'minilm': dense},
                                   topics)
        campaign.grade('1', 'doc-7', 2)
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        if not (self.directory / CAMPAIGN_FILE).is_file():
            raise CampaignError(f'{self.directory} is not a judging campaign (it has no '
                                f'{CAMPAIGN_FILE}); start one with `selfsup judge`')
        self.meta = json.loads((self.directory / CAMPAIGN_FILE).read_text())
        self.queries = _read_tsv(self.directory / QUERIES_FILE, ['qid', 'query'])
        pool = _read_tsv(self.directory / POOL_FILE, ['qid', 'docno', 'text'])
        self._pool: dict[str, list[Passage]] = {}
        for row in pool.itertuples(index=False):
            self._pool.setdefault(row.qid, []).append(Passage(row.qid, row.docno, row.text))
        self._grades: dict[tuple[str, str], int] = {}
        path = self.directory / GRADES_FILE
        if path.is_file():
            text = path.read_text(encoding='utf8')
            if text and not text.endswith('\n'):  # (a line cut short: the next starts anew)
                with open(path, 'a', encoding='utf8') as log:
                    log.write('\n')
            for line in text.splitlines():
                if line.strip():  # (a line cut short by a crash mid-write is not a grade)
                    try:
                        record = json.loads(line)
                        self._grades[record['qid'], record['docno']] = int(record['grade'])
                    except (ValueError, KeyError, TypeError):
                        continue

    @classmethod
    def create(cls, directory: str | Path, collection,
               pipelines: Mapping[str, pt.Transformer],
               queries: pd.DataFrame | None = None, *, depth: int = DEPTH,
               seed: int = 0) -> 'Campaign':
        """A new campaign in ``directory`` (which must not hold one): each of ``pipelines``
        (names to transformers, the first the baseline) retrieves its top ``depth`` for each
        of ``queries`` (``qid`` and ``query``; none: the user types them into the page), and
        the union, without duplicates, is shuffled by ``seed``.

        Args:
            directory: the campaign's directory (created).
            collection: the :class:`~pyterrier_selfsup.Collection` the passages come from.
            pipelines: two or more named retrieval pipelines.
            queries: the queries to judge.
            depth: how many of each pipeline's results are pooled (10: what nDCG@10 reads).
            seed: the shuffle's seed."""
        directory = Path(directory)
        if (directory / CAMPAIGN_FILE).exists():
            raise CampaignError(f'{directory} holds a campaign already: reopen it with '
                                f'`selfsup judge --dir {directory}`, or choose another directory')
        if len(pipelines) < 2:
            raise CampaignError('a judging campaign compares two or more pipelines; '
                                f'given: {list(pipelines)}')
        directory.mkdir(parents=True, exist_ok=True)
        (directory / RUNS_DIR).mkdir(exist_ok=True)
        meta = {'collection': collection.name, 'source': collection.source,
                'pipelines': list(pipelines), 'depth': depth,
                'seed': seed, 'created': time.strftime('%Y-%m-%d %H:%M:%S %Z')}
        _write_tsv(directory / QUERIES_FILE, pd.DataFrame(columns=['qid', 'query']))
        _write_tsv(directory / POOL_FILE, pd.DataFrame(columns=['qid', 'docno', 'text']))
        for i in range(len(pipelines)):
            (directory / RUNS_DIR / f'{i}.res').touch()
        _write(directory / CAMPAIGN_FILE, json.dumps(meta, indent=2) + '\n')
        campaign = cls(directory)
        if queries is not None and len(queries):
            campaign.add_queries(queries, collection, pipelines)
        return campaign

    @classmethod
    def reopened(cls, directory: str | Path, collection=None,
                 pipelines: Sequence[str] | None = None) -> Optional['Campaign']:
        """The campaign in ``directory``, or None where it holds none. A ``collection`` or
        ``pipelines`` (their names) given must be the campaign's: else a CampaignError."""
        if not (Path(directory) / CAMPAIGN_FILE).is_file():
            return None
        campaign = cls(directory)
        for given, held in ((collection.name if collection else None, campaign.meta['collection']),
                            (list(pipelines) if pipelines else None, campaign.pipelines)):
            if given and given != held:
                raise CampaignError(f'{directory} is a campaign of {held}, not {given}: choose '
                                    'another directory (--dir) for a new campaign')
        return campaign

    def collection(self):
        """The campaign's collection, reopened (a file of one's own by its path)."""
        from pyterrier_selfsup.data.collections import Collection
        collection = Collection(self.meta.get('source') or self.meta['collection'])
        if collection.name != self.meta['collection']:
            raise CampaignError(f'{self.meta["source"]} has changed since this campaign pooled '
                                'its passages: start a new campaign in another directory')
        return collection

    @property
    def pipelines(self) -> list[str]:
        """The pipelines' names, the baseline first."""
        return list(self.meta['pipelines'])

    def add_queries(self, queries: pd.DataFrame, collection,
                    pipelines: Mapping[str, pt.Transformer]):
        """Pools each pipeline's top results for ``queries`` (``qid``, ``query``) and appends
        them to the campaign; returns the qids added. A query whose text is there already is
        skipped, a query id taken already gets a new one, and a query that no pipeline finds
        anything for is left out (with a warning).

        A pipeline's top ``depth`` is its first ``depth`` by rank, and with them every result
        that ties the last one's score, so that nDCG@10 reads no unjudged passage however the
        evaluation breaks ties."""
        if list(pipelines) != self.pipelines:
            raise CampaignError(f'this campaign pools {self.pipelines}; given {list(pipelines)}')
        queries = queries[['qid', 'query']].astype(str)
        queries = queries.assign(query=queries['query'].map(lambda q: ' '.join(q.split())))
        known = set(self.queries['query'])
        queries = queries[(queries['query'] != '') & ~queries['query'].isin(known)]
        queries = queries.drop_duplicates('query').reset_index(drop=True)
        taken = set(self.queries['qid'])
        fresh = []
        for qid in queries['qid']:
            new, n = qid, 1
            while new in taken:
                n += 1
                new = f'{qid}-{n}'
            taken.add(new)
            fresh.append(new)
        queries['qid'] = fresh
        if queries.empty:
            return []
        runs = [system(queries)[['qid', 'docno', 'rank', 'score']] for system in pipelines.values()]
        pooled = []
        for qid in queries['qid']:
            docnos = list(dict.fromkeys(d for run in runs
                                        for d in _top(run[run['qid'] == qid], self.meta['depth'])))
            random.Random(f'{self.meta["seed"]}:{qid}').shuffle(docnos)
            pooled += [(qid, d) for d in docnos]
        found = {q for q, _ in pooled}
        if len(found) < len(queries):
            logger.warning('no pipeline found anything for %d queries, left out: %s',
                           len(queries) - len(found),
                           ', '.join(repr(q) for q in queries[~queries['qid'].isin(found)]
                                     ['query'].head(5)))
            queries = queries[queries['qid'].isin(found)]
        texts = collection.texts([d for _, d in pooled]) if pooled else []
        pool = pd.DataFrame([(q, d, ' '.join(t.split())) for (q, d), t in zip(pooled, texts)],
                            columns=['qid', 'docno', 'text'])
        # (the pool and then the queries: a query is there only once its passages are; the
        # runs last, whole: a query of a run that a crash left without its pool is never read)
        _write_tsv(self.directory / POOL_FILE,
                   pd.concat([_read_tsv(self.directory / POOL_FILE, ['qid', 'docno', 'text']),
                              pool], ignore_index=True))
        _write_tsv(self.directory / QUERIES_FILE,
                   pd.concat([self.queries, queries], ignore_index=True))
        for i, run in enumerate(runs):
            path = self.directory / RUNS_DIR / f'{i}.res'
            lines = ''.join(f'{r.qid} Q0 {r.docno} {r.rank + 1} {r.score!r} {self.pipelines[i]}\n'
                            for r in run[run['qid'].isin(found)].itertuples(index=False))
            _write(path, path.read_text(encoding='utf8') + lines)
        reopened = Campaign(self.directory)
        self.queries, self._pool = reopened.queries, reopened._pool
        return list(queries['qid'])

    def passages(self, qid: str) -> list[Passage]:
        """The pooled passages of query ``qid``, in the order the page shows them."""
        return list(self._pool.get(qid, []))

    def grade_of(self, qid: str, docno: str) -> int | None:
        """The last grade given to ``docno`` for ``qid``, or None."""
        return self._grades.get((qid, docno))

    def grade(self, qid: str, docno: str, grade: int) -> None:
        """Records ``grade`` (0, 1 or 2: :data:`GRADES`) of ``docno`` for ``qid``: appended to
        the log and synced to disk before this returns, then the qrels and topics rewritten."""
        if grade not in GRADES:
            raise CampaignError(f'a grade is one of {sorted(GRADES)}; given {grade!r}')
        if docno not in {p.docno for p in self._pool.get(qid, [])}:
            raise CampaignError(f'{docno!r} is not pooled for query {qid!r}')
        record = {'qid': qid, 'docno': docno, 'grade': grade, 'time': round(time.time(), 3)}
        with open(self.directory / GRADES_FILE, 'a', encoding='utf8') as log:
            log.write(json.dumps(record) + '\n')
            log.flush()
            os.fsync(log.fileno())
        self._grades[qid, docno] = grade
        self.write_qrels()

    def judged(self, qid: str) -> int:
        """How many of ``qid``'s pooled passages have a grade."""
        return sum((qid, p.docno) in self._grades for p in self._pool.get(qid, []))

    def complete(self) -> list[str]:
        """The queries whose every pooled passage has a grade, in order."""
        return [q for q in self.queries['qid'] if self.judged(q) == len(self._pool.get(q, ()))]

    def progress(self) -> dict[str, int]:
        """Grades given and passages pooled, and queries complete and in all."""
        return {'graded': len(self._grades), 'pooled': sum(map(len, self._pool.values())),
                'complete': len(self.complete()), 'queries': len(self.queries)}

    def qrels(self) -> pd.DataFrame:
        """Every grade as qrels (``qid``, ``docno``, ``label``), the last grade of each pair."""
        return pd.DataFrame([(q, d, g) for (q, d), g in list(self._grades.items())],
                            columns=['qid', 'docno', 'label'])

    def runs(self) -> list[pd.DataFrame]:
        """Each pipeline's run over the campaign's queries, as PyTerrier frames."""
        runs = []
        for i in range(len(self.pipelines)):
            path = self.directory / RUNS_DIR / f'{i}.res'
            runs.append(pt.io.read_results(str(path)).astype({'qid': str, 'docno': str})
                        if path.stat().st_size else
                        pd.DataFrame(columns=['qid', 'docno', 'rank', 'score']))
        return runs

    def write_qrels(self) -> None:
        """Rewrites ``qrels.txt`` (TREC: qid 0 docno grade) and ``topics.tsv`` (qid, query:
        the queries judged in full, the ones the report measures) from the grades."""
        qrels = self.qrels().sort_values(['qid', 'docno'])
        _write(self.directory / QRELS_FILE,
               ''.join(f'{r.qid} 0 {r.docno} {r.label}\n' for r in qrels.itertuples()))
        topics = self.queries[self.queries['qid'].isin(set(self.complete()))]
        _write(self.directory / TOPICS_FILE,
               ''.join(f'{r.qid}\t{r.query}\n' for r in topics.itertuples()))


def _top(run: pd.DataFrame, depth: int) -> list[str]:
    """A run's first ``depth`` by rank, and every result that ties the last one's score."""
    run = run.sort_values('rank')
    top = run.head(depth)
    if len(top) < depth or not len(top):
        return top['docno'].tolist()
    return top['docno'].tolist() + run[(run['score'] == top['score'].iloc[-1])
                                       & ~run['docno'].isin(top['docno'])]['docno'].tolist()


def read_judgements(qrels: str | Path, topics: str | Path | None = None
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The topics and qrels a campaign wrote (or any TREC qrels file with a ``qid<TAB>query``
    topics file; by default ``topics.tsv`` beside the qrels), as PyTerrier frames."""
    qrels = Path(qrels)
    topics = Path(topics) if topics else qrels.with_name(TOPICS_FILE)
    if not topics.is_file():
        raise FileNotFoundError(f'no topics file beside {qrels}: give one (qid<TAB>query a line)')
    frame = pt.io.read_qrels(str(qrels))
    return _read_tsv(topics, ['qid', 'query']), frame


def _read_tsv(path: Path, columns: Sequence[str]) -> pd.DataFrame:
    if not path.is_file() or not path.stat().st_size:
        return pd.DataFrame(columns=list(columns), dtype=str)
    return pd.read_csv(path, sep='\t', names=list(columns), dtype=str, keep_default_na=False,
                       quoting=3, header=None)


def _write_tsv(path: Path, frame: pd.DataFrame) -> None:
    for column in frame.columns:  # (a tab or a line break in a text would split its row)
        frame = frame.assign(**{column: frame[column].astype(str).str.replace(
            r'[\t\r\n]+', ' ', regex=True)})
    with written_whole(path, f'the campaign file {path.name}') as partial:
        frame.to_csv(partial, sep='\t', header=False, index=False, quoting=3)


def _write(path: Path, text: str) -> None:
    with written_whole(path, f'the campaign file {path.name}') as partial:
        partial.write_text(text, encoding='utf8')
