"""What the package's retrievers share: a flow written once and driven sync or async, the DSPy program it runs
in, and the LlamaIndex retriever around it.

A flow is a generator that reads top to bottom like its seed's pseudo-code; where it needs the outside world it
yields an :class:`LMRequest`, a :class:`Search` or a :class:`Call` and receives the answer. :func:`run_flow` and
:func:`arun_flow` drive it, so the sync and async paths cannot drift apart.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import dspy
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from pydantic import BaseModel

from ..adapters.llama_index import build_query, retriever_vector_store, with_vector_store
from ..lm.programs import ProgramSource, load_program, save_program, step_prompts, update_step_prompts
from ..lm.steps import DEFAULT_LM_TIMEOUT, FallbackCounter, LMStep, resolve_lm, step_callbacks
from ..rules.counters import add_counter_source
from ..rules.text import check_query
from ..stores.search import (
    GuardedChromaVectorStore,
    QueryVectors,
    aread_one_version,
    query_embedder,
    read_one_version,
)

if TYPE_CHECKING:
    from ..stores.passage_table import PassageSearch, PassageTable

__all__ = ["BatchSearcher", "Call", "CheckedQueryRetriever", "Flow", "FlowModule", "LMRequest", "NodesAndTrace",
           "ProgramRetriever", "Search", "StepRecord", "StepRunner", "again_if_table_moved", "arun_flow", "query_text",
           "run_flow", "still_in_table"]

T = TypeVar("T")
R = TypeVar("R")
#: What a flow generator yields, receives and returns.
Flow = Generator["LMRequest[Any] | Search | Call[Any]", Any, R]
#: What a retriever's flow returns: the ranked nodes and the trace of the run.
NodesAndTrace = tuple[list[NodeWithScore], dict[str, Any]]
#: ``(queries, k) -> one result list per query``, blocking or awaitable.
SearchBatch = Callable[[list[str], int], list[list[Any]]]
AsyncSearchBatch = Callable[[list[str], int], Awaitable[list[list[Any]]]]


@dataclass(frozen=True)
class LMRequest(Generic[T]):
    """Run ``step`` on ``inputs``; the driver gives the step its component's counter, timeout and trace."""

    step: LMStep[T]
    inputs: dict[str, Any]


@dataclass(frozen=True)
class Search:
    """Search every query for its top ``k`` results; a query already searched as deep or deeper in the run is
    answered by that search's first ``k`` (:mod:`~llama_index_mhop.stores.search`)."""

    queries: list[str]
    k: int


@dataclass(frozen=True)
class Call(Generic[T]):
    """A call out that is neither an LM step nor a search (an embedding, a custom postprocessor)."""

    run: Callable[[], T]
    arun: Callable[[], Awaitable[T]]


@dataclass
class StepRecord:
    """How each LM step of one run was answered: ``"lm"``, ``"llm_free"`` (no LM) or ``"fallback"`` (the LM
    failed), with the one-line reason; ``fallbacks`` lists the steps that fell back, in order."""

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
    """Runs the LM steps of one component: its LM (None: ``dspy.settings.lm`` at call time, else LLM-free), its
    fallback counter and its timeout."""

    lm: Any
    counter: FallbackCounter
    timeout: float = DEFAULT_LM_TIMEOUT

    def _step(self, request: LMRequest[T], record: StepRecord) -> LMStep[T]:
        return replace(request.step, counter=self.counter, timeout=self.timeout, listener=record)

    def run(self, request: LMRequest[T], record: StepRecord) -> T:
        return self._step(request, record).run(request.inputs, self.lm)

    async def arun(self, request: LMRequest[T], record: StepRecord) -> T:
        return await self._step(request, record).arun(request.inputs, self.lm)


def again_if_table_moved(run: Callable[[], Flow[NodesAndTrace]]) -> Flow[NodesAndTrace]:
    """``run()``'s flow, run once more on the passage table read again when :func:`still_in_table` found a passage
    the table holds deleted or edited meanwhile (a write through a plain ``ChromaVectorStore`` moves no version
    row), so the query serves its full number of passages as they are now."""
    results, trace = yield from run()
    if trace.pop("table_moved", False):
        results, trace = yield from run()
        trace.pop("table_moved", None)
    return results, trace


def still_in_table(passages: PassageSearch, table: PassageTable, results: list[NodeWithScore],
                   trace: dict[str, Any]) -> Flow[list[NodeWithScore]]:
    """``results`` the collections still hold as ``table`` read them (:meth:`PassageSearch.held`), noting in
    ``trace`` for :func:`again_if_table_moved` whether any was not."""
    held = yield Call(partial(passages.held, table, results), partial(passages.aheld, table, results))
    trace["table_moved"] = len(held) < len(results)
    return held


