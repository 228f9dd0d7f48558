"""The ``mhop`` command's argument definitions and checks, in the standard library alone.

``mhop --help`` and argument errors are answered without importing Chroma, LlamaIndex, DSPy, torch or numpy:
the commands import what they need when they run.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..bench.cli import RETRIEVER_NAMES, add_bench_arguments, add_optimize_arguments
from .config import CONFIG_FILE

__all__ = ["SYNC_LOG_SUFFIX", "collection_name_problem", "make_parser", "timeout_problem"]

DEFAULT_HOME = os.environ.get("MHOP_HOME", "./.mhop")

#: The passage index keeps the time and counts of its last sync in a collection named after it plus this suffix.
SYNC_LOG_SUFFIX = ".sync"
# Chroma's rule for a collection name: 3-512 characters from [a-zA-Z0-9._-], starting and ending with a letter or
# a digit, no two consecutive periods, not an IPv4 address.
_CHROMA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]")
_CHROMA_NAME_RULE = ("Chroma collection names have 3-512 characters from [a-zA-Z0-9._-], start and end with a "
                     "letter or digit, contain no '..' and are not an IPv4 address")


def _chroma_accepts(name: str) -> bool:
    if not _CHROMA_NAME.fullmatch(name) or ".." in name:
        return False
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return True
    return False


def collection_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a passage collection (a one-line message naming Chroma's rule), or None."""
    if not _chroma_accepts(name):
        return f"--collection {name!r}: {_CHROMA_NAME_RULE}"
    if not _chroma_accepts(name + SYNC_LOG_SUFFIX):
        limit = 512 - len(SYNC_LOG_SUFFIX)
        return (f"--collection {name[:40]!r}... has {len(name)} characters: at most {limit} here, since the sync log "
                f"beside it is named NAME{SYNC_LOG_SUFFIX} ({_CHROMA_NAME_RULE})")
    return None


def timeout_problem(value: Any) -> str | None:
    """Why ``value`` (``--chroma-timeout``, None for the default) is not a usable timeout, or None."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if math.isfinite(seconds) and seconds > 0:
        return None
    return f"--chroma-timeout must be a positive finite number of seconds, got {value}"


def _add_store_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chroma-path", default=os.path.join(DEFAULT_HOME, "chroma"),
                        help="directory of the embedded Chroma store (default: %(default)s)")
    parser.add_argument("--chroma-host", default=os.environ.get("MHOP_CHROMA_HOST"),
                        help="a Chroma server's host instead of the embedded store (env MHOP_CHROMA_HOST)")
    parser.add_argument("--chroma-port", type=int, default=os.environ.get("MHOP_CHROMA_PORT"),
                        help="the Chroma server's port (env MHOP_CHROMA_PORT, default 8000)")
    parser.add_argument("--chroma-timeout", type=float, default=os.environ.get("MHOP_CHROMA_TIMEOUT"),
                        help="seconds a Chroma server may take to answer (env MHOP_CHROMA_TIMEOUT, default 30)")
    parser.add_argument("--collection", default="mhop_passages", help="the passage collection (default: %(default)s)")
    parser.add_argument("--embed-model", default=None,
                        help="a local model directory or a sentence-transformers model already on disk "
                             "(default: the packaged all-MiniLM-L6-v2)")


def make_parser(handlers: Mapping[str, Callable[[argparse.Namespace], int]],
                defaults: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The ``mhop`` parser, each command running ``handlers[name]``; ``defaults`` (by dest) replace built-in ones."""
    parser = argparse.ArgumentParser(prog="mhop", description="Multi-hop retrieval over Chroma for LlamaIndex.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO")
    parser.add_argument("--config", help=f"a configuration file (default: ./{CONFIG_FILE} when present)")
    sub = parser.add_subparsers(dest="command", required=True)

    index = sub.add_parser("index", help="build or update the Chroma index of a folder or JSON corpus")
    index.add_argument("path", help="a folder of .txt/.md files or a JSON corpus")
    index.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    index.add_argument("--strict", action="store_true",
                       help="refuse the corpus when a file cannot be read (default: skip the file and name it)")
    index.add_argument("--follow-symlinks", action="store_true",
                       help="read symbolic links to files outside PATH (default: skip them and name them)")
    index.add_argument("--graph", action="store_true", help="also build the HippoRAG 2 graph index (hippo_graph)")
    index.add_argument("--graph-dir", help="where the graph index is kept (default: graph/ beside --chroma-path)")
    index.add_argument("--no-delete", action="store_true",
                       help="only add and update: keep documents indexed from PATH that are gone from it")
    _add_store_arguments(index)

    delete = sub.add_parser("delete", help="remove documents by doc id (a file name alone when unambiguous)")
    delete.add_argument("doc_ids", nargs="+", metavar="DOC_ID")
    delete.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    delete.add_argument("--graph-dir", help="the graph index, if any (default: graph/ beside --chroma-path)")
    _add_store_arguments(delete)

    query = sub.add_parser("query", help="retrieve passages for a question (and answer it when an LM is set)")
    query.add_argument("query")
    query.add_argument("--retriever", default="rrf_fusion", choices=RETRIEVER_NAMES)
    query.add_argument("--top-k", type=int, default=5)
    query.add_argument("--explain", action="store_true", help="print the retriever's trace")
    query.add_argument("--json", action="store_true",
                       help="print one JSON document (results, the trace with --explain, the answer with --lm)")
    query.add_argument("--lm", default="none", help="none | local | a dspy model string")
    query.add_argument("--program", help="a compiled program of the retriever (JSON from mhop optimize)")
    query.add_argument("--graph-dir", help="the graph index of hippo_graph (default: graph/ beside --chroma-path)")
    _add_store_arguments(query)

    status = sub.add_parser("status", help="what is indexed, where, when it was last synced")
    status.add_argument("--graph-dir", help="the graph index (default: graph/ beside --chroma-path)")
    _add_store_arguments(status)

    demo = sub.add_parser("demo", help="index the shipped multi-hop corpus and compare retrievers on it")
    demo.add_argument("--chroma-path", default=os.path.join(DEFAULT_HOME, "demo"))
    demo.add_argument("--retrievers", default="vector,rrf_fusion,confidence_loop,hippo_graph",
                      help="comma-separated registered retrievers (default: %(default)s)")
    demo.add_argument("--top-k", type=int, default=5)
    demo.add_argument("--lm", default="none", help="none | local | a dspy model string")

    add_optimize_arguments(sub.add_parser("optimize",
                                          help="compile a retriever's DSPy program against a retrieval metric"))
    add_bench_arguments(sub.add_parser("bench", help="benchmark retrievers on a multi-hop dataset"))
    for name, command in sub.choices.items():
        command.set_defaults(func=handlers[name])
        if name != "optimize":  # mhop.toml sets the store, the index and the query; optimize takes its own
            known = {action.dest for action in command._actions}
            command.set_defaults(**{dest: value for dest, value in (defaults or {}).items() if dest in known})
    return parser
