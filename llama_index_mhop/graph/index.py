"""``HippoGraphIndex``: HippoRAG 2's memory (passages, entities, facts and their graph) over Chroma.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", seeds 003/004) indexes a corpus in three embedding
stores and one graph: every passage is embedded, read once by OpenIE (:mod:`.extraction`) for its entities and
(subject, predicate, object) facts, the entities and facts are embedded too, and the graph
(:mod:`.knowledge_graph`) links entities to the passages that contain them, to each other by facts, and to their
synonyms. :class:`~llama_index_mhop.retrievers.hippo_graph.HippoGraphRetriever` searches it.

Here the three stores are Chroma collections of one client (``{name}_passages``, ``{name}_entities``,
``{name}_facts``), every record's id derived from its content (``stores.stable_id``), so indexing the same text
twice adds nothing. The passage collection is a LlamaIndex ``ChromaVectorStore`` collection: passage nodes keep
their document's metadata and can be opened as an ordinary ``VectorStoreIndex``.

Indexing runs in batches. After each batch the Chroma writes are done and one line is appended to a JSON Lines
checkpoint in ``persist_dir`` (the batch's passage ids with their entity and fact ids), so an interrupted build
resumes where it stopped: :meth:`HippoGraphIndex.from_documents` with the same ``persist_dir`` reads the
checkpoint, skips the passages it lists without extracting or embedding them again, and continues. Persistence is
JSON (config, graph nodes and edges, with a format version) plus Chroma; nothing is pickled.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core import Document
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore
from tqdm.auto import tqdm

from ..lm import FallbackCounter
from ..stores import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, chunk_documents, load_documents, stable_id
from .extraction import Extraction, Extractor, OpenIEExtractor, entity_key, title_entities
from .knowledge_graph import (
    DEFAULT_SYNONYMY_THRESHOLD,
    DEFAULT_SYNONYMY_TOP_K,
    DEFAULT_TITLE_EDGE_WEIGHT,
    KnowledgeGraph,
)
from .ppr import DEFAULT_DAMPING, PageRankGraph

if TYPE_CHECKING:
    from llama_index.core.query_engine import RetrieverQueryEngine

    from ..retrievers.hippo_graph import HippoGraphRetriever

__all__ = [
    "CHECKPOINT_FILE",
    "CONFIG_FILE",
    "DEFAULT_INDEX_NAME",
    "DEFAULT_INSERT_BATCH_SIZE",
    "DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES",
    "DEFAULT_SHORT_TEXT_BATCH_SIZE",
    "GRAPH_FILE",
    "INDEX_FORMAT_VERSION",
    "EmptyIndexError",
    "HippoGraphIndex",
    "RetrievalState",
    "fact_text",
]

logger = logging.getLogger(__name__)

DEFAULT_INDEX_NAME = "hippo"
DEFAULT_INSERT_BATCH_SIZE = 256
DEFAULT_SHORT_TEXT_BATCH_SIZE = 512
#: Up to this many entities synonymy is computed exactly (all pairs); beyond, from Chroma's HNSW index.
DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES = 20_000
INDEX_FORMAT_VERSION = 1
CONFIG_FILE = "hippo_config.json"
GRAPH_FILE = "hippo_graph.json"
CHECKPOINT_FILE = "hippo_checkpoint.jsonl"
_CHROMA_DIR = "chroma"
_CHROMA_BATCH = 2000  # well under Chroma's maximum batch size
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,480}[A-Za-z0-9]$")

BatchHook = Callable[[int, int], None]


class EmptyIndexError(ValueError):
    """The index holds no passage to retrieve."""


def fact_text(subject: str, predicate: str, obj: str) -> str:
    """The text a fact is embedded and shown as: "subject predicate object"."""
    return f"{subject} {predicate} {obj}"


def _normalise_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.size == 0:
        return matrix.reshape(matrix.shape[0], -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


@dataclass
class _PassageWork:
    """One passage on its way into the index."""

    node: TextNode
    entities: dict[str, str]  # entity id -> key
    facts: dict[str, tuple[str, str, str]]  # fact id -> (subject id, predicate, object id)
    fact_texts: dict[str, tuple[str, str, str]]  # fact id -> (subject key, predicate, object key)
    title_entities: tuple[str, ...]  # ids of the entities the title names


@dataclass
class RetrievalState:
    """Everything a query needs, loaded once per graph version (never per query).

    Node order is the PageRank order: the first ``len(passage_ids)`` nodes are the passages.
    """

    version: int
    passage_ids: list[str]
    passage_nodes: list[BaseNode]
    passage_matrix: np.ndarray
    entity_ids: list[str]
    entity_names: list[str]
    entity_node: dict[str, int]
    entity_key_node: dict[str, int]
    passage_counts: np.ndarray  # per node: number of passages containing the entity (0 for passage nodes)
    fact_ids: list[str]
    fact_triples: list[tuple[str, str, str]]
    fact_nodes: np.ndarray  # (facts, 2): node index of subject and object
    fact_matrix: np.ndarray
    pagerank: PageRankGraph

    @property
    def num_nodes(self) -> int:
        return self.pagerank.n_nodes


def _read_json(path: Path) -> dict[str, Any]:
    """A saved JSON object, or a ValueError naming the file (a truncated or edited file is never half-read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); the Chroma data is untouched") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


