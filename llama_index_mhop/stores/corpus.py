"""Corpora as LlamaIndex documents and passages: loading, doc ids, content hashes, chunking. A passage's id is a
hash of its document's id and its own content: a corpus gives the same ids in every store and process."""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core import Document
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, TextNode, TransformComponent

from ..rules.text import escape_controls, stable_id

__all__ = ["SKIP_MARK", "PassageChunker", "no_text_error", "DEFAULT_CHUNK_OVERLAP", "DEFAULT_CHUNK_SIZE",
           "DEFAULT_MAX_FILE_BYTES", "CorpusError", "SkippedFile", "chunk_documents", "content_hash", "join_sentences",
           "load_documents", "make_document", "read_corpus", "stable_id"]

logger = logging.getLogger(__name__)

#: The attribute of a log record about a skipped corpus file (see ``_read_folder``).
SKIP_MARK = "corpus_file_skipped"

DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32
_TEXT_SUFFIXES = {".txt", ".md", ".rst"}
#: Largest file of a corpus folder that is read (5 MB of text is more often a log or a dump than a document).
DEFAULT_MAX_FILE_BYTES = 5 * 1024 * 1024


class CorpusError(ValueError):
    """A corpus that cannot be indexed: empty, missing, or of an unknown shape."""


def join_sentences(sentences: Sequence[str]) -> str:
    """Join a passage's sentences, adding a space only where a sentence does not already start with one."""
    out = ""
    for sentence in sentences:
        out += sentence if (not out or sentence[:1].isspace()) else " " + sentence
    return out.strip()


def content_hash(title: str, text: str) -> str:
    """The hash of a document's content: a changed title or text is a new version of the document."""
    return stable_id(title, text)


def make_document(title: str, text: str, doc_id: str | None = None, **metadata: Any) -> Document:
    """A LlamaIndex Document with the title in its metadata (embedded with its text); ``doc_id`` is what it is
    known by across syncs (default: its content hash); other ``metadata`` is neither embedded nor shown to an LLM."""
    # Embedded as "title\ntext", the format dense multi-hop baselines use (HippoRAG's corpus rendering).
    return Document(text=text, id_=doc_id or content_hash(title, text), metadata={"title": title, **metadata},
                    excluded_llm_metadata_keys=list(metadata), excluded_embed_metadata_keys=list(metadata),
                    metadata_template="{value}", text_template="{metadata_str}\n{content}")


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def _record_text(body: Any) -> str:
    """A record's text: a string, or a list of sentences; null is no text (never the word "None")."""
    if body is None:
        return ""
    if isinstance(body, list):
        return join_sentences([s for s in body if isinstance(s, str)])
    return str(body)


_RECORD_ID_FIELDS = ("id", "_id", "idx")


def _record_ids(records: list[tuple[str, str, str | None]]) -> list[str]:
    """A record's doc id: its own id field, else its title when no other record shares it, else title and hash."""
    shared = {t for t, n in Counter(title for title, _, _ in records).items() if n > 1}
    return [
        record_id if record_id is not None
        else f"{title}#{content_hash(title, text)[:8]}" if (title in shared or not title)
        else title
        for title, text, record_id in records
    ]


def _from_json(path: Path) -> list[Document]:
    try:
        data = json.loads(_read_text(path))
    except (json.JSONDecodeError, RecursionError) as exc:  # deep nesting overflows the decoder
        raise CorpusError(f"{path}: not valid JSON ({exc})") from exc
    records: list[tuple[str, str, str | None]] = []  # title, text, the record's own id
    if isinstance(data, dict):  # {title: [sentences]} or {title: text}
        records = [(str(title), _record_text(body), None) for title, body in data.items()]
    elif isinstance(data, list):
        for position, record in enumerate(data):
            if isinstance(record, str):
                records.append(("", record, None))
            elif isinstance(record, dict) and ("text" in record or "paragraph_text" in record):
                title = "" if record.get("title") is None else str(record["title"])
                text = _record_text(record.get("text", record.get("paragraph_text")))
                record_id = next((record[f] for f in _RECORD_ID_FIELDS if record.get(f) is not None), None)
                records.append((title, text, None if record_id is None else str(record_id)))
            else:
                raise CorpusError(f"{path}: record {position} has no 'text' field")
    else:
        raise CorpusError(f"{path}: expected a JSON list of {{title, text}} records or a {{title: text}} object")
    return [make_document(title, text, doc_id=doc_id)
            for (title, text, _), doc_id in zip(records, _record_ids(records), strict=True)]


