"""The graph's Personalized PageRank walk: :class:`GraphWalk` ranks a query's passages, one per graph version, on
the exact path (:mod:`.exact`) or, past the sizes of :class:`WalkSettings`, the large-graph tier (:mod:`.push`,
:mod:`.affine`, :mod:`.basis_files`, :mod:`.int8_rows`). Names are imported on first use, so the exact path
imports no module of the large-graph tier."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...rules.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .basis_files import BASIS_FOLDER
    from .exact import (
        DEFAULT_DAMPING,
        DEFAULT_MAX_ITER,
        DEFAULT_TOL,
        DenseScores,
        GraphWalk,
        PageRankGraph,
        Ranking,
        SparseVector,
    )
    from .walk import WalkMode, WalkSettings

__all__ = ["BASIS_FOLDER", "DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "DenseScores", "GraphWalk",
           "PageRankGraph", "Ranking", "SparseVector", "WalkMode", "WalkSettings"]

#: Where each exported name lives (the module, relative to this package).
_EXPORTS = {name: module for module, names in {
    ".basis_files": ("BASIS_FOLDER",), ".walk": ("WalkMode", "WalkSettings"),
    ".exact": ("DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "DenseScores", "GraphWalk", "PageRankGraph",
               "Ranking", "SparseVector"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
