"""A deterministic hashed bag-of-words embedder for benchmarks that measure the index, not the model."""

from __future__ import annotations

import math
import re
import zlib

from llama_index.core.base.embeddings.base import BaseEmbedding

_WORD = re.compile(r"[a-z0-9]+")


class HashedEmbedding(BaseEmbedding):
    """Each lower-cased word hashed (CRC-32) to one of ``dim`` dimensions and counted; the vector is L2-normalised.

    No model weights and microseconds per text, so a benchmark's time and memory are the index's own.
    """

    dim: int = 384

    @classmethod
    def class_name(cls) -> str:
        return "HashedEmbedding"

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in _WORD.findall(text.lower()):
            vector[zlib.crc32(word.encode()) % self.dim] += 1.0
        norm = math.sqrt(sum(v * v for v in vector))
        return [v / norm for v in vector] if norm > 0 else vector

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)
