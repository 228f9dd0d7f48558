"""The packaged all-MiniLM-L6-v2 sentence embedder (a 6-layer BERT encoder, mean pooling, L2 norm) in numpy:
torch's vectors (cosine 1.0 to 6 decimals) without starting torch, transformers and sentence-transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr

__all__ = ["MiniLMEmbedding"]

#: sentence-transformers' ``max_seq_length`` for all-MiniLM-L6-v2 (sentence_bert_config.json): longer text is cut.
MAX_TOKENS = 256


class MiniLMEmbedding(BaseEmbedding):
    """A BERT-style sentence-transformers model (mean pooling, normalised) from a local folder
    (``config.json``, ``tokenizer.json``, ``model.safetensors``), in numpy."""

    model_name: str = Field(description="the model folder")
    max_length: int = Field(default=MAX_TOKENS, description="tokens kept of each text")
    _encoder: Any = PrivateAttr()

    def __init__(self, model_name: str | Path, embed_batch_size: int = 64, **kwargs: Any) -> None:
        super().__init__(model_name=str(model_name), embed_batch_size=embed_batch_size, **kwargs)
        self._encoder = _Encoder(Path(model_name), self.max_length)

    @classmethod
    def class_name(cls) -> str:
        return "MiniLMEmbedding"

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encoder.encode([text])[0].tolist()

    _get_query_embedding = _get_text_embedding  # a query is embedded as any text

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encoder.encode(texts).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._get_text_embeddings(texts)  # one batched pass, not a task a text


class _Encoder:
    """Tokenizer, weights and the forward pass of a BERT encoder with mean pooling."""

    def __init__(self, folder: Path, max_length: int) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        pooling = _json(folder / "1_Pooling" / "config.json")
        modules = [m.get("type", "") for m in _json(folder / "modules.json", [])]
        if (config.get("model_type") != "bert" or config.get("hidden_act") != "gelu"
                or not pooling.get("pooling_mode_mean_tokens") or not any(t.endswith("Normalize") for t in modules)):
            raise ValueError(f"{folder}: not a BERT sentence model with GELU, mean pooling and normalised vectors; "
                             "load it as a HuggingFaceEmbedding (mhop: --embed-model)")
        # sentence-transformers cuts texts at the model's own max_seq_length.
        max_length = int(_json(folder / "sentence_bert_config.json").get("max_seq_length", max_length))
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config["layer_norm_eps"])
        weights = load_file(str(folder / "model.safetensors"))
        # Some exports prefix every name with "bert."; the encoder's names are the same either way.
        self.w = {name.removeprefix("bert."): value.astype(np.float32, copy=False) for name, value in weights.items()}
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length)
        self.tokenizer.no_padding()  # each batch is padded to its own longest text (encode)

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Unit-length sentence vectors of ``texts``, one row each (float32)."""
        out = np.zeros((len(texts), self.w["embeddings.word_embeddings.weight"].shape[1]), dtype=np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        # Texts of similar length share a batch, so little of a batch is padding.
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            width = len(encodings[rows[-1]].ids)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.float32)
            for j, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[j, :n] = encodings[i].ids
                mask[j, :n] = 1.0
            hidden = self._forward(ids, mask)
            pooled = (hidden * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
            out[rows] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, length = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length]
             + w["embeddings.token_type_embeddings.weight"][0])  # one segment: token type 0 throughout
        x = self._norm(x, "embeddings.LayerNorm")
        # Padding keys get a large negative score, so softmax gives them no weight.
        blocked = ((1.0 - mask) * np.float32(-3.4e38))[:, None, None, :]
        width = x.shape[-1] // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self._heads(self._dense(x, p + f"attention.self.{part}"), width)
                       for part in ("query", "key", "value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(width)) + blocked
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            context = (scores / scores.sum(axis=-1, keepdims=True)) @ v
            context = context.transpose(0, 2, 1, 3).reshape(batch, length, -1)
            x = self._norm(self._dense(context, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
            inner = _gelu(self._dense(x, p + "intermediate.dense"))
            x = self._norm(self._dense(inner, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    def _heads(self, x: np.ndarray, width: int) -> np.ndarray:
        """(batch, length, hidden) as (batch, heads, length, width)."""
        return x.reshape(x.shape[0], x.shape[1], self.heads, width).transpose(0, 2, 1, 3)

    def _dense(self, x: np.ndarray, name: str) -> np.ndarray:
        # As one 2-D product: numpy runs a 3-D one as many small products.
        flat = x.reshape(-1, x.shape[-1]) @ self.w[name + ".weight"].T + self.w[name + ".bias"]
        return flat.reshape(*x.shape[:-1], -1)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x - mean) / np.sqrt(var + np.float32(self.eps)) * self.w[name + ".weight"] + self.w[name + ".bias"]


def _json(path: Path, missing: Any = None) -> Any:
    return json.loads(path.read_text()) if path.is_file() else ({} if missing is None else missing)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x)."""
    from scipy.special import erf

    return x * np.float32(0.5) * (np.float32(1.0) + erf(x / np.float32(np.sqrt(2.0))))
