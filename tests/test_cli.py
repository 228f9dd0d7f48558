import json

import pytest

from llama_index_mhop.cli.commands import main as mhop
from llama_index_mhop.components.fact_filter import DSPyFactFilter


@pytest.fixture()
def corpus(tmp_path):
    records = [
        {"title": "Maximum Overdrive", "text": "Maximum Overdrive is a 1986 film written and directed by Stephen King. "
                                               "It was shot in and around Leland, North Carolina."},
        {"title": "Stephen King", "text": "Stephen King is an American author of horror novels, born in Portland, "
                                          "Maine."},
        {"title": "Portland, Maine", "text": "Portland is the largest city in the U.S. state of Maine."},
        {"title": "Leland, North Carolina", "text": "Leland is a town in Brunswick County, North Carolina."},
    ]
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps(records))
    return path


def test_index_then_query_every_retriever(corpus, tmp_path, capsys):
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(corpus), "--quiet", "--graph", *store]) == 0
    assert mhop(["index", str(corpus), "--quiet", *store]) == 0  # idempotent
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "4 added, 0 updated, 0 removed, 0 unchanged (4 passages)" in out
    assert "0 added, 0 updated, 0 removed, 4 unchanged (4 passages)" in out and "'passages': 4" in out
    # Each project retriever's --explain prints its own trace: a key no other retriever's trace has.
    trace_keys = {"vector": None, "bm25": None, "rrf_fusion": '"iterations"', "confidence_loop": '"rounds"',
                  "hippo_graph": '"kept_facts"'}
    for retriever, trace_key in trace_keys.items():
        code = mhop(["query", "Where was the director of the film shot in Leland born?", "--retriever", retriever,
                     "--top-k", "3", "--explain", *store])
        out = capsys.readouterr().out
        assert code == 0 and "Maximum Overdrive" in out, retriever
        if trace_key is None:
            assert "keeps no trace" in out, retriever
        else:
            assert trace_key in out, retriever
        if retriever == "hippo_graph":  # each hop of the evidence chain on a line of its own, before the trace
            assert "chain hop 1: Leland, North Carolina -> " in out
    # --program loads a compiled program into the retriever; a file that is none is a clear error.
    program = DSPyFactFilter().save_program(tmp_path / "filter.json")
    query = ["query", "Who directed Maximum Overdrive?", "--retriever", "hippo_graph", "--program", str(program)]
    assert mhop([*query, *store]) == 0 and "Maximum Overdrive" in capsys.readouterr().out
    program.write_text("{}")
    assert mhop([*query, *store]) == 2
    assert "filter.json is not a saved HippoGraphModule" in " ".join(capsys.readouterr().out.split())


def test_query_without_an_index_is_a_clear_error(tmp_path, capsys):
    assert mhop(["query", "anything", "--chroma-path", str(tmp_path / "empty")]) == 2
    assert "index a corpus first" in capsys.readouterr().out


def test_index_of_missing_path_is_a_clear_error(tmp_path, capsys):
    assert mhop(["index", str(tmp_path / "missing"), "--chroma-path", str(tmp_path / "c")]) == 2
    assert "does not exist" in capsys.readouterr().out


def test_demo_runs_and_marks_gold(tmp_path, capsys):
    assert mhop(["demo", "--chroma-path", str(tmp_path / "demo"), "--retrievers", "vector,rrf_fusion"]) == 0
    out = capsys.readouterr().out
    assert "✓" in out and "Questions with every gold passage in the top 5" in out


