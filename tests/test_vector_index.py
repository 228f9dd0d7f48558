"""The Chroma passage index follows a changing corpus: edits replace, deletions remove, nothing is embedded twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import chromadb
import pytest
from llama_index.core import Settings

from llama_index_mhop.stores.corpus import make_document
from llama_index_mhop.stores.defaults import default_chroma_client
from llama_index_mhop.stores.sync import UnknownDocumentError
from llama_index_mhop.stores.vector_index import (
    EmbeddingDimensionError,
    build_vector_index,
    delete_documents,
    load_vector_index,
    stored_documents,
    sync_vector_index,
)
from tests.word_bag import WordBagEmbedding

ROOT = Path(__file__).resolve().parents[1]


def write_notes(folder: Path, notes: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in notes.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def top_texts(index, query: str, k: int = 5) -> list[str]:
    return [n.node.get_content() for n in index.as_retriever(similarity_top_k=k).retrieve(query)]


def rows(index) -> list[tuple[str, str]]:
    got = index.vector_store.client.get(include=["documents"])
    return sorted(zip(got["ids"], got["documents"], strict=True))


@pytest.fixture()
def notes(tmp_path):
    folder = tmp_path / "notes"
    write_notes(folder, {
        "people/Pat Hingle.txt": "Pat Hingle was an actor from Miami.",
        "films/Marty.txt": "Marty is a film directed by Delbert Mann.",
        "Leland.md": "Leland is a town in North Carolina.",
    })
    return folder


def test_edit_delete_and_rerun_serve_only_the_current_text(tmp_path, notes):
    client = chromadb.EphemeralClient()
    embedder = WordBagEmbedding()
    first = sync_vector_index(notes, chroma_client=client, embed_model=embedder, collection_name="notes1",
                              show_progress=False, delete_missing=True)
    assert first.plan.counts() == {"added": 3, "updated": 0, "removed": 0, "unchanged": 0}

    (notes / "films/Marty.txt").write_text("Marty is a film directed by Delbert Mann and shot in Chicago.")
    (notes / "Leland.md").unlink()
    embedded_before = embedder.embedded
    second = sync_vector_index(notes, chroma_client=client, embed_model=embedder, collection_name="notes1",
                               show_progress=False, delete_missing=True)
    assert second.plan.counts() == {"added": 0, "updated": 1, "removed": 1, "unchanged": 1}
    assert embedder.embedded - embedded_before == 2  # the edited file's passage and the dimension probe

    texts = top_texts(second.index, "Marty film directed by Delbert Mann Leland town", k=10)
    assert texts[0] == "Marty is a film directed by Delbert Mann and shot in Chicago."
    assert "Marty is a film directed by Delbert Mann." not in texts
    assert not any("Leland" in t for t in texts)

    embedded_before = embedder.embedded
    third = sync_vector_index(notes, chroma_client=client, embed_model=embedder, collection_name="notes1",
                              show_progress=False, delete_missing=True)
    assert third.plan.counts() == {"added": 0, "updated": 0, "removed": 0, "unchanged": 2}
    assert embedder.embedded == embedded_before  # nothing embedded


def test_rename_moves_a_document_and_no_delete_keeps_the_missing(tmp_path, notes):
    client = chromadb.EphemeralClient()
    kwargs = dict(chroma_client=client, embed_model=WordBagEmbedding(), collection_name="notes2", show_progress=False)
    sync_vector_index(notes, delete_missing=True, **kwargs)
    (notes / "Leland.md").rename(notes / "places.md")
    renamed = sync_vector_index(notes, delete_missing=True, **kwargs)
    assert (renamed.plan.added, renamed.plan.removed) == (("places.md",), ("Leland.md",))
    assert set(stored_documents(renamed.index.vector_store.client)) == {
        "people/Pat Hingle.txt", "films/Marty.txt", "places.md"}

    (notes / "places.md").unlink()
    kept = sync_vector_index(notes, delete_missing=False, **kwargs)
    assert kept.plan.removed == () and "places.md" in stored_documents(kept.index.vector_store.client)


def test_mirroring_never_touches_documents_of_other_sources(tmp_path, notes):
    client = chromadb.EphemeralClient()
    kwargs = dict(chroma_client=client, embed_model=WordBagEmbedding(), collection_name="notes3", show_progress=False)
    other = tmp_path / "other"
    write_notes(other, {"Delbert Mann.txt": "Delbert Mann was a director."})
    sync_vector_index(other, delete_missing=True, **kwargs)
    sync_vector_index([make_document("API", "A document added through the API.", doc_id="api-1")], **kwargs)
    result = sync_vector_index(notes, delete_missing=True, **kwargs)
    assert result.plan.removed == ()
    assert {"Delbert Mann.txt", "api-1"} <= set(stored_documents(result.index.vector_store.client))


def test_two_folders_with_the_same_file_names_keep_both_documents(tmp_path):
    first, second = tmp_path / "A", tmp_path / "B"
    write_notes(first, {"notes.txt": "Pat Hingle was an actor from Miami."})
    write_notes(second, {"notes.txt": "Leland is a town in North Carolina."})
    client = chromadb.EphemeralClient()
    embedder = WordBagEmbedding()
    kwargs = dict(chroma_client=client, embed_model=embedder, collection_name="folders", show_progress=False,
                  delete_missing=True)
    assert sync_vector_index(first, **kwargs).plan.counts()["added"] == 1
    index = sync_vector_index(second, **kwargs).index
    qualified = f"{second.resolve()}/notes.txt"
    assert sorted(stored_documents(index.vector_store.client)) == sorted(["notes.txt", qualified])
    assert sorted(t for _, t in rows(index)) == ["Leland is a town in North Carolina.",
                                                  "Pat Hingle was an actor from Miami."]
    embedded = embedder.embedded
    again = [sync_vector_index(folder, **kwargs).plan for folder in (first, second, first)]
    assert [p.unchanged for p in again] == [("notes.txt",), (qualified,), ("notes.txt",)]
    assert not any(p.changes for p in again) and embedder.embedded == embedded  # nothing embedded again
    (second / "notes.txt").write_text("Leland is a town in Brunswick County.")
    assert sync_vector_index(second, **kwargs).plan.updated == (qualified,)
    (second / "notes.txt").unlink()
    write_notes(second, {"other.txt": "Marty is a film."})
    plan = sync_vector_index(second, **kwargs).plan
    assert (plan.added, plan.removed) == (("other.txt",), (qualified,))
    assert sorted(t for _, t in rows(index)) == ["Marty is a film.", "Pat Hingle was an actor from Miami."]


def test_delete_by_file_name_and_unknown_ids(tmp_path, notes):
    index = build_vector_index(notes, chroma_client=chromadb.EphemeralClient(), embed_model=WordBagEmbedding(),
                               collection_name="notes4", show_progress=False)
    assert delete_documents(index, ["Pat Hingle.txt"]) == ["people/Pat Hingle.txt"]
    assert not any("Hingle" in t for t in top_texts(index, "Pat Hingle actor Miami", k=5))
    with pytest.raises(UnknownDocumentError, match="close matches: films/Marty.txt"):
        delete_documents(index, ["films/Marty.md"])
    assert len(rows(index)) == 2  # a failed delete removes nothing
    gone: list[UnknownDocumentError] = []
    assert delete_documents(index, ["Pat Hingle.txt", "Marty.txt"], missing=gone) == ["films/Marty.txt"]
    assert [str(e) for e in gone] == ["no passage or document with id 'Pat Hingle.txt'; the index holds 2 documents"]
    assert [r[1] for r in rows(index)] == ["Leland is a town in North Carolina."]


def test_an_embedder_of_another_dimension_is_a_one_line_error(tmp_path, notes):
    client = chromadb.EphemeralClient()
    build_vector_index(notes, chroma_client=client, embed_model=WordBagEmbedding(dim=64), collection_name="notes5",
                       show_progress=False)
    with pytest.raises(EmbeddingDimensionError, match="holds 64-dimensional vectors but the embedder .* gives 128"):
        load_vector_index("notes5", chroma_client=client, embed_model=WordBagEmbedding(dim=128))


def test_the_apps_settings_embed_model_is_used_when_none_is_given(tmp_path, notes):
    app_embedder = WordBagEmbedding(dim=32)
    Settings.embed_model = app_embedder
    try:
        index = build_vector_index(notes, chroma_client=chromadb.EphemeralClient(), collection_name="notes6",
                                   show_progress=False)
    finally:
        Settings._embed_model = None
    assert index._embed_model is app_embedder and app_embedder.embedded == 3


def test_a_query_racing_a_sync_sees_the_corpus_before_or_after(tmp_path):
    folder = tmp_path / "race"
    old = {f"doc{i}.txt": f"alpha version one passage {i}" for i in range(40)}
    write_notes(folder, old)
    client = chromadb.EphemeralClient()
    kwargs = dict(chroma_client=client, embed_model=WordBagEmbedding(), collection_name="race",
                  show_progress=False, insert_batch_size=4)
    index = sync_vector_index(folder, **kwargs).index
    write_notes(folder, {name: text.replace("version one", "version two") for name, text in old.items()})
    seen: list[frozenset[str]] = []
    done = threading.Event()

    def query() -> None:
        while not done.is_set():
            texts = top_texts(index, "alpha version passage", k=40)
            seen.append(frozenset("one" if "version one" in t else "two" for t in texts))

    reader = threading.Thread(target=query)
    reader.start()
    try:
        sync_vector_index(folder, **kwargs)
    finally:
        done.set()
        reader.join()
    assert seen and all(versions in ({"one"}, {"two"}) for versions in seen)
    assert seen[-1] == {"two"}


KILLED_SYNC = textwrap.dedent("""
    import os, signal, sys
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.stores.vector_index import sync_vector_index
    from tests.word_bag import WordBagEmbedding

    class DiesMidway(WordBagEmbedding):
        def _get_text_embeddings(self, texts):
            if self.embedded >= int(sys.argv[3]):
                os.kill(os.getpid(), signal.SIGKILL)
            return super()._get_text_embeddings(texts)

    store = sys.argv[2]  # a directory, or host:port of a Chroma server
    host, _, port = store.partition(":") if not os.path.isabs(store) else ("", "", "")
    client = default_chroma_client(host=host, port=int(port)) if host else default_chroma_client(store)
    sync_vector_index(sys.argv[1], chroma_client=client, embed_model=DiesMidway(), collection_name=sys.argv[4],
                      show_progress=False, insert_batch_size=3, delete_missing=True)
