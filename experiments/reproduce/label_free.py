"""Label-free distillation of a fused teacher into all-MiniLM-L6-v2, in groups of runs.

Groups, each one results file (written as soon as the group finishes), each evaluated with
paired t-tests (Holm) against its first pipeline; `GROUPS` lists them. The main ones:

  label_free        the acceptance table: BM25, MiniLM, the teacher as a retriever, the
                    distilled dense retriever (corpus-only, the shipped settings), and the
                    distilled retriever fused with BM25 at query time (a reference), on
                    scifact test, cranfield, vaswani, CISI and ADI; wall time per collection
  label_free_seeds  scifact corpus-only under seeds 0, 1, 2
  label_free_log, label_free_log_scifact  distillation with a query log

Labels are never used for training; `distill` is trained once per corpus and settings and
cached (the two scifact splits share their corpus, so one model serves both). Training
curves and logs go to experiments/results/distill_curves/.

    python experiments/reproduce/label_free.py [group ...]

A group started on an empty cache records a first run's whole time on each collection (every
index built, every query written, every model trained); the README's first-run row reads it:

    SELFSUP_CACHE=$(mktemp -d) python experiments/reproduce/label_free.py label_free
"""
import json
import math
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from pyterrier_selfsup._cache import cache_root
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.source import QuerySource
from pyterrier_selfsup.data.queries.written import _queries_each, text_if_any
from pyterrier_selfsup.harness import trained
from pyterrier_selfsup.harness.experiment import run_experiment, write_results
from pyterrier_selfsup.harness.methods import bm25_and_minilm, source_topics
from pyterrier_selfsup.harness.pipelines import get_pipeline

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SCIFACT = ['beir/scifact/train', 'beir/scifact/test']
FIVE = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
TRAIN = 'distill:queries=beir/scifact/train'
# the TSDAE-adapted student of experiments/reproduce/tsdae.py at its defaults (scifact's corpus), built first
sys.path.insert(0, str(Path(__file__).resolve().parent))
import tsdae  # noqa: E402
from curves import copy_training_curves  # noqa: E402

