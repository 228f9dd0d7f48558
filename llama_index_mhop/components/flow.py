"""A component's flow written once, run sync or async.

A flow is a generator that reads top to bottom like the seed's pseudo-code. Where it needs the outside world it
yields a request and receives the answer:

* :class:`LMRequest`: an :class:`~llama_index_mhop.lm.steps.LMStep` (predictor, parser, LLM-free strategy) and its
  inputs; the answer is the parsed value, or the LLM-free value when there is no LM or the LM fails;
* :class:`Search`: a batch of search queries at one depth; the answer is one result list per query (a query a
  run already searched at that depth is answered from its first search: the seed's later rounds often repeat
  one, and the same vector at the same depth finds the same passages);
* :class:`Call`: any other call out (an embedding, a custom node postprocessor), in its blocking and its awaitable
  form; the answer is its value.

:func:`run_flow` drives a flow with blocking calls, :func:`arun_flow` with awaited ones, so the two paths cannot
drift apart. A :class:`Search` goes to the driver's search whole: a round's queries are embedded in one batch
(:mod:`llama_index_mhop.stores.query_batch`). Each LM step's outcome (``"lm"``, ``"llm_free"`` or
``"fallback"``) is recorded in the :class:`StepRecord` the driver is given.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar

from ..lm.steps import DEFAULT_LM_TIMEOUT, FallbackCounter, LMStep

__all__ = [
    "AsyncSearchBatch",
    "Call",
    "Flow",
    "LMRequest",
    "Search",
    "SearchBatch",
    "StepRecord",
    "StepRunner",
    "arun_flow",
    "run_flow",
]

T = TypeVar("T")
R = TypeVar("R")

#: What a flow generator yields, receives and returns.
Flow = Generator["LMRequest[Any] | Search | Call[Any]", Any, R]


@dataclass(frozen=True)
class LMRequest(Generic[T]):
    """Run ``step`` on ``inputs``; the driver gives the step its component's counter, timeout and trace."""

    step: LMStep[T]
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Search:
    """Search every query for its top ``k`` results."""

    queries: list[str]
    k: int


@dataclass(frozen=True)
class Call(Generic[T]):
    """A call out that is neither an LM step nor a search: :func:`run_flow` calls ``run``, :func:`arun_flow`
    awaits ``arun``, so a flow needing one (an embedding, a custom postprocessor) stays one piece of code."""

    run: Callable[[], T]
    arun: Callable[[], Awaitable[T]]


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
    its fallback counter and its timeout. Its LM calls report to the callbacks of the retriever running them
    (see :mod:`llama_index_mhop.lm.events`)."""

    lm: Any
    counter: FallbackCounter
    timeout: float = DEFAULT_LM_TIMEOUT

    def _step(self, request: LMRequest[T], record: StepRecord) -> LMStep[T]:
        return replace(request.step, counter=self.counter, timeout=self.timeout, listener=record)

    def run(self, request: LMRequest[T], record: StepRecord) -> T:
        return self._step(request, record).run(request.inputs, self.lm)

    async def arun(self, request: LMRequest[T], record: StepRecord) -> T:
        return await self._step(request, record).arun(request.inputs, self.lm)


def _send(flow: Flow[R], answer: Any) -> tuple[bool, Any]:
    """``(False, next request)`` or, once the flow has returned, ``(True, its result)``."""
    try:
        return False, flow.send(answer)
    except StopIteration as stop:
        return True, stop.value


#: Searches every query of a :class:`Search` (the queries, the depth): one result list per query.
SearchBatch = Callable[[list[str], int], list[list[Any]]]
#: The awaitable form of :data:`SearchBatch`.
AsyncSearchBatch = Callable[[list[str], int], Awaitable[list[list[Any]]]]


class _Searched:
    """One run's searches, by query and depth: what a :class:`Search` still has to ask, and its answer."""

    def __init__(self) -> None:
        self._results: dict[tuple[str, int], list[Any]] = {}

    def missing(self, request: Search) -> list[str]:
        return [q for q in dict.fromkeys(request.queries) if (q, request.k) not in self._results]

    def answer(self, request: Search, asked: list[str], found: list[list[Any]]) -> list[list[Any]]:
        self._results.update({(q, request.k): r for q, r in zip(asked, found, strict=True)})
        return [list(self._results[q, request.k]) for q in request.queries]


def run_flow(flow: Flow[R], runner: StepRunner, record: StepRecord, search: SearchBatch | None = None) -> R:
    """Drive ``flow`` to its result with blocking LM steps, searches and calls (``search``: None for a flow that
    never searches)."""
    searched = _Searched()
    done, item = _send(flow, None)
    while not done:
        if isinstance(item, Search):
            asked = searched.missing(item)
            answer: Any = searched.answer(item, asked, search(asked, item.k) if asked else [])
        elif isinstance(item, Call):
            answer = item.run()
        else:
            answer = runner.run(item, record)
        done, item = _send(flow, answer)
    return item


async def arun_flow(flow: Flow[R], runner: StepRunner, record: StepRecord,
                    asearch: AsyncSearchBatch | None = None) -> R:
    """Drive ``flow`` to its result with awaited LM steps, searches and calls."""
    searched = _Searched()
    done, item = _send(flow, None)
    while not done:
        if isinstance(item, Search):
            asked = searched.missing(item)
            answer: Any = searched.answer(item, asked, await asearch(asked, item.k) if asked else [])
        elif isinstance(item, Call):
            answer = await item.arun()
        else:
            answer = await runner.arun(item, record)
        done, item = _send(flow, answer)
    return item
