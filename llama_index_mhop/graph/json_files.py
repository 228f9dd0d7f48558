"""The graph index's JSON files read as untrusted input: every problem is one ``ValueError`` line naming the file
(and line) and the field, never a ``RecursionError``, ``AttributeError``, ``KeyError`` or ``OverflowError``.

Files on disk may be truncated by a crash or edited by hand, so each value is checked for its type before
anything is built from it. A field is named by its path from the top of the document (``passages.<id>.facts``).

Each saved file is also checked against a digest recorded when it was written (:func:`content_hash`, the one hash
that names or checks every file of a saved index): a JSON file this package writes ends with a ``digest`` member,
the hash of every byte before it (:func:`digest_trailer`), so a byte changed anywhere is found even where the JSON
still parses (:func:`check_digest`). A file written before digests were recorded has none and is read as it is.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..rules.atomic_files import write_atomic

__all__ = ["DamagedFileError", "check_digest", "check_field", "check_file_digest", "check_model", "check_value",
           "content_hash", "digest_trailer", "file_digest", "parse_json", "read_json_file", "read_json_object",
           "string_map", "triple_map", "write_json"]

_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", type(None): "null"}


class DamagedFileError(ValueError):
    """A saved file that is unreadable or not what was written: truncated, zeroed, changed, missing."""


DIGEST_BYTES = 16
# Spaces allowed: a file parsed and written again by hand keeps its digest, which no longer matches.
_TRAILER = re.compile(rb',\s*"digest"\s*:\s*"([0-9a-f]{%d})"\s*}\s*\Z' % (2 * DIGEST_BYTES))


def content_hash(data: bytes = b"") -> Any:
    """The hash every file of a saved index is named or checked by (fed ``data`` so far)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES)


def file_digest(path: Path) -> str:
    """The :func:`content_hash` digest of a file's bytes, read a block at a time.

    Raises:
        DamagedFileError: the file cannot be read.
    """
    try:
        with open(path, "rb") as file:
            return hashlib.file_digest(file, content_hash).hexdigest()
    except OSError as exc:
        raise DamagedFileError(f"{path}: not readable ({exc})") from None


def check_file_digest(path: Path, recorded: str) -> None:
    """Check a file's bytes against the digest recorded for it when it was written.

    Raises:
        DamagedFileError: the file is unreadable or does not hold the bytes that were written.
    """
    if file_digest(path) != recorded:
        raise _mismatch(path)


def _mismatch(path: Path) -> DamagedFileError:
    return DamagedFileError(f"{path}: its bytes do not match the digest recorded when it was written (damaged or "
                            "replaced)")


def digest_trailer(digest: Any) -> str:
    """The last member of a JSON object and its closing brace: the digest of every byte written before it."""
    return f',"digest":"{digest.hexdigest()}"}}'


def check_digest(data: bytes, path: Path) -> str:
    """Check the bytes of a JSON file against the digest its writer recorded at its end (none recorded: a file
    written before digests were, read as it is).

    Returns:
        The :func:`content_hash` digest of the whole file (its bytes hashed once).

    Raises:
        DamagedFileError: the bytes are not those that were written.
    """
    found = _TRAILER.search(data, max(0, len(data) - 128))
    start = len(data) if found is None else found.start()
    digest = content_hash(memoryview(data)[:start])  # a view: a file of gigabytes is never copied
    if found is not None and digest.hexdigest() != found.group(1).decode():
        raise _mismatch(path)
    digest.update(memoryview(data)[start:])
    return digest.hexdigest()


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
    """A saved JSON object checked against its recorded digest (:func:`check_digest`), or a
    :class:`DamagedFileError` naming the file (a truncated or edited file is never half-read)."""
    return read_json_file(path)[0]


def read_json_file(path: Path) -> tuple[dict[str, Any], str]:
    """:func:`read_json_object` and the digest of the file's bytes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedFileError(f"{path}: not readable ({exc})") from None
    digest = check_digest(data, path)
    try:
        parsed = check_value(parse_json(data.decode("utf-8"), str(path)), dict, str(path), "top level")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DamagedFileError(f"{path}: not valid JSON ({exc}); the Chroma data is untouched") from None
    except ValueError as exc:
        raise DamagedFileError(str(exc)) from None
    parsed.pop("digest", None)  # the file's, checked: not a value of what it holds
    return parsed, digest


def check_model(model: type[BaseModel], data: Any, where: str) -> None:
    """Check ``data`` against a pydantic model.

    Raises:
        DamagedFileError: the first field of the wrong type, named by its path, in one line.
    """
    try:
        model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(map(str, error["loc"])) or "top level"
        raise DamagedFileError(f"{where}: {field}: {error['msg'].lower()}, got {_describe(error['input'])}") from None


def write_json(path: Path, data: dict[str, Any]) -> str:
    """Write a JSON object atomically (:func:`~..rules.atomic_files.write_atomic`), its digest recorded at its end
    (:func:`digest_trailer`), and return the digest of the file's bytes."""
    body = json.dumps({key: value for key, value in data.items() if key != "digest"}, ensure_ascii=False).encode()
    if body != b"{}":  # the digest follows the last member
        body = body[:-1] + digest_trailer(content_hash(body[:-1])).encode()
    write_atomic(path, body)
    return content_hash(body).hexdigest()


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
