"""``selfsup``: the project's main job from the command line.

    selfsup run                         # BM25 vs all-MiniLM-L6-v2 zero-shot on beir/scifact/test
    selfsup run -c cranfield classic/cisi -p bm25 minilm --save baseline
    selfsup run -p bm25 dual "ds:queries=beir/scifact/train,epochs=3"
    selfsup list                        # the pipelines and collections it knows
"""
import argparse
import logging
import sys

from pyterrier_selfsup.classic import BUILTIN
from pyterrier_selfsup.collections import UnknownCollectionError
from pyterrier_selfsup.experiment import run_experiment, write_results
from pyterrier_selfsup.pipelines import PIPELINES, UnknownPipelineError

DEFAULT_COLLECTIONS = ['beir/scifact/test']
DEFAULT_PIPELINES = ['bm25', 'minilm']
COLLECTIONS_HERE = ['beir/scifact/test', 'cranfield', 'vaswani'] + [f'classic/{n}' for n in BUILTIN]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='selfsup', description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest='command')

    run = sub.add_parser('run', help='evaluate pipelines on collections in one pt.Experiment each')
    run.add_argument('-c', '--collections', nargs='+', default=DEFAULT_COLLECTIONS, metavar='NAME',
                     help=f'ir_datasets ids (default: {" ".join(DEFAULT_COLLECTIONS)})')
    run.add_argument('-p', '--pipelines', nargs='+', default=DEFAULT_PIPELINES, metavar='NAME',
                     help=f'named pipelines, the first is the baseline, NAME:key=value,... changes settings '
                          f'(default: {" ".join(DEFAULT_PIPELINES)}; known: {", ".join(PIPELINES)})')
    run.add_argument('--save', metavar='NAME', help='write <results-dir>/NAME.md, .csv and .png')
    run.add_argument('--results-dir', default='experiments/results', help='default: %(default)s')
    run.add_argument('--cache-dir', help='where indexes are built (default: $SELFSUP_CACHE or '
                                         '~/.cache/pyterrier-selfsup)')
    run.add_argument('-v', '--verbose', action='store_true', help='progress bars')

    sub.add_parser('list', help='the named pipelines and the collections used in this project')

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    logging.getLogger('pyterrier_selfsup').setLevel(logging.INFO)
    if args.command == 'list':
        for name, spec in PIPELINES.items():
            print(f'pipeline {name}: {spec.description}')
            print(f'    settings: {", ".join(f"{k}={v}" for k, v in spec.settings.items())}')
        for name in COLLECTIONS_HERE:
            print(f'collection {name}')
        return 0
    if args.command != 'run':
        parser.print_help()
        return 2

    try:
        result = run_experiment(args.collections, args.pipelines, name=args.save or 'selfsup run',
                                cache_dir=args.cache_dir, verbose=args.verbose,
                                log=lambda s: print(s, flush=True))
    except (UnknownCollectionError, UnknownPipelineError, FileNotFoundError) as e:
        print(f'selfsup: error: {e}', file=sys.stderr)
        return 2
    if args.save:
        for path in write_results(result, args.results_dir):
            print(f'wrote {path}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
