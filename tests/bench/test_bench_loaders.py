"""Dataset loaders on the real HotpotQA-100 data, the MuSiQue fixture and the HippoRAG 2 / HoVer fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from llama_index_mhop.bench.loaders import (
    DatasetFormatError,
    detect_format,
    load_dataset,
    load_hipporag,
    load_hotpotqa,
    load_hover,
    load_musique,
)
from llama_index_mhop.rules.text import normalize_title
from llama_index_mhop.stores.corpus import join_sentences, stable_id

DATA = Path(__file__).parent / "data"
HIPPORAG = DATA / "hipporag"
HOVER = DATA / "hover"
HOVER_HF = DATA / "hover_hf"


@pytest.fixture
def musique_dir(fixtures_dir: Path) -> Path:
    return fixtures_dir / "musique-format"


def _write(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


# -- HotpotQA -------------------------------------------------------------------------------------------------


def test_hotpotqa_100(hotpotqa_dir, hotpotqa_questions):
    dataset = load_hotpotqa(hotpotqa_dir)
    assert (dataset.name, dataset.format) == ("hotpotqa-100", "hotpotqa")
    assert len(dataset.questions) == 100 and len(dataset.passages) == 994
    assert dataset.missing_gold() == []
    first, raw = dataset.questions[0], hotpotqa_questions[0]
    assert first.qid == raw["_id"] and first.text == raw["question"]
    assert first.gold_ids == list(dict.fromkeys(t for t, _ in raw["supporting_facts"]))
    assert all(len(q.gold_ids) == 2 for q in dataset.questions)
    assert first.metadata["type"] == raw["type"]
    corpus = json.loads((hotpotqa_dir / "corpus.json").read_text())
    by_id = {p.passage_id: p for p in dataset.passages}
    title = first.gold_ids[0]
    assert by_id[title].title == title and by_id[title].text == join_sentences(corpus[title])


def test_hotpotqa_limit_keeps_the_corpus_and_head_can_cut_it(hotpotqa_dir, hotpotqa_questions):
    dataset = load_dataset(hotpotqa_dir, limit=10)
    assert len(dataset.questions) == 10 and len(dataset.passages) == 994
    sliced = dataset.head(3, context_only=True)
    titles = {t for q in hotpotqa_questions[:3] for t, _ in q["context"]}
    assert [q.qid for q in sliced.questions] == [q["_id"] for q in hotpotqa_questions[:3]]
    assert {p.passage_id for p in sliced.passages} == titles
    with pytest.raises(ValueError, match="limit"):
        load_dataset(hotpotqa_dir, limit=0)


def test_hotpotqa_without_corpus_uses_the_contexts(tmp_path, hotpotqa_questions):
    qfile = _write(tmp_path / "hp" / "questions.json", hotpotqa_questions[:3])
    dataset = load_dataset(qfile.parent)
    assert {p.passage_id for p in dataset.passages} == {t for q in hotpotqa_questions[:3] for t, _ in q["context"]}
    assert dataset.missing_gold() == []


def test_hotpotqa_malformed(tmp_path, hotpotqa_questions):
    records = json.loads(json.dumps(hotpotqa_questions[:3]))
    del records[1]["question"]
    qfile = _write(tmp_path / "bad" / "questions.json", records)
    with pytest.raises(DatasetFormatError) as info:
        load_hotpotqa(qfile)
    error = info.value
    assert error.file == str(qfile) and error.field == "question"
    assert error.record == f"record 1 (id {records[1]['_id']!r})"
    assert str(qfile) in str(error) and "'question'" in str(error) and records[1]["_id"] in str(error)

    records = json.loads(json.dumps(hotpotqa_questions[:2]))
    records[0]["supporting_facts"] = [["only a title"]]
    with pytest.raises(DatasetFormatError) as info:
        load_hotpotqa(_write(tmp_path / "bad2" / "questions.json", records))
    assert info.value.field == "supporting_facts" and info.value.record.startswith("record 0")


def test_invalid_json_names_the_file(tmp_path):
    bad = tmp_path / "questions.json"
    bad.write_text('[{"question": "x",', encoding="utf-8")
    with pytest.raises(DatasetFormatError, match="not valid JSON") as info:
        load_hotpotqa(bad)
    assert info.value.file == str(bad)


# -- MuSiQue --------------------------------------------------------------------------------------------------


def test_musique_fixture(musique_dir):
    dataset = load_musique(musique_dir)
    raw = json.loads((musique_dir / "questions.json").read_text())
    assert dataset.format == "musique" and len(dataset.questions) == 2 and len(dataset.passages) == 5
    for question, record in zip(dataset.questions, raw, strict=True):
        expected = [stable_id(p["title"], p["paragraph_text"]) for p in record["paragraphs"] if p["is_supporting"]]
        assert question.qid == record["id"] and question.gold_ids == expected
    assert [len(q.gold_ids) for q in dataset.questions] == [3, 2]
    assert dataset.questions[0].metadata["hops"] == 3
    assert dataset.questions[0].metadata["answer_aliases"] == ["Valdane"]
    assert dataset.missing_gold() == []
    passage = next(p for p in dataset.passages if p.title == "Harrowgate")
    assert passage.passage_id == stable_id(passage.title, passage.text)


def test_musique_without_corpus_uses_the_paragraphs_and_tells_repeated_titles_apart(tmp_path, musique_dir):
    records = json.loads((musique_dir / "questions.json").read_text())
    # A second paragraph titled "Harrowgate" with other text: only the supporting one is gold.
    records[0]["paragraphs"].append({"idx": 5, "title": "Harrowgate", "is_supporting": False,
                                     "paragraph_text": "Harrowgate is also a 1930s steamship."})
    qfile = tmp_path / "musique_dev.jsonl"  # MuSiQue publishes JSON lines
    qfile.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    dataset = load_dataset(qfile)
    assert dataset.format == "musique" and len(dataset.passages) == 6
    harrowgate = [p for p in dataset.passages if p.title == "Harrowgate"]
    assert len(harrowgate) == 2 and harrowgate[0].passage_id != harrowgate[1].passage_id
    gold = stable_id("Harrowgate", records[0]["paragraphs"][2]["paragraph_text"])
    assert gold in dataset.questions[0].gold_ids
    assert stable_id("Harrowgate", "Harrowgate is also a 1930s steamship.") not in dataset.questions[0].gold_ids


def test_musique_malformed(tmp_path, musique_dir):
    records = json.loads((musique_dir / "questions.json").read_text())
    del records[1]["paragraphs"][2]["paragraph_text"]
    qfile = _write(tmp_path / "m" / "questions.json", records)
    with pytest.raises(DatasetFormatError) as info:
        load_musique(qfile)
    assert info.value.file == str(qfile) and info.value.field == "paragraph_text"
    assert info.value.record == "record 1 (id '2hop__fixture_2'), paragraphs[2]"


def test_musique_unanswerable_without_gold_is_skipped_answerable_raises(tmp_path, musique_dir):
    records = json.loads((musique_dir / "questions.json").read_text())
    for paragraph in records[1]["paragraphs"]:
        paragraph["is_supporting"] = False
    records[1]["answerable"] = False
    dataset = load_musique(_write(tmp_path / "a" / "questions.json", records))
    assert [q.qid for q in dataset.questions] == ["3hop__fixture_1"]
    records[1]["answerable"] = True
    with pytest.raises(DatasetFormatError, match="is_supporting") as info:
        load_musique(_write(tmp_path / "b" / "questions.json", records))
    assert info.value.field == "paragraphs" and "2hop__fixture_2" in info.value.record


# -- HippoRAG 2 -----------------------------------------------------------------------------------------------


def test_hipporag_fixture():
    dataset = load_hipporag(HIPPORAG / "mini.json")
    assert (dataset.name, dataset.format) == ("mini", "hipporag")
    assert len(dataset.passages) == 6  # from mini_corpus.json, which holds one passage no question shows
    assert [len(q.gold_ids) for q in dataset.questions] == [2, 3, 4]
    first = dataset.questions[0]
    assert first.gold_ids == [
        stable_id("Corvel bell foundry", "The Corvel bell foundry is a workshop in the town of Marrow Bay that has "
                  "cast church bells since 1788."),
        stable_id("Marrow Bay", "Marrow Bay is a town on the river Ostra, known for its bell foundry."),
    ]
    assert first.metadata["answer"] == ["the Ostra", "Ostra"]
    novel = stable_id("Marrow Bay", "Marrow Bay is also the name of a 1954 novel about a lighthouse keeper.")
    assert novel in {p.passage_id for p in dataset.passages}
    assert all(novel not in q.gold_ids for q in dataset.questions)
    assert dataset.missing_gold() == []


def test_hipporag_contexts_key_and_malformed(tmp_path):
    records = json.loads((HIPPORAG / "mini.json").read_text())
    records[0]["contexts"] = records[0].pop("paragraphs")
    folder = tmp_path / "h"
    _write(folder / "mini.json", records)
    shutil.copy(HIPPORAG / "mini_corpus.json", folder / "mini_corpus.json")
    assert load_hipporag(folder).questions[0].gold_ids == load_hipporag(HIPPORAG / "mini.json").questions[0].gold_ids

    records = json.loads((HIPPORAG / "mini.json").read_text())
    records[2]["paragraphs"][1]["is_supporting"] = "yes"
    qfile = _write(tmp_path / "bad" / "mini.json", records)
    with pytest.raises(DatasetFormatError) as info:
        load_hipporag(qfile)
    assert info.value.file == str(qfile) and info.value.field == "is_supporting"
    assert info.value.record == "record 2 (id '4hop__mini_3'), paragraphs[1]"


def test_hipporag_malformed_corpus(tmp_path):
    folder = tmp_path / "c"
    folder.mkdir()
    shutil.copy(HIPPORAG / "mini.json", folder / "mini.json")
    corpus = json.loads((HIPPORAG / "mini_corpus.json").read_text())
    del corpus[3]["title"]
    _write(folder / "mini_corpus.json", corpus)
    with pytest.raises(DatasetFormatError) as info:
        load_hipporag(folder / "mini.json")
    assert info.value.file == str(folder / "mini_corpus.json") and info.value.field == "title"
    assert info.value.record == "record 3 (id 3)"


# -- HoVer ----------------------------------------------------------------------------------------------------


def test_hover_fixture_pairs():
    dataset = load_hover(HOVER / "hover_mini.json")
    assert dataset.format == "hover" and len(dataset.questions) == 3 and len(dataset.passages) == 5
    first = dataset.questions[0]
    assert first.qid == "hover-mini-0001"
    assert first.gold_ids == ["saltmere chronicle", "ilse varga"]  # the repeated title counts once
    assert first.metadata == {"label": "SUPPORTED", "num_hops": 2, "hpqa_id": "mini-a"}
    assert [len(q.gold_ids) for q in dataset.questions] == [2, 3, 4]
    assert dataset.missing_gold() == []
    by_id = {p.passage_id: p for p in dataset.passages}
    assert by_id["ilse varga"].text == "Ilse Varga (1901-1977) was a composer. She was born in Saltmere. " \
                                       "She studied under Aurel Penn."
    # A pre-rendered "title | text" line: the title is split off.
    opera = by_id[normalize_title("Glass Harbour (opera)")]
    assert opera.title == "Glass Harbour (opera)" and opera.text.startswith("Glass Harbour is an opera")


def test_hover_fixture_key_value_records():
    dataset = load_dataset(HOVER_HF)
    assert dataset.format == "hover" and [q.qid for q in dataset.questions] == ["hover-hf-0001", "hover-hf-0002"]
    assert dataset.questions[0].gold_ids == ["aurel penn", "glass harbour opera"]
    assert dataset.questions[1].gold_ids == ["ilse varga", "aurel penn"]


def test_hover_malformed(tmp_path):
    records = json.loads((HOVER / "hover_mini.json").read_text())
    records[2]["supporting_facts"][1] = {"title": "Ilse Varga"}
    folder = tmp_path / "hv"
    qfile = _write(folder / "hover_mini.json", records)
    shutil.copy(HOVER / "hover_mini_corpus.jsonl", folder / "hover_mini_corpus.jsonl")
    with pytest.raises(DatasetFormatError) as info:
        load_hover(qfile)
    assert info.value.file == str(qfile) and info.value.field == "supporting_facts"
    assert info.value.record == "record 2 (id 'hover-mini-0003')"

    corpus = folder / "hover_mini_corpus.jsonl"
    lines = corpus.read_text().splitlines()
    lines[1] = '{"title": "Ilse Varga", "text": ["unterminated'
    corpus.write_text("\n".join(lines) + "\n")
    _write(qfile, json.loads((HOVER / "hover_mini.json").read_text()))
    with pytest.raises(DatasetFormatError) as info:
        load_hover(qfile)
    assert info.value.file == str(corpus) and info.value.record == "line 2"

    lines[1] = '{"title": "Ilse Varga", "text": 7}'
    corpus.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetFormatError) as info:
        load_hover(qfile)
    assert (info.value.record, info.value.field) == ("line 2", "text")


def test_hover_without_corpus(tmp_path):
    qfile = tmp_path / "claims.json"
    shutil.copy(HOVER / "hover_mini.json", qfile)
    with pytest.raises(DatasetFormatError, match="corpus") as info:
        load_hover(qfile)
    assert info.value.field == "corpus"


# -- detection ------------------------------------------------------------------------------------------------


def test_auto_detection(hotpotqa_dir, musique_dir):
    assert detect_format(hotpotqa_dir) == "hotpotqa"
    assert detect_format(musique_dir) == "musique"
    assert detect_format(HIPPORAG) == "hipporag"
    assert detect_format(HIPPORAG / "mini.json") == "hipporag"
    assert detect_format(HOVER) == "hover"
    assert detect_format(HOVER_HF / "claims.jsonl") == "hover"
    for path, loader in ((musique_dir, load_musique), (HIPPORAG, load_hipporag), (HOVER, load_hover)):
        auto, explicit = load_dataset(path), loader(path)
        assert [q.gold_ids for q in auto.questions] == [q.gold_ids for q in explicit.questions]
        assert auto.passages == explicit.passages


def test_detection_errors(tmp_path):
    with pytest.raises(DatasetFormatError, match="no known format") as info:
        detect_format(_write(tmp_path / "x" / "questions.json", [{"query": "q", "docs": []}]))
    assert info.value.record == "record 0"
    with pytest.raises(DatasetFormatError, match="does not exist"):
        load_dataset(tmp_path / "missing")
    folder = tmp_path / "two"
    _write(folder / "a.json", [])
    _write(folder / "b.json", [])
    with pytest.raises(DatasetFormatError, match="several question files"):
        load_dataset(folder)
    with pytest.raises(ValueError, match="unknown dataset format"):
        load_dataset(HIPPORAG, format="squad")
