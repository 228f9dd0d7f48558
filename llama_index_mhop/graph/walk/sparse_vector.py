"""A vector over a graph's nodes that is zero but at a few of them: a query's seeds, and what a push from them
reaches.

A query's reset has a handful of entity seeds among hundreds of thousands of nodes. Held as a whole array, each
step of a query (building the seeds, their sum, the push's start, the walk's result) writes a fresh array the size
of the graph, and on a large graph writing fresh memory costs a page fault per 4 KB (docs/SCALING.md). Held as
the few nodes and their values, those steps cost what the seeds hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["SparseVector"]


@dataclass(frozen=True)
class SparseVector:
    """The non-zero entries of a vector over nodes: ``nodes`` (int64, increasing, no repeats) and their
    ``values`` (float64); every other node is 0.

    Raises:
        ValueError: ``nodes`` and ``values`` differ in length, or ``nodes`` is not increasing.
    """

    nodes: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        if self.nodes.shape != self.values.shape or self.nodes.ndim != 1:
            raise ValueError(f"nodes {self.nodes.shape} and values {self.values.shape} must be two equal 1-D arrays")
        if self.nodes.size > 1 and not bool(np.all(self.nodes[1:] > self.nodes[:-1])):
            raise ValueError("nodes must be increasing, each node once")

    @classmethod
    def empty(cls) -> SparseVector:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0))

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseVector:
        """The non-zero entries of a whole vector."""
        nodes = np.flatnonzero(dense)
        return cls(nodes.astype(np.int64, copy=False), np.asarray(dense[nodes], dtype=np.float64))

    @classmethod
    def from_mapping(cls, weights: Mapping[int, float]) -> SparseVector:
        """``{node: value}`` as a vector (zero values are left out)."""
        nodes = np.fromiter((j for j, value in weights.items() if value != 0), dtype=np.int64)
        values = np.fromiter((value for value in weights.values() if value != 0), dtype=np.float64,
                             count=nodes.size)
        order = np.argsort(nodes, kind="stable")
        return cls(nodes[order], values[order])

    def plus(self, nodes: np.ndarray, values: np.ndarray) -> SparseVector:
        """This vector with ``values`` added at ``nodes`` (a node may repeat; added in the order given)."""
        merged, positions = np.unique(np.concatenate([self.nodes, np.asarray(nodes, dtype=np.int64)]),
                                      return_inverse=True)
        # bincount adds each bin's weights in input order: this vector's value first, then the additions
        summed = np.bincount(positions, weights=np.concatenate([self.values, np.asarray(values, dtype=np.float64)]),
                             minlength=merged.size)
        return SparseVector(merged, summed)

    def total(self) -> float:
        return float(self.values.sum())

    def to_dense(self, size: int) -> np.ndarray:
        """The whole vector of ``size`` nodes."""
        dense = np.zeros(size)
        dense[self.nodes] = self.values
        return dense

    def split(self, boundary: int) -> tuple[SparseVector, SparseVector]:
        """The entries below ``boundary``, and those from it on with their nodes counted from ``boundary``."""
        cut = int(np.searchsorted(self.nodes, boundary))
        return (SparseVector(self.nodes[:cut], self.values[:cut]),
                SparseVector(self.nodes[cut:] - boundary, self.values[cut:]))
