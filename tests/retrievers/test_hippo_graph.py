"""HippoGraphRetriever: HippoRAG 2's query flow, its reset vector, fallbacks, traces, and recall on HotpotQA."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import chromadb
import dspy
import networkx as nx
import numpy as np
import pytest
from dspy.utils import DummyLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor

from llama_index_mhop.components.fact_filter import DSPyFactFilter
from llama_index_mhop.components.hippo_graph import HippoGraphRetriever
from llama_index_mhop.graph.index import EmptyIndexError, HippoGraphIndex
from llama_index_mhop.graph.state_load import load_retrieval_state
from llama_index_mhop.graph.walk import WalkSettings
from llama_index_mhop.graph.walk.exact import best_first
from llama_index_mhop.lm.clients import function_lm, render_fields
from llama_index_mhop.stores.corpus import make_document, stable_id
from tests.word_bag import WordBagEmbedding

DATA = Path(__file__).parents[1] / "graph" / "data"
# Facts and passages searched through Chroma's HNSW index whatever their number, its nearest 20 exact.
HNSW_EVERYWHERE = WalkSettings(hnsw_min_facts=1, hnsw_min_passages=1, hnsw_top_n=20)


class KeepOnly(BaseNodePostprocessor):
    """A fact filter that keeps the fact nodes whose text is listed (none: drops everything)."""

    texts: list[str] = []

    def _postprocess_nodes(self, nodes, query_bundle=None):
        return [n for n in nodes if n.node.get_content() in self.texts]


@pytest.fixture(scope="module")
def mini_index():
    docs = [make_document(r["title"], r["text"]) for r in json.loads((DATA / "mini_corpus.json").read_text())]
    return HippoGraphIndex.from_documents(docs, embed_model=WordBagEmbedding(), chroma_client=chromadb.EphemeralClient(),
                                          name="ret_mini", show_progress=False)


def test_reset_vector_and_pagerank_match_hipporag_by_hand(mini_index):
    query = "Who directed Marty?"
    fact = "marty directed by delbert mann"
    # Without the evidence chain the reset is HippoRAG 2's, computed here by hand.
    retriever = mini_index.as_retriever(similarity_top_k=5, fact_filter=KeepOnly(texts=[fact]),
                                        query_entity_weight=0.0, chain_hops=0)
    results = retriever.retrieve(query)
    trace = retriever.last_trace
    assert trace["mode"] == "ppr"
    assert [f"{f['subject']} {f['predicate']} {f['object']}" for f in trace["kept_facts"]] == [fact]
    score = trace["kept_facts"][0]["score"]

    state = mini_index.retrieval_state()
    q = np.asarray(WordBagEmbedding()._vector(query), dtype=np.float32)
    q /= np.linalg.norm(q)
    dense = state.passage_vectors.matrix @ q
    dense = (dense - dense.min()) / (dense.max() - dense.min())
    # HippoRAG 2: fact score / passages containing the entity; dense passage scores * 0.05.
    expected = {stable_id("entity", "marty"): score / 2, stable_id("entity", "delbert mann"): score / 3}
    for i, pid in enumerate(state.passage_ids):
        expected[pid] = dense[i] * 0.05
    reset_entities = {e["id"]: e["weight"] for e in trace["reset_top"] if e["kind"] == "entity"}
    assert reset_entities == pytest.approx(
        {stable_id("entity", "marty"): score / 2, stable_id("entity", "delbert mann"): score / 3}
    )

    # An independent PageRank (networkx) over the same weighted graph and reset gives the same passage scores.
    personalization = {node: expected.get(node, 0.0) for node in mini_index.graph.graph.nodes}
    reference = nx.pagerank(mini_index.graph.graph, alpha=0.5, personalization=personalization, weight="weight",
                            tol=1e-12, max_iter=1000)
    by_id = {r.node.node_id: r.score for r in results}
    for pid, value in by_id.items():
        assert value == pytest.approx(reference[pid], abs=1e-8)
    ranked = sorted(state.passage_ids, key=lambda p: -reference[p])
    assert [r.node.node_id for r in results] == ranked[:5]
    assert results[0].node.metadata["title"] == "Marty (film)"


def test_no_surviving_fact_means_dense_retrieval(mini_index):
    retriever = mini_index.as_retriever(similarity_top_k=3, fact_filter=KeepOnly(texts=[]),
                                        query_entity_weight=0.0)
    results = retriever.retrieve("Where is Oahu?")
    assert retriever.last_trace["mode"] == "dense"
    state = mini_index.retrieval_state()
    q = np.asarray(WordBagEmbedding()._vector("Where is Oahu?"), dtype=np.float32)
    dense = state.passage_vectors.matrix @ (q / np.linalg.norm(q))
    order = sorted(range(len(dense)), key=lambda i: (-dense[i], i))[:3]
    assert [r.node.node_id for r in results] == [state.passage_ids[i] for i in order]
    assert [r.score for r in results] == pytest.approx([float(dense[i]) for i in order])


def test_query_entities_seed_the_walk(mini_index):
    retriever = mini_index.as_retriever(similarity_top_k=2, fact_filter=KeepOnly(texts=[]), first_page=0)
    results = retriever.retrieve("Which film did Delbert Mann make in 1955?")
    trace = retriever.last_trace
    assert trace["mode"] == "ppr"
    assert trace["query_entities"] == ["delbert mann", "1955"]
    # "1955" is named by one passage, "delbert mann" by three: in the walk's order the film comes first, then its
    # director's page.
    assert [r.node.metadata["title"] for r in results] == ["Marty (film)", "Delbert Mann"]
    # The first page puts the passage about what the question names (the director) first.
    paged = mini_index.as_retriever(similarity_top_k=2, fact_filter=KeepOnly(texts=[]))
    assert [r.node.metadata["title"] for r in paged.retrieve("Which film did Delbert Mann make in 1955?")] == [
        "Delbert Mann", "Marty (film)"]
    assert paged.last_trace["first_page"]["lead"] == [results[1].node.node_id]


# A three-hop chain (firm -> founder -> birthplace) among passages that share more words with the question.
CHAIN_DOCS = [
    ("Berktro Ropeworks", "Berktro Ropeworks is a rope-making firm headquartered in Grotistead and founded by Noor "
                          "Vonstur in 1912."),
    ("Noor Vonstur", "Noor Vonstur was a historian born in 1880 in Netindton. She wrote a history of rope making."),
    ("Netindton", "Netindton is a cathedral town in Theimdreia, on the banks of the Grasal River."),
    ("Grotistead", "Grotistead is a port town whose rope makers founded a guild."),
    ("Provinces", "Each province kept a register of where its firm founders were born."),
    ("Rope Guilds", "A founder of a rope firm was often born in the province of the guild that trained him."),
    ("Ada Stuwos", "Ada Stuwos founded a rope school and was born in a northern province."),
    ("Theimdreia", "Theimdreia is a hill province."),
]
CHAIN_QUESTION = "In which province was the founder of Berktro Ropeworks born?"


@pytest.fixture(scope="module")
def chain_index():
    return HippoGraphIndex.from_documents([make_document(t, x) for t, x in CHAIN_DOCS], embed_model=WordBagEmbedding(),
                                          chroma_client=chromadb.EphemeralClient(), name="chain", show_progress=False)


def _titles(retriever, query):
    return [r.node.metadata["title"] for r in retriever.retrieve(query)]


def test_the_evidence_chain_lifts_the_later_hops(chain_index):
    without = _titles(chain_index.as_retriever(similarity_top_k=8, chain_hops=0), CHAIN_QUESTION)
    retriever = chain_index.as_retriever(similarity_top_k=8)
    chained = _titles(retriever, CHAIN_QUESTION)
    # The birthplace resembles the question least: below a passage about rope guilds without the chain, with the
    # whole chain above every passage that only resembles the question.
    assert without.index("Netindton") > without.index("Rope Guilds")
    assert set(chained[:4]) == {"Berktro Ropeworks", "Noor Vonstur", "Netindton", "Grotistead"}
    assert chained.index("Netindton") < without.index("Netindton")
    steps = [(s["hop"], s["from"], s["entity"], s["to"], s["matched"]) for s in retriever.last_trace["chain"]]
    assert steps[:2] == [(1, "Berktro Ropeworks", "Noor Vonstur", "Noor Vonstur", ["found"]),
                         (2, "Noor Vonstur", "Netindton", "Netindton", ["born"])]
    assert retriever.last_trace["chain"][1]["sentence"] == "Noor Vonstur was a historian born in 1880 in Netindton."
    weights = [s["weight"] for s in retriever.last_trace["chain"]]
    assert weights == sorted(weights, reverse=True) and 0 < weights[-1] < weights[0] <= 1
    # The passages the chain leads to are seeded: they are in the reset's top.
    seeded = {e["title"] for e in retriever.last_trace["reset_top"] if e["kind"] == "passage"}
    assert {"Noor Vonstur", "Netindton"} <= seeded


@pytest.mark.parametrize("off", [{"chain_hops": 0}, {"chain_weight": 0.0}])
def test_the_chain_switched_off_ranks_as_the_walk_without_it(chain_index, mini_index, off):
    for index, query in ((chain_index, CHAIN_QUESTION), (mini_index, "Where was the director of Marty born?")):
        reference = index.as_retriever(similarity_top_k=8, chain_hops=0)
        expected = [(r.node.node_id, r.score) for r in reference.retrieve(query)]
        retriever = index.as_retriever(similarity_top_k=8, **off)
        assert [(r.node.node_id, r.score) for r in retriever.retrieve(query)] == expected
        assert retriever.last_trace["chain"] == []
        assert {k: v for k, v in retriever.last_trace.items() if k != "elapsed_ms"} == {
            k: v for k, v in reference.last_trace.items() if k != "elapsed_ms"}


def test_trace_is_json_serialisable(mini_index):
    retriever = mini_index.as_retriever(similarity_top_k=3)
    retriever.retrieve("Who directed Lover Come Back?")
    trace = json.loads(json.dumps(retriever.last_trace))
    assert {"query", "candidate_facts", "kept_facts", "reset_top", "top_entities", "results", "mode"} <= set(trace)
    assert len(trace["candidate_facts"]) == 5
    assert len(trace["results"]) == 3


def test_a_served_node_changed_by_its_caller_leaves_the_next_query_unchanged(mini_index):
    """A state builds each passage's node once; every query gets its own copy, as from a vector store."""
    retriever = mini_index.as_retriever(similarity_top_k=3)
    first = retriever.retrieve("Who directed Marty?")
    served = {n.node.node_id: (n.node.get_content(), dict(n.node.metadata)) for n in first}
    for result in first:
        result.node.metadata["title"] = "changed"
        result.node.metadata["note"] = "added by a postprocessor"
        result.node.set_content("changed")
    again = retriever.retrieve("Who directed Marty?")
    assert {n.node.node_id: (n.node.get_content(), dict(n.node.metadata)) for n in again} == served
    assert all(a.node is not b.node for a, b in zip(first, again, strict=True))


