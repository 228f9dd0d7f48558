"""Files replaced whole: written under a temporary name beside their target, then renamed over it."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["atomic_path", "write_atomic"]


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) to write to: renamed over ``path`` when the block ends, removed
    when it raises, so a crash never leaves a half-written ``path``."""
    # A name of its own (no two writers share it), ".partial" in it for the folder's cleanup.
    partial = path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}.partial{path.suffix}")
    try:
        yield partial
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (see :func:`atomic_path`)."""
    with atomic_path(path) as partial:
        partial.write_bytes(data)
