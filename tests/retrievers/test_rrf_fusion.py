import asyncio
import hashlib
import json

import dspy
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_mhop.components import HippoGraphConfig, RRFFusionConfig, RRFFusionRetriever
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
from llama_index_mhop.lm.clients import function_lm, render_fields
from llama_index_mhop.rules.ranking import anchored_fusion, reciprocal_rank_fusion
from tests.lm_faults import faulty_lm
from tests.recording_retriever import QUERY, RecordingRetriever


class RecordingTransform(PerspectiveQueryTransform):
    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[list[str]] = []

    def step(self, query, context=(), program=None):
        self.contexts.append([c.node.node_id for c in context])
        return super().step(query, context, program)


def _run(use_async: bool):
    base, transform = RecordingRetriever(), RecordingTransform()
    retriever = RRFFusionRetriever(base_retriever=base, query_transform=transform)
    results = asyncio.run(retriever.aretrieve(QUERY)) if use_async else retriever.retrieve(QUERY)
    return retriever, base, transform, results


def test_seed_data_flow_numbers():
    retriever, base, transform, results = _run(use_async=False)
    iterations = retriever.last_trace["iterations"]
    assert len(iterations) == 3
    # The query itself once (its own ranking, the anchor) with the first perspectives at depth 21, then 4-5
    # perspectives per iteration at depth 7, k=7 kept per call: one base call for each query the run has not
    # searched yet at that depth or deeper (a deeper search's first results answer a shallower one).
    anchor = retriever.last_trace["anchor"]
    rounds = [([QUERY, *iterations[0]["perspectives"]], 21)] + [(it["perspectives"], 7) for it in iterations[1:]]
    deepest: dict[str, int] = {}
    searched: list[str] = []
    for queries, depth in rounds:
        for query in queries:
            if deepest.get(query, 0) < depth:
                deepest[query] = depth
                searched.append(query)
    assert base.calls == searched
    assert len(base.calls) < sum(len(queries) for queries, _ in rounds)  # the repeats were not searched again
    assert anchor == [n.node.node_id for n in base._rank(QUERY)]
    assert all(4 <= len(it["perspectives"]) <= 5 for it in iterations)
    assert all(len(r) == 7 for it in iterations for r in it["rankings"])
    # These passages name no entity another passage is about: no bridge links. The pool is the anchor, then
    # the other perspective passages by RRF; top 30 carried over, its top 10 the next iteration's context.
    lists: list[list[str]] = []
    for it in iterations:
        lists.extend(it["rankings"])
        assert it["links"] == {}
        by_rrf = [i for i, _ in reciprocal_rank_fusion(lists)]
        assert it["pool"] == anchored_fusion(anchor, {}, by_rrf, top_n=30)
        assert it["context"] == it["pool"][:10] == anchor[:10]
    assert len(iterations[-1]["pool"]) == 30
    assert transform.contexts == [[], iterations[0]["context"], iterations[1]["context"]]
    # final: the same fusion over all accumulated lists, top 21, scored 1/rank
    expected = anchored_fusion(anchor, {}, [i for i, _ in reciprocal_rank_fusion(lists)], top_n=21)
    assert [r.node.node_id for r in results] == expected
    assert [r.score for r in results] == pytest.approx([1 / rank for rank in range(1, 22)])


def test_repeated_runs_and_async_agree():
    sync_ids = [(r.node.node_id, r.score) for r in _run(False)[3]]
    again = [(r.node.node_id, r.score) for r in _run(False)[3]]
    async_ids = [(r.node.node_id, r.score) for r in _run(True)[3]]
    assert sync_ids == again == async_ids


def test_every_number_is_an_argument():
    base = RecordingRetriever()
    retriever = RRFFusionRetriever(base_retriever=base, num_iterations=2, perspective_top_k=3,
                                   carry_over_top_n=8, context_top_n=4, similarity_top_k=5, rrf_k=10)
    results = retriever.retrieve(QUERY)
    trace = retriever.last_trace
    assert len(trace["iterations"]) == 2 and len(results) == 5
    assert all(len(r) == 3 for it in trace["iterations"] for r in it["rankings"])
    assert all(len(it["pool"]) <= 8 and it["context"] == it["pool"][:4] for it in trace["iterations"])
    lists = [r for it in trace["iterations"] for r in it["rankings"]]
    by_rrf = [i for i, _ in reciprocal_rank_fusion(lists, k=10)]
    assert [r.node.node_id for r in results] == anchored_fusion(trace["anchor"][:5], {}, by_rrf, top_n=5)