TSDAE = tsdae.default_out('beir/scifact/train', 8000, 1000, 0)
# SmolLM2's chat prompt shown 3 (passage, query) pairs of another collection than the one adapted to
PAIRS_CRANFIELD = 'distill:query_style=chat,example_pairs=cranfield'
PAIRS_CISI = 'distill:query_style=chat,example_pairs=classic/cisi'
# GPL's recipe as it is since issue 70 (its miners, raw margins, dot products at 350 tokens, fp32),
# with SmolLM2 writing distill's queries (its sampling, not BEIR's), all-MiniLM-L6-v2 mining in
# the miners' place (they are not on these machines) and BM25 + MiniLM fused in the cross-encoder's place
GPL_NOW = 'gpl:generator=smollm2,top_k=none,query_tokens=32,teacher=0*miners+fused'
# Each group as it ran, at today's settings (the groups of earlier commits: after query_stats).
GROUPS = {
    'label_free': (FIVE, ['bm25', 'minilm', 'teacher', 'distill', 'hybrid']),
    'label_free_seeds': (['beir/scifact/test'], ['bm25', 'dual_encoder', 'distill', 'distill:seed=1', 'distill:seed=2']),
    # issue 50 item 1, the second step: bare example queries were copied word for word (writer_realism), so the
    # writers are shown passages with their queries instead: 3 of cranfield's topics, each after a passage judged
    # relevant to it (cranfield's qrels are read; scifact's never), as chat turns or InPars' completion prompt.
    # At the shipped training (one round, the passage side frozen), beside the default writer and Qwen's chat.
    # Qwen shown pairs is a group of its own: its longer prompt writes at 2.7 s a passage here (30 minutes)
    'writer_pairs': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill', 'distill:generator=qwen,query_style=chat',
                               'distill:query_style=chat,example_pairs=cranfield', 'distill:example_pairs=cranfield']),
    # the one writer whose change from the start was clear of 0 on scifact train (SmolLM2's chat shown pairs):
    # a setting, or one training's luck? Three seeds of it beside three of the default
    'writer_pairs_seeds': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill', 'distill:seed=1', 'distill:seed=2'] + [
        f'distill:query_style=chat,example_pairs=cranfield{seed}' for seed in ('', ',seed=1', ',seed=2')]),
    # does the writer above the default on scifact train (SmolLM2's chat shown cranfield's pairs, 3 seeds) hold on
    # the other local collections? Cranfield is shown CISI's pairs instead (never its own qrels), and scifact is
    # shown CISI's too, to say whether the collection the pairs come from matters
    'writer_pairs_collections': (['classic/adi', 'classic/cisi', 'vaswani'],
                                 ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CRANFIELD]),
    'writer_pairs_cisi': (SCIFACT + ['cranfield'], ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CISI]),
    'writer_pairs_qwen': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill',
                                    'distill:generator=qwen,query_style=chat,example_pairs=cranfield']),
    # issue 50 item 2: the training levers on scifact, each against the shipped corpus-only training (one
    # round, the passage side frozen): GPL's Margin-MSE over the teacher's candidates, the teacher's depth (10,
    # 30 shipped, 100), in-batch negatives off (false negatives on a small corpus), and TSDAE on the corpus
    # before distillation (the TSDAE model alone beside it)
    'corpus_only_training': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill', 'distill:loss=margin_mse',
                                       'distill:depth=10', 'distill:depth=100', 'distill:in_batch=false',
                                       f'dual_encoder:model_name={TSDAE}', f'distill:model_name={TSDAE}']),
    # issue 50 item 1, coverage: every passage given 1, then 3 SmolLM2 queries (n_queries = passages x per_passage),
    # against the default's 2,000 (3 a passage for 667 of scifact's 5,183), at the shipped training; each point a
    # group of its own, so that it is written when it ends. On ADI (82 passages) the default writes 10 a passage
    'coverage_scifact_1': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill', 'distill:n_queries=5183,per_passage=1']),
    'coverage_scifact_3': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill', 'distill:n_queries=15549,per_passage=3']),
    'coverage_adi': (['classic/adi'], ['bm25', 'dual_encoder', 'teacher', 'distill:n_queries=82,per_passage=1',
                                       'distill:n_queries=246,per_passage=3', 'distill']),
    'coverage_cranfield': (['cranfield'], ['bm25', 'dual_encoder', 'teacher', 'distill', 'distill:n_queries=1400,per_passage=1',
                                           'distill:n_queries=4200,per_passage=3']),
    # the coverage curve with SmolLM2's chat shown another collection's pairs (writer_pairs_collections): every
    # passage given 1, then 3 queries, against the 2,000 of its default size; ADI, 82 passages, also at 10
    'coverage_pairs_scifact_1': (SCIFACT, ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CRANFIELD,
                                           f'{PAIRS_CRANFIELD},n_queries=5183,per_passage=1']),
    'coverage_pairs_adi': (['classic/adi'], ['bm25', 'dual_encoder', 'teacher', 'distill'] + [
        f'{PAIRS_CRANFIELD}{size}' for size in (',n_queries=82,per_passage=1', ',n_queries=246,per_passage=3', '')]),
    'coverage_pairs_cranfield_1': (['cranfield'], ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CISI,
                                                   f'{PAIRS_CISI},n_queries=1400,per_passage=1']),
    'coverage_pairs_cranfield_3': (['cranfield'], ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CISI,
                                                   f'{PAIRS_CISI},n_queries=4200,per_passage=3']),
    'coverage_pairs_cisi_1': (['classic/cisi'], ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CRANFIELD,
                                                 f'{PAIRS_CRANFIELD},n_queries=1460,per_passage=1']),
    'coverage_pairs_cisi_3': (['classic/cisi'], ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CRANFIELD,
                                                 f'{PAIRS_CRANFIELD},n_queries=4380,per_passage=3']),
    # vaswani, the largest local collection (11,429 passages), at 1 a passage with the same writer (its prompts'
    # common head prefilled once since d16595a); its writing alone takes hours on 2 cores, and a stopped run
    # resumes it after the last batch written (since ee4f7c0)
    'coverage_pairs_vaswani_1': (['vaswani'], ['bm25', 'dual_encoder', 'teacher', 'distill', PAIRS_CRANFIELD,
                                               f'{PAIRS_CRANFIELD},n_queries=11429,per_passage=1']),
    # the acceptance tables of issue 30, the query-log setting at the shipped settings: scifact test from the
    # train split's texts (3 seeds), the other four two-fold over their own topic texts
    'label_free_log_scifact': (['beir/scifact/test'], ['bm25', 'minilm', 'teacher', TRAIN, f'{TRAIN},seed=1',
                                                       f'{TRAIN},seed=2', 'hybrid:queries=beir/scifact/train']),
    'label_free_log': (FIVE[1:], ['bm25', 'minilm', 'teacher', 'distill:queries=crossfold',
                                  'hybrid:queries=crossfold']),
    # issue 70 item 3: the same table for GPL's recipe as GPL runs it (GPL_NOW). One table:
    # python experiments/tools/change_table.py gpl_now_adi gpl_now_cranfield gpl_now_cisi gpl_now_scifact
    # gpl_now_vaswani --versus distill --out gpl_now
    **{f'gpl_now_{name}': ([collection], ['bm25', 'dual_encoder', 'teacher', 'distill', GPL_NOW])
       for name, collection in (('adi', 'classic/adi'), ('cranfield', 'cranfield'), ('cisi', 'classic/cisi'),
                                ('scifact', 'beir/scifact/train'), ('vaswani', 'vaswani'))},
}


