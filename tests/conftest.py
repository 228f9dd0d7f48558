"""Shared fixtures: the real embedder, real Chroma, and the HotpotQA data in ../shared/datasets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# The shared data sits beside the project (../shared/datasets); MHOP_DATASETS points elsewhere (another checkout).
DATASETS = Path(os.environ.get("MHOP_DATASETS") or Path(__file__).resolve().parents[1].parent / "shared" / "datasets")
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
    from llama_index_mhop.stores.defaults import default_embed_model

    return default_embed_model()


@pytest.fixture(scope="session")
def hotpotqa_slice(hotpotqa_questions: list[dict]) -> tuple[list[dict], list]:
    """The first 20 HotpotQA questions and the Documents of their context paragraphs (about 200 passages)."""
    from llama_index_mhop.stores.corpus import join_sentences, make_document

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
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.stores.vector_index import build_vector_index

    _, docs = hotpotqa_slice
    client = default_chroma_client(tmp_path_factory.mktemp("slice_chroma"))
    return build_vector_index(docs, chroma_client=client, embed_model=embed_model, show_progress=False)


@pytest.fixture(scope="session")
def gold_titles():
    """``gold_titles(question)``: the gold passages of a raw HotpotQA record, the titles of its supporting facts."""

    def titles(question: dict) -> set[str]:
        return {title for title, _ in question["supporting_facts"]}

    return titles


@pytest.fixture(scope="session")
def mini_graph_documents() -> list:
    """The graph tests' mini corpus (tests/graph/data/mini_corpus.json) as Documents."""
    from llama_index_mhop.stores.corpus import make_document

    records = json.loads((Path(__file__).parent / "graph" / "data" / "mini_corpus.json").read_text())
    return [make_document(r["title"], r["text"]) for r in records]


@pytest.fixture(scope="session")
def build_graph():
    """``build_graph(docs, name, **kwargs)``: a HippoGraphIndex over an ephemeral Chroma, bag-of-words embedded."""
    import chromadb

    from llama_index_mhop.graph import HippoGraphIndex
    from tests.word_bag import WordBagEmbedding

    def build(docs: list, name: str, **kwargs):
        return HippoGraphIndex.from_documents(docs, embed_model=WordBagEmbedding(), chroma_client=chromadb.EphemeralClient(),
                                              name=name, show_progress=False, **kwargs)

    return build


@pytest.fixture(scope="session")
def graph_snapshot():
    """``graph_snapshot(index)``: everything that must match between two builds of the same documents."""

    def snapshot(index) -> dict:
        graph = index.graph
        return {
            "edges": graph.edge_list(),
            "entities": dict(sorted(graph.entity_names.items())),
            "facts": dict(sorted(graph.facts.items())),
            "passages": {p: (r.entities, r.facts, r.title_entities) for p, r in sorted(graph.passages.items())},
            "synonyms": dict(sorted(graph.synonyms.items())),
            "chroma": [sorted(c.get(include=[])["ids"]) for c in
                       (index.passages_collection, index.entities_collection, index.facts_collection)],
        }

    return snapshot
