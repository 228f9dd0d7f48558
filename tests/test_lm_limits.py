"""What an LM can cost the process: an answer's parse is bounded, a hung LM holds a bounded number of threads, an
LM that exits is a failure while a KeyboardInterrupt is the user's, and its errors reach log lines escaped."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import dspy
import pytest

from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
from llama_index_mhop.lm.clients import MAX_LM_CALLS, function_lm
from llama_index_mhop.lm.steps import FallbackCounter, LMStep
from tests.lm_faults import hung_lm, unbalanced_quotes_lm

QUERY = "Are Imperial River and Amaradia both located in the same country?"
ANSWER = "[[ ## answer ## ]]\nblue\n\n[[ ## completed ## ]]"
CONTROLS = {chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}


def _step(counter: FallbackCounter | None = None, timeout: float = 5.0) -> LMStep[str]:
    return LMStep("probe", dspy.Predict("question -> answer"), lambda p: p.answer, lambda: "fallback", counter,
                  timeout=timeout)


def _join_lm_threads() -> None:
    for worker in [t for t in threading.enumerate() if t.name == "mhop-lm"]:
        worker.join(timeout=10)


def test_a_long_answer_of_unbalanced_quotes_leaves_nothing_computing():
    # Unbounded, DSPy's JSON repair of this answer takes minutes of CPU, long after the step gave up waiting.
    lm = unbalanced_quotes_lm(200_000)
    transform = PerspectiveQueryTransform(lm=lm, timeout=0.5)
    facts = [fact_node("imperial river", "is located in", "florida", score=0.9),
             fact_node("amaradia", "flows through", "romania", score=0.8)]
    fact_filter = DSPyFactFilter(lm=lm, timeout=0.5)
    started = time.monotonic()
    assert 4 <= len(transform.generate(QUERY)) <= 5
    assert 4 <= len(asyncio.run(transform.agenerate(QUERY))) <= 5
    assert fact_filter.postprocess_nodes(facts, query_str=QUERY)
    assert time.monotonic() - started < 5
    assert transform.fallback_counts.total == 2 and fact_filter.fallback_counts.total == 1
    cpu = time.process_time()
    time.sleep(5)
    assert time.process_time() - cpu < 0.5  # no abandoned call is still parsing


@pytest.mark.parametrize("thread_safe", [True, False])
def test_a_hung_lm_holds_a_bounded_number_of_threads(thread_safe, caplog):
    release = threading.Event()
    lm = hung_lm(release, thread_safe=thread_safe)
    counter = FallbackCounter()
    step = _step(counter, timeout=0.05)
    bound = MAX_LM_CALLS if thread_safe else 1
    before = threading.active_count()
    try:
        with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
            durations = []
            for _ in range(40):
                started = time.monotonic()
                assert step.run({"question": "sky?"}, lm) == "fallback"
                durations.append(time.monotonic() - started)
            assert asyncio.run(step.arun({"question": "sky?"}, lm)) == "fallback"
        assert threading.active_count() - before <= bound
        assert counter["probe"] == 41
        # Once every worker is held by a hung call, later steps fall back at once, and say why.
        assert max(durations[bound:]) < 0.05
        assert caplog.text.count("still busy with") == 41 - bound
    finally:
        release.set()
        _join_lm_threads()
    assert step.run({"question": "sky?"}, function_lm(lambda messages: ANSWER)) == "blue"


def test_a_hung_thread_safe_lm_without_an_async_twin_does_not_hold_the_event_loop():
    release = threading.Event()
    lm = hung_lm(release, thread_safe=True)
    step = _step(timeout=0.05)
    before = threading.active_count()
    try:
        for _ in range(2 * MAX_LM_CALLS):
            # asyncio.run joins its executor's threads on exit: a thread left behind would block it forever.
            assert asyncio.run(step.arun({"question": "sky?"}, lm)) == "fallback"
        assert threading.active_count() - before <= MAX_LM_CALLS
    finally:
        release.set()
        _join_lm_threads()


@pytest.mark.parametrize("thread_safe", [True, False])
def test_an_lm_raising_system_exit_has_failed(thread_safe, caplog):
    def chat(messages):
        raise SystemExit(3)

    async def achat(messages):
        raise SystemExit(4)

    counter = FallbackCounter()
    step = _step(counter)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        assert step.run({"question": "sky?"}, function_lm(chat, thread_safe=thread_safe)) == "fallback"
        assert asyncio.run(step.arun({"question": "sky?"}, function_lm(chat, thread_safe=thread_safe))) == "fallback"
        native = function_lm(chat, achat, thread_safe=thread_safe)
        assert asyncio.run(step.arun({"question": "sky?"}, native)) == "fallback"
    assert counter["probe"] == 3
    assert caplog.text.count("probe: LM step failed") == 3 and "SystemExit" in caplog.text


@pytest.mark.parametrize("thread_safe", [True, False])
def test_a_keyboard_interrupt_from_the_lm_stops_the_query(thread_safe):
    answers = iter(["interrupt", "answer"])

    def chat(messages):
        if next(answers) == "interrupt":
            raise KeyboardInterrupt
        return ANSWER

    lm = function_lm(chat, thread_safe=thread_safe)
    counter = FallbackCounter()
    step = _step(counter)
    with pytest.raises(KeyboardInterrupt):
        step.run({"question": "sky?"}, lm)
    assert counter.total == 0  # not a fallback
    assert step.run({"question": "sky?"}, lm) == "blue"  # and the LM's turn was given back


def test_an_lm_error_reaches_the_log_escaped(caplog):
    def chat(messages):
        raise RuntimeError("\x1b]0;owned\x07\x1b[2J\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\ \x9b31m done")

    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        assert _step().run({"question": "sky?"}, function_lm(chat)) == "fallback"
    (record,) = [r for r in caplog.records if "LM step failed" in r.getMessage()]
    message = record.getMessage()
    assert not CONTROLS & set(message)
    assert "\\x1b]0;owned\\x07" in message


def test_openie_retries_log_the_lm_error_escaped(caplog):
    from llama_index_mhop.graph.extraction import OpenIEExtractor

    def chat(messages):
        raise RuntimeError("\x1b]0;owned\x07\x1b[2J\x9b31m")

    extractor = OpenIEExtractor(lm=function_lm(chat), backoff_seconds=0)
    with caplog.at_level(logging.DEBUG, logger="llama_index_mhop"):
        extraction = extractor.extract("Marty is a 1955 film directed by Delbert Mann.", "Marty (film)")
    assert not extraction.from_lm
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("llama_index_mhop")]
    assert sum("OpenIE attempt" in line for line in lines) == 2 and any("LM step failed" in line for line in lines)
    assert all(not CONTROLS & set(line) for line in lines)
