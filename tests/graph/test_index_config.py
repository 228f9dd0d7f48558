"""The graph index's settings: one frozen object, given whole or as keywords, saved in the same config file and
brought back with the index it describes."""

from __future__ import annotations

import json

import pytest
from llama_index.core import StorageContext, load_index_from_storage

from llama_index_mhop.graph import HippoGraphIndexConfig
from llama_index_mhop.graph.index import CONFIG_FILE, HippoGraphIndex
from tests.graph.test_sync import build, contents, notes
from tests.word_bag import WordBagEmbedding

SAVED_KEYS = {"format_version", "name", "chroma", "collections", "embed_model", "chunk_size", "chunk_overlap",
              "insert_batch_size", "short_text_batch_size", "short_text_dtype", "exact_synonymy_max_entities"}


def test_settings_are_checked_once_by_name():
    with pytest.raises(ValueError, match="insert_batch_size"):
        HippoGraphIndexConfig(insert_batch_size=0)
    with pytest.raises(ValueError, match="short_text_dtype"):
        HippoGraphIndexConfig(short_text_dtype="float16")
    with pytest.raises(ValueError, match="chunk_sise"):
        HippoGraphIndexConfig.of(None, {"chunk_sise": 128})
    with pytest.raises(TypeError, match="HippoGraphIndexConfig"):
        HippoGraphIndexConfig.of({"chunk_size": 128}, {})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frozen"):
        HippoGraphIndexConfig().chunk_size = 1  # type: ignore[misc]


def test_a_config_and_keywords_build_the_same_index():
    config = HippoGraphIndexConfig(name="cfg_whole", chunk_size=128, synonymy_threshold=0.7, title_edge_weight=5.0)
    whole = build(notes(), config=config)
    by_keyword = build(notes(), name="cfg_keywords", chunk_size=128, synonymy_threshold=0.7, title_edge_weight=5.0)
    assert whole.config == config.replaced(show_progress=False)
    assert by_keyword.config == config.replaced(name="cfg_keywords", show_progress=False)
    assert whole.graph.synonymy_threshold == 0.7 and whole.graph.title_edge_weight == 5.0
    assert (whole.chunk_size, whole.name, whole.show_progress) == (128, "cfg_whole", False)
    assert {k: v for k, v in contents(whole).items() if k != "chroma"} == {
        k: v for k, v in contents(by_keyword).items() if k != "chroma"}
    assert build(notes(), config=config, name="cfg_override").name == "cfg_override"  # keywords replace fields


def test_a_saved_index_reopens_with_the_settings_it_was_saved_with(tmp_path):
    root = tmp_path / "hippo"
    built = build(notes(), persist_dir=root, name="saved_cfg", chunk_size=128, insert_batch_size=2,
                  synonymy_top_k=7, num_workers=2)
    assert set(json.loads((root / CONFIG_FILE).read_text())) == {*SAVED_KEYS, "digest"}  # the file's own, last
    reopened = HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding(),
                                                config=HippoGraphIndexConfig(name="ignored", num_workers=3))
    assert reopened.config == built.config.replaced(num_workers=3, show_progress=True)
    loaded = load_index_from_storage(StorageContext.from_defaults(persist_dir=str(root)),
                                     embed_model=WordBagEmbedding(), show_progress=False, persist_dir=root)
    assert loaded.config == built.config.replaced(num_workers=4)
    assert contents(loaded) == contents(built)
