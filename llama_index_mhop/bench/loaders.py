"""Benchmark datasets: questions with gold passage ids, and the corpus those ids point into (seed 002). One
loader per published format (HotpotQA, 2Wiki, MuSiQue, HippoRAG 2, HoVer); a malformed file raises
:class:`DatasetFormatError` naming the file, the record and the field."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..rules.text import escape_controls, normalize_title
from ..stores.corpus import join_sentences, stable_id

__all__ = ["FORMATS", "BenchDataset", "BenchQuestion", "DatasetFormatError", "Passage", "detect_format", "load_dataset",
           "load_hipporag", "load_hotpotqa", "load_hover", "load_musique"]

logger = logging.getLogger(__name__)

#: The formats :func:`load_dataset` reads (plus ``"auto"``).
FORMATS = ("hotpotqa", "musique", "hipporag", "hover")
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
    candidates = sorted(p for p in folder.iterdir()
                        if p.is_file() and p.suffix.lower() in (".json", ".jsonl") and "corpus" not in p.stem.lower())
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


@dataclass(frozen=True)
class Passage:
    """One corpus passage. ``passage_id`` is what gold ids and retrieved nodes are compared by."""

    passage_id: str
    title: str
    text: str


@dataclass
class BenchQuestion:
    """One benchmark question and the ids of the passages that answer it. ``metadata`` holds what the format offers
    beside (answer, type, hops, ...), and ``"context_ids"``: the passage ids shown with the question, if listed."""

    qid: str
    text: str
    gold_ids: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchDataset:
    """Questions and the corpus they are asked against."""

    name: str
    passages: list[Passage]
    questions: list[BenchQuestion]
    format: str = ""
    source: str = ""

    def missing_gold(self) -> list[tuple[str, str]]:
        """``(qid, gold_id)`` pairs whose gold passage is not in the corpus (such a question cannot be solved)."""
        ids = {p.passage_id for p in self.passages}
        return [(q.qid, g) for q in self.questions for g in q.gold_ids if g not in ids]

    def head(self, n: int, context_only: bool = False) -> BenchDataset:
        """The first ``n`` questions; with ``context_only``, only the passages of their contexts and gold (ValueError
        for ``n`` < 1, or ``context_only`` on a format that lists no per-question context)."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        questions = self.questions[:n]
        passages = self.passages
        if context_only:
            if any("context_ids" not in q.metadata for q in questions):
                raise ValueError(f"dataset {self.name!r} lists no per-question context (metadata 'context_ids')")
            keep = {pid for q in questions for pid in [*q.metadata["context_ids"], *q.gold_ids]}
            passages = [p for p in self.passages if p.passage_id in keep]
        return replace(self, questions=questions, passages=passages)


def _read_questions(path: PathLike, limit: int | None,
                    read: Callable[[Path, int, Any, str], BenchQuestion | None]) -> tuple[Path, list[BenchQuestion]]:
    """``path``'s question file and its first ``limit`` questions, each ``read(file, index, record, ref)``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    qpath = resolve_path(path)
    questions: list[BenchQuestion] = []
    for index, record in enumerate(read_records(qpath)):
        if limit is not None and len(questions) >= limit:
            break
        question = read(qpath, index, record, record_ref(index, record))
        if question is not None:
            questions.append(question)
    return qpath, questions


def _dataset(path: PathLike, qpath: Path, passages: list[Passage], questions: list[BenchQuestion],
             fmt: str) -> BenchDataset:
    """The dataset, named after its folder (else its question file); gold passages not in the corpus are warned of."""
    name = Path(path).name if Path(path).is_dir() else qpath.stem
    dataset = BenchDataset(name, passages, questions, fmt, str(qpath))
    missing = dataset.missing_gold()
    if missing:
        # Question ids and passage titles come from the dataset's files: escaped, as untrusted text.
        logger.warning("%s: %d gold passages of %d questions are not in the corpus (first: %s of question %s)",
                       escape_controls(dataset.source), len(missing), len({q for q, _ in missing}),
                       escape_controls(missing[0][1]), escape_controls(missing[0][0]))
    return dataset


def _title_text_corpus(path: Path, make_id: Callable[[str, str], str]) -> list[Passage]:
    """A corpus file: a list (or JSON lines) of ``{title, text}`` records, or an object ``{title: text}``."""
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetFormatError(path, f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
        if isinstance(data, dict):  # {title: [sentences]} as HippoRAG publishes HotpotQA corpora
            pairs = [(title, body_text(body, path, f"title {title!r}", "text")) for title, body in data.items()]
            return list(dict.fromkeys(Passage(make_id(title, text), title, text) for title, text in pairs))
        if not isinstance(data, list):
            raise DatasetFormatError(path, f"expected a list of {{title, text}} records, got {type(data).__name__}")
        records = data
    else:
        records = read_records(path)
    passages = []
    for index, record in enumerate(records):
        ref = record_ref(index, record, ("id", "idx"))
        title = get_field(record, "title", str, path, ref)
        key = "text" if isinstance(record, dict) and "text" in record else "paragraph_text"
        text = body_text(get_field(record, key, (str, list), path, ref), path, ref, key)
        passages.append(Passage(make_id(title, text), title, text))
    return list(dict.fromkeys(passages))  # a repeated passage (same id, title and text) once


def load_hotpotqa(path: PathLike, corpus: PathLike | None = None, limit: int | None = None) -> BenchDataset:
    """Raw HotpotQA: gold = the distinct titles of ``supporting_facts``, ``passage_id`` = title. The corpus is
    ``corpus``, else ``corpus.json`` / ``NAME_corpus.json`` beside the questions, else the contexts' union."""
    context_passages: dict[str, Passage] = {}

    def read(qpath: Path, index: int, record: Any, ref: str) -> BenchQuestion:
        text = text_field(record, "question", qpath, ref)
        facts = get_field(record, "supporting_facts", list, qpath, ref)
        for fact in facts:
            if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                raise DatasetFormatError(qpath, f"expected [title, sentence_index] pairs, got {fact!r}",
                                         record=ref, field="supporting_facts")
        gold = list(dict.fromkeys(fact[0] for fact in facts))
        if not gold:
            raise DatasetFormatError(qpath, "names no supporting passage", record=ref, field="supporting_facts")
        context_ids = []
        for entry in get_field(record, "context", list, qpath, ref):
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
                raise DatasetFormatError(qpath, f"expected [title, [sentences]] pairs, got {entry!r:.80}",
                                         record=ref, field="context")
            title = entry[0]
            context_ids.append(title)
            context_passages.setdefault(title, Passage(title, title, body_text(entry[1], qpath, ref, "context")))
        metadata = {k: record[k] for k in ("answer", "type", "level") if k in record}
        metadata["context_ids"] = context_ids
        return BenchQuestion(question_id(record, ("_id", "id"), index), text, gold, metadata)
    qpath, questions = _read_questions(path, limit, read)
    corpus_path = Path(corpus) if corpus is not None else corpus_file(qpath)
    passages = (_title_text_corpus(corpus_path, lambda title, _: title) if corpus_path is not None
                else list(context_passages.values()))
    return _dataset(path, qpath, passages, questions, "hotpotqa")


