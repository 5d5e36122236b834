"""Where built artefacts (indexes, models) live, and how they get there whole or not at all.

:func:`build_once` is the one way into the cache, and where disk faults are met:

- a cache directory that cannot be written is reported before anything starts;
- a build whose size is estimated (``needs``) is refused early when the disk has less free
  space than that;
- a write that still fails becomes an error naming what was being built, the path, the cause,
  and whether the partial build was removed or kept to resume from;
- the completion marker records the size of every file, and reopening a build compares them:
  a damaged build is rebuilt (``on_damage='rebuild'``) or refused with the command that clears
  it (``'raise'``: trained models).

The package's parts: :mod:`.paths` (where, and under which names), :mod:`.faults` (disk faults
as errors a user can act on) and :mod:`.builds` (whole or not at all, once).
"""
from pyterrier_selfsup._cache.builds import (
    build_once,
    file_sizes,
    locked,
    set_aside,
    size_damage,
    temporary_build,
    written_whole,
)
from pyterrier_selfsup._cache.faults import (
    CacheError,
    CacheFull,
    CacheNotWritable,
    CacheWriteFailed,
    DamagedBuild,
    check_space,
    disk_faults,
    writable,
)
from pyterrier_selfsup._cache.paths import cache_key, cache_root, weights_fingerprint

__all__ = ['build_once', 'file_sizes', 'locked', 'set_aside', 'size_damage', 'temporary_build',
           'written_whole', 'CacheError', 'CacheFull', 'CacheNotWritable', 'CacheWriteFailed',
           'DamagedBuild', 'check_space', 'disk_faults', 'writable', 'cache_key', 'cache_root',
           'weights_fingerprint']
