"""Structural checks of the packaged demo corpus and questions (no embedding; see llama_index_mhop/data/README.md)."""

from __future__ import annotations

import json
import re
from collections import Counter
from importlib.resources import as_file, files
from itertools import pairwise

import pytest

from llama_index_mhop.rules.text import sentences
from llama_index_mhop.stores.corpus import load_documents

DATA = files("llama_index_mhop") / "data"
QUESTION_KEYS = {"id", "question", "answer", "hops", "type", "gold_titles"}


def _load(name: str) -> list:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


CORPUS: list[dict] = _load("demo_corpus.json")
QUESTIONS: list[dict] = _load("demo_questions.json")
TEXT_BY_TITLE = {p["title"]: p["text"] for p in CORPUS}
BRIDGES = [q for q in QUESTIONS if q["type"] == "bridge"]


def bare(title: str) -> str:
    """The title without a trailing parenthetical: "Varn (river)" -> "Varn"."""
    return re.sub(r"\s*\([^)]*\)$", "", title)


def names(title: str, text: str) -> bool:
    """Whether ``text`` names the entity of ``title`` (its full or bare title, as whole words, any case)."""
    return any(re.search(rf"\b{re.escape(form)}\b", text, re.IGNORECASE) for form in {title, bare(title)})


def by_id(question_id: str) -> dict:
    return next(q for q in QUESTIONS if q["id"] == question_id)


def test_files_are_package_resources_of_the_expected_shape():
    assert (DATA / "demo_corpus.json").is_file() and (DATA / "demo_questions.json").is_file()
    assert isinstance(CORPUS, list) and 24 <= len(CORPUS) <= 40
    assert isinstance(QUESTIONS, list) and 6 <= len(QUESTIONS) <= 8
    for passage in CORPUS:
        assert set(passage) == {"title", "text"}, passage
        assert isinstance(passage["title"], str) and passage["title"].strip() == passage["title"] != ""
        assert isinstance(passage["text"], str) and passage["text"].strip()


def test_titles_are_unique():
    counts = Counter(p["title"] for p in CORPUS)
    assert [t for t, n in counts.items() if n > 1] == []
    # Bare titles too, so "Kestrel (typewriter)" and "Kestrel (locomotive)" are the only shared names.
    bare_counts = Counter(bare(p["title"]) for p in CORPUS)
    assert {t for t, n in bare_counts.items() if n > 1} == {"Kestrel"}


def test_passages_are_short_encyclopedic_entries():
    for passage in CORPUS:
        count = len(sentences(passage["text"]))
        assert 2 <= count <= 5, (passage["title"], count)
        # Well under the default chunk size, so each passage stays one node when indexed.
        assert len(passage["text"].split()) <= 120, passage["title"]
        # The first sentence names the subject.
        assert names(passage["title"], sentences(passage["text"])[0]), passage["title"]


def test_corpus_loads_through_load_documents_one_document_per_passage():
    with as_file(DATA / "demo_corpus.json") as path:
        docs = load_documents(path)
    assert [d.metadata["title"] for d in docs] == [p["title"] for p in CORPUS]
    assert len({d.id_ for d in docs}) == len(CORPUS)


def test_question_records_are_well_formed():
    assert len({q["id"] for q in QUESTIONS}) == len(QUESTIONS)
    for q in QUESTIONS:
        assert set(q) == QUESTION_KEYS, q["id"]
        assert q["question"].strip().endswith("?"), q["id"]
        assert isinstance(q["answer"], str) and q["answer"].strip(), q["id"]
        assert q["hops"] in (2, 3), q["id"]
        assert q["type"] in ("bridge", "comparison"), q["id"]
        assert q["hops"] == len(q["gold_titles"]), q["id"]
        assert len(set(q["gold_titles"])) == len(q["gold_titles"]), q["id"]


def test_question_mix():
    kinds = Counter((q["type"], q["hops"]) for q in QUESTIONS)
    assert kinds[("bridge", 2)] >= 4
    assert sum(n for (_, hops), n in kinds.items() if hops == 3) >= 2
    assert sum(n for (kind, _), n in kinds.items() if kind == "comparison") >= 1


def test_every_gold_title_is_exactly_one_passage():
    counts = Counter(p["title"] for p in CORPUS)
    for q in QUESTIONS:
        for title in q["gold_titles"]:
            assert counts[title] == 1, (q["id"], title)


@pytest.mark.parametrize("question_id", [q["id"] for q in BRIDGES])
def test_bridge_chain_is_linked_by_name(question_id):
    q = by_id(question_id)
    gold = q["gold_titles"]
    # The question names the first hop, so plain retrieval can start the chain.
    assert names(gold[0], q["question"])
    for previous, bridge in pairwise(gold):
        assert names(bridge, TEXT_BY_TITLE[previous]), f"{bridge!r} is not named in {previous!r}"
        assert not names(bridge, q["question"]), f"the question names the later hop {bridge!r}"


@pytest.mark.parametrize("question_id", [q["id"] for q in BRIDGES])
def test_bridge_answer_is_stated_in_the_last_hop(question_id):
    q = by_id(question_id)
    last = TEXT_BY_TITLE[q["gold_titles"][-1]]
    for part in q["answer"].split(" and "):
        part = re.sub(r"^the ", "", part.strip())
        assert part in last, (part, q["gold_titles"][-1])
    assert q["answer"].removeprefix("the ") not in q["question"]


@pytest.mark.parametrize("question_id", [q["id"] for q in QUESTIONS if q["type"] == "comparison"])
def test_comparison_names_both_entities_and_answers_with_one(question_id):
    q = by_id(question_id)
    assert all(names(title, q["question"]) for title in q["gold_titles"])
    assert q["answer"] in q["gold_titles"]


def test_demo_01_chain_by_hand():
    q = by_id("demo-01")
    assert q["gold_titles"] == ["Gull Island Overture", "Ilse Dravencourt", "Marrowby"]
    assert "by Ilse Dravencourt" in TEXT_BY_TITLE["Gull Island Overture"]
    assert "born in the market town of Marrowby" in TEXT_BY_TITLE["Ilse Dravencourt"]
    assert "upper Ostrell Valley" in TEXT_BY_TITLE["Marrowby"]
