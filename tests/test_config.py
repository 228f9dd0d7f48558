import pytest

from llama_index_mhop.cli.arguments import ConfigError, load_config
from llama_index_mhop.cli.commands import build_parser
from llama_index_mhop.cli.commands import main as mhop

GOOD = """
[embedding]
model = "./models/e5"

[chroma]
path = "/data/chroma"
port = 8001
collection = "notes"

[indexing]
graph = true
delete_missing = false

[retrieval]
retriever = "vector"
top_k = 7

[lm]
model = "local"
"""


def test_a_valid_file_sets_defaults_that_flags_override(tmp_path):
    (tmp_path / "mhop.toml").write_text(GOOD)
    defaults = load_config(tmp_path / "mhop.toml")
    assert defaults == {"embed_model": "./models/e5", "chroma_path": "/data/chroma", "chroma_port": 8001,
                        "collection": "notes", "graph": True, "no_delete": True, "retriever": "vector",
                        "top_k": 7, "lm": "local"}
    parser = build_parser(defaults)
    args = parser.parse_args(["query", "q"])
    assert (args.retriever, args.top_k, args.lm, args.collection, args.embed_model) == (
        "vector", 7, "local", "notes", "./models/e5")
    args = parser.parse_args(["query", "q", "--top-k", "3", "--collection", "other"])
    assert (args.top_k, args.collection) == (3, "other")
    assert parser.parse_args(["index", "docs"]).no_delete is True


@pytest.mark.parametrize(("text", "message"), [
    ("[retrieval]\ntopk = 5\n", r"unknown key retrieval.topk \(known: retriever, top_k\)"),
    ("[retreival]\ntop_k = 5\n", r"unknown section \[retreival\]"),
    ("[retrieval]\ntop_k = \"five\"\n", r"retrieval.top_k must be an integer, got 'five'"),
    ("[retrieval]\ntop_k = 0\n", r"retrieval.top_k must be between 1 and 1000, got 0"),
    ("[chroma]\nport = true\n", r"chroma.port must be an integer, got True"),
    ("[indexing]\ngraph = \"yes\"\n", r"indexing.graph must be true or false"),
    ("retrieval = 3\n", r"retrieval must be a section"),
    ("[retrieval\n", r"not a readable TOML file"),
])
def test_a_bad_file_is_a_one_line_error_naming_the_key(tmp_path, text, message):
    path = tmp_path / "mhop.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)


def test_the_cli_reads_mhop_toml_from_the_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mhop.toml").write_text("[retrieval]\ntop_k = -1\n")
    assert mhop(["query", "anything"]) == 2
    assert "mhop.toml: retrieval.top_k must be between 1 and 1000, got -1" in capsys.readouterr().err
    assert mhop(["--config", str(tmp_path / "missing.toml"), "query", "anything"]) == 2
    assert "missing.toml: no such configuration file" in capsys.readouterr().err


@pytest.mark.parametrize("value", [
    "[" * 100_000 + "]" * 100_000,              # arrays in arrays: the reader's recursion overflows
    "{a = " * 100_000 + "1" + "}" * 100_000,    # inline tables in inline tables
    "[" * 20 + "]" * 20,                        # deep, though within the reader's reach
])
def test_a_deeply_nested_file_is_a_one_line_error(tmp_path, monkeypatch, capsys, value):
    path = tmp_path / "mhop.toml"
    path.write_text(f"[retrieval]\ntop_k = {value}\n")
    with pytest.raises(ConfigError, match="nested") as caught:
        load_config(path)
    assert str(caught.value).startswith(str(path)) and "\n" not in str(caught.value)
    monkeypatch.chdir(tmp_path)
    assert mhop(["query", "anything"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
