"""Fixtures shared by the graph tests."""

from __future__ import annotations

import pytest

from llama_index_mhop.graph.extraction import Extraction, extract_llm_free


class CountingExtractor:
    """The LLM-free extractor, recording the title of each passage it reads."""

    def __init__(self) -> None:
        self.titles: list[str] = []

    def extract(self, text: str, title: str | None = None) -> Extraction:
        self.titles.append(title or "")
        return extract_llm_free(text, title)


@pytest.fixture
def counting_extractor() -> type[CountingExtractor]:
    """A factory of extractors that count what they read."""
    return CountingExtractor
