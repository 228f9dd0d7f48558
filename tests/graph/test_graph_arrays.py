"""The graph in arrays: PageRank identical to the networkx form, .npy persistence memory-mapped, churn exactness."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.graph_arrays import EdgeStore, SynonymList
from llama_index_mhop.graph.graph_files import load_graph_tables
from llama_index_mhop.graph.knowledge_graph import KnowledgeGraph
from tests.graph.walk_reference import from_networkx

NAMES = ["alpha river", "alpha rivers", "beta town", "beta towns", "gamma", "delta co", "1999", "epsilon"]
RNG = np.random.default_rng(7)
BASE = RNG.normal(size=(4, 6))
# Pairs of near-duplicate names get near-duplicate vectors, so synonymy edges form and top-k lists fill up.
VECTORS = {f"e{i}": BASE[i // 2] + 0.3 * RNG.normal(size=6) for i in range(len(NAMES))}
PASSAGES = [  # (entities, facts as (subject, object) index pairs, title entity)
    ([0, 2, 6], [(0, 2), (0, 6)], 0),
    ([1, 3], [(3, 1)], 3),
    ([2, 4, 5], [(4, 5), (2, 4)], 4),
    ([0, 1, 7], [(0, 1), (7, 0)], 7),
    ([5, 6, 3], [(5, 3)], 5),
    ([4, 7, 2], [(4, 7), (2, 4)], 2),
]


def add(graph: KnowledgeGraph, i: int) -> None:
    entities, facts, title = PASSAGES[i]
    graph.add_passage(
        f"p{i}", {f"e{e}": NAMES[e] for e in entities},
        {f"f{s}-{o}": (f"e{s}", "links", f"e{o}") for s, o in facts}, title_entities=[f"e{title}"],
    )


def synonymy(graph: KnowledgeGraph) -> None:
    ids = sorted(graph.entity_names)
    graph.update_synonymy(ids, np.array([VECTORS[e] for e in ids]).reshape(len(ids), 6))


def reset_for(graph: KnowledgeGraph) -> np.ndarray:
    reset = np.linspace(1.0, 2.0, graph.num_nodes)
    reset[::3] = 0.0
    reset[0] = 1.0
    return reset


def built(passages, **kwargs) -> KnowledgeGraph:
    graph = KnowledgeGraph(**kwargs)
    for i in passages:
        add(graph, i)
    synonymy(graph)
    return graph


def test_pagerank_equals_the_networkx_form_bit_for_bit():
    graph = built(range(6), synonymy_threshold=0.5)
    assert any(s for _, _, _, s, _ in graph.edge_list())
    ours = graph.pagerank_graph()
    exported = from_networkx(graph.to_networkx(), nodelist=graph.node_order())
    reset = reset_for(graph)
    assert np.array_equal(ours.run(reset), exported.run(reset))
    assert (ours.transition != exported.transition).nnz == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    operations=st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=1, max_size=25),
    top_k=st.sampled_from([1, 2, 100]),
    compact_every=st.sampled_from([1, 4, 1 << 20]),
)
def test_any_insert_remove_sequence_equals_a_fresh_build(operations, top_k, compact_every):
    graph = KnowledgeGraph(synonymy_threshold=0.5, synonymy_top_k=top_k)
    graph._edges.compact_every = compact_every
    for i, refresh in operations:
        if f"p{i}" in graph.passages:
            graph.remove_passage(f"p{i}")
        else:
            add(graph, i)
        if refresh and graph.num_entities:
            synonymy(graph)
    remaining = sorted(int(p[1:]) for p in graph.passages)
    if not remaining:
        assert graph.num_nodes == graph.num_edges == 0
        return
    synonymy(graph)
    fresh = built(remaining, synonymy_threshold=0.5, synonymy_top_k=top_k)
    assert graph.edge_list() == fresh.edge_list()
    assert graph.synonyms == fresh.synonyms
    assert graph.num_nodes == fresh.num_nodes and graph.num_edges == fresh.num_edges
    reset = reset_for(graph)
    assert np.array_equal(graph.pagerank_graph().run(reset), fresh.pagerank_graph().run(reset))


def test_saved_graph_reloads_memory_mapped_to_identical_pagerank(tmp_path):
    graph = built([0, 1, 2, 3, 4], synonymy_threshold=0.5)
    graph.remove_passage("p1")  # freed slots and cancelled edges persist as they are
    add(graph, 5)
    synonymy(graph)
    graph.save(tmp_path / "g")
    loaded = KnowledgeGraph.load(tmp_path / "g", mmap=True)
    pairs, values = loaded._edges.table()
    assert isinstance(pairs, np.memmap) and isinstance(values, np.memmap)
    assert loaded.edge_list() == graph.edge_list()
    assert loaded.passages == graph.passages and loaded.facts == graph.facts
    assert loaded.synonyms == graph.synonyms and loaded.version == graph.version
    assert loaded.config() == graph.config()
    reset = reset_for(graph)
    assert np.array_equal(loaded.pagerank_graph().run(reset), graph.pagerank_graph().run(reset))
    # A change to the loaded graph goes to memory, never to the mapped files.
    loaded.remove_passage("p5")
    add(loaded, 1)
    synonymy(loaded)
    assert loaded.edge_list() == built([0, 1, 2, 3, 4], synonymy_threshold=0.5).edge_list()
    assert KnowledgeGraph.load(tmp_path / "g", mmap=False).edge_list() == graph.edge_list()


def test_a_damaged_saved_graph_is_refused(tmp_path):
    graph = built([0, 2])
    folder = graph.save(tmp_path / "g")
    values_file = json.loads((folder / "tables.json").read_text())["arrays"]["edge_values"]
    np.save(folder / values_file, np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match=values_file):
        KnowledgeGraph.load(folder)
    graph.save(folder)
    tables = load_graph_tables(folder)
    tables["node_keys"][0] = "someone else"
    tables.pop("digest", None)  # as a save before digests were recorded holds it: with it, the digest refuses first
    (folder / "tables.json").write_text(json.dumps(tables))
    with pytest.raises(ValueError, match="node table does not match"):
        KnowledgeGraph.load(folder)
    (folder / "tables.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        KnowledgeGraph.load(folder)
    with pytest.raises(ValueError, match="no saved graph"):
        KnowledgeGraph.load(tmp_path / "missing")


def test_a_loaded_graph_holds_each_id_once_and_its_synonym_lists_packed(tmp_path):
    graph = built(range(6), synonymy_threshold=0.5)
    synonymy(graph)
    assert any(graph.synonyms.values())
    loaded = KnowledgeGraph.load(graph.save(tmp_path / "g"))
    assert loaded.synonyms == graph.synonyms
    assert all(isinstance(lst, SynonymList) for lst in loaded.synonyms.values())
    key = {e: e for e in loaded.entity_names}  # the entity table's own key strings
    for record in loaded.passages.values():
        assert all(e is key[e] for e in record.entities)
    for subject, _, obj in loaded.facts.values():
        assert subject is key[subject] and obj is key[obj]
    for lst in loaded.synonyms.values():
        assert all(e is key[e] for e in lst.ids)


@pytest.mark.parametrize("entry", [["e1", "near"], ["e1"], [7, 0.9]])
def test_a_malformed_synonym_entry_is_refused_by_name(tmp_path, entry):
    graph = built(range(6), synonymy_threshold=0.5)
    synonymy(graph)
    folder = graph.save(tmp_path / "g")
    tables = load_graph_tables(folder)
    owner = next(iter(tables["synonyms"]))
    tables["synonyms"][owner][0] = entry
    tables.pop("digest", None)  # as a save before digests were recorded holds it
    (folder / "tables.json").write_text(json.dumps(tables))
    with pytest.raises(ValueError, match="malformed"):
        KnowledgeGraph.load(folder)


def test_synonym_list_reads_as_its_pairs():
    pairs = [("b", 0.9), ("c", 0.85), ("a", 0.85)]
    packed = SynonymList(pairs)
    assert list(packed) == pairs and packed == pairs and pairs == packed and len(packed) == 3
    assert packed[1] == ("c", 0.85) and packed[1:] == SynonymList(pairs[1:]) and packed[-1] == ("a", 0.85)
    assert packed != SynonymList(pairs[:2]) and packed != [("b", 0.9), ("c", 0.85), ("a", 0.8)]
    assert not SynonymList() and SynonymList.of(packed) is packed
    with pytest.raises(TypeError):
        hash(packed)
    with pytest.raises(ValueError, match="2 synonym ids need as many"):
        SynonymList.from_columns(("a", "b"), packed.similarities)


@pytest.mark.parametrize("damage", ["swap two passages", "swap two entities", "one fact more on an edge"])
def test_a_saved_edge_table_that_disagrees_with_the_records_is_refused(tmp_path, damage):
    graph = built(range(6))
    folder = graph.save(tmp_path / "g")
    assert KnowledgeGraph.load(folder).edge_list() == graph.edge_list()  # the saved graph itself passes
    tables = load_graph_tables(folder)
    kinds = np.load(folder / tables["arrays"]["node_kinds"])
    keys = tables["node_keys"]
    if damage == "one fact more on an edge":
        values_file = folder / tables["arrays"]["edge_values"]
        values = np.load(values_file)
        values[np.flatnonzero(values[:, 0])[0], 0] += 1
        np.save(values_file, values)  # under a name without a digest, as a save before digests were recorded
        tables["arrays"]["edge_values"] = "edge_values.v1-0123abcd.npy"
        values_file.rename(folder / tables["arrays"]["edge_values"])
        tables.pop("digest", None)
        (folder / "tables.json").write_text(json.dumps(tables))
    else:  # well-formed and of the right kinds: only the edges can tell
        code = 1 if damage == "swap two passages" else 2
        a, b = [i for i, key in enumerate(keys) if key is not None and kinds[i] == code][:2]
        keys[a], keys[b] = keys[b], keys[a]
        tables.pop("digest", None)  # as a save before digests were recorded holds it
        (folder / "tables.json").write_text(json.dumps(tables))
    channel = {"swap two passages": "passage", "swap two entities": "(passage|fact)",
               "one fact more on an edge": "fact"}[damage]
    with pytest.raises(ValueError, match=f"its {channel} edges disagree with the passages and facts"):
        KnowledgeGraph.load(folder)


def test_json_edge_list_is_checked_against_the_records():
    data = built([0, 2]).to_dict()
    data["edges"][0][2] += 1  # one more fact on an edge than the facts table holds
    with pytest.raises(ValueError, match="edge list does not match"):
        KnowledgeGraph.from_dict(data)


def test_graphml_export_round_trips(tmp_path):
    graph = built(range(6), synonymy_threshold=0.5)
    nx.write_graphml(graph.to_networkx(), tmp_path / "g.graphml")
    again = nx.read_graphml(tmp_path / "g.graphml")
    assert again.number_of_nodes() == graph.num_nodes and again.number_of_edges() == graph.num_edges
    u, v, facts, synonymy_weight, passage = graph.edge_list()[0]
    assert again.edges[u, v]["weight"] == pytest.approx(facts + synonymy_weight + passage)


def test_edge_store_sums_changes_in_any_order_exactly():
    store = EdgeStore(compact_every=2)
    store.add(3, 1, 1, 812345)  # an edge is the same pair from either end
    store.add(np.array([1, 5]), np.array([3, 2]), 0, 1)
    store.add(1, 3, 1, -812345)
    pairs, values = store.table()
    assert pairs.tolist() == [[1, 3], [2, 5]]
    assert values.tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]
    store.add(3, 1, 0, -1)
    assert store.table()[0].tolist() == [[2, 5]]
