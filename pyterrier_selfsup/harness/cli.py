"""``selfsup``: the project's main job from the command line.

    selfsup run                         # BM25 vs all-MiniLM-L6-v2 zero-shot on beir/scifact/test
    selfsup run -c cranfield classic/cisi -p bm25 minilm --save baseline
    selfsup run -p bm25 dual_encoder "distant_supervision:queries=beir/scifact/train,epochs=3"
    selfsup train "rumbart:queries=beir/scifact/train" -c beir/scifact/test
                                        # train only; `run` picks it up
    selfsup judge -c classic/adi -p minilm distill --queries log.txt
                                        # judge them yourself: a page on 127.0.0.1, then a report
    selfsup list                        # the pipelines and collections it knows
    selfsup settings distill            # a method's settings, their defaults and help

Progress bars show on a terminal and stay out of logs (``-v`` forces them, ``-q`` hides them).
Any Glasgow/SMART collection ``NAME.ALL``/``NAME.tar.gz`` in ``$SELFSUP_CLASSIC_DATA`` (or, for
``run`` and ``train``, ``--classic-data DIR``) is ``classic/<name>``.
"""
import argparse
import logging
import os
import shutil
import sys
from pathlib import Path

from pyterrier_selfsup._cache import CacheError, writable
from pyterrier_selfsup._distributed import distributed, join_process_group
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.classic import BUILTIN, CLASSIC_DATA_ENV, discover
from pyterrier_selfsup.harness import reference
from pyterrier_selfsup.harness.judging import command as judging_command
from pyterrier_selfsup.progress import counted, progress_mode, set_progress
from pyterrier_selfsup.training.settings import SETTINGS

# (the pipelines, the experiment and the models behind them are imported where `list`, `run` and
# `train` need them, so that `--help` and `settings` answer in a second)

# said after training a model whose passages move by learned offsets (a query log's setting)
EXPORT_WITHOUT_OFFSETS = (
    'note: this model moves each passage\'s vector by a learned offset, which the '
    'sentence-transformers layout cannot hold: SentenceTransformer({path}) encodes passages as '
    'the start encoder did, and scores differently from the package\'s own index '
    '(docs/your-own-models.md gives both figures); '
    'selfsup.DenseRetriever.from_dual_encoder(collection, \'{path}\') applies the offsets')
