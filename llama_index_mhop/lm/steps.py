"""The package's LM steps: each step's DSPy signature (its docstring is the instruction), which LM a step uses
(:func:`current_lm`; an LM is optional everywhere) and what happens when it fails: an :class:`LMStep` falls back to
its LLM-free strategy when the LM is absent, raises, times out or answers something unusable, and is one LLM event
on both of LlamaIndex's channels (:class:`LMCallEvents`). Nothing an LM returns is evaluated as code."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import dspy
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent
from llama_index.core.settings import Settings
from pydantic import BaseModel, Field

from ..adapters.llama_index import configured_llm
from ..rules.counters import count
from ..rules.text import escape_controls
from .answers import BoundedChatAdapter
from .clients import call_in_worker, is_thread_safe, llamaindex_lm, turn_of

__all__ = ["DEFAULT_LM_TIMEOUT", "MAX_LOGGED_CHARS", "AnswerFromPassages", "ConfidenceEvaluator",
           "EntityAndGapAnalyzer", "Fact", "FactFilterModule", "FactFilterSignature", "FallbackCounter", "LMCallEvents",
           "LMStep", "ListwiseDocumentReranker", "QueryPerspectiveGenerator", "StepListener", "TargetedQueryGenerator",
           "app_llm", "current_lm", "dispatcher", "resolve_lm", "step_callbacks"]

logger = logging.getLogger(__name__)

DEFAULT_LM_TIMEOUT = 60.0
T = TypeVar("T")

# One LM call per step (no hidden second call through DSPy's JSON-adapter retry), parsed in bounded time.
_ADAPTER = BoundedChatAdapter()
#: Characters of an LM's answer or error quoted in a log line or a trace.
MAX_LOGGED_CHARS = 200
_logged_no_lm: set[str] = set()
_logged_lm_sources: set[tuple[str, str]] = set()
# LlamaIndex's Settings.llm and its DSPy wrapper, the latest one asked for.
_app_lm: tuple[Any, dspy.BaseLM] | None = None
_APP_LM_GUARD = threading.Lock()


# -- events ----------------------------------------------------------------------------------------------------------

dispatcher = get_dispatcher(__name__)

# The callback manager of the component whose flow is running (set by the retrievers around their program).
_ENCLOSING: ContextVar[CallbackManager | None] = ContextVar("mhop_step_callbacks", default=None)


@contextmanager
def step_callbacks(callback_manager: CallbackManager | None) -> Iterator[None]:
    """Within this block, LM steps without a callback manager of their own report to ``callback_manager``."""
    token = _ENCLOSING.set(callback_manager)
    try:
        yield
    finally:
        _ENCLOSING.reset(token)


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False,
                      default=lambda item: item.model_dump() if hasattr(item, "model_dump") else str(item))


class LMCallEvents:
    """The LLM events of one LM call of ``step`` with ``inputs`` on the callback manager (``CBEventType.LLM``) and the
    dispatcher (``LLMChatStartEvent``/``LLMChatEndEvent``): started when made, ended once by :meth:`end`."""

    def __init__(self, step: str, inputs: dict[str, Any], lm: Any, callback_manager: CallbackManager | None) -> None:
        self._step = step
        self._messages = [ChatMessage(role=MessageRole.USER, content=_json(inputs))]
        # A callback manager without handlers is no one listening: look further out.
        candidates = (callback_manager, _ENCLOSING.get(), Settings.callback_manager)
        self._callbacks = next((c for c in candidates if c is not None and c.handlers), None)
        model = {"model": str(getattr(lm, "model", type(lm).__name__)), "lm_step": step}
        dispatcher.event(LLMChatStartEvent(messages=self._messages, additional_kwargs={"lm_step": step},
                                           model_dict=model))
        payload = {EventPayload.MESSAGES: self._messages, EventPayload.ADDITIONAL_KWARGS: {"lm_step": step},
                   EventPayload.SERIALIZED: model}
        self._event_id = "" if self._callbacks is None else self._callbacks.on_event_start(
            CBEventType.LLM, payload=payload)

    def end(self, prediction: Any, outcome: str, reason: str, error: BaseException | None = None) -> None:
        """Report how the call ended (``"lm"``, ``"fallback"`` or ``"interrupted"``); ``prediction`` may be None."""
        fields = {} if prediction is None else dict(prediction.items()) if hasattr(prediction, "items") else {
            "output": prediction}
        message = ChatMessage(role=MessageRole.ASSISTANT, content=_json(fields) if fields else "")
        kwargs = {"lm_step": self._step, "outcome": outcome, "reason": reason}
        response = ChatResponse(message=message, additional_kwargs=kwargs)
        if self._callbacks is not None:
            payload: dict[str, Any] = {EventPayload.MESSAGES: self._messages, EventPayload.RESPONSE: response}
            if error is not None:
                payload[EventPayload.EXCEPTION] = error
            self._callbacks.on_event_end(CBEventType.LLM, payload=payload, event_id=self._event_id)
        dispatcher.event(LLMChatEndEvent(messages=self._messages, response=response))


# -- steps -----------------------------------------------------------------------------------------------------------


class FallbackCounter:
    """Thread-safe counts of LM steps that fell back to their LLM-free strategy, by step name."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, step: str) -> None:
        with self._lock:
            self._counts[step] += 1
        count(f"lm_fallbacks.{step}")  # the process-wide total that `mhop status` reports

    def __getitem__(self, step: str) -> int:
        return self.as_dict().get(step, 0)

    @property
    def total(self) -> int:
        return sum(self.as_dict().values())

    def as_dict(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def __repr__(self) -> str:
        return f"FallbackCounter({self.as_dict()})"


def resolve_lm(lm: Any = None, llm: Any = None) -> dspy.BaseLM | None:
    """The LM a component was given: ``lm`` (a DSPy LM), else ``llm`` (a LlamaIndex LLM, wrapped), else None:
    whatever :func:`current_lm` finds when a step runs, so later ``dspy.configure`` or ``Settings.llm`` take effect."""
    if lm is not None and llm is not None:
        raise ValueError("pass either lm= (a dspy.LM) or llm= (a LlamaIndex LLM), not both")
    if lm is not None:
        if not isinstance(lm, dspy.BaseLM):
            raise TypeError(f"lm= must be a dspy.BaseLM, got {type(lm).__name__}")
        return lm
    return None if llm is None else llamaindex_lm(llm)


def current_lm(lm: dspy.BaseLM | None = None) -> dspy.BaseLM | None:
    """The LM a step uses now, the one place it is decided: the component's own (``lm=``/``llm=``), else the
    caller's ``dspy.settings.lm``, else :func:`app_llm` (wrapped), else None (LLM-free); logged once at INFO."""
    if lm is not None:
        return _chosen(lm, "the component's lm=/llm=")
    if dspy.settings.lm is not None:
        return _chosen(dspy.settings.lm, "dspy.settings.lm")
    llm = app_llm()
    if llm is not None:
        return _chosen(_wrapped_app_llm(llm), "LlamaIndex's Settings.llm")
    return None


def app_llm() -> Any:
    """The LLM the app set in LlamaIndex's ``Settings.llm``, or None when it set none (or disabled it: the
    ``MockLLM`` then put there counts as none). Read through :func:`~llama_index_mhop.adapters.llama_index.configured_llm`."""
    from llama_index.core.llms import MockLLM

    llm = configured_llm()
    return None if llm is None or type(llm) is MockLLM else llm


def _wrapped_app_llm(llm: Any) -> dspy.BaseLM:
    """``Settings.llm`` as a DSPy LM, wrapped once per LLM object (so its calls share one turn)."""
    global _app_lm
    with _APP_LM_GUARD:
        if _app_lm is None or _app_lm[0] is not llm:
            _app_lm = (llm, llamaindex_lm(llm))
        return _app_lm[1]


def _chosen(lm: dspy.BaseLM, source: str) -> dspy.BaseLM:
    name = getattr(lm, "model", None) or type(lm).__name__
    if (source, name) not in _logged_lm_sources:
        _logged_lm_sources.add((source, name))
        logger.info("LM steps use %s from %s", name, source)
    return lm


StepListener = Callable[[str, str, str], None]


def _reason(error: BaseException, timeout: float) -> str:
    """Why an LM call failed: one line of at most :data:`MAX_LOGGED_CHARS`, escaped as untrusted text."""
    if isinstance(error, TimeoutError):  # asyncio's says nothing: say what ran out
        text = str(error) or f"no answer within {timeout:g}s"
    else:
        text = f"{type(error).__name__}: {error}"
    line = escape_controls(" ".join(text.split()))
    return line if len(line) <= MAX_LOGGED_CHARS else line[: MAX_LOGGED_CHARS - 1] + "…"


@dataclass(frozen=True)
class LMStep(Generic[T]):
    """One LM step: call ``predictor``, turn the prediction into a value with ``parse`` (which raises, e.g.
    :class:`~llama_index_mhop.rules.parsing.LMOutputError`, when it is unusable), and use the LLM-free ``fallback``
    when there is no LM or the LM fails (raises, even ``SystemExit``; times out; or ``parse`` rejects it).

    The predictor runs in the caller's DSPy context (a ``dspy.context(trace=[])`` records the call), in a worker
    thread abandoned after ``timeout`` seconds once it is its turn (:func:`is_thread_safe` LMs take at most
    :data:`~.clients.MAX_LM_CALLS` turns at once, others one). A ``KeyboardInterrupt``, even the LM's, stops the query.
    ``name`` names the step in logs, events and ``counter`` (fallback counts); ``listener`` is told ``(step,
    outcome, reason)`` with outcome ``"lm"``, ``"llm_free"`` or ``"fallback"``; ``callback_manager`` is the
    component's LlamaIndex callbacks (None: :func:`step_callbacks`)."""

    name: str
    predictor: Any
    parse: Callable[[Any], T]
    fallback: Callable[[], T]
    counter: FallbackCounter | None = None
    timeout: float = DEFAULT_LM_TIMEOUT
    listener: StepListener | None = None
    callback_manager: CallbackManager | None = None

    def run(self, inputs: dict[str, Any], lm: dspy.BaseLM | None = None) -> T:
        """The step's value for ``inputs``: from ``lm`` (None: ``dspy.settings.lm`` now), else the fallback's."""
        lm = current_lm(lm)
        return self._llm_free() if lm is None else self._ask(inputs, lm)

    async def arun(self, inputs: dict[str, Any], lm: dspy.BaseLM | None = None) -> T:
        """The async twin of :meth:`run`, never blocking the event loop: a thread-safe LM is awaited through
        ``predictor.acall``; any other LM takes its turn in a worker thread, as on the sync path."""
        lm = current_lm(lm)
        return self._llm_free() if lm is None else await self._aask(inputs, lm)

    @dispatcher.span
    def _ask(self, inputs: dict[str, Any], lm: dspy.BaseLM) -> T:
        events = LMCallEvents(self.name, inputs, lm, self.callback_manager)
        prediction = None
        try:
            prediction = self._predict(inputs, lm)
            value = self.parse(prediction)
        except KeyboardInterrupt as exc:  # the user's, even when the LM raised it: no fallback
            events.end(prediction, "interrupted", "KeyboardInterrupt", exc)
            raise
        except (Exception, SystemExit) as exc:  # an LM may fail in any way, exiting included; the query must answer
            return self._fall_back(exc, prediction, events)
        return self._answered(value, prediction, events)

    @dispatcher.span
    async def _aask(self, inputs: dict[str, Any], lm: dspy.BaseLM) -> T:
        events = LMCallEvents(self.name, inputs, lm, self.callback_manager)
        prediction = None
        try:
            # A coroutine is cancelled at its timeout; an LM whose async path is a thread (function_lm without
            # achat) would leave that thread behind, so it takes its turn in a bounded worker like a sync call.
            if is_thread_safe(lm) and getattr(lm, "native_async", True):
                with dspy.context(lm=lm, adapter=_ADAPTER):
                    prediction = await asyncio.wait_for(self._acall(inputs), timeout=self.timeout)
            else:
                prediction = await asyncio.to_thread(self._predict, inputs, lm)
            value = self.parse(prediction)
        except KeyboardInterrupt as exc:  # the user's, even when the LM raised it: no fallback
            events.end(prediction, "interrupted", "KeyboardInterrupt", exc)
            raise
        except (Exception, SystemExit) as exc:
            return self._fall_back(exc, prediction, events)
        return self._answered(value, prediction, events)

    async def _acall(self, inputs: dict[str, Any]) -> Any:
        try:
            return await self.predictor.acall(**inputs)
        except SystemExit as exc:  # raised in a task, it would stop the caller's event loop: an LM failure here
            raise RuntimeError(f"the LM raised SystemExit({exc.code!r})") from exc

    def _predict(self, inputs: dict[str, Any], lm: dspy.BaseLM) -> Any:
        def call() -> Any:
            with dspy.context(lm=lm, adapter=_ADAPTER):
                return self.predictor(**inputs)
        return call_in_worker(call, self.timeout, turn_of(lm))

    def _llm_free(self) -> T:
        if self.name not in _logged_no_lm:
            _logged_no_lm.add(self.name)
            logger.info("%s: no LM configured, using the LLM-free strategy", self.name)
        self._tell("llm_free", "no LM configured")
        return self.fallback()

    def _fall_back(self, error: BaseException, prediction: Any, events: LMCallEvents) -> T:
        reason = _reason(error, self.timeout)
        logger.warning("%s: LM step failed (%s); using the LLM-free strategy", self.name, reason)
        events.end(prediction, "fallback", reason, error)
        if self.counter is not None:
            self.counter.add(self.name)
        self._tell("fallback", reason)
        return self.fallback()

    def _answered(self, value: T, prediction: Any, events: LMCallEvents) -> T:
        events.end(prediction, "lm", "answered")
        self._tell("lm", "answered")
        return value

    def _tell(self, outcome: str, reason: str) -> None:
        if self.listener is not None:
            self.listener(self.name, outcome, reason)


# -- signatures ------------------------------------------------------------------------------------------------------


class Fact(BaseModel):
    """A list of (subject, predicate, object) facts: the structured answer of the fact filter (seeds/003)."""

    fact: list[list[str]] = Field(
        description="A list of facts, each fact is a list of 3 strings: [subject, predicate, object]")


class FactFilterSignature(dspy.Signature):
    """Filter facts by their relevance to a query, which may need multi-hop reasoning to answer.

    Select up to 4 facts from the candidate list that have a strong connection to the query and help reason
    towards an accurate answer. Only use facts from the candidate list, copied as they are; never write new
    facts. Answer in JSON format, e.g. {"fact": [["s1", "p1", "o1"], ["s2", "p2", "o2"]]}; if no fact is
    relevant, answer with an empty list, {"fact": []}.
    """

    question: str = dspy.InputField(desc="Query for retrieval")
    fact_before_filter: str = dspy.InputField(desc="Candidate facts to be filtered")
    fact_after_filter: Fact = dspy.OutputField(desc="Filtered facts in JSON format")


class FactFilterModule(dspy.Module):
    """The DSPy module of the fact filter (HippoRAG 2's recognition memory; the filter and the graph index hold
    one): one ``Predict`` over :class:`FactFilterSignature`, at ``filter``."""

    def __init__(self) -> None:
        super().__init__()
        self.filter = dspy.Predict(FactFilterSignature)

    def forward(self, question: str, fact_before_filter: str) -> dspy.Prediction:
        return self.filter(question=question, fact_before_filter=fact_before_filter)

    async def aforward(self, question: str, fact_before_filter: str) -> dspy.Prediction:
        return await self.filter.acall(question=question, fact_before_filter=fact_before_filter)


class QueryPerspectiveGenerator(dspy.Signature):
    """Generate 4-5 diverse reformulations of a query for multi-hop document retrieval (seed 000).

    Approach the query from different angles, one search query each: entity-focused (a specific entity it
    names), relationship-focused (how its entities are connected), temporal-focused (time periods and dates),
    comparison-focused (the contrasting sides), and context-focused (background the answer depends on). When
    context passages are given, aim the perspectives at what they do not yet cover, such as entities the passages
    introduce that the query needs next.
    """

    query: str = dspy.InputField(desc="the question or claim to find evidence for")
    context: str = dspy.InputField(desc="JSON list of passages retrieved so far (title, text); may be empty")
    perspectives: list[str] = dspy.OutputField(desc="4-5 distinct search queries, one per angle")


class AnswerFromPassages(dspy.Signature):
    """Answer the question from the passages only, in a few words. If they do not contain the answer, say so."""

    question: str = dspy.InputField()
    passages: str = dspy.InputField(desc="numbered passages retrieved for the question")
    answer: str = dspy.OutputField(desc="a short answer")


# -- the confidence loop (seed 001): plain-text outputs, read defensively by rules.parsing ("85%" is an answer).


class EntityAndGapAnalyzer(dspy.Signature):
    """Extract the entity chains of a multi-hop question or claim: the named entities it mentions and the
    unnamed entities that connect them (for example "the film shot in Leland in 1986" -> its director).
    Then write 2-3 short search queries, each aimed at a different link of the chain, that together would find
    every document needed to answer or verify it."""

    query: str = dspy.InputField(desc="the question or claim")
    entity_chains: str = dspy.OutputField(
        desc="one chain per line, e.g. 'Leland, North Carolina -> film shot there in 1986 -> its director'")
    queries: str = dspy.OutputField(desc="2-3 search queries, one per line")


class ConfidenceEvaluator(dspy.Signature):
    """Judge whether the retrieved passages contain enough evidence to answer or verify the query. Give a
    confidence from 0 to 100 and list what is still missing: entity chains not yet followed, bridging entities
    that a passage mentions but that no passage describes, or facts that no passage states."""

    query: str = dspy.InputField(desc="the question or claim")
    passages: str = dspy.InputField(desc="the retrieved passages, numbered")
    confidence: str = dspy.OutputField(desc="an integer from 0 to 100")
    missing_information: str = dspy.OutputField(
        desc="missing entities or facts, one per line; 'none' if nothing is missing")


class TargetedQueryGenerator(dspy.Signature):
    """Write 1-2 highly targeted search queries that would retrieve the missing information for the query.
    Aim each query at one gap (name the bridging entity and what is asked about it); do not repeat the queries
    already issued."""

    query: str = dspy.InputField(desc="the question or claim")
    missing_information: str = dspy.InputField(desc="the gaps to fill, one per line")
    issued_queries: str = dspy.InputField(desc="queries already issued, one per line")
    queries: str = dspy.OutputField(desc="1-2 search queries, one per line")


class ListwiseDocumentReranker(dspy.Signature):
    """Rank all the passages together by how much each contributes to answering or verifying the query.
    Consider the passages as a set: a passage that names the bridging entity connecting two others matters,
    and so does the passage about that bridging entity. Return the passage indices, most useful first."""

    query: str = dspy.InputField(desc="the question or claim")
    passages: str = dspy.InputField(desc="the passages, each introduced by its index in square brackets")
    ranking: str = dspy.OutputField(desc="comma-separated passage indices (0-based), most useful first")
