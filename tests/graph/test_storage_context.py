"""HippoGraphIndex lives in LlamaIndex's storage: a ``BaseIndex`` whose struct is in the storage context's index store
and whose document hashes are in its docstore, reopened by ``load_index_from_storage``, beside a vector index in
one shared storage context, and through LlamaIndex's async verbs."""

from __future__ import annotations

import asyncio
import shutil

import chromadb
import pytest
from llama_index.core import (
    StorageContext,
    VectorStoreIndex,
    load_index_from_storage,
    load_indices_from_storage,
)
from llama_index.core.indices.base import BaseIndex
from llama_index.vector_stores.chroma import ChromaVectorStore

from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.graph.index_struct import HIPPO_GRAPH_STRUCT_TYPE, HippoGraphStruct
from tests.graph.test_sync import EDITED, NOTES, QUERY, build, contents, note, notes
from tests.word_bag import WordBagEmbedding


def answers(index: HippoGraphIndex, query: str = QUERY) -> list[tuple[str, float]]:
    return [(n.node.node_id, round(n.score or 0.0, 9))
            for n in index.as_retriever(similarity_top_k=3).retrieve(query)]


def test_load_index_from_storage_reopens_a_saved_graph_with_identical_results(tmp_path):
    root = tmp_path / "hippo"
    index = build(notes(), persist_dir=root)
    assert isinstance(index, BaseIndex)
    assert index.storage_context.index_store.get_index_struct(index.index_id).get_type() == HIPPO_GRAPH_STRUCT_TYPE
    reopened = load_index_from_storage(StorageContext.from_defaults(persist_dir=str(root)),
                                       embed_model=WordBagEmbedding(), persist_dir=root)
    assert isinstance(reopened, HippoGraphIndex)
    assert reopened.index_id == index.index_id
    assert contents(reopened) == contents(index)
    assert answers(reopened) == answers(index)
    assert reopened.document_hashes.get_document_hash("notes/Pat Hingle.txt") == note("notes/Pat Hingle.txt").hash
    assert reopened.refresh_ref_docs(notes()) == [False] * len(NOTES)  # the hashes came back with it


def test_changes_after_reopening_are_saved_for_the_next_load(tmp_path):
    root = tmp_path / "hippo"
    build(notes(), persist_dir=root)
    first = load_index_from_storage(StorageContext.from_defaults(persist_dir=str(root)), embed_model=WordBagEmbedding(),
                                    persist_dir=root)
    assert first.refresh_ref_docs(notes(Pat_Hingle=EDITED)) == [True, False, False, False]
    first.delete_ref_doc("archive/Delbert Mann.txt", delete_from_docstore=True)
    second = load_index_from_storage(StorageContext.from_defaults(persist_dir=str(root)),
                                     embed_model=WordBagEmbedding(), persist_dir=root)
    assert contents(second) == contents(first)
    assert "archive/Delbert Mann.txt" not in second.ref_doc_info
    assert second.document_hashes.get_document_hash("notes/Pat Hingle.txt") == note("notes/Pat Hingle.txt", EDITED).hash


def test_a_moved_folder_reopens_where_it_is_now(tmp_path):
    root, moved = tmp_path / "hippo", tmp_path / "moved"
    index = build(notes(), persist_dir=root)
    expected = answers(index)
    del index
    shutil.move(root, moved)
    context = StorageContext.from_defaults(persist_dir=str(moved))
    # the context does not say where it was read from: one line says what to pass, never the old folder opened
    with pytest.raises(ValueError, match=r"^graph index \S+: a StorageContext does not record the folder it was "
                                         r"read from; pass that folder again: .*persist_dir=DIR\), or "):
        load_index_from_storage(context, embed_model=WordBagEmbedding())
    reopened = load_index_from_storage(context, embed_model=WordBagEmbedding(), persist_dir=moved)
    assert answers(reopened) == expected
    assert answers(HippoGraphIndex.from_persist_dir(moved, embed_model=WordBagEmbedding())) == expected


def test_a_graph_never_saved_cannot_be_loaded_and_says_so():
    index = build(notes())
    with pytest.raises(ValueError, match="was never saved: its struct names no folder"):
        load_index_from_storage(index.storage_context, embed_model=WordBagEmbedding())


