"""A saved graph's folder can be copied, moved and restored: the copy opens as itself (the same rows, graph, hashes
and answers), takes changes, and the original's files stay byte for byte as they were; alone, and beside a vector
index in one storage context and one Chroma store. Two graphs in one Chroma store never share a collection."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import chromadb
import pytest
from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.vector_stores.chroma import ChromaVectorStore

from llama_index_mhop.graph.index import HippoGraphIndex
from tests.graph.test_storage_context import answers
from tests.graph.test_sync import EDITED, NOTES, build, contents, note, notes
from tests.word_bag import WordBagEmbedding

NEW = note("notes/Doris Day.txt", "Doris Day was an American singer. She starred in Pillow Talk.")


def file_hashes(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by its relative path, with the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def hashes_of(index: HippoGraphIndex) -> dict[str, str | None]:
    return {doc_id: index.document_hashes.get_document_hash(doc_id) for doc_id in NOTES}


def test_a_copied_graph_opens_as_itself_and_its_changes_never_reach_the_original(tmp_path):
    original, copy = tmp_path / "a" / "hippo", tmp_path / "b" / "hippo"
    index = build(notes(), persist_dir=original)
    expected = (contents(index), hashes_of(index), answers(index))
    shutil.copytree(original.parent, copy.parent)
    before = file_hashes(original)

    # the copy's storage context reads the same as the original's: without its folder the index cannot know which
    # it is, and refuses rather than open the original
    with pytest.raises(ValueError, match="a StorageContext does not record the folder it was read from"):
        load_index_from_storage(StorageContext.from_defaults(persist_dir=str(copy)), embed_model=WordBagEmbedding())
    opened = load_index_from_storage(StorageContext.from_defaults(persist_dir=str(copy)),
                                     embed_model=WordBagEmbedding(), persist_dir=copy)
    assert opened.persist_dir == copy and Path(opened.stores.client.get_settings().persist_directory) == copy / "chroma"
    assert (contents(opened), hashes_of(opened), answers(opened)) == expected
    opened.insert(NEW)
    opened.delete_ref_doc("archive/Delbert Mann.txt")
    assert file_hashes(original) == before  # not one byte of the original changed

    again = HippoGraphIndex.from_persist_dir(copy, embed_model=WordBagEmbedding())
    assert sorted(again.ref_doc_info) == sorted({*NOTES, NEW.id_} - {"archive/Delbert Mann.txt"})
    assert contents(again) == contents(opened)
    assert contents(HippoGraphIndex.from_persist_dir(original, embed_model=WordBagEmbedding())) == expected[0]


def _app(folder: Path) -> tuple[chromadb.ClientAPI, ChromaVectorStore]:
    client = chromadb.PersistentClient(path=str(folder / "chroma"))
    return client, ChromaVectorStore(chroma_collection=client.get_or_create_collection("app"))


def test_an_app_folder_with_a_graph_beside_a_vector_index_copies_and_moves_whole(tmp_path):
    """The app keeps its Chroma store and its storage context in one folder; a copy of the folder is a second app."""
    client, store = _app(tmp_path / "a")
    context = StorageContext.from_defaults(vector_store=store)
    vector = VectorStoreIndex.from_documents(notes(), storage_context=context, embed_model=WordBagEmbedding())
    graph = HippoGraphIndex.from_vector_index(vector, chroma_client=client, storage_context=context,
                                              persist_dir=tmp_path / "a" / "storage", embed_model=WordBagEmbedding(),
                                              show_progress=False)
    context.persist(str(tmp_path / "a" / "storage"))
    expected = (contents(graph), hashes_of(graph), answers(graph))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    before = file_hashes(tmp_path / "a")

    def reopen(folder: Path) -> tuple[VectorStoreIndex, HippoGraphIndex]:
        client, store = _app(folder)
        loaded = StorageContext.from_defaults(persist_dir=str(folder / "storage"), vector_store=store)
        return (load_index_from_storage(loaded, index_id=vector.index_id, embed_model=WordBagEmbedding()),
                load_index_from_storage(loaded, index_id=graph.index_id, chroma_client=client,
                                        embed_model=WordBagEmbedding(), persist_dir=folder / "storage"))

    copy_vector, copy_graph = reopen(tmp_path / "b")
    assert (contents(copy_graph), hashes_of(copy_graph), answers(copy_graph)) == expected
    assert copy_graph.stores.passage_source.name == "app"  # still read in place, from the copy's store
    copy_vector.insert(NEW)
    copy_graph.insert(NEW)
    copy_graph.delete_ref_doc("archive/Delbert Mann.txt")
    assert NEW.id_ in copy_graph.ref_doc_info and "archive/Delbert Mann.txt" not in copy_graph.ref_doc_info
    assert file_hashes(tmp_path / "a") == before

    copied = (contents(copy_graph), answers(copy_graph))  # read before the move: its client reads the old folder
    shutil.move(tmp_path / "b", tmp_path / "c")  # a moved app opens where it lies, with the copy's changes
    _, moved = reopen(tmp_path / "c")
    assert moved.persist_dir == tmp_path / "c" / "storage"
    assert (contents(moved), answers(moved)) == copied
    assert file_hashes(tmp_path / "a") == before


def test_a_folder_of_another_graph_is_refused_in_one_line(tmp_path):
    first, second = build(notes(), persist_dir=tmp_path / "one"), build(notes()[:2], persist_dir=tmp_path / "two")
    context = StorageContext.from_defaults(persist_dir=str(tmp_path / "one"))
    with pytest.raises(ValueError, match=rf"index_store.json: holds graph index {second.index_id}, not "
                                         rf"{first.index_id}: pass the folder this storage context was saved in$"):
        load_index_from_storage(context, embed_model=WordBagEmbedding(), persist_dir=tmp_path / "two")


def _rows(collection) -> dict[str, list[float]]:
    rows = collection.get(include=["embeddings"])
    return {i: [float(x) for x in v] for i, v in zip(rows["ids"], rows["embeddings"], strict=True)}


def test_two_graphs_with_default_arguments_in_one_store_change_independently(tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    first, second = (HippoGraphIndex.from_documents(notes(), chroma_client=client, embed_model=WordBagEmbedding(),
                                                    show_progress=False) for _ in range(2))
    assert first.name == second.name == "hippo"
    names = {c.name for i in (first, second) for c in (i.passages_collection, i.entities_collection,
                                                       i.facts_collection)}
    assert len(names) == 6
    for writer, other in ((second, first), (first, second)):
        collections = (other.passages_collection, other.entities_collection, other.facts_collection)
        before, expected = [_rows(c) for c in collections], answers(other)
        writer.insert(NEW)
        assert writer.refresh_ref_docs(notes(Pat_Hingle=EDITED)) == [True, False, False, False]
        writer.delete_ref_doc("archive/Delbert Mann.txt")
        writer.delete_nodes(writer.ref_doc_info["notes/Delbert Mann.txt"].node_ids)
        writer.reconcile()
        assert [_rows(c) for c in collections] == before  # not one row of the other's collections changed
        assert answers(other) == expected
        assert NEW.id_ in writer.ref_doc_info and "archive/Delbert Mann.txt" not in writer.ref_doc_info
    assert first.counts() == second.counts()  # the same changes made apart, each in its own collections


def test_collections_another_index_owns_are_refused_in_one_line(tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    owner = build(notes(), chroma_client=client)
    with pytest.raises(ValueError, match=rf"^the Chroma collection '{owner.stores.prefix}_passages' belongs to graph "
                                         rf"index {owner.index_id}, not to \S+: give this index another name= or a "
                                         "Chroma store of its own$"):
        HippoGraphIndex(chroma_client=client, embed_model=WordBagEmbedding(), collection_prefix=owner.stores.prefix)
    assert owner.counts()["chroma_passages"] == len(NOTES)


def test_an_index_saved_with_name_prefixed_collections_keeps_reading_them(tmp_path):
    """Before index ids named collections, an index's were ``{name}_passages`` etc., with no owner recorded."""
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    for kind in ("passages", "entities", "facts"):
        client.create_collection(f"hippo_{kind}", metadata={"hnsw:space": "cosine"})
    old = HippoGraphIndex(chroma_client=client, embed_model=WordBagEmbedding(), collection_prefix="hippo",
                          persist_dir=tmp_path / "hippo", show_progress=False)
    old.insert(notes())
    reopened = HippoGraphIndex.from_persist_dir(tmp_path / "hippo", chroma_client=client,
                                                embed_model=WordBagEmbedding())
    assert reopened.passages_collection.name == "hippo_passages" and reopened.entities_collection.count() > 0
    assert contents(reopened) == contents(old) and answers(reopened) == answers(old)
    assert build(notes(), chroma_client=client).passages_collection.name != "hippo_passages"  # a new one: its own
