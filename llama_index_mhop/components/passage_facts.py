"""The facts a passage states (:class:`PassageFacts`, cached by content), for recognising facts over passage nodes,
and the match of the facts an LM writes back to the candidates, by string similarity only (:class:`CandidateMatcher`).
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode, NodeWithScore

from ..rules.text import normalize, stable_id

__all__ = ["DEFAULT_FACT_MATCH_CUTOFF", "MAX_FUZZY_FACT_CHARS", "CandidateMatcher", "PassageFacts"]

DEFAULT_FACT_MATCH_CUTOFF = 0.8
#: Longest normalised fact compared by similarity. difflib's ratio is quadratic in the lengths; a fact is a short
#: "subject predicate object", so a longer one (from a candidate or the LM) can only match exactly.
MAX_FUZZY_FACT_CHARS = 512


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class CandidateMatcher:
    """Maps facts written by an LM back to the candidate facts, by string similarity only."""

    def __init__(self, triples: list[tuple[str, str, str]], cutoff: float) -> None:
        self.cutoff = cutoff
        self.keys = [normalize(" ".join(t)) for t in triples]
        self.subjects = [normalize(t[0]) for t in triples]
        self.objects = [normalize(t[2]) for t in triples]
        self.exact: dict[str, int] = {}
        for index, key in enumerate(self.keys):
            self.exact.setdefault(key, index)  # duplicate candidates resolve to the first

    def match(self, generated: list[str]) -> int | None:
        """The index of the candidate the generated fact copies, or None for an invented fact."""
        key = normalize(" ".join(generated))
        if not key:
            return None
        if key in self.exact:
            return self.exact[key]
        if len(key) > MAX_FUZZY_FACT_CHARS:
            return None
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(key)
        best, best_ratio = None, self.cutoff
        for index, candidate in enumerate(self.keys):
            if self.exact[candidate] != index or len(candidate) > MAX_FUZZY_FACT_CHARS:
                continue
            matcher.set_seq1(candidate)
            if matcher.real_quick_ratio() < best_ratio or matcher.quick_ratio() < best_ratio:
                continue
            ratio = matcher.ratio()
            if ratio < best_ratio:
                continue
            # A triple must also keep its entities: "X located in Georgia" is not "X located in Florida",
            # however close the strings.
            if len(generated) == 3 and (
                _similarity(normalize(generated[0]), self.subjects[index]) < self.cutoff
                or _similarity(normalize(generated[2]), self.objects[index]) < self.cutoff
            ):
                continue
            if best is None or ratio > best_ratio:
                best, best_ratio = index, ratio
        return best


Triple = tuple[str, str, str]


class PassageFacts:
    """Triples of passages, extracted once per distinct (title, text) and cached.

    Args:
        extractor: anything with ``extract(text, title) -> Extraction`` (e.g. an
            :class:`~llama_index_mhop.graph.OpenIEExtractor` with an LM); None: the LLM-free extractor.
        max_cached: passages kept in the cache (the oldest are dropped first).
        graph_index: a :class:`~llama_index_mhop.graph.HippoGraphIndex`: a passage it holds (by node id) gives
            the facts stored for it, extracted when it was indexed, instead of extracting again."""

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
