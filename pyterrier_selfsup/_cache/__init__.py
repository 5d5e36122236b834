"""Where built artefacts (indexes, models) live, and how they get there whole or not at all.

:func:`build_once` is the one way into the cache, and where disk faults are met:

- a cache directory that cannot be written is reported before anything starts, with the
  settings that move it (``--cache-dir``, ``$SELFSUP_CACHE``);
- a build whose size is estimated (``needs``) is refused early when the disk has less
  free space than that, with both numbers and the path;
- a write that still fails (disk full, quota, read-only) becomes an error naming what was
  being built, the file or directory and the cause, and whether the partial build was
  removed or kept to resume from;
- the completion marker records the size of every file of the build, and reopening a
  build compares them (a ``stat`` a file): a truncated or missing file is a damaged build,
  reported with the path and rebuilt (``on_damage='rebuild'``: indexes, caches, anything
  derived) or refused with the command that clears it (``'raise'``: trained models,
  hours of work); never a raw mmap or numpy traceback from the reader.

The package's parts: :mod:`.paths` (where, and under which names), :mod:`.faults` (disk
faults as errors a user can act on) and :mod:`.builds` (whole or not at all, once).
"""
from pyterrier_selfsup._cache.builds import (
                                             ON_DAMAGE,
                                             aside_path,
                                             build_once,
                                             damage,
                                             file_sizes,
                                             is_complete,
                                             locked,
                                             set_aside,
                                             size_damage,
                                             temporary_build,
                                             written_whole,
)
from pyterrier_selfsup._cache.faults import (
                                             MOVE_HINT,
                                             TMP_HINT,
                                             CacheError,
                                             CacheFull,
                                             CacheNotWritable,
                                             CacheWriteFailed,
                                             DamagedBuild,
                                             check_space,
                                             disk_faults,
                                             human_bytes,
                                             writable,
                                             write_fault,
)
from pyterrier_selfsup._cache.paths import CACHE_ENV, cache_key, cache_root, weights_fingerprint

__all__ = ['ON_DAMAGE', 'aside_path', 'build_once', 'damage', 'file_sizes', 'is_complete', 'locked',
           'set_aside', 'size_damage', 'temporary_build', 'written_whole', 'MOVE_HINT', 'TMP_HINT',
           'CacheError', 'CacheFull', 'CacheNotWritable', 'CacheWriteFailed', 'DamagedBuild',
           'check_space', 'disk_faults', 'human_bytes', 'writable', 'write_fault', 'CACHE_ENV',
           'cache_key', 'cache_root', 'weights_fingerprint']
