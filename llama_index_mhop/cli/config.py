"""``mhop.toml``: the command line's settings in one file, validated before anything runs.

The file has five sections; every key is optional and a command-line flag overrides it::

    [embedding]
    model = "./models/my-embedder"   # a local model directory or a sentence-transformers model on disk

    [chroma]
    path = "./.mhop/chroma"          # the embedded store, or:
    host = "chroma.internal"         # a Chroma server
    port = 8000
    collection = "mhop_passages"

    [indexing]
    graph = true                     # also keep the HippoRAG 2 graph index
    graph_dir = "./.mhop/graph"
    delete_missing = true            # `mhop index DIR` mirrors DIR

    [retrieval]
    retriever = "hippo_graph"
    top_k = 5

    [lm]
    model = "none"                   # none | local | a DSPy model string

A bad file is a one-line error naming the file and the key.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the standard library's TOML reader arrived in 3.11
    import tomli as tomllib

__all__ = ["CONFIG_FILE", "ConfigError", "find_config", "load_config"]

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
        if isinstance(item, Mapping):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_NESTING:
            break
        stack.extend((child, depth + 1) for child in children)
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
