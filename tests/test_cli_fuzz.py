"""Fuzzing the CLI's untrusted inputs (the query, the corpus files): every run ends in an answer or a one-line
error (exit code 0 or 2), never a traceback, and nothing it prints carries a raw control character."""

from __future__ import annotations

import io
import json
import tempfile
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from llama_index_mhop.cli import commands as cli
from llama_index_mhop.cli.commands import main as mhop

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def run(argv: list[str]) -> tuple[int, str]:
    """Run the CLI with its console writing to a buffer; the exit code and what it printed."""
    buffer = io.StringIO()
    original = cli.console
    cli.console = Console(file=buffer, width=300)
    try:
        code = mhop(argv)
    finally:
        cli.console = original
    return code, buffer.getvalue()


def raw_controls(text: str) -> set[str]:
    """Control and format characters of ``text`` besides the line ends and the tabs between a piped query's
    fields (``fields`` checks that no tab of the data got through)."""
    return {c for c in text if c not in "\n\t" and unicodedata.category(c) in ("Cc", "Cf")}


def fields(out: str) -> list[list[str]]:
    """A piped ``mhop query``'s lines, each split at its tabs: rank, score, title and passage, no other tab."""
    rows = [line.split("\t") for line in out.splitlines()]
    assert all(len(row) == 4 for row in rows), out
    return rows


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("fuzz_corpus") / "corpus.json"
    corpus.write_text(json.dumps([
        {"title": "Alice [/bold] Hart\x1b[2J", "text": "Alice Hart founded Hartwell Mills. [link=x]y[/link]\x00"},
        {"title": "Bob Stone", "text": "Bob Stone is a baker in Leeds."},
    ]))
    args = ["--chroma-path", str(tmp_path_factory.mktemp("fuzz_chroma"))]
    assert run(["index", str(corpus), "--quiet", *args])[0] == 0
    return args


@FUZZ
@given(query=st.text(max_size=200))
def test_any_query_answers_or_fails_clearly(store, query):
    code, out = run(["query", "--retriever", "vector", "--top-k", "2", *store, "--", query])
    if not "".join(c for c in query if c.isprintable()).strip():
        assert code == 2 and "the query is empty" in out
    else:
        assert code == 0 and "Bob Stone" in [title for _, _, title, _ in fields(out)]
    assert not raw_controls(out)


CORPUS_FILES = st.dictionaries(
    keys=st.sampled_from(["a.txt", "b.txt", "c.md", "notes.rst"]),
    values=st.one_of(st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.binary(max_size=300)),
    min_size=1,
)


@FUZZ
@given(files=CORPUS_FILES)
def test_any_corpus_folder_indexes_or_fails_clearly(files):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        for name, content in files.items():
            (folder / name).write_bytes(content)
        code, out = run(["index", str(folder), "--quiet", "--chroma-path", str(Path(tmp) / "chroma")])
    flat = " ".join(out.split())
    readable = {}
    for name, content in files.items():
        try:
            readable[name] = content.decode("utf-8")
        except UnicodeDecodeError:
            assert f"{name}: not UTF-8 text" in flat  # every unreadable file is named
    if any(text.strip() for text in readable.values()):
        assert code == 0 and "passages" in flat
    else:
        assert code == 2 and "holds no text to index" in flat
    assert not raw_controls(out)
