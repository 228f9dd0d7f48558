"""Hand-edited or corrupt graph index files: a one-line error naming the file and the field, nothing written."""

from __future__ import annotations

import json
import shutil

import chromadb
import numpy as np
import pytest

from llama_index_mhop.graph import graph_files
from llama_index_mhop.graph.graph_files import load_graph_tables
from llama_index_mhop.graph.index import CHECKPOINT_FILE, CONFIG_FILE, GRAPH_FILE, HippoGraphIndex
from llama_index_mhop.graph.json_files import load_array
from llama_index_mhop.graph.persistence import GRAPH_DIR, LEGACY_GRAPH_FILE
from llama_index_mhop.stores.corpus import make_document
from tests.graph.film_chain import documents
from tests.word_bag import WordBagEmbedding

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.fixture
def saved(tmp_path):
    """An index saved in tmp_path/index with its Chroma data in tmp_path/index/chroma."""
    root = tmp_path / "index"
    HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root, name="saved",
                                   show_progress=False)
    return root


@pytest.fixture
def checkpoint(tmp_path):
    """The directory of a build killed after its first batch (its checkpoint lists two passages)."""

    def stop(batch: int, done: int) -> None:
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=tmp_path,
                                       name="killed", insert_batch_size=2, show_progress=False, on_batch_end=stop)
    assert (tmp_path / CHECKPOINT_FILE).is_file()
    return tmp_path


def reopen(root):
    return HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding())


def resume(root):
    return HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root,
                                          name="killed", insert_batch_size=2, show_progress=False)


def edit(path, change):
    """Change a saved JSON file as a save written before digests were recorded would hold it (with its digest
    kept, any change is refused by it first: see tests/graph/test_damaged_saves.py); a graph's tables in the
    format whose records are JSON (array format 2, still read)."""
    data = load_graph_tables(path.parent) if path.name == "tables.json" else json.loads(path.read_text())
    data.pop("digest", None)
    change(data)
    path.write_text(json.dumps(data))


def without_digest(text: str) -> str:
    """A saved JSON file's text as a save written before digests were recorded holds it."""
    head, _, _ = text.rpartition(',"digest":')
    return head + "}"


def one_line(exc: pytest.ExceptionInfo) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", [CONFIG_FILE, GRAPH_FILE])
def test_deeply_nested_file_is_a_clear_error(saved, name):
    (saved / name).write_text(DEEP)
    with pytest.raises(ValueError, match=f"{name}: nested too deeply") as exc:
        reopen(saved)
    one_line(exc)


def test_deeply_nested_checkpoint_line_is_a_clear_error(checkpoint):
    lines = (checkpoint / CHECKPOINT_FILE).read_text().splitlines()
    (checkpoint / CHECKPOINT_FILE).write_text("\n".join([lines[0], DEEP, lines[1]]) + "\n")
    with pytest.raises(ValueError, match=f"{CHECKPOINT_FILE}: line 2: nested too deeply"):
        resume(checkpoint)


def test_list_where_an_object_belongs_in_the_config(saved):
    edit(saved / CONFIG_FILE, lambda config: config.update(embed_model=[]))
    with pytest.raises(ValueError, match=f"{CONFIG_FILE}: embed_model: expected an object, got a list"):
        reopen(saved)


def test_list_where_an_object_belongs_in_the_graph(saved):
    edit(saved / GRAPH_FILE, lambda graph: graph.update(entities=[]))
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: entities: expected an object, got a list"):
        reopen(saved)


def edit_first_record(root, change) -> str:
    """Apply ``change(passages, first_id)`` to the first batch line of the checkpoint in ``root``."""
    path = root / CHECKPOINT_FILE
    lines = path.read_text().splitlines()
    record = json.loads(lines[1])
    first = next(iter(record["passages"]))
    change(record["passages"], first)
    path.write_text("\n".join([lines[0], json.dumps(record)]) + "\n")
    return first


def test_list_where_an_object_belongs_in_the_checkpoint(checkpoint):
    first = edit_first_record(checkpoint, lambda passages, pid: passages.update({pid: []}))
    with pytest.raises(ValueError, match=f"{CHECKPOINT_FILE}: line 2: passages.{first}: expected an object"):
        resume(checkpoint)


def test_huge_version_number_is_a_clear_error(saved):
    text = without_digest((saved / GRAPH_FILE).read_text())
    (saved / GRAPH_FILE).write_text(text.replace('"version":', '"version":1e400,"_":', 1))
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: version: expected an integer, got inf"):
        reopen(saved)


