"""A corpus of the user's own: documents (and, optionally, queries) from local files,
registered with ir_datasets so that every component takes it as it takes ``beir/scifact``.

Documents: JSON lines, CSV or TSV (optionally gzipped), one document a record, with its id
in ``docno`` (or ``doc_id``, ``_id``, ``id``), its text in ``text`` (or ``body``,
``contents``) and an optional ``title`` prepended to the text; or a TSV with no header,
``docno<TAB>text`` a line (MS MARCO's ``collection.tsv``). Queries: the same formats with
``qid`` (or ``query_id``, ``_id``, ``id``) and ``query`` (or ``text``), a header-less
``qid<TAB>query`` TSV, or plain text, one query a line (its qid: the line's number). No
relevance judgements.

The corpus is ``local/<name>-<hash of the documents file>-<format>``, and a dataset with
queries adds a hash of the queries file: an edited file gets new indexes and models, an
unchanged one, under any path, finds its old ones. The documents are held in memory.
"""
import csv
import gzip
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import ir_datasets
from ir_datasets.datasets.base import Dataset
from ir_datasets.formats import BaseDocs, BaseQueries, GenericQuery
from ir_datasets.indices import Docstore

DOCNO_FIELDS = ('docno', 'doc_id', '_id', 'id')
TEXT_FIELDS = ('text', 'body', 'contents')
QID_FIELDS = ('qid', 'query_id', '_id', 'id')
QUERY_FIELDS = ('query', 'text')
# a TSV whose first line names none of these is a header-less one (MS MARCO's layout)
KNOWN_FIELDS = frozenset(DOCNO_FIELDS + TEXT_FIELDS + QID_FIELDS + QUERY_FIELDS + ('title',))


logger = logging.getLogger(__name__)


class MalformedFileError(ValueError):
    """A documents or queries file that cannot be read as it says it is; the message names
    the file and the line."""


class LocalDoc(NamedTuple):
    doc_id: str
    title: str
    text: str

    def default_text(self) -> str:
        """title + text: what both BM25 and the neural models see."""
        return ' '.join(x for x in (self.title, self.text) if x)


def _open(path: Path):
    # utf-8-sig: a byte-order mark (a CSV saved by a spreadsheet) is not part of the first field;
    # newline='': as the csv module asks (a quoted field may hold a line break)
    if path.suffix == '.gz':
        return gzip.open(path, 'rt', encoding='utf-8-sig', newline='')
    return open(path, encoding='utf-8-sig', newline='')


def _open_bytes(path: Path):
    """The file's bytes, ungzipped where it is ``.gz``."""
    return gzip.open(path, 'rb') if path.suffix == '.gz' else open(path, 'rb')


def _format(path: Path) -> str:
    suffixes = [s for s in path.suffixes if s != '.gz']
    return suffixes[-1].lstrip('.').lower() if suffixes else 'txt'