def test_index_follows_a_folder_edit_and_delete(tmp_path, capsys):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "Marty.txt").write_text("Marty is a 1955 film directed by Delbert Mann, shot in the Bronx.")
    (notes / "Delbert Mann.txt").write_text("Delbert Mann was an American director born in Lawrence, Kansas.")
    (notes / "Leland.txt").write_text("Leland is a town in Brunswick County, North Carolina, with a film studio.")
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(notes), "--quiet", "--graph", *store]) == 0
    (notes / "Marty.txt").write_text("Marty is a 1955 film directed by Delbert Mann, shot in Chicago.")
    (notes / "Leland.txt").unlink()
    assert mhop(["index", str(notes), "--quiet", "--graph", *store]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "0 added, 1 updated, 1 removed, 1 unchanged (2 passages)" in out and "'passages': 2" in out
    for retriever in ("vector", "rrf_fusion", "confidence_loop", "hippo_graph"):
        assert mhop(["query", "Where was the film by Delbert Mann shot, and where is Leland?", "--retriever",
                     retriever, "--top-k", "5", *store]) == 0
        out = capsys.readouterr().out
        assert "shot in Chicago" in out and "Bronx" not in out and "Leland.txt" not in out, retriever
        assert "Brunswick" not in out, retriever

    assert mhop(["status", *store]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["passages"]["documents"], status["passages"]["passages"]) == (2, 2)
    assert status["passages"]["sources"] == [str(notes.resolve())]
    assert status["passages"]["last_sync"]["removed"] == 1 and status["passages"]["last_sync"]["at"]

    assert mhop(["delete", "Marty", *store]) == 2
    assert "close matches: Marty.txt" in " ".join(capsys.readouterr().out.split())
    assert mhop(["delete", "Marty.txt", *store]) == 0
    for retriever in ("vector", "hippo_graph"):
        assert mhop(["query", "Marty film", "--retriever", retriever, *store]) == 0
        assert "Chicago" not in capsys.readouterr().out, retriever


def test_index_graph_embeds_no_passage_twice(tmp_path, capsys, monkeypatch):
    from llama_index_mhop.graph.graph_stores import GraphStores

    passages_embedded: list[str] = []
    embed = GraphStores.embed

    def recording(self, texts, short=False):
        if not short:
            passages_embedded.extend(texts)
        return embed(self, texts, short)

    monkeypatch.setattr(GraphStores, "embed", recording)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "Marty.txt").write_text("Marty is a 1955 film directed by Delbert Mann, shot in the Bronx.")
    (notes / "Delbert Mann.txt").write_text("Delbert Mann was an American director born in Lawrence, Kansas.")
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(notes), "--quiet", "--graph", *store]) == 0
    assert "'passages': 2" in capsys.readouterr().out
    (notes / "Leland.txt").write_text("Leland is a town in Brunswick County, North Carolina, with a film studio.")
    assert mhop(["index", str(notes), "--quiet", "--graph", *store]) == 0
    assert "'passages': 3" in capsys.readouterr().out
    assert passages_embedded == []  # every passage came with the passage index's stored embedding
    assert mhop(["query", "Where was the film by Delbert Mann shot?", "--retriever", "hippo_graph", *store]) == 0
    assert "Bronx" in capsys.readouterr().out


def test_query_json_is_one_document_and_piped_output_is_one_line_a_passage(corpus, tmp_path, capsys):
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(corpus), "--quiet", "--graph", *store]) == 0
    capsys.readouterr()
    question = "Where was the director of the film shot in Leland born?"
    assert mhop(["query", question, "--retriever", "hippo_graph", "--top-k", "3", "--explain", "--json", *store]) == 0
    report = json.loads(capsys.readouterr().out)  # the whole output parses: nothing before or after the document
    assert report["query"] == question and report["retriever"] == "hippo_graph"
    assert [r["rank"] for r in report["results"]] == [1, 2, 3]
    assert "Maximum Overdrive" in [r["title"] for r in report["results"]]
    assert "kept_facts" in report["trace"] and "answer" not in report  # no LM: no answer key
    # Piped (capsys is no terminal): a tab-separated line a passage, whole, with no table and no wrapping.
    assert mhop(["query", question, "--retriever", "hippo_graph", "--top-k", "3", *store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(len(line.split("\t")) == 4 for line in lines)
    by_title = {line.split("\t")[2]: line.split("\t")[3] for line in lines}
    assert by_title["Maximum Overdrive"].startswith("Maximum Overdrive is a 1986 film") and "│" not in lines[0]


def test_no_progress_bar_when_piped_or_quiet(corpus, tmp_path, capsys):
    # capsys is no terminal: neither the vector sync nor the graph build draws a bar, with or without -q.
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(corpus), "--graph", *store]) == 0
    assert mhop(["delete", "Stephen King", "-q", *store]) == 0
    captured = capsys.readouterr()
    assert "it/s" not in captured.err and "Indexing" not in captured.err and "indexing" not in captured.err