def _paragraph_dataset(path: PathLike, corpus: PathLike | None, limit: int | None, text_key: str,
                       fmt: str) -> BenchDataset:
    union: dict[str, Passage] = {}
    skipped = 0

    def read(qpath: Path, index: int, record: Any, ref: str) -> BenchQuestion | None:
        nonlocal skipped
        text = text_field(record, "question", qpath, ref)
        # HippoRAG 2 names the list "contexts" in some files; MuSiQue and the rest say "paragraphs".
        list_key = "contexts" if "paragraphs" not in record and "contexts" in record else "paragraphs"
        paragraphs = get_field(record, list_key, list, qpath, ref)
        gold: list[str] = []
        context_ids: list[str] = []
        for position, paragraph in enumerate(paragraphs):
            pref = f"{ref}, {list_key}[{position}]"
            title = get_field(paragraph, "title", str, qpath, pref)
            other = "text" if text_key == "paragraph_text" else "paragraph_text"
            key = other if text_key not in paragraph and other in paragraph else text_key
            body = body_text(get_field(paragraph, key, (str, list), qpath, pref), qpath, pref, key)
            supporting = paragraph.get("is_supporting", False)
            if not isinstance(supporting, bool):
                raise DatasetFormatError(qpath, f"expected true or false, got {supporting!r}", record=pref,
                                         field="is_supporting")
            pid = stable_id(title, body)
            union.setdefault(pid, Passage(pid, title, body))
            context_ids.append(pid)
            if supporting and pid not in gold:
                gold.append(pid)
        if not gold:
            if record.get("answerable") is False:  # MuSiQue-Full's unanswerable twins have no gold to find
                skipped += 1
                return None
            raise DatasetFormatError(qpath, "no paragraph has is_supporting: true", record=ref, field=list_key)
        metadata: dict[str, Any] = {k: record[k] for k in ("answer", "answer_aliases", "answerable") if k in record}
        if isinstance(record.get("question_decomposition"), list):
            metadata["hops"] = len(record["question_decomposition"])
        metadata["context_ids"] = context_ids
        return BenchQuestion(question_id(record, ("id", "_id"), index), text, gold, metadata)
    qpath, questions = _read_questions(path, limit, read)
    if skipped:
        logger.info("%s: skipped %d unanswerable questions without gold paragraphs", qpath, skipped)
    corpus_path = Path(corpus) if corpus is not None else corpus_file(qpath)
    passages = _title_text_corpus(corpus_path, stable_id) if corpus_path is not None else list(union.values())
    return _dataset(path, qpath, passages, questions, fmt)


def load_musique(path: PathLike, corpus: PathLike | None = None, limit: int | None = None) -> BenchDataset:
    """MuSiQue (JSON list or lines): gold = paragraphs with ``is_supporting: true``, ``passage_id =
    stable_id(title, text)``; corpus as in :func:`load_hotpotqa`. Unanswerable questions without gold are skipped."""
    return _paragraph_dataset(path, corpus, limit, "paragraph_text", "musique")


