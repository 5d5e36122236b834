"""Judging by the user: a campaign pools two or more pipelines' top results for some queries,
blinded and shuffled; a page on 127.0.0.1 takes the user's grades; the report runs
``pt.Experiment`` on the queries judged in full, with a paired test and the interval of the
difference. Its names are imported from their modules when first used (``selfsup`` parses its
command line without pandas or PyTerrier).

    from pyterrier_selfsup.harness.judging import judge, report
    campaign = judge('judged', collection, {'bm25': bm25, 'minilm': dense}, topics)  # Ctrl-C stops
    print('\\n'.join(report(campaign).lines()))
"""
import importlib

# how many of each pipeline's results are pooled for a query: what nDCG@10 reads
DEPTH = 10

_MODULES = {'campaign': ['GRADES', 'Campaign', 'CampaignError', 'read_judgements'],
            'reporting': ['JudgingReport', 'report'],
            'server': ['judge', 'make_app', 'serve']}
_HOME = {name: module for module, names in _MODULES.items() for name in names}
__all__ = ['DEPTH', *_HOME]


def __getattr__(name):
    if name in _HOME:
        return getattr(importlib.import_module(f'{__name__}.{_HOME[name]}'), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