def test_a_long_query_is_cut_and_the_cut_is_logged(caplog):
    from llama_index_mhop.rules.text import MAX_QUERY_CHARS, check_query

    with caplog.at_level("WARNING"):
        assert len(check_query("why " * 5000)) == MAX_QUERY_CHARS
    assert f"only its first {MAX_QUERY_CHARS} are used" in caplog.text


@pytest.mark.parametrize("damage", ["zeroed", "truncated"])
def test_a_damaged_chroma_database_is_one_line_naming_it(tmp_path, damage):
    import os
    import subprocess
    import sys
    from pathlib import Path

    import chromadb

    store = tmp_path / "chroma"
    chromadb.PersistentClient(path=str(store)).get_or_create_collection("mhop_passages").add(
        ids=["a"], embeddings=[[1.0, 0.0]], documents=["Leland is a town in North Carolina."])
    database = store / "chroma.sqlite3"
    size = database.stat().st_size
    with database.open("r+b") as file:
        if damage == "zeroed":
            file.write(b"\0" * size)
        else:
            file.truncate(size // 2)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "Leland.txt").write_text("Leland is a town in North Carolina.")
    root = Path(__file__).resolve().parents[1]
    for command in (["query", "Where is Leland?"], ["index", str(tmp_path / "notes"), "--quiet"]):
        done = subprocess.run([sys.executable, "-m", "llama_index_mhop.cli.commands", *command, "--chroma-path", str(store)],
                              capture_output=True, text=True, cwd=tmp_path, timeout=300,
                              env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "400"})
        lines = (done.stdout + done.stderr).strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
        assert lines[0].startswith(f"error: {database}: not a readable Chroma store"), lines[0]


def test_empty_and_binary_files_are_named_once_and_an_emptied_folder_syncs(tmp_path, capsys, caplog):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "kept.txt").write_text("Pat Hingle played Commissioner Gordon in Batman.")
    (folder / "empty.txt").write_text("")
    (folder / "binary.txt").write_bytes(b"\xff\xfe\x00\x01 not text")
    store = ["--chroma-path", str(tmp_path / "chroma"), "-q"]
    with caplog.at_level("WARNING"):
        assert mhop(["index", str(folder), *store]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "empty.txt: holds no text" in out and out.count("binary.txt") == 1
    assert "1 added" in out and "skipped" not in caplog.text  # listed once, on stdout, not again as a log line
    (folder / "kept.txt").write_text("")  # a file emptied: its indexed version goes, like a removed file's
    assert mhop(["index", str(folder), *store]) == 0
    assert "0 added, 0 updated, 1 removed, 0 unchanged (0 passages)" in " ".join(capsys.readouterr().out.split())
    (folder / "kept.txt").write_text("Pat Hingle played Commissioner Gordon in Batman.")
    assert mhop(["index", str(folder), *store]) == 0
    for file in folder.iterdir():
        file.unlink()
    assert mhop(["index", str(folder), *store]) == 0  # an emptied folder mirrors to nothing
    assert "0 added, 0 updated, 1 removed, 0 unchanged (0 passages)" in " ".join(capsys.readouterr().out.split())
    assert mhop(["index", str(folder), *store]) == 2  # a folder that holds nothing indexed and no text: a mistake
    assert "holds no text to index" in " ".join(capsys.readouterr().out.split())