def _send(flow: Flow[R], answer: Any) -> tuple[bool, Any]:
    """``(False, next request)`` or, once the flow has returned, ``(True, its result)``."""
    try:
        return False, flow.send(answer)
    except StopIteration as stop:
        return True, stop.value


def _missing(searched: _Searched, request: Search, search: Any) -> list[str]:
    """The queries of ``request`` still to search, refusing a flow built without a search."""
    if search is None:
        raise RuntimeError("this flow searches but was built without a search: build it through its retriever")
    return searched.missing(request)


class _Searched:
    """One run's searches, each query's deepest (depth, results): what a :class:`Search` still has to ask, and its
    answer, each query's first ``k`` results."""

    def __init__(self) -> None:
        self._results: dict[str, tuple[int, list[Any]]] = {}

    def missing(self, request: Search) -> list[str]:
        return [q for q in dict.fromkeys(request.queries) if self._results.get(q, (0,))[0] < request.k]

    def answer(self, request: Search, asked: list[str], found: list[list[Any]]) -> list[list[Any]]:
        self._results.update({q: (request.k, r) for q, r in zip(asked, found, strict=True)})
        return [list(self._results[q][1][: request.k]) for q in request.queries]


def run_flow(flow: Flow[R], runner: StepRunner, record: StepRecord, search: SearchBatch | None = None) -> R:
    """Drive ``flow`` to its result with blocking LM steps, searches and calls."""
    searched = _Searched()
    done, item = _send(flow, None)
    while not done:
        if isinstance(item, Search):
            asked = _missing(searched, item, search)
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
            asked = _missing(searched, item, asearch)
            answer: Any = searched.answer(item, asked, await asearch(asked, item.k) if asked else [])
        elif isinstance(item, Call):
            answer = await item.arun()
        else:
            answer = await runner.arun(item, record)
        done, item = _send(flow, answer)
    return item


class BatchSearcher:
    """Searches a flow's rounds: ``search(queries, k)`` gives one result list per query, from the retriever
    ``retriever_for(k)``, the round's query vectors embedded together and, over the guarded store, answered from one
    Chroma call (:mod:`~llama_index_mhop.stores.search`).

    Args:
        retriever_for: the retriever that searches ``k`` deep.
        keep: how many of each result list to keep, given ``k`` (default all).
    """

    def __init__(self, retriever_for: Callable[[int], BaseRetriever],
                 keep: Callable[[list[NodeWithScore], int], list[NodeWithScore]] | None = None) -> None:
        self._retriever_for = retriever_for
        self._keep = keep or (lambda results, k: list(results))
        self._vectors: dict[int, QueryVectors] = {}  # by the embedder's id: retrievers of one embedder share them
        self._lock = threading.Lock()

    def _round(self, retriever: BaseRetriever, queries: list[str]) -> tuple[BaseRetriever, list[QueryBundle | str]]:
        """The round's bundles (with their query vectors) and the retriever to search them: over the guarded store,
        a copy of ``retriever`` whose store answers the round's searches from one Chroma call."""
        embed_model = query_embedder(retriever)
        if embed_model is None:
            return retriever, list(queries)
        with self._lock:
            vectors = self._vectors.setdefault(id(embed_model), QueryVectors(embed_model))
        bundles = [QueryBundle(query_str=q, embedding=v) for q, v in zip(queries, vectors(queries), strict=True)]
        store = retriever_vector_store(retriever) if isinstance(retriever, VectorIndexRetriever) else None
        if isinstance(store, GuardedChromaVectorStore):
            answered = store.answering([build_query(retriever, b) for b in bundles])
            if answered is not store:
                retriever = with_vector_store(retriever, answered)
        return retriever, bundles

    def search(self, queries: list[str], k: int) -> list[list[NodeWithScore]]:
        retriever, bundles = self._round(self._retriever_for(k), queries)
        return [self._keep(retriever.retrieve(b), k) for b in bundles]

    async def asearch(self, queries: list[str], k: int) -> list[list[NodeWithScore]]:
        """:meth:`search` with awaited retrievals (run concurrently), the round prepared in a worker thread."""
        retriever, bundles = await asyncio.to_thread(self._round, self._retriever_for(k), queries)
        results = await asyncio.gather(*(retriever.aretrieve(b) for b in bundles))
        return [self._keep(r, k) for r in results]