class SampledPlan(NamedTuple):
    """How many queries :func:`sampled_queries` writes: ``each`` for each of ``passages``
    passages, and whether it keeps ``n`` of them ``spread`` over the passages."""
    passages: int
    each: int
    spread: bool

    @property
    def written(self) -> int:
        return self.passages * self.each


def sampled_plan(collection: Collection, n: int, per_passage: int) -> SampledPlan:
    """What :func:`sampled_queries` writes on ``collection`` for ``n`` queries, ``per_passage``
    a passage, without writing them.

        sampled_plan(Collection('cranfield'), 1400, 1)   # 1,398 passages, 2 each, spread
    """
    wanted = math.ceil(n / per_passage)
    passages = wanted
    if collection.docs_count is None or collection.docs_count < 2 * wanted:
        passages = min(wanted, sum(text_if_any(doc) is not None
                                   for doc in collection.corpus_iter()))
    each = _queries_each(n, per_passage, passages) if passages else per_passage
    return SampledPlan(passages, each, each > per_passage and passages * each > n)


def source_in_top(corpus: Collection, topics, k: int = 10) -> float:
    """The share of generated queries whose source passage the start teacher (BM25 + MiniLM) ranks in its top k."""
    ranked = bm25_and_minilm(corpus, depth=100)(topics[['qid', 'query']])
    top = set(zip(ranked.loc[ranked['rank'] < k, 'qid'], ranked.loc[ranked['rank'] < k, 'docno']))
    return float(np.mean([(q, d) in top for q, d in zip(topics['qid'], topics['source_docno'])]))


def query_stats(pipelines, collection: str) -> list:
    """For each trained distill pipeline: its training queries (how many were distinct, their
    length, the passages they cover) and, from its training log, its rounds and time."""
    lines, seen = [], set()
    corpus = Collection(collection)
    for spec, fold, directory in [(spec, fold, directory) for spec in map(get_pipeline, pipelines)
                                  for fold, directory in enumerate(spec.model_dirs(corpus))]:
        if spec.method != 'distill' or directory in seen:  # hybrid reads distill's model
            continue
        seen.add(directory)
        log_path = directory / 'training_log.jsonl'
        if not log_path.exists():
            continue
        log = [json.loads(line) for line in log_path.read_text().splitlines()]
        rounds = [r for r in log if 'round' in r]
        trained_rounds = len({r['epoch'] for r in log if 'loss' in r})  # a round that stopped training took no step
        steps = [r for r in log if 'loss' in r]
        seconds = steps[-1]['time'] - steps[0]['time'] if len(steps) > 1 else 0.0
        line = (f'{spec.name}{f" (fold {fold})" if len(spec.model_dirs(corpus)) > 1 else ""} on {corpus.corpus_id}: '
                f'{trained_rounds} round(s), {len(steps)} steps, {seconds:.0f} s of steps')
        settings = trained.training_settings('distill', spec.settings)
        if settings['queries'] in ('sampled', 'titles'):
            n = settings['n_queries']
            # sampled: as sampled_queries writes them, repeats dropped; titles: one a document, repeats dropped
            plan = (sampled_plan(corpus, n, settings['per_passage']) if settings['queries'] == 'sampled'
                    else SampledPlan(min(n, corpus.docs_count or n), 1, False))
            written = plan.written
            typed = trained.typed_settings('distill', spec.settings)
            topics = source_topics(corpus, QuerySource.of(typed), generator=typed.generator)
            distinct = len(topics)
            if plan.spread:
                # more written than asked for, n of the distinct ones kept over all the passages
                kept = f'{distinct} kept of {written} written (n_queries, spread over the passages)'
            else:
                kept = f'{distinct} distinct of {written} written (distinct fraction {distinct / written:.3f})'
            line += (f'; {kept}, '
                     f'{np.mean([len(q.split()) for q in topics["query"]]):.1f} words on average, covering '
                     f'{topics["source_docno"].nunique()} of {corpus.docs_count} passages '
                     f'({topics["source_docno"].nunique() / corpus.docs_count:.3f}); specificity: the teacher ranks a '
                     f'query\'s source passage in its top 10 for {source_in_top(corpus, topics):.3f} of them')
        overlaps = [f'{r["teacher overlap"]:.3f}' for r in rounds if 'teacher overlap' in r]
        if overlaps:
            line += f'; teacher top-10 overlap with the previous round: {", ".join(overlaps)}'
        said = next((r for r in log if 'verdict' in r), None)
        if said:
            line += f'; verdict: {said["verdict"]}'
        lines.append(line)
    return lines


