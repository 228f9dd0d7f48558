"""The graph's Personalized PageRank walk and dense searches: :class:`GraphWalk` ranks a query's passages, one
per graph version, on the exact path (:mod:`.exact`) or, past the sizes of :class:`WalkSettings`, the large-graph
tier (:mod:`.push`, :mod:`.affine`, :mod:`.basis_files`, :mod:`.int8_rows`)."""

from .basis_files import BASIS_FOLDER
from .exact import DEFAULT_DAMPING, DEFAULT_MAX_ITER, DEFAULT_TOL, DenseScores, PageRankGraph, SparseVector
from .walk import DenseVectors, GraphWalk, Ranking, VectorSum, WalkMode, WalkSettings

__all__ = ["BASIS_FOLDER", "DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "DenseScores", "DenseVectors",
           "GraphWalk", "PageRankGraph", "Ranking", "SparseVector", "VectorSum", "WalkMode", "WalkSettings"]
