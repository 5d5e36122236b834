"""Classic test collections in the Glasgow/SMART format (CISI, ADI, MED, CACM, ...), registered
with ir_datasets as ``classic/<name>``.

A collection ``NAME`` is ``NAME.ALL`` (documents), ``NAME.QRY`` (queries) and ``NAME.REL``
(judgments), as files or inside ``NAME.tar.gz``, in ``$SELFSUP_CLASSIC_DATA``; without it, CISI
and ADI are downloaded on first use (:data:`CLASSIC_HOME`) into the package's cache and checked
against their sha256. Queries without a judgment are dropped.

    pyterrier_selfsup.register_classic('/data/glasgow')       # every collection found there
    pt.get_dataset('irds:classic/cisi').get_topics()
"""
import os
import re
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

import ir_datasets
from ir_datasets.datasets.base import Dataset
from ir_datasets.formats import BaseDocs, BaseQrels, BaseQueries, GenericQuery, TrecQrel

from pyterrier_selfsup.data.local import DictDocstore

CLASSIC_DATA_ENV = 'SELFSUP_CLASSIC_DATA'
BUILTIN = ('cisi', 'adi')
# where CISI and ADI are downloaded from, and the sha256 of each Glasgow tarball of 1994
CLASSIC_HOME = 'http://ir.dcs.gla.ac.uk/resources/test_collections'
MIRROR_ENV = 'SELFSUP_CLASSIC_MIRROR'
DOWNLOADS = {
    'adi': ('adi/adi.tar.gz', '68c1867824cbad9e28ce498fafa644d5ac1a7a8a41cde0bffaf402095bbc7aa6'),
    'cisi': ('cisi/cisi.tar.gz',
             'bddb284e19369d153dad90770ae897e19221b0bc50e1329b5a702aa56f5e8483'),
}
_PARTS = ('ALL', 'QRY', 'REL')
_FIELD = re.compile(r'\.([A-Z])(?:\s|$)')


class ClassicDoc(NamedTuple):
    doc_id: str
    title: str
    text: str
    author: str
    bib: str

    def default_text(self) -> str:
        """title + text: what both BM25 and the neural models see."""
        return ' '.join(x for x in (self.title, self.text) if x)


def normalise_id(raw: str) -> str:
    """``'007'`` and ``'7'`` name the same record."""
    return raw.strip().lstrip('0') or '0'


def parse_records(lines: Iterable[str]) -> Iterator[tuple[str, dict[str, str]]]:
    """``(id, {field letter: text})`` for each ``.I`` record; whitespace is collapsed."""
    record_id, fields, current = None, {}, None

    def finished():
        return record_id, {k: ' '.join(' '.join(v).split()) for k, v in fields.items()}

    for line in lines:
        line = line.rstrip('\r\n')
        match = _FIELD.match(line)
        if match and match.group(1) == 'I':
            if record_id is not None:
                yield finished()
            record_id, fields, current = normalise_id(line[2:]), {}, None
        elif match:
            current = match.group(1)
            fields.setdefault(current, []).append(line[2:])
        elif current is not None:
            fields[current].append(line)
    if record_id is not None:
        yield finished()


def parse_docs(lines: Iterable[str]) -> Iterator[ClassicDoc]:
    for doc_id, f in parse_records(lines):
        yield ClassicDoc(doc_id, f.get('T', ''), f.get('W', ''), f.get('A', ''), f.get('B', ''))


def parse_queries(lines: Iterable[str]) -> Iterator[GenericQuery]:
    # Some collections (CISI) give part of their queries as title + abstract: keep both.
    for query_id, f in parse_records(lines):
        yield GenericQuery(query_id, ' '.join(x for x in (f.get('T', ''), f.get('W', '')) if x))


def parse_qrels(lines: Iterable[str]) -> list[TrecQrel]:
    """Judgments, de-duplicated (the highest grade wins), in file order."""
    rows = [line.split() for line in lines if line.strip()]
    trec = bool(rows) and all(len(r) >= 4 and r[1] in ('0', 'Q0') for r in rows)
    grades: dict[tuple[str, str], int] = {}
    for row in rows:
        if trec:
            key, grade = (row[0], row[2]), int(float(row[3]))
        elif len(row) >= 2:
            key, grade = (row[0], row[1]), 1
        else:
            raise ValueError(f'judgment line {" ".join(row)!r} has fewer than two columns '
                             '(qid docid)')
        key = (normalise_id(key[0]), normalise_id(key[1]))
        grades[key] = max(grade, grades.get(key, grade))
    return [TrecQrel(qid, docid, grade, '0') for (qid, docid), grade in grades.items()]


# (tarball, size, modification time, part) -> the part's member in it, or None
_MEMBERS: dict[tuple[str, int, int, str], str | None] = {}


