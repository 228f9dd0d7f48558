"""The benchmark harness (seed 002): dataset loaders, the Searcher, the retriever registry and the Benchmarker."""
