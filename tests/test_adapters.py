"""Each private LlamaIndex or Chroma name the package reads, checked against the installed library: a rename or a
changed meaning fails here."""

from __future__ import annotations

import uuid
from typing import Any

import chromadb
import httpx
import numpy as np
import pytest
from chromadb.config import Settings as ChromaSettings
from llama_index.core import Settings, StorageContext, VectorStoreIndex
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockLLM
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult
from llama_index.vector_stores.chroma import ChromaVectorStore

from llama_index_mhop.adapters.chroma import http_session
from llama_index_mhop.adapters.llama_index import (
    build_query,
    configured_embed_model,
    configured_llm,
    hugging_face_query_embeddings,
    index_embed_model,
    retriever_embed_model,
    retriever_vector_store,
    retriever_verbose,
)
from tests.chroma_server import ChromaServer

DIM = 8


class RecordingStore(ChromaVectorStore):
    """A real Chroma vector store that keeps the queries it is asked."""

    asked: list[VectorStoreQuery] = []

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        self.asked.append(query)
        return super().query(query, **kwargs)


@pytest.fixture
def index() -> VectorStoreIndex:
    """A real VectorStoreIndex of three passages over an in-memory Chroma collection."""
    collection = chromadb.EphemeralClient().create_collection(f"adapters-{uuid.uuid4().hex}")
    store = RecordingStore(chroma_collection=collection)
    nodes = [TextNode(text=f"passage {i}", id_=f"p{i}") for i in range(3)]
    return VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(vector_store=store),
                            embed_model=MockEmbedding(embed_dim=DIM))


@pytest.fixture
def restore_settings():
    """Puts back ``Settings``' LLM and embedder as they were (never LlamaIndex's lazy defaults)."""
    saved = Settings._llm, Settings._embed_model
    try:
        yield
    finally:
        Settings._llm, Settings._embed_model = saved


def test_configured_llm_is_the_apps_or_none(restore_settings) -> None:
    Settings._llm = None
    assert configured_llm() is None
    assert Settings._llm is None  # nothing built LlamaIndex's default
    llm = MockLLM()
    Settings.llm = llm
    assert configured_llm() is llm


def test_configured_embed_model_is_the_apps_or_none(restore_settings) -> None:
    Settings._embed_model = None
    assert configured_embed_model() is None
    assert Settings._embed_model is None
    embed_model = MockEmbedding(embed_dim=DIM)
    Settings.embed_model = embed_model
    assert configured_embed_model() is embed_model


def test_index_and_retriever_parts(index: VectorStoreIndex) -> None:
    retriever = index.as_retriever(similarity_top_k=2)
    embed_model = index_embed_model(index)
    assert isinstance(embed_model, MockEmbedding) and embed_model.embed_dim == DIM
    assert retriever_embed_model(retriever) is embed_model
    assert retriever_vector_store(retriever) is index.vector_store


def test_build_query_is_the_query_the_retriever_asks(index: VectorStoreIndex) -> None:
    retriever = index.as_retriever(similarity_top_k=2)
    bundle = QueryBundle(query_str="passage", embedding=[0.5] * DIM)
    built = build_query(retriever, bundle)
    assert isinstance(built, VectorStoreQuery)
    assert (built.query_str, built.query_embedding, built.similarity_top_k) == ("passage", [0.5] * DIM, 2)
    store = index.vector_store
    store.asked.clear()
    found = retriever.retrieve(bundle)
    assert store.asked == [built]  # equal queries: an answer prefetched for one serves the other
    assert len(found) == 2


def test_retriever_verbose(index: VectorStoreIndex) -> None:
    assert retriever_verbose(index.as_retriever(verbose=True)) is True
    assert retriever_verbose(index.as_retriever()) is False


def test_hugging_face_query_embeddings_match_one_by_one() -> None:
    from llama_index_mhop.stores.defaults import embedder_model_dir, load_embed_model

    embed_model = load_embed_model(embedder_model_dir())  # LlamaIndex's HuggingFaceEmbedding
    queries = ["Who founded Arthur's Magazine?", "When was First for Women launched?"]
    batch = hugging_face_query_embeddings(embed_model, queries)
    one_by_one = [embed_model.get_query_embedding(q) for q in queries]
    assert np.allclose(batch, one_by_one, atol=1e-5)


def test_http_session_of_a_server_client_and_none_embedded(tmp_path) -> None:
    assert http_session(chromadb.EphemeralClient()) is None
    server = ChromaServer(tmp_path / "server").start()
    try:
        client = chromadb.HttpClient(host=server.host, port=server.port,
                                     settings=ChromaSettings(anonymized_telemetry=False))
        session = http_session(client)
        assert isinstance(session, httpx.Client)
        client.heartbeat()
        session.close()
        with pytest.raises(RuntimeError, match="closed"):  # the client's requests go through this session
            client.heartbeat()
    finally:
        server.stop()
