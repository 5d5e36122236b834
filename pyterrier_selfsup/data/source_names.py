"""The names a pipeline's ``queries`` may take besides a file or a collection: a module of its own,
light to import, so that the settings and the command line read them without loading the data
layer (:mod:`~pyterrier_selfsup.data.sources` says what each one is and makes it)."""

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
