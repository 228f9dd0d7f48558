"""The ``mhop`` command starts fast: --help, argument errors and checked options import nothing heavy, ``mhop status``
reads counts without opening an index or loading the embedder, and the small CLI contracts around them (valid
``--explain`` JSON, a doc id given twice, bad timeouts and collection names)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_mhop.cli import commands as cli
from llama_index_mhop.cli.commands import main as mhop

HEAVY = {"torch", "chromadb", "dspy", "llama_index", "httpx", "numpy", "scipy", "networkx"}


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.slow  # a child Python process
def test_build_parser_imports_nothing_heavy():
    code = ("import sys; from llama_index_mhop.cli.commands import build_parser; build_parser(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)!r}))")
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().replace("'", '"')) == []


@pytest.mark.parametrize("argv", [["--help"], ["query", "--help"], ["bench", "--help"], ["optimize", "--help"],
                                  ["query"], ["query", "q", "--retriever", "nope"], ["bench"],
                                  ["status", "--chroma-timeout", "inf"], ["index", "x", "--collection", "a"]])
@pytest.mark.slow  # a child Python process
def test_help_and_argument_errors_import_nothing_heavy(argv, tmp_path):
    """Neither the heavy libraries nor Rich (Rich only for the one-line errors of the checked options)."""
    code = ("import sys\nfrom llama_index_mhop.cli.commands import main\n"
            f"try:\n    code = main({argv!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
            f"print(code, sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY | {'rich'})!r})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    status, loaded = result.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == ("0" if "--help" in argv else "2")
    checked_option = any(flag in argv for flag in ("--chroma-timeout", "--collection"))
    assert json.loads(loaded.replace("'", '"')) == (["rich"] if checked_option else [])
    assert not (tmp_path / ".mhop").exists()  # nothing was opened or created


@pytest.mark.slow  # a child Python process
def test_help_exits_0():
    result = subprocess.run([sys.executable, "-m", "llama_index_mhop.cli.commands", "--help"], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "usage: mhop" in result.stdout and "status" in result.stdout
    script = Path(sys.executable).with_name("mhop")
    if script.is_file():
        assert subprocess.run([str(script), "query", "--help"], capture_output=True, timeout=120).returncode == 0


def test_the_light_names_are_the_registry_s():
    """What --help offers is what the modules owning the names accept."""
    from llama_index_mhop.bench import cli as cli_arguments
    from llama_index_mhop.bench import loaders, optimize
    from llama_index_mhop.bench.registry import registered_retrievers

    assert cli_arguments.RETRIEVER_NAMES == tuple(registered_retrievers())
    assert cli_arguments.DATASET_FORMATS == loaders.FORMATS
    assert cli_arguments.OPTIMIZE_METRICS == tuple(optimize.METRICS)
    assert set(cli_arguments.OPTIMIZABLE) <= set(registered_retrievers())


@pytest.mark.slow  # a child Python process
def test_package_exports_are_lazy_and_complete():
    code = ("import sys, llama_index_mhop as m; before = sorted(x for x in sys.modules if x.split('.')[0] in "
            f"{sorted(HEAVY)!r}); print(before, set(m.__all__) <= set(dir(m)))")
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] True"
    import llama_index_mhop

    for name in llama_index_mhop.__all__:
        assert getattr(llama_index_mhop, name) is not None, name
    namespace: dict = {}
    exec("from llama_index_mhop import *", namespace)  # noqa: S102 - the star import of __all__
    assert set(llama_index_mhop.__all__) <= set(namespace)
    with pytest.raises(AttributeError):
        llama_index_mhop.no_such_name  # noqa: B018
    from llama_index_mhop.stores import embed_dtype  # a submodule, not an export, still imports

    assert embed_dtype.__name__ == "llama_index_mhop.stores.embed_dtype"


# ---------------------------------------------------------------------------------------------- mhop status


@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """A folder indexed with its graph, by the CLI."""
    root = tmp_path_factory.mktemp("status")
    notes = root / "notes"
    notes.mkdir()
    (notes / "Marty.txt").write_text("Marty is a 1955 film directed by Delbert Mann, shot in the Bronx.")
    (notes / "Delbert Mann.txt").write_text("Delbert Mann was an American director born in Lawrence, Kansas.")
    (notes / "Leland.txt").write_text("Leland is a town in Brunswick County, North Carolina, with a film studio.")
    store = ["--chroma-path", str(root / "chroma")]
    assert mhop(["index", str(notes), "--quiet", "--graph", *store]) == 0
    return root, store


def _status(store, capsys) -> dict:
    capsys.readouterr()
    assert mhop(["status", *store]) == 0
    return json.loads(capsys.readouterr().out)


def _opened_counts(root: Path, embed_model) -> tuple[dict, dict]:
    """What the index reports once opened: the passage collection and the graph index's counts."""
    from llama_index_mhop.graph import HippoGraphIndex
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.stores.vector_index import describe_collection

    client = default_chroma_client(root / "chroma")
    graph = HippoGraphIndex.from_persist_dir(root / "graph", chroma_client=client, embed_model=embed_model)
    return describe_collection(client, "mhop_passages"), graph.counts()


