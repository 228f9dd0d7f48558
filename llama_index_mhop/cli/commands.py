"""The ``mhop`` command: index a corpus (``mhop index ./my_corpus/``), query it (``mhop query "..." --explain``),
run the demo (the shipped multi-hop corpus, each retriever's finds with gold passages marked), benchmark retrievers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..rules.text import escape_controls
from ..stores.sync import UnknownDocumentError
from .arguments import ConfigError, find_config, load_config, make_parser, options_problem, timeout_problem

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# Light imports only, so --help and argument errors answer at once: each command imports what it needs.

__all__ = ["build_parser", "load_demo", "main"]


def __getattr__(name: str) -> Any:
    if name == "console":  # the Rich console, made on first use (see _console)
        return _console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _console() -> Console:
    """The console every command prints through: this module's ``console`` (tests may replace it), made on first use."""
    current = globals().get("console")
    if current is None:
        from rich.console import Console
        current = globals()["console"] = Console()
    return current


def _labelled(label: str, style: str, message: object) -> Text:
    """``label`` in ``style``, then ``message`` as plain text (never markup, control characters escaped)."""
    from rich.text import Text

    from ..rules.terminal import plain_text
    return Text.assemble((label, style), " ", plain_text(message))


def _client(args: argparse.Namespace, read_only: bool = False) -> Any:
    """The command's Chroma client; ``read_only``: an embedded store that cannot be written is read from a copy."""
    from ..stores.defaults import DEFAULT_CHROMA_TIMEOUT, default_chroma_client
    problem = timeout_problem(args.chroma_timeout)
    if problem:
        raise ValueError(problem)
    timeout = float(args.chroma_timeout or DEFAULT_CHROMA_TIMEOUT)
    return default_chroma_client(args.chroma_path, host=args.chroma_host, port=args.chroma_port, timeout=timeout,
                                 read_only=read_only)


def _graph_dir(args: argparse.Namespace) -> str:
    return args.graph_dir or os.path.join(os.path.dirname(os.path.abspath(args.chroma_path)), "graph")


def _embed_model(args: argparse.Namespace) -> Any:
    """The ``--embed-model`` embedder, loaded once per command however many steps of it embed."""
    from ..stores.defaults import load_embed_model
    if "loaded_embed_model" not in vars(args):
        args.loaded_embed_model = load_embed_model(args.embed_model)
    return args.loaded_embed_model


@contextmanager
def _writing(args: argparse.Namespace, graph: bool) -> Iterator[None]:
    """The writer locks of the folders a command changes (Chroma's, and the graph index's when ``graph``), taken
    before anything is written: two writers run one after the other, an unwritable folder is refused unchanged."""
    from ..stores.consistency import store_lock
    folders = [] if args.chroma_host else [args.chroma_path]
    if graph or args.chroma_host:
        folders.append(_graph_dir(args))
    with ExitStack() as stack:
        for folder in folders:
            stack.enter_context(store_lock(folder))
        yield


def _graph_exists(args: argparse.Namespace) -> bool:
    from ..graph.layout import saved_index_exists
    return saved_index_exists(Path(_graph_dir(args)))


