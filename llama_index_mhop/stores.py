"""Corpora into Chroma: loading documents, stable content ids, and the passage vector index.

Chroma owns its data. Re-indexing the same documents adds nothing: every passage's id is a hash of its content,
and passages already in the collection are skipped before anything is embedded.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.schema import BaseNode, TextNode
from llama_index.vector_stores.chroma import ChromaVectorStore
from tqdm.auto import tqdm

from .chroma_batches import existing_ids, iter_all

__all__ = [
    "DEFAULT_CHUNK_OVERLAP",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_COLLECTION",
    "CorpusError",
    "IndexingInterrupted",
    "SkippedFile",
    "all_passages",
    "build_vector_index",
    "chunk_documents",
    "load_documents",
    "read_corpus",
    "join_sentences",
    "load_vector_index",
    "make_document",
    "passage_collection",
    "stable_id",
]

logger = logging.getLogger(__name__)

DEFAULT_COLLECTION = "mhop_passages"
DEFAULT_CHUNK_SIZE = 256
DEFAULT_CHUNK_OVERLAP = 32
_TEXT_SUFFIXES = {".txt", ".md", ".rst"}


class CorpusError(ValueError):
    """A corpus that cannot be indexed: empty, missing, or of an unknown shape."""


class IndexingInterrupted(RuntimeError):
    """The store failed part-way through indexing. What was written is kept; indexing again resumes."""


def stable_id(*parts: str) -> str:
    """A deterministic id from content: the same parts always give the same id."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:32]


def join_sentences(sentences: Sequence[str]) -> str:
    """Join a passage's sentences, adding a space only where a sentence does not already start with one."""
    out = ""
    for sentence in sentences:
        out += sentence if (not out or sentence[:1].isspace()) else " " + sentence
    return out.strip()


def make_document(title: str, text: str, **metadata: Any) -> Document:
    """A LlamaIndex Document with a content-derived id and the title in its metadata."""
    return Document(
        text=text,
        id_=stable_id(title, text),
        metadata={"title": title, **metadata},
        excluded_llm_metadata_keys=[k for k in metadata],
        excluded_embed_metadata_keys=[k for k in metadata],
        # Embed "title\ntext", the format dense multi-hop baselines use (HippoRAG's corpus rendering).
        metadata_template="{value}",
        text_template="{metadata_str}\n{content}",
    )


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


def _from_json(path: Path) -> list[Document]:
    try:
        data = json.loads(_read_text(path))
    except (json.JSONDecodeError, RecursionError) as exc:  # deep nesting overflows the decoder
        raise CorpusError(f"{path}: not valid JSON ({exc})") from exc
    docs: list[Document] = []
    if isinstance(data, dict):  # {title: [sentences]} or {title: text}
        for title, body in data.items():
            docs.append(make_document(str(title), _record_text(body)))
    elif isinstance(data, list):
        for position, record in enumerate(data):
            if isinstance(record, str):
                docs.append(make_document("", record))
            elif isinstance(record, dict) and ("text" in record or "paragraph_text" in record):
                body = record.get("text", record.get("paragraph_text"))
                title = record.get("title")
                docs.append(make_document("" if title is None else str(title), _record_text(body)))
            else:
                raise CorpusError(f"{path}: record {position} has no 'text' field")
    else:
        raise CorpusError(f"{path}: expected a JSON list of {{title, text}} records or a {{title: text}} object")
    return docs


@dataclass(frozen=True)
class SkippedFile:
    """A file of a corpus folder that was not indexed, and why."""

    path: Path
    reason: str


def _read_file(file: Path) -> list[Document]:
    if file.suffix.lower() == ".json":
        return _from_json(file)
    return [make_document(file.stem, _read_text(file), file_path=str(file))]


def read_corpus(
    source: str | os.PathLike[str] | Sequence[Document], strict: bool = False
) -> tuple[list[Document], list[SkippedFile]]:
    """Documents from a list of LlamaIndex ``Document``, a folder of text files, or a JSON corpus file, and the
    files of a folder that could not be read.

    JSON corpora may be a list of ``{"title", "text"}`` records (``text`` a string or a list of sentences),
    a list of strings, or an object mapping titles to text or sentences. A text file's title is its stem; in a
    folder its doc id is its path relative to the folder, so an edited file keeps its id.

    A file of a folder that cannot be read (not UTF-8, not valid JSON, a record without text) is skipped with a
    WARNING naming it, and returned among the skipped files; the rest is indexed. With ``strict`` it is an error.

    Raises:
        CorpusError: the path does not exist, a file given alone (or any file, with ``strict``) cannot be read,
            or the corpus holds no text.
    """
    skipped: list[SkippedFile] = []
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise CorpusError(f"corpus path {path} does not exist")
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix.lower() in _TEXT_SUFFIXES and p.is_file())
            if not files and any(path.glob("*.json")):
                files = sorted(path.glob("*.json"))
            docs = []
            for file in files:
                try:
                    docs.extend(_read_file(file))
                except CorpusError as exc:
                    if strict:
                        raise CorpusError(f"{exc} (strict: the corpus is refused)") from None
                    logger.warning("skipped %s", exc)
                    skipped.append(SkippedFile(file, str(exc)))
        else:
            docs = _read_file(path)
    else:
        docs = list(source)
        bad = [type(d).__name__ for d in docs if not isinstance(d, Document)]
        if bad:
            raise CorpusError(f"expected LlamaIndex Document objects, got {bad[0]}")
    docs = [d for d in docs if d.text and d.text.strip()]
    if not docs:
        named = f"the corpus {source!r}" if isinstance(source, (str, os.PathLike)) else "the corpus"
        unread = f" (skipped: {'; '.join(s.reason for s in skipped)})" if skipped else ""
        raise CorpusError(f"{named} holds no text to index{unread}")
    return docs, skipped