def test_fact_naming_an_unknown_entity_is_refused_at_load(saved):
    def unknown_subject(graph):
        fact = next(iter(graph["facts"]))
        graph["facts"][fact][0] = "nope"

    edit(saved / GRAPH_FILE, unknown_subject)
    with pytest.raises(ValueError, match=rf"{GRAPH_FILE}: facts\.\w+: names entity 'nope', which is not"):
        reopen(saved)


def test_checkpoint_record_without_entities_is_a_clear_error(checkpoint):
    first = edit_first_record(checkpoint, lambda passages, pid: passages[pid].pop("entities"))
    with pytest.raises(ValueError, match=rf"{CHECKPOINT_FILE}: line 2: passages\.{first}\.entities: missing"):
        resume(checkpoint)


def test_config_naming_another_index_writes_nothing_to_the_users_store(tmp_path):
    client = chromadb.EphemeralClient()
    HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), chroma_client=client, name="mine",
                                   persist_dir=tmp_path, show_progress=False)
    before = sorted(c.name for c in client.list_collections())
    edit(tmp_path / CONFIG_FILE, lambda config: config.update(
        name="other", collections={kind: f"other_{kind}" for kind in ("passages", "entities", "facts")}))
    with pytest.raises(ValueError, match=f"{CONFIG_FILE}: name: .*no collection 'other_passages'"):
        HippoGraphIndex.from_persist_dir(tmp_path, chroma_client=client, embed_model=WordBagEmbedding())
    assert sorted(c.name for c in client.list_collections()) == before


def test_docstore_hash_of_the_wrong_type_is_a_clear_error(saved):
    def wrong_hash(tables):
        hashes = tables["attached"]["docstore"]["docstore/metadata"]
        hashes[next(iter(hashes))].update(doc_hash=[])

    edit(saved / GRAPH_FILE, wrong_hash)
    with pytest.raises(ValueError, match=r"tables.json: attached: docstore/metadata\..+\.doc_hash: expected a string"):
        reopen(saved)


def test_the_docstore_is_saved_inside_the_graph_tables_and_an_older_separate_file_still_reads(saved):
    tables = json.loads((saved / GRAPH_FILE).read_text())
    tables.pop("digest")  # as a save before digests were recorded holds it
    hashes = tables["attached"]["docstore"]["docstore/metadata"]
    assert len(hashes) == len(documents()) and not (saved / "hippo_docstore.json").exists()
    (saved / "hippo_docstore.json").write_text(json.dumps(tables.pop("attached")["docstore"]))
    (saved / GRAPH_FILE).write_text(json.dumps(tables))
    assert reopen(saved).document_hashes.get_all_document_hashes() == {h["doc_hash"]: k for k, h in hashes.items()}


def ranking(index, query="Who directed the film written by Paddy Chayefsky?"):
    return [(n.node.node_id, n.score) for n in index.as_retriever(similarity_top_k=4).retrieve(query)]


def test_reopened_index_reads_its_edges_memory_mapped_and_answers_identically(saved, graph_snapshot):
    built = reopen(saved)
    pairs, values = built.graph._edges.table()
    before = np.array(pairs)
    assert isinstance(pairs, np.memmap) and isinstance(values, np.memmap)
    assert not pairs.flags.writeable
    assert not list(saved.rglob("*.pkl")) and not list(saved.rglob("*.pickle"))
    files = {p.name: p.read_bytes() for p in (saved / GRAPH_DIR).iterdir()}
    again = reopen(saved)
    assert graph_snapshot(again) == graph_snapshot(built)
    assert ranking(again) == ranking(built)
    again.insert([make_document("Marty (song)", "Marty is a song about Delbert Mann and the Bronx.")])
    # the change went to new arrays and a new save; the arrays the first reader maps are unchanged
    assert {p.name: p.read_bytes() for p in (saved / GRAPH_DIR).iterdir()} != files
    assert np.array_equal(built.graph._edges.table()[0], before) and ranking(reopen(saved)) == ranking(again)