@dataclass(frozen=True)
class SkippedFile:
    """A file of a corpus folder that was not indexed, and why. ``path`` is the resolved folder joined with the
    file's path in it (``path.relative_to(folder.resolve())`` is its doc id); ``empty``: it was read and holds no
    text, so a sync removes what was indexed of it (any other skipped file keeps its indexed version)."""

    path: Path
    reason: str
    empty: bool = False


def _read_file(file: Path, doc_id: str) -> list[Document]:
    if file.suffix.lower() == ".json":
        return _from_json(file)
    return [make_document(file.stem, _read_text(file), doc_id=doc_id, file_path=str(file))]


def _folder_files(path: Path) -> tuple[list[Path], set[Path]]:
    # A folder of text files (recursively), else of JSON corpus files (at its top); JSON files among text files
    # are returned as not read, to be named rather than ignored in silence.
    texts, jsons = [], []
    for file in path.rglob("*"):
        suffix = file.suffix.lower()
        if (suffix in _TEXT_SUFFIXES or suffix == ".json") and file.is_file():
            (jsons if suffix == ".json" else texts).append(file)
    if not texts:
        return sorted(p for p in jsons if p.parent == path), set()
    return sorted([*texts, *jsons]), set(jsons)


def _check_readable(file: Path, root: Path, follow_symlinks: bool, max_file_bytes: int | None) -> None:
    if not follow_symlinks and not file.resolve().is_relative_to(root):
        raise CorpusError(f"{file}: a symbolic link to a file outside the corpus folder, not followed "
                          "(follow_symlinks=True, or mhop index --follow-symlinks, follows it)")
    try:
        size = file.stat().st_size
    except OSError as exc:
        raise CorpusError(f"{file}: cannot be read ({exc.strerror or exc})") from None
    if max_file_bytes is not None and size > max_file_bytes:
        raise CorpusError(f"{file}: {size:,} bytes, over the {max_file_bytes:,}-byte limit of a corpus file "
                          "(max_file_bytes= raises it)")


def _skipped(path: Path, reason: str, empty: bool = False) -> SkippedFile:
    # A file name is untrusted text. The mark lets the mhop command, which lists skipped files, drop the line.
    logger.warning("skipped %s", escape_controls(reason), extra={SKIP_MARK: True})
    return SkippedFile(path, reason, empty)


def _read_folder(path: Path, strict: bool, follow_symlinks: bool,
                 max_file_bytes: int | None) -> tuple[list[Document], list[SkippedFile]]:
    docs: list[Document] = []
    skipped: list[SkippedFile] = []
    root = path.resolve()  # a skipped file's path is absolute, whatever the folder was given as
    candidates, beside_texts = _folder_files(path)
    for file in candidates:
        relative = file.relative_to(path)
        try:
            if file in beside_texts:
                raise CorpusError(f"{file}: a JSON corpus file among text files is not read (a folder is read as "
                                  "its text files, or as its JSON files when it has no text file)")
            _check_readable(file, root, follow_symlinks, max_file_bytes)
            read = _read_file(file, relative.as_posix())
        except CorpusError as exc:
            if strict:
                raise CorpusError(f"{exc} (strict: the corpus is refused)") from None
            skipped.append(_skipped(root / relative, str(exc)))
            continue
        if any(d.text.strip() for d in read):
            docs.extend(read)
        else:  # read, and empty: nothing of it is indexed, and a sync removes what was
            skipped.append(_skipped(root / relative, f"{file}: holds no text (an empty file is not indexed)", True))
    return docs, skipped


