"""The three Chroma collections of a graph index (passages, entities, facts) and the embedder that fills them.
Record ids derive from content, so storing a text twice adds nothing; two indexes in one store never share a
collection."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore

from ..stores.chroma_batches import CHROMA_BATCH, delete_ids, existing_ids, get_records, pages, upsert_vectors
from ..stores.dimension_check import check_embedding_dimension
from ..stores.embed_dtype import EmbedDType, check_embed_dtype, embedding_dtype
from ..stores.search import read_guarded, version_marker

__all__ = ["CHROMA_DIR", "DEFAULT_SHORT_TEXT_BATCH_SIZE", "DEFAULT_SHORT_TEXT_DTYPE", "GraphStores", "client_mode",
           "collection_passages", "fact_text", "index_prefix", "missing_collections", "private_client",
           "resolve_client", "saved_client", "vector_index_collection"]

CHROMA_DIR = "chroma"
DEFAULT_SHORT_TEXT_BATCH_SIZE = 128
DEFAULT_SHORT_TEXT_DTYPE: EmbedDType = "bfloat16"
_SPACE = {"hnsw:space": "cosine"}
#: The metadata key of a collection that names the index owning it.
OWNER_KEY = "mhop:index_id"
_KINDS = ("passages", "entities", "facts")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,480}[A-Za-z0-9]$")


def fact_text(subject: str, predicate: str, obj: str) -> str:
    """The text a fact is embedded and shown as: "subject predicate object"."""
    return f"{subject} {predicate} {obj}"


def missing_collections(client: Any, prefix: str) -> list[str]:
    """The collections named ``{prefix}_...`` that the client lacks (looked up without creating anything)."""
    from chromadb.errors import NotFoundError
    missing = []
    for kind in _KINDS:
        try:
            client.get_collection(f"{prefix}_{kind}")
        except NotFoundError:
            missing.append(f"{prefix}_{kind}")
    return missing


def vector_index_collection(vector_index: Any) -> Any:
    """The Chroma collection a ``VectorStoreIndex`` keeps its nodes in (a ``TypeError`` when not in Chroma)."""
    store = vector_index.vector_store
    if not isinstance(store, ChromaVectorStore):
        raise TypeError(f"from_vector_index needs a VectorStoreIndex over Chroma, got one over {type(store).__name__}")
    return store.client


def _node(record_id: str, text: str, metadata: dict[str, Any] | None, vector: Any = None) -> TextNode:
    """The passage node of a LlamaIndex Chroma record."""
    node = metadata_dict_to_node(metadata or {}, text=text)
    node.id_ = record_id
    node.embedding = None if vector is None else [float(x) for x in vector]
    return node


def collection_passages(collection: Any, with_embeddings: bool) -> list[TextNode]:
    """The passage nodes of a LlamaIndex Chroma collection, each with its stored embedding if asked."""
    include = ["embeddings", "documents", "metadatas"] if with_embeddings else ["documents", "metadatas"]
    nodes: list[TextNode] = []
    for page in pages(collection, include):
        vectors = page["embeddings"] if with_embeddings else [None] * len(page["ids"])
        nodes += [_node(*row) for row in zip(page["ids"], page["documents"], page["metadatas"], vectors, strict=True)]
    return nodes


def client_mode(chroma_client: Any) -> str:
    """"ephemeral" for an in-memory Chroma client (its data is copied out on persist), else "external"."""
    try:
        settings = chroma_client.get_settings()
    except Exception:  # a client without settings: treat it as the user's own store
        return "external"
    remote = "fastapi" in str(getattr(settings, "chroma_api_impl", "")).lower()
    return "ephemeral" if not getattr(settings, "is_persistent", True) and not remote else "external"


def _persistent_client(path: Path) -> Any:
    import chromadb
    from chromadb.config import Settings
    path.mkdir(parents=True, exist_ok=True)
    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))


def private_client() -> Any:
    """A Chroma store of this process alone, removed at exit (in-memory clients share one Chroma system)."""
    path = Path(tempfile.mkdtemp(prefix="mhop-hippo-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return _persistent_client(path)


def resolve_client(chroma_client: Any, persist_dir: str | os.PathLike[str] | None) -> tuple[Any, str]:
    """The client and its mode: the given one, else ``persist_dir/chroma``, else a private ephemeral store."""
    if chroma_client is not None:
        return chroma_client, client_mode(chroma_client)
    if persist_dir is not None:
        return _persistent_client(Path(persist_dir) / CHROMA_DIR), "local"
    return private_client(), "ephemeral"


def index_prefix(name: str, index_id: str) -> str:
    """The collection prefix of a new index: its name and a digest of its index id."""
    return f"{name}_{hashlib.sha256(index_id.encode()).hexdigest()[:12]}"


def saved_client(chroma_client: Any, kind: str, root: Path) -> tuple[Any, str]:
    """A saved index's client and mode: the given one, ``root/chroma`` (a "local" index), or the default."""
    if chroma_client is not None:
        return chroma_client, client_mode(chroma_client)
    if kind == "local":
        if not (root / CHROMA_DIR).is_dir():
            raise ValueError(f"{root / CHROMA_DIR}: no Chroma data beside the saved index: pass its chroma_client")
        return resolve_client(None, root)
    from ..stores.defaults import default_chroma_client
    return default_chroma_client(), "external"


