"""The query state's passage and fact vectors and passage texts as files every process of a persisted index maps:
one file per content, compared before it is shared, replaced when damaged, held in the heap where no folder can be
written."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from llama_index_mhop.graph.state_files import STATE_FOLDER, PassageTexts, VectorMatrix


def filled(rows: np.ndarray, folder, kind: str = "passages", used: int | None = None) -> np.ndarray:
    matrix = VectorMatrix(rows.shape[0], rows.shape[1], folder, kind)
    matrix.rows[:] = rows
    return matrix.finish(rows.shape[0] if used is None else used)


def vectors(seed: int, rows: int = 50) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 8)).astype(np.float32)


def files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_two_loads_of_the_same_vectors_map_one_file(tmp_path):
    rows = vectors(0)
    first, second = filled(rows, tmp_path), filled(rows, tmp_path)
    assert isinstance(first, np.memmap) and isinstance(second, np.memmap)
    assert os.path.samefile(first.filename, second.filename)
    assert np.array_equal(first, rows) and np.array_equal(second, rows)
    assert len(files(tmp_path)) == 1 and not first.flags.writeable  # no partial file left; read-only


def test_other_vectors_replace_the_older_file_and_an_open_map_keeps_its_rows(tmp_path):
    old = filled(vectors(0), tmp_path)
    facts = filled(vectors(2), tmp_path, kind="facts")
    new = filled(vectors(1), tmp_path)
    assert files(tmp_path) == sorted([os.path.basename(new.filename), os.path.basename(facts.filename)])
    assert np.array_equal(old, vectors(0)) and np.array_equal(new, vectors(1))


def test_a_new_file_of_a_kind_leaves_the_files_of_a_kind_it_prefixes(tmp_path):
    codes = filled(vectors(0), tmp_path, kind="passages-int8")
    filled(vectors(1), tmp_path)
    newest = filled(vectors(2), tmp_path)
    assert files(tmp_path) == sorted([os.path.basename(codes.filename), os.path.basename(newest.filename)])


def test_fewer_rows_than_allocated_are_kept_whole(tmp_path):
    kept = filled(vectors(3), tmp_path, used=20)
    assert kept.shape == (20, 8) and np.array_equal(kept, vectors(3)[:20])
    assert len(files(tmp_path)) == 1


@pytest.mark.parametrize("damage", ["edited", "truncated"])
def test_a_damaged_file_under_the_name_is_replaced_by_the_fresh_rows(tmp_path, caplog, damage):
    rows = vectors(4)
    path = filled(rows, tmp_path).filename
    if damage == "edited":
        edited = np.load(path)
        edited[7, 3] += 1.0
        np.save(path, edited)
    else:
        with open(path, "r+b") as file:
            file.truncate(200)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.state_files"):
        again = filled(rows, tmp_path)
    assert "replacing" in caplog.text and "does not hold what its name says" in caplog.text
    assert np.array_equal(again, rows) and np.array_equal(np.load(path), rows)


def test_a_folder_that_cannot_be_written_holds_the_rows_in_the_heap(tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.state_files"):
        kept = filled(vectors(5), blocked)
    assert "cannot be written" in caplog.text
    assert not isinstance(kept, np.memmap) and np.array_equal(kept, vectors(5))


def test_a_load_that_died_leaves_a_partial_file_the_next_load_removes(tmp_path):
    code = ("import sys, os; from pathlib import Path\n"
            "from llama_index_mhop.graph.state_files import VectorMatrix\n"
            "VectorMatrix(10, 4, Path(sys.argv[1]), 'facts')\n"
            "os._exit(0)\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True)
    assert len([p for p in files(tmp_path) if p.endswith(".partial.npy")]) == 1
    live = VectorMatrix(10, 4, tmp_path, "facts")  # this process's own partial file stays while it loads
    assert files(tmp_path) == [os.path.basename(live._partial)]
    live.discard()
    assert files(tmp_path) == []


def test_two_workers_of_a_persisted_index_share_its_state_files_and_rank_alike(tmp_path):
    from llama_index_mhop.graph.index import HippoGraphIndex
    from tests.graph.film_chain import documents
    from tests.word_bag import WordBagEmbedding

    root = tmp_path / "index"
    HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root, name="shared",
                                   show_progress=False)
    in_memory = HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), name="heap",
                                               show_progress=False)
    question = "Who wrote the film that Delbert Mann directed in 1955?"

    def ranking(index):
        return [(n.node.node_id, n.score) for n in index.as_retriever(similarity_top_k=5).retrieve(question)]

    workers = [HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding()) for _ in range(2)]
    rankings = [ranking(w) for w in workers]
    states = [w.retrieval_state(damping=0.5) for w in workers]
    assert rankings[0] == rankings[1]
    assert [n.node.text for n in in_memory.as_retriever(similarity_top_k=5).retrieve(question)] == \
        [n.node.text for n in workers[0].as_retriever(similarity_top_k=5).retrieve(question)]
    for vectors_of in (lambda s: s.passage_vectors.matrix, lambda s: s.fact_vectors.matrix):
        mapped = [vectors_of(s) for s in states]
        assert all(isinstance(m, np.memmap) for m in mapped)
        assert os.path.samefile(mapped[0].filename, mapped[1].filename)
        assert np.array_equal(vectors_of(in_memory.retrieval_state(damping=0.5)), mapped[0])
    texts = [s.passage_texts for s in states]
    assert os.path.samefile(texts[0].path, texts[1].path)
    # the passage vectors, the fact vectors, the passage texts, and the query snapshot of the saved version
    assert [name.split("-")[0] for name in files(root / STATE_FOLDER)] == ["facts", "passage", "passages", "snapshot"]


RECORDS = [({"title": "Émile \"Zola\"", "_node_content": '{"id_": "p-1"}', "n": 3}, "line one\nline two ✓"),
           ({}, ""), ({"title": "x" * 5000}, "{not json]\n\n")]


def texts_of(folder, blocks=(RECORDS[:2], RECORDS[2:])) -> PassageTexts:
    texts = PassageTexts(folder)
    for block in blocks:
        texts.append(block)
    return texts.finish()


@pytest.mark.parametrize("where", ["folder", "heap"])
def test_passage_texts_read_back_each_record_as_written(tmp_path, where):
    texts = texts_of(tmp_path if where == "folder" else None)
    assert [texts.record(row) for row in range(len(RECORDS))] == [(m, t) for m, t in RECORDS]
    assert isinstance(texts._bytes, np.memmap) == (where == "folder")


def test_two_loads_of_the_same_passage_texts_map_one_file_and_other_texts_replace_it(tmp_path):
    first, second = texts_of(tmp_path), texts_of(tmp_path, blocks=(RECORDS,))
    assert os.path.samefile(first._bytes.filename, second._bytes.filename)
    other = texts_of(tmp_path, blocks=(RECORDS[:1],))
    assert files(tmp_path) == [os.path.basename(other._bytes.filename)]
    assert first.record(2) == RECORDS[2]  # an open map keeps its records


def test_a_damaged_passage_text_file_is_replaced(tmp_path, caplog):
    path = texts_of(tmp_path)._bytes.filename
    with open(path, "r+b") as file:
        file.write(b"x")
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.state_files"):
        again = texts_of(tmp_path)
    assert "replacing" in caplog.text and again.record(0) == RECORDS[0]


def test_int8_copies_are_shared_files_that_estimate_as_the_heap_copy(tmp_path, monkeypatch):
    from llama_index_mhop.graph.index import HippoGraphIndex
    from llama_index_mhop.graph.state_load import load_retrieval_state
    from llama_index_mhop.graph.walk import WalkSettings
    from tests.graph.film_chain import documents
    from tests.word_bag import WordBagEmbedding

    walk = WalkSettings(push_min_nodes=1, int8_min_rows=1)  # the walk's basis is solved, and gets its int8 copy too
    index = HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), name="codes",
                                           show_progress=False)
    loads = [load_retrieval_state(index.graph, index.stores, 0.5, walk, state_folder=folder)
             for folder in (tmp_path, tmp_path, None)]
    if loads[2].fact_vectors.products.method != "int8":
        pytest.skip("this torch has no int8 kernel that holds its bound")
    query = loads[2].passage_vectors.matrix[0]
    for vectors_of in (lambda s: s.passage_vectors, lambda s: s.fact_vectors):
        estimates = [vectors_of(s).products.estimate(query) for s in loads]
        assert all(np.array_equal(e.values, estimates[2].values) for e in estimates)
        assert all(vectors_of(s).search(query, 3, every=False).top.tolist() ==
                   vectors_of(loads[2]).search(query, 3, every=False).top.tolist() for s in loads)
    basis = [s.walk.affine.basis_products for s in loads]
    assert all(np.array_equal(b.estimate(query).values, basis[2].estimate(query).values) for b in basis)
    names = files(tmp_path)
    for kind in ("facts-int8-", "passages-int8-", "basis-int8-"):
        assert len([n for n in names if n.startswith(kind)]) == 1
    if os.path.exists("/proc/self/maps"):  # the copy a query multiplies is the file's pages, not a heap array
        codes = next(n for n in names if n.startswith("facts-int8-"))
        with open("/proc/self/maps") as maps:
            assert codes in maps.read()