def read_corpus(
    source: str | os.PathLike[str] | Sequence[Document], strict: bool = False, follow_symlinks: bool = False,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES, allow_empty_folder: bool = False,
) -> tuple[list[Document], list[SkippedFile]]:
    """Documents from a list of LlamaIndex ``Document``, a folder of text files, or a JSON corpus file (a list of
    ``{"title", "text"}`` records or of strings, or ``{title: text}``; a text may be a list of sentences), and
    the files of a folder that were skipped.

    A doc id (``id_``) is a file's path relative to the folder (a text file's title is its stem), a JSON record's
    ``id``/``_id``/``idx``, else its title (with its content hash when titles repeat). A folder's file that cannot
    be read, is over ``max_file_bytes``, is JSON among text files, links outside the folder (unless
    ``follow_symlinks``) or holds no text is skipped with a WARNING (with ``strict``, an error). With
    ``allow_empty_folder`` a folder without text gives no documents rather than an error. CorpusError when the
    path does not exist, a file given alone (or any, with ``strict``) cannot be read, or there is no text."""
    skipped: list[SkippedFile] = []
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise CorpusError(f"corpus path {path} does not exist")
        if path.is_dir():
            docs, skipped = _read_folder(path, strict, follow_symlinks, max_file_bytes)
        else:
            docs = _read_file(path, path.name)
    else:
        docs = list(source)
        bad = [type(d).__name__ for d in docs if not isinstance(d, Document)]
        if bad:
            raise CorpusError(f"expected LlamaIndex Document objects, got {bad[0]}")
    docs = [d for d in docs if d.text and d.text.strip()]
    folder = isinstance(source, (str, os.PathLike)) and Path(source).is_dir()
    if not docs and not (allow_empty_folder and folder):
        raise no_text_error(source, skipped)
    return docs, skipped


def no_text_error(source: Any, skipped: Sequence[SkippedFile]) -> CorpusError:
    """The error of a corpus that holds no text, naming the files skipped."""
    named = f"the corpus {source!r}" if isinstance(source, (str, os.PathLike)) else "the corpus"
    unread = f" (skipped: {'; '.join(s.reason for s in skipped)})" if skipped else ""
    return CorpusError(f"{named} holds no text to index{unread}")


def load_documents(
    source: str | os.PathLike[str] | Sequence[Document], strict: bool = False, follow_symlinks: bool = False,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> list[Document]:
    """The documents of :func:`read_corpus` (CorpusError as it raises)."""
    return read_corpus(source, strict, follow_symlinks, max_file_bytes)[0]


class PassageChunker(TransformComponent):
    """:func:`chunk_documents` as a LlamaIndex transformation, the one this package's indexes run (it also spares
    opening an index the build of LlamaIndex's default splitter and its tokenizer)."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> list[BaseNode]:
        return list(chunk_documents(nodes, self.chunk_size, self.chunk_overlap))  # type: ignore[arg-type]


def chunk_documents(documents: Iterable[Document], chunk_size: int = DEFAULT_CHUNK_SIZE,
                    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP) -> list[TextNode]:
    """Split documents into passages with content-derived ids (a long document becomes several passages)."""
    splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    nodes: list[TextNode] = []
    seen: set[str] = set()
    for doc in documents:
        title = doc.metadata.get("title")
        title = "" if title is None else str(title)
        for position, node in enumerate(splitter.get_nodes_from_documents([doc])):
            # The doc id is part of a passage's id: a passage belongs to one document, so replacing or removing a
            # document never touches another's passages, even where the two share text.
            node_id = stable_id(doc.id_, title, node.get_content(), str(position))
            if node_id in seen:
                continue
            seen.add(node_id)
            node.id_ = node_id
            node.metadata = {**node.metadata, "title": title, "chunk": position}
            # The chunk number is bookkeeping: keep it out of what is embedded or shown to an LLM.
            node.excluded_embed_metadata_keys = sorted({*node.excluded_embed_metadata_keys, "chunk"})
            node.excluded_llm_metadata_keys = sorted({*node.excluded_llm_metadata_keys, "chunk"})
            nodes.append(node)
    return nodes