""")


def edit_corpus(folder: Path) -> None:
    write_notes(folder, {f"d{i}.txt": f"passage number {i} about lake {i % 3}" for i in range(0, 12, 2)})
    for i in range(1, 12, 4):
        (folder / f"d{i}.txt").unlink()
    write_notes(folder, {"new.txt": "a new passage about a river"})


def kill_a_sync(folder: Path, store: str, collection: str) -> None:
    killed = subprocess.run([sys.executable, "-c", KILLED_SYNC, str(folder), store, "4", collection],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]


def ranking(index) -> list[tuple[float, str]]:
    """Every passage with its score, ties in text order (HNSW breaks ties by insertion order)."""
    hits = index.as_retriever(similarity_top_k=20).retrieve("a passage about a lake")
    return sorted((-round(h.score, 6), h.node.get_content()) for h in hits)


@pytest.mark.slow  # a sync in a child process killed with SIGKILL
def test_a_sync_killed_midway_resumes_to_the_uninterrupted_state(tmp_path):
    folder = tmp_path / "corpus"
    write_notes(folder, {f"d{i}.txt": f"passage number {i} about river {i % 5}" for i in range(12)})
    kwargs = dict(embed_model=WordBagEmbedding(), collection_name="crash", show_progress=False,
                  insert_batch_size=3, delete_missing=True)
    sync_vector_index(folder, chroma_client=default_chroma_client(tmp_path / "killed"), **kwargs)
    edit_corpus(folder)
    kill_a_sync(folder, str(tmp_path / "killed"), "crash")

    resumed = sync_vector_index(folder, chroma_client=default_chroma_client(tmp_path / "killed"), **kwargs)
    fresh = sync_vector_index(folder, chroma_client=default_chroma_client(tmp_path / "fresh"), **kwargs)
    assert rows(resumed.index) == rows(fresh.index)
    assert ranking(resumed.index) == ranking(fresh.index)
    again = sync_vector_index(folder, chroma_client=default_chroma_client(tmp_path / "killed"), **kwargs)
    assert again.plan.counts()["unchanged"] == len(list(folder.iterdir())) and not again.plan.changes


@pytest.mark.slow  # a `chroma run` server and a sync killed with SIGKILL
def test_a_sync_killed_midway_resumes_on_a_chroma_server(tmp_path):
    from tests.chroma_server import ChromaServer

    server = ChromaServer(tmp_path / "server-data").start()
    try:
        client = default_chroma_client(host=server.host, port=server.port)
        folder = tmp_path / "corpus"
        write_notes(folder, {f"d{i}.txt": f"passage number {i} about river {i % 5}" for i in range(12)})
        kwargs = dict(embed_model=WordBagEmbedding(), show_progress=False, insert_batch_size=3, delete_missing=True)
        sync_vector_index(folder, chroma_client=client, collection_name="killed", **kwargs)
        edit_corpus(folder)
        kill_a_sync(folder, f"{server.host}:{server.port}", "killed")
        resumed = sync_vector_index(folder, chroma_client=client, collection_name="killed", **kwargs)
        fresh = sync_vector_index(folder, chroma_client=client, collection_name="fresh", **kwargs)
        assert rows(resumed.index) == rows(fresh.index)
        assert ranking(resumed.index) == ranking(fresh.index)
    finally:
        server.stop()


def test_a_file_that_cannot_be_read_keeps_its_indexed_version(tmp_path, notes):
    client = chromadb.EphemeralClient()
    kwargs = dict(chroma_client=client, embed_model=WordBagEmbedding(), collection_name="notes7", show_progress=False,
                  delete_missing=True)
    sync_vector_index(notes, **kwargs)
    (notes / "Leland.md").write_bytes("Leland est une ville de Caroline du Nord, pr\xe8s de Wilmington.".encode("latin-1"))
    result = sync_vector_index(notes, **kwargs)
    assert [f.path.name for f in result.skipped] == ["Leland.md"]
    assert result.plan.removed == () and "Leland.md" in stored_documents(result.index.vector_store.client)
    assert any("Leland is a town" in t for t in top_texts(result.index, "Leland town North Carolina"))
