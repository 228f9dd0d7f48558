"""Open information extraction for the HippoRAG 2 memory: named entities and (subject, predicate, object) triples,
one LM call per passage (:class:`OpenIEModule`) with an LLM-free extractor (:func:`extract_llm_free`) as default and
fallback; entities are compared by :func:`entity_key`, so "Delbert Mann's" and "Delbert Mann" are one node."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import dspy
from tenacity import AsyncRetrying, RetryCallState, Retrying, stop_after_attempt, wait_exponential

from ..lm.programs import ProgramSource, load_program, save_program
from ..lm.steps import FallbackCounter, LMStep, current_lm, resolve_lm
from ..rules.parsing import LMOutputError
from ..rules.text import (
    MONTHS,
    entity_key,
    entity_spans,
    escape_controls,
    sentences,
    strip_possessive,
    title_entities,
    unique_names,
)

__all__ = ["DEFAULT_BACKOFF_SECONDS", "DEFAULT_MAX_ATTEMPTS", "DEFAULT_MAX_LLM_FREE_TRIPLES", "EXTRACTION_STEP",
           "MAX_ENTITY_CHARS", "MAX_PREDICATE_CHARS", "ExtractEntitiesAndTriples", "Extraction", "Extractor",
           "OpenIEExtractor", "OpenIEModule", "entity_key", "extract_llm_free", "parse_extraction", "title_entities",
           "with_title_entities"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_BACKOFF_SECONDS = 1.0
#: Triples kept per passage by the LLM-free extractor (see :func:`extract_llm_free`).
DEFAULT_MAX_LLM_FREE_TRIPLES = 8
EXTRACTION_STEP = "hippo_extraction"
#: Longest entity name kept (characters of its key): longer spans are quoted sentences, not names.
MAX_ENTITY_CHARS = 80
#: Longest predicate kept, in words.
MAX_PREDICATE_WORDS = 4
#: Longest predicate kept from an LM, in characters: a relation is a short phrase, not a sentence.
MAX_PREDICATE_CHARS = 100

_MONTHS = "|".join(month.capitalize() for month in MONTHS)
_DATE = re.compile(rf"\b(?:\d{{1,2}} (?:{_MONTHS})(?:,? \d{{4}})?|(?:{_MONTHS}) \d{{1,2}}(?:, \d{{4}})?"
                   rf"|(?:{_MONTHS}) \d{{4}})\b")
_WORDS = re.compile(r"[A-Za-z][A-Za-z'’\-]*")
# Words that carry a relation: a predicate starts at the last of them before the object.
_VERBS = frozenset("""is was are were be been being has had have became become becomes won wins wrote writes made
    makes married founded plays played stars starred starring includes included include located born died known
    called named based directed written produced released published owned formed led leads served serves
    received features featured hosted created designed developed composed performed recorded signed joined
    moved lived lives works worked studied taught attended graduated elected appointed succeeded preceded
    replaced represents represented belongs belonged contains contained consists consisted borders runs ran
    flows flowed opened closed built""".split())
_CONJUNCTIONS = frozenset({"and", "or", "but", "nor", "as", "well"})


@dataclass(frozen=True)
class Extraction:
    """One passage's extraction: entity names and (subject, predicate, object) triples, all as written."""

    entities: tuple[str, ...] = ()
    triples: tuple[tuple[str, str, str], ...] = ()
    from_lm: bool = field(default=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"entities": list(self.entities), "triples": [list(t) for t in self.triples]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Extraction:
        return cls(entities=tuple(str(e) for e in data.get("entities", [])),
                   triples=tuple((str(s), str(p), str(o)) for s, p, o in data.get("triples", [])))


def _is_name(span: str) -> bool:
    key = entity_key(span)
    if not key or len(key) > MAX_ENTITY_CHARS:
        return False
    first = next((c for c in span if c.isalnum()), "")
    return bool(first) and (first.isupper() or first.isdigit())


#: Capitalised words that follow a lowercase word or a comma: capitalised because they are names.
_CAPITALISED_WORD = re.compile(r"(?<=[a-z0-9,;:)] )([A-Z][\w'’\-]*)")


def _mentions(sentence: str, known: set[str] | None = None) -> list[tuple[int, int, str]]:
    """(start, end, name) of a sentence's mentions, in order, longest first; ``known``: names seen mid-sentence."""
    found = [(match.start(), match.end(), match.group(0)) for match in _DATE.finditer(sentence)]
    opening = len(sentence) - len(sentence.lstrip("\"“'‘( "))
    for span in entity_spans(sentence):
        name = strip_possessive(span.strip().strip("\"“”'‘’.,;:()[]"))
        if not _is_name(name):
            continue
        position = sentence.find(name)
        if position < 0 or (known is not None and position == opening and " " not in name
                            and entity_key(name) not in known):
            continue
        found.append((position, position + len(name), name))
    found.sort(key=lambda m: (m[0], -(m[1] - m[0])))
    kept: list[tuple[int, int, str]] = []
    for mention in found:
        if not kept or mention[0] >= kept[-1][1]:  # else inside the previous (longer or earlier) mention
            kept.append(mention)
    return kept


def _predicate(gap: str, previous: str | None) -> str:
    """The relation words before an object: from the last verb-like word of the gap, at most 4 words."""
    words = [w.lower().strip("'’-") for w in _WORDS.findall(gap)]
    words = [w for w in words if w and w != "s"]  # "King's short story": the possessive is not a word
    if not words or all(w in _CONJUNCTIONS for w in words):
        # "A, B and C": C stands in the same relation as B; with no relation before it, there is no fact.
        return previous or ""
    start = next((i for i in range(len(words) - 1, -1, -1)
                  if words[i] in _VERBS or (len(words[i]) > 4 and words[i].endswith(("ed", "ing")))), None)
    chosen = words[start:][-MAX_PREDICATE_WORDS:]  # no verb-like word (start None): every word
    while len(chosen) > 1 and chosen[0] in _CONJUNCTIONS:
        chosen = chosen[1:]
    return " ".join(chosen)


def extract_llm_free(text: str, title: str | None = None,
                     max_triples: int | None = DEFAULT_MAX_LLM_FREE_TRIPLES) -> Extraction:
    """LLM-free OpenIE for encyclopedic passages: entity names in order of first mention (the ``title``'s first)
    and subject-centred triples, at most ``max_triples`` of them (those whose object is a name first)."""
    subjects = title_entities(title or "")
    subject_keys = {entity_key(s) for s in subjects}
    entities: dict[str, str] = {}
    for name in subjects:
        entities.setdefault(entity_key(name), name)
    triples: dict[tuple[str, str, str], tuple[str, str, str]] = {}
    known = {entity_key(m.group(1)) for m in _CAPITALISED_WORD.finditer(text or "")} | subject_keys
    for number, sentence in enumerate(sentences(text or "")):
        mentions = _mentions(sentence, known)
        for _, _, name in mentions:
            entities.setdefault(entity_key(name), name)
        if not mentions:
            continue
        opener = mentions[0][2]
        # The passage is about its title, and so is a sentence unless it opens with another name. The first
        # sentence always is ("Delbert Martin Mann Jr. (January 30, 1920 ...) was ..." defines "Delbert Mann"),
        # and a date opening a sentence is not what the sentence is about.
        opens_with_name = (number > 0 and sentence[: mentions[0][0]].strip("\"“'‘( ") in ("", "The", "A", "An")
                           and entity_key(opener) not in subject_keys and _DATE.fullmatch(opener) is None
                           and re.search(r"[a-z]", entity_key(opener)) is not None)
        if subjects and not opens_with_name:
            subject, objects, cursor = subjects[0], mentions, 0
        else:
            subject, objects, cursor = opener, mentions[1:], mentions[0][1]
        subject_key = entity_key(subject)
        previous: str | None = None
        for start, end, name in objects:
            key = entity_key(name)
            gap, cursor = sentence[cursor:start], end
            if key == subject_key or (subject_key in subject_keys and key in subject_keys):
                continue
            previous = _predicate(gap, previous) or None
            if previous is not None:
                triples.setdefault((subject_key, previous, key), (subject, previous, name))
    facts = list(triples.values())
    if max_triples is not None and len(facts) > max_triples:
        dated = [not re.search(r"[a-z]", entity_key(f[2])) for f in facts]
        chosen = sorted(sorted(range(len(facts)), key=lambda i: (dated[i], i))[:max_triples])
        facts = [facts[i] for i in chosen]
    return Extraction(entities=tuple(entities.values()), triples=tuple(facts))


class ExtractEntitiesAndTriples(dspy.Signature):
    """Read the passage and extract its named entities and the facts that connect them.

    List every named entity (people, places, organisations, works, events, dates and other proper names) as it
    is written in the passage. Then list the facts the passage states as [subject, predicate, object] triples:
    subject and object are named entities from your list, the predicate is a short relation phrase such as
    "directed by" or "born in". Resolve pronouns to the entity they refer to; the passage's title names its main
    subject. Use only what the passage says."""

    title: str = dspy.InputField(desc="the passage's title (may be empty)")
    passage: str = dspy.InputField(desc="the passage to read")
    named_entities: list[str] = dspy.OutputField(desc="named entities, as written in the passage")
    triples: list[list[str]] = dspy.OutputField(desc="facts, each a list of 3 strings: [subject, predicate, object]")


def _passage_source(title: str | None, passage: str) -> str:
    """The text an extraction must be grounded in: the passage's title and body."""
    return f"{title or ''}\n{passage}"


def parse_extraction(prediction: Any, source: str | None = None) -> Extraction:
    """Validate an LM's extraction, dropping over-long and (with ``source``) invented names; :class:`LMOutputError`
    when malformed or left with nothing."""
    raw_entities = getattr(prediction, "named_entities", None)
    raw_triples = getattr(prediction, "triples", None)
    if not isinstance(raw_entities, list) or not all(isinstance(e, str) for e in raw_entities):
        raise LMOutputError(f"named_entities is not a list of strings: {raw_entities!r:.200}")
    if not isinstance(raw_triples, list):
        raise LMOutputError(f"triples is not a list: {raw_triples!r:.200}")
    named = f" {entity_key(source)} " if source is not None else None
    def grounded(name: str) -> bool:
        key = entity_key(name)
        # A name longer than any entity name is a pasted sentence (and would make matching slow): drop it.
        return bool(key) and len(key) <= MAX_ENTITY_CHARS and (named is None or f" {key} " in named)
    triples: list[tuple[str, str, str]] = []
    for triple in raw_triples:
        if not (isinstance(triple, (list, tuple)) and len(triple) == 3 and all(isinstance(x, str) for x in triple)):
            raise LMOutputError(f"a triple is not [subject, predicate, object]: {triple!r:.200}")
        subject, predicate, obj = (x.strip() for x in triple)
        if not (grounded(subject) and 0 < len(predicate) <= MAX_PREDICATE_CHARS and grounded(obj)):
            continue  # an empty or invented slot: drop that triple, keep the rest
        triples.append((subject, predicate, obj))
    entities = [e.strip() for e in raw_entities if grounded(e)]
    if not entities and not triples:
        raise LMOutputError("the LM extracted no entity and no triple")
    return Extraction(entities=tuple(entities), triples=tuple(triples), from_lm=True)


def _log_retry(state: RetryCallState) -> None:
    """Log a failed OpenIE attempt before the next one; the error may quote the LM's answer, so it is escaped."""
    error = state.outcome.exception() if state.outcome is not None else None
    logger.debug("OpenIE attempt %d failed (%s); retrying", state.attempt_number,
                 escape_controls(f"{type(error).__name__}: {error}"))


class OpenIEModule(dspy.Module):
    """One OpenIE call per passage, retried (``max_attempts``, backoff doubling from ``backoff_seconds``)."""

    def __init__(self, max_attempts: int = DEFAULT_MAX_ATTEMPTS, backoff_seconds: float = DEFAULT_BACKOFF_SECONDS):
        super().__init__()
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.extract = dspy.Predict(ExtractEntitiesAndTriples)
        self.max_attempts = max_attempts
        self.backoff_seconds = backoff_seconds

    def _retrying(self) -> dict[str, Any]:
        wait = wait_exponential(multiplier=self.backoff_seconds, exp_base=2, min=0, max=float("inf"))
        return {"stop": stop_after_attempt(self.max_attempts), "wait": wait, "before_sleep": _log_retry,
                "reraise": True}

    def _checked(self, prediction: dspy.Prediction, title: str, passage: str) -> dspy.Prediction:
        parse_extraction(prediction, _passage_source(title, passage))  # a malformed answer is retried
        return prediction

    def forward(self, title: str, passage: str) -> dspy.Prediction:
        for attempt in Retrying(**self._retrying()):
            with attempt:
                return self._checked(self.extract(title=title, passage=passage), title, passage)
        raise AssertionError("unreachable: tenacity re-raises the last error")

    async def aforward(self, title: str, passage: str) -> dspy.Prediction:
        async for attempt in AsyncRetrying(**self._retrying()):
            with attempt:
                return self._checked(await self.extract.acall(title=title, passage=passage), title, passage)
        raise AssertionError("unreachable: tenacity re-raises the last error")


@runtime_checkable
class Extractor(Protocol):
    """What the graph index needs from an extractor: one :class:`Extraction` per passage."""

    def extract(self, text: str, title: str | None = None) -> Extraction: ...


class OpenIEExtractor:
    """Entities and triples of a passage: the DSPy module when an LM is configured, else the LLM-free rules (also
    for a passage whose ``max_attempts`` all fail, counted in :attr:`fallback_counts`)."""

    def __init__(self, lm: Any = None, llm: Any = None, max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 backoff_seconds: float = DEFAULT_BACKOFF_SECONDS, timeout: float = 180.0,
                 program: ProgramSource | None = None) -> None:
        self.lm = resolve_lm(lm=lm, llm=llm)
        self.program = OpenIEModule(max_attempts=max_attempts, backoff_seconds=backoff_seconds)
        if program is not None:
            load_program(self.program, program)
        self.timeout = timeout
        self.fallback_counts = FallbackCounter()

    def save_program(self, path: str | os.PathLike[str]) -> Path:
        """Save the extractor's DSPy program (its predictor's instructions and demos) as DSPy's JSON."""
        return save_program(self.program, path)

    @property
    def uses_lm(self) -> bool:
        """Whether extraction would ask an LM now (its own, else ``dspy.settings.lm``)."""
        return current_lm(self.lm) is not None

    def _step(self, text: str, title: str | None) -> LMStep[Extraction]:
        return LMStep(EXTRACTION_STEP, self.program, partial(parse_extraction, source=_passage_source(title, text)),
                      lambda: extract_llm_free(text, title), self.fallback_counts, self.timeout)

    @staticmethod
    def _inputs(text: str, title: str | None) -> dict[str, str]:
        return {"title": title or "", "passage": text}

    def extract(self, text: str, title: str | None = None) -> Extraction:
        """The passage's entities and triples (one LM call, retried, or the LLM-free rules)."""
        return with_title_entities(self._step(text, title).run(self._inputs(text, title), self.lm), title)

    async def aextract(self, text: str, title: str | None = None) -> Extraction:
        """The async twin of :meth:`extract`."""
        return with_title_entities(await self._step(text, title).arun(self._inputs(text, title), self.lm), title)


def with_title_entities(extraction: Extraction, title: str | None) -> Extraction:
    """The extraction with the title entities first among its entities (an LM may leave them out)."""
    unique = unique_names([*title_entities(title or ""), *extraction.entities], key=entity_key)
    return Extraction(entities=tuple(unique), triples=extraction.triples, from_lm=extraction.from_lm)

