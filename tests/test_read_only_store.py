"""A store that cannot be written: the commands that only read work (``mhop query``, ``mhop status``); every command
that must write refuses in one line naming the folder, with exit code 2, before it writes anything.

The tests run as root, and root writes past permission bits, so a chmod'd folder proves nothing. The folders are
made read-only for real: each command runs in a private mount namespace (``unshare -m``) where the folder is bind
mounted read-only, so every write fails with EROFS, for root too, and nothing outside the namespace sees the mount.
Where the machine allows no such namespace the tests are skipped, saying why.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_mhop.cli.commands import main as mhop

CORPUS = {
    "Maximum Overdrive.txt": "Maximum Overdrive is a 1986 film directed by Stephen King, shot in Leland.",
    "Stephen King.txt": "Stephen King is an American author born in Portland, Maine.",
    "Leland.txt": "Leland is a town in Brunswick County, North Carolina.",
}
EDIT = "Leland is a town in North Carolina with a film studio."


def _namespaces_work(probe: Path) -> str | None:
    """None when a read-only bind mount in a private mount namespace refuses writes here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare is not installed"
    probe.mkdir()
    script = f"mount --bind -o ro {probe} {probe} && ! touch {probe}/written 2>/dev/null"
    result = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                            check=False)
    return None if result.returncode == 0 else f"no read-only mount in a mount namespace: {result.stderr.strip()}"


def run_read_only(folders: list[Path], argv: list[str], cwd: Path, python: str | None = None) -> tuple[int, list[str]]:
    """``mhop argv`` (or the Python code ``python``) in a mount namespace where ``folders`` are read-only; its exit
    code and output lines."""
    mounts = " && ".join(f"mount --bind -o ro {shlex.quote(str(f))} {shlex.quote(str(f))}" for f in folders)
    command = shlex.join([sys.executable, "-c", python] if python else
                         [sys.executable, "-m", "llama_index_mhop.cli.commands", *argv])
    result = subprocess.run(["unshare", "-m", "sh", "-c", f"{mounts} && exec {command}"], capture_output=True,
                            text=True, timeout=300, check=False, cwd=cwd)
    return result.returncode, [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A corpus indexed with its graph by the CLI, then edited, so that ``mhop index`` has something to write."""
    root = tmp_path_factory.mktemp("read_only")
    reason = _namespaces_work(root / "probe")
    if reason is not None:
        pytest.skip(reason)
    corpus = root / "corpus"
    corpus.mkdir()
    for name, text in CORPUS.items():
        (corpus / name).write_text(text)
    options = ["--chroma-path", str(root / "store" / "chroma")]
    assert mhop(["index", str(corpus), "--quiet", "--graph", *options]) == 0
    (corpus / "Leland.txt").write_text(EDIT)
    return root, corpus, options


def _passages(root: Path) -> list[str]:
    from llama_index_mhop.stores.defaults import default_chroma_client

    client = default_chroma_client(root / "store" / "chroma")
    return sorted(client.get_collection("mhop_passages").get(include=["documents"])["documents"])


@pytest.mark.slow  # child processes
def test_a_read_only_store_answers_queries_and_refuses_every_write_in_one_line(store):
    root, corpus, options = store
    before = _passages(root)
    folder = root / "store"
    chroma = folder / "chroma"
    for argv in (["index", str(corpus), "--quiet"], ["index", str(corpus), "--quiet", "--graph"],
                 ["delete", "Leland.txt"]):
        code, lines = run_read_only([folder], [*argv, *options], root)
        assert code == 2, lines
        assert lines == [f"error: {chroma} cannot be written (Read-only file system): changing the store needs a "
                         "writable folder; queries only read it"]
    code, lines = run_read_only([folder], ["query", "Who directed Maximum Overdrive?", "--retriever", "hippo_graph",
                                           "--top-k", "2", *options], root)
    assert code == 0 and any("Maximum Overdrive" in line for line in lines), lines
    code, lines = run_read_only([folder], ["status", *options], root)
    report = json.loads("\n".join(lines[lines.index("{"):]))
    assert code == 0 and report["passages"]["passages"] == len(CORPUS) and report["graph"]["passages"] == len(CORPUS)
    assert _passages(root) == before and EDIT not in before


@pytest.mark.slow  # child processes
def test_a_read_only_graph_folder_refuses_before_the_passage_index_changes(store):
    root, corpus, options = store
    before = _passages(root)
    graph = root / "store" / "graph"
    code, lines = run_read_only([graph], ["index", str(corpus), "--quiet", *options], root)
    assert (code, lines) == (2, [f"error: {graph} cannot be written (Read-only file system): changing the store "
                                 "needs a writable folder; queries only read it"])
    assert _passages(root) == before  # the passage index was not synced ahead of a graph that cannot follow
    code, lines = run_read_only([graph], ["query", "Where was Stephen King born?", "--retriever", "hippo_graph",
                                          "--top-k", "2", *options], root)
    assert code == 0 and any("Portland" in line for line in lines), lines


@pytest.mark.slow  # a child process
def test_an_index_opened_in_a_read_only_folder_answers_and_refuses_changes_in_one_line(store):
    root, _, _ = store
    graph = root / "store" / "graph"
    code = f"""
import chromadb
from llama_index.core import Document
from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.stores.consistency import ReadOnlyStoreError
index = HippoGraphIndex.from_persist_dir({str(graph)!r}, chroma_client=chromadb.PersistentClient({str(root / "store" / "chroma")!r}))
print("answer:", index.as_retriever(similarity_top_k=1).retrieve("Where was Stephen King born?")[0].node.get_content())
try:
    index.insert(Document(text="Marty is a 1955 film.", id_="Marty.txt"))
except ReadOnlyStoreError as exc:
    print("refused:", exc)
"""
    status, lines = run_read_only([graph], [], root, python=code)
    assert status == 0, lines
    assert "answer: Stephen King is an American author born in Portland, Maine." in lines
    assert (f"refused: {graph} cannot be written (Read-only file system): changing the store needs a writable "
            "folder; queries only read it") in lines