def cmd_index(args: argparse.Namespace) -> int:
    from ..stores.corpus import SKIP_MARK
    from ..stores.passage_index import passage_collection
    from ..stores.vector_index import sync_vector_index
    stores_log = logging.getLogger("llama_index_mhop.stores.corpus")
    def not_listed(record: logging.LogRecord) -> bool:  # a skipped file is listed: its log line would say it twice
        return not getattr(record, SKIP_MARK, False)
    stores_log.addFilter(not_listed)
    try:
        with _writing(args, graph=args.graph or _graph_exists(args)):
            client = _client(args)
            result = sync_vector_index(args.path, collection_name=args.collection, chroma_client=client,
                                       embed_model=_embed_model(args), show_progress=not args.quiet,
                                       delete_missing=not args.no_delete, strict=args.strict,
                                       follow_symlinks=args.follow_symlinks)
            console = _console()
            for file in result.skipped:
                console.print(_labelled("skipped", "yellow", file.reason), soft_wrap=True)
            counts = ", ".join(f"{n} {what}" for what, n in result.plan.counts().items())
            passages = passage_collection(result.index).count()
            console.print(_labelled("indexed", "green",
                                    f"{args.path} -> collection {args.collection!r}: {counts} ({passages} passages)"))
            if args.graph or _graph_exists(args):  # an existing graph is kept in step whether or not --graph is given
                graph, drift = _sync_graph(args, client, result.index)
                console.print(_labelled("graph", "green", f"-> {_graph_dir(args)}: {drift.counts()} passages "
                                                          f"reconciled, {graph.counts()}"))
    finally:
        stores_log.removeFilter(not_listed)
    return 0


def _sync_graph(args: argparse.Namespace, client: Any, vector_index: Any) -> tuple[Any, Any]:
    """The graph index reconciled with the passage collection it reads in place (also after a killed sync or
    delete), extracting only passages it lacks; a new graph starts from the passage index's stored vectors."""
    from ..graph import HippoGraphIndex
    from ..graph.reconcile import Drift
    from ..stores.passage_index import passage_collection
    show_progress = not getattr(args, "quiet", False)
    # A damaged save is removed (logged) and built again from the passage index, as a new one.
    graph = (HippoGraphIndex.reopen_or_discard(_graph_dir(args), chroma_client=client, embed_model=_embed_model(args))
             if _graph_exists(args) else None)
    if graph is None:
        graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, persist_dir=_graph_dir(args),
                                                  embed_model=_embed_model(args), show_progress=show_progress)
        return graph, Drift(new=tuple(graph.graph.passages))
    if not graph.stores.read_passages_from(passage_collection(vector_index)):
        raise ValueError(f"the graph index in {_graph_dir(args)} is not in the passage index's Chroma store")
    return graph, graph.reconcile(show_progress=show_progress)


def _open_graph(args: argparse.Namespace, client: Any) -> Any:
    from ..graph import HippoGraphIndex, HippoGraphIndexConfig
    if not _graph_exists(args):
        raise FileNotFoundError(f"no graph index at {_graph_dir(args)}; build it with: mhop index PATH --graph")
    # A command reconciles the graph by itself when it changes the store (_sync_graph); a query never writes.
    return HippoGraphIndex.from_persist_dir(_graph_dir(args), chroma_client=client, embed_model=_embed_model(args),
                                            config=HippoGraphIndexConfig(auto_reconcile_max_passages=0))


def cmd_query(args: argparse.Namespace) -> int:
    from ..bench.context import IndexContext
    from ..bench.registry import get_retriever_spec
    from ..lm.clients import lm_from_spec
    from ..rules.text import check_query
    from ..stores.vector_index import load_vector_index
    args.query = check_query(args.query)  # an empty query is an error before any store is opened
    client = _client(args, read_only=True)
    lm = lm_from_spec(args.lm)
    context = IndexContext(
        args.top_k, lm,
        vector_index=lambda: load_vector_index(args.collection, chroma_client=client, embed_model=_embed_model(args)),
        graph_index=lambda: _open_graph(args, client), program=args.program,
    )
    retriever = get_retriever_spec(args.retriever).factory(context)
    results = retriever.retrieve(args.query)
    trace = (getattr(retriever, "last_trace", None) or {"note": f"{args.retriever} keeps no trace"}) \
        if args.explain else None
    answer = None
    if lm is not None:  # the LM's module (and DSPy) only when there is an LM
        from ..lm.answer import answer_question
        answer = answer_question(args.query, [n.node.get_content() for n in results], lm)
    if args.json:
        report: dict[str, Any] = {"query": args.query, "retriever": args.retriever, "results": [
            {"rank": rank, "score": result.score, "id": result.node.node_id,
             "title": result.node.metadata.get("title", ""), "text": result.node.get_content()}
            for rank, result in enumerate(results, start=1)]}
        if trace is not None:
            report["trace"] = trace
        if lm is not None:
            report["answer"] = answer
        _print_json(report)
        return 0
    console = _console()
    if console.is_terminal:
        _print_table(args, results)
    else:  # piped: one line a passage, tab-separated, never wrapped
        for rank, result in enumerate(results, start=1):
            fields = (str(rank), f"{result.score or 0.0:.4f}", result.node.metadata.get("title", ""),
                      result.node.get_content())
            console.file.write("\t".join(escape_controls(" ".join(str(f).split())) for f in fields) + "\n")
    if trace is not None:
        _print_chain(trace.get("chain", []))
        _print_json(trace)
    if answer is not None:
        _console().print(_labelled("answer:", "bold", answer))
    return 0


