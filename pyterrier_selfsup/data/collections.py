"""A test collection by name: its corpus as the models see it, its topics and its qrels."""
import difflib
import logging
from collections.abc import Iterator, Sequence
from functools import cached_property
from pathlib import Path
from typing import Union

import ir_datasets
import pandas as pd
import pyterrier as pt

from pyterrier_selfsup.data.classic import ClassicSource, register_classic
from pyterrier_selfsup.progress import progress

logger = logging.getLogger(__name__)


class UnknownCollectionError(ValueError):
    pass


# what a name ends with (before an optional .gz) where it names a file of documents
DOCUMENT_FILE_SUFFIXES = ('.jsonl', '.csv', '.tsv')


def names_a_file(name: str) -> bool:
    """Whether ``name`` is a path to a documents file rather than a collection's name: a file
    that exists, or a name ending in .jsonl, .csv or .tsv (optionally .gz)."""
    suffixes = [s.lower() for s in Path(name).suffixes if s.lower() != '.gz']
    return Path(name).is_file() or bool(suffixes) and suffixes[-1] in DOCUMENT_FILE_SUFFIXES


class Collection:
    """A collection that ir_datasets knows (``beir/scifact/test``, ``cranfield``,
    ``classic/cisi``, ...), optionally written ``irds:beir/scifact/test``, or a path to a file of
    documents of your own (:meth:`from_files`). Every component sees ir_datasets'
    ``default_text()`` (title + text)."""

    def __init__(self, name: str | Path):
        name = given = str(name)
        if names_a_file(name):
            from pyterrier_selfsup.data.local import register_local
            name = register_local(name)
        name = name[len('irds:'):] if name.startswith('irds:') else name
        if name.startswith('classic/') and name not in ir_datasets.registry:
            _register_from_classic_data(name)
        try:
            ir_datasets.registry[name]
        except KeyError:
            raise UnknownCollectionError(_unknown_message(name)) from None
        self.name = name
        # what reopens this collection in another process: a file's absolute path, else its id
        self.source = str(Path(given).resolve()) if names_a_file(given) else name
        self.dataset = pt.get_dataset(f'irds:{name}')

    @classmethod
    def of(cls, collection: Union[str, 'Collection']) -> 'Collection':
        """The collection ``collection`` names, or ``collection`` itself."""
        return cls(collection) if isinstance(collection, str) else collection

    @classmethod
    def from_files(cls, docs: str | Path, queries: str | Path | None = None, *,
                   name: str | None = None) -> 'Collection':
        """A corpus of your own: documents from a JSON lines, CSV or TSV file, and optionally
        queries; no relevance judgements (see :mod:`pyterrier_selfsup.data.local`)."""
        from pyterrier_selfsup.data.local import register_local
        return cls(register_local(docs, queries, name))

    def __repr__(self):
        return f'Collection({self.name!r})'

    @property
    def irds(self):
        return self.dataset.irds_ref()

    def corpus_iter(self, verbose: bool = False, progress_file=None,
                    desc: str | None = None) -> Iterator[dict[str, str]]:
        """``{'docno', 'text'}`` for every document, streamed, a repeated docno skipped (the first
        wins). ``verbose``: a progress bar (``desc``), on ``progress_file``."""
        docs = self.irds.docs_iter()
        docs = progress(docs, total=self.irds.docs_count(), desc=desc or f'{self.name} documents',
                        unit='doc', file=progress_file, enabled=verbose)
        seen, duplicates = set(), 0
        for doc in docs:
            if doc.doc_id in seen:
                duplicates += 1
                continue
            seen.add(doc.doc_id)
            yield {'docno': doc.doc_id, 'text': doc.default_text()}
        if duplicates:
            logger.warning('%s: skipped %d documents whose docno had been seen before',
                           self.name, duplicates)

    @cached_property
    def corpus_id(self) -> str:
        """The corpus' name, shared by collections that differ only in their topics: the key of
        indexes and trained models."""
        try:
            return self.irds.docs_namespace() or self.name
        except TypeError:  # ir_datasets' cranfield declares docs_namespace without self
            return self.name

    @property
    def contents(self) -> str | None:
        """A digest of the file the documents are read from, where a file under the same name can
        hold other documents (a classic collection's directory); None where the id already says what
        the documents are."""
        digest = getattr(self.irds.docs_handler(), 'contents_digest', None)
        return digest() if digest is not None else None

    def cache_settings(self, settings: dict) -> dict:
        """``settings`` as the caches key what is built from this corpus, with :attr:`contents`
        where there is a digest to add.

            Collection('classic/adi').cache_settings({'k1': 0.9})   # {'k1': 0.9, 'contents': ...}
        """
        contents = self.contents
        return settings if contents is None else dict(settings, contents=contents)

    @cached_property
    def docs_count(self) -> int | None:
        return self.irds.docs_count()

    def text_bytes(self, sample: int = 500) -> int | None:
        """An estimate of the corpus text's size in bytes from the first ``sample`` documents; None
        where the count is unknown."""
        if not self.docs_count:
            return None
        sizes = [len(doc['text'].encode()) for doc, _ in zip(self.corpus_iter(), range(sample))]
        return int(sum(sizes) / max(len(sizes), 1) * self.docs_count)

    def topics(self) -> pd.DataFrame:
        """``qid``, ``query`` (the query's default text)."""
        if not self.irds.has_queries():
            raise ValueError(f'{self.name} has no queries')
        return pd.DataFrame(
            [{'qid': q.query_id, 'query': q.default_text()} for q in self.irds.queries_iter()],
            columns=['qid', 'query'])

    @property
    def has_judgements(self) -> bool:
        """Whether the collection has queries with relevance judgements to evaluate on."""
        return self.irds.has_queries() and self.irds.has_qrels()

    def qrels(self) -> pd.DataFrame:
        """``qid``, ``docno``, ``label``."""
        if not self.irds.has_qrels():
            raise ValueError(f'{self.name} has no relevance judgements: compare runs on it without '
                             'them (their overlap, or by reading results), or on a collection '
                             'that has them')
        return self.dataset.get_qrels()[['qid', 'docno', 'label']]

    def texts(self, docnos: Sequence[str]) -> list[str]:
        """The text (title + text) of each document, in order; KeyError names unknown docnos."""
        docs = self.irds.docs_store().get_many(set(docnos))
        missing = set(docnos) - set(docs)
        if missing:
            raise KeyError(f'{self.name} has no documents {sorted(missing)[:5]}')
        return [docs[d].default_text() for d in docnos]

    def text_loader(self) -> 'TextLoader':
        """A transformer that adds each result's document text (title + text), for re-rankers."""
        return TextLoader(self)


