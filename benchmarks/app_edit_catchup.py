"""The first graph query after an app-side edit: the query that reconciles on its own against ``reconcile()`` by hand.

A ``VectorStoreIndex`` of the first 30 HotpotQA-100 paragraphs and a ``HippoGraphIndex`` beside it, in one
persistent Chroma store, embedded by the hashed embedder (``benchmarks/hashed_embedding.py``: the cost measured is
the graph's, not a model's). Each trial edits one document through LlamaIndex's ``refresh_ref_docs`` on the vector
index, then times a plain query before the edit, the first query after it and a ``reconcile()`` after that, with
the catch-up on (``auto_reconcile_max_passages=32``, the default) and off (0), and notes whether the query served
the new version.

Usage:
    python benchmarks/app_edit_catchup.py [--trials 5] [--out benchmarks/results/app-edit-catchup.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import chromadb
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.vector_stores.chroma import ChromaVectorStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hashed_embedding import HashedEmbedding  # noqa: E402

from llama_index_mhop.graph.index import HippoGraphIndex, HippoGraphIndexConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATASET = ROOT.parent / "shared" / "datasets" / "hotpotqa-100" / "questions.json"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "app-edit-catchup.json"


def _documents(count: int) -> list[Document]:
    docs, seen = [], set()
    for question in json.loads(DATASET.read_text()):
        for title, sentences in question["context"]:
            if title not in seen and len(docs) < count:
                seen.add(title)
                docs.append(Document(text=" ".join(sentences), id_=title, metadata={"title": title}))
    return docs


def _trial(docs: list[Document], which: int, bound: int) -> dict[str, float | bool]:
    work = Path(tempfile.mkdtemp())
    embed = HashedEmbedding()
    client = chromadb.PersistentClient(path=str(work / "chroma"))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("app"))
    vector = VectorStoreIndex.from_documents(docs, storage_context=StorageContext.from_defaults(vector_store=store),
                                             embed_model=embed)
    config = HippoGraphIndexConfig(auto_reconcile_max_passages=bound, show_progress=False)
    graph = HippoGraphIndex.from_vector_index(vector, chroma_client=client, persist_dir=work / "graph",
                                              embed_model=embed, config=config)
    retriever = graph.as_retriever(similarity_top_k=5)
    query = f"Who is {docs[which].id_}?"
    retriever.retrieve(query)  # warm
    start = time.perf_counter()
    retriever.retrieve(query)
    plain = time.perf_counter() - start
    edited = Document(text=docs[which].text + " It was edited in 2026.", id_=docs[which].id_,
                      metadata=docs[which].metadata)
    vector.refresh_ref_docs([edited])
    start = time.perf_counter()
    answers = retriever.retrieve(query)
    after = time.perf_counter() - start
    start = time.perf_counter()
    graph.reconcile()
    by_hand = time.perf_counter() - start
    return {"plain_ms": plain * 1000, "first_after_edit_ms": after * 1000, "reconcile_after_ms": by_hand * 1000,
            "new_version_served": any("edited in 2026" in n.node.get_content() for n in answers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    docs = _documents(30)
    results = {}
    for name, bound in (("catch-up on (32)", 32), ("catch-up off (0)", 0)):
        rows = [_trial(docs, trial, bound) for trial in range(args.trials)]
        results[name] = {key: round(statistics.median(float(r[key]) for r in rows), 1)
                         for key in ("plain_ms", "first_after_edit_ms", "reconcile_after_ms")}
        results[name]["new_version_served"] = f"{sum(bool(r['new_version_served']) for r in rows)}/{len(rows)}"
        print(name, results[name])
    report = {"benchmark": "app_edit_catchup", "documents": len(docs), "trials": args.trials,
              "statistic": "median", "results": results}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
