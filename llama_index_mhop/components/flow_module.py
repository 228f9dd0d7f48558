"""A flow as a DSPy program: the module every retriever's flow runs in.

A :class:`FlowModule` holds its predictors as attributes (so optimizers and ``save``/``load`` see them) and its
flow in :meth:`FlowModule.flow` (a generator, see :mod:`llama_index_mhop.components.flow`); ``forward`` drives that flow with
blocking calls and ``aforward`` with awaited ones. What the flow uses but does not own (its step runner, its
searches, the component's other parts) sits in one :class:`Shared` holder, which DSPy's copies share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import dspy
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from .flow import AsyncSearchBatch, Flow, SearchBatch, StepRecord, StepRunner, arun_flow, run_flow
from ..rules.text import check_query

__all__ = ["FlowModule", "NodesAndTrace", "Shared", "query_text"]

T = TypeVar("T")
S = TypeVar("S")
F = TypeVar("F")

#: What a retriever's flow returns: the ranked nodes and the trace of the run.
NodesAndTrace = tuple[list[NodeWithScore], dict[str, Any]]


def query_text(query: QueryType) -> str:
    """The checked text of a query string or ``QueryBundle`` (see :func:`~llama_index_mhop.rules.validation.check_query`)."""
    return check_query(query.query_str if isinstance(query, QueryBundle) else query)


@dataclass(frozen=True, eq=False)
class Shared(Generic[T]):
    """What a flow module uses but does not own: shared, never copied, when DSPy deep-copies the module
    (optimizers work on copies; a copy must not copy a vector store, a graph or an LM client).

    Attributes:
        parts: the component's other parts the flow calls (a query transform, a graph retriever's steps; None).
        runner: the LM, fallback counter and timeout of the flow's LM steps (unless the module reads its runner
            per query from one of its parts: :meth:`FlowModule._runner`).
        search: ``(queries, k) -> one node list per query``, the blocking search (None: the flow never searches).
        asearch: its awaitable form.
    """

    parts: T
    runner: StepRunner
    search: SearchBatch | None = None
    asearch: AsyncSearchBatch | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> Shared[T]:
        return self


class FlowModule(dspy.Module, Generic[S]):
    """A DSPy program whose forward is a flow: ``forward(query)`` (``acall``: ``aforward``) runs :meth:`flow` and
    returns a ``dspy.Prediction`` with ``nodes``, ``node_ids`` and ``trace`` (and the fields of
    :meth:`_node_fields`).

    Args:
        shared: what the flow uses but does not own.
    """

    #: The retriever that builds the module with its searches, named when a module without them runs (None: the
    #: flow never searches).
    searched_by: ClassVar[str | None] = None

    def __init__(self, shared: Shared[S]) -> None:
        super().__init__()
        self._shared = shared

    def flow(self, query: Any, record: StepRecord) -> Flow[NodesAndTrace]:
        """The flow on ``query`` (as :meth:`_flow_for` gives it), recording its LM steps' outcomes in ``record``."""
        raise NotImplementedError

    def _flow_for(self, query: QueryType, record: StepRecord) -> Flow[NodesAndTrace]:
        """:meth:`flow` on the query's checked text (a flow reading more of a ``QueryBundle`` takes it whole)."""
        return self.flow(query_text(query), record)

    def _checked_search(self, search: F | None) -> F | None:
        """``search``; a module built without the searches its flow needs fails before any step runs."""
        if search is None and self.searched_by is not None:
            raise RuntimeError(f"this {type(self).__name__} has no search: build it through {self.searched_by}")
        return search

    def _runner(self) -> StepRunner:
        """The runner of this query's LM steps, read at each query (the shared one unless a module reads it from
        a part whose LM or timeout may change)."""
        return self._shared.runner

    def forward(self, query: QueryType) -> dspy.Prediction:
        shared, record = self._shared, StepRecord()
        search = self._checked_search(shared.search)
        return self._prediction(run_flow(self._flow_for(query, record), self._runner(), record, search))

    async def aforward(self, query: QueryType) -> dspy.Prediction:
        shared, record = self._shared, StepRecord()
        asearch = self._checked_search(shared.asearch)
        return self._prediction(await arun_flow(self._flow_for(query, record), self._runner(), record, asearch))

    def _node_fields(self, nodes: list[NodeWithScore]) -> dict[str, Any]:
        """The prediction's fields besides ``nodes``, ``node_ids`` and ``trace``."""
        return {}

    def _prediction(self, result: NodesAndTrace) -> dspy.Prediction:
        nodes, trace = result
        return dspy.Prediction(nodes=nodes, node_ids=[n.node.node_id for n in nodes], **self._node_fields(nodes),
                               trace=trace)
