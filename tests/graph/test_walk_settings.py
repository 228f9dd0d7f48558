"""The index's walk settings choose the large-graph paths by size: "exact" never takes one, "auto" takes each from
its size and logs it once per index."""

from __future__ import annotations

import logging

import pytest

from llama_index_mhop.graph.index_config import HippoGraphIndexConfig
from llama_index_mhop.graph.state_load import load_retrieval_state
from llama_index_mhop.graph.walk import WalkSettings

EVERY_PATH = {"push_min_nodes": 1, "int8_min_rows": 1, "hnsw_min_facts": 1, "hnsw_min_passages": 1}


@pytest.fixture(scope="module")
def index():
    from llama_index_mhop.graph.index import HippoGraphIndex
    from tests.graph.film_chain import documents
    from tests.word_bag import WordBagEmbedding

    return HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), name="sizes",
                                          show_progress=False)


def test_the_defaults_are_the_sizes_the_paths_always_had():
    settings = HippoGraphIndexConfig().walk_settings()
    assert settings == WalkSettings("auto", 50_000, 50_000, 500_000, 4_000_000, 256, "hippo")
    assert settings.minimum("push_min_nodes") == 50_000


def test_bad_walk_settings_are_refused():
    with pytest.raises(ValueError, match="walk"):
        HippoGraphIndexConfig(walk="fast")
    with pytest.raises(ValueError, match="push_min_nodes"):
        HippoGraphIndexConfig(push_min_nodes=-1)
    with pytest.raises(ValueError, match="walk must be one of"):
        WalkSettings("fast")


def test_exact_takes_no_large_graph_path_whatever_the_sizes(index, caplog):
    with caplog.at_level(logging.INFO, logger="llama_index_mhop.graph.walk.walk"):
        state = load_retrieval_state(index.graph, index.stores, 0.5, WalkSettings("exact", **EVERY_PATH))
    assert state.walk.affine is None and state.walk.pagerank.method == "exact"
    assert state.passage_vectors.method == state.fact_vectors.method == "exact"
    assert state.passage_vectors.products.method == state.fact_vectors.products.method == "exact"
    assert not caplog.records


def test_auto_logs_each_path_it_takes_once(index, caplog):
    settings = WalkSettings(push_min_nodes=1, name="sizes")
    with caplog.at_level(logging.INFO, logger="llama_index_mhop.graph.walk.walk"):
        first = load_retrieval_state(index.graph, index.stores, 0.5, settings)
        load_retrieval_state(index.graph, index.stores, 0.5, settings)
    assert first.walk.affine is not None and first.walk.pagerank.method == "push"
    assert first.passage_vectors.method == "exact"  # the other sizes are not reached
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == ["index 'sizes': the push walk is on"]