@pytest.mark.parametrize("beside", ["from_documents", "from_vector_index"])
def test_a_graph_and_a_vector_index_share_one_storage_context(tmp_path, beside):
    """The vector index's hashes in the shared docstore do not hide documents from the graph, and both indexes
    come back from the one storage folder (the README's example)."""
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("app"))
    context = StorageContext.from_defaults(vector_store=store)
    vector = VectorStoreIndex.from_documents(notes(), storage_context=context, embed_model=WordBagEmbedding())
    source = notes() if beside == "from_documents" else vector
    graph = HippoGraphIndex.from_documents(source, storage_context=context, chroma_client=client,
                                           persist_dir=tmp_path / "storage", embed_model=WordBagEmbedding(),
                                           show_progress=False)
    assert sorted(graph.ref_doc_info) == sorted(NOTES)
    assert (graph.stores.passage_source is not None) == (beside == "from_vector_index")
    assert graph.storage_context is context
    context.persist(persist_dir=str(tmp_path / "storage"))

    loaded = StorageContext.from_defaults(persist_dir=str(tmp_path / "storage"), vector_store=store)
    kinds = {type(i).__name__: i for i in load_indices_from_storage(loaded, chroma_client=client,
                                                                    embed_model=WordBagEmbedding(),
                                                                    persist_dir=tmp_path / "storage")}
    assert sorted(kinds) == ["HippoGraphIndex", "VectorStoreIndex"]
    assert kinds["VectorStoreIndex"].index_id == vector.index_id
    assert contents(kinds["HippoGraphIndex"]) == contents(graph)
    assert answers(kinds["HippoGraphIndex"]) == answers(graph)
    alone = load_index_from_storage(loaded, index_id=graph.index_id, chroma_client=client,
                                    embed_model=WordBagEmbedding(), persist_dir=tmp_path / "storage")
    assert answers(alone) == answers(graph)


def test_the_struct_round_trips_through_the_index_store_json(tmp_path):
    root = tmp_path / "hippo"
    index = build(notes(), persist_dir=root)
    struct = StorageContext.from_defaults(persist_dir=str(root)).index_store.get_index_struct(index.index_id)
    assert isinstance(struct, HippoGraphStruct) and struct.persist_dir == "."  # no absolute path recorded
    assert str(tmp_path) not in (root / "index_store.json").read_text()


def test_async_verbs_change_the_graph_as_their_sync_forms_do():
    index, expected = build(notes()), build(notes(Pat_Hingle=EDITED))
    expected.delete_ref_doc("archive/Delbert Mann.txt")

    async def change() -> list[bool]:
        refreshed = await index.arefresh_ref_docs(notes(Pat_Hingle=EDITED))
        await index.adelete_ref_doc("archive/Delbert Mann.txt")
        return refreshed

    assert asyncio.run(change()) == [True, False, False, False]
    assert contents(index) == contents(expected)
    assert asyncio.run(index.adelete_nodes(index.ref_doc_info["notes/Delbert Mann.txt"].node_ids)) != []
    assert "notes/Delbert Mann.txt" not in index.ref_doc_info


def test_a_vector_index_refreshing_a_shared_docstore_hides_no_edit_from_the_graph(tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("app"))
    context = StorageContext.from_defaults(vector_store=store)
    vector = VectorStoreIndex.from_documents(notes(), storage_context=context, embed_model=WordBagEmbedding())
    graph = HippoGraphIndex.from_documents(notes(), storage_context=context, chroma_client=client,
                                           embed_model=WordBagEmbedding(), show_progress=False)
    edited = note("notes/Pat Hingle.txt", EDITED)
    assert vector.refresh_ref_docs([edited]) == [True]
    assert graph.refresh_ref_docs([edited]) == [True]  # the vector index's new hash is not the graph's record
    assert EDITED in [n.node.get_content() for n in graph.as_retriever(similarity_top_k=4).retrieve(EDITED)]
    graph.delete_ref_doc("notes/Pat Hingle.txt", delete_from_docstore=True)
    assert context.docstore.get_ref_doc_info("notes/Pat Hingle.txt") is None


def test_llamaindex_call_shapes_are_taken():
    from llama_index.core.chat_engine.types import ChatMode
    from llama_index.core.llms import MockLLM

    index = build(notes())
    assert index.refresh_ref_docs(notes(), update_kwargs={}) == [False] * len(NOTES)
    engine = index.as_chat_engine(ChatMode.BEST, llm=MockLLM(), similarity_top_k=2)
    assert type(engine).__name__ == "CondensePlusContextChatEngine"


def test_nodes_that_are_not_text_are_refused_in_one_line():
    from llama_index.core.schema import ImageNode

    with pytest.raises(TypeError, match="indexes text passages; node img is a ImageNode"):
        build(notes()).insert_nodes([ImageNode(id_="img")])