def test_lm_fact_filter_choice_seeds_the_walk(mini_index):
    query = "Who directed Lover Come Back?"
    llm_free = mini_index.as_retriever(similarity_top_k=3)
    llm_free.retrieve(query)
    assert llm_free.last_trace["steps"] == {"fact_filter": "llm_free"}
    second = llm_free.last_trace["candidate_facts"][1]
    triple = [second["subject"], second["predicate"], second["object"]]
    lm = DummyLM([{"fact_after_filter": json.dumps({"fact": [triple]})}])
    retriever = mini_index.as_retriever(similarity_top_k=3)
    with dspy.context(lm=lm, trace=[]):  # an LM set after construction is used, and the call is traced
        retriever.retrieve(query)
        assert len(dspy.settings.trace) == len(lm.history) == 1
    kept = retriever.last_trace["kept_facts"]
    assert [[k["subject"], k["predicate"], k["object"]] for k in kept] == [triple]
    assert retriever.fallback_counts.total == 0
    assert retriever.last_trace["steps"] == {"fact_filter": "lm"}
    garbage = mini_index.as_retriever(similarity_top_k=3, lm=DummyLM([{"fact_after_filter": "not facts"}]))
    garbage.retrieve(query)
    assert garbage.last_trace["steps"] == {"fact_filter": "fallback"} and garbage.fallback_counts.total == 1
    assert garbage.last_trace["step_reasons"]["fact_filter"]


