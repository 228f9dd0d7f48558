"""Chroma as a real server (``chroma run`` on loopback): same results as the embedded store, clear errors when
the server goes away, and indexing that resumes after a crash with nothing duplicated or lost."""

from __future__ import annotations

import time

import chromadb
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from pydantic import PrivateAttr

from llama_index_mhop.cli.commands import main as mhop
from llama_index_mhop.components import RRFFusionRetriever
from llama_index_mhop.stores.defaults import default_chroma_client
from llama_index_mhop.stores.vector_index import IndexingInterrupted, build_vector_index, load_vector_index
from tests.chroma_server import ChromaServer

# Slow: a real `chroma run` server, started, stopped and killed.
pytestmark = pytest.mark.slow


@pytest.fixture()
def server(tmp_path):
    srv = ChromaServer(tmp_path / "server-data").start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def documents(hotpotqa_slice):
    return hotpotqa_slice[1][:60]


def _ranking(retriever, query):
    return [(n.node.node_id, round(n.score, 5)) for n in retriever.retrieve(query)]


def test_retrievers_over_server_match_embedded(server, documents, embed_model, hotpotqa_slice):
    remote = build_vector_index(documents, chroma_client=default_chroma_client(host=server.host, port=server.port),
                                embed_model=embed_model, show_progress=False)
    local = build_vector_index(documents, chroma_client=chromadb.EphemeralClient(), embed_model=embed_model,
                               show_progress=False)
    assert remote.vector_store._collection.count() == local.vector_store._collection.count()
    for question in hotpotqa_slice[0][:5]:
        query = question["question"]
        assert _ranking(remote.as_retriever(similarity_top_k=10), query) == _ranking(
            local.as_retriever(similarity_top_k=10), query)
        assert _ranking(RRFFusionRetriever.from_defaults(remote), query) == _ranking(
            RRFFusionRetriever.from_defaults(local), query)


class _KillAfter(BaseEmbedding):
    """Delegates to the real embedder and kills the server once ``batches`` embedding batches have been made."""

    _inner: BaseEmbedding = PrivateAttr()
    _server: ChromaServer = PrivateAttr()
    _left: int = PrivateAttr()

    def __init__(self, inner: BaseEmbedding, server: ChromaServer, batches: int) -> None:
        super().__init__(model_name="kill-after", embed_batch_size=inner.embed_batch_size)
        self._inner, self._server, self._left = inner, server, batches

    def _get_text_embeddings(self, texts):
        self._left -= 1
        if self._left < 0:
            self._server.stop()
        return self._inner.get_text_embedding_batch(texts)

    def _get_text_embedding(self, text):
        return self._inner.get_text_embedding(text)

    def _get_query_embedding(self, query):
        return self._inner.get_query_embedding(query)

    async def _aget_query_embedding(self, query):
        return self._inner.get_query_embedding(query)


def test_server_killed_mid_indexing_then_resume(server, documents, embed_model):
    client = default_chroma_client(host=server.host, port=server.port)
    killer = _KillAfter(embed_model, server, batches=2)
    with pytest.raises(IndexingInterrupted) as info:
        build_vector_index(documents, chroma_client=client, embed_model=killer, show_progress=False,
                           insert_batch_size=16)
    message = str(info.value)
    assert f"Chroma server at http://127.0.0.1:{server.port}" in message and "index again to resume" in message
    assert "stopped after 32 of" in message  # two batches of 16 written before the kill

    server.start()
    client = default_chroma_client(host=server.host, port=server.port)
    written = client.get_collection("mhop_passages").count()
    assert 0 < written < len(documents)
    resumed = build_vector_index(documents, chroma_client=client, embed_model=embed_model, show_progress=False)
    clean = build_vector_index(documents, chroma_client=chromadb.EphemeralClient(), embed_model=embed_model,
                               show_progress=False)
    ids = resumed.vector_store._collection.get(include=[])["ids"]
    assert len(ids) == len(set(ids)) == clean.vector_store._collection.count()
    assert set(ids) == set(clean.vector_store._collection.get(include=[])["ids"])


def test_server_down_at_query_time_is_a_clear_error_not_a_hang(server, documents, embed_model, capsys):
    client = default_chroma_client(host=server.host, port=server.port)
    index = build_vector_index(documents[:10], chroma_client=client, embed_model=embed_model, show_progress=False)
    server.stop()
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        index.as_retriever(similarity_top_k=3).retrieve("Which magazine was started first?")
    assert "connect" in f"{type(info.value).__name__} {info.value}".lower()
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{server.port}"):
        load_vector_index(chroma_client=default_chroma_client(host=server.host, port=server.port))
    # the command line says which server and exits non-zero
    code = mhop(["query", "who?", "--chroma-host", server.host, "--chroma-port", str(server.port)])
    assert code == 2 and f"127.0.0.1:{server.port}" in capsys.readouterr().out
    assert time.monotonic() - started < 60


def test_mhop_index_through_server_is_idempotent(server, tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "Sava.txt").write_text("The Sava is a river that flows into the Danube at Belgrade.")
    (corpus / "Belgrade.txt").write_text("Belgrade is the capital of Serbia.")
    args = ["index", str(corpus), "--quiet", "--chroma-host", server.host, "--chroma-port", str(server.port)]
    assert mhop(args) == 0 and mhop(args) == 0
    out = capsys.readouterr().out
    out = " ".join(out.split())  # the console wraps long lines
    assert "2 added, 0 updated, 0 removed, 0 unchanged (2 passages)" in out
    assert "0 added, 0 updated, 0 removed, 2 unchanged (2 passages)" in out
