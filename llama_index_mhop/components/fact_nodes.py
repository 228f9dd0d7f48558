"""Fact nodes: a (subject, predicate, object) triple as a LlamaIndex node, the unit recognition memory works on."""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import NodeWithScore, TextNode

from ..stores.corpus import stable_id

__all__ = ["FACT_KEYS", "fact_node", "fact_triple", "is_fact_node"]

FACT_KEYS = ("subject", "predicate", "object")


def is_fact_node(node: NodeWithScore) -> bool:
    """Whether the node carries a (subject, predicate, object) triple in its metadata."""
    return all(key in node.node.metadata for key in FACT_KEYS)


def fact_node(
    subject: str, predicate: str, obj: str, score: float | None = None, **metadata: Any
) -> NodeWithScore:
    """A fact as a scored node: text ``"subject predicate object"``, the triple in the metadata.

    The node id is derived from the triple, so the same fact always has the same id. The triple keys are kept
    out of the embedding and LLM views of the node (its text already says it).

    Args:
        subject: the fact's subject entity.
        predicate: the relation.
        obj: the object entity.
        score: the fact's embedding similarity to the query.
        **metadata: more metadata (e.g. the source passage ids).

    Raises:
        ValueError: a part that is not a non-empty string, or metadata that redefines a triple key.
    """
    parts = {"subject": subject, "predicate": predicate, "object": obj}
    for key, value in parts.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"fact {key} must be a non-empty string, got {value!r}")
    clash = set(FACT_KEYS) & set(metadata)
    if clash:
        raise ValueError(f"metadata must not redefine the triple keys {sorted(clash)}")
    node = TextNode(
        id_=stable_id("fact", subject, predicate, obj),
        text=f"{subject} {predicate} {obj}",
        metadata={**parts, **metadata},
        excluded_embed_metadata_keys=list(FACT_KEYS),
        excluded_llm_metadata_keys=list(FACT_KEYS),
    )
    return NodeWithScore(node=node, score=None if score is None else float(score))


def fact_triple(node: NodeWithScore) -> tuple[str, str, str]:
    metadata = node.node.metadata
    try:
        triple = tuple(metadata[key] for key in FACT_KEYS)
    except KeyError as missing:
        raise ValueError(
            f"node {node.node.node_id!r} is not a fact node: its metadata lacks {missing}; build fact nodes "
            "with fact_node(subject, predicate, obj, score)"
        ) from None
    if not all(isinstance(part, str) for part in triple):
        raise ValueError(f"node {node.node.node_id!r}: subject, predicate and object must be strings")
    return triple  # type: ignore[return-value]