class TextLoader(pt.Transformer):
    """Adds ``text``: the document text that the indexes saw, looked up by ``docno``.

    It declares the frames a re-ranking pipeline hands it, so that ``pt.inspect`` sees the
    ``qid`` and ``query`` that what follows it needs.

        Collection('classic/adi').text_loader() >> generator.scorer()
    """
    transform_inputs = [['qid', 'query', 'docno', 'score', 'rank'], ['qid', 'query', 'docno']]

    def __init__(self, collection: Collection):
        self.collection = collection

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        return [c for c in input_columns if c != 'text'] + ['text']

    def transform(self, results: pd.DataFrame) -> pd.DataFrame:
        pt.validate.columns(results, includes=['docno'])
        return results.assign(text=self.collection.texts(list(results['docno'])))

    def __repr__(self):
        return f'{self.collection!r}.text_loader()'


def _unknown_message(name: str) -> str:
    known = sorted(ir_datasets.registry)
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f' Did you mean {", ".join(repr(c) for c in close)}?' if close else ''
    return (f'unknown collection {name!r}: ir_datasets has no dataset of that name.{hint} '
            'Collections used here: beir/scifact/test, cranfield, vaswani, classic/cisi, '
            'classic/adi.')


def _register_from_classic_data(name: str):
    """``classic/<name>`` from ``$SELFSUP_CLASSIC_DATA``, if its three files are there."""
    source = ClassicSource(name.split('/', 1)[1])
    try:
        source.check()
    except FileNotFoundError as e:
        raise UnknownCollectionError(f'unknown collection {name!r}: {e}') from None
    register_classic(names=[source.name])
