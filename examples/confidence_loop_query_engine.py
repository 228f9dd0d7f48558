"""A query engine on the confidence-loop retriever (seed 001), offline, over a small Chroma index.

Run from the project root:  python examples/confidence_loop_query_engine.py

No LM is configured, so every step of the loop uses its LLM-free strategy; ``MockLLM`` stands in for the
answer-writing LLM of the query engine. Pass ``lm=dspy.LM(...)`` (or ``llm=`` any LlamaIndex LLM) to
``ConfidenceLoopRetriever.from_defaults`` to let an LM write the queries, judge the confidence and rerank.
"""

from __future__ import annotations

import json

import chromadb
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_mhop.components.confidence_loop import ConfidenceLoopRetriever
from llama_index_mhop.stores.corpus import make_document
from llama_index_mhop.stores.vector_index import build_vector_index

# A two-hop question: the town's passage names the film, only the film's passage names its director.
DOCUMENTS = [
    make_document(
        "Leland, North Carolina",
        "Leland is a town in Brunswick County, North Carolina, United States. Several films were shot in "
        "Leland, among them Maximum Overdrive in 1986 and Domestic Disturbance in 2001.",
    ),
    make_document(
        "Maximum Overdrive",
        "Maximum Overdrive is a 1986 American science fiction horror film written and directed by "
        "Stephen King. It stars Emilio Estevez and Pat Hingle.",
    ),
    make_document(
        "Domestic Disturbance",
        "Domestic Disturbance is a 2001 American thriller film directed by Harold Becker and starring "
        "John Travolta and Vince Vaughn.",
    ),
    make_document(
        "Stephen King",
        "Stephen Edwin King is an American author of horror, supernatural fiction, suspense and fantasy "
        "novels.",
    ),
    make_document(
        "Brunswick County, North Carolina",
        "Brunswick County is the southernmost county in North Carolina. Its county seat is Bolivia.",
    ),
    make_document(
        "Wilmington, North Carolina",
        "Wilmington is a port city in North Carolina. It is home to EUE/Screen Gems studios, where many "
        "television series have been filmed.",
    ),
]
QUESTION = "Who directed the film that was shot in Leland, North Carolina in 1986?"


def main() -> None:
    # An in-memory Chroma store; use default_chroma_client(path) for one that persists.
    index = build_vector_index(
        DOCUMENTS, chroma_client=chromadb.EphemeralClient(), collection_name="example", show_progress=False
    )
    # Small corpus, so small depths; the defaults (23, 15 and 21) suit a corpus of thousands of passages.
    retriever = ConfidenceLoopRetriever.from_defaults(index, similarity_top_k=4, round1_k=4, round2_k=3)
    engine = RetrieverQueryEngine.from_args(retriever=retriever, llm=MockLLM())
    response = engine.query(QUESTION)

    print(f"Question: {QUESTION}")
    print("Passages given to the LLM:")
    for rank, node in enumerate(response.source_nodes, start=1):
        print(f"  {rank}. {node.node.metadata['title']} (score {node.score:.3f})")
    trace = retriever.last_trace
    summary = {key: trace[key] for key in ("rounds", "confidence", "round2", "steps")}
    summary["gaps"] = [gap["text"] for gap in trace["gaps"]]
    print("Trace:", json.dumps(summary, indent=2))
    print("Fallbacks:", retriever.fallback_counts.as_dict())


if __name__ == "__main__":
    main()
