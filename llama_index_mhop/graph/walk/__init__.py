"""The graph's Personalized PageRank walk: :class:`~.graph_walk.GraphWalk` ranks a query's passages, one per graph
version, and the machinery it runs on a large graph.

* :mod:`.graph_walk`: the walk of one graph version: a query reads its
  :attr:`~.graph_walk.GraphWalk.needs_every_passage_score` for its dense search and calls its
  :meth:`~.graph_walk.GraphWalk.rank` with the seeds as a :class:`~.sparse_vector.SparseVector` and the
  similarities as :class:`~.dense_search.DenseScores`;
* :mod:`.ppr`: the transition matrix and the power iteration; :mod:`.push_ppr`: the local push from a few seeds;
  :mod:`.sparse_vector`: those seeds and what a push reaches;
* :mod:`.affine_ppr`: the reset's dense share on every passage solved once per graph version, and
  :mod:`.basis_files`: that solve on disk beside a persisted index;
* :mod:`.dense_search`: a query's similarity to every passage and fact, exact or through Chroma's HNSW index;
  :mod:`.row_products` and :mod:`.int8_rows`: a query's product with every row, estimated where bounds allow.
"""
