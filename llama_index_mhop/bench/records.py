"""Reading dataset files for :mod:`llama_index_mhop.bench.loaders`: records from JSON or JSON Lines, typed fields
with errors that name the file, record and field, and where a dataset's questions and corpus files are."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..stores.corpus import join_sentences

__all__ = ["DatasetFormatError", "PathLike", "body_text", "check_limit", "corpus_file", "dataset_name", "get_field",
           "question_id", "questions_file", "read_records", "record_ref", "resolve_path", "text_field"]

PathLike = str | os.PathLike[str]


class DatasetFormatError(ValueError):
    """A dataset file that does not have the expected shape: ``file``, ``record`` (``"record 3 (id 'abc')"``,
    ``"line 7"``; None for a file-level problem) and ``field`` (or None) say where."""

    def __init__(self, file: PathLike, message: str, record: str | None = None, field: str | None = None):
        self.file = str(file)
        self.record = record
        self.field = field
        where = ", ".join(part for part in (record, f"field {field!r}" if field else None) if part)
        super().__init__(f"{self.file}: {where + ': ' if where else ''}{message}")


def record_ref(index: int, record: Any, id_keys: Iterable[str] = ("_id", "id", "uid")) -> str:
    if isinstance(record, dict):
        for key in id_keys:
            if isinstance(record.get(key), (str, int)) and not isinstance(record.get(key), bool):
                return f"record {index} (id {record[key]!r})"
    return f"record {index}"


def read_records(path: Path) -> list[Any]:
    """A JSON list, or JSON lines (one value per non-blank line)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetFormatError(path, f"cannot be read ({exc})") from exc
    if path.suffix.lower() == ".jsonl":
        records = []
        for number, line in enumerate(raw.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetFormatError(path, f"not valid JSON ({exc.msg})", record=f"line {number}") from exc
        return records
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(path, f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    if not isinstance(data, list):
        raise DatasetFormatError(path, f"expected a JSON list of records, got a JSON {type(data).__name__}")
    return data


def get_field(record: Any, key: str, kind: type | tuple[type, ...], path: Path, ref: str) -> Any:
    if not isinstance(record, dict):
        raise DatasetFormatError(path, f"expected a JSON object, got {type(record).__name__}", record=ref)
    if key not in record:
        raise DatasetFormatError(path, "is missing", record=ref, field=key)
    value = record[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        names = " or ".join(t.__name__ for t in kinds)
        raise DatasetFormatError(path, f"expected {names}, got {type(value).__name__}", record=ref, field=key)
    return value


def text_field(record: Any, key: str, path: Path, ref: str) -> str:
    value = get_field(record, key, str, path, ref)
    if not value.strip():
        raise DatasetFormatError(path, "is empty", record=ref, field=key)
    return value


def body_text(value: Any, path: Path, ref: str, key: str) -> str:
    """A passage body given as a string or a list of sentences."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return join_sentences(value)
    raise DatasetFormatError(path, f"expected a string or a list of sentences, got {type(value).__name__}",
                             record=ref, field=key)


def question_id(record: dict, keys: Iterable[str], index: int) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return str(index)


def questions_file(folder: Path) -> Path:
    """The question file of a dataset folder: ``questions.json(l)``, else the one non-corpus JSON file."""
    for name in ("questions.json", "questions.jsonl"):
        if (folder / name).is_file():
            return folder / name
    candidates = sorted(
        p for p in folder.iterdir()
        if p.is_file() and p.suffix.lower() in (".json", ".jsonl") and "corpus" not in p.stem.lower()
    )
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise DatasetFormatError(folder, "holds no question file (questions.json, NAME.json or NAME.jsonl)")
    names = ", ".join(p.name for p in candidates)
    raise DatasetFormatError(folder, f"holds several question files ({names}); pass the one to load")


def corpus_file(questions: Path, suffixes: tuple[str, ...] = (".json", ".jsonl")) -> Path | None:
    """The corpus beside a question file: ``NAME_corpus.json(l)`` or ``corpus.json(l)``."""
    for stem in (f"{questions.stem}_corpus", "corpus"):
        for suffix in suffixes:
            candidate = questions.with_name(stem + suffix)
            if candidate.is_file() and candidate != questions:
                return candidate
    return None


def resolve_path(path: PathLike) -> Path:
    resolved = Path(path)
    if not resolved.exists():
        raise DatasetFormatError(resolved, "does not exist")
    return questions_file(resolved) if resolved.is_dir() else resolved


def dataset_name(path: PathLike, questions: Path) -> str:
    given = Path(path)
    return given.name if given.is_dir() else questions.stem


def check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")


