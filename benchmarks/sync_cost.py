"""The cost of keeping an index in step with a changing corpus, against building it from scratch.

On HotpotQA-100's corpus (994 passages, one document per title) each index kind is built once into a fresh
persistent Chroma store (the baseline), then synced four times:

1. ``unchanged``: the same corpus again (should embed nothing);
2. ``one_changed``: one document's text edited;
3. ``ten_percent_changed``: every tenth document edited;
4. ``ten_percent_removed``: every tenth document gone (the folder mirrored).

Each figure is wall-clock seconds and its ratio to the full build of the same run, with the number of passages
embedded during the step. Results go to ``benchmarks/results/sync-cost.json``.

Usage:
    python benchmarks/sync_cost.py [--index vector,graph] [--dataset ../shared/datasets/hotpotqa-100]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from result_file import write_result

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = ROOT.parent / "shared" / "datasets" / "hotpotqa-100"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "sync-cost.json"


def corpus_documents(dataset: Path, edit_every: int = 0, drop_every: int = 0) -> list[Any]:
    """HotpotQA-100's corpus as documents known by their titles; every ``edit_every``-th one edited."""
    from llama_index_mhop.stores.corpus import join_sentences, make_document

    corpus = json.loads((dataset / "corpus.json").read_text())
    docs = []
    for position, (title, sentences) in enumerate(corpus.items()):
        if drop_every and position % drop_every == 0:
            continue
        text = join_sentences(sentences)
        if edit_every and position % edit_every == 0:
            text += " This passage was revised."
        docs.append(make_document(title, text, doc_id=title))
    return docs


class CountingEmbedder:
    """Counts the texts an embedder embeds, by wrapping its batch method."""

    def __init__(self, embed_model: Any) -> None:
        self.count = 0
        original = embed_model._get_text_embeddings

        def counted(texts: list[str]) -> list[list[float]]:
            self.count += len(texts)
            return original(texts)

        object.__setattr__(embed_model, "_get_text_embeddings", counted)


def vector_steps(client: Any, embed_model: Any) -> Callable[[Sequence[Any], bool], Any]:
    from llama_index_mhop.stores.vector_index import delete_documents, stored_documents, sync_vector_index

    def sync(documents: Sequence[Any], mirror: bool) -> Any:
        result = sync_vector_index(documents, chroma_client=client, embed_model=embed_model, show_progress=False,
                                   collection_name="sync_cost")
        if mirror:  # a list of documents has no source to mirror: remove what it no longer holds
            gone = set(stored_documents(result.index.vector_store.client)) - {d.id_ for d in documents}
            delete_documents(result.index, sorted(gone))
            return {**result.plan.counts(), "removed": len(gone)}
        return result.plan

    return sync


def graph_steps(client: Any, embed_model: Any) -> Callable[[Sequence[Any], bool], Any]:
    from llama_index_mhop.graph import HippoGraphIndex

    state: dict[str, Any] = {}

    def sync(documents: Sequence[Any], mirror: bool) -> Any:
        if "index" not in state:
            state["index"] = HippoGraphIndex.from_documents(documents, chroma_client=client, embed_model=embed_model,
                                                            show_progress=False)
            return None
        index = state["index"]
        changed = index.refresh_ref_docs(documents)
        if mirror:
            present = {d.id_ for d in documents}
            held = {record.ref_doc_id for record in index.graph.passages.values()}
            for doc_id in sorted(held - present):
                index.delete_ref_doc(doc_id)
        return sum(changed)

    return sync


def measure(kind: str, dataset: Path, work: Path) -> dict[str, Any]:
    from llama_index_mhop.stores.defaults import default_chroma_client, default_embed_model

    embed_model = default_embed_model()
    counter = CountingEmbedder(embed_model)
    client = default_chroma_client(work / kind)
    sync = (vector_steps if kind == "vector" else graph_steps)(client, embed_model)
    steps = [
        ("full_build", corpus_documents(dataset), False),
        ("unchanged", corpus_documents(dataset), False),
        ("one_changed", corpus_documents(dataset, edit_every=len(corpus_documents(dataset))), False),
        ("ten_percent_changed", corpus_documents(dataset, edit_every=10), False),
        ("ten_percent_removed", corpus_documents(dataset, edit_every=10, drop_every=10), True),
    ]
    rows: dict[str, Any] = {}
    for name, documents, mirror in steps:
        before = counter.count
        start = time.perf_counter()
        outcome = sync(documents, mirror)
        seconds = time.perf_counter() - start
        rows[name] = {"seconds": round(seconds, 3), "texts_embedded": counter.count - before,
                      "outcome": outcome.counts() if hasattr(outcome, "counts") else outcome}
    base = rows["full_build"]["seconds"]
    for row in rows.values():
        row["ratio_to_full_build"] = round(row["seconds"] / base, 4)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", default="vector,graph", help="index kinds to measure (vector, graph)")
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mhop-sync-cost-"))
    try:
        result = {
            "dataset": str(args.dataset.name),
            "date": dt.date.today().isoformat(),
            "machine": f"{platform.machine()}, {platform.python_version()}",
            "indexes": {kind: measure(kind, args.dataset, work) for kind in args.index.split(",")},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
