"""The HippoRAG 2 graph: exact nodes, edges and weights on a fixture corpus, synonymy, removal, JSON round trip."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import chromadb
import numpy as np
import pytest

from llama_index_mhop.graph.extraction import entity_key
from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.graph.knowledge_graph import KnowledgeGraph
from llama_index_mhop.stores.corpus import make_document, stable_id
from tests.word_bag import WordBagEmbedding

DATA = Path(__file__).parent / "data"


def fixture_documents():
    return [make_document(r["title"], r["text"]) for r in json.loads((DATA / "mini_corpus.json").read_text())]


def eid(key: str) -> str:
    return stable_id("entity", key)


@pytest.fixture(scope="module")
def mini_index():
    index = HippoGraphIndex.from_documents(
        fixture_documents(), embed_model=WordBagEmbedding(), chroma_client=chromadb.EphemeralClient(),
        name="kg_mini", show_progress=False,
    )
    yield index
    for collection in (index.passages_collection, index.entities_collection, index.facts_collection):
        index.chroma_client.delete_collection(collection.name)


def test_fixture_vocabulary_has_no_hash_collision():
    words = set()
    for doc in fixture_documents():
        words.update(re.findall(r"[a-z0-9]+", (doc.metadata["title"] + " " + doc.text).lower()))
    slots = {int(hashlib.md5(w.encode()).hexdigest(), 16) % 4096 for w in words}
    assert len(slots) == len(words)


def test_fixture_graph_nodes(mini_index):
    graph = mini_index.graph
    entities = {
        "lover come back", "1961", "delbert mann", "doris day", "rock hudson", "delbert martin mann", "american",
        "marty", "academy award", "1955", "laie hawaii", "laie", "oahu", "hukilau song",
    }
    assert set(graph.entity_names.values()) == entities
    exported = graph.to_networkx()
    assert {exported.nodes[e]["name"] for e in graph.entity_names} == entities
    assert {graph.node_kind(e) for e in graph.entity_names} == {"entity"}
    titles = {r.title for r in graph.passages.values()}
    assert titles == {"Lover Come Back (1961 film)", "Delbert Mann", "Doris Day", "Marty (film)", "Laie, Hawaii"}
    assert graph.num_nodes == exported.number_of_nodes() == 5 + 14
    assert graph.num_facts == 14


def test_fixture_graph_edges_and_weights(mini_index):
    graph = mini_index.graph
    by_title = {r.title: pid for pid, r in graph.passages.items()}
    lcb, dm, dd, marty, laie = (by_title[t] for t in (
        "Lover Come Back (1961 film)", "Delbert Mann", "Doris Day", "Marty (film)", "Laie, Hawaii"))
    # (u, v): (facts, synonymy, passage). Title edges weigh 10, other passage edges 1; a fact edge counts the
    # distinct facts linking the pair; the only synonym pair above 0.8 is 2 / sqrt(2 * 3).
    expected = {
        (lcb, eid("lover come back")): (0, 0.0, 10.0), (lcb, eid("1961")): (0, 0.0, 1.0),
        (lcb, eid("delbert mann")): (0, 0.0, 1.0), (lcb, eid("doris day")): (0, 0.0, 1.0),
        (lcb, eid("rock hudson")): (0, 0.0, 1.0),
        (dm, eid("delbert mann")): (0, 0.0, 10.0), (dm, eid("delbert martin mann")): (0, 0.0, 1.0),
        (dm, eid("american")): (0, 0.0, 1.0), (dm, eid("marty")): (0, 0.0, 1.0),
        (dm, eid("academy award")): (0, 0.0, 1.0),
        (dd, eid("doris day")): (0, 0.0, 10.0), (dd, eid("american")): (0, 0.0, 1.0),
        (dd, eid("lover come back")): (0, 0.0, 1.0), (dd, eid("rock hudson")): (0, 0.0, 1.0),
        (marty, eid("marty")): (0, 0.0, 10.0), (marty, eid("1955")): (0, 0.0, 1.0),
        (marty, eid("delbert mann")): (0, 0.0, 1.0),
        (laie, eid("laie hawaii")): (0, 0.0, 10.0), (laie, eid("laie")): (0, 0.0, 10.0),
        (laie, eid("oahu")): (0, 0.0, 1.0), (laie, eid("hukilau song")): (0, 0.0, 1.0),
        (eid("lover come back"), eid("1961")): (1, 0.0, 0.0),
        (eid("lover come back"), eid("delbert mann")): (1, 0.0, 0.0),
        (eid("lover come back"), eid("doris day")): (2, 0.0, 0.0),  # "stars" and "starred in"
        (eid("lover come back"), eid("rock hudson")): (1, 0.0, 0.0),
        (eid("delbert mann"), eid("american")): (1, 0.0, 0.0),
        (eid("delbert mann"), eid("marty")): (2, 0.0, 0.0),  # "his film" and "directed by"
        (eid("delbert mann"), eid("academy award")): (1, 0.0, 0.0),
        (eid("doris day"), eid("american")): (1, 0.0, 0.0),
        (eid("doris day"), eid("rock hudson")): (1, 0.0, 0.0),
        (eid("marty"), eid("1955")): (1, 0.0, 0.0),
        (eid("laie hawaii"), eid("oahu")): (1, 0.0, 0.0),
        (eid("hukilau song"), eid("laie")): (1, 0.0, 0.0),
        (eid("delbert mann"), eid("delbert martin mann")): (0, round(2 / np.sqrt(6), 6), 0.0),
    }
    got = {}
    for u, v, data in graph.to_networkx().edges(data=True):
        key = (u, v) if (u, v) in expected else (v, u)
        got[key] = (data["facts"], data["synonymy"], data["passage"])
        assert data["weight"] == pytest.approx(data["facts"] + data["synonymy"] + data["passage"])
    assert set(got) == set(expected)
    for key, value in expected.items():
        assert got[key][0] == value[0] and got[key][2] == value[2], key
        assert got[key][1] == pytest.approx(value[1], abs=1e-6), key


def test_fixture_facts_are_the_extracted_triples(mini_index):
    graph = mini_index.graph
    triples = {(graph.entity_names[s], p, graph.entity_names[o]) for s, p, o in graph.facts.values()}
    assert ("lover come back", "directed by", "delbert mann") in triples
    assert ("marty", "directed by", "delbert mann") in triples
    assert ("hukilau song", "written about", "laie") in triples
    assert ("laie hawaii", "is a town on", "oahu") in triples
    # Fact ids are the ids fact_node() gives the same triple.
    for fact_id, (s, p, o) in graph.facts.items():
        assert fact_id == stable_id("fact", graph.entity_names[s], p, graph.entity_names[o])


def test_entity_passage_counts(mini_index):
    graph = mini_index.graph
    assert len(graph.entity_passages[eid("delbert mann")]) == 3
    assert len(graph.entity_passages[eid("american")]) == 2
    assert len(graph.entity_passages[eid("oahu")]) == 1


# ---------------------------------------------------------------------- unit behaviour with hand-made vectors


def small_graph(**kwargs) -> KnowledgeGraph:
    graph = KnowledgeGraph(**kwargs)
    names = {"a": "alpha river", "b": "alpha rivers", "c": "beta town", "d": "1999"}
    graph.add_passage("p1", {k: v for k, v in names.items() if k in "abd"}, {"f1": ("a", "flows by", "d")},
                      title_entities=["a"])
    graph.add_passage("p2", {k: v for k, v in names.items() if k in "bc"}, {"f2": ("c", "lies on", "b")},
                      title_entities=["c"])
    return graph


VECTORS = {
    "a": [1.0, 0.0, 0.0],
    "b": [0.9, np.sqrt(1 - 0.81), 0.0],  # cos(a, b) = 0.9
    "c": [0.0, 0.0, 1.0],
    "d": [1.0, 0.0, 0.0],  # identical to a, but a year gets no synonymy edge
}


def matrix(graph: KnowledgeGraph):
    ids = sorted(graph.entity_names)
    return ids, np.array([VECTORS[i] for i in ids])


def test_synonymy_edges_threshold_and_letters():
    graph = small_graph()
    assert graph.stale_synonyms == {"a", "b", "c", "d"}
    edges = graph.update_synonymy(*matrix(graph))
    assert edges == 1
    assert graph.edge("a", "b").synonymy == pytest.approx(0.9)
    assert graph.edge("a", "d").synonymy == 0.0  # the fact edge only: a year gets no synonym
    assert graph.edge("a", "d").weight == 1.0
    assert graph.stale_synonyms == set()


def test_synonymy_top_k_caps_neighbours():
    graph = KnowledgeGraph(synonymy_top_k=1)
    graph.add_passage("p", {"x": "xx one", "y": "xx two", "z": "xx three"}, {})
    ids = ["x", "y", "z"]
    vectors = np.array([[1.0, 0.0], [0.95, np.sqrt(1 - 0.95**2)], [0.9, -np.sqrt(1 - 0.81)]])
    graph.update_synonymy(ids, vectors)
    # x's nearest is y (0.95); y's nearest is x; z's nearest is x (0.9): edges x-y and x-z, not y-z.
    assert graph.synonyms["x"] == [("y", pytest.approx(0.95))]
    assert graph.edge("x", "y") is not None and graph.edge("x", "z") is not None
    assert graph.edge("y", "z") is None


def test_remove_passage_drops_unsupported_entities_and_facts():
    graph = small_graph()
    graph.update_synonymy(*matrix(graph))
    removed_entities, removed_facts = graph.remove_passage("p1")
    assert sorted(removed_entities) == ["a", "d"]
    assert removed_facts == ["f1"]
    assert set(graph.entity_names) == {"b", "c"}
    assert set(graph.node_order()) == {"p2", "b", "c"} and graph.num_nodes == 3
    assert "a" not in graph.synonyms and all(e != "a" for e, _ in graph.synonyms.get("b", []))
    with pytest.raises(KeyError, match="not in the graph"):
        graph.remove_passage("p1")


def test_shared_fact_survives_removal_of_one_supporter():
    graph = KnowledgeGraph()
    graph.add_passage("p1", {"a": "ann", "b": "bob"}, {"f": ("a", "knows", "b")})
    graph.add_passage("p2", {"a": "ann", "b": "bob"}, {"f": ("a", "knows", "b")})
    assert graph.edge("a", "b").facts == 1  # one distinct fact, however many passages state it
    assert graph.remove_passage("p1") == ([], [])
    assert graph.edge("a", "b").facts == 1


def test_incremental_synonymy_equals_full_build():
    incremental = KnowledgeGraph()
    incremental.add_passage("p1", {"a": "alpha river", "d": "1999"}, {})
    ids, vectors = matrix(incremental)
    incremental.update_synonymy(ids, vectors)
    incremental.add_passage("p2", {"b": "alpha rivers", "c": "beta town"}, {})
    incremental.update_synonymy(*matrix(incremental))
    full = KnowledgeGraph()
    full.add_passage("p1", {"a": "alpha river", "d": "1999"}, {})
    full.add_passage("p2", {"b": "alpha rivers", "c": "beta town"}, {})
    full.update_synonymy(*matrix(full))
    assert incremental.edge_list() == full.edge_list()
    assert incremental.synonyms == full.synonyms


def test_json_round_trip_is_exact():
    graph = small_graph()
    graph.update_synonymy(*matrix(graph))
    data = json.loads(json.dumps(graph.to_dict()))
    assert data["format_version"] == 1
    again = KnowledgeGraph.from_dict(data)
    assert again.edge_list() == graph.edge_list()
    assert again.passages == graph.passages
    assert again.facts == graph.facts
    assert again.synonyms == graph.synonyms
    assert again.title_edge_weight == graph.title_edge_weight
    assert again.version == graph.version


def test_unknown_format_version_is_refused():
    data = small_graph().to_dict()
    data["format_version"] = 99
    with pytest.raises(ValueError, match="format version 99"):
        KnowledgeGraph.from_dict(data)


def test_version_bumps_and_pagerank_cache():
    graph = small_graph()
    before = graph.version
    ppr = graph.pagerank_graph()
    assert graph.pagerank_graph() is ppr  # cached for this version
    graph.add_passage("p3", {"c": "beta town"}, {})
    assert graph.version == before + 1
    assert graph.pagerank_graph() is not ppr
    assert graph.pagerank_graph().nodes == graph.node_order()


def test_bad_input_is_refused():
    graph = small_graph()
    with pytest.raises(ValueError, match="already in the graph"):
        graph.add_passage("p1", {}, {})
    with pytest.raises(ValueError, match="not among the passage's entities"):
        graph.add_passage("p9", {"a": "alpha river"}, {"f9": ("a", "x", "zz")})
    with pytest.raises(ValueError, match="exactly the graph's"):
        graph.update_synonymy(["a"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="title_edge_weight"):
        KnowledgeGraph(title_edge_weight=0)


def test_entity_key_matches_title_mentions():
    assert entity_key("Delbert Mann's") == entity_key("Delbert Mann") == "delbert mann"


def clustered_graph(seed: int, passages: int = 30, top_k: int = 3) -> tuple[KnowledgeGraph, dict[str, np.ndarray]]:
    """Passages naming entities whose vectors sit in a few tight clusters: full lists, many merges."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(4, 8))
    vectors = {f"e{i:02d}": centres[i % 4] + rng.normal(scale=0.15, size=8) for i in range(48)}
    graph = KnowledgeGraph(synonymy_top_k=top_k, synonymy_threshold=0.8)
    for p in range(passages):
        named = sorted(rng.choice(sorted(vectors), size=3, replace=False).tolist())
        graph.add_passage(f"p{p:02d}", {e: f"name {e}" for e in named}, {f"f{p}": (named[0], "rel", named[1])})
    return graph, vectors


