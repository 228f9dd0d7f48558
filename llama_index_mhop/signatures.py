"""The project's DSPy signatures: one class ``dspy.Signature`` per LM step, its docstring the instruction.

Each signature is held by a ``dspy.Predict`` inside a ``dspy.Module`` of the component that runs the step, so
DSPy optimizers and ``save``/``load`` find it. Structured outputs are pydantic models that DSPy's adapter
validates; nothing an LM returns is ever evaluated as code.
"""

from __future__ import annotations

import dspy
from pydantic import BaseModel, Field

__all__ = ["AnswerFromPassages", "Fact", "FactFilterSignature", "QueryPerspectiveGenerator"]


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