def test_index_saved_in_the_json_format_is_read_and_rewritten_in_arrays(saved, graph_snapshot):
    current = reopen(saved)
    expected = ranking(current)
    # the format an earlier version wrote: config format 1 and the graph as one JSON file
    (saved / LEGACY_GRAPH_FILE).write_text(json.dumps(current.graph.to_dict()))
    shutil.rmtree(saved / GRAPH_DIR)
    edit(saved / CONFIG_FILE, lambda config: config.update(format_version=1))
    old = reopen(saved)
    assert graph_snapshot(old) == graph_snapshot(current)
    assert ranking(old) == expected
    old.persist()
    assert not (saved / LEGACY_GRAPH_FILE).exists() and (saved / GRAPH_FILE).is_file()
    assert json.loads((saved / CONFIG_FILE).read_text())["format_version"] == 2
    assert ranking(reopen(saved)) == expected


def test_array_names_in_the_tables_must_be_files_a_save_wrote(saved):
    edit(saved / GRAPH_FILE, lambda tables: tables["arrays"].update(edge_pairs="../../etc/passwd"))
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: arrays: expected the file names"):
        reopen(saved)


def test_a_save_keeps_the_arrays_of_the_save_before_it(saved):
    folder = saved / GRAPH_DIR
    first = json.loads((folder / "tables.json").read_text())["arrays"]  # a reader has read tables.json of save N ...
    writer = reopen(saved)
    writer.insert([make_document("Marty (song)", "Marty is a song about Delbert Mann and the Bronx.")])  # save N+1
    # ... and opens the arrays it names after the writer's save N+1 finished
    assert load_array(folder / first["edge_pairs"], np.int32, 2, mmap=True).shape[1] == 2
    second = json.loads((folder / "tables.json").read_text())["arrays"]
    writer.persist()  # save N+2: the arrays of save N go, those of N+1 and N+2 stay
    third = json.loads((folder / "tables.json").read_text())["arrays"]
    names = {p.name for p in folder.glob("*.npy")}
    assert names == {*second.values(), *third.values()} and not names & set(first.values())


def test_a_reader_reads_the_tables_again_when_two_saves_removed_its_arrays(saved, monkeypatch, graph_snapshot):
    writer = reopen(saved)
    read_tables = graph_files._read_tables
    calls, saving = [], []

    def two_saves_after_the_first_read(folder):
        tables, digest = read_tables(folder)
        if not saving:  # the reader's reads, not the writer's
            calls.append(tables["arrays"]["edge_pairs"])
        if len(calls) == 1 and not saving:
            saving.append(True)
            for title in ("Marty (song)", "Marty (play)"):  # two saves of other arrays (a name is its content)
                writer.insert([make_document(title, f"{title} is about Delbert Mann and the Bronx.")])
            saving.clear()
            assert not (folder / calls[0]).exists()
        return tables, digest

    monkeypatch.setattr(graph_files, "_read_tables", two_saves_after_the_first_read)
    reader = reopen(saved)
    assert len(calls) == 2 and calls[1] != calls[0]
    assert graph_snapshot(reader) == graph_snapshot(writer) and ranking(reader) == ranking(writer)


def test_a_save_sweeps_the_partial_files_a_crashed_save_left(saved):
    folder = saved / GRAPH_DIR
    expected = ranking(reopen(saved))
    crashed = [folder / "edge_pairs.v9-0123abcd.npy.partial", folder / "tables.json.partial"]
    for path in crashed:
        path.write_bytes(b"half a file")
    (folder / "notes.partial").write_text("not the graph's")
    reopen(saved).persist()
    assert not any(path.exists() for path in crashed) and (folder / "notes.partial").exists()
    assert ranking(reopen(saved)) == expected


def test_an_array_name_with_a_trailing_newline_is_refused(saved):
    edit(saved / GRAPH_FILE, lambda tables: tables["arrays"].update(edge_pairs=tables["arrays"]["edge_pairs"] + "\n"))
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: arrays: expected the file names"):
        reopen(saved)


def test_a_save_whose_records_are_json_still_opens_and_its_next_save_writes_arrays(saved, graph_snapshot):
    current = reopen(saved)
    tables = load_graph_tables(saved / GRAPH_DIR)  # the format before the records became arrays
    assert tables["array_format_version"] == 2 and len(tables["passages"]) == 4
    (saved / GRAPH_FILE).write_text(json.dumps(tables))
    old = reopen(saved)
    assert graph_snapshot(old) == graph_snapshot(current) and ranking(old) == ranking(current)
    old.persist()
    assert json.loads((saved / GRAPH_FILE).read_text())["array_format_version"] == 3
    assert ranking(reopen(saved)) == ranking(current)