@pytest.mark.parametrize("bad, error", [("", ValueError), ("   ", ValueError), (None, TypeError), (42, TypeError)])
def test_bad_queries_are_refused(mini_index, bad, error):
    retriever = mini_index.as_retriever()
    with pytest.raises(error):
        retriever.retrieve(bad)
    with pytest.raises(error):
        asyncio.run(retriever.aretrieve(bad))


@pytest.mark.parametrize("argument", [{"similarity_top_k": 0}, {"linking_top_k": 0}, {"damping": 1.0},
                                      {"passage_node_weight": -1.0}, {"dense_seed_top_k": -1},
                                      {"fact_top_n": True}, {"query_entity_weight": float("nan")},
                                      {"dense_seed_weight": float("inf")}, {"linking_topk": 3}])
def test_bad_arguments_are_refused(mini_index, argument):
    with pytest.raises(ValueError, match=next(iter(argument))):
        mini_index.as_retriever(**argument)


def test_empty_index_is_a_clear_error():
    index = HippoGraphIndex(chroma_client=chromadb.EphemeralClient(), embed_model=WordBagEmbedding(),
                            name="ret_empty")
    with pytest.raises(EmptyIndexError, match="holds no passage"):
        index.as_retriever().retrieve("anything?")


def test_as_retriever_passes_arguments(mini_index):
    retriever = mini_index.as_retriever(similarity_top_k=7, linking_top_k=3, damping=0.6)
    assert isinstance(retriever, HippoGraphRetriever)
    assert (retriever.config.similarity_top_k, retriever.config.linking_top_k, retriever.config.damping) == (7, 3, 0.6)
    assert isinstance(retriever.fact_filter, DSPyFactFilter) and retriever.fact_filter.top_n == 4


