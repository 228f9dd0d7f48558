"""A graph beside a vector index follows every way the app changes that index: the package's sync, LlamaIndex's
``refresh_ref_docs``/``delete_ref_doc``, an ``IngestionPipeline`` with a docstore. Queries never serve a passage
gone from the vector index (in the same process and in a new one), and ``reconcile`` converges to the graph a fresh
build gives, extracting only what changed."""

from __future__ import annotations

import threading
from pathlib import Path

import chromadb
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.ingestion import DocstoreStrategy, IngestionPipeline
from llama_index.core.node_parser import SentenceSplitter
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.vector_stores.chroma import ChromaVectorStore

from llama_index_mhop.graph.graph_stores import GraphStores
from llama_index_mhop.graph.index import HippoGraphIndex, HippoGraphIndexConfig
from llama_index_mhop.graph.reconcile import find_drift
from llama_index_mhop.stores.consistency import StoreLockedError, store_lock
from llama_index_mhop.stores.vector_index import delete_documents, sync_vector_index
from tests.graph.conftest import CountingExtractor
from tests.graph.test_sync import EDITED, NOTES, QUERY, contents
from tests.word_bag import WordBagEmbedding

OLD = "Commissioner Gordon"  # in Pat Hingle's first version only
GONE = "Lawrence, Kansas"  # in archive/Delbert Mann.txt only


def write_folder(folder: Path, **edits: str) -> Path:
    for doc_id, text in NOTES.items():
        path = folder / doc_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(edits.get(doc_id, text))
    return folder


def served(index: HippoGraphIndex, query: str = QUERY, k: int = 5) -> str:
    return " ".join(n.node.get_content() for n in index.as_retriever(similarity_top_k=k).retrieve(query))


def fresh_graph(vector_index: VectorStoreIndex, client, embedder) -> HippoGraphIndex:
    return HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, embed_model=embedder,
                                             name="fresh", show_progress=False)


def same_graph(a: HippoGraphIndex, b: HippoGraphIndex) -> None:
    left, right = contents(a), contents(b)
    for key in ("entities", "facts", "passages", "edges"):
        assert left[key] == right[key], key


def synced_folder(tmp_path: Path, collection: str, embedder) -> tuple[Path, chromadb.ClientAPI, VectorStoreIndex]:
    """The notes written to a folder and synced into a collection of a persistent Chroma store."""
    folder = write_folder(tmp_path / "corpus")
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    return folder, client, sync_vector_index(folder, collection_name=collection, chroma_client=client,
                                             embed_model=embedder, show_progress=False).index


#: Queries that find passages gone leave them out and reconcile nothing: what ``reconcile()`` then does.
BY_HAND = HippoGraphIndexConfig(auto_reconcile_max_passages=0)


@pytest.fixture
def beside(tmp_path):
    """A folder synced into a persistent Chroma vector index, with a saved graph beside it reading it in place
    (reconciled by hand)."""
    embedder = WordBagEmbedding()
    folder, client, vector_index = synced_folder(tmp_path, "app", embedder)
    graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, persist_dir=tmp_path / "graph",
                                              embed_model=embedder, show_progress=False, config=BY_HAND)
    assert OLD in served(graph) and GONE in served(graph, "Where was Delbert Mann born?")
    return folder, client, embedder, graph


def test_a_graph_beside_a_synced_vector_index_never_serves_deleted_or_stale_text_and_reconciles(beside, tmp_path):
    folder, client, embedder, graph = beside
    (folder / "notes/Pat Hingle.txt").write_text(EDITED)
    (folder / "archive/Delbert Mann.txt").unlink()
    vector_index = sync_vector_index(folder, collection_name="app", chroma_client=client, embed_model=embedder,
                                     show_progress=False, delete_missing=True).index

    # the same graph object, before any catch-up: the removed passage and the old version are never served
    assert OLD not in served(graph) and GONE not in served(graph, "Where was Delbert Mann born?", k=10)
    # a new process opens it without error and serves neither
    reopened = HippoGraphIndex.from_persist_dir(tmp_path / "graph", chroma_client=client, embed_model=embedder,
                                                config=BY_HAND)
    assert find_drift(reopened.graph.passages, reopened.passages_collection,
                      reopened.stores.passage_source).counts() == {"gone": 2, "new": 1}
    assert OLD not in served(reopened) and GONE not in served(reopened, "Where was Delbert Mann born?", k=10)

    extractor = CountingExtractor()
    reopened.extractor = extractor
    drift = reopened.reconcile()
    assert drift.counts() == {"gone": 2, "new": 1} and extractor.titles == ["Pat Hingle"]  # the edit alone
    assert reopened.reconcile().counts() == {"gone": 0, "new": 0}  # idempotent
    same_graph(reopened, fresh_graph(vector_index, client, embedder))
    again = HippoGraphIndex.from_persist_dir(tmp_path / "graph", chroma_client=client, embed_model=embedder)
    assert "Miami" in served(again, "Where was Pat Hingle born?")
    same_graph(again, reopened)