def load_documents(
    source: str | os.PathLike[str] | Sequence[Document], strict: bool = False
) -> list[Document]:
    """The documents of :func:`read_corpus` (files that cannot be read are skipped with a WARNING, or refused
    with ``strict``).

    Raises:
        CorpusError: see :func:`read_corpus`.
    """
    return read_corpus(source, strict=strict)[0]


def chunk_documents(
    documents: Iterable[Document], chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
) -> list[TextNode]:
    """Split documents into passages with content-derived ids (a long document becomes several passages)."""
    splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    nodes: list[TextNode] = []
    seen: set[str] = set()
    for doc in documents:
        title = doc.metadata.get("title")
        title = "" if title is None else str(title)
        for position, node in enumerate(splitter.get_nodes_from_documents([doc])):
            node_id = stable_id(title, node.get_content(), str(position))
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


def _chroma_collection(client: Any, name: str) -> Any:
    return client.get_or_create_collection(name, metadata={"hnsw:space": "cosine"})


def build_vector_index(
    source: str | os.PathLike[str] | Sequence[Document],
    collection_name: str = DEFAULT_COLLECTION,
    chroma_client: Any = None,
    persist_path: str | os.PathLike[str] | None = None,
    embed_model: BaseEmbedding | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
    show_progress: bool = True,
    insert_batch_size: int = 256,
    strict: bool = False,
) -> VectorStoreIndex:
    """Build or update the Chroma-backed passage index of a corpus and return it as a ``VectorStoreIndex``.

    Passages already present (same content id) are skipped, so indexing the same corpus twice adds nothing.

    Args:
        source: documents, a folder of text files, or a JSON corpus (see :func:`load_documents`).
        collection_name: the Chroma collection of passages.
        chroma_client: a Chroma client; default :func:`default_chroma_client` at ``persist_path``.
        persist_path: the embedded store's directory when no client is given.
        embed_model: the embedder; default all-MiniLM-L6-v2 (:func:`default_embed_model`).
        chunk_size: passage size in tokens; longer documents are split, never truncated.
        chunk_overlap: tokens shared by neighbouring chunks of one document.
        show_progress: show a progress bar while embedding.
        insert_batch_size: passages embedded and written per batch.
        strict: refuse a corpus folder with a file that cannot be read (default: skip it with a WARNING).

    Raises:
        CorpusError: the corpus is empty or unreadable.
    """
    from .defaults import default_chroma_client, default_embed_model, describe_client

    documents = load_documents(source, strict=strict)
    client = chroma_client if chroma_client is not None else default_chroma_client(persist_path)
    embed_model = embed_model or default_embed_model()
    collection = _chroma_collection(client, collection_name)
    nodes = chunk_documents(documents, chunk_size, chunk_overlap)
    existing = existing_ids(collection, [n.node_id for n in nodes])
    new_nodes = [n for n in nodes if n.node_id not in existing]
    logger.info("%s: %d passages, %d new", collection_name, len(nodes), len(new_nodes))
    vector_store = ChromaVectorStore(chroma_collection=collection)
    index = VectorStoreIndex.from_vector_store(vector_store, embed_model=embed_model)
    batches = [new_nodes[i : i + insert_batch_size] for i in range(0, len(new_nodes), insert_batch_size)]
    done = 0
    for batch in tqdm(batches, desc=f"indexing {collection_name}", unit="batch", disable=not show_progress):
        try:
            index.insert_nodes(batch)
        except Exception as exc:  # a store or embedder failure of any kind: say where it stopped
            raise IndexingInterrupted(
                f"indexing {collection_name!r} stopped after {done} of {len(new_nodes)} new passages: "
                f"{describe_client(client)} failed ({type(exc).__name__}: {exc}). The passages written are kept; "
                "index again to resume."
            ) from exc
        done += len(batch)
    return index


def load_vector_index(
    collection_name: str = DEFAULT_COLLECTION,
    chroma_client: Any = None,
    persist_path: str | os.PathLike[str] | None = None,
    embed_model: BaseEmbedding | None = None,
) -> VectorStoreIndex:
    """Open an existing Chroma passage collection as a ``VectorStoreIndex``.

    Raises:
        CorpusError: the collection does not exist or is empty.
    """
    from .defaults import default_chroma_client, default_embed_model

    client = chroma_client if chroma_client is not None else default_chroma_client(persist_path)
    names = {getattr(c, "name", c) for c in client.list_collections()}
    if collection_name not in names:
        raise CorpusError(f"no Chroma collection {collection_name!r}; index a corpus first (mhop index PATH)")
    collection = client.get_collection(collection_name)
    if collection.count() == 0:
        raise CorpusError(f"Chroma collection {collection_name!r} is empty; index a corpus first")
    return VectorStoreIndex.from_vector_store(
        ChromaVectorStore(chroma_collection=collection), embed_model=embed_model or default_embed_model()
    )


def passage_collection(index: VectorStoreIndex) -> Any:
    """The Chroma collection behind a Chroma-backed ``VectorStoreIndex`` (``ChromaVectorStore.client``)."""
    store = index.vector_store
    if not isinstance(store, ChromaVectorStore):
        raise TypeError(f"expected an index over a ChromaVectorStore, got {type(store).__name__}")
    return store.client


def all_passages(index: VectorStoreIndex, batch: int = 5000) -> list[BaseNode]:
    """Every passage stored in a Chroma-backed index (text and metadata, no embeddings)."""
    return [
        TextNode(
            id_=record["id"],
            text=record["documents"] or "",
            metadata={k: v for k, v in (record["metadatas"] or {}).items() if not k.startswith("_")},
        )
        for record in iter_all(passage_collection(index), ["documents", "metadatas"], batch)
    ]
