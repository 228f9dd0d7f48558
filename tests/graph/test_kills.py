"""``mhop index --graph`` and ``mhop delete`` killed with SIGKILL at each step boundary, then run again, end with
every store identical to an uninterrupted run: the passage collection's rows, the graph's tables and Chroma ids,
and the top-5 ranking. The graph reconciles with the passage index rather than replaying a run's changes, so a
kill between the passage sync and the graph's leaves nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.graph.test_sync import EDITED, NOTES

# Slow: `mhop` in child processes killed with SIGKILL, some beside a `chroma run` server.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# Runs one mhop command with the word-bag embedder, killing itself at the named point (or reporting the stores).
SCRIPT = r"""
import json, os, signal, sys
sys.path.insert(0, {root!r})
from llama_index_mhop.cli import commands as cli
from llama_index_mhop.graph import checkpoint, persistence, sync as graph_sync
from tests.word_bag import WordBagEmbedding

kill_at, args = sys.argv[1], sys.argv[2:]
embedder = WordBagEmbedding()
cli._embed_model = lambda _args: embedder
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)

def after(module, name, when=lambda *a, **k: True):
    real = getattr(module, name)
    def wrapped(*a, **k):
        out = real(*a, **k)
        if when(*a, **k):
            die()
        return out
    setattr(module, name, wrapped)

if kill_at == "after_passage_sync":
    from llama_index_mhop.stores import vector_index
    after(vector_index, "sync_vector_index")
if kill_at == "after_passage_delete":
    from llama_index_mhop.stores import vector_index
    after(vector_index, "delete_documents")
if kill_at == "between_deletes":  # the first document's passages deleted, the second's not yet
    from chromadb.api.models.Collection import Collection
    after(Collection, "delete")
if kill_at == "first_graph_batch":
    after(checkpoint, "append_checkpoint")
    import llama_index_mhop.graph.indexing as indexing
    indexing.append_checkpoint = checkpoint.append_checkpoint
if kill_at == "before_config":  # the graph and its docstore saved, the config not yet
    real_save = persistence.KnowledgeGraph.save
    def save(self, *a, **k):
        out = real_save(self, *a, **k)
        die()
    persistence.KnowledgeGraph.save = save
if kill_at == "amid_storage_files":  # LlamaIndex's docstore.json replaced, its index_store.json not yet
    real_replace = os.replace
    def replace(src, dst, *a, **k):
        real_replace(src, dst, *a, **k)
        if os.path.basename(str(dst)) == "docstore.json":
            die()
    os.replace = replace
if kill_at == "before_chroma_delete":
    graph_sync.Removal.delete_from = lambda self, stores: die() if self else None

if kill_at == "hold":  # holds the store's writer lock until told to go on, so a second writer must wait
    import time
    from pathlib import Path
    real_writing = cli._writing
    def _writing(*a, **k):
        lock = real_writing(*a, **k)
        class Held:
            def __enter__(self):
                lock.__enter__()
                held = Path(os.environ["MHOP_TEST_HELD"])
                held.touch()
                release = held.with_name("release")
                for _ in range(6000):
                    if release.exists():
                        break
                    time.sleep(0.05)
            def __exit__(self, *exc):
                return lock.__exit__(*exc)
        return Held()
    cli._writing = _writing

if kill_at == "report":
    from llama_index_mhop.graph import HippoGraphIndex
    client = cli._client(cli.build_parser().parse_args(["status", *args[1:]]))
    graph = HippoGraphIndex.from_persist_dir(args[0], chroma_client=client, embed_model=embedder)
    rows = client.get_collection("mhop_passages").get(include=["documents", "metadatas"])
    g = graph.graph
    ranking = [[n.node.node_id for n in graph.as_retriever(similarity_top_k=5).retrieve(q)]
               for q in ("Who played Commissioner Gordon?", "Where was Delbert Mann born?", "Who directed Marty?")]
    print(json.dumps({{
        "rows": sorted(zip(rows["ids"], rows["documents"], [m.get("document_id") for m in rows["metadatas"]])),
        "graph": [sorted(g.passages), sorted(g.entity_names.items()), sorted(g.facts.items()), g.edge_list()],
        "chroma": [sorted(c.get(include=[])["ids"]) for c in (graph.passages_collection, graph.entities_collection,
                                                              graph.facts_collection)],
        "hashes": sorted(graph.document_hashes.get_all_document_hashes().values()),
        "ranking": ranking,
    }}))
else:
    sys.exit(cli.main(args))
