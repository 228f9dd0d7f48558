"""A retrieved passage as the LLM-free strategies see it: its id, its text and what it is about.

Every LLM-free strategy (the perspectives, the confidence loop, the listwise reranker, the bridge links) reads
passages as :class:`PassageView`, so "what a passage is about" is decided in one place: its ``title`` metadata
when present (Wikipedia-style corpora), else the first entity of its first sentence (encyclopedic passages open
with their subject).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from .text import clean_name, entity_spans, first_sentence, names_match, stems, strip_parenthetical

__all__ = ["PassageView"]


@dataclass(frozen=True)
class PassageView:
    """A retrieved passage as the strategies see it: id, text and an optional title."""

    id: str
    text: str
    title: str = ""

    @classmethod
    def from_node(cls, node: Any) -> PassageView:
        """From a LlamaIndex node: its id, ``get_content()`` text and ``metadata["title"]`` when present."""
        title = node.metadata.get("title") if isinstance(getattr(node, "metadata", None), dict) else None
        return cls(id=node.node_id, text=node.get_content(), title=str(title or ""))

    @cached_property
    def subject(self) -> str:
        """What the passage is about: its title minus a trailing "(disambiguation)", else its first entity."""
        if self.title.strip():
            return strip_parenthetical(clean_name(self.title)) or clean_name(self.title)
        spans = [s for s in entity_spans(first_sentence(self.text)) if not s.isdigit()]
        return clean_name(spans[0]) if spans else ""

    @cached_property
    def stems(self) -> frozenset[str]:
        """The stems of the passage's content words (:func:`~llama_index_mhop.rules.text.stems`)."""
        return frozenset(stems(self.text))

    def is_about(self, name: str) -> bool:
        """Whether the passage's subject is ``name`` (see :func:`~llama_index_mhop.rules.text.names_match`)."""
        return bool(self.subject) and names_match(self.subject, name)
