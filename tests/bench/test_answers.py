"""``mhop bench --answer``: an LM answers from each retriever's top passages; exact match and token F1 against the
gold answer and its aliases sit beside the retrieval metrics, and without an LM nothing is reported."""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from llama_index_mhop.bench.benchmarker import gold_answers, validate_result
from llama_index_mhop.bench.cli import main
from llama_index_mhop.bench.loaders import BenchQuestion, load_dataset
from llama_index_mhop.lm.clients import function_lm, render_fields

# Three questions, six passages; the gold answers are ["the Ostra", "Ostra"], ["the Pell Hills"] and ["beech"].
MINI = Path(__file__).parent / "data" / "hipporag"


def _field(message: str, name: str) -> str:
    return message.split(f"[[ ## {name} ## ]]\n", 1)[1].split("\n\n[[ ## ", 1)[0]


def _scripted_answers(prompts: list[str]) -> dspy.LM:
    """Answers by question: a near miss on the Ostra question, an exact hit on the Pell Hills one; the wood
    question makes the LM fail."""

    def chat(messages):
        question = _field(messages[-1][1], "question")
        prompts.append(_field(messages[-1][1], "passages"))
        if "Which river" in question:
            return render_fields({"answer": "The river Ostra."})  # EM 0, F1 2/3 against "Ostra"
        if "In which hills" in question:
            return render_fields({"answer": "pell hills"})  # EM 1, F1 1
        raise RuntimeError("model overloaded")  # a fallback: wrong, and counted

    return function_lm(chat, model="scripted/answers")


def _bench(tmp_path: Path, *extra: str) -> dict:
    return _bench_dataset(MINI, tmp_path, *extra)


def _bench_dataset(dataset: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "result.json"
    assert main(["--dataset", str(dataset), "--retrievers", "vector,bm25", "--k", "2,5", "--out", str(out),
                 "--work-dir", str(tmp_path / "work"), "--quiet", *extra]) == 0
    return json.loads(out.read_text())


def test_answers_are_scored_beside_the_retrieval_metrics(embed_model, tmp_path, capsys):
    prompts: list[str] = []
    with dspy.context(lm=_scripted_answers(prompts)):  # the LM a Python caller configured (no --lm needed)
        result = _bench(tmp_path, "--answer")
    validate_result(result)
    assert "--answer" in result["command"]
    for run in result["runs"]:
        answer = run["answer"]
        assert answer["exact_match"] == pytest.approx(100 / 3, abs=1e-3)
        assert answer["f1"] == pytest.approx((200 / 3 + 100 + 0) / 3, abs=1e-3)
        assert (answer["n_questions"], answer["n_fallbacks"], answer["passages"]) == (3, 1, 5)
        assert answer["per_question"]["exact_match"] == [0.0, 100.0, 0.0]
        assert answer["per_question"]["answer"][:2] == ["The river Ostra.", "pell hills"]
        assert "recall@5" in run["metrics"]
    # each answer saw the top 5 passages of the ranking (of 6 in the corpus), titles included
    assert len(prompts) == 6
    assert all("[5] " in shown and "[6] " not in shown for shown in prompts)
    assert all("Corvel bell foundry" in shown for shown in prompts)
    printed = capsys.readouterr().out
    assert "EM" in printed and "ans F1" in printed and "33.3" in printed and "55.6" in printed and "1/3" in printed


def test_without_an_lm_answers_are_skipped_not_zero(embed_model, tmp_path, capsys):
    result = _bench(tmp_path, "--answer")
    printed = capsys.readouterr().out
    skip_lines = [line for line in printed.splitlines() if "answers are not evaluated" in line]
    assert skip_lines == ["mhop bench --answer: no LM (give --lm local or a DSPy model string); answers are not "
                          "evaluated"]
    assert all("answer" not in run for run in result["runs"]) and "EM" not in printed


def test_gold_answers_of_each_format(fixtures_dir):
    def question(**metadata):
        return BenchQuestion("q", "?", ["p"], metadata)

    assert gold_answers(question(answer="Rockland County")) == ["Rockland County"]  # HotpotQA
    assert gold_answers(question(answer=["the Ostra", "Ostra"])) == ["the Ostra", "Ostra"]  # HippoRAG 2
    assert gold_answers(question(answer="yes", answer_aliases=["yes", "Yes"])) == ["yes", "Yes"]
    assert gold_answers(question(claim_label="SUPPORTED")) == []  # HoVer: claims carry no answer
    assert gold_answers(question(answer=["", 3])) == []
    musique = load_dataset(fixtures_dir / "musique-format")
    assert gold_answers(musique.questions[0]) == ["Piet Valdane", "Valdane"]


def test_a_dataset_without_gold_answers_is_not_answered(embed_model, tmp_path, caplog):
    prompts: list[str] = []
    with dspy.context(lm=_scripted_answers(prompts)):
        result = _bench_dataset(Path(__file__).parent / "data" / "hover" / "hover_mini.json", tmp_path, "--answer")
    assert "has no gold answers; answers are not evaluated" in caplog.text
    assert prompts == [] and all("answer" not in run for run in result["runs"])
