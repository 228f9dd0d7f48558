"""Stores: corpora as documents and passages, the Chroma passage index and its syncs, consistent reads, the
packaged embedder and the defaults."""
