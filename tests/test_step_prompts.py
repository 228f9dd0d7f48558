"""``get_prompts()``/``update_prompts()`` on every component: each LM step's instructions, changed in place."""

from __future__ import annotations

import json
from pathlib import Path

import chromadb
import pytest
from llama_index.core import PromptTemplate

from llama_index_mhop.components import ConfidenceLoopRetriever, RRFFusionRetriever
from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.lm.clients import function_lm
from llama_index_mhop.lm.steps import (
    ConfidenceEvaluator,
    EntityAndGapAnalyzer,
    FactFilterSignature,
    ListwiseDocumentReranker,
    QueryPerspectiveGenerator,
    TargetedQueryGenerator,
)
from llama_index_mhop.stores.corpus import make_document
from tests.recording_retriever import QUERY, RecordingRetriever
from tests.word_bag import WordBagEmbedding

DATA = Path(__file__).parent / "graph" / "data"


def capturing_lm(prompts: list[str]):
    """Records every system prompt and answers nothing usable (each step then falls back)."""

    def chat(messages):
        prompts.append(messages[0][1])
        return ""

    return function_lm(chat, model="scripted/capture")


@pytest.fixture(scope="module")
def mini_graph():
    docs = [make_document(r["title"], r["text"]) for r in json.loads((DATA / "mini_corpus.json").read_text())]
    return HippoGraphIndex.from_documents(docs, embed_model=WordBagEmbedding(), chroma_client=chromadb.EphemeralClient(),
                                          name="prompts_mini", show_progress=False)


def _texts(component) -> dict[str, str]:
    prompts = component.get_prompts()
    assert all(isinstance(p, PromptTemplate) for p in prompts.values())
    return {key: prompt.get_template() for key, prompt in prompts.items()}


def test_every_component_shows_each_steps_instructions(mini_graph):
    perspectives = {"perspectives": QueryPerspectiveGenerator.instructions}
    assert _texts(PerspectiveQueryTransform()) == perspectives
    assert _texts(RRFFusionRetriever(base_retriever=RecordingRetriever())) == perspectives
    assert _texts(ConfidenceLoopRetriever(base_retriever=RecordingRetriever())) == {
        "entity_and_gap_analyzer": EntityAndGapAnalyzer.instructions,
        "confidence_evaluator": ConfidenceEvaluator.instructions,
        "targeted_query_generator": TargetedQueryGenerator.instructions,
        "listwise_document_reranker": ListwiseDocumentReranker.instructions,
    }
    assert _texts(DSPyFactFilter()) == {"fact_filter": FactFilterSignature.instructions}
    assert _texts(mini_graph.as_retriever()) == {"fact_filter": FactFilterSignature.instructions}


def test_updated_perspective_instructions_reach_the_lm():
    prompts: list[str] = []
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), num_iterations=1, lm=capturing_lm(prompts))
    new = "Write five search queries about the magazines, each from another angle."
    retriever.update_prompts({"perspectives": PromptTemplate(new)})
    assert _texts(retriever) == {"perspectives": new}
    assert _texts(retriever.query_transform) == {"perspectives": new}  # one predictor, shared
    retriever.retrieve(QUERY)
    assert prompts and new in prompts[0] and QueryPerspectiveGenerator.instructions not in prompts[0]


def test_updated_confidence_instructions_reach_the_lm():
    prompts: list[str] = []
    retriever = ConfidenceLoopRetriever(base_retriever=RecordingRetriever(), lm=capturing_lm(prompts))
    retriever.update_prompts({"confidence_evaluator": PromptTemplate("Judge the evidence strictly."),
                              "listwise_document_reranker": "Rank by usefulness."})  # a string does too
    texts = _texts(retriever)
    assert texts["confidence_evaluator"] == "Judge the evidence strictly."
    assert texts["entity_and_gap_analyzer"] == EntityAndGapAnalyzer.instructions  # the others stay
    retriever.retrieve(QUERY)
    assert any("Judge the evidence strictly." in p for p in prompts)
    assert any("Rank by usefulness." in p for p in prompts)
    assert not any(ConfidenceEvaluator.instructions in p for p in prompts)


def test_updated_fact_filter_instructions_reach_the_lm(mini_graph):
    prompts: list[str] = []
    fact_filter = DSPyFactFilter(lm=capturing_lm(prompts))
    fact_filter.update_prompts({"fact_filter": PromptTemplate("Keep the facts about people.")})
    fact_filter.postprocess_nodes([fact_node("tsui hark", "born on", "15 february 1950", 0.4)],
                                  query_str="When was Tsui Hark born?")
    assert "Keep the facts about people." in prompts[-1] and FactFilterSignature.instructions not in prompts[-1]

    retriever = mini_graph.as_retriever(lm=capturing_lm(prompts))
    retriever.update_prompts({"fact_filter": PromptTemplate("Keep the facts about films.")})
    assert _texts(retriever.fact_filter) == {"fact_filter": "Keep the facts about films."}
    retriever.retrieve("Who directed Marty?")
    assert "Keep the facts about films." in prompts[-1]


def test_an_unknown_step_is_refused():
    with pytest.raises(KeyError, match="perspectives"):
        PerspectiveQueryTransform().update_prompts({"perspective": PromptTemplate("x")})
