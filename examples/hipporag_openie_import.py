"""A HippoRAG corpus indexed from HippoRAG's stored OpenIE results, then queried through a standard query engine.

HippoRAG writes the OpenIE of a corpus (the LLM's entities and triples of every passage) to
``openie_results_ner_<model>.json``. ``StoredOpenIE`` serves those extractions to ``HippoGraphIndex`` so the LLM
is not paid twice; passages the file lacks are extracted by the fallback (here the LLM-free rules). Offline:

    python examples/hipporag_openie_import.py
    python examples/hipporag_openie_import.py CORPUS.json OPENIE.json --question "..." --export out.json
"""

from __future__ import annotations

import argparse
from pathlib import Path

import chromadb
from llama_index.core.llms import MockLLM

from llama_index_mhop.graph import HippoGraphIndex, StoredOpenIE, export_openie
from llama_index_mhop.stores.corpus import load_documents

DATA = Path(__file__).resolve().parent / "data"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", nargs="?", default=str(DATA / "hipporag_corpus.json"),
                        help="HippoRAG corpus: a JSON list of {title, text}")
    parser.add_argument("openie", nargs="?", default=str(DATA / "openie_results_ner_gpt-4o-mini.json"),
                        help="HippoRAG's openie_results_ner_<model>.json")
    parser.add_argument("--question", default="Where was the director of Maximum Overdrive born?")
    parser.add_argument("--export", help="also write the index's extractions here, in the same format")
    args = parser.parse_args()

    extractor = StoredOpenIE(args.openie)  # passages the file lacks: the LLM-free extractor
    index = HippoGraphIndex.from_documents(load_documents(args.corpus), chroma_client=chromadb.EphemeralClient(),
                                           extractor=extractor, show_progress=False)
    print(f"passages from the OpenIE file: {extractor.from_file}, extracted: {extractor.extracted}")
    print(index)

    # A standard LlamaIndex RetrieverQueryEngine; MockLLM keeps the example offline (pass any LLM for answers).
    engine = index.as_query_engine(llm=MockLLM(max_tokens=8), similarity_top_k=3)
    response = engine.query(args.question)
    print(f"Q: {args.question}")
    for rank, node in enumerate(response.source_nodes, start=1):
        print(f"{rank}. {node.score:.4f}  {node.node.metadata.get('title', '')}")
    if args.export:
        print("exported:", export_openie(index, args.export))


if __name__ == "__main__":
    main()
