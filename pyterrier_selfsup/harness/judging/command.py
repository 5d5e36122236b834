"""``selfsup judge``: start or reopen a judging campaign and serve its page, or print its report.
"""
import argparse
from pathlib import Path

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness.judging import DEPTH
from pyterrier_selfsup.models.names import MINILM

# the start and the adapted model
DEFAULT_PIPELINES = ['minilm', 'distill']


def add_parser(sub, common: argparse.ArgumentParser) -> None:
    """Adds ``judge`` to the ``selfsup`` command's subcommands."""
    judge = sub.add_parser(
        'judge', parents=[common],
        help='judge two or more pipelines yourself: a page on 127.0.0.1 that turns your grades '
             'into qrels, and a report with its significance (docs/judging.md)')
    judge.add_argument('-c', '--collection', metavar='NAME',
                       help='the collection whose passages are judged (a new campaign)')
    judge.add_argument('-p', '--pipelines', nargs='+', metavar='NAME',
                       help=f'the pipelines compared, the first the baseline (default: '
                            f'{" ".join(DEFAULT_PIPELINES)}: the start and the adapted model)')
    judge.add_argument('--queries', metavar='FILE', type=Path,
                       help='a query log to judge: one query a line, or qid and query fields in '
                            'TSV, CSV or JSON lines (without it, type queries into the page)')
    judge.add_argument('--sample', type=int, metavar='N', help='judge N of the queries, drawn at '
                       'random (by --seed)')
    judge.add_argument('--dir', type=Path, default=Path('selfsup-judging'), metavar='DIR',
                       help='the campaign directory: created, or reopened where it holds one '
                            '(default: selfsup-judging)')
    judge.add_argument('--depth', type=int, default=DEPTH,
                       help=f'the results of each pipeline pooled for a query (default {DEPTH})')
    judge.add_argument('--port', type=int, default=8765, help='the port on 127.0.0.1 (default '
                       '8765; 0: a free one)')
    judge.add_argument('--seed', type=int, default=0, help='the seed of the sample and the shuffle')
    judge.add_argument('--report', type=Path, metavar='DIR',
                       help="print the report of DIR's campaign and stop")
    judge.add_argument('--no-serve', action='store_true',
                       help='pool the queries and stop, without serving the page')


def how_to_judge(spec, collection: str, pipeline: str) -> str:
    """What ``selfsup train`` says at its end: how to tell whether ``pipeline`` (of ``spec``)
    helped on ``collection``, against the encoder it started from."""
    start = spec.settings.get('model_name')
    start = 'minilm' if start in (None, MINILM) else f'dual_encoder:model_name={start}'
    return ('whether it helped: judge a few of your queries yourself, blind, against the start '
            f'(docs/judging.md): selfsup judge -c {collection} -p {start} "{pipeline}" '
            '--queries FILE')


def _specs(names):
    from pyterrier_selfsup.harness.pipelines import get_pipeline
    return [get_pipeline(n) for n in names]


def main(args, run: RunContext) -> int:
    """Runs ``selfsup judge`` with parsed ``args``; returns the exit status."""
    from pyterrier_selfsup.data.collections import Collection
    from pyterrier_selfsup.data.queries.logs import query_log
    from pyterrier_selfsup.harness.judging.campaign import Campaign, CampaignError
    from pyterrier_selfsup.harness.judging.reporting import report
    from pyterrier_selfsup.harness.judging.server import serve
    if args.report is not None:
        print('\n'.join(report(Campaign(args.report)).lines()))
        return 0
    campaign = Campaign.reopened(args.dir, args.collection and Collection(args.collection),
                                 args.pipelines)
    if campaign is not None:
        collection = campaign.collection()
    elif not args.collection:
        raise CampaignError(f'{args.dir} holds no campaign: start one with -c COLLECTION')
    else:
        collection = Collection(args.collection)
    names = campaign.pipelines if campaign else args.pipelines or DEFAULT_PIPELINES
    # a new campaign's pipelines are checked before any work, a reopened one's once it pools a
    # query: a restart to go on judging loads no model
    if campaign is None:
        _specs(names)
    built: dict[str, object] = {}  # (name: transformer, built once)

    def pipelines():
        if not built:
            for name, spec in zip(names, _specs(names)):
                print(f'building {name} on {collection.name}', flush=True)
                built[name] = spec.build(collection, run)
        return built

    queries = None
    if args.queries is not None:
        queries = query_log(args.queries)
        if args.sample is not None and args.sample < len(queries):
            queries = queries.sample(n=args.sample, random_state=args.seed).sort_index()
    if campaign is None:
        campaign = Campaign.create(args.dir, collection, {n: None for n in names},
                                   depth=args.depth, seed=args.seed)
    if queries is not None:
        before = len(campaign.queries)
        campaign.add_queries(queries, collection, pipelines())
        print(f'pooled {len(campaign.queries) - before} new queries into {args.dir} '
              f'({campaign.progress()["pooled"]} passages in all)')
    print(f'the report, at any time: selfsup judge --report {args.dir}')
    if not args.no_serve:
        serve(campaign, port=args.port, pipelines=pipelines, collection=collection)
    return 0
