"""The project's DSPy signatures: one class ``dspy.Signature`` per LM step, its docstring the instruction.

Each is held by a ``dspy.Predict`` inside the ``dspy.Module`` of the component that runs the step, so DSPy
optimizers and ``save``/``load`` find it; the fact filter's module is here too (the filter and the graph index
both hold one). Nothing an LM returns is ever evaluated as code.
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

__all__ = [
    "AnswerFromPassages", "ConfidenceEvaluator", "EntityAndGapAnalyzer", "Fact", "FactFilterModule",
    "FactFilterSignature", "ListwiseDocumentReranker", "QueryPerspectiveGenerator", "TargetedQueryGenerator",
]


class Fact(BaseModel):
    """A list of (subject, predicate, object) facts: the structured answer of the fact filter (seeds/003)."""

    fact: list[list[str]] = Field(
        description="A list of facts, each fact is a list of 3 strings: [subject, predicate, object]"
    )


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
    """The DSPy module of the fact filter (HippoRAG 2's recognition memory): one ``Predict`` over
    :class:`FactFilterSignature`, at ``filter``."""

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
        desc="one chain per line, e.g. 'Leland, North Carolina -> film shot there in 1986 -> its director'"
    )
    queries: str = dspy.OutputField(desc="2-3 search queries, one per line")


class ConfidenceEvaluator(dspy.Signature):
    """Judge whether the retrieved passages contain enough evidence to answer or verify the query. Give a
    confidence from 0 to 100 and list what is still missing: entity chains not yet followed, bridging entities
    that a passage mentions but that no passage describes, or facts that no passage states."""

    query: str = dspy.InputField(desc="the question or claim")
    passages: str = dspy.InputField(desc="the retrieved passages, numbered")
    confidence: str = dspy.OutputField(desc="an integer from 0 to 100")
    missing_information: str = dspy.OutputField(
        desc="missing entities or facts, one per line; 'none' if nothing is missing"
    )


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
