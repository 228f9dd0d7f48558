"""HippoGraphIndex follows a changing corpus: documents known by doc id and hash; edits replace, nothing is
embedded twice; readers see the old or the new corpus; a sync killed with SIGKILL and re-run ends identical."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import chromadb
import pytest
from llama_index.core import Document, Settings, VectorStoreIndex

from llama_index_mhop.graph.index import HippoGraphIndex, UnknownDocumentError
from llama_index_mhop.graph.sync import known_doc_ids
from llama_index_mhop.stores.vector_index import build_vector_index
from tests.word_bag import WordBagEmbedding

ROOT = Path(__file__).resolve().parents[2]
NOTES = {
    "notes/Pat Hingle.txt": "Pat Hingle was an American actor. He played Commissioner Gordon in Batman.",
    "notes/Lover Come Back.txt": "Lover Come Back is a 1961 film directed by Delbert Mann. It stars Doris Day.",
    "notes/Delbert Mann.txt": "Delbert Mann was an American director. He directed Marty in 1955.",
    "archive/Delbert Mann.txt": "Delbert Mann was born in Lawrence, Kansas. He studied at Yale.",
}
EDITED = "Pat Hingle was an American actor. He was born in Miami, Florida and served in the Navy."
QUERY = "Who played Commissioner Gordon?"


def note(doc_id: str, text: str | None = None) -> Document:
    title = Path(doc_id).stem
    return Document(text=text or NOTES[doc_id], id_=doc_id, metadata={"title": title})


def notes(**edits: str) -> list[Document]:
    return [note(doc_id, edits.get(Path(doc_id).stem.replace(" ", "_"))) for doc_id in NOTES]


def build(docs, embed_model=None, **kwargs) -> HippoGraphIndex:
    return HippoGraphIndex.from_documents(docs, embed_model=embed_model or WordBagEmbedding(), show_progress=False,
                                          **kwargs)


def contents(index: HippoGraphIndex) -> dict:
    """What two indexes of the same corpus must share: graph records and every Chroma collection's ids."""
    graph = index.graph
    return {
        "entities": dict(sorted(graph.entity_names.items())),
        "facts": dict(sorted(graph.facts.items())),
        "passages": sorted(graph.passages),
        "edges": graph.edge_list(),
        "chroma": [sorted(c.get(include=[])["ids"]) for c in
                   (index.passages_collection, index.entities_collection, index.facts_collection)],
    }


def texts(index: HippoGraphIndex, query: str = QUERY) -> list[str]:
    return [n.node.get_content() for n in index.as_retriever(similarity_top_k=4).retrieve(query)]


def test_an_edited_document_replaces_its_old_version():
    index = build(notes())
    assert index.refresh_ref_docs(notes(Pat_Hingle=EDITED)) == [True, False, False, False]
    assert not any("Commissioner Gordon" in t for t in texts(index))
    assert EDITED in texts(index, "Where was Pat Hingle born?")
    assert contents(index) == contents(build(notes(Pat_Hingle=EDITED)))  # old facts and entities gone too
    assert index.counts()["chroma_passages"] == index.counts()["passages"] == len(NOTES)


def test_insert_of_an_edited_document_keeps_one_version():
    index = build(notes())
    index.insert(note("notes/Pat Hingle.txt", EDITED))
    assert contents(index) == contents(build(notes(Pat_Hingle=EDITED)))


def test_unchanged_documents_are_neither_extracted_nor_embedded_again(tmp_path, counting_extractor):
    embedder, extractor = WordBagEmbedding(), counting_extractor()
    build(notes(), embed_model=embedder, persist_dir=tmp_path)
    embedded = embedder.embedded
    index = build(notes(Pat_Hingle=EDITED), embed_model=embedder, persist_dir=tmp_path, extractor=extractor)
    assert extractor.titles == ["Pat Hingle"]
    assert index.refresh_ref_docs(notes(Pat_Hingle=EDITED)) == [False] * len(NOTES)
    assert extractor.titles == ["Pat Hingle"]
    # the edited passage alone (entities and facts use a batch copy), and the probe of the embedder's dimension
    assert embedder.embedded == embedded + 2
    reopened = HippoGraphIndex.from_persist_dir(tmp_path, embed_model=embedder)
    assert reopened.refresh_ref_docs(notes(Pat_Hingle=EDITED)) == [False] * len(NOTES)  # hashes were persisted


