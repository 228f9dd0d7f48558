"""The graph index's JSON files read as untrusted input: every problem is one ``ValueError`` line naming the file
(and line) and the field, never a ``RecursionError``, ``AttributeError``, ``KeyError`` or ``OverflowError``.

Files on disk may be truncated by a crash or edited by hand, so each value is checked for its type before
anything is built from it. A field is named by its path from the top of the document (``passages.<id>.facts``).
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["check_field", "check_value", "json_object", "parse_json", "read_json_object", "string_map", "triple_map", "write_json"]

_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", type(None): "null"}


def parse_json(text: str, where: str) -> Any:
    """Parse JSON text; ``where`` names it in the error.

    Raises:
        ValueError: the text is not JSON, is nested too deeply for the parser, or holds an integer too long to
            convert (``json.JSONDecodeError`` for plain syntax errors, so a caller can tell a cut-off line).
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a file this package wrote") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise ValueError(f"{where}: not valid JSON ({exc})") from None


def read_json_object(path: Path) -> dict[str, Any]:
    """A saved JSON object, or a ValueError naming the file (a truncated or edited file is never half-read)."""
    return json_object(path.read_bytes(), path)


def json_object(data: bytes, path: Path) -> dict[str, Any]:
    """The JSON object of ``data``, the bytes of ``path``, or a ValueError naming the file."""
    try:
        parsed = parse_json(data.decode("utf-8"), str(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); the Chroma data is untouched") from None
    return check_value(parsed, dict, str(path), "top level")


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically: to a temporary file first, then renamed over ``path``."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")  # no two writers share it
    tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)  # never leave a half-written file behind


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 40 else f"a {len(text)}-digit number"
    return _NAMES.get(type(value), type(value).__name__)


def check_value(value: Any, kinds: type | tuple[type, ...], where: str, field: str) -> Any:
    """``value`` if it is one of ``kinds`` (a bool is never an integer), else a ValueError naming the field."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    expected = " or ".join(_NAMES.get(k, k.__name__) for k in kinds)
    raise ValueError(f"{where}: {field}: expected {expected}, got {_describe(value)}")


def check_field(data: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str, prefix: str = "",
                default: Any = ...) -> Any:
    """``data[key]`` checked by :func:`check_value`; ``default`` when absent, or an error when no default."""
    field = f"{prefix}{key}"
    if key not in data:
        if default is ...:
            raise ValueError(f"{where}: {field}: missing")
        return default
    return check_value(data[key], kinds, where, field)


def string_map(data: Mapping[str, Any], key: str, where: str, prefix: str = "") -> dict[str, str]:
    """A required field holding an object of strings."""
    value = check_field(data, key, dict, where, prefix)
    for name, item in value.items():
        check_value(item, str, where, f"{prefix}{key}.{name}")
    return value


def triple_map(data: Mapping[str, Any], key: str, where: str, prefix: str = "") -> dict[str, tuple[str, str, str]]:
    """A required field holding an object of ``[subject, predicate, object]`` string lists."""
    value = check_field(data, key, dict, where, prefix)
    out = {}
    for name, item in value.items():
        field = f"{prefix}{key}.{name}"
        check_value(item, list, where, field)
        if len(item) != 3:
            raise ValueError(f"{where}: {field}: expected [subject, predicate, object], got {len(item)} items")
        for part in item:
            check_value(part, str, where, field)
        out[name] = (item[0], item[1], item[2])
    return out
