"""How the package calls an LM: which LM a step uses, in whose context, for how long, what happens when it fails,
and how the call shows in an app's LlamaIndex tracing.

An LM is optional everywhere (:func:`current_lm` decides which one a step uses). Every LM call is an
:class:`LMStep`, which falls back to the step's LLM-free strategy when the LM is absent, raises, times out or answers
something unusable, and is one LLM event on both of LlamaIndex's channels (:class:`LMCallEvents`): a
``CBEventType.LLM`` start/end pair on the callback manager (the component's own when it has handlers, else the
enclosing retriever's, :func:`step_callbacks`, else ``Settings.callback_manager``), and
``LLMChatStartEvent``/``LLMChatEndEvent`` in a span of this module's dispatcher; the response's
``additional_kwargs`` name the step and the ``outcome`` (``"lm"``, ``"fallback"`` with its ``reason``,
``"interrupted"``).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
import weakref
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

from ..adapters.llama_index import configured_llm
from ..rules.counters import count
from ..rules.text import escape_controls
from .answers import BoundedChatAdapter
from .clients import llamaindex_lm

__all__ = [
    "DEFAULT_LM_TIMEOUT", "MAX_LM_CALLS", "MAX_LOGGED_CHARS", "app_llm", "FallbackCounter", "LMCallEvents", "LMStep",
    "StepListener", "current_lm", "dispatcher", "is_thread_safe", "resolve_lm", "step_callbacks",
]

logger = logging.getLogger(__name__)

DEFAULT_LM_TIMEOUT = 60.0
T = TypeVar("T")

# One LM call per step (no hidden second call through DSPy's JSON-adapter retry), parsed in bounded time.
_ADAPTER = BoundedChatAdapter()
#: Characters of an LM's answer or error quoted in a log line or a trace.
MAX_LOGGED_CHARS = 200
#: Calls of one thread-safe LM that run at once, each in a thread of its own: a hung LM holds at most this many.
MAX_LM_CALLS = 8
_logged_no_lm: set[str] = set()
_logged_lm_sources: set[tuple[str, str]] = set()
# LlamaIndex's Settings.llm and its DSPy wrapper, the latest one asked for.
_app_lm: tuple[Any, dspy.BaseLM] | None = None
_APP_LM_GUARD = threading.Lock()
# The turns of each LM object: one at a time when it is not known to be thread-safe, else MAX_LM_CALLS.
_TURNS: weakref.WeakKeyDictionary[Any, Turn] = weakref.WeakKeyDictionary()
_TURNS_GUARD = threading.Lock()


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


def _callbacks(own: CallbackManager | None) -> CallbackManager | None:
    # A callback manager without handlers is no one listening: look further out.
    for candidate in (own, _ENCLOSING.get(), Settings.callback_manager):
        if candidate is not None and candidate.handlers:
            return candidate
    return None


def _json(value: Any) -> str:
    def plain(item: Any) -> Any:
        return item.model_dump() if hasattr(item, "model_dump") else str(item)

    return json.dumps(value, ensure_ascii=False, default=plain)


class LMCallEvents:
    """The LLM events of one LM call of ``step`` with ``inputs``: started when made, ended once by :meth:`end`."""

    def __init__(self, step: str, inputs: dict[str, Any], lm: Any, callback_manager: CallbackManager | None) -> None:
        self._step = step
        self._messages = [ChatMessage(role=MessageRole.USER, content=_json(inputs))]
        self._callbacks = _callbacks(callback_manager)
        model = {"model": str(getattr(lm, "model", type(lm).__name__)), "lm_step": step}
        dispatcher.event(LLMChatStartEvent(messages=self._messages, additional_kwargs={"lm_step": step},
                                           model_dict=model))
        self._event_id = "" if self._callbacks is None else self._callbacks.on_event_start(
            CBEventType.LLM,
            payload={EventPayload.MESSAGES: self._messages, EventPayload.ADDITIONAL_KWARGS: {"lm_step": step},
                     EventPayload.SERIALIZED: model},
        )

    def end(self, prediction: Any, outcome: str, reason: str, error: BaseException | None = None) -> None:
        """Report how the call ended (``"lm"``, ``"fallback"`` or ``"interrupted"``); ``prediction`` may be None."""
        fields = {} if prediction is None else dict(prediction.items()) if hasattr(prediction, "items") else {
            "output": prediction}
        response = ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=_json(fields) if fields else ""),
            additional_kwargs={"lm_step": self._step, "outcome": outcome, "reason": reason},
        )
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
        with self._lock:
            return self._counts[step]

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

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
    if llm is not None:
        return llamaindex_lm(llm)
    return None


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


def is_thread_safe(lm: Any) -> bool:
    """Whether ``lm`` may be called from two threads at once: its ``thread_safe`` attribute when set (``function_lm``
    sets it), else only a plain ``dspy.LM`` (a remote API through LiteLLM) is known to be."""
    flag = getattr(lm, "thread_safe", None)
    return bool(flag) if flag is not None else type(lm) is dspy.LM


class Turn:
    """The ``size`` calls of one LM that may run at once, each in a thread of its own. A call abandoned after its
    timeout keeps its turn until the LM returns (a hung LM holds at most ``size`` threads); once abandoned calls
    hold every turn, a caller gives up at once instead of waiting behind them."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._changed = threading.Condition()
        self._running: dict[object, bool] = {}  # a held turn's ticket -> whether its caller abandoned it

    def acquire(self) -> object:
        """Wait for a turn and return its ticket; TimeoutError while abandoned calls hold every turn."""
        with self._changed:
            while len(self._running) >= self.size:
                if all(self._running.values()):
                    raise TimeoutError(
                        "the LM is still busy with an earlier call that timed out" if self.size == 1 else
                        f"the LM is still busy with {self.size} earlier calls that timed out")
                self._changed.wait()
            ticket = object()
            self._running[ticket] = False
            return ticket

    def abandon(self, ticket: object) -> bool:
        """The ticket's caller stopped waiting for it; False when its call had already given the turn back."""
        with self._changed:
            if ticket not in self._running:
                return False
            self._running[ticket] = True
            self._changed.notify_all()  # waiters behind abandoned calls only may now give up
            return True

    def release(self, ticket: object) -> None:
        with self._changed:
            self._running.pop(ticket, None)
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call holds a turn (abandoned ones included); False if ``timeout`` seconds pass first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._running, timeout=timeout)