class GraphStores:
    """The ``{prefix}_passages``, ``{prefix}_entities`` and ``{prefix}_facts`` collections of one Chroma client. Entity
    and fact records are id and vector alone (documents and metadata doubled write time). A ``ValueError`` for a
    name Chroma would refuse as a collection prefix, or a collection another index owns."""

    def __init__(self, client: Any, name: str, embed_model: BaseEmbedding, short_text_batch_size: int | None,
                 mode: str, prefix: str | None = None,
                 short_text_dtype: EmbedDType = DEFAULT_SHORT_TEXT_DTYPE, owner: str | None = None) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"index name {name!r} must be 3-480 characters of letters, digits, '.', '_' or '-', "
                             "starting and ending with a letter or digit (it prefixes the Chroma collection names)")
        self.name = name
        self.prefix = prefix or name
        self.owner = owner
        self.embed_model = embed_model
        self.short_text_batch_size = short_text_batch_size
        self.short_text_dtype = check_embed_dtype(short_text_dtype)
        self._short_embedder: BaseEmbedding | None = None
        self.passage_source: Any = None  # sets _source_marker too (__setattr__)
        self._open(client, mode)

    def _open(self, client: Any, mode: str) -> None:
        self.client, self.mode = client, mode
        self.passages, self.entities, self.facts = (self._owned(client, f"{self.prefix}_{kind}") for kind in _KINDS)
        self.vector_store = ChromaVectorStore(chroma_collection=self.passages)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "passage_source":  # its version row is read now: a change another process makes is refused
            super().__setattr__("_source_marker", None if value is None else version_marker(self.client, value))
        super().__setattr__(name, value)

    def _owned(self, client: Any, name: str) -> Any:
        """The collection ``name`` of ``client`` (created naming :attr:`owner`), unless another index owns it."""
        metadata = _SPACE if self.owner is None else {**_SPACE, OWNER_KEY: self.owner}
        collection = client.get_or_create_collection(name, metadata=metadata)
        other = (collection.metadata or {}).get(OWNER_KEY)
        if self.owner is not None and other not in (None, self.owner):
            raise ValueError(f"the Chroma collection {name!r} belongs to graph index {other}, not to {self.owner}: "
                             "give this index another name= or a Chroma store of its own")
        return collection

    def collection_names(self) -> dict[str, str]:
        names = {"passages": self.passages.name, "entities": self.entities.name, "facts": self.facts.name}
        if self.passage_source is not None:
            names["passage_source"] = self.passage_source.name
        return names

    def read_passages_from(self, collection: Any) -> bool:
        """Read ``collection`` in place if it is in this index's Chroma store (True), else copy its passages."""
        from chromadb.errors import NotFoundError
        try:
            same_store = self.client.get_collection(collection.name).id == collection.id
        except (NotFoundError, ValueError):
            same_store = False
        if same_store:
            self.passage_source = collection
        return same_store

    def source_nodes(self, ids: Sequence[str]) -> list[TextNode]:
        """The passage nodes of ``ids`` held in :attr:`passage_source`, in ``ids``' order, without vectors."""
        if self.passage_source is None or not ids:
            return []
        rows = self._source_records(ids, ["documents", "metadatas"])
        return [_node(i, rows[i]["documents"], rows[i]["metadatas"]) for i in ids if i in rows]

    def passage_collections(self) -> list[Any]:
        """Where the index's passages are: its own collection, then :attr:`passage_source` if any."""
        return [self.passages] if self.passage_source is None else [self.passages, self.passage_source]

    def passage_sources(self) -> list[tuple[Any, Any]]:
        """Each passage collection with its version row: :attr:`passage_source`'s first, then its own (None: the
        index's writes in this process are its versions)."""
        own = [(self.passages, None)]
        return own if self.passage_source is None else [(self.passage_source, self._source_marker), *own]

    def held_passages(self, ids: Sequence[str]) -> set[str]:
        """The ids among ``ids`` stored in the index's own collection or held in :attr:`passage_source`."""
        return set(self.passage_records(ids, []))

    def passage_records(self, ids: Sequence[str], include: list[str]) -> dict[str, dict[str, Any]]:
        """``{id: {field: value}}`` of the passages found, from the source read in place first, then its own."""
        rows: dict[str, dict[str, Any]] = {}
        if self.passage_source is not None:
            rows.update(self._source_records(ids, include))
        rows.update(get_records(self.passages, [i for i in ids if i not in rows], include))
        return rows

    def _source_records(self, ids: Sequence[str], include: list[str]) -> dict[str, dict[str, Any]]:
        """:attr:`passage_source`'s records at one whole version of it (:func:`~..stores.consistency.read_guarded`)."""
        source = self.passage_source
        return read_guarded(source, self._source_marker, lambda: get_records(source, ids, include), records_only=True)

    def check_embedding_dimension(self) -> None:
        """Refuse (``EmbeddingDimensionError``) an embedder of another dimension than the collections'."""
        for collection in (*self.passage_collections(), self.facts, self.entities):
            check_embedding_dimension(collection, self.embed_model)

    def passage_count(self) -> int:
        """Passage records the index can read (its own and, when it reads one in place, the source's)."""
        return sum(collection.count() for collection in self.passage_collections())

    def _short_text_embedder(self) -> BaseEmbedding:
        """The embedder with ``short_text_batch_size`` (``benchmarks/short_text_batch.py``)."""
        model, size = self.embed_model, self.short_text_batch_size
        if not size or getattr(model, "embed_batch_size", None) in (None, size):
            return model
        if self._short_embedder is None:
            try:
                self._short_embedder = model.model_copy(update={"embed_batch_size": size})
            except Exception:  # an embedder that cannot be copied keeps its own batch size
                self._short_embedder = model
        return self._short_embedder

    def embed(self, texts: Sequence[str], short: bool = False) -> np.ndarray:
        """Embed texts longest first (batches pad little), rows in input order; ``short``: names and facts."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        model = self._short_text_embedder() if short else self.embed_model
        with embedding_dtype(self.short_text_dtype if short else "float32"):
            vectors = model.get_text_embedding_batch([texts[i] for i in order], show_progress=False)
        out = np.empty((len(texts), len(vectors[0])), dtype=np.float32)
        out[order] = np.asarray(vectors, dtype=np.float32)
        return out

    def store_entities(self, ids: list[str], keys: dict[str, str]) -> dict[str, np.ndarray]:
        """Embed and store the entities not yet stored (one an interrupted run left is reused); every one's vector."""
        if not ids:
            return {}
        stored = get_records(self.entities, ids, ["embeddings"])
        vectors_by_id = {e: np.asarray(row["embeddings"], dtype=np.float32) for e, row in stored.items()}
        missing = [e for e in ids if e not in stored]
        if missing:
            vectors = self.embed([keys[e] for e in missing], short=True)
            upsert_vectors(self.entities, missing, vectors)
            vectors_by_id.update(zip(missing, vectors, strict=True))
        return vectors_by_id

    def store_facts(self, ids: list[str], texts: dict[str, tuple[str, str, str]]) -> None:
        """Embed and store the facts not yet stored; ``texts`` gives their (subject, predicate, object) keys."""
        if not ids:
            return
        stored = existing_ids(self.facts, ids)  # once: a fact stored by an interrupted run is not embedded again
        missing = [f for f in ids if f not in stored]
        if missing:
            upsert_vectors(self.facts, missing, self.embed([fact_text(*texts[f]) for f in missing], short=True))

    def store_passages(self, nodes: Sequence[TextNode]) -> None:
        """Store the passage nodes the index does not hold, embedding those that carry no embedding."""
        held = self.held_passages([n.node_id for n in nodes])
        missing = [n for n in nodes if n.node_id not in held]
        if not missing:
            return
        unembedded = [n for n in missing if n.embedding is None]
        vectors = self.embed([n.get_content(metadata_mode=MetadataMode.EMBED) for n in unembedded])
        for node, vector in zip(unembedded, vectors, strict=True):
            node.embedding = vector.tolist()
        self.vector_store.add(list(missing))
        for node in unembedded:
            node.embedding = None

    def delete(self, passages: Sequence[str], entities: Sequence[str], facts: Sequence[str]) -> None:
        """Delete records from the three collections, passages first (nothing then points to a deleted record)."""
        delete_ids(self.passages, passages)
        delete_ids(self.facts, facts)
        delete_ids(self.entities, entities)

    def copy_to(self, path: Path, passage_ids: Sequence[str] = ()) -> None:
        """Copy the collections (and ``passage_ids`` of :attr:`passage_source`) to a new store at ``path``."""
        client = _persistent_client(path)
        fields = ["embeddings", "documents", "metadatas"]
        def copy(pages: Iterator[dict[str, Any]], name: str) -> None:
            target = self._owned(client, name)
            for page in pages:
                target.upsert(ids=page["ids"], embeddings=page["embeddings"], documents=page["documents"],
                              metadatas=page["metadatas"])
        for source in (self.passages, self.entities, self.facts):
            copy(pages(source, fields), source.name)
        if self.passage_source is not None:
            own = existing_ids(self.passages, passage_ids)
            borrowed = [p for p in passage_ids if p not in own]
            copy((self.passage_source.get(ids=borrowed[start : start + CHROMA_BATCH], include=fields)
                  for start in range(0, len(borrowed), CHROMA_BATCH)), self.passages.name)
            self.passage_source = None
        self._open(client, "local")