class BridgeRetriever(BaseRetriever):
    """The question finds the passage on Leland and a distractor; every other query finds the film first."""

    LELAND = TextNode(id_="leland", text="Leland is a town. The film Maximum Overdrive was shot in Leland.",
                      metadata={"title": "Leland"})
    RIVER = TextNode(id_="river", text="A distractor about rivers.", metadata={"title": "River"})
    FILM = TextNode(id_="film", text="Maximum Overdrive is a 1986 film.", metadata={"title": "Maximum Overdrive"})
    QUESTION = "Who directed the film that was shot in Leland?"

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        order = [self.LELAND, self.RIVER] if query_bundle.query_str == self.QUESTION else [self.FILM, self.RIVER]
        return [NodeWithScore(node=n, score=1.0) for n in order]


def test_the_hop_a_bridge_leads_to_follows_the_query_top_hit():
    retriever = RRFFusionRetriever(base_retriever=BridgeRetriever())
    results = retriever.retrieve(BridgeRetriever.QUESTION)
    # The query's own ranking is Leland, River; Leland names Maximum Overdrive in the sentence about the
    # shooting, so the film (found by the perspectives) comes right after it, above River.
    assert [r.node.node_id for r in results] == ["leland", "film", "river"]
    assert retriever.last_trace["iterations"][-1]["links"] == {"leland": ["film"]}


@pytest.mark.parametrize("kwargs", [{"num_iterations": 0}, {"perspective_top_k": 0}, {"similarity_top_k": 0},
                                    {"context_top_n": 31}, {"rrf_k": -1}, {"num_iterations": True},
                                    {"perspective_top_k": 7.5}, {"num_iteration": 2}])
def test_invalid_arguments(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RRFFusionRetriever(base_retriever=RecordingRetriever(), **kwargs)


def test_settings_given_whole_or_one_by_one_agree():
    config = RRFFusionConfig(num_iterations=2, perspective_top_k=3, carry_over_top_n=8, context_top_n=4,
                             similarity_top_k=5, rrf_k=10)
    whole = RRFFusionRetriever(base_retriever=RecordingRetriever(), config=config)
    one_by_one = RRFFusionRetriever(base_retriever=RecordingRetriever(), **config.model_dump())
    assert [r.node.node_id for r in whole.retrieve(QUERY)] == [r.node.node_id for r in one_by_one.retrieve(QUERY)]
    assert whole.program.config == one_by_one.config == config
    with pytest.raises(ValueError, match="not both"):
        RRFFusionRetriever(base_retriever=RecordingRetriever(), config=config, num_iterations=2)
    with pytest.raises(TypeError, match="RRFFusionConfig"):
        RRFFusionRetriever(base_retriever=RecordingRetriever(), config=HippoGraphConfig())


def test_from_defaults_searches_deep_enough_for_both_rankings(hotpotqa_slice_index):
    shallow = RRFFusionRetriever.from_defaults(hotpotqa_slice_index, similarity_top_k=3)
    deep = RRFFusionRetriever.from_defaults(hotpotqa_slice_index, config=RRFFusionConfig(similarity_top_k=12))
    assert (shallow.base_retriever.similarity_top_k, deep.base_retriever.similarity_top_k) == (7, 12)


def test_over_real_chroma_keeps_what_the_query_itself_finds(hotpotqa_slice, hotpotqa_slice_index, gold_titles):
    """The original query is one of the perspectives in every iteration, so fusion must not lose the gold
    passages that plain search puts in its own top 7 (the dilution the seed's flow risks)."""
    questions, _ = hotpotqa_slice
    retriever = RRFFusionRetriever.from_defaults(hotpotqa_slice_index)
    vector = hotpotqa_slice_index.as_retriever(similarity_top_k=7)
    for q in questions:
        gold = gold_titles(q)
        results = retriever.retrieve(q["question"])
        assert len({n.node.node_id for n in results}) == len(results) <= 21
        fused = [n.node.metadata["title"] for n in results]
        plain_hits = gold & {n.node.metadata["title"] for n in vector.retrieve(q["question"])}
        assert plain_hits <= set(fused), q["question"]


FAULT_QUERY = "Are Imperial River and Amaradia both located in the same country?"


def test_rrf_retriever_answers_with_faulty_lm_sync_and_async():
    for run in (lambda r: r.retrieve(FAULT_QUERY), lambda r: asyncio.run(r.aretrieve(FAULT_QUERY))):
        transform = PerspectiveQueryTransform(lm=faulty_lm(), timeout=0.5)
        retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), query_transform=transform)
        assert len(run(retriever)) == 21
        assert retriever.fallback_counts.total >= 2  # three iterations, faults in order: at least two fall back


