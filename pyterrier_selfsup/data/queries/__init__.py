"""Training queries: the sources a pipeline's ``queries`` may name, and how each set is made.

The names are here, in a module light to import, so that the settings and the command line read
them without loading the rest. The sources:

- cut from the corpus (:data:`CUT_FROM_CORPUS`, :mod:`.cut`): ``sentences``, ``spans``,
  ``masked`` sentences and document ``titles``, each with the passage it was cut from;
- written for a passage by a generator (:data:`GENERATED`, :mod:`.written`): ``generated``
  (greedy, one a passage), ``sampled`` (nucleus sampling, several a passage) and ``roundtrip``
  (generated, then kept where BM25 ranks the passage in its top ``ROUND_TRIP_DEPTH``);
- a query log (:mod:`.logs`): a file of query texts, or the name of a collection whose topic
  texts are read (never its qrels);
- ``crossfold`` (:mod:`.logs`): the evaluated collection's own topic texts outside one of
  :data:`CROSS_FOLDS` folds (one model a fold).

A :class:`~.source.QuerySource` is one set of training queries: the source's name, how many,
the seed, and for written queries the writer's settings. Its
:meth:`~.source.QuerySource.identity` says what the set is without making it (a query log by
its texts' digest, written queries by their writer); the queries written once and cached are
keyed by it, and so are the models trained on them (:mod:`pyterrier_selfsup.harness.store`).

    from pyterrier_selfsup.data.queries.source import QuerySource
    QuerySource('sampled', 2000, generator='smollm2').topics(collection, generator=smollm2)
"""

CUT_FROM_CORPUS = ('sentences', 'spans', 'masked', 'titles')  # cut from the passage they name
GENERATED = ('generated', 'roundtrip', 'sampled')  # written by a generator for a passage
CROSSFOLD = 'crossfold'
QUERY_SOURCES = CUT_FROM_CORPUS + (CROSSFOLD,) + GENERATED
# training queries given to a trainer's fit directly, without the passages they came from: a
# query log (a pipeline names its query log by a file or a collection)
GIVEN_LOG = 'given'
# queries=crossfold: the collection's own topic texts, in this many folds; the model that answers
# a fold's queries is trained on the other folds' texts
CROSS_FOLDS = 2