def refresh(graph: KnowledgeGraph, vectors: dict[str, np.ndarray], by_search: bool) -> None:
    ids = sorted(graph.entity_names)
    if not by_search:
        graph.update_synonymy(ids, np.array([vectors[e] for e in ids]))
        return
    unit = {e: vectors[e] / np.linalg.norm(vectors[e]) for e in ids}

    def search(queries: list[str]) -> list[list[tuple[str, float]]]:
        return [sorted(((e, float(unit[q] @ unit[e])) for e in ids), key=lambda hit: -hit[1])[:6] for q in queries]

    graph.update_synonymy_by_search(search)


@pytest.mark.parametrize("by_search", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synonymy_applied_in_small_batches_equals_one_pass(monkeypatch, seed, by_search):
    from llama_index_mhop.graph import synonym_lists

    graphs = []
    for batch in (1, 3, 10**6):
        monkeypatch.setattr(synonym_lists, "_APPLY_BATCH", batch)
        graph, vectors = clustered_graph(seed)
        refresh(graph, vectors, by_search)
        graph.remove_passages(["p03", "p04", "p17"])
        graph.add_passage("p99", {"e00": "name e00", "e47": "name e47"}, {})
        refresh(graph, vectors, by_search)
        graphs.append(graph)
    assert sum(len(lst) for lst in graphs[0].synonyms.values()) > 40  # the clusters give lists to merge
    for graph in graphs[1:]:
        assert graph.synonyms == graphs[0].synonyms
        assert graph.edge_list() == graphs[0].edge_list()
    graphs[0].check_edges()


@pytest.mark.parametrize("seed", [0, 1])
def test_removing_passages_together_equals_one_at_a_time(seed):
    together, vectors = clustered_graph(seed)
    apart, _ = clustered_graph(seed)
    for graph in (together, apart):
        refresh(graph, vectors, by_search=False)
    gone = ["p01", "p05", "p06", "p11", "p20", "p21", "p29"]
    entities, facts = together.remove_passages(gone)
    removed = [apart.remove_passage(p) for p in gone]
    assert entities == [e for pair in removed for e in pair[0]] and entities
    assert facts == [f for pair in removed for f in pair[1]]
    assert together.synonyms == apart.synonyms
    assert together.edge_list() == apart.edge_list()
    assert together.stale_synonyms == apart.stale_synonyms
    assert all(e not in together.entity_names for e in entities)
    assert not any(e in entities for lst in together.synonyms.values() for e in lst.ids)
    together.check_edges()
    # after the stale lists are recomputed, the graph is the one built from the remaining passages
    fresh, _ = clustered_graph(seed)
    fresh.remove_passages(gone)
    for graph in (together, fresh):
        refresh(graph, vectors, by_search=False)
    assert together.edge_list() == fresh.edge_list()


def test_removing_an_unknown_passage_keeps_the_ones_before_it_removed():
    graph, vectors = clustered_graph(0)
    refresh(graph, vectors, by_search=False)
    version = graph.version
    with pytest.raises(KeyError, match="'nope' is not in the graph"):
        graph.remove_passages(["p00", "nope", "p01"])
    assert "p00" not in graph.passages and "p01" in graph.passages and graph.version > version
    graph.check_edges()
    with pytest.raises(KeyError):
        graph.remove_passages(["nope"])
