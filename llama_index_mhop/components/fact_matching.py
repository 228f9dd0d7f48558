"""Facts written by an LM matched back to the candidate facts, by string similarity only (never evaluated)."""

from __future__ import annotations

import difflib

from ..rules.text import normalize

__all__ = ["DEFAULT_FACT_MATCH_CUTOFF", "MAX_FUZZY_FACT_CHARS", "CandidateMatcher"]

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