def test_delete_documents_then_reconcile_and_a_deleted_document_coming_back_is_extracted_again(beside):
    folder, client, embedder, graph = beside
    vector_index = sync_vector_index(folder, collection_name="app", chroma_client=client, embed_model=embedder,
                                     show_progress=False).index
    delete_documents(vector_index, ["archive/Delbert Mann.txt"])
    assert graph.reconcile().counts() == {"gone": 1, "new": 0}
    assert GONE not in served(graph, "Where was Delbert Mann born?", k=10)
    vector_index = sync_vector_index(folder, collection_name="app", chroma_client=client, embed_model=embedder,
                                     show_progress=False).index
    assert graph.reconcile().counts() == {"gone": 0, "new": 1}
    assert GONE in served(graph, "Where was Delbert Mann born?")
    same_graph(graph, fresh_graph(vector_index, client, embedder))


def test_llamaindex_refresh_and_delete_on_a_plain_vector_index_are_followed_with_no_call(tmp_path):
    """The app edits and deletes through LlamaIndex's verbs on its own vector index; the graph's next answer is
    the edited document's new version, with no reconcile() called: the query that found the old version gone
    reconciled first, extracting the edit alone, and saved."""
    embedder = WordBagEmbedding()
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("plain"))
    context = StorageContext.from_defaults(vector_store=store, docstore=SimpleDocumentStore())
    docs = [Document(text=text, id_=doc_id, metadata={"title": Path(doc_id).stem}) for doc_id, text in NOTES.items()]
    vector_index = VectorStoreIndex.from_documents(docs, storage_context=context, embed_model=embedder)
    graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, persist_dir=tmp_path / "graph",
                                              embed_model=embedder, show_progress=False)
    assert OLD in served(graph)
    extractor = CountingExtractor()
    graph.extractor = extractor

    edited = Document(text=EDITED, id_="notes/Pat Hingle.txt", metadata={"title": "Pat Hingle"})
    assert vector_index.refresh_ref_docs([edited, *docs[1:]]) == [True, False, False, False]
    vector_index.delete_ref_doc("archive/Delbert Mann.txt", delete_from_docstore=True)
    answer = served(graph)
    assert EDITED in answer and OLD not in answer and extractor.titles == ["Pat Hingle"]
    assert GONE not in served(graph, "Where was Delbert Mann born?", k=10)
    assert graph.reconcile().counts() == {"gone": 0, "new": 0}  # nothing left to do by hand
    same_graph(graph, fresh_graph(vector_index, client, embedder))
    again = HippoGraphIndex.from_persist_dir(tmp_path / "graph", chroma_client=client, embed_model=embedder,
                                             config=BY_HAND)
    same_graph(again, graph)  # the query's reconcile was saved
    assert EDITED in served(again)


def test_an_ingestion_pipeline_with_a_docstore_and_upserts_is_followed(tmp_path):
    embedder = WordBagEmbedding()
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("piped"))
    pipeline = IngestionPipeline(transformations=[SentenceSplitter(chunk_size=256), embedder], vector_store=store,
                                 docstore=SimpleDocumentStore(), docstore_strategy=DocstoreStrategy.UPSERTS_AND_DELETE)
    docs = [Document(text=text, id_=doc_id, metadata={"title": Path(doc_id).stem}) for doc_id, text in NOTES.items()]
    pipeline.run(documents=docs)
    vector_index = VectorStoreIndex.from_vector_store(store, embed_model=embedder)
    graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, persist_dir=tmp_path / "graph",
                                              embed_model=embedder, show_progress=False, config=BY_HAND)
    assert graph.passages_collection.count() == 0  # read in place, not copied

    edited = Document(text=EDITED, id_="notes/Pat Hingle.txt", metadata={"title": "Pat Hingle"})
    pipeline.run(documents=[edited, *docs[1:3]])  # Pat Hingle edited, archive/Delbert Mann.txt gone
    assert OLD not in served(graph) and GONE not in served(graph, "Where was Delbert Mann born?", k=10)
    extractor = CountingExtractor()
    graph.extractor = extractor
    assert graph.reconcile().counts() == {"gone": 2, "new": 1} and extractor.titles == ["Pat Hingle"]
    same_graph(graph, fresh_graph(vector_index, client, embedder))