def load_hipporag(path: PathLike, corpus: PathLike | None = None, limit: int | None = None) -> BenchDataset:
    """HippoRAG 2's ``reproduce/dataset/NAME.json`` with ``NAME_corpus.json``; gold and ids as in
    :func:`load_musique`."""
    return _paragraph_dataset(path, corpus, limit, "text", "hipporag")


def _hover_corpus(path: Path) -> list[Passage]:
    passages = []
    for index, record in enumerate(read_records(path)):
        ref = f"line {index + 1}" if path.suffix.lower() == ".jsonl" else f"record {index}"
        text = body_text(get_field(record, "text", (str, list), path, ref), path, ref, "text")
        title = record.get("title")
        if title is None and " | " in text:  # a pre-rendered "title | text" passage
            title, text = text.split(" | ", 1)
        if not isinstance(title, str) or not title.strip():
            raise DatasetFormatError(path, "is missing or empty", record=ref, field="title")
        prefix = f"{title} | "
        if text.startswith(prefix):
            text = text[len(prefix):]
        # HoVer compares normalised titles: two corpus titles that normalise alike are one passage for scoring.
        passages.append(Passage(normalize_title(title), title, text))
    return passages


def load_hover(path: PathLike, corpus: PathLike | None = None, limit: int | None = None) -> BenchDataset:
    """HoVer claims and their JSON-lines corpus (``corpus``, else ``NAME_corpus.jsonl`` or ``corpus.jsonl``):
    gold and ``passage_id`` are titles normalised by :func:`normalize_title`; a ``"title | text"`` passage is split
    at the first ``" | "``."""
    def read(qpath: Path, index: int, record: Any, ref: str) -> BenchQuestion:
        claim = text_field(record, "claim", qpath, ref)
        titles: list[str] = []
        for fact in get_field(record, "supporting_facts", list, qpath, ref):
            if isinstance(fact, dict) and isinstance(fact.get("key"), str):
                titles.append(fact["key"])
            elif isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str):
                titles.append(fact[0])
            else:
                raise DatasetFormatError(qpath, f"expected [title, sentence_index] or {{key, value}}, got {fact!r}",
                                         record=ref, field="supporting_facts")
        gold = list(dict.fromkeys(normalize_title(title) for title in titles))
        if not gold:
            raise DatasetFormatError(qpath, "names no supporting passage", record=ref, field="supporting_facts")
        metadata = {k: record[k] for k in ("label", "num_hops", "hpqa_id") if k in record}
        return BenchQuestion(question_id(record, ("uid", "id"), index), claim, gold, metadata)
    qpath, questions = _read_questions(path, limit, read)
    corpus_path = Path(corpus) if corpus is not None else corpus_file(qpath, (".jsonl", ".json"))
    if corpus_path is None:
        raise DatasetFormatError(qpath, "no HoVer corpus found beside the claims (NAME_corpus.jsonl or "
                                 "corpus.jsonl); pass corpus=", field="corpus")
    return _dataset(path, qpath, _hover_corpus(corpus_path), questions, "hover")


def detect_format(path: PathLike) -> str:
    """The format of a dataset folder or question file, from the shape of its first record (DatasetFormatError when
    it holds no records or records of no known format)."""
    qpath = resolve_path(path)
    records = read_records(qpath)
    if not records:
        raise DatasetFormatError(qpath, "holds no records")
    first = records[0]
    if not isinstance(first, dict):
        raise DatasetFormatError(qpath, f"expected JSON objects, got {type(first).__name__}", record="record 0")
    if "claim" in first:
        return "hover"
    if "supporting_facts" in first and "context" in first:
        return "hotpotqa"
    paragraphs = first.get("paragraphs", first.get("contexts"))
    if isinstance(paragraphs, list) and paragraphs and isinstance(paragraphs[0], dict):
        return "musique" if "paragraph_text" in paragraphs[0] else "hipporag"
    keys = ", ".join(sorted(first)[:8])
    raise DatasetFormatError(qpath, f"records of no known format (keys: {keys}); expected one of {FORMATS}",
                             record=record_ref(0, first))


_LOADERS: dict[str, Callable[..., BenchDataset]] = {
    "hotpotqa": load_hotpotqa, "musique": load_musique, "hipporag": load_hipporag, "hover": load_hover}


def load_dataset(path: PathLike, format: str = "auto", limit: int | None = None) -> BenchDataset:
    """Load a dataset folder or question file in one of :data:`FORMATS` (``"auto"``: from the first record),
    keeping the first ``limit`` questions (the corpus stays whole); ValueError for a bad format or limit."""
    if format != "auto" and format not in _LOADERS:
        raise ValueError(f"unknown dataset format {format!r}; expected 'auto' or one of {FORMATS}")
    fmt = detect_format(path) if format == "auto" else format
    return _LOADERS[fmt](path, limit=limit)
