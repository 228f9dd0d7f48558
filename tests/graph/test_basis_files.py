"""The walk's solved basis on disk: read back to the same walk, keyed by content, solved again when unusable."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from llama_index_mhop.graph.walk import affine as affine_ppr
from llama_index_mhop.graph.walk.basis_files import basis_key, load_basis, solved_walk
from llama_index_mhop.graph.walk.exact import PageRankGraph, SparseVector


def small_graph(seed: int, damping: float = 0.5):
    rng = np.random.default_rng(seed)
    passages, entities = 60, 40
    edges = np.stack([rng.integers(0, passages, 180), rng.integers(passages, passages + entities, 180)], 1)
    graph = PageRankGraph.from_edges(passages + entities, edges, rng.uniform(0.5, 2.0, 180), method="push",
                                     damping=damping)
    vectors = rng.normal(size=(passages, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return graph, vectors


def walk_result(walk, vectors):
    query = vectors[3]
    seeds = SparseVector(np.array([61, 70]), np.array([0.4, 0.2]))
    result = walk.run(seeds, 0.01, 0.05, query)
    return result.passages, result.seed_entities.values


def test_a_saved_basis_is_read_back_to_the_same_walk_without_solving(tmp_path, monkeypatch):
    graph, vectors = small_graph(1)
    first = solved_walk(graph, 60, vectors, tmp_path)
    key = basis_key(graph, vectors, affine_ppr.DEFAULT_BASIS_TOL)
    assert (tmp_path / key / "basis.npy").is_file()

    def no_solve(*args, **kwargs):
        raise AssertionError("solved again")

    monkeypatch.setattr(affine_ppr, "_solve", no_solve)
    again = solved_walk(graph, 60, vectors, tmp_path)
    assert isinstance(again.basis, np.memmap)  # shared pages, not a copy
    for ours, theirs in zip(walk_result(again, vectors), walk_result(first, vectors), strict=True):
        assert np.array_equal(ours, theirs)


def test_another_graph_or_damping_has_another_key_and_replaces_the_old_folder(tmp_path):
    graph, vectors = small_graph(1)
    solved_walk(graph, 60, vectors, tmp_path)
    other_damping, _ = small_graph(1, damping=0.6)
    keys = {basis_key(graph, vectors, 1e-10), basis_key(other_damping, vectors, 1e-10),
            basis_key(graph, vectors * np.float32(0.5), 1e-10), basis_key(graph, None, 1e-10)}
    assert len(keys) == 4
    solved_walk(other_damping, 60, vectors, tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [basis_key(other_damping, vectors, 1e-10)]


@pytest.mark.parametrize("damage", ["truncate", "nan", "description", "a finite value changed"])
def test_a_damaged_basis_is_solved_again_and_rewritten(tmp_path, caplog, damage):
    graph, vectors = small_graph(2)
    reference = walk_result(solved_walk(graph, 60, vectors, None), vectors)
    solved_walk(graph, 60, vectors, tmp_path)
    folder = tmp_path / basis_key(graph, vectors, 1e-10)
    if damage == "truncate":
        (folder / "basis.npy").write_bytes((folder / "basis.npy").read_bytes()[:100])
    elif damage == "nan":
        totals = np.load(folder / "node_totals.npy")
        totals[5] = np.nan
        np.save(folder / "node_totals.npy", totals)
    elif damage == "a finite value changed":  # a valid array still: only its recorded digest tells
        totals = np.load(folder / "node_totals.npy")
        totals[5] += 1.0
        np.save(folder / "node_totals.npy", totals)
    else:
        (folder / "basis.json").write_text('{"key": "x"}')
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.walk.basis_files"):
        walk = solved_walk(graph, 60, vectors, tmp_path)
    assert "unusable" in caplog.text
    if damage == "a finite value changed":
        assert f"{folder / 'node_totals.npy'}: its bytes do not match the digest" in caplog.text
    for ours, theirs in zip(walk_result(walk, vectors), reference, strict=True):
        assert np.array_equal(ours, theirs)
    assert load_basis(tmp_path, folder.name) is not None  # rewritten whole


def test_a_folder_that_cannot_be_written_leaves_the_solve_in_memory(tmp_path, caplog):
    graph, vectors = small_graph(3)
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.walk.basis_files"):
        walk = solved_walk(graph, 60, vectors, blocked)
    assert "could not be saved" in caplog.text
    assert walk.basis is not None and not isinstance(walk.basis, np.memmap)


def test_a_basis_of_other_shapes_is_refused():
    graph, vectors = small_graph(4)
    solved = affine_ppr.solve_basis(graph, 60, vectors)
    with pytest.raises(ValueError, match="does not fit"):
        affine_ppr.AffineResetPageRank(graph, 60, vectors[:, :4], solved=solved)


def test_a_reopened_index_reads_the_basis_its_first_query_solved(tmp_path, monkeypatch):
    """Query workers of one persisted index: the first to load a graph version solves and saves the basis, the
    next reads it and ranks the same."""
    from llama_index_mhop.graph.index import HippoGraphIndex
    from llama_index_mhop.graph.index_config import HippoGraphIndexConfig
    from llama_index_mhop.graph.walk.basis_files import BASIS_FOLDER
    from tests.graph.film_chain import documents
    from tests.word_bag import WordBagEmbedding

    push = HippoGraphIndexConfig(push_min_nodes=1)  # every graph walks by push, with its basis solved
    root = tmp_path / "index"
    HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root, name="walks",
                                   show_progress=False, config=push)
    question = "Who wrote the film that Delbert Mann directed in 1955?"

    def ranking(index):
        retriever = index.as_retriever(similarity_top_k=5)
        nodes = retriever.retrieve(question)
        assert retriever.last_trace["mode"] == "ppr" and nodes  # the walk, not the dense fallback
        return [(n.node.node_id, n.score) for n in nodes]

    first = HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding(), config=push)
    solved = ranking(first)
    assert first.retrieval_state(damping=0.5).walk.affine is not None
    assert len(list((root / BASIS_FOLDER).iterdir())) == 1

    def no_solve(*args, **kwargs):
        raise AssertionError("solved again")

    monkeypatch.setattr(affine_ppr, "_solve", no_solve)
    assert ranking(HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding(), config=push)) == solved