def _print_json(value: Any) -> None:
    """``value`` as JSON, unwrapped so it parses; ensure_ascii escapes every control and bidi character."""
    file = _console().file
    file.write(json.dumps(value, indent=2, ensure_ascii=True, default=str) + "\n")
    file.flush()


def _print_chain(chain: Sequence[dict[str, Any]]) -> None:
    """The evidence chain's hops, one line each: which sentence of which passage led where, and its weight."""
    file = _console().file
    for step in chain:
        line = (f"chain hop {step['hop']}: {step['from']} -> {step['entity']}"
                f"{' (' + step['to'] + ')' if step['to'] else ''}, weight {step['weight']:.3f}, "
                f"matched {', '.join(step['matched']) or 'no relation word'}: {step['sentence']}")
        file.write(escape_controls(" ".join(line.split())) + "\n")


def _print_table(args: argparse.Namespace, results: Sequence[Any]) -> None:
    """The results as a table for a terminal (passages, titles and the query are untrusted: plain text)."""
    from rich.table import Table

    from ..rules.terminal import plain_text
    table = Table(title=plain_text(f"{args.retriever}: {args.query}"))
    for column in ("rank", "score", "title", "passage"):
        table.add_column(column)
    for rank, result in enumerate(results, start=1):
        text = " ".join(result.node.get_content().split())
        table.add_row(str(rank), f"{result.score or 0.0:.4f}", plain_text(result.node.metadata.get("title", "")),
                      plain_text(text[:160] + ("…" if len(text) > 160 else "")))
    _console().print(table)


def cmd_delete(args: argparse.Namespace) -> int:
    from ..stores.vector_index import delete_documents, load_vector_index
    gone: list[UnknownDocumentError] = []
    with _writing(args, graph=_graph_exists(args)):
        client = _client(args)
        index = load_vector_index(args.collection, chroma_client=client, embed_model=_embed_model(args))
        try:
            # An id given twice, or a doc id and its file name, is one document: removed once. An id already
            # gone (a delete killed between its documents, run again) is reported and the others removed.
            removed = list(dict.fromkeys(delete_documents(index, list(dict.fromkeys(args.doc_ids)), gone)))
            if gone and not removed:
                raise gone[0]
        finally:  # the graph follows the passage index, also after a delete killed before it followed
            if _graph_exists(args):
                _sync_graph(args, client, index)
    console = _console()
    for error in gone:
        console.print(_labelled("not found", "yellow", error), soft_wrap=True)
    console.print(_labelled("removed", "green",
                            f"{len(removed)} document(s) from collection {args.collection!r}: {', '.join(removed)}"))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """What is indexed, read from Chroma's records and the graph's saved files, with no index opened."""
    from ..rules.counters import process_counters
    from ..stores.defaults import describe_client
    from .status import graph_status, passage_status
    client = _client(args, read_only=True)
    report: dict[str, Any] = {"store": describe_client(client), "passages": passage_status(client, args.collection)}
    graph_dir = _graph_dir(args)
    if _graph_exists(args):
        report["graph"] = {"dir": graph_dir, **graph_status(client, graph_dir)}
    report["process_counters"] = process_counters()
    _print_json(report)  # plain JSON: stored text is data, never console markup
    return 0