DEFAULT_COLLECTIONS = ['beir/scifact/test']
DEFAULT_PIPELINES = ['bm25', 'minilm']
COLLECTIONS_HERE = ['beir/scifact/test', 'cranfield', 'vaswani'] + [f'classic/{n}' for n in BUILTIN]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog='selfsup', description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest='command')
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument('--cache-dir', help='where indexes and trained models live (default: '
                                            '$SELFSUP_CACHE or ~/.cache/pyterrier-selfsup)')
    common.add_argument('--classic-data', metavar='DIR',
                        help=f'where classic/<name> collections are read '
                             f'(default: ${CLASSIC_DATA_ENV})')
    shown = common.add_mutually_exclusive_group()
    shown.add_argument('-v', '--verbose', action='store_true',
                       help='progress bars even when not on a terminal (without -v: a plain line '
                            'every 30 s there)')
    shown.add_argument('-q', '--quiet', action='store_true',
                       help='no progress shown, bars or lines')

    run = sub.add_parser('run', parents=[common],
                         help='evaluate pipelines on collections in one pt.Experiment each')
    run.add_argument('-c', '--collections', nargs='+', default=DEFAULT_COLLECTIONS, metavar='NAME',
                     help='ir_datasets ids, classic/<name>, or files of documents (.jsonl, .csv, '
                          f'.tsv) (default: {" ".join(DEFAULT_COLLECTIONS)})')
    run.add_argument('-p', '--pipelines', nargs='+', default=DEFAULT_PIPELINES, metavar='NAME',
                     help='named pipelines, the first is the baseline, NAME:key=value,... '
                          'changes settings (default: '
                          f'{" ".join(DEFAULT_PIPELINES)}; `selfsup list` names them all)')
    run.add_argument('--qrels', metavar='FILE', type=Path,
                     help="judge by FILE's TREC qrels (as `selfsup judge` writes them) and the "
                          'topics file beside it, topics.tsv, or --topics (one collection)')
    run.add_argument('--topics', metavar='FILE', type=Path,
                     help='the queries of --qrels: qid<TAB>query a line')
    run.add_argument('--save', metavar='NAME', help='write <results-dir>/NAME.md, .csv and .png')
    run.add_argument('--results-dir', default='selfsup-results',
                     help='where --save writes, under the current directory unless absolute '
                          '(default: %(default)s)')

    train = sub.add_parser('train', parents=[common],
                           help='train a pipeline\'s model on a collection (or resume it), '
                                'without evaluating it')
    train.add_argument('pipeline', metavar='PIPELINE',
                       help='a pipeline that trains (NAME or NAME:key=value,...)')
    train.add_argument('-c', '--collection', required=True, metavar='NAME',
                       help='the corpus to adapt to: a collection\'s name, or a JSON lines, CSV '
                            'or TSV file of documents (docno, text, optional title)')
    train.add_argument('--output', metavar='DIR', type=Path,
                       help='also copy the trained model here (distill\'s loads with '
                            'SentenceTransformer(DIR) too)')

    judging_command.add_parser(sub, common)
    sub.add_parser('list', help='the named pipelines, their settings and the collections used in '
                                'this project')
    settings = sub.add_parser('settings',
                              help='each training method\'s settings, defaults and help')
    settings.add_argument('methods', nargs='*', metavar='METHOD', help=f'(default: all; known: '
                                                                       f'{", ".join(SETTINGS)})')
    settings.add_argument('--markdown', action='store_true',
                          help='the settings reference page (docs/settings.md)')

    args = parser.parse_args(argv)
    if args.command == 'list':
        from pyterrier_selfsup.harness.pipelines import PIPELINES
        for name, spec in PIPELINES.items():
            print(f'pipeline {name}: {spec.description}'
                  + (' (trains a model)' if spec.method else ''))
            print(f'    settings: {", ".join(f"{k}={v}" for k, v in spec.settings.items())}')
        for name in COLLECTIONS_HERE + [f'classic/{n}' for n in _classic_here()
                                        if n not in BUILTIN]:
            print(f'collection {name}')
        for method in SETTINGS:
            print(f'settings of {method} (used by pipelines '
                  f'{", ".join(n for n, s in PIPELINES.items() if s.method == method)}):')
            print('\n'.join(reference.settings_lines(method)))
        return 0
    if args.command == 'settings':
        unknown = [m for m in args.methods if m not in SETTINGS]
        if unknown:
            print(f'selfsup: error: unknown method {unknown[0]!r}; known: {", ".join(SETTINGS)}',
                  file=sys.stderr)
            return 2
        if args.markdown:
            print(reference.markdown(args.methods or None), end='')
        for method in [] if args.markdown else args.methods or SETTINGS:
            print(f'{method}:')
            print('\n'.join(reference.settings_lines(method)))
        return 0
    if args.command not in ('run', 'train', 'judge'):
        parser.print_help()
        return 2

    # (only what the command needs: `selfsup judge` reopening a campaign loads no model)
    from pyterrier_selfsup.data.collections import Collection, UnknownCollectionError
    from pyterrier_selfsup.data.local import MalformedFileError
    from pyterrier_selfsup.harness.errors import NothingToEvaluate, UnknownPipelineError
    from pyterrier_selfsup.harness.judging.campaign import CampaignError, read_judgements
    _quiet_libraries()
    if args.classic_data:
        os.environ[CLASSIC_DATA_ENV] = args.classic_data
    # (what is shown is the progress mode's: -q shows nothing, but stages are still timed)
    run = RunContext(cache_dir=args.cache_dir, verbose=True)
    # (else SELFSUP_PROGRESS's, 'auto' by default: lines off a terminal)
    if args.quiet or args.verbose:
        set_progress('off' if args.quiet else 'bars')
    # the libraries' own bars too ("Loading weights", "Writing model shards")
    if progress_mode() != 'bars':
        from huggingface_hub.utils import disable_progress_bars
        from transformers.utils import logging as transformers_logging
        disable_progress_bars()
        transformers_logging.disable_progress_bar()
    if int(os.environ.get('WORLD_SIZE', '1')) > 1 and args.command != 'train':
        print('selfsup: error: only `selfsup train` runs on several processes (torchrun); '
              'run the rest in one', file=sys.stderr)
        return 2
    rank = join_process_group()
    try:
        if args.command == 'judge':
            return judging_command.main(args, run)
        from pyterrier_selfsup.harness import trained
        from pyterrier_selfsup.harness.experiment import (
            read_training_log,
            run_experiment,
            write_results,
        )
        from pyterrier_selfsup.harness.pipelines import get_pipeline
        if args.command == 'train':
            spec = get_pipeline(args.pipeline)
            if args.output is not None and not rank:  # (said before the training, not after)
                writable(args.output, 'the trained model', 'choose another with --output',
                         create=False)
            path = spec.train(Collection(args.collection), run.replace(verbose=not rank))
            if not rank:
                print(f'trained {spec.name} on {args.collection}' +
                      (f' on {distributed()[1]} processes' if rank is not None else '') +
                      f': {path}')
                if args.output is not None:
                    shutil.copytree(path, args.output, dirs_exist_ok=True)
                    print(f'the trained model, copied: {args.output}')
                from pyterrier_selfsup.models.offsets import PASSAGE_OFFSETS_FILE
                if (Path(path) / PASSAGE_OFFSETS_FILE).is_file():
                    print(EXPORT_WITHOUT_OFFSETS.format(path=args.output or path))
                # (queries=crossfold: a model a fold, of which train returns the last)
                folds = len(trained.each_model(spec.settings)) > 1
                directories = (spec.model_dirs(Collection(args.collection), run)
                               if folds else [path.parent])
                for directory in directories:
                    print(f'training log and curve: {directory}')
                    log = read_training_log(directory)
                    for record in log:  # what each stage did, and its time
                        if 'stage' in record and record.get('seconds') is not None:
                            done = (f'{counted(round(record["done"]), record["unit"])} in '
                                    if 'done' in record else '')
                            print(f'  {record["stage"]}: {done}{record["seconds"]:.0f} s')
                print(judging_command.how_to_judge(spec, args.collection, args.pipeline))
            return 0
        if args.save:  # (before the run, not after it: an unwritable directory is said at once)
            writable(Path(args.results_dir), f'the results of {args.save}',
                     'choose another with --results-dir', create=False)
        judgements = None
        if args.qrels is not None:
            if len(args.collections) != 1:
                raise CampaignError('--qrels judges one collection: name it with -c')
            judgements = read_judgements(args.qrels, args.topics)
        result = run_experiment(args.collections, args.pipelines, name=args.save or 'selfsup run',
                                run=run, judgements=judgements,
                                log=lambda s: print(s, flush=True))
    except NothingToEvaluate as e:
        print(f'selfsup: {e}')
        return 0
    except (UnknownCollectionError, UnknownPipelineError, FileNotFoundError, CacheError,
            MalformedFileError, CampaignError) as e:
        print(f'selfsup: error: {e}', file=sys.stderr)
        return 2
    if args.save:
        for path in write_results(result, args.results_dir):
            print(f'wrote {path}')
    return 0


def _classic_here():
    try:
        return discover(os.environ[CLASSIC_DATA_ENV])
    except (KeyError, FileNotFoundError):
        return []


def _quiet_libraries():
    """This package's progress at INFO, everyone else's warnings only; offline mode said once."""
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
    logging.getLogger('pyterrier_selfsup').setLevel(logging.INFO)
    # ir_datasets sets its logger to INFO when it first makes it: made here first, then quietened
    import ir_datasets
    ir_datasets.log.easy().logger().setLevel(logging.WARNING)
    if os.environ.get('HF_HUB_OFFLINE', '').lower() in ('1', 'true', 'yes', 'on'):
        # huggingface_hub warns at every model load that the hub cannot be reached
        from huggingface_hub.utils import logging as hub_logging
        hub_logging.set_verbosity_error()
        print('selfsup: offline (HF_HUB_OFFLINE=1): models come from the local cache',
              file=sys.stderr)


if __name__ == '__main__':
    sys.exit(main())
