"""LlamaIndex's ``Settings.llm`` drives the LM steps of components built without ``lm=``/``llm=``."""

from __future__ import annotations

import logging
from typing import Any

import dspy
import pytest
from dspy.utils import DummyLM
from llama_index.core import Settings
from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from llama_index_mhop.components import RRFFusionRetriever
from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
from llama_index_mhop.lm.clients import render_fields
from llama_index_mhop.lm.steps import current_lm
from tests.recording_retriever import QUERY, RecordingRetriever

PERSPECTIVES = ["Arthur's Magazine founding year", "First for Women founding year",
                "Arthur's Magazine publisher history", "First for Women launch date",
                "magazines started in the 19th century"]


class ScriptedLLM(CustomLLM):
    """A LlamaIndex LLM answering every prompt with the same DSPy-formatted fields; records the prompts."""

    answer: dict[str, Any]
    prompts: list[str] = []
    model_name: str = "scripted-app-llm"

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name=self.model_name)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=render_fields(self.answer))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
        yield self.complete(prompt, formatted=formatted, **kwargs)


@pytest.fixture
def app_llm():
    """Sets ``Settings.llm`` for one test and puts back what was there (never LlamaIndex's lazy default)."""
    saved = Settings._llm

    def set_llm(llm):
        Settings.llm = llm
        return llm

    try:
        yield set_llm
    finally:
        Settings._llm = saved


def test_settings_llm_set_after_construction_drives_the_perspective_step(app_llm, caplog):
    transform = PerspectiveQueryTransform()  # no lm=, no llm=
    assert transform.generate(QUERY) != PERSPECTIVES  # no LM anywhere yet: the LLM-free strategy
    # A name of its own: which LM a step uses is logged once per process, whatever ran before on this worker.
    llm = app_llm(ScriptedLLM(answer={"perspectives": PERSPECTIVES}, prompts=[], model_name="set-after-construction"))
    with caplog.at_level(logging.INFO, logger="llama_index_mhop.lm.steps"):
        assert transform.generate(QUERY) == PERSPECTIVES
        transform.generate(QUERY)
    assert len(llm.prompts) == 2 and QUERY in llm.prompts[0]
    assert caplog.text.count("from LlamaIndex's Settings.llm") == 1  # which LM: logged once
    assert transform.fallback_counts.total == 0


def test_settings_llm_reaches_a_retrievers_steps_and_the_trace_says_lm(app_llm):
    llm = app_llm(ScriptedLLM(answer={"perspectives": PERSPECTIVES}, prompts=[]))
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), num_iterations=2)
    retriever.retrieve(QUERY)
    assert [it["step"] for it in retriever.last_trace["iterations"]] == ["lm", "lm"]
    assert [it["perspectives"] for it in retriever.last_trace["iterations"]] == [PERSPECTIVES] * 2
    assert len(llm.prompts) == 2


def test_settings_llm_drives_the_fact_filter(app_llm):
    facts = [fact_node("imperial river", "is located in", "florida", 0.82),
             fact_node("tsui hark", "born on", "15 february 1950", 0.40)]
    fact_filter = DSPyFactFilter()
    assert fact_filter.postprocess_nodes(facts, query_str="When was Tsui Hark born?")[0].node.metadata["subject"] == \
        "tsui hark"  # LLM-free: the fact the query mentions
    app_llm(ScriptedLLM(answer={"fact_after_filter": {"fact": [["imperial river", "is located in", "florida"]]}},
                        prompts=[]))
    kept = fact_filter.postprocess_nodes(facts, query_str="When was Tsui Hark born?")
    assert [n.node.metadata["subject"] for n in kept] == ["imperial river"]  # the LLM's choice, however odd


def test_resolution_order_lm_then_dspy_settings_then_app_llm(app_llm):
    assert current_lm() is None  # nothing set: LLM-free
    app_llm(ScriptedLLM(answer={}, prompts=[]))
    wrapped = current_lm()
    assert isinstance(wrapped, dspy.BaseLM) and current_lm() is wrapped  # wrapped once per LLM
    dspy_lm, own = DummyLM([{"a": "b"}]), DummyLM([{"a": "c"}])
    with dspy.context(lm=dspy_lm):
        assert current_lm() is dspy_lm
        assert current_lm(own) is own
    app_llm(ScriptedLLM(answer={}, prompts=[]))
    assert current_lm() is not wrapped  # another Settings.llm: wrapped afresh


def test_an_app_that_disabled_its_llm_has_none(app_llm):
    app_llm(None)  # LlamaIndex puts a MockLLM there
    assert type(Settings._llm) is MockLLM
    assert current_lm() is None


def test_lazy_openai_default_is_never_resolved():
    saved = Settings._llm
    Settings._llm = None
    try:
        assert current_lm() is None
        assert Settings._llm is None
    finally:
        Settings._llm = saved
