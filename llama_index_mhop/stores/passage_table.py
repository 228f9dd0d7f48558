"""The Chroma passage collections held in memory once a version, for the LLM-free flows: the question searched by
its vector (one embedder call; one Chroma query, or the graph's walk) and a named entity's own passage found by its
title, a lookup rather than a search for the embedded name.

The table holds each row's id, text, node metadata and stored vector (``n x d`` floats: 1.5 KB a passage at 384
dimensions) and each passage's :class:`~llama_index_mhop.rules.ranking.PassageView`, read once; it is read again
when the collection's version changes (a write in this process, or in another through the version row).
"""

from __future__ import annotations

import asyncio
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore

from ..adapters.llama_index import build_query, retriever_embed_model, retriever_vector_store
from ..rules.ranking import PassageView, bridge_targets
from ..rules.text import MIN_NAME_CHARS, clean_name, normalize, strip_parenthetical
from .chroma_batches import pages
from .search import VersionMarker, collection_lock, node_copy, read_guarded

__all__ = ["FoundQuestion", "PassageSearch", "PassageTable", "closest", "towards"]


@dataclass
class PassageTable:
    """Every passage of one collection version: ``ids``, ``texts``, ``metadatas`` and unit ``vectors`` by row."""

    key: tuple[Any, ...]
    ids: list[str]
    texts: list[str]
    metadatas: list[dict[str, Any]]
    vectors: np.ndarray
    row_of: dict[str, int] = field(init=False)
    _keys: list[str] = field(init=False)  # each row's normalised subject ("" without a title)
    _subjects: dict[str, list[int]] = field(init=False)  # normalised subject -> rows
    _words: dict[str, list[int]] = field(init=False)  # a word of a subject -> rows
    _views: dict[int, PassageView] = field(init=False, default_factory=dict)
    _nodes: dict[int, BaseNode] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.row_of = {node_id: row for row, node_id in enumerate(self.ids)}
        self._keys, self._subjects, self._words = [], {}, {}
        for row, metadata in enumerate(self.metadatas):
            title = str(metadata.get("title") or "")
            key = normalize(strip_parenthetical(clean_name(title)) or clean_name(title))
            self._keys.append(key)
            if len(key) >= MIN_NAME_CHARS:
                self._subjects.setdefault(key, []).append(row)
                for word in set(key.split()):
                    self._words.setdefault(word, []).append(row)

    @classmethod
    def read(cls, collections: Sequence[Any], key: tuple[Any, ...]) -> PassageTable:
        """Every passage of ``collections``, a batch of ids at a time (an id in two: the first one's)."""
        read = [(p["ids"], p["documents"], p["metadatas"], p["embeddings"])
                for collection in collections for p in pages(collection, ["documents", "metadatas", "embeddings"])]
        ids, texts, metas, vectors = ([x for page in read for x in page[i]] for i in range(4))
        rows: dict[str, int] = {}
        for row, node_id in enumerate(ids):
            rows.setdefault(node_id, row)
        first = list(rows.values())
        ids, texts, metas = [ids[r] for r in first], [texts[r] for r in first], [metas[r] for r in first]
        matrix = np.asarray([vectors[r] for r in first], dtype=np.float32).reshape(len(ids), -1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return cls(key, ids, [t or "" for t in texts], [m or {} for m in metas], matrix / np.maximum(norms, 1e-12))

    def view(self, row: int) -> PassageView:
        """The row's passage view, made once a table (its subject and stems are cached on it)."""
        view = self._views.get(row)
        if view is None:
            title = self.metadatas[row].get("title")
            view = self._views[row] = PassageView(self.ids[row], self._node(row).get_content(), str(title or ""))
        return view

    def node(self, row: int) -> BaseNode:
        """The row as ``ChromaVectorStore`` reads it into a node (LlamaIndex's node metadata, else a plain node):
        a copy of the one the table keeps, for its caller to change."""
        return node_copy(self._node(row))

    def _node(self, row: int) -> BaseNode:
        node = self._nodes.get(row)
        if node is None:
            try:
                node = metadata_dict_to_node(self.metadatas[row], text=self.texts[row])
            except Exception:  # a row LlamaIndex did not write
                node = TextNode(text=self.texts[row], id_=self.ids[row], metadata=dict(self.metadatas[row]))
            self._nodes[row] = node
        return node

    def about(self, name: str) -> list[int]:
        """The rows whose subject (title without its parenthetical) names ``name``, as
        :meth:`~llama_index_mhop.rules.ranking.PassageView.is_about` judges it: equal, or one a whole-word part of
        the other."""
        key = normalize(clean_name(name))
        if len(key) < MIN_NAME_CHARS:
            return []
        words = key.split()
        rows: dict[int, None] = {}
        for size in range(len(words), 0, -1):  # subjects that are part of the name, the longest first
            for start in range(len(words) - size + 1):
                rows.update(dict.fromkeys(self._subjects.get(" ".join(words[start:start + size]), ())))
        rarest = min((self._words.get(w, []) for w in words), key=len)
        padded = f" {key} "
        for row in rarest:  # subjects the name is part of
            if padded in f" {self._keys[row]} ":
                rows[row] = None
        return list(rows)


@dataclass(frozen=True)
class FoundQuestion:
    """The question's search: its unit vector, its top rows and their similarities, and the table they index."""

    vector: np.ndarray
    rows: list[int]
    scores: list[float]
    table: PassageTable

    def nodes(self) -> list[NodeWithScore]:
        """The question's top passages with their similarities."""
        return [NodeWithScore(node=self.table.node(r), score=s) for r, s in zip(self.rows, self.scores, strict=True)]

    def looked_up(self, names: Sequence[str], aim: np.ndarray, k: int, query: str = "") -> list[NodeWithScore]:
        """The passages about each of ``names`` in turn (:meth:`PassageTable.about`), each name's closest to the
        unit vector ``aim`` first; with ``query``, then the passages the first one leads to, hop after hop, as
        :func:`~llama_index_mhop.rules.ranking.link_passages` follows a bridge. At most ``k``, scored by closeness."""
        table = self.table
        rows = list(dict.fromkeys(r for name in names for r in closest(table, table.about(name), aim)))[:k]
        hop, followed = rows[:1], list(names)
        while query and hop and len(rows) < k:
            view, hop = table.view(hop[0]), []
            for entity in bridge_targets(query, view, [*followed, view.subject]):
                hop = [r for r in closest(table, table.about(entity), aim) if r not in rows][:1]
                if hop:
                    followed.append(entity)
                    break
            rows += hop
        return [NodeWithScore(node=table.node(r), score=float(table.vectors[r] @ aim)) for r in rows]


class PassageSearch:
    """The question searched by its vector against the passage collections' table: by a Chroma query of a vector
    retriever's collection, or by a retriever with a ranking of its own (the graph's) given the question's vector.

    Build with :meth:`of`, which gives None for a retriever it cannot stand in for (not a ``VectorIndexRetriever``
    over Chroma, or one with filters or another query mode, and no ``passage_search()`` of its own).

    Args:
        embed_model: the embedder of the question (the passages' own).
        sources: gives the passage collections, each with its version row (None: this process alone); read at each
            question, so a store that moves (an index persisted to a new store) is followed.
        ranked: the retriever's ranking of a ``QueryBundle`` with its embedding; None: the first source's Chroma query.
    """

    def __init__(self, embed_model: Any, sources: Callable[[], Sequence[tuple[Any, VersionMarker | None]]],
                 ranked: Callable[[QueryBundle], list[NodeWithScore]] | None = None) -> None:
        self.embed_model = embed_model
        self.sources = sources
        self.ranked = ranked

    @classmethod
    def of(cls, retriever: BaseRetriever) -> PassageSearch | None:
        """The search of ``retriever``'s collection, made once a retriever."""
        if retriever not in _searches:
            own = getattr(retriever, "passage_search", None)
            _searches[retriever] = own() if callable(own) else cls._over(retriever)
        return _searches[retriever]

    @classmethod
    def _over(cls, retriever: BaseRetriever) -> PassageSearch | None:
        if not isinstance(retriever, VectorIndexRetriever):
            return None
        store = retriever_vector_store(retriever)
        if not isinstance(store, ChromaVectorStore) or not store.is_embedding_query:
            return None
        asked = build_query(retriever, QueryBundle(query_str="", embedding=[0.0]))
        if asked.filters is not None or asked.node_ids or asked.doc_ids or asked.mode.value != "default":
            return None
        marker = getattr(store, "_marker", None)  # GuardedChromaVectorStore's version row, else None
        return cls(retriever_embed_model(retriever), lambda: [(store.client, marker)])

    def question(self, query: str, k: int) -> FoundQuestion:
        """The top ``k`` rows of ``query``'s vector (one embedder call), read at one version with the table."""
        embedding = self.embed_model.get_query_embedding(query)
        vector = np.asarray(embedding, dtype=np.float32)
        vector /= max(float(np.linalg.norm(vector)), 1e-12)
        sources = self.sources()
        if self.ranked is not None:
            nodes = self.ranked(QueryBundle(query_str=query, embedding=embedding))[:k]
            table = _table(sources, [read_guarded(c, m, partial(_version, c, m), records_only=True)
                                     for c, m in sources])
            held = [n for n in nodes if n.node.node_id in table.row_of]
            return FoundQuestion(vector, [table.row_of[n.node.node_id] for n in held],
                                 [float(n.score or 0.0) for n in held], table)
        collection, marker = sources[0]

        def read() -> tuple[dict[str, Any], PassageTable]:
            found = collection.query(query_embeddings=[embedding], n_results=k, include=["distances"])
            return found, _table(sources, [_version(collection, marker)])
        found, table = read_guarded(collection, marker, read)
        # Similarities as ChromaVectorStore gives them, so the scores match a vector retriever's.
        return FoundQuestion(vector, [table.row_of[i] for i in found["ids"][0]],
                             [math.exp(-d) for d in found["distances"][0]], table)

    async def aquestion(self, query: str, k: int) -> FoundQuestion:
        """:meth:`question` in a worker thread."""
        return await asyncio.to_thread(self.question, query, k)

    def held(self, table: PassageTable, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        """``nodes`` without those the collections no longer hold with the text ``table`` read (one read of their
        ids): a write the version row does not see (through a plain ``ChromaVectorStore``) never brings a deleted
        or edited passage's text back. A table found stale is read again at the next question."""
        ids = [n.node.node_id for n in nodes]
        stored: dict[str, str] = {}  # id -> stored text; a query's results are few: one get a collection
        for collection, marker in self.sources():
            asked = [i for i in ids if i not in stored]
            if asked:
                found = read_guarded(collection, marker, partial(collection.get, ids=asked, include=["documents"]),
                                     records_only=True)
                stored.update((i, text or "") for i, text in zip(found["ids"], found["documents"], strict=True))
        kept = [n for n in nodes if n.node.node_id in stored and (n.node.node_id not in table.row_of or
                stored[n.node.node_id] == table.texts[table.row_of[n.node.node_id]])]
        if len(kept) < len(nodes):
            with _tables_lock:
                for name in [name for name, cached in _tables.items() if cached is table]:
                    del _tables[name]
        return kept

    async def aheld(self, table: PassageTable, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        """:meth:`held` in a worker thread."""
        return await asyncio.to_thread(self.held, table, nodes)


def _table(sources: Sequence[tuple[Any, VersionMarker | None]], versions: list[tuple[Any, ...]]) -> PassageTable:
    """The table of the ``sources`` at their ``versions``, read once a version (one table a set of collections,
    whichever retriever reads it)."""
    key, name = tuple(versions), tuple(v[0] for v in versions)
    with _tables_lock:
        table = _tables.get(name)
        if table is None or table.key != key:
            table = _tables[name] = PassageTable.read([c for c, _ in sources], key)
    return table


def _version(collection: Any, marker: VersionMarker | None) -> tuple[Any, ...]:
    """A collection's id and version: its lock's generation, and its version row's (else its count)."""
    version = marker.read().generation if marker is not None else collection.count()
    return str(collection.id), collection_lock(collection).generation, version


_searches: weakref.WeakKeyDictionary[BaseRetriever, PassageSearch | None] = weakref.WeakKeyDictionary()
_tables: dict[tuple[str, ...], PassageTable] = {}  # by collection ids: the latest version read
_tables_lock = threading.Lock()


def closest(table: PassageTable, rows: Sequence[int], towards: np.ndarray) -> list[int]:
    """``rows`` by their stored vectors' similarity to ``towards``, closest first (first listed on ties)."""
    if not rows:
        return []
    scores = table.vectors[list(rows)] @ towards
    return [rows[i] for i in sorted(range(len(rows)), key=lambda i: -float(scores[i]))]


def towards(vector: np.ndarray, other: np.ndarray) -> np.ndarray:
    """The unit vector halfway between two unit vectors: ``vector`` moved towards ``other`` (their normalised sum)."""
    moved = vector + other
    return moved / max(float(np.linalg.norm(moved)), 1e-12)
