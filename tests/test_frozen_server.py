"""A Chroma server that accepts connections but never answers gives a clear error within the configured timeout,
for a new CLI process too (chromadb's own client setup has no timeout and would wait forever)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_mhop.stores.defaults import default_chroma_client
from tests.chroma_server import ChromaServer

ROOT = Path(__file__).resolve().parents[1]
# A guard against the bug itself (a process that never returns), far above the timeouts under test.
HANG_GUARD_SECONDS = 240


@pytest.fixture()
def silent_server():
    """A socket on loopback that listens (the kernel completes connections) and never reads or answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([sys.executable, "-m", "llama_index_mhop.cli.commands", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=HANG_GUARD_SECONDS, env={**os.environ, "COLUMNS": "300"})
    except subprocess.TimeoutExpired:
        pytest.fail(f"the CLI hung for {HANG_GUARD_SECONDS} s on a server that does not answer")


def test_client_gives_up_on_a_silent_server(silent_server):
    with pytest.raises(ConnectionError, match=rf"127\.0\.0\.1:{silent_server} is not reachable: no answer within 1 s"):
        default_chroma_client(host="127.0.0.1", port=silent_server, timeout=1.0)


@pytest.mark.slow  # `mhop` in a child process
def test_new_cli_process_reports_a_silent_server(silent_server):
    result = run_cli("query", "Who founded Hartwell Mills?", "--retriever", "vector", "--chroma-host", "127.0.0.1",
                     "--chroma-port", str(silent_server), "--chroma-timeout", "2")
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"error: Chroma server at http://127.0.0.1:{silent_server} is not reachable: no answer within 2 s" in (
        " ".join(result.stdout.split()))
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # a `chroma run` server and `mhop` in a child process
def test_new_cli_process_reports_a_stopped_chroma_server(tmp_path):
    server = ChromaServer(tmp_path / "server-data").start()
    try:
        os.kill(server.process.pid, signal.SIGSTOP)
        result = run_cli("index", str(tmp_path / "nothing-needed"), "--chroma-host", server.host, "--chroma-port",
                         str(server.port), "--chroma-timeout", "2")
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()
    assert result.returncode == 2, result.stderr[-2000:]
    assert "is not reachable: no answer within 2 s" in " ".join(result.stdout.split())


def test_cli_refuses_a_nonpositive_timeout(tmp_path):
    from llama_index_mhop.cli.commands import main as mhop

    assert mhop(["query", "anything", "--chroma-host", "127.0.0.1", "--chroma-port", "9",
                 "--chroma-timeout", "-1"]) == 2
