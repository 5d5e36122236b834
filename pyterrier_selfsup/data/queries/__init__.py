"""Training queries: the sources a pipeline's ``queries`` may name, and how each set is made.

The names are here, in a module light to import. The sources:

- cut from the corpus (:data:`CUT_FROM_CORPUS`, :mod:`.cut`), each with the passage it was cut
  from;
- written for a passage by a generator (:data:`GENERATED`, :mod:`.written`);
- a query log (:mod:`.logs`): a file of query texts, or a collection whose topic texts are read;
- ``crossfold`` (:mod:`.logs`): the evaluated collection's own topic texts outside one of
  :data:`CROSS_FOLDS` folds.

A :class:`~.source.QuerySource` is one set of training queries; its
:meth:`~.source.QuerySource.identity` says what the set is without making it.

    from pyterrier_selfsup.data.queries.source import QuerySource
    QuerySource('sampled', 2000, generator='smollm2').topics(collection, generator=smollm2)
"""

CUT_FROM_CORPUS = ('sentences', 'spans', 'masked', 'titles')  # cut from the passage they name
GENERATED = ('generated', 'roundtrip', 'sampled')  # written by a generator for a passage
CROSSFOLD = 'crossfold'
QUERY_SOURCES = CUT_FROM_CORPUS + (CROSSFOLD,) + GENERATED
# training queries given to a trainer's fit directly, without their passages: a query log
GIVEN_LOG = 'given'
# queries=crossfold: the collection's own topic texts, in this many folds
CROSS_FOLDS = 2
