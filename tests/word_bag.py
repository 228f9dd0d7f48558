"""A deterministic bag-of-words embedder for graph tests: similarities are hand-computable."""

from __future__ import annotations

import hashlib
import re

from llama_index.core.base.embeddings.base import BaseEmbedding


class WordBagEmbedding(BaseEmbedding):
    """Each word hashed to one of ``dim`` dimensions; counts the texts it embeds (``embedded``)."""

    dim: int = 4096
    embedded: int = 0

    @classmethod
    def class_name(cls) -> str:
        return "WordBagEmbedding"

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        return vector

    def _get_text_embedding(self, text: str) -> list[float]:
        self.embedded += 1
        return self._vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)
