"""A ``chroma run`` server for the benchmarks that measure a deployment, and a process's memory as
``/proc/<pid>/smaps_rollup`` counts it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["chroma_server", "free_port", "smaps_rollup"]


def smaps_rollup(pid: int) -> dict[str, float]:
    """A process's resident, proportional, private and anonymous memory (MB) from ``/proc/<pid>/smaps_rollup``."""
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1])
    private = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return {"rss_mb": round(fields.get("Rss", 0) / 1024, 1), "pss_mb": round(fields.get("Pss", 0) / 1024, 1),
            "private_mb": round(private / 1024, 1), "anonymous_mb": round(fields.get("Anonymous", 0) / 1024, 1)}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("localhost", 0))
        return probe.getsockname()[1]


@contextmanager
def chroma_server(path: Path, port: int, timeout: float = 120.0) -> Iterator[subprocess.Popen[bytes]]:
    """``chroma run --path PATH --port PORT`` (the CLI of this interpreter's chromadb), up until the block ends."""
    chroma = shutil.which("chroma", path=str(Path(sys.executable).parent)) or "chroma"
    server = subprocess.Popen([chroma, "run", "--path", str(path), "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"chroma run exited with {server.returncode}")
            try:
                socket.create_connection(("localhost", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"chroma run did not listen on port {port} within {timeout:g} s") from None
                time.sleep(0.5)
        yield server
    finally:
        server.terminate()
        server.wait(timeout=60)
