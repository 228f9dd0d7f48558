"""The private names of LlamaIndex and Chroma the package reads, one module a library, each behind one function."""
