"""RRFFusionRetriever and PerspectiveQueryTransform inside standard LlamaIndex query engines, over Chroma.

Runs offline: the packaged all-MiniLM-L6-v2 embeds the shipped demo corpus into an in-memory Chroma, and
LlamaIndex's MockLLM stands in for the answering LLM (swap in any real LlamaIndex LLM).

    python examples/rrf_query_engine.py
"""

import chromadb
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine, TransformQueryEngine

from llama_index_mhop import PerspectiveQueryTransform, RRFFusionRetriever, build_vector_index
from llama_index_mhop.cli.commands import load_demo
from llama_index_mhop.stores.corpus import make_document


def main() -> None:
    corpus, questions = load_demo()
    documents = [make_document(p["title"], p["text"]) for p in corpus]
    index = build_vector_index(documents, chroma_client=chromadb.EphemeralClient(), show_progress=False)
    question = questions[0]["question"]

    # 1. The fusion retriever in a RetrieverQueryEngine.
    retriever = RRFFusionRetriever.from_defaults(index, similarity_top_k=5)
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=MockLLM(max_tokens=8))
    response = engine.query(question)
    print(f"Q: {question}")
    for node in response.source_nodes:
        print(f"  RRF {node.score:.4f}  {node.node.metadata['title']}")
    print("  perspectives of the first iteration:", retriever.last_trace["iterations"][0]["perspectives"])

    # 2. The perspective transform around index.as_query_engine(...).
    transformed = TransformQueryEngine(
        index.as_query_engine(llm=MockLLM(max_tokens=8), similarity_top_k=5),
        query_transform=PerspectiveQueryTransform(),
    )
    response = transformed.query(question)
    print("as_query_engine + PerspectiveQueryTransform:")
    for node in response.source_nodes:
        print(f"  cos {node.score:.4f}  {node.node.metadata['title']}")


if __name__ == "__main__":
    main()