# ---------------------------------------------------------------------- real data: the 20-question HotpotQA slice


@pytest.fixture(scope="module")
def slice_index(hotpotqa_slice, embed_model):
    _, docs = hotpotqa_slice
    return HippoGraphIndex.from_documents(docs, embed_model=embed_model, chroma_client=chromadb.EphemeralClient(),
                                          name="ret_slice", show_progress=False)


def recall_at(retriever, questions, k: int, gold_titles) -> float:
    shares = []
    for question in questions:
        titles = [n.node.metadata["title"] for n in retriever.retrieve(question["question"])[:k]]
        gold = gold_titles(question)
        shares.append(len(gold & set(titles)) / len(gold))
    return 100 * sum(shares) / len(shares)


def test_recall_beats_plain_vector_retrieval(slice_index, hotpotqa_slice, hotpotqa_slice_index, gold_titles):
    questions, _ = hotpotqa_slice
    hippo = recall_at(slice_index.as_retriever(similarity_top_k=5), questions, 5, gold_titles)
    vector = recall_at(hotpotqa_slice_index.as_retriever(similarity_top_k=5), questions, 5, gold_titles)
    assert hippo > vector, (hippo, vector)
    assert hippo >= 90.0


def test_the_first_page_lifts_recall_at_2_and_keeps_the_top_5(slice_index, hotpotqa_slice, gold_titles):
    questions, _ = hotpotqa_slice
    paged = slice_index.as_retriever(similarity_top_k=5)
    walk_order = slice_index.as_retriever(similarity_top_k=5, first_page=0)
    for question in questions:
        ranked = paged.retrieve(question["question"])
        walked = walk_order.retrieve(question["question"])
        assert {n.node.node_id for n in ranked} == {n.node.node_id for n in walked}
        assert [n.score for n in ranked] == [n.score for n in walked]  # each place keeps its score
        assert paged.last_trace["first_page"]["lead"] == [
            n.node.node_id for n in walked if n.node.node_id in paged.last_trace["first_page"]["lead"]]
    assert recall_at(paged, questions, 2, gold_titles) > recall_at(walk_order, questions, 2, gold_titles)


def test_sync_and_async_agree(slice_index, hotpotqa_slice):
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=5)

    async def run_all():
        return await asyncio.gather(*(retriever.aretrieve(q["question"]) for q in questions[:5]))

    async_results = asyncio.run(run_all())
    for question, got in zip(questions[:5], async_results, strict=True):
        expected = retriever.retrieve(question["question"])
        assert [n.node.node_id for n in got] == [n.node.node_id for n in expected]
        assert [n.score for n in got] == pytest.approx([n.score for n in expected], rel=1e-6)


def test_persisted_slice_index_ranks_identically(slice_index, hotpotqa_slice, embed_model, tmp_path):
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=5)
    before = [[(n.node.node_id, n.score) for n in retriever.retrieve(q["question"])] for q in questions[:5]]
    slice_index.persist(tmp_path)
    loaded = HippoGraphIndex.from_persist_dir(tmp_path, embed_model=embed_model).as_retriever(similarity_top_k=5)
    after = [[(n.node.node_id, n.score) for n in loaded.retrieve(q["question"])] for q in questions[:5]]
    assert [[i for i, _ in ranking] for ranking in after] == [[i for i, _ in ranking] for ranking in before]
    # Scores agree to float32 precision: Chroma may hand back its cosine-space copy of a vector (re-normalised,
    # last bits changed) from a persistent store and the vector as written from an in-memory one.
    for got, expected in zip(after, before, strict=True):
        assert [s for _, s in got] == pytest.approx([s for _, s in expected], rel=1e-6)


