"""``PerspectiveQueryTransform``: 4-5 reformulations of a query from different angles (seed 000).

With an LM, a DSPy ``QueryPerspectiveGenerator`` writes the perspectives; without one (the default), or when the
LM fails, :func:`~llama_index_mhop.rules.perspectives.heuristic_perspectives` builds them from the query and the
context passages. Either way the result is 4-5 distinct, non-empty queries.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dspy
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle

from .flow import LMRequest, StepRecord, StepRunner
from ..lm.steps import DEFAULT_LM_TIMEOUT, FallbackCounter, LMStep, resolve_lm
from ..rules.parsing import LMOutputError
from ..rules.perspectives import ContextPassage, heuristic_perspectives, repair_perspectives
from ..lm.programs import ProgramSource, load_program, save_program, step_prompts, update_step_prompts
from ..lm.signatures import QueryPerspectiveGenerator
from ..rules.text import check_query

__all__ = ["PERSPECTIVES_STEP", "ContextLike", "PerspectiveModule", "PerspectiveQueryTransform", "to_context"]

logger = logging.getLogger(__name__)

ContextLike = str | BaseNode | NodeWithScore | ContextPassage
PERSPECTIVES_STEP = "perspectives"
_CONTEXT_CHARS = 600  # per passage shown to the LM: enough for the first sentences, where bridges are named


def to_context(passages: Sequence[ContextLike]) -> list[ContextPassage]:
    """Normalise context passages (strings, nodes, scored nodes) to :class:`ContextPassage`."""
    out = []
    for passage in passages:
        if isinstance(passage, ContextPassage):
            out.append(passage)
        elif isinstance(passage, str):
            out.append(ContextPassage("", passage))
        else:
            node = passage.node if isinstance(passage, NodeWithScore) else passage
            out.append(ContextPassage(str(node.metadata.get("title", "")), node.get_content()))
    return out


class PerspectiveModule(dspy.Module):
    """The DSPy program behind the transform: one ``QueryPerspectiveGenerator`` predictor."""

    def __init__(self) -> None:
        super().__init__()
        self.generate = dspy.Predict(QueryPerspectiveGenerator)

    def forward(self, query: str, context: str = "") -> dspy.Prediction:
        return self.generate(query=query, context=context)

    async def aforward(self, query: str, context: str = "") -> dspy.Prediction:
        return await self.generate.acall(query=query, context=context)


class PerspectiveQueryTransform(BaseQueryTransform):
    """Rewrite a query into 4-5 perspectives: entity, relationship, temporal, comparison and context focused.

    The transformed ``QueryBundle`` keeps the original ``query_str`` and carries the perspectives in
    ``custom_embedding_strs``, so it works inside LlamaIndex's ``TransformQueryEngine`` (a vector retriever then
    searches with the mean embedding of the perspectives). Context passages found so far can be passed in
    ``metadata={"context": [...]}`` or to :meth:`generate`; they supply the bridge entities of the next hop.

    Args:
        lm: a DSPy LM for the perspectives; ``llm``: any LlamaIndex LLM instead. Neither: ``dspy.settings.lm``
            when a query runs, and the LLM-free strategy when that is unset too.
        include_original: also keep the original query in ``custom_embedding_strs`` (when not already there).
        timeout: seconds an LM call may take before it is abandoned for the LLM-free strategy.
        program: a compiled :class:`PerspectiveModule`, or the path of one saved by :meth:`save_program`.
    """

    def __init__(
        self,
        lm: dspy.BaseLM | None = None,
        llm: Any = None,
        include_original: bool = True,
        timeout: float = DEFAULT_LM_TIMEOUT,
        program: ProgramSource | None = None,
    ) -> None:
        self._include_original = include_original
        self.fallback_counts = FallbackCounter()
        self.runner = StepRunner(resolve_lm(lm, llm), self.fallback_counts, timeout)
        self.program = PerspectiveModule()
        if program is not None:
            load_program(self.program, program)

    def save_program(self, path: str | os.PathLike[str]) -> Path:
        """Save the transform's DSPy program (its predictor's instructions and demos) as DSPy's JSON."""
        return save_program(self.program, path)

    def _get_prompts(self) -> dict[str, Any]:
        """The perspective step's instructions (its DSPy signature's, as the predictor holds them)."""
        return step_prompts({PERSPECTIVES_STEP: self.program.generate})

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        update_step_prompts({PERSPECTIVES_STEP: self.program.generate}, prompts_dict)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def step(
        self, query: str, context: Sequence[ContextLike] = (), program: PerspectiveModule | None = None
    ) -> LMRequest[list[str]]:
        """The LM step that writes the perspectives of ``query`` given the ``context`` passages found so far.

        ``program`` is the module to call (default :attr:`program`): a program that holds this transform's module
        passes its own copy, so an optimizer working on a copy of that program sees the calls.
        """
        query = check_query(query)
        passages = to_context(context)

        def parse(prediction: dspy.Prediction) -> list[str]:
            try:
                return repair_perspectives(prediction.perspectives, query, passages)
            except ValueError as exc:
                raise LMOutputError(str(exc)) from exc

        shown = [{"title": p.title, "text": p.text[:_CONTEXT_CHARS]} for p in passages]
        inputs = {"query": query, "context": json.dumps(shown, ensure_ascii=False) if shown else ""}
        step = LMStep(PERSPECTIVES_STEP, program or self.program, parse, lambda: heuristic_perspectives(query, passages))
        return LMRequest(step, inputs)

    def generate(self, query: str, context: Sequence[ContextLike] = ()) -> list[str]:
        """4-5 distinct perspective queries for ``query`` given the ``context`` passages found so far."""
        return self.runner.run(self.step(query, context), StepRecord())

    async def agenerate(self, query: str, context: Sequence[ContextLike] = ()) -> list[str]:
        """The async twin of :meth:`generate`."""
        return await self.runner.arun(self.step(query, context), StepRecord())

    def _bundle(self, query_bundle: QueryBundle, perspectives: list[str]) -> QueryBundle:
        strs = list(perspectives)
        if self._include_original and query_bundle.query_str not in strs:
            strs.append(query_bundle.query_str)
        return QueryBundle(query_str=query_bundle.query_str, custom_embedding_strs=strs)

    def _run(self, query_bundle: QueryBundle, metadata: dict) -> QueryBundle:
        perspectives = self.generate(query_bundle.query_str, metadata.get("context", ()))
        return self._bundle(query_bundle, perspectives)

    async def arun(self, query_bundle_or_str: QueryBundle | str, metadata: dict | None = None) -> QueryBundle:
        """The async twin of ``run``."""
        bundle = QueryBundle(query_bundle_or_str) if isinstance(query_bundle_or_str, str) else query_bundle_or_str
        perspectives = await self.agenerate(bundle.query_str, (metadata or {}).get("context", ()))
        return self._bundle(bundle, perspectives)
