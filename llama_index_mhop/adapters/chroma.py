"""Chroma's private names the package reads, each in one function (checked by tests/test_adapters.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["http_session"]


def http_session(client: Any) -> Any:
    """The ``httpx.Client`` a Chroma ``HttpClient`` sends its requests through, None for an embedded client. Reads
    ``Client._server._session``: chromadb sets no timeout on its HTTP requests and takes none in its settings, so a
    frozen server is only bounded by setting the session's."""
    return getattr(getattr(client, "_server", None), "_session", None)
