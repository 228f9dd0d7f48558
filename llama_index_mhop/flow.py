"""A component's flow written once, run sync or async.

A flow is a generator that reads top to bottom like the seed's pseudo-code. Where it needs the outside world it
yields a request and receives the answer:

* :class:`LMStep`: one DSPy predictor call, its parser and its LLM-free strategy; the answer is the parsed value,
  or the LLM-free value when there is no LM or the LM fails (see :func:`~llama_index_mhop.lm.run_lm_step`);
* :class:`Search`: a batch of search queries at one depth; the answer is one result list per query.

:func:`run_flow` drives a flow with blocking calls, :func:`arun_flow` with awaited ones (a batch of searches runs
concurrently), so the two paths cannot drift apart. Each LM step's outcome (``"lm"``, ``"llm_free"`` or
``"fallback"``) is recorded in the :class:`StepRecord` the driver is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from .lm import DEFAULT_LM_TIMEOUT, FallbackCounter, arun_lm_step, run_lm_step

__all__ = ["Flow", "LMStep", "Search", "StepRecord", "StepRunner", "arun_flow", "run_flow"]

T = TypeVar("T")
R = TypeVar("R")

#: What a flow generator yields, receives and returns.
Flow = Generator["LMStep[Any] | Search", Any, R]


@dataclass(frozen=True)
class LMStep(Generic[T]):
    """One LM step: call ``predictor(**inputs)``, turn the prediction into a value with ``parse``.

    ``fallback`` is the step's LLM-free strategy, used when there is no LM or the LM fails.
    """

    name: str
    predictor: Any
    inputs: dict[str, Any]
    parse: Callable[[Any], T]
    fallback: Callable[[], T]


@dataclass(frozen=True)
class Search:
    """Search every query for its top ``k`` results."""

    queries: list[str]
    k: int


@dataclass
class StepRecord:
    """How each LM step of one run was answered, for the trace.

    ``steps`` maps a step to ``"lm"``, ``"llm_free"`` (no LM) or ``"fallback"`` (the LM failed); ``reasons`` gives
    the one-line reason of each; ``fallbacks`` lists the steps that fell back, in order.
    """

    steps: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    fallbacks: list[str] = field(default_factory=list)

    def __call__(self, step: str, outcome: str, reason: str) -> None:
        self.steps[step] = outcome
        self.reasons[step] = reason
        if outcome == "fallback":
            self.fallbacks.append(step)


@dataclass
class StepRunner:
    """Runs the LM steps of one component: its own LM (None: ``dspy.settings.lm`` at call time, else LLM-free),
    its fallback counter and its timeout."""

    lm: Any
    counter: FallbackCounter
    timeout: float = DEFAULT_LM_TIMEOUT

    def _arguments(self, step: LMStep[T], record: StepRecord) -> dict[str, Any]:
        return {
            "step": step.name,
            "predictor": step.predictor,
            "inputs": step.inputs,
            "parse": step.parse,
            "fallback": step.fallback,
            "lm": self.lm,
            "counter": self.counter,
            "timeout": self.timeout,
            "listener": record,
        }

    def run(self, step: LMStep[T], record: StepRecord) -> T:
        return run_lm_step(**self._arguments(step, record))

    async def arun(self, step: LMStep[T], record: StepRecord) -> T:
        return await arun_lm_step(**self._arguments(step, record))


def _send(flow: Flow[R], answer: Any) -> tuple[bool, Any]:
    """``(False, next request)`` or, once the flow has returned, ``(True, its result)``."""
    try:
        return False, flow.send(answer)
    except StopIteration as stop:
        return True, stop.value


def run_flow(
    flow: Flow[R], runner: StepRunner, record: StepRecord, search: Callable[[str, int], list[Any]]
) -> R:
    """Drive ``flow`` to its result with blocking LM steps and searches."""
    done, item = _send(flow, None)
    while not done:
        if isinstance(item, Search):
            answer: Any = [search(query, item.k) for query in item.queries]
        else:
            answer = runner.run(item, record)
        done, item = _send(flow, answer)
    return item


async def arun_flow(
    flow: Flow[R], runner: StepRunner, record: StepRecord, asearch: Callable[[str, int], Awaitable[list[Any]]]
) -> R:
    """Drive ``flow`` to its result with awaited LM steps; the searches of one request run concurrently."""
    done, item = _send(flow, None)
    while not done:
        if isinstance(item, Search):
            answer: Any = list(await asyncio.gather(*(asearch(query, item.k) for query in item.queries)))
        else:
            answer = await runner.arun(item, record)
        done, item = _send(flow, answer)
    return item
