"""How the package calls an LM: which LM a step uses, in whose context, for how long, and what happens when it fails.

An LM is optional everywhere. A component keeps the LM it was given (``lm=`` a ``dspy.LM``, ``llm=`` any
LlamaIndex ``LLM``); without one, a step uses ``dspy.settings.lm`` as it is when the step runs, else none. Every LM
call goes through :func:`run_lm_step` / :func:`arun_lm_step`, which run the predictor in the caller's DSPy
context, give it a timeout, let LMs that are not thread-safe take turns, parse the answer defensively and fall
back to the step's LLM-free strategy when the LM is absent, raises, times out or answers something unusable.
Nothing an LM returns is ever evaluated. The LM clients themselves are in :mod:`llama_index_mhop.lm_clients`.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import dspy

from .counters import count
from .lm_clients import llamaindex_lm

__all__ = [
    "DEFAULT_LM_TIMEOUT",
    "MAX_LOGGED_CHARS",
    "FallbackCounter",
    "StepListener",
    "arun_lm_step",
    "current_lm",
    "is_thread_safe",
    "resolve_lm",
    "run_lm_step",
]

logger = logging.getLogger(__name__)

DEFAULT_LM_TIMEOUT = 60.0
T = TypeVar("T")

# One LM call per step: no hidden second call through DSPy's JSON-adapter retry.
_ADAPTER = dspy.ChatAdapter(use_json_adapter_fallback=False)
#: Characters of an LM's answer or error quoted in a log line or a trace.
MAX_LOGGED_CHARS = 200
_logged_no_lm: set[str] = set()
# One lock per LM object that is not known to be thread-safe: its calls take turns.
_TURNS: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_TURNS_GUARD = threading.Lock()


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
    """The LM a component was given: ``lm`` (a DSPy LM), else ``llm`` (a LlamaIndex LLM, wrapped), else None.

    None means "whatever ``dspy.settings.lm`` is when a step runs" (:func:`current_lm`), so ``dspy.configure`` and
    ``dspy.context(lm=...)`` after the component was built take effect.
    """
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
    """The LM a step uses now: the component's own, else the caller's ``dspy.settings.lm`` (None: LLM-free)."""
    return lm if lm is not None else dspy.settings.lm


def is_thread_safe(lm: Any) -> bool:
    """Whether ``lm`` may be called from two threads at once.

    An explicit ``lm.thread_safe`` attribute decides (``function_lm`` sets it, False unless told otherwise);
    otherwise only a plain ``dspy.LM``, which calls a remote API through LiteLLM, is known to be safe. Anything
    else (a local model, a wrapped LlamaIndex LLM, a test LM) is called one at a time.
    """
    flag = getattr(lm, "thread_safe", None)
    return bool(flag) if flag is not None else type(lm) is dspy.LM


def _turn(lm: Any) -> threading.Lock | None:
    """The lock that serialises calls to ``lm`` (one per LM object), or None when it is thread-safe."""
    if is_thread_safe(lm):
        return None
    with _TURNS_GUARD:
        lock = _TURNS.get(lm)
        if lock is None:
            lock = _TURNS[lm] = threading.Lock()
        return lock


def _one_line(text: object, limit: int = MAX_LOGGED_CHARS) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _call_in_worker(call: Callable[[], T], timeout: float, turn: threading.Lock | None) -> T:
    """``call()`` in a fresh worker thread that carries the caller's context (DSPy settings, trace), given at most
    ``timeout`` seconds once it is this call's turn. A call that overruns is abandoned, not killed: its thread ends
    when the LM returns, and only then is the LM free for the next call."""
    if turn is not None:
        turn.acquire()  # the wait for a turn is not part of the timeout
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = context.run(call)
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome["error"] = exc
        finally:
            if turn is not None:
                turn.release()
            finished.set()

    threading.Thread(target=work, name="mhop-lm", daemon=True).start()
    if not finished.wait(timeout):
        raise TimeoutError(f"no answer within {timeout:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


StepListener = Callable[[str, str, str], None]


def _llm_free(step: str, fallback: Callable[[], T], listener: StepListener | None) -> T:
    if step not in _logged_no_lm:
        _logged_no_lm.add(step)
        logger.info("%s: no LM configured, using the LLM-free strategy", step)
    if listener is not None:
        listener(step, "llm_free", "no LM configured")
    return fallback()


def _fallback(
    step: str, error: BaseException, fallback: Callable[[], T], counter: FallbackCounter | None,
    listener: StepListener | None,
) -> T:
    reason = _one_line(str(error) if isinstance(error, TimeoutError) else f"{type(error).__name__}: {error}")
    logger.warning("%s: LM step failed (%s); using the LLM-free strategy", step, reason)
    if counter is not None:
        counter.add(step)
    if listener is not None:
        listener(step, "fallback", reason)
    return fallback()


def _answered(step: str, value: T, listener: StepListener | None) -> T:
    if listener is not None:
        listener(step, "lm", "answered")
    return value


def _blocking_call(predictor: dspy.Module, inputs: dict[str, Any], lm: dspy.BaseLM) -> Callable[[], dspy.Prediction]:
    def call() -> dspy.Prediction:
        with dspy.context(lm=lm, adapter=_ADAPTER):
            return predictor(**inputs)

    return call


def run_lm_step(
    step: str,
    predictor: dspy.Module,
    inputs: dict[str, Any],
    parse: Callable[[dspy.Prediction], T],
    fallback: Callable[[], T],
    lm: dspy.BaseLM | None,
    counter: FallbackCounter | None = None,
    timeout: float = DEFAULT_LM_TIMEOUT,
    listener: StepListener | None = None,
) -> T:
    """Run one LM step, or its LLM-free fallback when there is no LM or the LM fails.

    The predictor runs in the caller's DSPy context (a ``dspy.context(trace=[])`` records the call; an LM set by
    ``dspy.context``/``dspy.configure`` is used when the component has none), in a worker thread so that a hung
    LM is abandoned after ``timeout``. LMs not known to be thread-safe (:func:`is_thread_safe`) are called one at
    a time, and the wait for a turn is not counted against the timeout.

    Args:
        step: a name for logs, traces and the fallback counter.
        predictor: the DSPy module to call with ``inputs``.
        parse: turns the prediction into the step's value; raises (e.g.
            :class:`~llama_index_mhop.parsing.LMOutputError`) when unusable.
        fallback: the LLM-free strategy.
        lm: the component's LM; None means ``dspy.settings.lm`` at call time, and LLM-free when that is None too.
        counter: counts fallbacks, so callers can see how often the LM failed.
        timeout: seconds an LM call may take once it is its turn.
        listener: told ``(step, outcome, reason)`` with outcome ``"lm"``, ``"llm_free"`` or ``"fallback"``.
    """
    lm = current_lm(lm)
    if lm is None:
        return _llm_free(step, fallback, listener)
    try:
        value = parse(_call_in_worker(_blocking_call(predictor, inputs, lm), timeout, _turn(lm)))
    except Exception as exc:  # an LM may fail in any way; the query must still answer
        return _fallback(step, exc, fallback, counter, listener)
    return _answered(step, value, listener)


async def arun_lm_step(
    step: str,
    predictor: dspy.Module,
    inputs: dict[str, Any],
    parse: Callable[[dspy.Prediction], T],
    fallback: Callable[[], T],
    lm: dspy.BaseLM | None,
    counter: FallbackCounter | None = None,
    timeout: float = DEFAULT_LM_TIMEOUT,
    listener: StepListener | None = None,
) -> T:
    """The async twin of :func:`run_lm_step`, never blocking the event loop: a thread-safe LM is awaited
    through ``predictor.acall``; any other LM takes its turn in a worker thread, as on the sync path."""
    lm = current_lm(lm)
    if lm is None:
        return _llm_free(step, fallback, listener)
    turn = _turn(lm)
    try:
        if turn is None:
            with dspy.context(lm=lm, adapter=_ADAPTER):
                prediction = await asyncio.wait_for(predictor.acall(**inputs), timeout=timeout)
        else:
            call = _blocking_call(predictor, inputs, lm)
            prediction = await asyncio.to_thread(_call_in_worker, call, timeout, turn)
        value = parse(prediction)
    except TimeoutError:
        return _fallback(step, TimeoutError(f"no answer within {timeout:g}s"), fallback, counter, listener)
    except Exception as exc:
        return _fallback(step, exc, fallback, counter, listener)
    return _answered(step, value, listener)
