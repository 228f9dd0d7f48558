"""Readers in another process, and query threads in this one, racing 20 syncs of one collection.

Through a Chroma server no query fails and none sees half a sync (a document missing, or two versions of it in one
retrieval). An embedded store serves one process: a reader in another process is refused with one line naming the
fix once a sync lands, and never serves a removed passage."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import chromadb
import pytest

from llama_index_mhop.components.rrf_fusion import RRFFusionRetriever
from llama_index_mhop.stores.vector_index import sync_vector_index
from tests.chroma_server import ChromaServer
from tests.retrievers.test_one_version import FIRST, SECOND, docs
from tests.word_bag import WordBagEmbedding

# Slow: a reader process and a `chroma run` server.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Who did Pat Hingle play in Batman?"

# Opens the collection with its own client and retrieves until the stop file appears; prints one JSON line per
# finding, then the number of retrievals.
READER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
import chromadb
from llama_index_mhop.components.rrf_fusion import RRFFusionRetriever
from llama_index_mhop.stores.vector_index import load_vector_index
from tests.word_bag import WordBagEmbedding

where, stop, first, second, question = sys.argv[1:6]
host, _, port = where.partition(":")
client = chromadb.HttpClient(host=host, port=int(port)) if port else chromadb.PersistentClient(path=where)
index = load_vector_index("race", chroma_client=client, embed_model=WordBagEmbedding())
retrievers = [index.as_retriever(similarity_top_k=2), RRFFusionRetriever.from_defaults(index)]
Path(stop + ".ready").touch()
queries = 0
while not Path(stop).exists():
    for retriever in retrievers:
        queries += 1
        try:
            texts = {{n.node.get_content() for n in retriever.retrieve(question)}}
            if (first in texts) == (second in texts):
                print(json.dumps({{"half": sorted(texts)}}), flush=True)
        except Exception as exc:
            print(json.dumps({{"error": type(exc).__name__, "message": str(exc)}}), flush=True)
        Path(stop + ".count").write_text(str(queries))
print(json.dumps({{"queries": queries}}), flush=True)
"""


