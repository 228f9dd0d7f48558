"""ConfidenceLoopRetriever: the seed-001 flow, every LM branch with scripted answers, LLM-free quality."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time

import chromadb
import dspy
import pytest
from dspy.utils import DummyLM
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_mhop.components.confidence_loop import ConfidenceLoopRetriever
from llama_index_mhop.lm.clients import function_lm, render_fields
from llama_index_mhop.rules.confidence import (
    analyze_query,
)
from llama_index_mhop.stores.vector_index import build_vector_index
from tests.leland_corpus import PASSAGES as LELAND_PASSAGES
from tests.leland_corpus import QUERY
from tests.lm_faults import FAULTS, faulty_lm

Q1, Q2 = "Leland filming location", "film shot in 1986"

# The Leland bridge corpus among distractors.
PASSAGES = LELAND_PASSAGES + [
    (f"Distractor {i}", f"Distractor passage number {i} about rivers and towns and film festivals.")
    for i in range(26)
]
NODES = [
    TextNode(id_=f"n{i:02d}", text=text, metadata={"title": title})
    for i, (title, text) in enumerate(PASSAGES)
]


def _overlap(query: str, node: TextNode) -> int:
    words = {w.strip("?.,").lower() for w in query.split()}
    body = f"{node.metadata['title']} {node.text}".lower()
    return sum(1 for w in words if len(w) > 2 and w in body)


class RecordingRetriever(BaseRetriever):
    """Ranks the toy corpus by word overlap (ties by corpus order) and records every (query, k) it serves."""

    def __init__(self, k: int, calls: list[tuple[str, int]], delay: float = 0.0) -> None:
        self.k = k
        self.calls = calls
        self.delay = delay
        self.in_flight = 0
        self.max_in_flight = 0
        super().__init__()

    def _rank(self, query: str) -> list[NodeWithScore]:
        self.calls.append((query, self.k))
        ranked = sorted(NODES, key=lambda n: -_overlap(query, n))
        return [NodeWithScore(node=n, score=float(_overlap(query, n))) for n in ranked[: self.k]]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._rank(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(self.delay)
        self.in_flight -= 1
        return self._rank(query_bundle.query_str)


def make_retriever(
    calls: list[tuple[str, int]], delay: float = 0.0, shared: dict | None = None, **kwargs
) -> ConfidenceLoopRetriever:
    """A confidence loop over the toy corpus; ``shared`` receives the per-k recording retrievers."""
    shared = {} if shared is None else shared

    def factory(k: int) -> RecordingRetriever:
        shared.setdefault(k, RecordingRetriever(k, calls, delay))
        return shared[k]

    return ConfidenceLoopRetriever(retriever_factory=factory, **kwargs)


ANALYZER = {"entity_chains": "Leland -> film shot there in 1986 -> director", "queries": f"{Q1}\n{Q2}"}
RANKING = {"ranking": "1, 0, 2"}


def lm_script(confidence: dict, *rest: dict) -> list[dict]:
    return [ANALYZER, confidence, *rest]


# ----------------------------------------------------------------------------------------- the LM branches


def test_confidence_90_skips_round_2_with_exact_calls_and_k():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(lm_script({"confidence": "90", "missing_information": "none"}, RANKING))
    retriever = make_retriever(calls, lm=lm)
    nodes = retriever.retrieve(QUERY)
    assert calls == [(QUERY, 23), (Q1, 23), (Q2, 23)]
    trace = retriever.last_trace
    assert trace["round2"] is False and trace["confidence"] == 90
    assert [r["queries"] for r in trace["rounds"]] == [[QUERY, Q1, Q2]]
    assert trace["rounds"][0]["retrieved"] == [23, 23, 23]
    assert trace["steps"] == {
        "entity_and_gap_analyzer": "lm",
        "confidence_evaluator": "lm",
        "listwise_document_reranker": "lm",
    }
    assert trace["entity_chains"] == ["Leland -> film shot there in 1986 -> director"]
    assert retriever.fallback_counts.total == 0
    # The LM's ranking 1, 0, 2 is applied to the pool, the rest follows; 21 nodes, reciprocal-rank scores.
    pool = trace["pool_ids"]
    assert [n.node.node_id for n in nodes[:3]] == [pool[1], pool[0], pool[2]]
    assert len(nodes) == 21 and nodes[0].score == 1.0 and nodes[1].score == 0.5
    json.dumps(trace)  # JSON-serialisable


def test_confidence_50_runs_round_2_with_the_gap_queries():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        lm_script(
            {"confidence": "50", "missing_information": "the director of Maximum Overdrive"},
            {"queries": "Maximum Overdrive director\nStephen King films"},
            RANKING,
        )
    )
    retriever = make_retriever(calls, lm=lm)
    retriever.retrieve(QUERY)
    assert calls == [
        (QUERY, 23),
        (Q1, 23),
        (Q2, 23),
        ("Maximum Overdrive director", 15),
        ("Stephen King films", 15),
    ]
    trace = retriever.last_trace
    assert trace["round2"] is True
    assert trace["rounds"][1] == {
        "round": 2,
        "k": 15,
        "queries": ["Maximum Overdrive director", "Stephen King films"],
        "retrieved": [15, 15],
        "new_passages": [0, 0],
    }
    assert trace["gaps"][0]["text"] == "the director of Maximum Overdrive"


def test_threshold_and_ks_are_constructor_arguments():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        lm_script({"confidence": "90", "missing_information": ""}, {"queries": "extra query"}, RANKING)
    )
    retriever = make_retriever(
        calls, lm=lm, confidence_threshold=95, round1_k=5, round2_k=3, similarity_top_k=4
    )
    nodes = retriever.retrieve(QUERY)
    assert calls == [(QUERY, 5), (Q1, 5), (Q2, 5), ("extra query", 3)]
    assert len(nodes) == 4


def test_plain_base_retriever_results_are_cut_to_each_rounds_k():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        lm_script({"confidence": "10", "missing_information": "x"}, {"queries": "gap query"}, RANKING)
    )
    retriever = ConfidenceLoopRetriever(RecordingRetriever(30, calls), lm=lm)
    retriever.retrieve(QUERY)
    assert len(calls) == 4 and {k for _, k in calls} == {30}
    assert [r["retrieved"] for r in retriever.last_trace["rounds"]] == [[23, 23, 23], [15]]


@pytest.mark.parametrize(
    ("answer", "expected", "round2"),
    [("85%", 85, False), ("high", 85, False), ("eighty", 80, False), ("0.85", 85, False), ("79", 79, True)],
)
def test_confidence_answers_in_text(answer, expected, round2):
    calls: list[tuple[str, int]] = []
    script = lm_script({"confidence": answer, "missing_information": "none"})
    script += [{"queries": "gap query"}, RANKING] if round2 else [RANKING]
    retriever = make_retriever(calls, lm=DummyLM(script))
    retriever.retrieve(QUERY)
    assert retriever.last_trace["confidence"] == expected
    assert retriever.last_trace["round2"] is round2
    assert retriever.fallback_counts.total == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"confidence": "150", "missing_information": "none"},
        {"confidence": "no idea", "missing_information": "none"},
        {"missing_information": "a gap but no confidence"},
    ],
)
def test_unusable_confidence_falls_back_to_the_llm_free_assessment(bad, caplog):
    # Threshold 0: no round 2, so the script is analyzer, confidence, ranking whatever the fallback's value.
    retriever = make_retriever([], lm=DummyLM(lm_script(bad, RANKING)), confidence_threshold=0)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        nodes = retriever.retrieve(QUERY)
    trace = retriever.last_trace
    assert retriever.fallback_counts.as_dict() == {"confidence_evaluator": 1}
    assert trace["steps"]["confidence_evaluator"] == "fallback"
    assert trace["fallbacks"] == ["confidence_evaluator"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "llama_index_mhop.lm.steps"]
    assert len(warnings) == 1 and warnings[0].startswith("confidence_evaluator: LM step failed")
    assert 0 <= trace["confidence"] <= 100 and nodes


def test_ranking_with_out_of_range_repeated_and_missing_indices():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        lm_script({"confidence": "90", "missing_information": "none"}, {"ranking": "5, 5, 999, -1, 2"})
    )
    retriever = make_retriever(calls, lm=lm)
    nodes = retriever.retrieve(QUERY)
    trace = retriever.last_trace
    pool, prior = trace["pool_ids"], trace["llm_free_order"]
    expected = [pool[5], pool[2]] + [pool[i] for i in prior if i not in (5, 2)]
    assert [n.node.node_id for n in nodes] == expected[:21]
    assert retriever.fallback_counts.total == 0


def test_ranking_without_valid_indices_falls_back_to_the_llm_free_order():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        lm_script({"confidence": "90", "missing_information": "none"}, {"ranking": "I would rank them well"})
    )
    retriever = make_retriever(calls, lm=lm)
    nodes = retriever.retrieve(QUERY)
    trace = retriever.last_trace
    assert [n.node.node_id for n in nodes] == [trace["pool_ids"][i] for i in trace["llm_free_order"]][:21]
    assert retriever.fallback_counts.as_dict() == {"listwise_document_reranker": 1}


def test_too_many_generated_queries_are_cut_to_max_round1_queries():
    calls: list[tuple[str, int]] = []
    analyzer = {"entity_chains": "x", "queries": "a one\nb two\nc three\nd four\ne five"}
    lm = DummyLM([analyzer, {"confidence": "90", "missing_information": ""}, RANKING])
    retriever = make_retriever(calls, lm=lm)
    retriever.retrieve(QUERY)
    assert [q for q, _ in calls] == [QUERY, "a one", "b two", "c three"]


@pytest.mark.parametrize("queries", ["", "none", "[1, 2]", '["", "  "]', QUERY])
def test_empty_or_non_string_queries_fall_back_to_the_llm_free_analyzer(queries):
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        [{"entity_chains": "x", "queries": queries}, {"confidence": "90", "missing_information": ""}, RANKING]
    )
    retriever = make_retriever(calls, lm=lm)
    retriever.retrieve(QUERY)
    expected = [QUERY, *analyze_query(QUERY).queries]
    assert [q for q, _ in calls] == expected
    assert retriever.fallback_counts.as_dict() == {"entity_and_gap_analyzer": 1}


def test_empty_targeted_queries_fall_back_to_gap_queries():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(
        lm_script(
            {"confidence": "40", "missing_information": "the director of the film"},
            {"queries": "   "},
            RANKING,
        )
    )
    retriever = make_retriever(calls, lm=lm)
    retriever.retrieve(QUERY)
    round2 = retriever.last_trace["rounds"][1]["queries"]
    # The LM's gap (plain text) joined with the query's relation words comes first.
    assert round2[0] == "the director of the film directed film shot"
    assert len(round2) == 2 and all(k == 15 for q, k in calls[3:])
    assert retriever.fallback_counts.as_dict() == {"targeted_query_generator": 1}


class RaisingLLM(MockLLM):
    def chat(self, messages, **kwargs):
        raise RuntimeError("LM is down")

    async def achat(self, messages, **kwargs):
        raise RuntimeError("LM is down")


class SlowLLM(MockLLM):
    def chat(self, messages, **kwargs):
        time.sleep(1.0)
        return super().chat(messages, **kwargs)

    async def achat(self, messages, **kwargs):
        await asyncio.sleep(1.0)
        return await super().achat(messages, **kwargs)


@pytest.mark.parametrize("llm", [RaisingLLM(), SlowLLM()], ids=["raises", "times_out"])
def test_an_lm_that_raises_or_times_out_still_answers_llm_free(llm, caplog):
    calls: list[tuple[str, int]] = []
    retriever = make_retriever(calls, llm=llm, lm_timeout=0.2)
    baseline = make_retriever([])
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        nodes = retriever.retrieve(QUERY)
    expected = baseline.retrieve(QUERY)
    assert [n.node.node_id for n in nodes] == [n.node.node_id for n in expected]
    steps = [
        "entity_and_gap_analyzer",
        "confidence_evaluator",
        "targeted_query_generator",
        "listwise_document_reranker",
    ]
    counted = retriever.fallback_counts.as_dict()
    assert set(counted) <= set(steps) and counted["entity_and_gap_analyzer"] == 1
    warnings = [r for r in caplog.records if r.name == "llama_index_mhop.lm.steps" and r.levelno == logging.WARNING]
    assert len(warnings) == retriever.fallback_counts.total


async def test_an_lm_that_raises_on_the_async_path_still_answers():
    retriever = make_retriever([], llm=RaisingLLM())
    nodes = await retriever.aretrieve(QUERY)
    assert nodes and retriever.fallback_counts["entity_and_gap_analyzer"] == 1


# ---------------------------------------------------------------------------------------- the LLM-free loop


def test_llm_free_default_uses_no_lm_and_follows_the_bridge():
    calls: list[tuple[str, int]] = []
    retriever = make_retriever(calls)
    nodes = retriever.retrieve(QUERY)
    trace = retriever.last_trace
    assert set(trace["steps"].values()) == {"llm_free"} and retriever.fallback_counts.total == 0
    assert calls[0] == (QUERY, 23) and calls[1] == ("Leland directed film shot", 23)
    titles = [n.node.metadata["title"] for n in nodes]
    assert titles[:3] == ["Leland, North Carolina", "Maximum Overdrive", "Stephen King"]


async def test_round_queries_run_concurrently_on_the_async_path():
    calls: list[tuple[str, int]] = []
    lm = DummyLM(lm_script({"confidence": "10", "missing_information": "x"}, {"queries": "g1\ng2"}, RANKING))
    shared: dict[int, RecordingRetriever] = {}
    retriever = make_retriever(calls, delay=0.05, shared=shared, lm=lm)
    await retriever.aretrieve(QUERY)
    # Every query of a round was in flight at once: the round's searches were gathered, not awaited one by
    # one.
    assert shared[23].max_in_flight == 3 and shared[15].max_in_flight == 2
    assert sorted(calls) == sorted([(QUERY, 23), (Q1, 23), (Q2, 23), ("g1", 15), ("g2", 15)])


async def test_sync_and_async_agree_with_a_scripted_lm():
    script = lm_script(
        {"confidence": "50", "missing_information": "director"}, {"queries": "Maximum Overdrive"}, RANKING
    )
    sync_nodes = make_retriever([], lm=DummyLM(list(script))).retrieve(QUERY)
    async_nodes = await make_retriever([], lm=DummyLM(list(script))).aretrieve(QUERY)
    assert [(n.node.node_id, n.score) for n in sync_nodes] == [(n.node.node_id, n.score) for n in async_nodes]


def test_the_dspy_module_holds_four_predictors_and_runs_the_loop():
    retriever = make_retriever([])
    names = [name for name, _ in retriever.program.named_predictors()]
    assert names == ["analyzer", "evaluator", "query_generator", "reranker"]
    prediction = retriever.program(query=QUERY)
    assert prediction.node_ids == [n.node.node_id for n in retriever.retrieve(QUERY)]
    assert prediction.titles[0] == "Leland, North Carolina" and prediction.trace["query"] == QUERY


async def test_the_dspy_module_runs_the_loop_async():
    retriever = make_retriever([])
    prediction = await retriever.program.acall(query=QUERY)
    assert prediction.node_ids == [n.node.node_id for n in retriever.retrieve(QUERY)]


# ------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"similarity_top_k": 0}, "similarity_top_k"),
        ({"round1_k": 0}, "round1_k"),
        ({"round2_k": -1}, "round2_k"),
        ({"max_round1_queries": 0}, "max_round1_queries"),
        ({"confidence_threshold": 101}, "confidence_threshold"),
        ({"lm_timeout": 0}, "lm_timeout"),
        ({"original_query_weight": -1.0}, "original_query_weight"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_retriever([], **kwargs)


def test_exactly_one_base_retriever_source():
    with pytest.raises(ValueError, match="exactly one"):
        ConfidenceLoopRetriever()
    with pytest.raises(ValueError, match="exactly one"):
        ConfidenceLoopRetriever(
            RecordingRetriever(5, []), retriever_factory=lambda k: RecordingRetriever(k, [])
        )
    with pytest.raises(ValueError, match="as_retriever"):
        ConfidenceLoopRetriever.from_defaults(index=object())


# ------------------------------------------------------------------------------- real HotpotQA, real Chroma


def _titles(nodes: list[NodeWithScore]) -> list[str]:
    return list(dict.fromkeys(n.node.metadata["title"] for n in nodes))


def test_llm_free_recall_is_not_below_plain_vector_on_the_slice(hotpotqa_slice, hotpotqa_slice_index, gold_titles):
    questions, _ = hotpotqa_slice
    vector = hotpotqa_slice_index.as_retriever(similarity_top_k=21)
    loop = ConfidenceLoopRetriever.from_defaults(index=hotpotqa_slice_index)
    recall = {"vector": {5: 0.0, 21: 0.0}, "loop": {5: 0.0, 21: 0.0}}
    for question in questions:
        gold = gold_titles(question)
        for name, retriever in (("vector", vector), ("loop", loop)):
            titles = _titles(retriever.retrieve(question["question"]))
            for k in (5, 21):
                recall[name][k] += len(gold & set(titles[:k])) / len(gold)
    assert loop.fallback_counts.total == 0
    assert recall["loop"][5] >= recall["vector"][5]
    assert recall["loop"][21] >= recall["vector"][21]


def test_gaps_name_the_real_bridge_entity(hotpotqa_questions, hotpotqa_slice_index):
    question = next(
        q for q in hotpotqa_questions if q["question"].startswith("Grace Krilanovich's first novel")
    )
    loop = ConfidenceLoopRetriever.from_defaults(index=hotpotqa_slice_index)
    nodes = loop.retrieve(question["question"])
    trace = loop.last_trace
    bridge_entities = [e for g in trace["gaps"] if g["kind"] == "bridge" for e in g["entities"]]
    assert "Two Dollar Radio" in bridge_entities  # the publisher, named only by the author's passage
    assert trace["round2"] is True
    # The query's own top hit stays first. The round-2 lookup names every entity of the gap, the one the
    # question's relation names first ("first novel The Orange Eats Creeps", no passage here) and the publisher,
    # whose passage is found by its title and linked right after the author's.
    assert _titles(nodes)[0] == "Grace Krilanovich"
    assert trace["rounds"][1]["queries"][0] == "The Orange Eats Creeps, Two Dollar Radio"
    assert _titles(nodes)[1] == "Two Dollar Radio"


async def test_sync_and_async_agree_on_real_questions(hotpotqa_slice, hotpotqa_slice_index):
    questions, _ = hotpotqa_slice
    loop = ConfidenceLoopRetriever.from_defaults(index=hotpotqa_slice_index)
    for question in questions[:3]:
        sync_nodes = loop.retrieve(question["question"])
        async_nodes = await loop.aretrieve(question["question"])
        assert [(n.node.node_id, n.score) for n in sync_nodes] == [
            (n.node.node_id, n.score) for n in async_nodes
        ]


def test_from_defaults_over_an_ephemeral_chroma_index(embed_model):
    from llama_index_mhop.stores.corpus import make_document

    docs = [make_document(title, text) for title, text in PASSAGES[:6]]
    index = build_vector_index(
        docs,
        chroma_client=chromadb.EphemeralClient(),
        collection_name="cl_test",
        embed_model=embed_model,
        show_progress=False,
    )
    loop = ConfidenceLoopRetriever.from_defaults(index=index, similarity_top_k=3, round1_k=4, round2_k=2)
    nodes = loop.retrieve(QUERY)
    assert len(nodes) == 3
    assert {"Leland, North Carolina", "Maximum Overdrive"} <= set(_titles(nodes))


FAULT_TIMEOUT = 0.5


# -- the confidence loop: every step of a failed LM call answers as the LLM-free loop does --------------------------


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "too_many"])
def test_confidence_loop_falls_back_to_the_llm_free_loop(fault, caplog):
    expected = [n.node.node_id for n in make_retriever([]).retrieve(QUERY)]
    retriever = make_retriever([], lm=faulty_lm([fault]), lm_timeout=FAULT_TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        assert [n.node.node_id for n in retriever.retrieve(QUERY)] == expected
    steps = retriever.last_trace["steps"]
    assert set(steps.values()) == {"fallback"}
    assert retriever.fallback_counts.total == len(steps) == caplog.text.count("using the LLM-free strategy")
    asynchronous = make_retriever([], lm=faulty_lm([fault]), lm_timeout=FAULT_TIMEOUT)
    assert [n.node.node_id for n in asyncio.run(asynchronous.aretrieve(QUERY))] == expected
    assert asynchronous.fallback_counts.total == len(steps)


def test_confidence_loop_survives_ten_times_too_many_items():
    retriever = make_retriever([], lm=faulty_lm(["too_many"]), lm_timeout=FAULT_TIMEOUT)
    nodes = retriever.retrieve(QUERY)
    assert len(nodes) == 21 and len({n.node.node_id for n in nodes}) == 21
    trace = retriever.last_trace
    assert all(len(r["queries"]) <= retriever.config.max_round1_queries + 1 for r in trace["rounds"])
    assert retriever.fallback_counts.total == list(trace["steps"].values()).count("fallback") >= 1


# -- the DSPy program: the caller's context, the LM at call time, compile, save and load ------------------------


def test_every_lm_call_is_one_trace_entry_in_the_callers_context():
    lm = DummyLM(lm_script({"confidence": "50", "missing_information": "director"}, {"queries": "King films"},
                           RANKING))
    retriever = make_retriever([], lm=lm)
    with dspy.context(trace=[]):
        retriever.retrieve(QUERY)
        trace = dspy.settings.trace
    assert [type(entry[0].signature).__name__ for entry in trace] == [type(p.signature).__name__ for p in (
        retriever.program.analyzer, retriever.program.evaluator, retriever.program.query_generator,
        retriever.program.reranker)]
    assert len(trace) == len(lm.history) == 4


async def test_the_async_path_records_the_trace_too():
    lm = DummyLM(lm_script({"confidence": "90", "missing_information": "none"}, RANKING))
    with dspy.context(trace=[]):
        await make_retriever([], lm=lm).aretrieve(QUERY)
        assert len(dspy.settings.trace) == len(lm.history) == 3


def test_an_lm_configured_after_construction_is_used():
    retriever = make_retriever([])
    retriever.retrieve(QUERY)
    assert set(retriever.last_trace["steps"].values()) == {"llm_free"}
    lm = DummyLM(lm_script({"confidence": "90", "missing_information": "none"}, RANKING))
    with dspy.context(lm=lm):
        nodes = retriever.retrieve(QUERY)
    assert set(retriever.last_trace["steps"].values()) == {"lm"} and len(lm.history) == 3
    pool = retriever.last_trace["pool_ids"]
    assert [n.node.node_id for n in nodes[:2]] == [pool[1], pool[0]]  # the LM's ranking "1, 0, 2"


def test_a_failed_step_says_why_in_one_short_line(caplog):
    answer = "not a number " + "x" * 2000
    lm = DummyLM(lm_script({"confidence": answer, "missing_information": "none"}, RANKING, RANKING))
    retriever = make_retriever([], lm=lm)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        retriever.retrieve(QUERY)
    reason = retriever.last_trace["step_reasons"]["confidence_evaluator"]
    assert retriever.last_trace["steps"]["confidence_evaluator"] == "fallback"
    assert reason.startswith("LMOutputError") and len(reason) <= 200 and "\n" not in reason
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and len(warning[0]) < 300


def _single_entry_lm(delay: float):
    """An LM that fails if two calls are inside it at once (as llama.cpp crashes), answering after ``delay``."""
    inside = threading.Lock()
    answers = {"entity_chains": ANALYZER, "confidence": {"confidence": "90", "missing_information": "none"},
               "ranking": RANKING}

    def chat(messages):
        if not inside.acquire(blocking=False):
            raise RuntimeError("entered twice at once")
        try:
            time.sleep(delay)
            system = messages[0][1]
            name = next(name for name in answers if f"`{name}`" in system.split("Your output fields are:")[1])
            return render_fields(answers[name])
        finally:
            inside.release()

    return function_lm(chat, model="scripted/single-entry")


async def test_an_lm_that_is_not_thread_safe_is_entered_once_and_waits_are_not_timed():
    lm = _single_entry_lm(delay=0.2)
    retrievers = [make_retriever([], lm=lm, lm_timeout=2.0) for _ in range(4)]
    # 4 queries x 3 steps = 12 calls of 0.2 s: most calls wait longer than the 2 s timeout for their turn.
    await asyncio.gather(*(r.aretrieve(QUERY) for r in retrievers), *(asyncio.to_thread(r.retrieve, QUERY)
                                                                      for r in retrievers))
    for retriever in retrievers:
        assert set(retriever.last_trace["steps"].values()) == {"lm"}, retriever.last_trace["step_reasons"]
        assert retriever.fallback_counts.total == 0


def test_a_hung_lm_in_one_component_does_not_starve_another():
    hung = function_lm(lambda messages: time.sleep(30) or "", model="scripted/hung", thread_safe=True)
    stuck = make_retriever([], lm=hung, lm_timeout=0.1)
    for _ in range(3):
        stuck.retrieve(QUERY)  # 4 steps each (the LLM-free confidence runs round 2): 12 calls hang on
    assert stuck.fallback_counts.total == 12
    healthy = make_retriever([], lm=DummyLM(lm_script({"confidence": "90", "missing_information": "none"},
                                                      RANKING)), lm_timeout=5.0)
    healthy.retrieve(QUERY)
    assert healthy.fallback_counts.total == 0 and set(healthy.last_trace["steps"].values()) == {"lm"}


def _prompt_keyed_lm():
    """A scripted LM whose ranking depends on the whole prompt (demos included): same prompt, same answer."""

    def chat(messages):
        system = messages[0][1]
        fields = system.split("Your output fields are:")[1]
        if "`entity_chains`" in fields:
            return render_fields(ANALYZER)
        if "`confidence`" in fields:
            return render_fields({"confidence": "90", "missing_information": "none"})
        digest = hashlib.sha256(json.dumps(messages).encode()).digest()
        return render_fields({"ranking": ", ".join(str(b % 5) for b in digest[:5])})

    return function_lm(chat, model="scripted/prompt-keyed")


def test_bootstrap_few_shot_compiles_saves_and_reloads_identically(tmp_path):
    lm = _prompt_keyed_lm()
    student = make_retriever([], lm=lm)
    trainset = [dspy.Example(query=q, gold="n00").with_inputs("query") for q in (
        QUERY, "Which film was shot in Leland?", "Who wrote Maximum Overdrive?", "Where is Brunswick County?")]

    def metric(example, prediction, trace=None):
        return example.gold in prediction.node_ids[:21]

    optimizer = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=2, max_labeled_demos=0)
    compiled = optimizer.compile(student.program, trainset=trainset)
    assert all(len(p.demos) == 2 for p in compiled.predictors()[:2]) and len(compiled.reranker.demos) == 2
    student.program.load_state(compiled.dump_state())
    path = student.save_program(tmp_path / "confidence_loop.json")
    saved = json.loads(path.read_text())
    assert len(saved["reranker"]["demos"]) == 2

    fresh = make_retriever([], lm=lm, program=path)
    assert fresh.program.dump_state() == student.program.dump_state()
    queries = [QUERY, "Which film was shot in Leland?"]
    assert [[n.node.node_id for n in fresh.retrieve(q)] for q in queries] == [
        [n.node.node_id for n in student.retrieve(q)] for q in queries]
    # The demos are in the prompts: an uncompiled loop asks the reranker something else.
    assert [n.node.node_id for n in make_retriever([], lm=lm).retrieve(QUERY)] != [
        n.node.node_id for n in student.retrieve(QUERY)]


def test_program_must_be_a_saved_confidence_loop(tmp_path):
    with pytest.raises(FileNotFoundError):
        make_retriever([], program=tmp_path / "missing.json")
    with pytest.raises(TypeError, match="ConfidenceLoopModule"):
        make_retriever([], program=dspy.Predict("question -> answer"))
