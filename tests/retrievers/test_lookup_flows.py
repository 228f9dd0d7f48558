"""Without an LM, over a Chroma vector index, the flows embed only the query: each perspective or gap query is the
passage of an entity it names, looked up by title in the collection's table."""

from __future__ import annotations

import chromadb
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.vector_stores.chroma import ChromaVectorStore

from llama_index_mhop.components.confidence_loop import ConfidenceLoopRetriever
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform, RRFFusionRetriever
from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.rules.perspectives import ContextPassage, lookup_perspectives
from llama_index_mhop.rules.ranking import PassageView
from llama_index_mhop.stores import minilm
from llama_index_mhop.stores.corpus import make_document
from llama_index_mhop.stores.passage_table import PassageSearch, PassageTable
from llama_index_mhop.stores.vector_index import build_vector_index
from tests.leland_corpus import PASSAGES, QUERY
from tests.recording_retriever import RecordingRetriever

CHAIN = ["Leland, North Carolina", "Maximum Overdrive", "Stephen King"]


@pytest.fixture()
def leland_index(embed_model, request):
    docs = [make_document(title, text) for title, text in PASSAGES]
    return build_vector_index(docs, chroma_client=chromadb.EphemeralClient(), collection_name=request.node.name[:60],
                              embed_model=embed_model, show_progress=False)


@pytest.fixture()
def encodes(monkeypatch) -> list[list[str]]:
    """Every embedder call (one forward pass of the packaged MiniLM, a query or a batch), with its texts."""
    calls: list[list[str]] = []
    encode = minilm._Encoder.encode

    def counted(self, texts, *args, **kwargs):
        calls.append(list(texts))
        return encode(self, texts, *args, **kwargs)
    monkeypatch.setattr(minilm._Encoder, "encode", counted)
    return calls


def _titles(nodes) -> list[str]:
    return [n.node.metadata["title"] for n in nodes]


def test_llm_free_fusion_embeds_only_the_query_and_follows_the_chain_by_title(leland_index, encodes):
    retriever = RRFFusionRetriever.from_defaults(leland_index, similarity_top_k=4)
    retriever.retrieve(QUERY)  # the first query reads the collection's table
    encodes.clear()
    nodes = retriever.retrieve(QUERY + " ")
    assert encodes == [[QUERY]]  # one call, the query alone (check_query strips the space)
    assert _titles(nodes)[:3] == CHAIN
    iterations = retriever.last_trace["iterations"]
    assert iterations[0]["perspectives"][:2] == ["query", "relationship: Maximum Overdrive"]
    assert {i["step"] for i in iterations} == {"llm_free"} and len(iterations) == 3


async def test_llm_free_fusion_answers_alike_awaited(leland_index):
    retriever = RRFFusionRetriever.from_defaults(leland_index, similarity_top_k=4)
    blocking = [(n.node.node_id, n.score) for n in retriever.retrieve(QUERY)]
    assert [(n.node.node_id, n.score) for n in await retriever.aretrieve(QUERY)] == blocking


def test_llm_free_confidence_loop_embeds_only_the_query_and_looks_gaps_up(leland_index, encodes):
    retriever = ConfidenceLoopRetriever.from_defaults(leland_index, similarity_top_k=4, confidence_threshold=100)
    nodes = retriever.retrieve(QUERY)
    assert len(encodes) == 1 and encodes[0] == [QUERY]
    assert _titles(nodes)[:3] == CHAIN
    trace = retriever.last_trace
    assert set(trace["steps"].values()) == {"llm_free"} and trace["round2"]
    assert trace["rounds"][0]["queries"][0] == QUERY
    # Round 2 follows the bridge the top passages name, by title: no text was embedded for it.
    assert any("Maximum Overdrive" in q for q in trace["rounds"][1]["queries"])


@pytest.mark.parametrize("flow", ["rrf_fusion", "confidence_loop"])
def test_llm_free_flows_over_the_graph_embed_only_the_query_and_keep_its_ranking_first(embed_model, encodes, flow):
    client = chromadb.EphemeralClient()
    vectors = build_vector_index([make_document(title, text) for title, text in PASSAGES], chroma_client=client,
                                 collection_name=f"graph-{flow}", embed_model=embed_model, show_progress=False)
    # The graph reads the vector index's collection in place: the lookups' table is that collection's.
    graph = HippoGraphIndex.from_vector_index(vectors, chroma_client=client, embed_model=embed_model, name=flow,
                                              show_progress=False)
    base = graph.as_retriever(similarity_top_k=23)
    retriever = (RRFFusionRetriever(base, similarity_top_k=4) if flow == "rrf_fusion" else
                 ConfidenceLoopRetriever(base, similarity_top_k=4, confidence_threshold=100))
    retriever.retrieve(QUERY)
    encodes.clear()
    nodes = retriever.retrieve(QUERY)
    assert encodes == [[QUERY]]  # the graph's ranking given the query's vector; the lookups embed nothing
    graph_first = base.retrieve(QUERY)[0].node.node_id
    assert nodes[0].node.node_id == graph_first and set(_titles(nodes)[:3]) == set(CHAIN)


