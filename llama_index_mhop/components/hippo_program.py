"""HippoRAG 2's query as a DSPy program: the fact filter's predictor and the flow that runs it.

:class:`HippoGraphModule` holds the filter's predictor as ``filter`` (so optimizers and ``save``/``load`` see it,
and its JSON is the fact filter's too) and runs one query in :meth:`HippoGraphModule.flow`, read top to bottom:
the query's vector, the candidate facts, the filter's step, the walk. ``forward`` and ``aforward`` drive that one
flow with blocking or awaited calls (:class:`~llama_index_mhop.components.flow_module.FlowModule`). The scoring and the walk
are the steps the owning :class:`~llama_index_mhop.components.hippo_graph.HippoGraphRetriever` hands in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from .flow import Call, Flow, StepRecord, StepRunner
from .flow_module import FlowModule, NodesAndTrace, Shared, query_text
from ..lm.steps import FallbackCounter
from .postprocessors import DSPyFactFilter
from ..lm.signatures import FactFilterModule

if TYPE_CHECKING:
    import numpy as np

    from ..graph.retrieval_source import RetrievalSource
    from ..graph.state import RetrievalState
    from ..graph.walk.exact import DenseScores

__all__ = ["HippoGraphModule", "HippoSteps"]

#: The dense passage scores, the candidate fact nodes and each candidate's fact row, by node id.
Candidates = tuple["DenseScores", list[NodeWithScore], dict[str, int]]


@dataclass(frozen=True)
class HippoSteps:
    """What HippoRAG 2's flow calls of the retriever running it.

    Attributes:
        index: the graph searched.
        damping: the walk's damping (the state is loaded per damping).
        fact_filter: a :class:`~llama_index_mhop.components.postprocessors.DSPyFactFilter`, or any LlamaIndex node
            postprocessor (run through ``postprocess_nodes`` / ``apostprocess_nodes``).
        query_vector: ``(state, embedding) -> the query's unit vector``, checked against the state's dimension.
        candidates: ``(state, query vector) -> (dense scores, candidate fact nodes, fact row by node id)``.
        rank: ``(state, query, query vector, dense, candidates, kept, fact rows, started) -> (nodes, trace)``.
    """

    index: RetrievalSource
    damping: float
    fact_filter: Any
    query_vector: Callable[[RetrievalState, list[float]], np.ndarray]
    candidates: Callable[[RetrievalState, np.ndarray], Candidates]
    rank: Callable[..., NodesAndTrace]


class HippoGraphModule(FlowModule[HippoSteps]):
    """HippoRAG 2's query flow as a DSPy program: its one predictor is the fact filter's (``filter``, the step
    that runs per query), so a compiled program's JSON loads into a :class:`DSPyFactFilter` too.

    ``forward(query)`` (a string, or a ``QueryBundle`` whose ``embedding`` is used when given and kept when
    computed) returns a ``dspy.Prediction`` with ``nodes``, ``node_ids`` and ``trace``; the filter calls this
    module's own predictor, so an optimizer compiling a copy of the program sees the calls.
    """

    def __init__(self, steps: HippoSteps) -> None:
        # A custom postprocessor as the filter has no LM step of the flow's: the shared runner is LLM-free.
        super().__init__(Shared(steps, StepRunner(lm=None, counter=FallbackCounter())))
        program = getattr(steps.fact_filter, "program", None)
        self.filter = program.filter if isinstance(program, FactFilterModule) else None

    def _runner(self) -> StepRunner:
        """A DSPyFactFilter's runner, read at each query so a later change of its LM or timeout is used."""
        fact_filter = self._shared.parts.fact_filter
        return fact_filter.runner if isinstance(fact_filter, DSPyFactFilter) else self._shared.runner

    def _flow_for(self, query: QueryType, record: StepRecord) -> Flow[NodesAndTrace]:
        text = query_text(query)
        bundle = query if isinstance(query, QueryBundle) and query.query_str == text else QueryBundle(text)
        return self.flow(bundle, record)

    def flow(self, query: QueryBundle, record: StepRecord) -> Flow[NodesAndTrace]:
        """One query, top to bottom; yields the fact filter's step and the calls out (the query's embedding, a
        custom filter) to its driver (see :mod:`llama_index_mhop.components.flow`)."""
        steps = self._shared.parts
        text = query.query_str
        started = time.perf_counter()
        state = steps.index.retrieval_state(damping=steps.damping)
        if query.embedding is None:
            embed_model = steps.index.embed_model
            query.embedding = yield Call(partial(embed_model.get_query_embedding, text),
                                         partial(embed_model.aget_query_embedding, text))
        query_vector = steps.query_vector(state, query.embedding)
        dense, candidates, by_id = steps.candidates(state, query_vector)
        kept = (yield from self._recognition(steps.fact_filter, candidates, text)) if candidates else []
        results, trace = steps.rank(state, text, query_vector, dense, candidates, kept, by_id, started)
        # How the fact filter's LM step was answered (empty: no step ran); each query keeps its own trace, so
        # concurrent queries never write into each other's.
        trace.update(steps=dict(record.steps), step_reasons=dict(record.reasons))
        return results, trace

    def _recognition(self, fact_filter: Any, candidates: list[NodeWithScore], query: str) -> Flow[list[NodeWithScore]]:
        """The candidate facts the filter keeps: a DSPyFactFilter's step calls this module's predictor; any other
        postprocessor is called as it is."""
        if isinstance(fact_filter, DSPyFactFilter):
            return (yield from fact_filter.recognition(list(candidates), query, self.filter))
        bundle = QueryBundle(query)
        return (yield Call(partial(fact_filter.postprocess_nodes, list(candidates), query_bundle=bundle),
                           partial(fact_filter.apostprocess_nodes, list(candidates), query_bundle=bundle)))
