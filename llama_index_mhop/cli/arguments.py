"""The ``mhop`` command's argument definitions and checks, and its ``mhop.toml`` configuration file, in the
standard library alone, so ``mhop --help`` and argument errors import no heavy library. ``mhop.toml`` has the
sections ``[embedding]``, ``[chroma]``, ``[indexing]``, ``[retrieval]`` and ``[lm]``; every key is optional
and a command-line flag overrides it. A bad file is a one-line error naming the file and the key."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench.cli import RETRIEVER_NAMES, add_bench_arguments, add_optimize_arguments

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the standard library's TOML reader arrived in 3.11
    import tomli as tomllib

__all__ = ["CONFIG_FILE", "SYNC_LOG_SUFFIX", "ConfigError", "collection_name_problem", "find_config", "load_config",
           "make_parser", "options_problem", "timeout_problem"]

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


def options_problem(args: argparse.Namespace) -> str | None:
    """Why ``--chroma-timeout`` or ``--collection`` (flag, environment or mhop.toml) cannot be used, or None."""
    if hasattr(args, "chroma_timeout") and (problem := timeout_problem(args.chroma_timeout)):
        return problem
    if isinstance(getattr(args, "collection", None), str):
        return collection_name_problem(args.collection)
    return None


def _add_store_arguments(parser: argparse.ArgumentParser, graph_dir: str) -> None:
    parser.add_argument("--graph-dir", help=f"{graph_dir} (default: graph/ beside --chroma-path)")
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
    index.add_argument("--no-delete", action="store_true",
                       help="only add and update: keep documents indexed from PATH that are gone from it")
    _add_store_arguments(index, "where the graph index is kept")
    delete = sub.add_parser("delete", help="remove documents by doc id (a file name alone when unambiguous)")
    delete.add_argument("doc_ids", nargs="+", metavar="DOC_ID")
    delete.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    _add_store_arguments(delete, "the graph index, if any")
    query = sub.add_parser("query", help="retrieve passages for a question (and answer it when an LM is set)")
    query.add_argument("query")
    query.add_argument("--retriever", default="rrf_fusion", choices=RETRIEVER_NAMES)
    query.add_argument("--top-k", type=int, default=5)
    query.add_argument("--explain", action="store_true", help="print the retriever's trace")
    query.add_argument("--json", action="store_true",
                       help="print one JSON document (results, the trace with --explain, the answer with --lm)")
    query.add_argument("--lm", default="none", help="none | local | a dspy model string")
    query.add_argument("--program", help="a compiled program of the retriever (JSON from mhop optimize)")
    _add_store_arguments(query, "the graph index of hippo_graph")
    status = sub.add_parser("status", help="what is indexed, where, when it was last synced")
    _add_store_arguments(status, "the graph index")
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


CONFIG_FILE = "mhop.toml"
#: Deepest nesting of tables and arrays read: a setting sits at depth 2 ([section] key = value).
MAX_NESTING = 8


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class _Key:
    dest: str  # the command line's name for the setting (its argparse dest)
    kind: type
    minimum: int | None = None
    maximum: int | None = None
    invert: bool = False  # the flag says the opposite (delete_missing = true is no --no-delete)


_SCHEMA: dict[str, dict[str, _Key]] = {
    "embedding": {"model": _Key("embed_model", str)},
    "chroma": {"path": _Key("chroma_path", str), "host": _Key("chroma_host", str),
               "port": _Key("chroma_port", int, 1, 65535), "collection": _Key("collection", str)},
    "indexing": {"graph": _Key("graph", bool), "graph_dir": _Key("graph_dir", str),
                 "delete_missing": _Key("no_delete", bool, invert=True)},
    "retrieval": {"retriever": _Key("retriever", str), "top_k": _Key("top_k", int, 1, 1000)},
    "lm": {"model": _Key("lm", str)},
}
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false"}


def find_config(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The configuration file to read: ``explicit`` (which must exist), else ``./mhop.toml`` if present."""
    if explicit is not None:
        path = Path(explicit)
        if not path.is_file():
            raise ConfigError(f"{path}: no such configuration file")
        return path
    default = Path(CONFIG_FILE)
    return default if default.is_file() else None


def _shown(value: Any) -> str:
    """A value as an error message quotes it: its repr, cut short (it may be a long or nested array)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _nesting(value: Any) -> int:
    """How deep tables and arrays nest in ``value``, counted without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list)):
            deepest = max(deepest, depth + 1)
            if deepest > MAX_NESTING:
                break
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, Mapping) else item))
    return deepest


def _check(path: Path, name: str, key: _Key, value: Any) -> Any:
    # bool is an int in Python: a port of `true` must not pass as 1.
    if not isinstance(value, key.kind) or (key.kind is int and isinstance(value, bool)):
        raise ConfigError(f"{path}: {name} must be {_TYPE_NAMES[key.kind]}, got {_shown(value)}")
    if key.minimum is not None and not key.minimum <= value <= (key.maximum or value):
        raise ConfigError(f"{path}: {name} must be between {key.minimum} and {key.maximum}, got {value}")
    return (not value) if key.invert else value


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The command-line defaults (by argparse dest) a configuration file sets; ConfigError when it is bad."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable TOML file ({exc})") from exc
    except RecursionError:  # the standard library's reader recurses once per level of nesting
        raise ConfigError(f"{path}: not a readable TOML file (arrays or tables nested too deeply)") from None
    if _nesting(data) > MAX_NESTING:
        raise ConfigError(f"{path}: arrays or tables nested more than {MAX_NESTING} levels deep")
    defaults: dict[str, Any] = {}
    for section, values in data.items():
        keys = _SCHEMA.get(section)
        if keys is None:
            raise ConfigError(f"{path}: unknown section [{section}] (known: {', '.join(_SCHEMA)})")
        if not isinstance(values, Mapping):
            raise ConfigError(f"{path}: {section} must be a section ([{section}]), got {_shown(values)}")
        for name, value in values.items():
            key = keys.get(name)
            if key is None:
                raise ConfigError(f"{path}: unknown key {section}.{name} (known: {', '.join(keys)})")
            defaults[key.dest] = _check(path, f"{section}.{name}", key, value)
    return defaults