def query_text(query: QueryType) -> str:
    """The checked text of a query string or ``QueryBundle``."""
    return check_query(query.query_str if isinstance(query, QueryBundle) else query)


class FlowModule(dspy.Module):
    """A DSPy program whose forward is a flow: ``forward(query)`` (``acall``: ``aforward``) drives :meth:`flow`
    and returns a ``dspy.Prediction`` with ``nodes``, ``node_ids`` and ``trace``.

    What the flow uses but does not own (an LM runner, searches, an index: ``source``) is held in ``_parts``, which DSPy's
    copies share: an optimizer works on copies, and a copy must not copy a vector store, a graph or an LM client.
    """

    def __init__(self, runner: StepRunner, search: SearchBatch | None = None,
                 asearch: AsyncSearchBatch | None = None, source: Any = None) -> None:
        super().__init__()
        self._parts = _Parts(runner, search, asearch, source)

    def flow(self, query: Any, record: StepRecord) -> Flow[NodesAndTrace]:
        """The flow on ``query`` (as :meth:`_flow_for` gives it), recording its LM steps' outcomes in ``record``."""
        raise NotImplementedError

    def _flow_for(self, query: QueryType, record: StepRecord) -> Flow[NodesAndTrace]:
        return self.flow(query_text(query), record)

    def _runner(self) -> StepRunner:
        """The runner of this query's LM steps (read at each query)."""
        return self._parts.runner

    def forward(self, query: QueryType) -> dspy.Prediction:
        record = StepRecord()
        return self._prediction(run_flow(self._flow_for(query, record), self._runner(), record, self._parts.search))

    async def aforward(self, query: QueryType) -> dspy.Prediction:
        record = StepRecord()
        flow = self._flow_for(query, record)
        return self._prediction(await arun_flow(flow, self._runner(), record, self._parts.asearch))

    def _node_fields(self, nodes: list[NodeWithScore]) -> dict[str, Any]:
        """The prediction's fields besides ``nodes``, ``node_ids`` and ``trace``."""
        return {}

    def _prediction(self, result: NodesAndTrace) -> dspy.Prediction:
        nodes, trace = result
        return dspy.Prediction(nodes=nodes, node_ids=[n.node.node_id for n in nodes], **self._node_fields(nodes),
                               trace=trace)


@dataclass(frozen=True, eq=False)
class _Parts:
    """A flow module's runner, searches and what else it reads (an index), shared (never copied) by DSPy's deep
    copies of the module."""

    runner: StepRunner
    search: SearchBatch | None = None
    asearch: AsyncSearchBatch | None = None
    source: Any = None

    def __deepcopy__(self, memo: dict[int, Any]) -> _Parts:
        return self


def _checked(query: QueryType) -> QueryBundle:
    if isinstance(query, QueryBundle):
        text = check_query(query.query_str)
        return query if text == query.query_str else QueryBundle(
            query_str=text, custom_embedding_strs=query.custom_embedding_strs, embedding=query.embedding
        )
    return QueryBundle(query_str=check_query(query))


_served: Counter[str] = Counter()  # queries served by each retriever class of this process
_served_lock = threading.Lock()


def _served_counts() -> dict[str, int]:
    with _served_lock:
        return {f"queries_served.{name}": n for name, n in _served.items()}


def _reset_served() -> None:
    with _served_lock:
        _served.clear()


add_counter_source(_served_counts, _reset_served)


class CheckedQueryRetriever(BaseRetriever):
    """A ``BaseRetriever`` whose ``retrieve``/``aretrieve`` reject bad queries with a clear error.

    Non-strings raise ``TypeError``; empty or white-space queries raise ``ValueError``; control characters become
    spaces and over-long queries are cut (:func:`~llama_index_mhop.rules.text.check_query`). The LM steps of a
    retrieval report their LLM events to the retriever's ``callback_manager`` (see
    :mod:`~llama_index_mhop.lm.steps`).
    """

    def _count_served(self) -> None:
        with _served_lock:
            _served[type(self).__name__] += 1

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        bundle = _checked(str_or_query_bundle)
        self._count_served()
        with step_callbacks(getattr(self, "callback_manager", None)):
            return read_one_version(super().retrieve, bundle)

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        bundle = _checked(str_or_query_bundle)
        self._count_served()
        with step_callbacks(getattr(self, "callback_manager", None)):
            return await aread_one_version(super().aretrieve, bundle)