def test_status_reads_counts_without_the_embedder(indexed, capsys, monkeypatch, embed_model):
    from llama_index_mhop.stores import defaults

    root, store = indexed

    def refuse(*args, **kwargs):
        raise AssertionError("mhop status loaded an embedder")

    for name in ("load_embed_model", "resolve_embed_model", "default_embed_model"):
        monkeypatch.setattr(defaults, name, refuse)
    status = _status(store, capsys)
    monkeypatch.undo()
    passages, graph = _opened_counts(root, embed_model)
    assert status["passages"] == json.loads(json.dumps(passages, default=str))
    assert status["graph"] == {"dir": str(root / "graph"), **graph, "drift": {"gone": 0, "new": 0}}
    assert (graph["passages"], graph["graph_nodes"]) == (3, graph["passages"] + graph["entities"])
    assert graph["graph_edges"] > 0
    assert set(status) == {"store", "passages", "graph", "process_counters"}


def test_status_flags_a_graph_behind_its_passage_index(indexed, tmp_path, capsys, embed_model):
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.stores.vector_index import delete_documents, load_vector_index

    root = tmp_path / "copy"
    shutil.copytree(indexed[0], root)
    store = ["--chroma-path", str(root / "chroma")]
    index = load_vector_index("mhop_passages", chroma_client=default_chroma_client(root / "chroma"),
                              embed_model=embed_model)
    delete_documents(index, [sorted(d for d in stored_doc_ids(index))[0]])  # the graph does not follow the API
    graph = _status(store, capsys)["graph"]
    assert graph["drift"] == {"gone": 1, "new": 0}
    assert "behind its passages (1 gone, 0 new)" in graph["warning"] and "mhop index" in graph["warning"]


def stored_doc_ids(index) -> set[str]:
    from llama_index_mhop.stores.vector_index import passage_collection, stored_documents

    return set(stored_documents(passage_collection(index)))


@pytest.mark.slow  # a child Python process
def test_status_process_imports_no_model_library(indexed):
    _, store = indexed
    code = ("import sys\nfrom llama_index_mhop.cli.commands import main\n"
            f"code = main(['status', *{store!r}])\n"
            "print(code, sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'dspy', 'llama_index', "
            "'transformers', 'sentence_transformers', 'scipy', 'networkx'}))")
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 []"


def test_status_reads_a_format_1_graph(indexed, tmp_path, capsys, embed_model):
    """An index saved before the arrays (the graph as one hippo_graph.json) is counted from that file."""
    from llama_index_mhop.graph.persistence import GRAPH_DIR, LEGACY_GRAPH_FILE, read_saved_index

    root, _ = indexed
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    saved = read_saved_index(copy / "graph")
    (copy / "graph" / LEGACY_GRAPH_FILE).write_text(json.dumps(saved.graph.to_dict()))
    shutil.rmtree(copy / "graph" / GRAPH_DIR)
    status = _status(["--chroma-path", str(copy / "chroma")], capsys)
    assert status["graph"] == {"dir": str(copy / "graph"), **_opened_counts(copy, embed_model)[1],
                               "drift": {"gone": 0, "new": 0}}


def test_status_of_an_unsaved_or_foreign_graph(indexed, tmp_path, capsys):
    root, _ = indexed
    (tmp_path / "graph").mkdir()  # a folder a first build was killed in before it saved anything: no graph yet
    shutil.copytree(root / "chroma", tmp_path / "chroma")
    assert "graph" not in _status(["--chroma-path", str(tmp_path / "chroma")], capsys)
    shutil.copytree(root, tmp_path / "other")
    from llama_index_mhop.stores.defaults import default_chroma_client

    entities = json.loads((root / "graph" / "hippo_config.json").read_text())["collections"]["entities"]
    default_chroma_client(tmp_path / "other" / "chroma").delete_collection(entities)
    assert mhop(["status", "--chroma-path", str(tmp_path / "other" / "chroma")]) == 2
    assert f"the Chroma store has no collection '{entities}' of graph index 'hippo'" in " ".join(
        capsys.readouterr().out.split())


def test_status_of_a_missing_collection_is_a_clear_error(tmp_path, capsys):
    assert mhop(["status", "--chroma-path", str(tmp_path / "chroma")]) == 2
    assert "index a corpus first" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- small contracts


def _json_block(out: str) -> object:
    """The JSON object printed from a line "{" to the line "}" after it."""
    lines = out.splitlines()
    start = lines.index("{")
    end = lines.index("}", start)
    return json.loads("\n".join(lines[start : end + 1]))