def load_demo() -> tuple[list[dict], list[dict]]:
    """The shipped demo corpus (``[{title, text}]``) and questions (``[{question, gold_titles, hops, ...}]``)."""
    data = resources.files("llama_index_mhop") / "data"
    corpus = json.loads((data / "demo_corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((data / "demo_questions.json").read_text(encoding="utf-8"))
    return corpus, questions


def cmd_demo(args: argparse.Namespace) -> int:
    """Index the demo corpus under ``--chroma-path`` and print, per question, each retriever's top ``--top-k``."""
    from rich.table import Table

    from ..bench.context import IndexContext
    from ..bench.registry import get_retriever_spec
    from ..lm.clients import lm_from_spec
    from ..stores.corpus import make_document
    from ..stores.defaults import default_chroma_client
    from ..stores.vector_index import build_vector_index
    lm = lm_from_spec(args.lm)
    chroma_path, top_k, retrievers = args.chroma_path, args.top_k, args.retrievers.split(",")
    console = _console()
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


def _imported(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command run by ``module.name`` (relative to this package), imported only when the command runs."""
    return lambda args: getattr(importlib.import_module(module, __package__), name)(args)


def build_parser(defaults: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    """The ``mhop`` argument parser; ``defaults`` (from ``mhop.toml``, by argparse dest) replace built-in defaults."""
    handlers = {"index": cmd_index, "delete": cmd_delete, "query": cmd_query, "status": cmd_status, "demo": cmd_demo,
                "optimize": _imported("..bench.optimize", "run_optimize"),
                "bench": _imported("..bench.cli", "run_bench")}
    return make_parser(handlers, defaults)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mhop`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--config")
    try:
        config = find_config(first.parse_known_args(argv)[0].config)
        defaults = load_config(config) if config is not None else {}
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args = build_parser(defaults).parse_args(argv)
    problem = options_problem(args)
    if problem is not None:  # before any store is opened or model loaded
        _print_error(problem)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except Exception as exc:
        message = _expected_error(exc)
        if message is None:
            raise
        _print_error(message)
        return 2


#: Errors a command reports as one line (exit status 2) rather than a traceback.
_EXPECTED = (ValueError, TypeError, ConnectionError, FileNotFoundError, ImportError, UnknownDocumentError)
#: Errors of modules only a command imports: looked up in ``sys.modules`` after the fact, never imported here.
_EXPECTED_ELSEWHERE = (("llama_index_mhop.stores.vector_index", "IndexingInterrupted"),
                       ("llama_index_mhop.stores.consistency", "StoreLockedError"),
                       ("llama_index_mhop.stores.consistency", "ReadOnlyStoreError"))


def _loaded_class(module: str, name: str) -> type | None:
    found = getattr(sys.modules.get(module), name, None)
    return found if isinstance(found, type) else None


def _expected_error(exc: Exception) -> str | None:
    """The one-line message of an error a command reports to the user, or None for a bug (re-raised)."""
    elsewhere = tuple(c for c in (_loaded_class(m, n) for m, n in _EXPECTED_ELSEWHERE) if c is not None)
    if isinstance(exc, _EXPECTED + elsewhere):
        return str(exc)
    transport = _loaded_class("httpx", "TransportError")
    if transport is not None and isinstance(exc, transport):  # a Chroma server that went away after connecting
        return f"the Chroma server stopped answering: {exc}"
    return None


def _print_error(message: str) -> None:
    # Messages quote queries, paths and file contents: untrusted, so plain text.
    _console().print(_labelled("error:", "red", message), soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
