"""Digests of files that can change under the same name (a classic collection's directory, a
user's documents file), so that what is cached from them is keyed by what they hold.

A file is hashed once for each size and modification time it is seen with; the digest is read
back from memory or from a record in ``<cache>/digests/files/`` while the pair has not moved.

    file_digest('docs.jsonl')                    # the bytes of the file
    file_digest('adi.tar.gz', member='ADI.ALL')  # the bytes of one member of a tarball
"""
import hashlib
import json
import tarfile
from pathlib import Path

from pyterrier_selfsup._cache.builds import written_whole
from pyterrier_selfsup._cache.faults import CacheError
from pyterrier_selfsup._cache.paths import cache_root

# hex digits of a digest
DIGEST_LENGTH = 10
# (path, member) -> (size, modification time in ns, digest): this process's memory of them
_SEEN: dict[tuple[str, str | None], tuple[int, int, str]] = {}


def file_digest(path: str | Path, member: str | None = None,
                cache_dir: str | Path | None = None) -> str:
    """A digest (sha256, :data:`DIGEST_LENGTH` hex digits) of the bytes of ``path``, or of its
    tarball ``member``, hashed again only when the file's size or modification time moved.
    ``cache_dir``: where the record is kept across processes (in memory only where it cannot be
    written)."""
    path = Path(path).resolve()
    stat = path.stat()
    stamp = (stat.st_size, stat.st_mtime_ns)
    key = (str(path), member)
    if key in _SEEN and _SEEN[key][:2] == stamp:
        return _SEEN[key][2]
    record = (cache_root(cache_dir) / 'digests' / 'files'
              / hashlib.sha1(json.dumps(key).encode()).hexdigest()[:16])
    digest = _recorded(record, stamp)
    if digest is None:
        digest = _hash(path, member)
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            with written_whole(record, f'the digest of {path}') as out:
                out.write_text(json.dumps({'path': str(path), 'member': member, 'size': stamp[0],
                                           'mtime_ns': stamp[1], 'digest': digest}))
        except (OSError, CacheError):  # (a cache that cannot be written: kept in memory)
            pass
    _SEEN[key] = (*stamp, digest)
    return digest


def _recorded(record: Path, stamp: tuple[int, int]) -> str | None:
    try:
        seen = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    return seen['digest'] if (seen.get('size'), seen.get('mtime_ns')) == stamp else None


def _hash(path: Path, member: str | None) -> str:
    digest = hashlib.sha256()
    with (tarfile.open(path) if member else open(path, 'rb')) as opened:
        f = opened.extractfile(member) if member else opened
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    return digest.hexdigest()[:DIGEST_LENGTH]