# Groups that ran at earlier commits, whose settings have since been removed or changed, are
# defined in this file at those commits, where they run (`git worktree add DIR COMMIT`); their
# results files stay, each naming the commit that wrote it:
# - 4400990: distill_longer, query_log_choices_2, query_log_small, corpus_only_levers,
#   query_log_layers, query_log_layers_small
# - 0614091: distill_choices, distill_sources, distill_filter, label_free_queries,
#   query_log_choices, query_log_verdict, query_log_shipped, corpus_only_qwen, writer_realism,
#   corpus_only_generalise, corpus_only_generalise_vaswani, corpus_only_one_round,
#   corpus_only_seeds, corpus_only_settings
# - 79a912a: gpl_adi, gpl_cranfield, gpl_cisi, gpl_scifact, gpl_vaswani


def cache_state() -> str:
    """Whether the cache ($SELFSUP_CACHE) held anything when a group started: where it was
    empty, the group's set-up times are a first run's (models and collections downloaded)."""
    folder = cache_root()
    if not folder.exists() or not any(folder.iterdir()):
        return ('empty at the start: every index, written query and trained model was built in '
                'this run (the models and collections were already downloaded)')
    return 'reused: what an earlier run had built, written or trained was read from it'


def main(groups):
    for group in groups:
        collections, pipelines = GROUPS[group]
        if any(str(TSDAE) in p for p in pipelines):
            tsdae.main([])  # (once: its defaults write TSDAE)
        started, cache = time.time(), cache_state()
        result = run_experiment(collections, pipelines, name=group, run=RunContext(verbose=True))
        result.header['cache'] = cache
        paths = write_results(result, RESULTS)
        # one line a trained model: the splits of one corpus share their models (scifact train and test)
        corpora = {Collection(c).corpus_id: c for c in reversed(collections)}
        stats = sum((query_stats(pipelines, c) for c in reversed(list(corpora.values()))), [])
        wall = [f'{r.collection}: {sum(r.setup_seconds.values()):.0f} s set-up and training '
                f'({", ".join(f"{k} {v:.0f} s" for k, v in r.setup_seconds.items())}); '
                f'{r.seconds:.0f} s in all' for r in result.results]
        with open(paths[0], 'a') as fh:
            fh.write('\n## Training\n\n' + ''.join(f'- {s}\n' for s in stats))
            fh.write('\n## Wall time per collection\n\n' + ''.join(f'- {w}\n' for w in wall))
            fh.write(f'\nGroup wall time: {time.time() - started:.0f} s.\n')
        for collection in dict.fromkeys(Collection(c).corpus_id for c in collections):
            name = next(c for c in collections if Collection(c).corpus_id == collection)
            copy_training_curves(pipelines, name, RESULTS / 'distill_curves' / collection.replace('/', '-'))


if __name__ == '__main__':
    main(sys.argv[1:] or list(GROUPS))