def reader_count(stop: Path) -> int:
    try:
        return int(Path(f"{stop}.count").read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def reader_finished(stop: Path, after: int, wait: float = 60.0) -> None:
    """Wait until the reader process has finished a retrieval begun after this point."""
    deadline = time.monotonic() + wait
    while reader_count(stop) <= after + 1 and time.monotonic() < deadline:
        time.sleep(0.01)


def race(client, where: str, stop: Path) -> tuple[list[str], list[dict]]:
    """20 syncs alternating two versions of a document, raced by 3 RRF threads here and a reader process."""
    embedder = WordBagEmbedding()
    index = sync_vector_index(docs(FIRST), collection_name="race", chroma_client=client, embed_model=embedder,
                              show_progress=False).index
    report = Path(f"{stop}.out")
    with report.open("w") as out:  # a file, not a pipe: the reader never blocks on a full pipe
        reader = subprocess.Popen(
            [sys.executable, "-c", READER.format(root=str(ROOT)), where, str(stop), FIRST, SECOND, QUESTION],
            stdout=out, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    findings: list[str] = []
    done = threading.Event()

    def query() -> None:
        retriever = RRFFusionRetriever.from_defaults(index)
        while not done.is_set():
            try:
                texts = {n.node.get_content() for n in retriever.retrieve(QUESTION)}
                if (FIRST in texts) == (SECOND in texts):
                    findings.append(f"half: {sorted(texts)}")
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                findings.append(f"error: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=query) for _ in range(3)]
    try:
        while not Path(f"{stop}.ready").exists():
            assert reader.poll() is None, reader.stderr.read()
            done.wait(0.1)
        for thread in threads:
            thread.start()
        for round_number in range(20):
            sync_vector_index(docs(SECOND if round_number % 2 == 0 else FIRST), collection_name="race",
                              chroma_client=client, embed_model=embedder, show_progress=False)
            reader_finished(stop, after=reader_count(stop))  # the reader's next retrieval overlaps the next sync
    finally:
        done.set()
        stop.touch()
        for thread in threads:
            thread.join()
        _, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err[-2000:]
    return findings, [json.loads(line) for line in report.read_text().splitlines() if line.startswith("{")]


def test_through_a_chroma_server_readers_here_and_in_another_process_see_whole_versions(tmp_path):
    server = ChromaServer(tmp_path / "server").start()
    try:
        client = chromadb.HttpClient(host=server.host, port=server.port)
        findings, lines = race(client, f"{server.host}:{server.port}", tmp_path / "stop")
    finally:
        server.stop()
    assert lines[-1]["queries"] >= 20  # the reader really raced the syncs
    assert findings == [] and lines[:-1] == []


def test_on_an_embedded_store_another_process_is_refused_in_one_line_never_served_stale_text(tmp_path):
    findings, lines = race(chromadb.PersistentClient(path=str(tmp_path / "chroma")), str(tmp_path / "chroma"),
                           tmp_path / "stop")
    assert findings == []  # this process, which wrote, reads whole versions
    reader = lines[:-1]
    assert reader and all(line.get("error") == "StaleStoreError" for line in reader), reader[:3]
    assert "share a Chroma server between processes" in reader[0]["message"]


# The writer of the graph race: 20 syncs of the passage collection alternating two versions of a document, the graph
# index (which reads the collection in place) following each, as `mhop index --graph` does.
GRAPH_WRITER = r"""
import sys
sys.path.insert(0, {root!r})
import chromadb
from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.stores.vector_index import sync_vector_index
from tests.retrievers.test_one_version import FIRST, SECOND, docs
from tests.word_bag import WordBagEmbedding

host, port, root = sys.argv[1], int(sys.argv[2]), sys.argv[3]
client, embedder = chromadb.HttpClient(host=host, port=port), WordBagEmbedding()
graph = HippoGraphIndex.from_persist_dir(root, chroma_client=client, embed_model=embedder, show_progress=False)
for round_number in range(20):
    sync_vector_index(docs(SECOND if round_number % 2 == 0 else FIRST), collection_name="race", chroma_client=client,
                      embed_model=embedder, show_progress=False)
    graph.reconcile(show_progress=False)
"""


def graph_over_a_server(tmp_path: Path, server: ChromaServer):
    from llama_index_mhop.graph import HippoGraphIndex

    client, embedder = chromadb.HttpClient(host=server.host, port=server.port), WordBagEmbedding()
    vectors = sync_vector_index(docs(FIRST), collection_name="race", chroma_client=client, embed_model=embedder,
                                show_progress=False).index
    graph = HippoGraphIndex.from_vector_index(vectors, chroma_client=client, persist_dir=tmp_path / "graph",
                                              embed_model=embedder, show_progress=False)
    return client, graph


def test_graph_readers_racing_20_syncs_through_a_server_raise_no_chroma_error(tmp_path):
    from llama_index_mhop.graph import HippoGraphIndex, HippoGraphReader

    server = ChromaServer(tmp_path / "server").start()
    try:
        client, _ = graph_over_a_server(tmp_path, server)
        root = tmp_path / "graph"
        errors: list[str] = []
        retrievals = [0]
        done = threading.Event()

        def read(open_source, refresh: bool) -> None:
            source = open_source()
            while not done.is_set():
                try:
                    if refresh:
                        source.refresh()
                    source.as_retriever(similarity_top_k=2).retrieve(QUESTION)
                    retrievals[0] += 1
                except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                    errors.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")

        embedder = WordBagEmbedding()
        readers = [threading.Thread(target=read, args=(lambda: HippoGraphIndex.from_persist_dir(
                       root, chroma_client=client, embed_model=embedder, show_progress=False), False))
                   for _ in range(2)]
        readers.append(threading.Thread(target=read, args=(lambda: HippoGraphReader.open(
            root, chroma_client=client, embed_model=embedder), True)))
        for thread in readers:
            thread.start()
        try:
            writer = subprocess.run([sys.executable, "-c", GRAPH_WRITER.format(root=str(ROOT)), server.host,
                                     str(server.port), str(root)], cwd=ROOT, capture_output=True, text=True,
                                    timeout=900)
        finally:
            done.set()
            for thread in readers:
                thread.join()
    finally:
        server.stop()
    assert writer.returncode == 0, writer.stderr[-3000:]
    # A reader refreshing while the writer saves faster than it files a snapshot is told so in one line; nothing
    # else may fail, and nothing raw from Chroma.
    busy = "builtins.ValueError: index 'hippo': no query snapshot could be filed"
    assert retrievals[0] >= 20 and [e for e in errors if not e.startswith(busy)] == [], errors[:3]


def test_a_graph_read_through_a_server_waits_for_a_sync_another_process_marked(tmp_path):
    from llama_index_mhop.stores.consistency import sync_log
    from llama_index_mhop.stores.search import VersionMarker

    server = ChromaServer(tmp_path / "server").start()
    try:
        client, graph = graph_over_a_server(tmp_path, server)
        retriever = graph.as_retriever(similarity_top_k=2)
        collection = client.get_collection("race")
        gone = collection.get(where={"document_id": "Pat Hingle"}, include=[])["ids"]
        assert gone and gone[0] in [n.node.node_id for n in retriever.retrieve(QUESTION)]
        during: list = []
        with VersionMarker(sync_log(client, "race"), "race").writing():  # as a sync in another process marks it
            reader = threading.Thread(target=lambda: during.extend(retriever.retrieve(QUESTION)))
            reader.start()
            reader.join(3.0)  # a read that does not wait for the write ends here, before the delete
            collection.delete(ids=gone)
        reader.join()
        after = [n.node.node_id for n in retriever.retrieve(QUESTION)]
    finally:
        server.stop()
    assert [n.node.node_id for n in during] == after and gone[0] not in after
