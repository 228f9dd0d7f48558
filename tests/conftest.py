"""Shared fixtures: the real embedder, real Chroma, and the HotpotQA data in ../shared/datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
HOTPOTQA = DATASETS / "hotpotqa-100"
FIXTURES = DATASETS / "fixtures"


@pytest.fixture(scope="session")
def hotpotqa_dir() -> Path:
    """The HotpotQA-100 folder; tests that need it skip with a message when it is absent."""
    if not (HOTPOTQA / "questions.json").is_file():
        pytest.skip(f"HotpotQA data not found at {HOTPOTQA} (expected beside the project as ../shared/datasets)")
    return HOTPOTQA


@pytest.fixture(scope="session")
def hotpotqa_questions(hotpotqa_dir: Path) -> list[dict]:
    return json.loads((hotpotqa_dir / "questions.json").read_text())


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(f"dataset fixtures not found at {FIXTURES}")
    return FIXTURES


@pytest.fixture(scope="session")
def embed_model():
    """The packaged all-MiniLM-L6-v2, loaded once for the whole run."""
    from llama_index_mhop.defaults import default_embed_model

    return default_embed_model()


@pytest.fixture(scope="session")
def hotpotqa_slice(hotpotqa_questions: list[dict]) -> tuple[list[dict], list]:
    """The first 20 HotpotQA questions and the Documents of their context paragraphs (about 200 passages)."""
    from llama_index_mhop.stores import join_sentences, make_document

    questions = hotpotqa_questions[:20]
    docs, seen = [], set()
    for question in questions:
        for title, sents in question["context"]:
            if title not in seen:
                seen.add(title)
                docs.append(make_document(title, join_sentences(sents)))
    return questions, docs


@pytest.fixture(scope="session")
def hotpotqa_slice_index(tmp_path_factory, hotpotqa_slice, embed_model):
    """A persistent Chroma vector index of the 20-question slice, built once per run."""
    from llama_index_mhop.defaults import default_chroma_client
    from llama_index_mhop.vector_index import build_vector_index

    _, docs = hotpotqa_slice
    client = default_chroma_client(tmp_path_factory.mktemp("slice_chroma"))
    return build_vector_index(docs, chroma_client=client, embed_model=embed_model, show_progress=False)


def gold_titles(question: dict) -> set[str]:
    """The gold passages of a raw HotpotQA record: the distinct titles of its supporting facts."""
    return {title for title, _ in question["supporting_facts"]}
