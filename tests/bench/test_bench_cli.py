"""``mhop bench`` options, exit codes and output files (BM25 only, so no corpus embedding is needed)."""

from __future__ import annotations

import argparse
import json
import sys

import pytest

from llama_index_mhop.bench.benchmarker import validate_result
from llama_index_mhop.bench.cli import add_bench_arguments, main, parse_k_values
from llama_index_mhop.lm.clients import lm_from_spec


def test_parse_k_values():
    assert parse_k_values("2, 5,10,21") == [2, 5, 10, 21]
    for bad in ("2,x", "0", ",", "-1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_k_values(bad)


def test_arguments_and_defaults():
    parser = add_bench_arguments(argparse.ArgumentParser())
    args = parser.parse_args(["--dataset", "d"])
    assert (args.format, args.retrievers, args.k, args.limit, args.lm, args.wandb) == (
        "auto", None, [2, 5, 10, 21], None, "none", None)
    with pytest.raises(SystemExit):
        parser.parse_args(["--dataset", "d", "--format", "squad"])


def test_lm_option():
    assert lm_from_spec("none") is None
    lm = lm_from_spec("openai/gpt-4o-mini")  # built, never called
    assert lm.model == "openai/gpt-4o-mini"


def test_run_writes_json_and_png(fixtures_dir, embed_model, tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails: logging is skipped, never required
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["--dataset", str(fixtures_dir / "musique-format"), "--retrievers", "bm25", "--k", "1,3",
                 "--out", str(out), "--plot", str(png), "--work-dir", str(tmp_path / "work"), "--quiet",
                 "--wandb", "some-project"])
    assert code == 0
    result = json.loads(out.read_text())
    validate_result(result)
    assert (result["dataset"], result["n_questions"], result["n_passages"], result["k_values"]) == (
        "musique-format", 2, 5, [1, 3])
    assert result["command"].startswith("mhop bench --dataset ") and "--retrievers bm25" in result["command"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "bm25" in printed and "R@3" in printed
    assert "wandb is not installed" in caplog.text


@pytest.mark.parametrize("extra, message", [
    (["--retrievers", "nope"], "unknown retriever 'nope'"),
    (["--limit", "0"], "limit must be"),
])
def test_bad_input_exits_2(fixtures_dir, capsys, extra, message):
    assert main(["--dataset", str(fixtures_dir / "musique-format"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_missing_dataset_exits_2(tmp_path, capsys):
    assert main(["--dataset", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_significance_table_prints_difference_interval_and_p():
    from rich.console import Console

    from llama_index_mhop.bench.cli import _significance_table

    cell = {"difference": 4.5, "ci_low": -1.25, "ci_high": 10.0, "p_value": 0.1234, "n": 100}
    significance = {"baseline": "vector", "runs": {"rrf_fusion": {"recall@2": cell, "all_gold@2": {
        **cell, "difference": -3.0, "p_value": 0.5}}}}
    console = Console(width=200, record=True)
    console.print(_significance_table(significance, [2]))
    text = console.export_text()
    assert "against vector" in text and "rrf_fusion" in text
    assert "+4.5 [-1.2, +10.0] p=0.12" in text and "-3.0 [-1.2, +10.0] p=0.50" in text
