"""Named pipelines, trained-once models, experiments with results files,
and the ``selfsup`` command line."""
