"""How a graph version's walk is set up: the settings that choose its paths and dense searches by size, and the
matrices it reads of a graph (:class:`WalkMatrices`). Below every size of :class:`WalkSettings` a query takes the
exact path (:mod:`.exact`). Past them: the dense share solved once and a push from the seeds (:mod:`.affine`,
:mod:`.push`); products estimated from an int8 copy first (:mod:`.int8_rows`); a collection searched through
Chroma's HNSW index, its ``hnsw_top_n`` nearest exact, every other record at the exact mean of the rest, the least
similar the nearest to ``-q``. Sharing that mean lost 6.3 points of recall@21 at 1M passages (docs/SCALING.md),
hence the high passage threshold."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np
from scipy import sparse

if TYPE_CHECKING:
    from ..state import DenseVectors
    from .exact import GraphWalk

__all__ = ["WalkMatrices", "WalkMode", "WalkSettings", "walk_matrices"]

logger = logging.getLogger(__name__)

WalkMode = Literal["auto", "exact"]
_MODES = ("auto", "exact")


@dataclass
class WalkSettings:
    """Which paths an index's walk and searches take: ``"exact"`` always, ``"auto"`` the large-graph tier past the
    size thresholds; each path logged once at INFO. Raises ValueError for an unknown ``walk`` or a negative size."""

    walk: WalkMode = "auto"
    push_min_nodes: int = 50_000
    int8_min_rows: int = 50_000
    hnsw_min_facts: int = 500_000
    hnsw_min_passages: int = 4_000_000
    hnsw_top_n: int = 256
    name: str = ""
    _logged: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.walk not in _MODES:
            raise ValueError(f"walk must be one of {_MODES}, got {self.walk!r}")
        sizes = (self.push_min_nodes, self.int8_min_rows, self.hnsw_min_facts, self.hnsw_min_passages, self.hnsw_top_n)
        if min(sizes) < 0:
            raise ValueError(f"walk sizes must be >= 0, got {sizes}")

    def minimum(self, size: str) -> int:
        """The value of the threshold field ``size``: none is ever reached on the exact walk."""
        return sys.maxsize if self.walk == "exact" else getattr(self, size)

    def log_paths(self, passages: DenseVectors, facts: DenseVectors, walk: GraphWalk) -> None:
        """Log, once per path, which large-graph paths a loaded version takes."""
        basis = None if walk.affine is None else walk.affine.basis_products
        taken = {"push walk": walk.affine is not None, "HNSW passage search": passages.method == "hnsw",
                 "HNSW fact search": facts.method == "hnsw",
                 "int8 row products": any(p is not None and p.method == "int8"
                                          for p in (passages.products, facts.products, basis))}
        for path in [p for p, on in taken.items() if on and p not in self._logged]:
            self._logged.add(path)
            logger.info("index %r: the %s is on (walk settings %s)", self.name, path, self)


class WalkMatrices(NamedTuple):
    """What a walk reads of a graph: ``M`` (column-stochastic CSR), ``P = M.T`` (row-stochastic CSR) and each
    node's out-weight; given to :class:`PageRankGraph` they are used as they are (memory maps stay shared)."""

    transition: sparse.csr_matrix
    walk: sparse.csr_matrix
    out_weight: np.ndarray
    symmetric: bool | None = None  # whether the adjacency is symmetric (None: not known, found on first use)


def walk_matrices(adjacency: Any) -> tuple[sparse.csr_matrix, sparse.csr_matrix, np.ndarray]:
    """The transition matrix ``M``, the walk ``P = M.T`` (row-stochastic CSR) and each node's out-weight."""
    if sparse.issparse(adjacency):
        a = sparse.csr_matrix(adjacency, dtype=np.float64, copy=True)
    else:
        a = sparse.csr_matrix(np.asarray(adjacency, dtype=np.float64))
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"adjacency must be a square n x n matrix, got shape {a.shape}")
    a.sum_duplicates()
    if a.nnz and not np.all(np.isfinite(a.data)):
        raise ValueError("adjacency holds a NaN or infinite edge weight")
    if a.nnz and a.data.min() < 0:
        raise ValueError(f"adjacency holds a negative edge weight ({a.data.min():g}); weights must be >= 0")
    a.eliminate_zeros()
    n = a.shape[0]
    out_weight = np.asarray(a.sum(axis=1), dtype=np.float64).ravel()
    scale = np.zeros(n)
    np.divide(1.0, out_weight, out=scale, where=out_weight > 0)
    a.data *= np.repeat(scale, np.diff(a.indptr))  # row-normalise in place: P[i, j] = A[i, j] / out(i)
    m = a.transpose().tocsr()
    m.sort_indices()
    return m, a, out_weight