class ClassicSource:
    """The three files of collection ``name`` (``cisi``) under ``directory``, else under
    ``$SELFSUP_CLASSIC_DATA``, else (CISI and ADI) under the cache's ``classic/``
    (:func:`download`)."""

    def __init__(self, name: str, directory: str | Path | None = None):
        self.name = name.lower()
        self.directory = Path(directory) if directory is not None else None

    def resolve(self) -> Path:
        directory = self.directory
        if directory is None:
            if not os.environ.get(CLASSIC_DATA_ENV):
                if self.name in DOWNLOADS:
                    return download(self.name)
                raise FileNotFoundError(
                    f'classic/{self.name}: no data directory. Set ${CLASSIC_DATA_ENV} or call '
                    f'pyterrier_selfsup.register_classic(directory).')
            directory = Path(os.environ[CLASSIC_DATA_ENV])
        if not directory.is_dir():
            raise FileNotFoundError(f'classic/{self.name}: data directory {directory} '
                                    'does not exist')
        return directory

    def check(self) -> None:
        """Raises FileNotFoundError naming every missing file; reads nothing else."""
        directory = self.resolve()
        missing = self._missing(directory)
        if missing:
            raise self._missing_error(directory, missing)

    def located(self, part: str) -> tuple[Path, str | None]:
        """Where ``part`` (``ALL``, ``QRY``, ``REL``) is read from: its file, or the tarball and
        the name of its member there."""
        directory = self.resolve()
        path = self._file(directory, part)
        if path is not None:
            return path, None
        tarball = self._tarball(directory)
        if tarball is not None:
            stat = tarball.stat()
            seen = (str(tarball.resolve()), stat.st_size, stat.st_mtime_ns, part)
            if seen not in _MEMBERS:  # (a tarball is read whole to list it: once a version)
                with tarfile.open(tarball) as tar:
                    member = self._members(tar).get(f'{self.name.upper()}.{part}')
                _MEMBERS[seen] = member.name if member is not None else None
            if _MEMBERS[seen] is not None:
                return tarball, _MEMBERS[seen]
        raise self._missing_error(directory, self._missing(directory))

    def lines(self, part: str) -> list[str]:
        path, member = self.located(part)
        if member is None:
            return path.read_text(encoding='utf8', errors='replace').splitlines()
        with tarfile.open(path) as tar:
            return tar.extractfile(member).read().decode('utf8', errors='replace').splitlines()

    def _missing(self, directory: Path) -> list[str]:
        in_tarball = set()
        tarball = self._tarball(directory)
        if tarball is not None:
            with tarfile.open(tarball) as tar:
                in_tarball = set(self._members(tar))
        wanted = {part: f'{self.name.upper()}.{part}' for part in _PARTS}
        return [name for part, name in wanted.items()
                if self._file(directory, part) is None and name not in in_tarball]

    def _missing_error(self, directory: Path, missing: list[str]) -> FileNotFoundError:
        tarball = self._tarball(directory)
        where = f'{directory}' + (f' (nor in {tarball.name})' if tarball else '')
        return FileNotFoundError(
            f'classic/{self.name}: {", ".join(missing)} not found in {where}; '
            f'a collection needs {self.name.upper()}.ALL, .QRY and .REL')

    @staticmethod
    def _members(tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
        return {Path(m.name).name.upper(): m for m in tar.getmembers() if m.isfile()}

    def _file(self, directory: Path, part: str) -> Path | None:
        for candidate in (f'{self.name.upper()}.{part}', f'{self.name}.{part.lower()}'):
            if (directory / candidate).is_file():
                return directory / candidate
        return None

    def _tarball(self, directory: Path) -> Path | None:
        for candidate in (f'{self.name}.tar.gz', f'{self.name.upper()}.tar.gz', f'{self.name}.tgz'):
            if (directory / candidate).is_file():
                return directory / candidate
        return None


def download(name: str, cache_dir: str | Path | None = None) -> Path:
    """The cache directory (``<cache>/classic/``) that holds the tarball of collection ``name``,
    downloaded from ``$SELFSUP_CLASSIC_MIRROR`` or :data:`CLASSIC_HOME` if it is not there yet and
    kept only where its sha256 is :data:`DOWNLOADS`'. A failed download raises FileNotFoundError
    saying how to give the files instead."""
    import hashlib
    import http.client
    import logging
    import tempfile
    import urllib.request

    from pyterrier_selfsup._cache import cache_root
    path, sha256 = DOWNLOADS[name]
    directory = cache_root(cache_dir) / 'classic'
    tarball = directory / Path(path).name
    if tarball.is_file():
        return directory
    url = f'{os.environ.get(MIRROR_ENV) or CLASSIC_HOME}/{path}'
    instead = (f'download it yourself, or use a copy you have: set ${CLASSIC_DATA_ENV} to its '
               f'directory, or call pyterrier_selfsup.register_classic(directory)')
    logging.getLogger(__name__).info('classic/%s: downloading %s into %s (once)', name, url,
                                     directory)
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except (OSError, ValueError, http.client.HTTPException) as error:
        raise FileNotFoundError(f'classic/{name}: {url} could not be downloaded ({error}); '
                                f'{instead}') from None
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise FileNotFoundError(f'classic/{name}: {url} gave {len(data):,} bytes whose sha256 is '
                                f'{got}, not the {sha256} the package records; they are not '
                                f'kept. To use them anyway, {instead}')
    directory.mkdir(parents=True, exist_ok=True)
    # (each process's own file, renamed whole: downloads at once do not mix)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=f'.{tarball.name}.', delete=False) as f:
        f.write(data)
    os.replace(f.name, tarball)
    return directory


class ClassicDocs(BaseDocs):
    def __init__(self, source: ClassicSource):
        self._source = source
        # (the digest of the documents it was read from, store)
        self._store: tuple[str, DictDocstore] | None = None

    def docs_iter(self):
        return parse_docs(self._source.lines('ALL'))

    def docs_cls(self):
        return ClassicDoc

    def docs_store(self, field='doc_id'):
        # trainers look texts up every batch: parse once per directory, not per call
        contents = self.contents_digest()
        if self._store is None or self._store[0] != contents:
            # (these collections have at most a few thousand documents: a dict is the store)
            self._store = (contents, DictDocstore(self.docs_iter(), ClassicDoc,
                                                  key=lambda doc_id: normalise_id(str(doc_id))))
        return self._store[1]

    def docs_count(self):
        return sum(1 for _ in self.docs_iter())

    def contents_digest(self) -> str:
        """A digest of the documents' file (``NAME.ALL``, or its member of the tarball) as it
        is now."""
        from pyterrier_selfsup._cache.digests import file_digest
        return file_digest(*self._source.located('ALL'))

    def docs_namespace(self):
        return f'classic/{self._source.name}'

    def docs_lang(self):
        return 'en'


class ClassicQueries(BaseQueries):
    def __init__(self, source: ClassicSource):
        self._source = source

    def queries_iter(self):
        judged = {q.query_id for q in parse_qrels(self._source.lines('REL'))}
        return (q for q in parse_queries(self._source.lines('QRY')) if q.query_id in judged)

    def queries_cls(self):
        return GenericQuery

    def queries_count(self):
        return sum(1 for _ in self.queries_iter())

    def queries_namespace(self):
        return f'classic/{self._source.name}'

    def queries_lang(self):
        return 'en'


class ClassicQrels(BaseQrels):
    def __init__(self, source: ClassicSource):
        self._source = source

    def qrels_iter(self):
        return iter(parse_qrels(self._source.lines('REL')))

    def qrels_cls(self):
        return TrecQrel

    def qrels_count(self):
        return len(parse_qrels(self._source.lines('REL')))

    def qrels_defs(self):
        return {1: 'relevant', 0: 'judged not relevant'}


_SOURCES: dict[str, ClassicSource] = {}


def register_classic(directory: str | Path | None = None,
                     names: Iterable[str] | None = None) -> list[str]:
    """Registers ``classic/<name>`` with ir_datasets for collections under ``directory``.

    Args:
        directory: where the files or tarballs are; ``None`` reads ``$SELFSUP_CLASSIC_DATA``
            whenever the collection is used.
        names: which collections (``['cisi']``); by default every collection found in
            ``directory``, or the built-in ones when ``directory`` is None.

    Returns the registered dataset ids. A named collection that lacks one of its files
    raises FileNotFoundError naming it, and nothing is registered.
    """
    if names is None:
        names = BUILTIN if directory is None else discover(directory)
    sources = [ClassicSource(name, directory) for name in names]
    if directory is not None:
        for source in sources:
            source.check()
    ids = []
    for source in sources:
        dataset_id = f'classic/{source.name}'
        if dataset_id in _SOURCES:
            # ir_datasets refuses re-registration: re-point the registered components instead.
            _SOURCES[dataset_id].directory = source.directory
        else:
            _SOURCES[dataset_id] = source
            ir_datasets.registry.register(dataset_id, Dataset(
                ClassicDocs(source), ClassicQueries(source), ClassicQrels(source)))
        ids.append(dataset_id)
    return ids


def discover(directory: str | Path) -> list[str]:
    """The names of the collections in ``directory``: every ``NAME.ALL`` or ``NAME.tar.gz``
    there."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f'classic collections: directory {directory} does not exist')
    names = set()
    for path in directory.iterdir():
        match = (re.fullmatch(r'(.+?)\.(?:tar\.gz|tgz)', path.name) or
                 re.fullmatch(r'(.+)\.all', path.name, re.I))
        if match:
            names.add(match.group(1).lower())
    if not names:
        raise FileNotFoundError(f'classic collections: no NAME.ALL or NAME.tar.gz in {directory}')
    return sorted(names)
