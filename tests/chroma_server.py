"""A real ``chroma run`` server on loopback for the server-mode tests."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import chromadb
from chromadb.config import Settings


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ChromaServer:
    """Starts, stops and restarts ``chroma run --path PATH --host 127.0.0.1 --port PORT``."""

    def __init__(self, path: Path, port: int | None = None) -> None:
        self.path, self.port, self.host = path, port or free_port(), "127.0.0.1"
        self.process: subprocess.Popen | None = None

    def start(self, wait: float = 60.0) -> ChromaServer:
        # The CLI ships with chromadb in this interpreter's environment, which need not be on PATH.
        beside = Path(sys.executable).parent / "chroma"
        executable = str(beside) if beside.is_file() else shutil.which("chroma")
        if executable is None:
            raise RuntimeError("the `chroma` CLI (from chromadb) is not on PATH")
        self.process = subprocess.Popen(
            [executable, "run", "--path", str(self.path), "--host", self.host, "--port", str(self.port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chromadb.HttpClient(host=self.host, port=self.port,
                                    settings=Settings(anonymized_telemetry=False)).heartbeat()
                return self
            except Exception:
                if self.process.poll() is not None:
                    raise RuntimeError(f"chroma run exited with code {self.process.returncode}") from None
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"chroma run did not answer on port {self.port} within {wait:g}s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None