# -- the DSPy program -----------------------------------------------------------------------------------------


def _perspective_lm():
    """Perspectives that depend on the whole prompt (demos included): the same prompt gives the same answer."""

    def chat(messages):
        digest = hashlib.sha256(json.dumps(messages).encode()).hexdigest()
        return render_fields({"perspectives": [f"Topic{int(digest[i], 16) % 7} angle {digest[i:i + 4]}"
                                               for i in range(0, 20, 4)]})

    return function_lm(chat, model="scripted/perspectives")


def test_each_iteration_is_one_lm_call_and_one_trace_entry():
    lm = _perspective_lm()
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), lm=lm)
    with dspy.context(trace=[]):
        retriever.retrieve(QUERY)
        assert len(dspy.settings.trace) == len(lm.history) == 3
    assert [it["step"] for it in retriever.last_trace["iterations"]] == ["lm", "lm", "lm"]


def test_an_lm_configured_after_construction_is_used():
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever())
    retriever.retrieve(QUERY)
    assert {it["step"] for it in retriever.last_trace["iterations"]} == {"llm_free"}
    lm = _perspective_lm()
    with dspy.context(lm=lm):
        retriever.retrieve(QUERY)
    assert {it["step"] for it in retriever.last_trace["iterations"]} == {"lm"} and len(lm.history) == 3
    assert retriever.last_trace["iterations"][0]["perspectives"][0].startswith("Topic")


def test_bootstrap_few_shot_compiles_saves_and_reloads_identically(tmp_path):
    lm = _perspective_lm()
    student = RRFFusionRetriever(base_retriever=RecordingRetriever(), lm=lm)
    trainset = [dspy.Example(query=f"Which topic links Topic{i} and Topic{i + 1}?").with_inputs("query")
                for i in range(4)]
    optimizer = dspy.BootstrapFewShot(metric=lambda example, prediction, trace=None: len(prediction.node_ids) == 21,
                                      max_bootstrapped_demos=2, max_labeled_demos=0)
    student.program.load_state(optimizer.compile(student.program, trainset=trainset).dump_state())
    assert len(student.program.perspectives.generate.demos) == 2
    path = student.save_program(tmp_path / "rrf_fusion.json")
    fresh = RRFFusionRetriever(base_retriever=RecordingRetriever(), lm=lm, program=path)
    assert fresh.program.dump_state() == student.program.dump_state()
    assert [n.node.node_id for n in fresh.retrieve(QUERY)] == [n.node.node_id for n in student.retrieve(QUERY)]
    uncompiled = RRFFusionRetriever(base_retriever=RecordingRetriever(), lm=lm)
    assert [n.node.node_id for n in uncompiled.retrieve(QUERY)] != [n.node.node_id for n in student.retrieve(QUERY)]


@pytest.mark.parametrize("kind", ["rrf_fusion", "confidence_loop", "hippo_graph"])
def test_an_unknown_setting_is_named_by_every_retriever(kind, mini_graph_documents, build_graph):
    from llama_index_mhop import ConfidenceLoopRetriever, RRFFusionRetriever

    graph = build_graph(mini_graph_documents, f"unknown_{kind}")
    make = {"rrf_fusion": lambda: RRFFusionRetriever.from_defaults(graph, top_k=5),
            "confidence_loop": lambda: ConfidenceLoopRetriever.from_defaults(graph, top_k=5),
            "hippo_graph": lambda: graph.as_retriever(top_k=5)}[kind]
    with pytest.raises(ValueError, match=r"has no setting 'top_k'; its settings: .*similarity_top_k"):
        make()