def test_a_folder_is_synced_by_relative_path(tmp_path):
    for doc_id, text in NOTES.items():
        (tmp_path / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / doc_id).write_text(text)
    index = build(tmp_path)
    assert sorted(known_doc_ids(index.document_hashes, index.graph)) == sorted(NOTES)
    (tmp_path / "notes" / "Pat Hingle.txt").write_text(EDITED)
    index.insert(tmp_path)
    assert not any("Commissioner Gordon" in t for t in texts(index))
    assert index.counts()["chroma_passages"] == index.counts()["passages"] == len(NOTES)
    index.delete_ref_doc("Pat Hingle.txt")
    assert index.counts()["passages"] == len(NOTES) - 1


def test_delete_ref_doc_by_id_or_unambiguous_file_name():
    index = build(notes())
    assert len(index.delete_ref_doc("Pat Hingle.txt")) == 1  # the file name alone names one document
    assert contents(index) == contents(build([d for d in notes() if d.id_ != "notes/Pat Hingle.txt"]))
    with pytest.raises(UnknownDocumentError, match="'Delbert Mann.txt' names 2 documents: archive/Delbert Mann"):
        index.delete_ref_doc("Delbert Mann.txt")
    with pytest.raises(KeyError, match="close matches: notes/Lover Come Back.txt"):
        index.delete_ref_doc("Lover Come Bak.txt")
    index.delete_ref_doc("archive/Delbert Mann.txt")
    assert index.counts()["passages"] == 2


def test_a_renamed_document_is_a_delete_and_an_insert():
    index = build(notes())
    moved = Document(text=NOTES["notes/Pat Hingle.txt"], id_="people/Pat Hingle.txt", metadata={"title": "Pat Hingle"})
    index.delete_ref_doc("notes/Pat Hingle.txt")
    index.insert(moved)
    assert contents(index) == contents(build([moved, *notes()[1:]]))
    assert index.graph.passages_of_document("people/Pat Hingle.txt")


def test_queries_racing_an_update_answer_from_the_old_or_the_new_corpus():
    index = build(notes(), insert_batch_size=1)
    old, new = texts(index), texts(build(notes(Pat_Hingle=EDITED)))
    assert old != new
    seen: list[list[str]] = []
    done = threading.Event()

    def query_until_done() -> None:
        while not done.is_set():
            seen.append(texts(index))

    reader = threading.Thread(target=query_until_done)
    reader.start()
    try:
        for round_ in range(3):
            index.refresh_ref_docs(notes(Pat_Hingle=EDITED) if round_ % 2 == 0 else notes())
    finally:
        done.set()
        reader.join(timeout=60)
    assert seen and all(answer in (old, new) for answer in seen)
    assert texts(index) == new


def test_app_settings_embed_model_is_used_and_openai_is_never_resolved():
    embedder = WordBagEmbedding()
    Settings.embed_model = embedder
    try:
        index = HippoGraphIndex.from_documents(notes(), show_progress=False)
        assert index.embed_model is embedder and embedder.embedded > 0
    finally:
        Settings._embed_model = None


def test_the_packaged_embedder_when_the_app_set_none(embed_model):
    index = HippoGraphIndex.from_documents(notes()[:1], show_progress=False)
    assert index.embed_model is embed_model
    assert Settings._embed_model is None  # LlamaIndex's OpenAI default was never resolved


def test_own_chroma_never_clashes_with_the_apps_and_indexes_never_share_collections():
    app_client = chromadb.EphemeralClient()  # the app's in-memory Chroma, default settings
    first = HippoGraphIndex.from_documents(notes()[:2], embed_model=WordBagEmbedding(), show_progress=False)
    second = HippoGraphIndex.from_documents(notes()[2:], embed_model=WordBagEmbedding(), show_progress=False)
    chromadb.EphemeralClient()  # and one the app makes afterwards
    for index in (first, second):
        assert index.counts()["chroma_passages"] == index.counts()["passages"] == 2
    shared = [build(notes()[:2], chroma_client=app_client), build(notes()[2:], chroma_client=app_client)]
    assert [i.counts()["chroma_passages"] for i in shared] == [2, 2]  # one in-memory client, two indexes
    assert shared[0].passages_collection.name != shared[1].passages_collection.name


def test_from_vector_index_reuses_nodes_and_stored_embeddings(tmp_path):
    embedder = WordBagEmbedding()
    client = chromadb.PersistentClient(path=str(tmp_path))
    vector_index = build_vector_index(notes(), collection_name="app_passages", chroma_client=client,
                                      embed_model=embedder, show_progress=False)
    assert isinstance(vector_index, VectorStoreIndex)
    passages_embedded = embedder.embedded
    index = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, show_progress=False)
    assert index.embed_model is embedder  # the vector index's embedder
    assert sorted(index.graph.passages) == sorted(client.get_collection("app_passages").get(include=[])["ids"])
    # no passage embedded again (entities and facts use a copy): only the probe of the embedder's dimension
    assert embedder.embedded == passages_embedded + 1
    assert index.counts()["chroma_entities"] == index.counts()["entities"] > 0
    assert "Commissioner Gordon" in texts(index)[0]


