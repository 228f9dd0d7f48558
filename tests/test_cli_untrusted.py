"""The CLI prints corpus text, titles and queries as plain text: no markup, no hyperlinks, no raw control codes."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from llama_index_mhop.cli import commands as cli
from llama_index_mhop.cli.commands import main as mhop

HOSTILE_TITLE = "[bold]Evil\x1b]0;pwned\x07 Title"
HOSTILE_TEXT = (
    "Alice Hart founded Hartwell Mills. [/bold] Visit [link=https://evil.example]the mill[/link] today. "
    "\x1b[31mRED\x1b[0m and a NUL\x00 byte and an override \u202egnp.exe"
)


@pytest.fixture()
def terminal(monkeypatch):
    """The CLI's console as a colour terminal writing to a buffer, so hyperlinks and styles would show."""
    buffer = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buffer, force_terminal=True, color_system="truecolor",
                                                width=400))
    return buffer


@pytest.fixture()
def store(tmp_path):
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([
        {"title": HOSTILE_TITLE, "text": HOSTILE_TEXT},
        {"title": "Bob Stone", "text": "Bob Stone is a baker in Leeds."},
    ]))
    args = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(corpus), "--quiet", *args]) == 0
    return args


def test_passage_markup_and_controls_are_printed_as_data(store, terminal):
    assert mhop(["query", "Who founded Hartwell Mills?", "--retriever", "vector", *store]) == 0
    out = terminal.getvalue()
    assert "[/bold]" in out and "[link=https://evil.example]the mill[/link]" in out
    assert "\x1b]8;" not in out  # no OSC 8 hyperlink
    assert "\\x1b[31mRED\\x1b[0m" in out and "\x1b[31mRED" not in out
    assert "\\x00" in out and "\x00" not in out
    assert "\\u202e" in out and "\u202e" not in out
    assert "[bold]Evil\\x1b]0;pwned\\x07 Title" in out and "\x07" not in out


def test_query_with_markup_is_printed_as_data(store, terminal):
    assert mhop(["query", "who is [/x] Alice [link=https://evil.example]x", "--retriever", "vector", *store]) == 0
    out = terminal.getvalue()
    assert "who is [/x] Alice [link=https://evil.example]x" in out and "\x1b]8;" not in out


def test_error_quoting_markup_is_printed_as_data(tmp_path, terminal):
    missing = tmp_path / "[/red] missing [link=https://evil.example]"
    assert mhop(["index", str(missing), "--chroma-path", str(tmp_path / "c")]) == 2
    out = terminal.getvalue()
    assert f"{missing} does not exist" in out and "\x1b]8;" not in out


@pytest.mark.parametrize("query", ["", "   ", "\t\n", "\x00\x1b"])
def test_empty_query_is_a_clear_error(store, terminal, query):
    assert mhop(["query", query, "--retriever", "vector", *store]) == 2
    assert "the query is empty" in terminal.getvalue()