@pytest.mark.parametrize("base", ["vector", "graph"])
@pytest.mark.parametrize("flow", ["rrf_fusion", "confidence_loop"])
def test_a_passage_deleted_or_edited_through_llamaindex_never_comes_back_from_the_table(embed_model, base, flow):
    client = chromadb.EphemeralClient()
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection(f"app-{base}-{flow}"))
    docs = [Document(text=f"{title}\n{text}", metadata={"title": title}, id_=title) for title, text in PASSAGES]
    app = VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(vector_store=store),
                                          embed_model=embed_model)  # a plain store: its writes move no version row
    source = app if base == "vector" else HippoGraphIndex.from_vector_index(
        app, chroma_client=client, embed_model=embed_model, name=f"{base}-{flow}", show_progress=False)
    make = RRFFusionRetriever if flow == "rrf_fusion" else ConfidenceLoopRetriever
    retriever = make(source.as_retriever(similarity_top_k=23), similarity_top_k=6)
    assert "Maximum Overdrive" in _titles(retriever.retrieve(QUERY))  # the table is read
    app.delete_ref_doc("Maximum Overdrive", delete_from_docstore=True)
    edited = [d for d in docs if d.id_ == "Stephen King"][0]
    app.refresh_ref_docs([Document(text="Stephen King\nAn edited passage.", metadata=edited.metadata, id_=edited.id_)])
    served = [(n.node.node_id, n.node.get_content()) for n in retriever.retrieve(QUERY)]
    assert not [t for _, t in served if "Maximum Overdrive" in t.splitlines()[0] or t == edited.text]
    # The query that found its table stale ran again on the table read again: it serves what a new one does.
    fresh = make(source.as_retriever(similarity_top_k=23), similarity_top_k=6)
    assert served == [(n.node.node_id, n.node.get_content()) for n in fresh.retrieve(QUERY)]
    assert "Stephen King\nAn edited passage." in [t for _, t in served]


@pytest.mark.parametrize("flow", [RRFFusionRetriever, ConfidenceLoopRetriever])
def test_a_served_node_changed_by_its_caller_leaves_the_next_query_unchanged(leland_index, flow):
    """The table keeps each passage's node for many queries; every query gets its own copy."""
    retriever = flow.from_defaults(leland_index)
    first = retriever.retrieve(QUERY)
    served = [(n.node.node_id, n.node.get_content(), dict(n.node.metadata)) for n in first]
    for result in first:
        result.node.metadata["title"] = "changed"
        result.node.set_content("changed")
    assert [(n.node.node_id, n.node.get_content(), dict(n.node.metadata)) for n in retriever.retrieve(QUERY)] == served


def test_a_base_retriever_that_is_not_over_chroma_keeps_the_embedded_perspectives():
    base = RecordingRetriever()
    retriever = RRFFusionRetriever(base, similarity_top_k=3)
    assert PassageSearch.of(base) is None
    retriever.retrieve(QUERY)
    assert len(base.calls) > 1 and base.calls[0] == QUERY  # the perspectives searched as text


def test_a_transform_with_its_own_step_keeps_its_text_perspectives_over_chroma(leland_index, encodes):
    class Shouting(PerspectiveQueryTransform):
        def step(self, query, context=(), program=None):
            return super().step(query.upper(), context, program)

    retriever = RRFFusionRetriever(leland_index.as_retriever(similarity_top_k=21), query_transform=Shouting(),
                                   num_iterations=1)
    retriever.retrieve(QUERY)
    assert retriever.last_trace["iterations"][0]["perspectives"][0] == QUERY.upper()
    embedded = [text for call in encodes for text in call]
    assert embedded[:2] == [QUERY, QUERY.upper()] and len(embedded) > 2  # the query, then its text perspectives


def test_the_table_finds_a_passage_by_a_name_that_is_part_of_its_title_or_the_other_way(leland_index):
    search = PassageSearch.of(leland_index.as_retriever(similarity_top_k=2))
    table = search.question(QUERY, 2).table
    titled = {name: [table.metadatas[r]["title"] for r in table.about(name)] for name in
              ("Leland", "the town of Brunswick County", "maximum overdrive", "King", "Le")}
    assert titled == {"Leland": ["Leland, North Carolina"], "the town of Brunswick County": ["Brunswick County"],
                      "maximum overdrive": ["Maximum Overdrive"], "King": ["Stephen King"], "Le": []}


def test_a_lookup_follows_the_bridge_hop_after_hop_given_the_query(leland_index):
    found = PassageSearch.of(leland_index.as_retriever(similarity_top_k=2)).question(QUERY, 2)
    assert _titles(found.looked_up(["Leland"], found.vector, 5)) == CHAIN[:1]
    assert _titles(found.looked_up(["Leland"], found.vector, 5, QUERY)) == CHAIN
    assert _titles(found.looked_up(["Leland"], found.vector, 2, QUERY)) == CHAIN[:2]


def test_the_table_is_read_again_after_a_write(leland_index):
    retriever = leland_index.as_retriever(similarity_top_k=2)
    search = PassageSearch.of(retriever)
    assert search.question(QUERY, 2).table.about("Emilio Estevez") == []
    leland_index.insert(make_document("Emilio Estevez", "Emilio Estevez starred in Maximum Overdrive."))
    table = search.question(QUERY, 2).table
    assert [table.metadatas[r]["title"] for r in table.about("Emilio Estevez")] == ["Emilio Estevez"]


def test_lookup_perspectives_name_the_chain_then_the_bridges_then_the_question_entities():
    source = PassageView("1", PASSAGES[0][1], PASSAGES[0][0])
    angles = lookup_perspectives(QUERY, [ContextPassage(PASSAGES[1][0], PASSAGES[1][1])], source, ["Leland"])
    assert angles[0] == ("relationship", "Maximum Overdrive")
    assert ("entity", "Stephen King") in angles and angles[-1] == ("entity", "Leland")
    assert len({name.lower() for _, name in angles}) == len(angles)


def test_an_empty_table_finds_nothing():
    table = PassageTable(("empty",), [], [], [], __import__("numpy").zeros((0, 384), dtype="float32"))
    assert table.about("Leland") == []
