"""``mhop demo``: index the shipped multi-hop corpus and show what each retriever finds, gold passages marked."""

from __future__ import annotations

import json
import os
from importlib import resources
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["load_demo", "run_demo"]


def load_demo() -> tuple[list[dict], list[dict]]:
    """The shipped demo corpus (``[{title, text}]``) and questions (``[{question, gold_titles, hops, ...}]``)."""
    data = resources.files("llama_index_mhop") / "data"
    corpus = json.loads((data / "demo_corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((data / "demo_questions.json").read_text(encoding="utf-8"))
    return corpus, questions


def run_demo(
    chroma_path: str | os.PathLike[str],
    retrievers: list[str],
    top_k: int = 5,
    lm: Any = None,
    console: Console | None = None,
) -> int:
    """Index the demo corpus under ``chroma_path`` and print, per question, each retriever's top ``top_k``."""
    from ..bench.context import IndexContext
    from ..bench.registry import get_retriever_spec
    from ..stores.corpus import make_document
    from ..stores.defaults import default_chroma_client
    from ..stores.vector_index import build_vector_index

    console = console or Console()
    specs = [get_retriever_spec(name) for name in retrievers]
    corpus, questions = load_demo()
    documents = [make_document(p["title"], p["text"]) for p in corpus]
    client = default_chroma_client(chroma_path)

    def graph_index() -> Any:
        from ..graph import HippoGraphIndex

        return HippoGraphIndex.from_documents(documents, chroma_client=client, name="mhop_demo_graph",
                                              show_progress=False)

    index = build_vector_index(documents, collection_name="mhop_demo", chroma_client=client, show_progress=False)
    context = IndexContext(top_k, lm, vector_index=lambda: index, graph_index=graph_index)
    built = {spec.name: spec.factory(context) for spec in specs}
    console.print(f"[bold]Demo corpus:[/bold] {len(documents)} passages, {len(questions)} multi-hop questions "
                  f"(indexed in Chroma at {chroma_path})\n")
    found_all = {name: 0 for name in retrievers}
    for question in questions:
        gold = question["gold_titles"]
        table = Table(title=f"{question['question']}  ({question['hops']} hops; answer: {question['answer']})",
                      title_justify="left")
        table.add_column("rank")
        for name in retrievers:
            table.add_column(name)
        columns = []
        for name in retrievers:
            titles = [r.node.metadata.get("title", "") for r in built[name].retrieve(question["question"])]
            found_all[name] += set(gold) <= set(titles)
            columns.append([f"[green]✓ {t}[/green]" if t in gold else t for t in titles])
        for rank in range(top_k):
            table.add_row(str(rank + 1), *[col[rank] if rank < len(col) else "" for col in columns])
        console.print(table)
        console.print(f"gold: {', '.join(gold)}\n")
    summary = ", ".join(f"{name}: {count}/{len(questions)}" for name, count in found_all.items())
    console.print(f"[bold]Questions with every gold passage in the top {top_k}:[/bold] {summary}")
    return 0