def test_explain_prints_valid_json_with_controls_escaped(tmp_path, capsys):
    title = "Hart\x1b]0;pwned\x07 Mills \u202eexe"
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps([
        {"title": title, "text": f"{title} was founded by Alice Hart in Leeds. " * 12},
        {"title": "Alice Hart", "text": "Alice Hart was born in York and founded Hartwell Mills."},
    ]))
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(corpus), "--quiet", *store]) == 0
    capsys.readouterr()
    assert mhop(["query", "Where was the founder of Hart Mills born?", "--retriever", "confidence_loop",
                 "--explain", *store]) == 0
    out = capsys.readouterr().out
    trace = _json_block(out)  # the confidence loop's trace names the passages it ranked by title
    assert isinstance(trace, dict) and "rounds" in trace
    assert title in [entry["title"] for entry in trace["ranking"]]  # the corpus text, whole, as JSON data
    assert not any(char in out for char in "\x1b\x07\u202e")  # never raw on the terminal
    assert mhop(["query", "Hart Mills", "--retriever", "vector", "--explain", *store]) == 0
    assert _json_block(capsys.readouterr().out) == {"note": "vector keeps no trace"}


def test_delete_the_same_id_twice_deletes_once(indexed, tmp_path, capsys):
    root, _ = indexed
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    store = ["--chroma-path", str(copy / "chroma")]
    capsys.readouterr()
    assert mhop(["delete", "Marty.txt", "Marty.txt", *store]) == 0
    assert "removed 1 document(s) from collection 'mhop_passages': Marty.txt" in " ".join(
        capsys.readouterr().out.split())
    status = _status(store, capsys)
    assert (status["passages"]["documents"], status["graph"]["passages"]) == (2, 2)


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "-1", "0", "1e999"])
def test_a_bad_chroma_timeout_is_one_line_before_anything(value, tmp_path, capsys, monkeypatch):
    store = tmp_path / "chroma"
    assert mhop(["status", "--chroma-path", str(store), f"--chroma-timeout={value}"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: --chroma-timeout must be a positive finite number of seconds, got ")
    assert out.count("\n") == 1 and not store.exists()
    monkeypatch.setenv("MHOP_CHROMA_TIMEOUT", value)
    assert mhop(["index", str(tmp_path), "--chroma-path", str(store)]) == 2
    assert "--chroma-timeout must be a positive finite number" in capsys.readouterr().out and not store.exists()


@pytest.mark.parametrize("name", ["a", "ab", "bad name!", "-abc", "abc-", "a..b", "192.168.0.1", "x" * 513, "x" * 510])
@pytest.mark.parametrize("command", ["index", "status", "query", "delete"])
def test_a_bad_collection_name_is_one_line_naming_chroma_s_rule(command, name, tmp_path, capsys):
    store = tmp_path / "chroma"
    argv = {"index": ["index", str(tmp_path)], "status": ["status"], "query": ["query", "q"],
            "delete": ["delete", "doc.txt"]}[command]
    assert mhop([*argv, "--chroma-path", str(store), f"--collection={name}"]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: --collection ") and out.count("\n") == 1
    assert "Chroma collection names have 3-512 characters from [a-zA-Z0-9._-]" in out and not store.exists()


def test_a_collection_name_from_the_config_file_is_checked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mhop.toml").write_text('[chroma]\ncollection = "no"\n')
    assert mhop(["status"]) == 2
    assert "--collection 'no': Chroma collection names" in capsys.readouterr().out


def test_the_sync_log_is_named_as_the_name_check_assumes(tmp_path, embed_model):
    from llama_index_mhop.cli.arguments import SYNC_LOG_SUFFIX, collection_name_problem
    from llama_index_mhop.stores.corpus import make_document
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.stores.vector_index import sync_vector_index

    client = default_chroma_client(tmp_path / "chroma")
    name = "n" * 507
    assert collection_name_problem(name) is None and collection_name_problem(name + "n") is not None
    sync_vector_index([make_document("A", "Alice lives in Leeds.")], collection_name=name, chroma_client=client,
                      embed_model=embed_model, show_progress=False)
    assert name + SYNC_LOG_SUFFIX in {c.name for c in client.list_collections()}


@pytest.mark.parametrize("error, message", [
    (("llama_index_mhop.stores.vector_index", "IndexingInterrupted", "indexing stopped after 3 of 9"),
     "error: indexing stopped after 3 of 9"),
    (("llama_index_mhop.stores.sync", "UnknownDocumentError", "no document 'x'; close matches: y"),
     "error: no document 'x'; close matches: y"),
    (("httpx", "ConnectError", "connection reset"), "error: the Chroma server stopped answering: connection reset"),
])
def test_errors_of_lazily_imported_modules_are_one_line(error, message, tmp_path, capsys, monkeypatch):
    import importlib

    module, name, text = error
    cls = getattr(importlib.import_module(module), name)

    def failing(args):
        raise cls(text)

    monkeypatch.setattr(cli, "cmd_status", failing)
    assert mhop(["status", "--chroma-path", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().out.strip() == message


def test_an_unexpected_error_is_not_swallowed(tmp_path, monkeypatch):
    def failing(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "cmd_status", failing)
    with pytest.raises(RuntimeError, match="a bug"):
        mhop(["status", "--chroma-path", str(tmp_path / "c")])