def test_a_query_reconciles_only_within_its_bound_and_never_serves_the_old_version(tmp_path, caplog):
    embedder = WordBagEmbedding()
    folder, client, vector_index = synced_folder(tmp_path, "app", embedder)
    graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, persist_dir=tmp_path / "graph",
                                              embed_model=embedder, show_progress=False, auto_reconcile_max_passages=1)
    assert OLD in served(graph)
    (folder / "notes/Pat Hingle.txt").write_text(EDITED)
    (folder / "notes/Marty.txt").write_text("Marty is a 1955 film directed by Delbert Mann.")
    sync_vector_index(folder, collection_name="app", chroma_client=client, embed_model=embedder, show_progress=False)
    answer = served(graph)  # two passages new: over the bound, the query only leaves the old version out
    assert OLD not in answer and EDITED not in answer
    assert "2 passages are new in the vector index it reads, more than a query reconciles" in caplog.text
    assert graph.reconcile().counts() == {"gone": 1, "new": 2}
    assert EDITED in served(graph)


@pytest.mark.parametrize("auto_reconcile_max_passages", [0, 32])
def test_queries_racing_syncs_never_fail_nor_serve_a_passage_the_vector_index_no_longer_holds(
        beside, tmp_path, auto_reconcile_max_passages):
    """With queries reconciling (32) the graph changes under them too."""
    folder, client, embedder, _ = beside
    graph = HippoGraphIndex.from_persist_dir(tmp_path / "graph", chroma_client=client, embed_model=embedder,
                                             config=HippoGraphIndexConfig(
                                                 auto_reconcile_max_passages=auto_reconcile_max_passages))
    versions = [dict(NOTES), {**NOTES, "notes/Pat Hingle.txt": EDITED}]
    errors: list[BaseException] = []
    stale: list[str] = []
    done = threading.Event()

    def query() -> None:
        retriever = graph.as_retriever(similarity_top_k=4)
        while not done.is_set():
            try:
                for node in retriever.retrieve(QUERY):
                    if not client.get_collection("app").get(ids=[node.node.node_id], include=[])["ids"]:
                        # gone at the time of this check: it must have been removed after the query's own check
                        stale.append(node.node.node_id)
            except BaseException as exc:  # noqa: BLE001 - every failure is the test's finding
                errors.append(exc)

    threads = [threading.Thread(target=query) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for round_number in range(20):
            (folder / "notes/Pat Hingle.txt").write_text(versions[round_number % 2]["notes/Pat Hingle.txt"])
            sync_vector_index(folder, collection_name="app", chroma_client=client, embed_model=embedder,
                              show_progress=False)
            if round_number % 5 == 4:
                graph.reconcile()
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == []
    # A passage can vanish between a query's own check and this one; never more than a sync's worth of them.
    assert len(stale) <= 20


def test_two_writers_on_one_store_run_one_after_the_other(tmp_path):
    order: list[str] = []
    with store_lock(tmp_path):
        with pytest.raises(StoreLockedError, match=r"being written by pid \d+"):
            thread_error: list[BaseException] = []

            def second() -> None:
                try:
                    with store_lock(tmp_path, timeout=0.2):
                        order.append("second")
                except BaseException as exc:  # noqa: BLE001
                    thread_error.append(exc)

            thread = threading.Thread(target=second)
            thread.start()
            thread.join()
            raise thread_error[0]
        order.append("first")
    with store_lock(tmp_path, timeout=0.2):
        order.append("after")
    assert order == ["first", "after"]


def test_a_graph_over_a_vector_index_reads_its_passages_one_batch_at_a_time(tmp_path, monkeypatch):
    embedder = WordBagEmbedding()
    _, client, vector_index = synced_folder(tmp_path, "app", embedder)
    reads: list[int] = []
    original = GraphStores.source_nodes

    def counted(self, ids):
        reads.append(len(ids))
        return original(self, ids)

    monkeypatch.setattr(GraphStores, "source_nodes", counted)
    graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, embed_model=embedder,
                                              name="batched", insert_batch_size=2, show_progress=False)
    monkeypatch.undo()
    passages = vector_index.vector_store._collection.count()
    assert reads and max(reads) <= 2 and sum(reads) == passages == graph.graph.num_passages
    same_graph(graph, fresh_graph(vector_index, client, embedder))
