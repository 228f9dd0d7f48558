"""Short texts in bfloat16: close to float32's vectors where the CPU has it, float32's exactly where it does not,
passages and queries never touched, and the choice kept with a saved index."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import chromadb
import numpy as np
import pytest
from llama_index.core.schema import TextNode

from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.graph.graph_stores import GraphStores
from llama_index_mhop.graph.persistence import CONFIG_FILE
from llama_index_mhop.stores import embed_dtype
from llama_index_mhop.stores.embed_dtype import check_embed_dtype, embedding_dtype, native_bfloat16

SHORT_TEXTS = ["Lover Come Back", "Delbert Mann", "Lover Come Back directed by Delbert Mann",
               "Rock Hudson born in Winnetka", "1961"]


@pytest.fixture(scope="module")
def torch_embed_model():
    """The packaged MiniLM run by torch (LlamaIndex's HuggingFaceEmbedding), the kind of embedder autocast reaches
    (the default one runs in numpy)."""
    from llama_index_mhop.stores.defaults import embedder_model_dir, load_embed_model

    return load_embed_model(embedder_model_dir())


def _stores(embed_model, dtype: str) -> GraphStores:
    return GraphStores(chromadb.EphemeralClient(), f"dtype_{dtype}", embed_model, 512, "external",
                       short_text_dtype=dtype)


def test_an_unknown_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="float16"):
        check_embed_dtype("float16")
    with pytest.raises(ValueError, match="short|dtype"):
        HippoGraphIndex(chroma_client=chromadb.EphemeralClient(), embed_model=None, name="bad_dtype",
                        short_text_dtype="float16")


@pytest.mark.skipif(not native_bfloat16(), reason="this CPU has no native bfloat16")
def test_short_texts_in_bfloat16_stay_close_to_float32_and_passages_stay_float32(torch_embed_model):
    embed_model = torch_embed_model
    exact = np.asarray(embed_model.get_text_embedding_batch(SHORT_TEXTS), dtype=np.float32)
    fast = _stores(embed_model, "bfloat16")
    short = fast.embed(SHORT_TEXTS, short=True)
    cosines = (short * exact).sum(axis=1) / np.linalg.norm(short, axis=1) / np.linalg.norm(exact, axis=1)
    assert not np.array_equal(short, exact)  # bfloat16 really ran
    assert cosines.min() > 0.9999
    np.testing.assert_array_equal(fast.embed(SHORT_TEXTS), exact)  # not short: float32, bit for bit
    # the block leaves the thread in float32: the next query embedding is float32's
    np.testing.assert_array_equal(np.asarray(embed_model.get_text_embedding_batch(SHORT_TEXTS), dtype=np.float32),
                                  exact)


def test_float32_short_texts_are_the_embedders_own(embed_model):
    exact = np.asarray(embed_model.get_text_embedding_batch(SHORT_TEXTS), dtype=np.float32)
    np.testing.assert_array_equal(_stores(embed_model, "float32").embed(SHORT_TEXTS, short=True), exact)


def test_without_native_bfloat16_short_texts_fall_back_to_float32(embed_model, monkeypatch, caplog):
    monkeypatch.setattr(embed_dtype, "native_bfloat16", lambda: False)
    embed_dtype._note_emulated.cache_clear()
    exact = np.asarray(embed_model.get_text_embedding_batch(SHORT_TEXTS), dtype=np.float32)
    with caplog.at_level(logging.INFO, logger=embed_dtype.__name__):
        with embedding_dtype("bfloat16") as used:
            assert used == "float32"
        np.testing.assert_array_equal(_stores(embed_model, "bfloat16").embed(SHORT_TEXTS, short=True), exact)
    assert "no native bfloat16" in caplog.text


def test_an_embedder_that_runs_no_torch_embeds_in_float32_without_importing_torch():
    # A fresh interpreter: this test process has torch loaded by other embedders.
    script = ("import sys\n"
              "from llama_index_mhop.stores.embed_dtype import embedding_dtype\n"
              "with embedding_dtype('bfloat16') as used:\n"
              "    print(used, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["float32", "False"]


def test_the_dtype_is_saved_with_the_index_and_a_bad_one_is_refused(tmp_path, mini_graph_documents):
    from tests.word_bag import WordBagEmbedding

    index = HippoGraphIndex.from_documents(mini_graph_documents[:3], embed_model=WordBagEmbedding(),
                                           persist_dir=tmp_path / "hippo", show_progress=False,
                                           short_text_dtype="float32")
    assert index.stores.short_text_dtype == "float32"
    config_path = tmp_path / "hippo" / CONFIG_FILE
    config = json.loads(config_path.read_text())
    assert config["short_text_dtype"] == "float32"
    del index
    del config["digest"]  # edited by hand below: written as a save from before digests holds it

    config["short_text_dtype"] = "bfloat16"
    config_path.write_text(json.dumps(config))
    reopened = HippoGraphIndex.from_persist_dir(tmp_path / "hippo", embed_model=WordBagEmbedding(),
                                                show_progress=False)
    assert reopened.stores.short_text_dtype == "bfloat16"

    del config["short_text_dtype"]  # saved before the option: its short texts were float32
    config_path.write_text(json.dumps(config))
    older = HippoGraphIndex.from_persist_dir(tmp_path / "hippo", embed_model=WordBagEmbedding(), show_progress=False)
    assert older.stores.short_text_dtype == "float32"

    config["short_text_dtype"] = "int4"
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"hippo_config\.json.*short_text_dtype.*int4"):
        HippoGraphIndex.from_persist_dir(tmp_path / "hippo", embed_model=WordBagEmbedding(), show_progress=False)


def test_a_passage_node_is_never_embedded_in_bfloat16(embed_model):
    stores = _stores(embed_model, "bfloat16")
    node = TextNode(text="Lover Come Back is a 1961 film directed by Delbert Mann.", id_="p1")
    stores.store_passages([node])
    stored = np.asarray(stores.passages.get(ids=["p1"], include=["embeddings"])["embeddings"][0], dtype=np.float32)
    np.testing.assert_allclose(stored, np.asarray(embed_model.get_text_embedding(node.get_content()), np.float32),
                               rtol=0, atol=1e-6)