def test_a_fact_filter_timeout_lowered_after_construction_is_used(mini_index):
    """The program reads the fact filter's runner at each query: a slow LM answers in time, then, once the filter's
    timeout is lowered, falls back on both paths (a DSPy copy of the program too)."""
    query = "Who directed Lover Come Back?"
    idle = threading.Event()
    idle.set()

    def slow_chat(messages):
        idle.clear()
        try:
            time.sleep(0.5)
            return render_fields({"fact_after_filter": {"fact": []}})
        finally:
            idle.set()

    retriever = mini_index.as_retriever(similarity_top_k=3, lm=function_lm(slow_chat, model="scripted/slow"))
    retriever.retrieve(query)
    assert retriever.last_trace["steps"] == {"fact_filter": "lm"}
    retriever.fact_filter.timeout = 0.05
    retriever.retrieve(query)
    assert retriever.last_trace["steps"] == {"fact_filter": "fallback"}
    assert "0.05" in retriever.last_trace["step_reasons"]["fact_filter"]
    assert idle.wait(timeout=5)  # the abandoned call returns before the next query takes the LM's one turn
    asyncio.run(retriever.aretrieve(query))
    assert retriever.last_trace["steps"] == {"fact_filter": "fallback"}
    assert idle.wait(timeout=5)
    assert retriever.program.deepcopy()(query=query).trace["steps"] == {"fact_filter": "fallback"}
    assert idle.wait(timeout=5)
    assert retriever.fallback_counts["fact_filter"] == 3


def test_the_program_is_the_query_and_its_copies_share_the_graph(mini_index):
    """retrieve runs the program; a DSPy copy (as optimizers make) answers alike from the same graph, and a custom
    fact filter runs on both paths (postprocess_nodes, apostprocess_nodes)."""
    query = "Who directed Marty?"
    retriever = mini_index.as_retriever(similarity_top_k=5, fact_filter=KeepOnly(texts=["marty directed by delbert mann"]))
    expected = [(n.node.node_id, n.score) for n in retriever.retrieve(query)]
    copied = retriever.program.deepcopy()
    assert copied is not retriever.program and copied._parts is retriever.program._parts
    prediction = copied(query=query)
    assert [(n.node.node_id, n.score) for n in prediction.nodes] == expected
    assert prediction.trace["kept_facts"] == retriever.last_trace["kept_facts"] != []
    assert [(n.node.node_id, n.score) for n in asyncio.run(retriever.aretrieve(query))] == expected


def test_a_program_needs_the_dspy_fact_filter(mini_index, tmp_path):
    path = mini_index.as_retriever().save_program(tmp_path / "hippo.json")
    with pytest.raises(ValueError, match="needs a DSPyFactFilter"):
        mini_index.as_retriever(fact_filter=KeepOnly(texts=[]), program=path)
    assert json.loads(path.read_text())["filter"]["demos"] == []


def test_hnsw_search_agrees_with_exact_scoring_on_the_top_21(slice_index, hotpotqa_slice, gold_titles, monkeypatch):
    """Past the size threshold, facts and passages come from Chroma's HNSW index (the nearest 20 of about 200
    passages here, so that most of the ranking rests on the approximation); the top 21 stay nearly the same."""
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=21)
    exact = [[n.node.node_id for n in retriever.retrieve(q["question"])] for q in questions]
    exact_recall = recall_at(retriever, questions, 5, gold_titles)
    state = load_retrieval_state(slice_index.graph, slice_index.stores, retriever.config.damping, HNSW_EVERYWHERE)
    assert state.passage_vectors.method == state.fact_vectors.method == "hnsw"
    monkeypatch.setattr(slice_index, "retrieval_state", lambda damping: state)
    approx = [[n.node.node_id for n in retriever.retrieve(q["question"])] for q in questions]
    overlap = [len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact, strict=True)]
    assert approx != exact  # the approximation is in use
    assert sum(overlap) / len(overlap) >= 0.9, overlap
    assert recall_at(retriever, questions, 5, gold_titles) >= exact_recall - 5.0


def _large_graph_state(index, damping, **settings):
    """The retrieval state a graph past ``push_min_nodes`` gets: PageRank by push, the dense share solved once."""
    state = load_retrieval_state(index.graph, index.stores, damping, WalkSettings(push_min_nodes=1, **settings))
    assert state.walk.pagerank.method == "push" and state.walk.affine is not None
    return state