class ProgramRetriever(CheckedQueryRetriever):
    """A retriever with frozen settings (``config``), an optional LM and a DSPy ``program``: a retrieval is one call
    of the program, whose prediction carries the ``nodes`` and the ``trace`` (kept as ``last_trace``).

    Every subclass takes these keyword arguments besides its own:

    Args:
        config: the retriever's settings (an instance of its ``config_type``); or give them one by one as keywords.
        lm: a DSPy LM (optional; without one, ``dspy.settings.lm`` when a step runs, else LLM-free).
        llm: a LlamaIndex LLM (optional; not together with ``lm``).
        program: a compiled program of the subclass (a module of its class, or the path of one saved by
            :meth:`save_program`).
        callback_manager: LlamaIndex callbacks.
        verbose: log each query's steps at INFO.
        **settings: any field of ``config_type``.

    Raises:
        ValueError: an unknown or out-of-range setting, ``config`` with keyword settings, or a program file of
            another shape. TypeError: ``lm`` is not a DSPy LM, or ``program`` a module of another class.
    """

    config_type: ClassVar[type[BaseModel]]
    program: Any
    last_trace: dict[str, Any]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # help() and inspect.signature show every setting as a keyword argument, read from ``config_type``.
        for name in ("__init__", "from_defaults"):
            own = cls.__dict__.get(name)
            function = getattr(own, "__func__", own)
            if callable(function) and "config_type" in cls.__dict__:
                function.__signature__ = settings_signature(function, cls.config_type)

    def __init__(self, *, config: BaseModel | None = None, lm: dspy.BaseLM | None = None, llm: Any = None,
                 program: ProgramSource | None = None, callback_manager: CallbackManager | None = None,
                 verbose: bool = False, **settings: Any) -> None:
        self.config: Any = self.settings(config, settings)
        self.lm = resolve_lm(lm=lm, llm=llm)
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.program = self._build_program()
        if program is not None:
            load_program(self.program, program)
        self.last_trace = {}

    @classmethod
    def settings(cls, config: BaseModel | None, settings: dict[str, Any]) -> Any:
        """``config`` if given, else the ``config_type`` built (and checked) from keyword ``settings``."""
        fields = cls.config_type.model_fields
        unknown = [name for name in settings if name not in fields]
        if unknown:
            raise ValueError(f"{cls.__name__} has no setting {unknown[0]!r}; its settings: {', '.join(fields)}")
        if config is not None and settings:
            raise ValueError(f"give config= or keyword settings, not both (got {', '.join(settings)})")
        if config is not None and not isinstance(config, cls.config_type):
            raise TypeError(f"{cls.__name__} takes config={cls.config_type.__name__}(...), "
                            f"got {type(config).__name__}")
        return config if config is not None else cls.config_type(**settings)

    def _build_program(self) -> FlowModule:
        """The subclass's DSPy program, built from ``self.config`` and ``self.lm``."""
        raise NotImplementedError

    def save_program(self, path: str | os.PathLike[str]) -> Path:
        """Save the DSPy program (its predictors' instructions and demos) as DSPy's JSON."""
        return save_program(self.program, path)

    def _step_predictors(self) -> dict[str, Any]:
        """The predictor of each LM step, by step name (the subclass's program holds them)."""
        return {}

    def _get_prompts(self) -> dict[str, Any]:
        """Each LM step's instructions as a ``PromptTemplate``, by step name (``get_prompts()``)."""
        return step_prompts(self._step_predictors())

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        """New instructions for the named steps (``update_prompts({step: PromptTemplate(...)})``)."""
        update_step_prompts(self._step_predictors(), prompts_dict)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        prediction = self.program(query=query_bundle)
        self.last_trace = prediction.trace
        return prediction.nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        prediction = await self.program.acall(query=query_bundle)
        self.last_trace = prediction.trace
        return prediction.nodes


def settings_signature(function: Callable[..., Any], config_type: type[BaseModel]) -> inspect.Signature:
    """``function``'s signature with its ``**kwargs`` spelled out: the keyword arguments every
    :class:`ProgramRetriever` takes, then each field of ``config_type`` with its default."""
    own = inspect.signature(function)
    keyword = inspect.Parameter.KEYWORD_ONLY
    shared = [p for p in inspect.signature(ProgramRetriever.__init__).parameters.values() if p.kind is keyword]
    fields = [inspect.Parameter(name, keyword, default=field.default, annotation=field.annotation)
              for name, field in config_type.model_fields.items()]
    parameters = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
    seen = {p.name for p in parameters}
    for parameter in [*shared, *fields]:
        if parameter.name not in seen:
            seen.add(parameter.name)
            parameters.append(parameter)
    return own.replace(parameters=parameters)
