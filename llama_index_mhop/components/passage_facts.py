"""The facts a passage states, for recognition memory over ordinary passage nodes.

:class:`~llama_index_mhop.components.postprocessors.DSPyFactFilter` recognises facts; a standard query engine retrieves
passages. This module reads each passage's (subject, predicate, object) triples with an OpenIE extractor (the
LLM-free one by default), caches them by content, and turns a passage list into candidate fact nodes that
remember which passages state them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, NodeWithScore

from ..stores.corpus import stable_id

__all__ = ["PassageFacts"]

Triple = tuple[str, str, str]


class PassageFacts:
    """Triples of passages, extracted once per distinct (title, text) and cached.

    Args:
        extractor: anything with ``extract(text, title) -> Extraction`` (e.g. an
            :class:`~llama_index_mhop.graph.OpenIEExtractor` with an LM); None: the LLM-free extractor.
        max_cached: passages kept in the cache (the oldest are dropped first).
        graph_index: a :class:`~llama_index_mhop.graph.HippoGraphIndex`: a passage it holds (by node id) gives
            the facts stored for it, extracted when it was indexed, instead of extracting again.
    """

    def __init__(self, extractor: Any = None, max_cached: int = 100_000, graph_index: Any = None) -> None:
        self.extractor = extractor
        self.graph_index = graph_index
        self.max_cached = max_cached
        self._cache: dict[str, tuple[Triple, ...]] = {}
        self._lock = threading.Lock()

    def facts(self, node: BaseNode) -> tuple[Triple, ...]:
        """The triples the passage states: the graph index's stored ones for a passage it holds, else extracted
        (title and text decide; the node id does not)."""
        stored = self._stored(node.node_id)
        if stored is not None:
            return stored
        title = node.metadata.get("title")
        title = "" if title is None else str(title)
        text = node.get_content()
        key = stable_id(title, text)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        triples = self._extract(text, title)
        with self._lock:
            if len(self._cache) >= self.max_cached:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = triples
        return triples

    def _stored(self, node_id: str) -> tuple[Triple, ...] | None:
        if self.graph_index is None:
            return None
        graph = self.graph_index.graph
        record = graph.passages.get(node_id)
        if record is None:
            return None
        names = graph.entity_names
        return tuple((names[s], p, names[o]) for s, p, o in (graph.facts[f] for f in record.facts if f in graph.facts))

    def _extract(self, text: str, title: str) -> tuple[Triple, ...]:
        # Imported here: importing the graph package imports its retriever, which imports the postprocessors.
        from ..graph.extraction import extract_llm_free

        extraction = extract_llm_free(text, title) if self.extractor is None else self.extractor.extract(text, title)
        return tuple(extraction.triples)

    def candidates(self, passages: Sequence[NodeWithScore]) -> tuple[list[Triple], list[float | None], list[list[int]]]:
        """The distinct triples of ``passages`` in passage order, each with the best score of the passages that
        state it and the positions of those passages."""
        index: dict[Triple, int] = {}
        triples: list[Triple] = []
        scores: list[float | None] = []
        support: list[list[int]] = []
        for position, passage in enumerate(passages):
            for triple in self.facts(passage.node):
                if not all(part.strip() for part in triple):
                    continue
                at = index.setdefault(triple, len(triples))
                if at == len(triples):
                    triples.append(triple)
                    scores.append(passage.score)
                    support.append([])
                elif passage.score is not None and (scores[at] is None or passage.score > scores[at]):
                    scores[at] = passage.score
                if position not in support[at]:
                    support[at].append(position)
        return triples, scores, support
