"""HippoRAG 2 memory over Chroma: build (or reopen) a HippoGraphIndex, retrieve with a trace, query it, and read
it as a query worker would (HippoGraphReader).

Runs offline with the packaged all-MiniLM-L6-v2 embedder and the LLM-free extractor and fact filter:

    python examples/hippo_graph_query_engine.py                      # the package's demo corpus (39 passages)
    python examples/hippo_graph_query_engine.py path/to/corpus.json --question "Who directed ...?"

Pass ``--lm openai/gpt-4o-mini`` (any DSPy model string) to extract triples and filter facts with an LM.
The first run indexes into ``--persist-dir``; an interrupted run resumes there, and later runs reopen it.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

from llama_index_mhop.graph import HippoGraphReader
from llama_index_mhop.graph.index import CONFIG_FILE, HippoGraphIndex

# The multi-hop corpus shipped inside the package, and a three-hop question about it.
DEMO_CORPUS = resources.files("llama_index_mhop") / "data" / "demo_corpus.json"
DEMO_QUESTION = "In which river valley was the composer of the Gull Island Overture born?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", default=str(DEMO_CORPUS),
                        help="JSON corpus or folder of text files (default: the package's demo corpus)")
    parser.add_argument("--persist-dir", default="./.mhop/hippo", help="where the index is saved")
    parser.add_argument("--question", default=DEMO_QUESTION)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--lm", default=None, help="a DSPy model string, e.g. openai/gpt-4o-mini (default: none)")
    args = parser.parse_args()

    lm = None
    if args.lm:
        import dspy

        lm = dspy.LM(args.lm)

    if (Path(args.persist_dir) / CONFIG_FILE).is_file():
        index = HippoGraphIndex.from_persist_dir(args.persist_dir, lm=lm)
    else:
        index = HippoGraphIndex.from_documents(args.corpus, persist_dir=args.persist_dir, lm=lm)
    print(index)

    retriever = index.as_retriever(similarity_top_k=args.top_k, lm=lm)
    for rank, hit in enumerate(retriever.retrieve(args.question), start=1):
        print(f"{rank}. {hit.score:.4f}  {hit.node.metadata.get('title', '')}")
    trace = retriever.last_trace
    print("kept facts:", json.dumps(trace["kept_facts"], ensure_ascii=False))
    print("query entities:", trace["query_entities"])
    print("top entities:", [e["name"] for e in trace["top_entities"][:5]])

    # The same index behind LlamaIndex's RetrieverQueryEngine. Pass any LlamaIndex LLM as llm= to get answers;
    # MockLLM keeps this example offline (its "answer" is a placeholder), so only the sources are shown.
    from llama_index.core.llms import MockLLM

    engine = index.as_query_engine(llm=MockLLM(max_tokens=8), similarity_top_k=args.top_k)
    response = engine.query(args.question)
    print("query engine sources:", [n.node.metadata.get("title") for n in response.source_nodes])

    # A query worker of a deployment (docs/SCALING.md) opens the saved index as a reader: it maps the save's query
    # snapshot instead of parsing the graph's tables, and answers as the index does.
    reader = HippoGraphReader.open(args.persist_dir, chroma_client=index.chroma_client, embed_model=index.embed_model)
    hits = reader.as_retriever(similarity_top_k=args.top_k, lm=lm).retrieve(args.question)
    print("reader:", [hit.node.metadata.get("title") for hit in hits])


if __name__ == "__main__":
    main()
