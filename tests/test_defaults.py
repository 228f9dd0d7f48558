import shutil

import pytest

from llama_index_mhop import defaults


def test_embedder_weights_are_the_official_file():
    defaults.verify_embedder_weights(defaults.embedder_model_dir())


def test_altered_weights_are_refused(tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "model.safetensors").write_bytes(b"not the weights")
    with pytest.raises(defaults.EmbedderIntegrityError, match="expected 53aa5117"):
        defaults.verify_embedder_weights(model_dir)
    with pytest.raises(defaults.EmbedderIntegrityError, match="not found"):
        defaults.verify_embedder_weights(tmp_path / "empty")


def test_default_embedder_embeds_offline(embed_model):
    vector = embed_model.get_text_embedding("The Sava flows through Belgrade.")
    assert len(vector) == 384
    assert sum(v * v for v in vector) == pytest.approx(1.0, abs=1e-4)


def test_persistent_client_at_path(tmp_path):
    client = defaults.default_chroma_client(tmp_path / "store")
    client.get_or_create_collection("probe").add(ids=["x"], documents=["hello"], embeddings=[[0.1, 0.2]])
    assert defaults.default_chroma_client(tmp_path / "store").get_collection("probe").count() == 1
    shutil.rmtree(tmp_path / "store", ignore_errors=True)


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(ConnectionError, match="127.0.0.1:9"):
        defaults.default_chroma_client(host="127.0.0.1", port=9)