def _ranked(index: HippoGraphIndex) -> list[list[tuple[str, float]]]:
    retriever = index.as_retriever(similarity_top_k=4)
    return [[(n.node.node_id, round(n.score, 9)) for n in retriever.retrieve(query)]
            for query in (QUERY, "Who directed Lover Come Back?", "Where was Delbert Mann born?")]


def _records(collection) -> dict:
    rows = collection.get(include=["embeddings", "documents", "metadatas"])
    return {i: (list(map(float, v)), d, m) for i, v, d, m in zip(rows["ids"], rows["embeddings"], rows["documents"],
                                                                 rows["metadatas"], strict=True)}


def test_graph_in_the_vector_index_store_reads_its_passages_in_place(tmp_path):
    embedder = WordBagEmbedding()
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    vector_index = build_vector_index(notes(), collection_name="app_passages", chroma_client=client,
                                      embed_model=embedder, show_progress=False)
    vectors = client.get_collection("app_passages")
    before = _records(vectors)
    shared = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, persist_dir=tmp_path / "graph",
                                               show_progress=False)
    copied = HippoGraphIndex.from_vector_index(vector_index, show_progress=False)  # a store of its own
    assert shared.passages_collection.count() == 0  # nothing copied
    assert shared.stores.passage_source.name == "app_passages"
    assert copied.stores.passage_source is None and copied.passages_collection.count() == len(before)
    assert shared.counts()["chroma_passages"] == shared.counts()["passages"] == len(before)
    assert _ranked(shared) == _ranked(copied)

    reopened = HippoGraphIndex.from_persist_dir(tmp_path / "graph", chroma_client=client, embed_model=embedder,
                                                show_progress=False)
    assert reopened.stores.passage_source.name == "app_passages"
    assert _ranked(reopened) == _ranked(shared)

    # A passage the vector index lacks goes into the graph's own collection; the graph never writes to the vector
    # index's collection nor deletes from it.
    extra = Document(text="Doris Day was an American singer. She starred in Pillow Talk.", id_="notes/Doris Day.txt",
                     metadata={"title": "Doris Day"})
    added = reopened.insert([*notes(), extra])
    assert sorted(reopened.passages_collection.get(include=[])["ids"]) == sorted(added) and len(added) == 1
    assert "Pillow Talk" in " ".join(texts(reopened, "Which film did Doris Day star in?"))
    reopened.delete_ref_doc("notes/Pat Hingle.txt")
    assert "Commissioner Gordon" not in " ".join(texts(reopened))
    assert _records(vectors) == before

    client.delete_collection("app_passages")
    with pytest.raises(ValueError, match="no collection 'app_passages'"):
        HippoGraphIndex.from_persist_dir(tmp_path / "graph", chroma_client=client, embed_model=embedder)


def test_in_memory_graph_reading_passages_in_place_persists_a_copy_of_its_own(tmp_path):
    embedder = WordBagEmbedding()
    client = chromadb.EphemeralClient()
    vector_index = build_vector_index(notes(), collection_name="memory_passages", chroma_client=client,
                                      embed_model=embedder, show_progress=False)
    index = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, show_progress=False)
    assert index.stores.passage_source is not None and index.passages_collection.count() == 0
    ranked = _ranked(index)
    index.persist(tmp_path / "saved")
    assert index.stores.passage_source is None
    reopened = HippoGraphIndex.from_persist_dir(tmp_path / "saved", embed_model=embedder, show_progress=False)
    assert reopened.stores.passage_source is None
    assert sorted(reopened.passages_collection.get(include=[])["ids"]) == sorted(index.graph.passages)
    assert _ranked(reopened) == ranked


# ------------------------------------------------------------------ kill -9 in the middle of a sync