def _rankings(retriever, questions):
    return [[(n.node.node_id, n.score) for n in retriever.retrieve(q["question"])] for q in questions]


@pytest.mark.parametrize("settings", [{}, {"dense_seed_top_k": 3, "dense_seed_weight": 0.5}])
def test_the_solved_dense_share_ranks_as_the_exact_walk(slice_index, hotpotqa_slice, monkeypatch, settings):
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=21, **settings)
    assert slice_index.retrieval_state(damping=retriever.config.damping).walk.affine is None  # small: exact walk
    exact = _rankings(retriever, questions)
    state = _large_graph_state(slice_index, retriever.config.damping)
    monkeypatch.setattr(slice_index, "retrieval_state", lambda damping: state)
    solved = _rankings(retriever, questions)
    assert retriever.last_trace["mode"] == "ppr"
    for ours, reference in zip(solved, exact, strict=True):
        assert {i for i, _ in ours} == {i for i, _ in reference}
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in reference], rtol=1e-3)


def test_int8_estimates_rank_and_trace_as_the_float32_products(slice_index, hotpotqa_slice, monkeypatch):
    """Facts, passages and the walk's basis read through int8 estimates: the same rankings, scores and traces."""
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=21, dense_seed_top_k=3, dense_seed_weight=0.5)
    float32 = _large_graph_state(slice_index, retriever.config.damping, int8_min_rows=10**9)
    int8 = _large_graph_state(slice_index, retriever.config.damping, int8_min_rows=1)
    assert int8.fact_vectors.products.method == int8.walk.affine.basis_products.method == "int8"
    assert float32.fact_vectors.products.method == "exact"
    results = {}
    for name, state in (("float32", float32), ("int8", int8)):
        monkeypatch.setattr(slice_index, "retrieval_state", lambda damping, state=state: state)
        results[name] = [(_rankings(retriever, [q]), retriever.last_trace) for q in questions]
    for (ranking, trace), (reference, reference_trace) in zip(results["int8"], results["float32"], strict=True):
        assert ranking == reference
        for key in ("candidate_facts", "kept_facts", "reset_top", "top_entities", "mode"):
            assert trace[key] == reference_trace[key]


@pytest.mark.parametrize("settings", [{}, {"dense_seed_top_k": 3, "dense_seed_weight": 0.5}])
def test_the_traced_reset_top_is_the_top_of_the_whole_reset(slice_index, hotpotqa_slice, monkeypatch, settings):
    """The trace reads the reset's top from the seeds and the best passages alone: the same entries, weights and
    order as the whole reset gives."""
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=21, **settings)
    walk = slice_index.retrieval_state(damping=retriever.config.damping).walk
    traced = walk.reset_top
    compared = 0

    def compare(seeds, dense, passage_weight, count):
        nonlocal compared
        got = traced(seeds, dense, passage_weight, count)
        reset = walk.reset(seeds, dense, passage_weight)
        assert got == [(j, float(reset[j])) for j in best_first(reset, count).tolist() if reset[j] > 0]
        compared += 1
        return got

    monkeypatch.setattr(walk, "reset_top", compare)
    for question in questions:
        retriever.retrieve(question["question"])
    assert compared > len(questions) // 2


def test_the_solved_uniform_share_ranks_as_the_exact_walk_over_hnsw_scores(slice_index, hotpotqa_slice, monkeypatch):
    """Past hnsw_min_passages the far passages share one dense score: seeds and one solved column replace the walk."""
    questions, _ = hotpotqa_slice
    retriever = slice_index.as_retriever(similarity_top_k=21)
    hnsw = load_retrieval_state(slice_index.graph, slice_index.stores, retriever.config.damping, HNSW_EVERYWHERE)
    monkeypatch.setattr(slice_index, "retrieval_state", lambda damping: hnsw)
    exact = _rankings(retriever, questions)
    state = _large_graph_state(slice_index, retriever.config.damping, hnsw_min_facts=1, hnsw_min_passages=1,
                               hnsw_top_n=20)
    assert state.walk.affine.basis is None
    monkeypatch.setattr(slice_index, "retrieval_state", lambda damping: state)
    solved = _rankings(retriever, questions)
    for ours, reference in zip(solved, exact, strict=True):
        # the seeds' push stops once its bounds make the top 21 and its order certain: the same passages in the
        # same order, with scores from a coarser push
        assert [i for i, _ in ours] == [i for i, _ in reference]
        np.testing.assert_allclose([s for _, s in ours], [s for _, s in reference], rtol=1e-2)