def _turn(lm: Any) -> Turn:
    size = MAX_LM_CALLS if is_thread_safe(lm) else 1
    with _TURNS_GUARD:
        try:
            turn = _TURNS.get(lm)
            if turn is None:
                turn = _TURNS[lm] = Turn(size)
        except TypeError:  # an LM that is not hashable or weakly referenceable: bounded per call only
            turn = Turn(size)
        return turn


def _one_line(text: object, limit: int = MAX_LOGGED_CHARS) -> str:
    # An LM's answer or error is untrusted: no terminal escapes in a log line or a trace.
    line = escape_controls(" ".join(str(text).split()))
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _call_in_worker(call: Callable[[], T], timeout: float, turn: Turn) -> T:
    """``call()`` in a worker thread carrying the caller's context, given ``timeout`` seconds once it is its turn;
    a call that overruns is abandoned, not killed, and keeps its turn until the LM returns."""
    ticket = turn.acquire()  # the wait for a turn is not part of the timeout
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = context.run(call)
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome["error"] = exc
        finally:
            turn.release(ticket)
            finished.set()

    try:
        threading.Thread(target=work, name="mhop-lm", daemon=True).start()
        answered = finished.wait(timeout)
    except BaseException:  # no thread, or the caller was interrupted while waiting: the call is not waited for
        turn.abandon(ticket)
        raise
    if not answered:
        if turn.abandon(ticket):
            raise TimeoutError(f"no answer within {timeout:g}s")
        finished.wait()  # it answered just now: the outcome is being handed over
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


StepListener = Callable[[str, str, str], None]


def _reason(error: BaseException, timeout: float) -> str:
    if isinstance(error, TimeoutError):  # asyncio's says nothing: say what ran out
        return _one_line(str(error) or f"no answer within {timeout:g}s")
    return _one_line(f"{type(error).__name__}: {error}")


@dataclass(frozen=True)
class LMStep(Generic[T]):
    """One LM step: call ``predictor``, turn the prediction into a value with ``parse`` (which raises, e.g.
    :class:`~llama_index_mhop.rules.parsing.LMOutputError`, when it is unusable), and use the LLM-free ``fallback``
    when there is no LM or the LM fails (raises, even ``SystemExit``; times out; or ``parse`` rejects it).

    The predictor runs in the caller's DSPy context (a ``dspy.context(trace=[])`` records the call), in a worker
    thread abandoned after ``timeout`` seconds once it is its turn (:func:`is_thread_safe` LMs take at most
    :data:`MAX_LM_CALLS` turns at once, others one). A ``KeyboardInterrupt``, even the LM's, stops the query.
    ``name`` names the step in logs, events and ``counter`` (fallback counts); ``listener`` is told ``(step,
    outcome, reason)`` with outcome ``"lm"``, ``"llm_free"`` or ``"fallback"``; ``callback_manager`` is the
    component's LlamaIndex callbacks (None: :func:`step_callbacks`).
    """

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
            prediction = _call_in_worker(self._blocking_call(inputs, lm), self.timeout, _turn(lm))
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
                call = self._blocking_call(inputs, lm)
                prediction = await asyncio.to_thread(_call_in_worker, call, self.timeout, _turn(lm))
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

    def _blocking_call(self, inputs: dict[str, Any], lm: dspy.BaseLM) -> Callable[[], Any]:
        def call() -> Any:
            with dspy.context(lm=lm, adapter=_ADAPTER):
                return self.predictor(**inputs)

        return call

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