def numbered_records(path: str | Path,
                     headerless: tuple[str, ...] = ()) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, record) of each record of a JSON lines, CSV or TSV file; a malformed
    line or text that is not UTF-8 is an error that names the file and the line. ``headerless``:
    the fields of a TSV with no header (its first line names none of :data:`KNOWN_FIELDS`)."""
    path = Path(path)
    try:
        yield from _records(path, headerless)
    except UnicodeDecodeError as error:
        raise MalformedFileError(f'{path}, line {_undecodable_line(path)}: not UTF-8 text '
                                 f'({error.reason}); save the file as UTF-8') from None


def _undecodable_line(path: Path) -> int:
    """The number of the first line of ``path`` that is not UTF-8."""
    with _open_bytes(path) as raw:
        for number, line in enumerate(raw, 1):
            try:
                line.decode('utf-8')
            except UnicodeDecodeError:
                return number
    return 0


def _records(path: Path, headerless: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    kind = _format(path)
    with _open(path) as lines:
        if kind in ('jsonl', 'json', 'ndjson'):
            for number, line in enumerate(lines, 1):
                if line.strip():
                    try:
                        yield number, {k: '' if v is None else str(v)
                                       for k, v in json.loads(line).items()}
                    except (ValueError, AttributeError) as error:
                        raise MalformedFileError(f'{path}, line {number}: not a JSON object '
                                                 f'({error})') from None
        elif kind in ('csv', 'tsv'):
            csv.field_size_limit(1 << 30)
            # TSV has no quoting; strict: a CSV quote left open to the end of the file is an error
            options = ({'delimiter': '\t', 'quoting': csv.QUOTE_NONE} if kind == 'tsv'
                       else {'strict': True})
            reader = csv.reader(lines, **options)
            header = next(reader, None)
            said = f'its header has {len(header or ())} ({", ".join(header or ())})'
            why = ('; a TSV cannot quote, so a tab or a line break inside a text splits its row: '
                   'write such texts as JSON lines (.jsonl) or CSV') if kind == 'tsv' else ''
            if (kind == 'tsv' and headerless and header is not None and
                    not KNOWN_FIELDS & set(header)):
                # no header: MS MARCO's collection.tsv or queries.tsv
                said = (f'a TSV without a header has {len(headerless)} '
                        f'({"<TAB>".join(headerless)} a line)')
                if len(header) != len(headerless):
                    known = ', '.join(sorted(KNOWN_FIELDS))
                    raise MalformedFileError(f'{path}, line 1: {len(header)} field(s) where '
                                             f'{said}; or, if it is a header, it names none of '
                                             f'the fields read: {known}{why}')
                yield 1, dict(zip(headerless, header))
                header = list(headerless)
            while True:
                start = reader.line_num + 1
                try:
                    row = next(reader)
                except StopIteration:
                    break
                except csv.Error as error:
                    raise MalformedFileError(
                        f'{path}, line {start}: {error} (a quote opened there and never closed '
                        'takes in the lines after it); close the quote, and double a quote '
                        'inside a quoted text ("")') from None
                if not row:  # (a blank line, as csv.DictReader skips it)
                    continue
                if len(row) != len(header):
                    raise MalformedFileError(f'{path}, line {reader.line_num}: {len(row)} field(s) '
                                             f'where {said}{why}')
                yield reader.line_num, dict(zip(header, row))
        else:
            raise MalformedFileError(f'{path}: documents must be JSON lines, CSV or TSV '
                                     '(.jsonl, .csv, .tsv, optionally .gz)')


def _field(record: dict[str, str], names, where: str, what: str) -> str:
    """The first of ``names`` that ``record`` has; ``where``: the file (and line) an error names."""
    for name in names:
        if name in record:
            return record[name]
    raise MalformedFileError(f'{where}: a record has no {what} field (one of {", ".join(names)}); '
                             f'its fields: {", ".join(record) or "none"}')


def read_docs(path: str | Path) -> Iterator[LocalDoc]:
    """The documents of a JSON lines, CSV or TSV file. A file with no document, or whose
    documents all lack a text, is an error; a repeated document id (the first is kept) and
    documents with no text are warned of, once a process."""
    path = Path(path)
    seen: dict[str, int] = {}
    repeated, empty = [], []  # (line, docno)
    for number, record in numbered_records(path, headerless=('docno', 'text')):
        doc = LocalDoc(_field(record, DOCNO_FIELDS, path, 'document id'), record.get('title', ''),
                       _field(record, TEXT_FIELDS, path, 'text'))
        if doc.doc_id in seen:
            repeated.append((number, doc.doc_id))
        else:
            seen[doc.doc_id] = number
        if not doc.default_text().strip():
            empty.append((number, doc.doc_id))
        yield doc
    if not seen:
        raise MalformedFileError(f'{path}: no document in it')
    if len(empty) == len(seen) + len(repeated):
        raise MalformedFileError(f'{path}: no document has a text (line {empty[0][0]}: '
                                 f'{empty[0][1]!r}); a document\'s text goes in one of the '
                                 f'fields {", ".join(TEXT_FIELDS)}')
    if repeated and (path, 'repeated') not in _WARNED:
        _WARNED.add((path, 'repeated'))
        line, docno = repeated[0]
        logger.warning(f'{path}, line {line}: document id {docno!r} again (first on line '
                       f'{seen[docno]}); {len(repeated)} repeated id(s) in all, of which only '
                       'the first document is kept: give each document an id of its own')
    if empty and (path, 'empty') not in _WARNED:
        _WARNED.add((path, 'empty'))
        line, docno = empty[0]
        logger.warning(f'{path}, line {line}: document {docno!r} has no text; {len(empty)} '
                       'document(s) without one, which no query can find')


# (file, what) already warned of in this process: each corpus is read many times
_WARNED = set()


def read_queries(path: str | Path) -> list[GenericQuery]:
    """The queries of a JSON lines, CSV or TSV file, or of a plain text file (one a line, its
    qid the line's number). A record without a query id or text, or with a query id seen before,
    is an error naming its line."""
    path = Path(path)
    if _format(path) in ('txt', 'text'):
        with _open_bytes(path) as raw:
            lines = raw.read().splitlines()
        texts = []
        for number, line in enumerate(lines, 1):
            try:
                texts.append(line.decode('utf-8-sig' if number == 1 else 'utf-8').strip())
            except UnicodeDecodeError as error:
                raise MalformedFileError(f'{path}, line {number}: not UTF-8 text '
                                         f'({error.reason} at byte {error.start})') from None
        if not any(texts):
            raise MalformedFileError(f'{path}: no query in it')
        return [GenericQuery(str(i), text) for i, text in enumerate(texts, 1) if text]
    queries, seen = [], {}
    for number, record in numbered_records(path, headerless=('qid', 'query')):
        where = f'{path}, line {number}'
        qid, text = (_field(record, QID_FIELDS, where, 'query id'),
                     _field(record, QUERY_FIELDS, where, 'query'))
        if not text.strip():
            raise MalformedFileError(f'{path}, line {number}: query {qid!r} has no text')
        if qid in seen:
            raise MalformedFileError(f'{path}, line {number}: query id {qid!r} again '
                                     f'(first on line {seen[qid]})')
        seen[qid] = number
        queries.append(GenericQuery(qid, text))
    if not queries:
        raise MalformedFileError(f'{path}: no query in it')
    return queries


class LocalDocs(BaseDocs):
    def __init__(self, path: Path, namespace: str):
        self._path, self._namespace = path, namespace
        self._store: DictDocstore | None = None

    def docs_iter(self):
        return read_docs(self._path)

    def docs_cls(self):
        return LocalDoc

    def docs_store(self, field='doc_id'):
        if self._store is None:
            self._store = DictDocstore(self.docs_iter(), LocalDoc)
        return self._store

    def docs_count(self):
        return len(self.docs_store())

    def docs_namespace(self):
        return self._namespace

    def docs_lang(self):
        return None


class LocalQueries(BaseQueries):
    def __init__(self, path: Path, namespace: str):
        self._path, self._namespace = path, namespace

    def queries_iter(self):
        return iter(read_queries(self._path))

    def queries_cls(self):
        return GenericQuery

    def queries_count(self):
        return len(read_queries(self._path))

    def queries_namespace(self):
        return self._namespace

    def queries_lang(self):
        return None


class DictDocstore(Docstore):
    """A corpus held in memory, by id (the first of a repeated id wins, as in corpus_iter);
    ``key``: the id under which an id asked for is held."""

    def __init__(self, docs, doc_cls, key=str):
        super().__init__(doc_cls)
        self._docs, self._key = {}, key
        for doc in docs:
            self._docs.setdefault(doc.doc_id, doc)

    def __len__(self):
        return len(self._docs)

    def get_many(self, doc_ids, field=None):
        # keyed by the ids as asked for
        found = {doc_id: self._docs.get(self._key(doc_id)) for doc_id in doc_ids}
        return {k: (d if field is None else getattr(d, field)) for k, d in found.items()
                if d is not None}

    def get_many_iter(self, doc_ids):
        return iter(self.get_many(doc_ids).values())


def register_local(docs: str | Path, queries: str | Path | None = None,
                   name: str | None = None) -> str:
    """Registers the corpus in ``docs`` (and the queries in ``queries``) with ir_datasets;
    returns its dataset id (see the module's docstring)."""
    docs = Path(docs).resolve()
    if not docs.is_file():
        raise FileNotFoundError(f'no documents file {docs}')
    queries = Path(queries).resolve() if queries is not None else None
    if queries is not None and not queries.is_file():
        raise FileNotFoundError(f'no queries file {queries}')
    from pyterrier_selfsup._cache.digests import file_digest
    stem = name or docs.name.split('.')[0]
    corpus = file_digest(docs)
    # the format is part of the corpus's identity: the same bytes read as CSV and as TSV differ
    namespace = f'local/{stem}-{corpus}-{_format(docs)}'  # (the corpus: shared by any queries file)
    dataset_id = f'{namespace}-{file_digest(queries)[:6]}' if queries is not None else namespace
    if dataset_id in _REGISTERED:
        # ir_datasets refuses re-registration: re-point the registered components at these files
        for part, path in zip(_REGISTERED[dataset_id], (docs, queries)):
            part._path = path
    else:
        parts = [LocalDocs(docs, namespace)] + ([LocalQueries(queries, namespace)]
                                                if queries is not None else [])
        ir_datasets.registry.register(dataset_id, Dataset(*parts))
        _REGISTERED[dataset_id] = parts
    return dataset_id


# dataset id -> its components, re-pointed on registering again
_REGISTERED: dict[str, list[BaseDocs]] = {}