SCRIPT = """
import json, os, signal, sys
sys.path.insert(0, {root!r})
from llama_index.core import Document
from llama_index_mhop.graph import sync as sync_module
from llama_index_mhop.graph.graph_stores import GraphStores
from llama_index_mhop.graph.index import HippoGraphIndex
from tests.word_bag import WordBagEmbedding

step, where, kill_at = sys.argv[1], sys.argv[2], sys.argv[3]
docs = [Document(text=t, id_=i, metadata={{"title": i.split("/")[-1][:-4]}}) for i, t in json.loads(sys.argv[4])]
if kill_at == "batch":
    hook = lambda batch, done: os.kill(os.getpid(), signal.SIGKILL)
else:
    hook = None
if kill_at == "before_chroma_delete":
    sync_module.Removal.delete_from = lambda self, stores: os.kill(os.getpid(), signal.SIGKILL)
if kill_at == "mid_chroma_delete":
    real = GraphStores.delete
    def delete(self, passages, entities, facts):
        real(self, passages, [], [])
        os.kill(os.getpid(), signal.SIGKILL)
    GraphStores.delete = delete
server = os.environ.get("MHOP_TEST_CHROMA_SERVER")  # host:port: the stores on a server, the graph files local
client, name = None, "notes"
if server:
    from llama_index_mhop.stores.defaults import default_chroma_client
    host, port = server.split(":")
    client, name = default_chroma_client(host=host, port=int(port)), "notes_" + os.path.basename(where)
index = HippoGraphIndex.from_documents(docs, embed_model=WordBagEmbedding(), persist_dir=where, name=name,
                                       chroma_client=client, insert_batch_size=1, show_progress=False,
                                       on_batch_end=hook)
if step == "report":
    counts = index.counts()
    ranking = [n.node.node_id for n in index.as_retriever(similarity_top_k=4).retrieve({query!r})]
    print(json.dumps({{"counts": counts, "ranking": ranking}}))
"""


def run(tmp_path: Path, step: str, where: Path, kill_at: str, docs: dict[str, str],
        server: str | None = None) -> subprocess.CompletedProcess:
    script = tmp_path / "sync_script.py"
    script.write_text(SCRIPT.format(root=str(ROOT), query=QUERY))
    env = {**os.environ, "PYTHONPATH": str(ROOT), **({"MHOP_TEST_CHROMA_SERVER": server} if server else {})}
    return subprocess.run([sys.executable, str(script), step, str(where), kill_at, json.dumps(list(docs.items()))],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)


@pytest.mark.parametrize(("kill_at", "on_server"), [("batch", False), ("before_chroma_delete", False),
                                                   ("mid_chroma_delete", False), ("mid_chroma_delete", True)])
@pytest.mark.slow  # child processes killed with SIGKILL, and a `chroma run` server
def test_a_sync_killed_with_sigkill_and_run_again_ends_identical(tmp_path, kill_at, on_server):
    from tests.chroma_server import ChromaServer

    server = ChromaServer(tmp_path / "server-data").start() if on_server else None
    address = f"{server.host}:{server.port}" if server else None
    try:
        compare_killed_with_uninterrupted(tmp_path, kill_at, address)
    finally:
        if server is not None:
            server.stop()


def compare_killed_with_uninterrupted(tmp_path: Path, kill_at: str, server: str | None) -> None:
    edited = {**NOTES, "notes/Pat Hingle.txt": EDITED, "notes/Marty.txt": "Marty is a 1955 film by Delbert Mann."}
    del edited["archive/Delbert Mann.txt"]  # not in this sync: stays indexed (a sync adds and replaces)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    for where in (reference, killed):
        assert run(tmp_path, "build", where, "none", NOTES, server).returncode == 0
    assert run(tmp_path, "sync", killed, kill_at, edited, server).returncode == -9
    again = run(tmp_path, "report", killed, "none", edited, server)
    expected = run(tmp_path, "report", reference, "none", edited, server)
    assert again.returncode == expected.returncode == 0, again.stderr[-2000:] + expected.stderr[-2000:]
    assert json.loads(again.stdout) == json.loads(expected.stdout)
    assert json.loads(expected.stdout)["counts"]["passages"] == 5


def test_entity_and_fact_texts_are_embedded_once_across_inserts_and_refreshes(monkeypatch):
    from llama_index_mhop.graph.graph_stores import GraphStores

    short_texts: list[str] = []
    embed = GraphStores.embed

    def recording(self, texts, short=False):
        if short:
            short_texts.extend(texts)
        return embed(self, texts, short)

    monkeypatch.setattr(GraphStores, "embed", recording)
    index = build(notes()[:2])
    first = list(short_texts)
    assert len(first) == len(set(first)) and "pat hingle" in first  # each distinct text once per batch
    short_texts.clear()
    index.refresh_ref_docs(notes(Pat_Hingle=EDITED)[:2])  # the edit keeps "Pat Hingle" and "American actor"
    edited = list(short_texts)
    assert edited and not set(edited) & set(first)  # only texts no earlier insert embedded
    short_texts.clear()
    index.insert(notes()[:1])  # the old version again: its facts and entities are still stored or come back
    assert set(short_texts) <= set(first) - {t for t in first if t in edited}
    before = len(short_texts)
    index.insert(notes()[:2])
    assert len(short_texts) == before  # nothing new: nothing embedded
