"""The synthetic multi-hop corpus: deterministic, loadable as raw HotpotQA, and its chains really are multi-hop."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from llama_index_mhop.bench.loaders import load_dataset
from llama_index_mhop.bench.synthetic import QUESTION_KINDS, generate_dataset, main, write_dataset
from llama_index_mhop.stores.corpus import join_sentences


@pytest.fixture(scope="module")
def dataset():
    return generate_dataset(1500, n_questions=40, seed=7)


def _passage(dataset, title: str) -> str:
    return join_sentences(dataset.corpus[title])


def _names(text: str, name: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text, re.IGNORECASE) is not None


def test_same_seed_writes_identical_files(tmp_path: Path) -> None:
    first = write_dataset(tmp_path / "a", 800, n_questions=20, seed=3)
    second = write_dataset(tmp_path / "b", 800, n_questions=20, seed=3)
    other = write_dataset(tmp_path / "c", 800, n_questions=20, seed=4)
    for name in ("questions.json", "corpus.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
        assert (first / name).read_bytes() != (other / name).read_bytes()


def test_loads_as_hotpotqa_with_every_gold_passage(tmp_path: Path) -> None:
    write_dataset(tmp_path, 600, n_questions=25, seed=1)
    loaded = load_dataset(tmp_path)
    assert loaded.format == "hotpotqa"
    assert len(loaded.passages) == 600
    assert len({p.passage_id for p in loaded.passages}) == 600
    assert len(loaded.questions) == 25
    assert loaded.missing_gold() == []
    raw = json.loads((tmp_path / "questions.json").read_text())
    assert [q.gold_ids for q in loaded.questions] == [r["chain"] for r in raw]
    assert [q.metadata["answer"] for q in loaded.questions] == [r["answer"] for r in raw]


def test_exact_size_and_hop_mix(dataset) -> None:
    assert len(dataset.corpus) == 1500
    hops = [q["hops"] for q in dataset.questions]
    assert hops.count(3) == 20 and hops.count(2) == 20
    for q in dataset.questions:
        assert len(q["chain"]) == q["hops"] == QUESTION_KINDS[q["kind"]].hops
        assert q["supporting_facts"] == [[title, 0] for title in q["chain"]]
        assert len({t for t in q["chain"]}) == q["hops"]


def test_every_gold_title_is_in_the_corpus_and_the_context(dataset) -> None:
    for q in dataset.questions:
        context_titles = [title for title, _ in q["context"]]
        assert len(context_titles) == len(set(context_titles)) == q["hops"] + 8
        for title in q["chain"]:
            assert title in dataset.corpus
            assert title in context_titles
        for title, sentences in q["context"]:
            assert dataset.corpus[title] == sentences


def test_bridges_are_named_by_the_previous_hop_and_never_by_the_question(dataset) -> None:
    for q in dataset.questions:
        chain = q["chain"]
        assert _names(q["question"], chain[0])
        assert q["bridge_entities"] == chain[1:]
        for previous, bridge in zip(chain, chain[1:], strict=False):
            assert _names(dataset.corpus[previous][0], bridge), (previous, bridge)
            assert not _names(q["question"], bridge), (q["question"], bridge)
        # The answer is in the last hop's first sentence and not in the question.
        assert _names(dataset.corpus[chain[-1]][0], q["answer"])
        assert not _names(q["question"], q["answer"])


def test_no_hop_can_be_skipped(dataset) -> None:
    """The first passage of a chain does not name the hop after next, nor the answer of a 3-hop question."""
    for q in dataset.questions:
        chain = q["chain"]
        for position, title in enumerate(chain):
            text = _passage(dataset, title)
            for later in [*chain[position + 2:], *([q["answer"]] if position < len(chain) - 1 else [])]:
                assert not _names(text, later), (q["question"], title, later)


def test_smaller_corpus_is_a_prefix_of_a_larger_one(dataset) -> None:
    small = generate_dataset(700, n_questions=40, seed=7)
    assert small.questions == dataset.questions
    assert list(small.corpus.items()) == list(dataset.corpus.items())[:700]


def test_passages_link_only_to_earlier_passages(dataset) -> None:
    """A passage names only titles that come before it, which is what makes every size a prefix."""
    position = {title: i for i, title in enumerate(dataset.corpus)}
    for title in list(dataset.corpus)[:400]:
        text = _passage(dataset, title)
        named = [other for other in position if other != title and other in text and _names(text, other)]
        assert all(position[other] < position[title] for other in named), (title, named)


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="n_passages"):
        generate_dataset(10, n_questions=50)
    with pytest.raises(ValueError, match="n_questions"):
        generate_dataset(100, n_questions=0)
    with pytest.raises(ValueError, match="three_hop_share"):
        generate_dataset(100, n_questions=5, three_hop_share=1.5)


def test_command_line_writes_a_dataset(tmp_path: Path, capsys) -> None:
    assert main(["--passages", "300", "--questions", "10", "--seed", "2", "--out", str(tmp_path)]) == 0
    assert "300 passages" in capsys.readouterr().out
    assert len(json.loads((tmp_path / "corpus.json").read_text())) == 300
    assert len(json.loads((tmp_path / "questions.json").read_text())) == 10