class HippoGraphIndex:
    """HippoRAG 2's memory over Chroma: passage, entity and fact collections and the knowledge graph.

    Build one with :meth:`from_documents`, reopen it with :meth:`from_persist_dir`, update it with :meth:`insert`
    and :meth:`delete`, and query it with :meth:`as_retriever` or :meth:`as_query_engine`.

    Example:
        >>> index = HippoGraphIndex.from_documents(documents, persist_dir="./hippo")  # doctest: +SKIP
        >>> nodes = index.as_retriever(similarity_top_k=5).retrieve("Who directed Lover Come Back?")  # doctest: +SKIP
    """

    def __init__(
        self,
        *,
        chroma_client: Any,
        embed_model: BaseEmbedding,
        graph: KnowledgeGraph | None = None,
        name: str = DEFAULT_INDEX_NAME,
        extractor: Extractor | None = None,
        persist_dir: str | os.PathLike[str] | None = None,
        chroma_mode: str = "external",
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        insert_batch_size: int = DEFAULT_INSERT_BATCH_SIZE,
        num_workers: int = 4,
        show_progress: bool = True,
        short_text_batch_size: int | None = DEFAULT_SHORT_TEXT_BATCH_SIZE,
        exact_synonymy_max_entities: int = DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"index name {name!r} must be 3-480 characters of letters, digits, '.', '_' or '-', starting and "
                "ending with a letter or digit (it prefixes the Chroma collection names)"
            )
        if insert_batch_size < 1:
            raise ValueError(f"insert_batch_size must be >= 1, got {insert_batch_size}")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        self.name = name
        self.embed_model = embed_model
        self.graph = graph if graph is not None else KnowledgeGraph()
        self.extractor: Extractor = extractor if extractor is not None else OpenIEExtractor()
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.insert_batch_size = insert_batch_size
        self.num_workers = num_workers
        self.show_progress = show_progress
        self.short_text_batch_size = short_text_batch_size
        self.exact_synonymy_max_entities = exact_synonymy_max_entities
        self._short_embedder: BaseEmbedding | None = None
        self._chroma_mode = chroma_mode
        self._client = chroma_client
        self._open_collections()
        self._entity_vectors: dict[str, np.ndarray] = {}
        # Writers (insert, delete) hold the lock for a whole change. Queries meanwhile answer from the loaded state
        # if it is the graph as the last finished change left it, else wait: never from a half-changed graph.
        self._state: RetrievalState | None = None
        self._write_lock = threading.RLock()
        self._finished_version = self.graph.version
        self._changes_running = 0
        #: Seconds spent per indexing phase since this object was created (extraction, entities, facts, ...).
        self.build_seconds: dict[str, float] = {}

    @contextmanager
    def _change(self) -> Iterator[None]:
        """Hold the write lock for one insert or delete; when it ends, its graph version is the finished one."""
        with self._write_lock:
            self._changes_running += 1
            try:
                yield
            finally:
                self._changes_running -= 1
                self._finished_version = self.graph.version

    def _timed(self, phase: str, started: float) -> None:
        self.build_seconds[phase] = self.build_seconds.get(phase, 0.0) + time.perf_counter() - started

    # ------------------------------------------------------------------ stores

    def _open_collections(self) -> None:
        space = {"hnsw:space": "cosine"}
        self.passages_collection = self._client.get_or_create_collection(f"{self.name}_passages", metadata=space)
        self.entities_collection = self._client.get_or_create_collection(f"{self.name}_entities", metadata=space)
        self.facts_collection = self._client.get_or_create_collection(f"{self.name}_facts", metadata=space)
        self._vector_store = ChromaVectorStore(chroma_collection=self.passages_collection)

    @property
    def chroma_client(self) -> Any:
        return self._client

    @property
    def fallback_counts(self) -> FallbackCounter:
        """How often OpenIE fell back from the LM to the LLM-free extractor (empty for a custom extractor)."""
        counts = getattr(self.extractor, "fallback_counts", None)
        return counts if isinstance(counts, FallbackCounter) else FallbackCounter()

    @property
    def vector_store(self) -> ChromaVectorStore:
        """The passage collection as a LlamaIndex vector store."""
        return self._vector_store

    def counts(self) -> dict[str, int]:
        """Records in each Chroma collection and nodes/edges of the graph (for checks and reports)."""
        return {
            "passages": self.graph.num_passages,
            "entities": self.graph.num_entities,
            "facts": self.graph.num_facts,
            "chroma_passages": self.passages_collection.count(),
            "chroma_entities": self.entities_collection.count(),
            "chroma_facts": self.facts_collection.count(),
            "graph_nodes": self.graph.graph.number_of_nodes(),
            "graph_edges": self.graph.graph.number_of_edges(),
        }

    @staticmethod
    def _existing(collection: Any, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), _CHROMA_BATCH):
            found.update(collection.get(ids=list(ids[start : start + _CHROMA_BATCH]), include=[])["ids"])
        return found

    @staticmethod
    def _get(collection: Any, ids: Sequence[str], include: list[str]) -> dict[str, dict[str, Any]]:
        """``{id: {field: value}}`` for the ids present in the collection."""
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), _CHROMA_BATCH):
            page = collection.get(ids=list(ids[start : start + _CHROMA_BATCH]), include=include)
            for position, record_id in enumerate(page["ids"]):
                out[record_id] = {name: page[name][position] for name in include}
        return out

    @staticmethod
    def _delete(collection: Any, ids: Sequence[str]) -> None:
        for start in range(0, len(ids), _CHROMA_BATCH):
            collection.delete(ids=list(ids[start : start + _CHROMA_BATCH]))

    def _short_text_embedder(self) -> BaseEmbedding:
        """The embedder with ``short_text_batch_size``: entity names and facts are a few tokens each, and a
        forward pass costs about the same for 64 or 512 of them, so large batches embed them several times
        faster. A shallow pydantic copy shares the loaded model."""
        model = self.embed_model
        if self.short_text_batch_size and getattr(model, "embed_batch_size", None) not in (None,
                                                                                          self.short_text_batch_size):
            if self._short_embedder is None:
                try:
                    self._short_embedder = model.model_copy(update={"embed_batch_size": self.short_text_batch_size})
                except Exception:  # an embedder that cannot be copied keeps its own batch size
                    self._short_embedder = model
            return self._short_embedder
        return model

    def _embed(self, texts: Sequence[str], short: bool = False) -> np.ndarray:
        """Embed texts, longest first so each batch pads little, and return rows in the input order."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        model = self._short_text_embedder() if short else self.embed_model
        vectors = model.get_text_embedding_batch([texts[i] for i in order], show_progress=False)
        out = np.empty((len(texts), len(vectors[0])), dtype=np.float32)
        out[order] = np.asarray(vectors, dtype=np.float32)
        return out

    # ------------------------------------------------------------------ building

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document] | str | os.PathLike[str],
        embed_model: BaseEmbedding | None = None,
        chroma_client: Any = None,
        persist_dir: str | os.PathLike[str] | None = None,
        lm: Any = None,
        llm: Any = None,
        show_progress: bool = True,
        *,
        name: str = DEFAULT_INDEX_NAME,
        extractor: Extractor | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        insert_batch_size: int = DEFAULT_INSERT_BATCH_SIZE,
        num_workers: int = 4,
        synonymy_threshold: float = DEFAULT_SYNONYMY_THRESHOLD,
        synonymy_top_k: int = DEFAULT_SYNONYMY_TOP_K,
        title_edge_weight: float = DEFAULT_TITLE_EDGE_WEIGHT,
        short_text_batch_size: int | None = DEFAULT_SHORT_TEXT_BATCH_SIZE,
        exact_synonymy_max_entities: int = DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES,
        on_batch_end: BatchHook | None = None,
    ) -> HippoGraphIndex:
        """Index documents (or a corpus path, see ``stores.load_documents``) into a new or resumed index.

        With ``persist_dir``, the index is saved there when done, its Chroma data lives in ``persist_dir/chroma``
        (unless a ``chroma_client`` is given), and an interrupted build resumes from its checkpoint: calling this
        again with the same arguments continues where the last batch ended. A finished index already in
        ``persist_dir`` is reopened and only documents it lacks are added.

        Args:
            documents: LlamaIndex documents (their metadata is kept on the passage nodes) or a corpus path.
            embed_model: the embedder of all three stores; default all-MiniLM-L6-v2.
            chroma_client: a Chroma client; default ``persist_dir/chroma``, or an in-memory client.
            persist_dir: where the config, graph and checkpoint are written.
            lm: a DSPy LM for OpenIE. llm: a LlamaIndex LLM for OpenIE. Neither: the LLM-free extractor (unless
                ``dspy.settings.lm`` is set).
            show_progress: show a progress bar over passages.
            name: prefix of the Chroma collection names.
            extractor: a custom extractor (anything with ``extract(text, title) -> Extraction``); overrides lm/llm.
            chunk_size: passage size in tokens (longer documents are split, as ``vector_index.build_vector_index`` does).
            chunk_overlap: tokens shared by neighbouring chunks.
            insert_batch_size: passages per batch (one checkpoint line per batch).
            num_workers: concurrent OpenIE calls when an LM extracts.
            synonymy_threshold: cosine similarity for a synonymy edge (HippoRAG 2: 0.8).
            synonymy_top_k: most synonyms per entity.
            title_edge_weight: weight of a passage's edge to its own title entity (see ``knowledge_graph``).
            short_text_batch_size: embedding batch size for entity names and facts (None: the embedder's own).
            exact_synonymy_max_entities: above this many entities, synonyms come from Chroma's HNSW index of the
                entity collection instead of exact all-pairs similarities.
            on_batch_end: called as ``on_batch_end(batch_number, passages_done)`` after each checkpointed batch.

        Raises:
            CorpusError: no text to index.
            ValueError: a bad name or batch size.
        """
        from ..defaults import default_embed_model

        docs = load_documents(documents)
        embed_model = embed_model or default_embed_model()
        if extractor is None:
            extractor = OpenIEExtractor(lm=lm, llm=llm)
        if persist_dir is not None and (Path(persist_dir) / CONFIG_FILE).is_file():
            index = cls.from_persist_dir(persist_dir, chroma_client=chroma_client, embed_model=embed_model)
            index.extractor = extractor
            index.show_progress = show_progress
            index.insert(docs, on_batch_end=on_batch_end)
            return index
        client, mode = cls._resolve_client(chroma_client, persist_dir)
        graph = KnowledgeGraph(
            synonymy_threshold=synonymy_threshold, synonymy_top_k=synonymy_top_k, title_edge_weight=title_edge_weight
        )
        index = cls(
            chroma_client=client,
            embed_model=embed_model,
            graph=graph,
            name=name,
            extractor=extractor,
            persist_dir=persist_dir,
            chroma_mode=mode,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            insert_batch_size=insert_batch_size,
            num_workers=num_workers,
            show_progress=show_progress,
            short_text_batch_size=short_text_batch_size,
            exact_synonymy_max_entities=exact_synonymy_max_entities,
        )
        index.insert(docs, on_batch_end=on_batch_end)
        return index

    @staticmethod
    def _client_mode(chroma_client: Any) -> str:
        """"ephemeral" for an in-memory Chroma client (its data is copied out on persist), else "external"."""
        try:
            settings = chroma_client.get_settings()
        except Exception:  # a client without settings: treat it as the user's own store
            return "external"
        remote = "fastapi" in str(getattr(settings, "chroma_api_impl", "")).lower()
        return "ephemeral" if not getattr(settings, "is_persistent", True) and not remote else "external"

    @classmethod
    def _resolve_client(cls, chroma_client: Any, persist_dir: str | os.PathLike[str] | None) -> tuple[Any, str]:
        if chroma_client is not None:
            return chroma_client, cls._client_mode(chroma_client)
        import chromadb
        from chromadb.config import Settings

        if persist_dir is not None:
            path = Path(persist_dir) / _CHROMA_DIR
            path.mkdir(parents=True, exist_ok=True)
            return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False)), "local"
        return chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False)), "ephemeral"

    def insert(
        self,
        documents: Document | Sequence[Document],
        show_progress: bool | None = None,
        on_batch_end: BatchHook | None = None,
    ) -> list[str]:
        """Add documents: new passages go into the stores and the graph, without rebuilding anything else.

        Passages already indexed (same content id) are skipped. With a ``persist_dir`` the work is checkpointed
        per batch and the index is saved at the end. Queries running in other threads meanwhile answer from the
        graph as it was before the insert; later queries see all of it.

        Returns:
            The ids of the passages added.
        """
        docs = [documents] if isinstance(documents, Document) else load_documents(list(documents))
        nodes = chunk_documents(docs, self.chunk_size, self.chunk_overlap)
        show = self.show_progress if show_progress is None else show_progress
        with self._change():
            return self._insert_nodes(nodes, show, on_batch_end)

    def _insert_nodes(self, nodes: Sequence[TextNode], show: bool, on_batch_end: BatchHook | None) -> list[str]:
        done_before = set(self._resume_checkpoint())
        todo = [n for n in nodes if n.node_id not in self.graph.passages]
        added = [n.node_id for n in todo]
        todo = [n for n in todo if n.node_id not in done_before]
        started = time.perf_counter()
        bar = tqdm(total=len(added), desc=f"Indexing {self.name}", unit="passage", disable=not show)
        bar.update(len(added) - len(todo))
        batch_number = 0
        for start in range(0, len(todo), self.insert_batch_size):
            batch = todo[start : start + self.insert_batch_size]
            self._index_batch(batch, bar)
            batch_number += 1
            if on_batch_end is not None:
                on_batch_end(batch_number, start + len(batch))
        bar.set_postfix_str("synonymy edges")
        self._refresh_synonymy()
        bar.close()
        if added:
            logger.info("%s: indexed %d passages in %.1fs (%s); seconds by phase: %s", self.name, len(added),
                        time.perf_counter() - started, self.graph,
                        {k: round(v, 1) for k, v in self.build_seconds.items()})
        if self.persist_dir is not None and (added or not (self.persist_dir / GRAPH_FILE).is_file()):
            self.persist()
        return added

    def _extract(self, nodes: Sequence[TextNode]) -> list[Extraction]:
        def one(node: TextNode) -> Extraction:
            return self.extractor.extract(node.get_content(metadata_mode=MetadataMode.NONE),
                                          str(node.metadata.get("title", "")))

        if getattr(self.extractor, "uses_lm", False) and self.num_workers > 1 and len(nodes) > 1:
            with ThreadPoolExecutor(max_workers=self.num_workers, thread_name_prefix="hippo-openie") as pool:
                return list(pool.map(one, nodes))
        return [one(n) for n in nodes]

    @staticmethod
    def _work(node: TextNode, extraction: Extraction) -> _PassageWork:
        entities: dict[str, str] = {}
        own = []
        for name in title_entities(str(node.metadata.get("title", ""))):
            key = entity_key(name)
            if key:
                entities.setdefault(stable_id("entity", key), key)
                own.append(stable_id("entity", key))
        for name in extraction.entities:
            key = entity_key(name)
            if key:
                entities.setdefault(stable_id("entity", key), key)
        facts: dict[str, tuple[str, str, str]] = {}
        texts: dict[str, tuple[str, str, str]] = {}
        for subject, predicate, obj in extraction.triples:
            s_key, o_key = entity_key(subject), entity_key(obj)
            relation = " ".join(predicate.lower().split())
            if not s_key or not o_key or not relation or s_key == o_key:
                continue
            s_id, o_id = stable_id("entity", s_key), stable_id("entity", o_key)
            entities.setdefault(s_id, s_key)
            entities.setdefault(o_id, o_key)
            fact_id = stable_id("fact", s_key, relation, o_key)  # the id fact_node() gives this fact
            facts.setdefault(fact_id, (s_id, relation, o_id))
            texts.setdefault(fact_id, (s_key, relation, o_key))
        return _PassageWork(node, entities, facts, texts, tuple(dict.fromkeys(own)))

    def _index_batch(self, nodes: Sequence[TextNode], bar: Any) -> None:
        bar.set_postfix_str("extraction")
        started = time.perf_counter()
        works = [self._work(n, e) for n, e in zip(nodes, self._extract(nodes), strict=True)]
        self._timed("extraction", started)
        # Entities and facts first, passages last: a passage in Chroma has everything it points to.
        bar.set_postfix_str("entities")
        started = time.perf_counter()
        entities: dict[str, str] = {}
        for work in works:
            entities.update(work.entities)
        new_entities = [e for e in entities if e not in self.graph.entity_names]
        self._store_entities(new_entities, entities)
        self._timed("entities", started)
        bar.set_postfix_str("facts")
        started = time.perf_counter()
        facts: dict[str, tuple[str, str, str]] = {}
        fact_ids: dict[str, tuple[str, str, str]] = {}
        for work in works:
            facts.update(work.fact_texts)
            fact_ids.update(work.facts)
        new_facts = [f for f in facts if f not in self.graph.facts]
        self._store_facts(new_facts, facts, fact_ids)
        self._timed("facts", started)
        bar.set_postfix_str("passages")
        started = time.perf_counter()
        self._store_passages([w.node for w in works])
        self._timed("passages", started)
        started = time.perf_counter()
        self._write_checkpoint(works)
        for work in works:
            self._add_to_graph(work.node.node_id, work.entities, work.facts, work.node.ref_doc_id,
                               str(work.node.metadata.get("title", "")), work.title_entities)
        self._timed("graph", started)
        bar.update(len(nodes))

    def _add_to_graph(self, passage_id: str, entities: dict[str, str], facts: dict[str, tuple[str, str, str]],
                      ref_doc_id: str | None, title: str, own: Sequence[str]) -> None:
        self.graph.add_passage(passage_id, entities, facts, ref_doc_id=ref_doc_id, title=title, title_entities=own)

    def _store_entities(self, ids: list[str], keys: dict[str, str]) -> None:
        if not ids:
            return
        stored = self._get(self.entities_collection, ids, ["embeddings"])
        for entity_id, row in stored.items():  # left by an interrupted run: reuse, do not embed again
            self._entity_vectors[entity_id] = np.asarray(row["embeddings"], dtype=np.float32)
        missing = [e for e in ids if e not in stored]
        if not missing:
            return
        vectors = self._embed([keys[e] for e in missing], short=True)
        for start in range(0, len(missing), _CHROMA_BATCH):
            chunk = missing[start : start + _CHROMA_BATCH]
            self.entities_collection.upsert(
                ids=chunk,
                embeddings=vectors[start : start + len(chunk)],
                documents=[keys[e] for e in chunk],
                metadatas=[{"name": keys[e]} for e in chunk],
            )
        for entity_id, vector in zip(missing, vectors, strict=True):
            self._entity_vectors[entity_id] = vector

    def _store_facts(self, ids: list[str], texts: dict[str, tuple[str, str, str]],
                     node_ids: dict[str, tuple[str, str, str]]) -> None:
        if not ids:
            return
        missing = [f for f in ids if f not in self._existing(self.facts_collection, ids)]
        if not missing:
            return
        vectors = self._embed([fact_text(*texts[f]) for f in missing], short=True)
        for start in range(0, len(missing), _CHROMA_BATCH):
            chunk = missing[start : start + _CHROMA_BATCH]
            self.facts_collection.upsert(
                ids=chunk,
                embeddings=vectors[start : start + len(chunk)],
                documents=[fact_text(*texts[f]) for f in chunk],
                metadatas=[
                    {"subject": texts[f][0], "predicate": texts[f][1], "object": texts[f][2],
                     "subject_id": node_ids[f][0], "object_id": node_ids[f][2]}
                    for f in chunk
                ],
            )

    def _store_passages(self, nodes: Sequence[TextNode]) -> None:
        ids = [n.node_id for n in nodes]
        existing = self._existing(self.passages_collection, ids)
        missing = [n for n in nodes if n.node_id not in existing]
        if not missing:
            return
        vectors = self._embed([n.get_content(metadata_mode=MetadataMode.EMBED) for n in missing])
        for node, vector in zip(missing, vectors, strict=True):
            node.embedding = vector.tolist()
        self._vector_store.add(list(missing))
        for node in missing:
            node.embedding = None

    def _entity_matrix(self) -> tuple[list[str], np.ndarray]:
        ids = sorted(self.graph.entity_names)
        missing = [e for e in ids if e not in self._entity_vectors]
        if missing:
            stored = self._get(self.entities_collection, missing, ["embeddings"])
            lost = [e for e in missing if e not in stored]
            if lost:
                vectors = self._embed([self.graph.entity_names[e] for e in lost], short=True)
                for entity_id, vector in zip(lost, vectors, strict=True):
                    stored[entity_id] = {"embeddings": vector}
            for entity_id, row in stored.items():
                self._entity_vectors[entity_id] = np.asarray(row["embeddings"], dtype=np.float32)
        for gone in set(self._entity_vectors) - set(self.graph.entity_names):
            del self._entity_vectors[gone]
        if not ids:
            return ids, np.zeros((0, 1), dtype=np.float32)
        return ids, np.vstack([self._entity_vectors[e] for e in ids])

    def _refresh_synonymy(self) -> None:
        """Synonymy edges for new and stale entities: exact all-pairs up to ``exact_synonymy_max_entities``
        entities, then nearest neighbours from the entity collection's HNSW index (all-pairs grows with the
        square of the entity count)."""
        if not self.graph.stale_synonyms:
            return
        started = time.perf_counter()
        if self.graph.num_entities <= self.exact_synonymy_max_entities:
            ids, matrix = self._entity_matrix()
            self.graph.update_synonymy(ids, matrix)
        else:
            self.graph.update_synonymy_by_search(self._nearest_entities)
            self._entity_vectors.clear()  # only the new entities' vectors were needed: do not hold them all
        self._timed("synonymy", started)

    def _vectors_of(self, ids: Sequence[str]) -> np.ndarray:
        missing = [e for e in ids if e not in self._entity_vectors]
        if missing:
            for entity_id, row in self._get(self.entities_collection, missing, ["embeddings"]).items():
                self._entity_vectors[entity_id] = np.asarray(row["embeddings"], dtype=np.float32)
        lost = [e for e in ids if e not in self._entity_vectors]
        if lost:
            for entity_id, vector in zip(lost, self._embed([self.graph.entity_names[e] for e in lost], short=True),
                                         strict=True):
                self._entity_vectors[entity_id] = vector
        return np.vstack([self._entity_vectors[e] for e in ids])

    def _nearest_entities(self, ids: list[str]) -> list[list[tuple[str, float]]]:
        """Each entity's nearest entities as (id, cosine), from Chroma's HNSW index of the entity collection.

        A first query asks for 16 neighbours; an entity whose 16th is still above the threshold is asked again for
        ``synonymy_top_k`` + 1 (itself included), so most entities cost one small query.
        """
        total = self.entities_collection.count()
        wanted = min(self.graph.synonymy_top_k + 1, total)
        first = min(16, wanted)
        vectors = self._vectors_of(ids)
        threshold = self.graph.synonymy_threshold

        def query(rows: np.ndarray, n: int) -> list[list[tuple[str, float]]]:
            found = self.entities_collection.query(query_embeddings=rows, n_results=n, include=["distances"])
            return [[(e, 1.0 - float(d)) for e, d in zip(i, dist, strict=True)]
                    for i, dist in zip(found["ids"], found["distances"], strict=True)]

        results = query(vectors, first) if first else [[] for _ in ids]
        again = [i for i, r in enumerate(results) if first < wanted and len(r) == first and r[-1][1] >= threshold]
        if again:
            for i, r in zip(again, query(vectors[again], wanted), strict=True):
                results[i] = r
        return results

    # ------------------------------------------------------------------ checkpoint

    @property
    def _checkpoint_path(self) -> Path | None:
        return None if self.persist_dir is None else self.persist_dir / CHECKPOINT_FILE

    def _write_checkpoint(self, works: Sequence[_PassageWork]) -> None:
        path = self._checkpoint_path
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        new_file = not path.exists()
        with path.open("a", encoding="utf-8") as handle:
            if new_file:
                handle.write(json.dumps({"format_version": INDEX_FORMAT_VERSION, "name": self.name}) + "\n")
            line = {
                "passages": {
                    w.node.node_id: {
                        "entities": w.entities,
                        "facts": {f: list(t) for f, t in w.facts.items()},
                        "ref_doc_id": w.node.ref_doc_id,
                        "title": str(w.node.metadata.get("title", "")),
                        "title_entities": list(w.title_entities),
                    }
                    for w in works
                }
            }
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def _resume_checkpoint(self) -> list[str]:
        """Add the passages a checkpoint lists (and Chroma holds) to the graph; return their ids."""
        path = self._checkpoint_path
        if path is None or not path.is_file():
            return []
        lines = path.read_text(encoding="utf-8").splitlines()
        records: dict[str, dict[str, Any]] = {}
        for number, line in enumerate(lines):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                if number == len(lines) - 1:
                    break  # the last line was being written when the run stopped
                raise ValueError(
                    f"{path}: line {number + 1} is not valid JSON; delete the checkpoint to rebuild"
                ) from None
            if number == 0:
                if data.get("format_version") != INDEX_FORMAT_VERSION or data.get("name") != self.name:
                    raise ValueError(f"{path} belongs to another index ({data}); delete it to rebuild")
                continue
            records.update(data.get("passages", {}))
        pending = [pid for pid in records if pid not in self.graph.passages]
        stored = self._existing(self.passages_collection, pending)
        resumed = []
        for pid in pending:
            if pid not in stored:
                continue  # the checkpoint outran Chroma (another client?): index it again
            rec = records[pid]
            self._add_to_graph(pid, dict(rec["entities"]), {f: tuple(t) for f, t in rec["facts"].items()},
                               rec.get("ref_doc_id"), rec.get("title", ""), rec.get("title_entities", []))
            resumed.append(pid)
        if resumed:
            logger.info("%s: resumed %d passages from %s", self.name, len(resumed), path)
        return resumed

    # ------------------------------------------------------------------ delete

    def delete(self, doc_id: str) -> list[str]:
        """Remove a passage (by node id) or every passage of a document (by ``ref_doc_id``).

        The passage nodes, their edges, and the facts and entities no other passage supports leave the graph and
        the Chroma collections; synonym lists are repaired. Queries running in other threads meanwhile answer
        from the graph as it was before the delete.

        Returns:
            The ids of the passages removed.

        Raises:
            KeyError: no passage and no document has this id.
        """
        with self._change():
            if doc_id in self.graph.passages:
                passage_ids = [doc_id]
            else:
                passage_ids = self.graph.passages_of_document(doc_id)
            if not passage_ids:
                raise KeyError(f"no passage or document with id {doc_id!r} in index {self.name!r}")
            removed_entities: list[str] = []
            removed_facts: list[str] = []
            for pid in passage_ids:
                entities, facts = self.graph.remove_passage(pid)
                removed_entities.extend(entities)
                removed_facts.extend(facts)
            self._delete(self.passages_collection, passage_ids)
            self._delete(self.facts_collection, removed_facts)
            self._delete(self.entities_collection, removed_entities)
            for entity_id in removed_entities:
                self._entity_vectors.pop(entity_id, None)
            self._refresh_synonymy()
            if self.persist_dir is not None:
                self.persist()
            return passage_ids

    def delete_ref_doc(self, ref_doc_id: str) -> list[str]:
        """LlamaIndex's name for :meth:`delete` of a document."""
        return self.delete(ref_doc_id)

    # ------------------------------------------------------------------ persistence

    def config(self) -> dict[str, Any]:
        model = self.embed_model
        return {
            "format_version": INDEX_FORMAT_VERSION,
            "name": self.name,
            "chroma": self._chroma_mode if self._chroma_mode != "ephemeral" else "local",
            "collections": {
                "passages": self.passages_collection.name,
                "entities": self.entities_collection.name,
                "facts": self.facts_collection.name,
            },
            "embed_model": {"class": type(model).__name__, "model_name": getattr(model, "model_name", None)},
            "chunk_size": self.chunk_size,
            "chunk_overlap": self.chunk_overlap,
            "insert_batch_size": self.insert_batch_size,
            "short_text_batch_size": self.short_text_batch_size,
            "exact_synonymy_max_entities": self.exact_synonymy_max_entities,
        }

    def persist(self, persist_dir: str | os.PathLike[str] | None = None) -> Path:
        """Write the config and the graph as JSON (and, for an in-memory index, copy Chroma to ``persist_dir``).

        Returns:
            The directory written.

        Raises:
            ValueError: no directory given and none set.
        """
        target = Path(persist_dir) if persist_dir is not None else self.persist_dir
        if target is None:
            raise ValueError("persist() needs a directory: pass persist_dir=")
        with self._write_lock:  # a complete version, never one an insert is halfway through
            target.mkdir(parents=True, exist_ok=True)
            if self._chroma_mode == "ephemeral":
                self._copy_chroma_to(target / _CHROMA_DIR)
            self._write_json(target / CONFIG_FILE, self.config())
            self._write_json(target / GRAPH_FILE, self.graph.to_dict())
            checkpoint = target / CHECKPOINT_FILE
            if checkpoint.exists():
                checkpoint.unlink()  # the graph file now holds everything the checkpoint listed
            self.persist_dir = target
        return target

    @staticmethod
    def _write_json(path: Path, data: dict[str, Any]) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)  # never leave a half-written file behind

    def _copy_chroma_to(self, path: Path) -> None:
        import chromadb
        from chromadb.config import Settings

        path.mkdir(parents=True, exist_ok=True)
        client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
        for source in (self.passages_collection, self.entities_collection, self.facts_collection):
            target = client.get_or_create_collection(source.name, metadata={"hnsw:space": "cosine"})
            total = source.count()
            for offset in range(0, total, _CHROMA_BATCH):
                page = source.get(limit=_CHROMA_BATCH, offset=offset,
                                  include=["embeddings", "documents", "metadatas"])
                target.upsert(ids=page["ids"], embeddings=page["embeddings"], documents=page["documents"],
                              metadatas=page["metadatas"])
        self._client = client
        self._chroma_mode = "local"
        self._open_collections()

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | os.PathLike[str],
        chroma_client: Any = None,
        embed_model: BaseEmbedding | None = None,
        lm: Any = None,
        llm: Any = None,
        show_progress: bool = True,
    ) -> HippoGraphIndex:
        """Reopen an index saved by :meth:`persist` (or by a build with ``persist_dir``).

        Args:
            persist_dir: the directory holding ``hippo_config.json`` and ``hippo_graph.json``.
            chroma_client: the Chroma client holding the collections; default ``persist_dir/chroma`` for an index
                whose Chroma data lives there, else :func:`~llama_index_mhop.defaults.default_chroma_client`.
            embed_model: the embedder (it must be the one the index was built with); default all-MiniLM-L6-v2.
            lm, llm: the LM for OpenIE of later inserts.

        Raises:
            FileNotFoundError: no saved index in ``persist_dir``.
            ValueError: an unknown format version, or Chroma collections that do not hold the graph's records.
        """
        from ..defaults import default_chroma_client, default_embed_model

        root = Path(persist_dir)
        config_path, graph_path = root / CONFIG_FILE, root / GRAPH_FILE
        if not config_path.is_file() or not graph_path.is_file():
            raise FileNotFoundError(f"no HippoGraphIndex saved in {root} (expected {CONFIG_FILE} and {GRAPH_FILE})")
        config = _read_json(config_path)
        if config.get("format_version") != INDEX_FORMAT_VERSION:
            raise ValueError(
                f"{config_path}: unsupported format version {config.get('format_version')!r} "
                f"(this code reads {INDEX_FORMAT_VERSION})"
            )
        try:
            graph = KnowledgeGraph.from_dict(_read_json(graph_path))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{graph_path}: not a valid graph file ({type(exc).__name__}: {exc})") from exc
        if chroma_client is not None:
            mode = cls._client_mode(chroma_client)
        elif config.get("chroma", "local") == "local":
            chroma_client, mode = cls._resolve_client(None, root)
        else:  # the index lives in a Chroma the user named: the configured default (a server, or ./.mhop/chroma)
            chroma_client, mode = default_chroma_client(), "external"
        embed_model = embed_model or default_embed_model()
        saved_model = (config.get("embed_model") or {}).get("model_name")
        if saved_model and getattr(embed_model, "model_name", saved_model) != saved_model:
            logger.warning("index %s was built with embedder %s, queried with %s", root, saved_model,
                           getattr(embed_model, "model_name", None))
        index = cls(
            chroma_client=chroma_client,
            embed_model=embed_model,
            graph=graph,
            name=config["name"],
            extractor=OpenIEExtractor(lm=lm, llm=llm),
            persist_dir=root,
            chroma_mode=mode,
            chunk_size=config.get("chunk_size", DEFAULT_CHUNK_SIZE),
            chunk_overlap=config.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
            insert_batch_size=config.get("insert_batch_size", DEFAULT_INSERT_BATCH_SIZE),
            short_text_batch_size=config.get("short_text_batch_size", DEFAULT_SHORT_TEXT_BATCH_SIZE),
            exact_synonymy_max_entities=config.get("exact_synonymy_max_entities",
                                                   DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES),
            show_progress=show_progress,
        )
        stored = index.passages_collection.count()
        if graph.num_passages and stored < graph.num_passages:
            raise ValueError(
                f"the Chroma collection {index.passages_collection.name!r} holds {stored} passages but the graph in "
                f"{root} has {graph.num_passages}: pass the chroma_client the index was built with"
            )
        return index

    # ------------------------------------------------------------------ retrieval

    def retrieval_state(self, damping: float = DEFAULT_DAMPING) -> RetrievalState:
        """The arrays and PageRank matrix of the current graph version, loaded from Chroma once per version.

        While another thread inserts or deletes, this is the graph as the last finished change left it (or, if that
        version was never loaded, the call waits for the running change): never a half-changed graph. The first
        call after a change loads the new version.

        Raises:
            EmptyIndexError: the index holds no passage.
        """
        state = self._state
        if state is not None and state.pagerank.damping == damping:
            if state.version == self.graph.version:
                return state
            if not self._write_lock.acquire(blocking=False):
                if state.version == self._finished_version:
                    return state  # a change is running: answer from the graph as the last finished change left it
                self._write_lock.acquire()  # the loaded state predates the last finished change: wait for this one
        else:
            self._write_lock.acquire()
        try:
            return self._load_retrieval_state(damping)
        finally:
            self._write_lock.release()

    def _load_retrieval_state(self, damping: float) -> RetrievalState:
        graph = self.graph
        state = self._state
        if state is not None and state.version == graph.version and state.pagerank.damping == damping:
            return state  # loaded by another query while this one waited
        if graph.num_passages == 0:
            raise EmptyIndexError(f"index {self.name!r} holds no passage: insert documents before retrieving")
        self._refresh_synonymy()
        nodes = graph.node_order()
        passage_ids = nodes[: graph.num_passages]
        entity_ids = nodes[graph.num_passages :]
        rows = self._get(self.passages_collection, passage_ids, ["embeddings", "documents", "metadatas"])
        missing = [p for p in passage_ids if p not in rows]
        if missing:
            raise ValueError(
                f"{len(missing)} passages of the graph are missing from Chroma collection "
                f"{self.passages_collection.name!r} (e.g. {missing[0]!r}): the stores and the graph disagree"
            )
        passage_nodes = []
        for pid in passage_ids:
            row = rows[pid]
            node = metadata_dict_to_node(row["metadatas"], text=row["documents"])
            passage_nodes.append(node)
        passage_matrix = _normalise_rows(np.vstack([np.asarray(rows[p]["embeddings"]) for p in passage_ids]))
        entity_node = {e: graph.num_passages + i for i, e in enumerate(entity_ids)}
        entity_names = [graph.entity_names[e] for e in entity_ids]
        counts = np.zeros(len(nodes), dtype=np.float64)
        for e, i in entity_node.items():
            counts[i] = len(graph.entity_passages.get(e, ()))
        fact_ids = sorted(graph.facts)
        fact_rows = self._get(self.facts_collection, fact_ids, ["embeddings", "metadatas"])
        fact_ids = [f for f in fact_ids if f in fact_rows]
        fact_triples = []
        fact_nodes = np.zeros((len(fact_ids), 2), dtype=np.int64)
        for i, f in enumerate(fact_ids):
            s_id, predicate, o_id = graph.facts[f]
            fact_triples.append((graph.entity_names[s_id], predicate, graph.entity_names[o_id]))
            fact_nodes[i] = (entity_node[s_id], entity_node[o_id])
        fact_matrix = (
            _normalise_rows(np.vstack([np.asarray(fact_rows[f]["embeddings"]) for f in fact_ids]))
            if fact_ids
            else np.zeros((0, passage_matrix.shape[1]), dtype=np.float32)
        )
        state = RetrievalState(
            version=graph.version,
            passage_ids=passage_ids,
            passage_nodes=passage_nodes,
            passage_matrix=passage_matrix,
            entity_ids=entity_ids,
            entity_names=entity_names,
            entity_node=entity_node,
            entity_key_node={name: entity_node[e] for e, name in zip(entity_ids, entity_names, strict=True)},
            passage_counts=counts,
            fact_ids=fact_ids,
            fact_triples=fact_triples,
            fact_nodes=fact_nodes,
            fact_matrix=fact_matrix,
            pagerank=graph.pagerank_graph(damping=damping),
        )
        if not self._changes_running:  # a query from inside a change (a batch hook) sees it but does not keep it
            self._state = state
            self._finished_version = graph.version  # no change is running: this graph is a finished one
        return state

    def as_retriever(self, **kwargs: Any) -> HippoGraphRetriever:
        """A :class:`~llama_index_mhop.retrievers.hippo_graph.HippoGraphRetriever` over this index."""
        from ..retrievers.hippo_graph import HippoGraphRetriever

        return HippoGraphRetriever(index=self, **kwargs)

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
        """A ``RetrieverQueryEngine`` answering from this index's retriever.

        Args:
            llm: the LlamaIndex LLM that writes answers (default: LlamaIndex's ``Settings.llm``).
            **kwargs: retriever arguments (see ``HippoGraphRetriever``) and ``RetrieverQueryEngine.from_args``
                arguments (``response_mode``, ``node_postprocessors``, ...).
        """
        from llama_index.core.query_engine import RetrieverQueryEngine

        from ..retrievers.hippo_graph import HippoGraphRetriever

        retriever_args = {k: kwargs.pop(k) for k in list(kwargs) if k in HippoGraphRetriever.ARGUMENTS}
        retriever = self.as_retriever(**retriever_args)
        return RetrieverQueryEngine.from_args(retriever, llm=llm, **kwargs)

    def __repr__(self) -> str:
        return f"HippoGraphIndex(name={self.name!r}, {self.graph!r})"


