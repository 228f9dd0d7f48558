"""The deployment of docs/SCALING.md: the graph's arrays on disk beside a Chroma server, several query worker
processes opening the same persisted graph memory-mapped read-only, one writer updating it meanwhile."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.graph.persistence import GRAPH_DIR
from llama_index_mhop.stores.corpus import make_document
from llama_index_mhop.stores.defaults import default_chroma_client
from tests.chroma_server import ChromaServer
from tests.word_bag import WordBagEmbedding

# Slow: a real `chroma run` server and three worker processes.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FIRST = [
    ("Lover Come Back (1961 film)", "Lover Come Back is a 1961 comedy film directed by Delbert Mann."),
    ("Delbert Mann", "Delbert Mann was an American director. He directed Marty in 1955."),
    ("Marty (film)", "Marty is a 1955 drama film written by Paddy Chayefsky."),
]
LATER = [
    ("Paddy Chayefsky", "Paddy Chayefsky was an American playwright born in the Bronx."),
    ("The Bronx", "The Bronx is a borough of New York City where Paddy Chayefsky was born."),
]
QUERIES = ["Who directed the film written by Paddy Chayefsky?", "Where was the writer of Marty born?"]
WORKERS = 3
READ_TIMEOUT = 300  # seconds for a worker's answer: generous, the workers import the package and may share a busy CPU


@pytest.fixture()
def server(tmp_path):
    srv = ChromaServer(tmp_path / "chroma-server").start()
    yield srv
    srv.stop()


def rankings(index: HippoGraphIndex) -> list:
    retriever = index.as_retriever(similarity_top_k=4)
    return [[[n.node.node_id, round(float(n.score), 9)] for n in retriever.retrieve(q)] for q in QUERIES]


class Worker:
    """A query worker process; :meth:`ask` returns its next answer, or raises when none comes in READ_TIMEOUT s."""

    def __init__(self, root: Path, server: ChromaServer, *flags: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.graph.deployment_worker", *flags, str(root), server.host, str(server.port),
             *QUERIES], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)  # the worker exited

    def ask(self, command: str | None = None) -> dict:
        if command is not None:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        try:
            line = self._lines.get(timeout=READ_TIMEOUT)
        except queue.Empty:
            raise TimeoutError(f"no answer from a query worker in {READ_TIMEOUT} s") from None
        if line is None:
            raise RuntimeError(f"a query worker exited with code {self.process.wait(timeout=READ_TIMEOUT)}")
        return json.loads(line)

    def stop(self) -> int:
        self.process.stdin.close()
        try:
            return self.process.wait(timeout=READ_TIMEOUT)
        finally:
            self.process.kill()


def deployed_writer(server: ChromaServer, root: Path) -> tuple[HippoGraphIndex, dict]:
    """The writer of the deployment (its first documents indexed and saved) and its version and rankings."""
    client = default_chroma_client(host=server.host, port=server.port)
    writer = HippoGraphIndex.from_documents([make_document(t, x) for t, x in FIRST], embed_model=WordBagEmbedding(),
                                            chroma_client=client, persist_dir=root, name="deployed",
                                            show_progress=False)
    return writer, {"version": writer.graph.version, "rankings": rankings(writer)}


def insert_later(writer: HippoGraphIndex) -> dict:
    """Two more documents, two saves (the files of the first save are deleted); the new version and rankings."""
    for title, text in LATER:
        writer.insert([make_document(title, text)])
    return {"version": writer.graph.version, "rankings": rankings(writer)}


@contextmanager
def running(workers: list[Worker]) -> Iterator[list[Worker]]:
    try:
        yield workers
    finally:
        for w in workers:
            w.process.kill()


def test_query_workers_share_the_mapped_graph_while_one_writer_updates(server, tmp_path):
    root = tmp_path / "index"
    writer, old = deployed_writer(server, root)
    with running([Worker(root, server) for _ in range(WORKERS)]) as workers:
        first = [w.ask() for w in workers]  # every worker has the old version open before the writer starts
        for seen in first:
            assert {k: seen[k] for k in old} == json.loads(json.dumps(old)) and seen["memory_mapped"]
        new = insert_later(writer)  # the arrays the workers mapped are deleted from the folder
        assert not any(Path(f).exists() for seen in first for f in seen["files"])
        again = [w.ask("again") for w in workers]  # the old mapping, queried after the update
        reopened = [w.ask("reopen") for w in workers]
        codes = [w.stop() for w in workers]
    assert codes == [0] * WORKERS and new["version"] > old["version"] and new["rankings"] != old["rankings"]
    assert again == first  # the same version, arrays and answers as before the writer saved
    for seen in reopened:  # reopened after the update: all on the writer's new version, answering identically
        assert {k: seen[k] for k in new} == json.loads(json.dumps(new))
        assert seen["memory_mapped"]
        assert all(Path(f).parent == root / GRAPH_DIR for f in seen["files"])
    assert len({json.dumps(s["files"]) for s in reopened}) == 1  # the same files, mapped by every worker


def test_reader_workers_answer_from_one_snapshot_while_one_writer_updates(server, tmp_path):
    root = tmp_path / "index"
    writer, old = deployed_writer(server, root)
    with running([Worker(root, server, "--reader") for _ in range(WORKERS)]) as workers:
        first = [w.ask() for w in workers]  # the first files the save's snapshot, the others open it
        new = insert_later(writer)  # the workers' snapshot is no longer the current save's
        again = [w.ask("again") for w in workers]
        refreshed = [w.ask("refresh") for w in workers]
        codes = [w.stop() for w in workers]
    assert codes == [0] * WORKERS and new["rankings"] != old["rankings"]
    for seen in first:
        assert {k: seen[k] for k in old} == json.loads(json.dumps(old))
    assert len({json.dumps([s["save"], s["files"]]) for s in first}) == 1  # one snapshot, mapped by every worker
    assert again == first  # the version the workers opened, answered as before the writer saved
    for seen in refreshed:  # on the writer's new version, answering identically
        assert {k: seen[k] for k in new} == json.loads(json.dumps(new))
    assert len({json.dumps([s["save"], s["files"]]) for s in refreshed}) == 1
    assert refreshed[0]["save"] != first[0]["save"]