"""


def mhop_command(tmp_path: Path, kill_at: str, *args: str) -> list[str]:
    script = tmp_path / "mhop_script.py"
    script.write_text(SCRIPT.format(root=str(ROOT)))
    return [sys.executable, str(script), kill_at, *args]


def mhop(tmp_path: Path, kill_at: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(mhop_command(tmp_path, kill_at, *args), capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=600)


def test_two_mhop_writers_on_one_store_run_one_after_the_other(tmp_path):
    corpus = write(tmp_path / "corpus", NOTES)
    store = ["--chroma-path", str(tmp_path / "chroma"), "--graph-dir", str(tmp_path / "graph")]
    held = tmp_path / "held"
    first = subprocess.Popen(mhop_command(tmp_path, "hold", "index", str(corpus), "--graph", "--quiet", *store),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                             env={**os.environ, "PYTHONPATH": str(ROOT), "MHOP_TEST_HELD": str(held)})
    try:
        while not held.exists():
            assert first.poll() is None, first.communicate()[1][-2000:]
            time.sleep(0.05)
        second = subprocess.Popen(mhop_command(tmp_path, "none", "index", str(corpus), "--graph", "--quiet", *store),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        waiting = ""
        try:
            for line in second.stderr:  # until the second writer says it waits (or ends without waiting)
                waiting += line
                if "held by" in line:
                    break
        finally:
            held.with_name("release").touch()
        second_out, second_err = second.communicate(timeout=600)
        second_err = waiting + second_err
    finally:
        held.with_name("release").touch()
        out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    assert second.returncode == 0, second_err[-2000:]
    assert f"held by pid {first.pid}" in second_err  # it waited for the first, and said for whom
    assert "4 added" in out and "4 unchanged" in second_out  # one after the other: the second found it done
    alone = tmp_path / "alone"
    alone.mkdir()
    assert mhop(alone, "none", "index", str(corpus), "--graph", "--quiet", "--chroma-path", str(alone / "chroma"),
                "--graph-dir", str(alone / "graph")).returncode == 0
    report = [json.loads(mhop(where, "report", str(where / "graph"), "--chroma-path", str(where / "chroma")).stdout)
              for where in (tmp_path, alone)]
    assert report[0] == report[1]


def write(folder: Path, notes: dict[str, str]) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    for doc_id, text in notes.items():
        (folder / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (folder / doc_id).write_text(text)
    return folder


V2 = {**{k: v for k, v in NOTES.items() if k != "archive/Delbert Mann.txt"}, "notes/Pat Hingle.txt": EDITED,
      "notes/Marty.txt": "Marty is a 1955 film directed by Delbert Mann. It won the Palme d'Or."}

# (kill point, the first command, the commands that are killed then run again, the corpus they see)
SCENARIOS = {
    "first build before its config": ("before_config", [], ["index", "{corpus}", "--graph"], NOTES),
    "first build after a batch": ("first_graph_batch", [], ["index", "{corpus}", "--graph"], NOTES),
    "sync between the passages and the graph": ("after_passage_sync", [["index", "{corpus}", "--graph"]],
                                                ["index", "{corpus}"], V2),
    "sync in the graph's batches": ("first_graph_batch", [["index", "{corpus}", "--graph"]],
                                    ["index", "{corpus}"], V2),
    "sync amid LlamaIndex's storage files": ("amid_storage_files", [["index", "{corpus}", "--graph"]],
                                            ["index", "{corpus}"], V2),
    "sync before its Chroma deletes": ("before_chroma_delete", [["index", "{corpus}", "--graph"]],
                                       ["index", "{corpus}"], V2),
    "delete between the passages and the graph": ("after_passage_delete", [["index", "{corpus}", "--graph"]],
                                                  ["delete", "archive/Delbert Mann.txt"], NOTES),
    "delete between its documents": ("between_deletes", [["index", "{corpus}", "--graph"]],
                                     ["delete", "archive/Delbert Mann.txt", "notes/Pat Hingle.txt"], NOTES),
}


#: The uninterrupted runs' reports, by what they ran (the reports name no path, so scenarios share them).
_REFERENCES: dict[str, dict] = {}


@pytest.mark.parametrize(("scenario", "on_server"), [*((s, False) for s in SCENARIOS),
                                                    ("sync between the passages and the graph", True)])
def test_a_command_killed_at_a_step_boundary_then_run_again_ends_as_an_uninterrupted_one(tmp_path, scenario,
                                                                                          on_server):
    kill_at, setup, command, corpus_after = SCENARIOS[scenario]
    key = json.dumps([setup, command, corpus_after])
    reports = {"reference": _REFERENCES[key]} if key in _REFERENCES else {}
    with ExitStack() as servers:
        for run in [r for r in ("reference", "killed") if r not in reports]:
            reports[run] = _run(tmp_path / run, kill_at if run == "killed" else None, setup, command,
                                corpus_after, _server(servers, tmp_path / run) if on_server else None)
    _REFERENCES[key] = reports["reference"]
    assert reports["killed"] == reports["reference"]


def _server(servers: ExitStack, where: Path) -> list[str]:
    """A `chroma run` server of this run's own, stopped when the test ends, as mhop's store options."""
    from tests.chroma_server import ChromaServer

    server = ChromaServer(where / "server-data").start()
    servers.callback(server.stop)
    return ["--chroma-host", server.host, "--chroma-port", str(server.port)]


def _run(where: Path, kill_at: str | None, setup: list, command: list[str], corpus_after: dict[str, str],
         server: list[str] | None) -> dict:
    """The stores after ``setup`` and ``command`` (with ``kill_at``: killed there first, then run again)."""
    corpus = write(where / "corpus", NOTES)
    chroma = server or ["--chroma-path", str(where / "chroma")]
    store = [*chroma, "--graph-dir", str(where / "graph")]

    def call(args: list[str], point: str = "none") -> subprocess.CompletedProcess:
        filled = [a.format(corpus=corpus) for a in args]
        return mhop(where, point, *filled, *store, *(["--quiet"] if filled[0] == "index" else []))

    for args in setup:
        assert call(args).returncode == 0
    write(corpus, corpus_after)
    if kill_at is not None:
        assert call(command, kill_at).returncode == -9, "the kill point was never reached"
    result = call(command)
    said = result.stdout + result.stderr
    if command[0] == "delete" and kill_at is not None:  # the killed run deleted the first document
        assert "no passage or document with id 'archive/Delbert Mann.txt'" in " ".join(said.split())
        assert result.returncode == (0 if len(command) > 2 else 2), said[-2000:]  # the rest deleted, if any
    else:
        assert result.returncode == 0, said[-4000:]
    if command[0] != "delete":  # a sync's folder is indexed as it stands after each run (a delete's would undo it)
        assert call(["index", "{corpus}"]).returncode == 0
    report = mhop(where, "report", str(where / "graph"), *chroma)
    assert report.returncode == 0, report.stderr[-3000:]
    return json.loads(report.stdout)
