"""HippoGraphIndex speaks LlamaIndex's index verbs: ``insert_nodes``, ``update_ref_doc``, ``ref_doc_info``,
``delete_ref_doc(..., delete_from_docstore=...)`` and ``as_chat_engine``."""

from __future__ import annotations

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.schema import TextNode

from llama_index_mhop.stores.vector_index import passage_nodes
from tests.graph.test_sync import EDITED, NOTES, build, note, notes


def test_ref_doc_info_update_ref_doc_and_delete_ref_doc_with_llamaindex_arguments():
    index = build(notes())
    info = index.ref_doc_info
    assert sorted(info) == sorted(NOTES)
    assert all(sorted(i.node_ids) == sorted(index.graph.passages_of_document(d)) for d, i in info.items())
    old = info["notes/Pat Hingle.txt"].node_ids
    index.update_ref_doc(note("notes/Pat Hingle.txt", EDITED))
    new = index.ref_doc_info["notes/Pat Hingle.txt"].node_ids
    assert new and not set(new) & set(old)
    assert index.delete_ref_doc("notes/Pat Hingle.txt", delete_from_docstore=True) == new
    assert "notes/Pat Hingle.txt" not in index.ref_doc_info
    assert index.document_hashes.get_document_hash("notes/Pat Hingle.txt") is None


def test_insert_nodes_adds_passages_once():
    index = build(notes())
    extra = TextNode(text="Marty is a 1955 film directed by Delbert Mann.", id_="marty-1", metadata={"title": "Marty"})
    assert index.insert_nodes([extra]) == ["marty-1"]
    assert index.insert_nodes([extra]) == []
    assert "marty-1" in index.graph.passages
    assert passage_nodes([note("notes/Pat Hingle.txt")])[0].node_id in index.graph.passages


@pytest.mark.parametrize("chat_mode", ["condense_plus_context", "context"])
def test_as_chat_engine_answers_from_the_graph(chat_mode):
    index = build(notes())
    engine = index.as_chat_engine(chat_mode=chat_mode, llm=MockLLM(), similarity_top_k=2)
    response = engine.chat("Who played Commissioner Gordon?")
    assert any("Commissioner Gordon" in n.node.get_content() for n in response.source_nodes)
    assert len(response.source_nodes) == 2
    with pytest.raises(ValueError, match="chat_mode must be one of"):
        index.as_chat_engine(chat_mode="react", llm=MockLLM())


def test_with_no_llm_anywhere_the_query_engine_retrieves_and_says_so_and_the_chat_engine_refuses(caplog):
    from llama_index.core import Settings

    assert Settings._llm is None  # the app set no LLM (nothing of the suite sets one for good)
    index = build(notes())
    with caplog.at_level("WARNING"):
        response = index.as_query_engine(similarity_top_k=2).query("Who played Commissioner Gordon?")
    assert not response.response and len(response.source_nodes) == 2  # no text written
    assert any("Commissioner Gordon" in n.node.get_content() for n in response.source_nodes)
    assert "without an answer; pass llm= or set Settings.llm" in caplog.text
    with pytest.raises(ValueError, match="a chat engine answers with an LLM: pass llm= or set Settings.llm"):
        index.as_chat_engine()
