"""The indexing pipeline of a graph index: passages in checkpointed batches through OpenIE, the stores and the graph."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llama_index.core.schema import MetadataMode, TextNode

from ..rules.terminal import progress
from ..stores.corpus import stable_id
from .checkpoint import GraphEntry, append_checkpoint, read_checkpoint
from .extraction import Extraction, Extractor, entity_key, title_entities
from .graph_stores import GraphStores
from .knowledge_graph import KnowledgeGraph
from .synonym_lists import SynonymyRefresher

__all__ = ["DEFAULT_INSERT_BATCH_SIZE", "BatchHook", "BatchIndexer", "NodeReader", "PassageWork", "PhaseTimer",
           "passage_work"]

logger = logging.getLogger(__name__)

DEFAULT_INSERT_BATCH_SIZE = 256

BatchHook = Callable[[int, int], None]
#: Reads the passage nodes of some ids (those it finds, in the ids' order).
NodeReader = Callable[[Sequence[str]], list[TextNode]]


class PhaseTimer:
    """Seconds spent per indexing phase (extraction, entities, facts, passages, graph, synonymy)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - started


@dataclass
class PassageWork:
    """One passage on its way into the index."""

    node: TextNode
    entry: GraphEntry
    fact_texts: dict[str, tuple[str, str, str]]  # fact id -> (subject key, predicate, object key)


def passage_work(node: TextNode, extraction: Extraction) -> PassageWork:
    """Content ids for a passage's title entities, entities and facts (facts need both entities and a relation)."""
    title = str(node.metadata.get("title", ""))
    title_keys = [entity_key(name) for name in title_entities(title)]
    own = [stable_id("entity", key) for key in title_keys if key]
    entities: dict[str, str] = {}
    for key in [*title_keys, *(entity_key(name) for name in extraction.entities)]:
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
    entry = GraphEntry(entities, facts, node.ref_doc_id, title, tuple(dict.fromkeys(own)))
    return PassageWork(node, entry, texts)


@dataclass
class BatchIndexer:
    """Runs passages through the pipeline into one index's stores and graph (``checkpoint``: None: none)."""

    stores: GraphStores
    graph: KnowledgeGraph
    extractor: Extractor
    num_workers: int
    synonymy: SynonymyRefresher
    checkpoint: Path | None
    timer: PhaseTimer

    def run(self, nodes: Sequence[TextNode], batch_size: int, show: bool,
            on_batch_end: BatchHook | None = None) -> list[str]:
        """Add the passages the graph lacks (checkpointed ones first); the ids added, each once."""
        by_id: dict[str, TextNode] = {}
        for node in nodes:
            by_id.setdefault(node.node_id, node)
        return self.run_ids(list(by_id), lambda ids: [by_id[i] for i in ids], batch_size, show, on_batch_end)

    def run_ids(self, ids: Sequence[str], read: NodeReader, batch_size: int, show: bool,
                on_batch_end: BatchHook | None = None, in_place: bool = False) -> list[str]:
        """Add the passages of ``ids`` the graph lacks, one batch read at a time; the ids added."""
        self.resume()
        todo = [i for i in ids if i not in self.graph.passages]
        started = time.perf_counter()
        bar = progress(total=len(todo), show=show, desc=f"Indexing {self.stores.name}", unit="passage")
        added: list[str] = []
        for number, start in enumerate(range(0, len(todo), batch_size), start=1):
            batch = read(todo[start : start + batch_size])
            if batch:
                self.index_batch(batch, bar, in_place)
            added += [n.node_id for n in batch]
            if on_batch_end is not None:
                on_batch_end(number, start + len(batch))
        bar.set_postfix_str("synonymy edges")
        with self.timer("synonymy"):
            self.synonymy.refresh(self.graph)
        bar.close()
        if added:
            logger.info("%s: indexed %d passages in %.1fs (%s); seconds by phase: %s", self.stores.name, len(added),
                        time.perf_counter() - started, self.graph,
                        {k: round(v, 1) for k, v in self.timer.seconds.items()})
        return added

    def resume(self) -> None:
        """Add the passages the checkpoint lists (and Chroma holds) to the graph."""
        if self.checkpoint is None:
            return
        records = read_checkpoint(self.checkpoint, self.stores.name)
        pending = [pid for pid in records if pid not in self.graph.passages]
        stored = self.stores.held_passages(pending)
        resumed = [pid for pid in pending if pid in stored]  # the others outran Chroma: indexed again
        for pid in resumed:
            records[pid].add_to(self.graph, pid)
        if resumed:
            logger.info("%s: resumed %d passages from %s", self.stores.name, len(resumed), self.checkpoint)

    def _extract(self, nodes: Sequence[TextNode]) -> list[Extraction]:
        def one(node: TextNode) -> Extraction:
            return self.extractor.extract(node.get_content(metadata_mode=MetadataMode.NONE),
                                          str(node.metadata.get("title", "")))
        if getattr(self.extractor, "uses_lm", False) and self.num_workers > 1 and len(nodes) > 1:
            with ThreadPoolExecutor(max_workers=self.num_workers, thread_name_prefix="hippo-openie") as pool:
                return list(pool.map(one, nodes))
        return [one(n) for n in nodes]

    def index_batch(self, nodes: Sequence[TextNode], bar: Any, in_place: bool = False) -> None:
        """One batch: extraction, entities, facts and passages into Chroma, a checkpoint line, then the graph."""
        bar.set_postfix_str("extraction")
        with self.timer("extraction"):
            works = [passage_work(n, e) for n, e in zip(nodes, self._extract(nodes), strict=True)]
        # Entities and facts first, passages last: a passage in Chroma has everything it points to.
        bar.set_postfix_str("entities")
        with self.timer("entities"):
            entities = {key: name for work in works for key, name in work.entry.entities.items()}
            new_entities = [e for e in entities if e not in self.graph.entity_names]
            self.synonymy.remember(self.stores.store_entities(new_entities, entities))
        bar.set_postfix_str("facts")
        with self.timer("facts"):
            facts = {key: texts for work in works for key, texts in work.fact_texts.items()}
            new_facts = [f for f in facts if f not in self.graph.facts]
            self.stores.store_facts(new_facts, facts)
        bar.set_postfix_str("passages")
        with self.timer("passages"):
            if not in_place:
                self.stores.store_passages([w.node for w in works])
        with self.timer("graph"):
            if self.checkpoint is not None:
                append_checkpoint(self.checkpoint, self.stores.name, {w.node.node_id: w.entry for w in works},
                                  self.stores.owner)
            for work in works:
                work.entry.add_to(self.graph, work.node.node_id)
        bar.update(len(nodes))

