"""A damaged graph save is never a dead end and never served unverified: one file of a built index is truncated,
zeroed, changed, removed or substituted; a query then answers as before or prints one line naming the file, and
``mhop index DIR --graph`` run again rebuilds what is damaged from Chroma and the corpus, ending with the rows,
graph, document hashes and top-5 of an uninterrupted build."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from llama_index_mhop.cli import commands as cli
from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.graph.reader import HippoGraphReader
from tests.graph.test_kills import write
from tests.graph.test_sync import NOTES, contents, notes
from tests.word_bag import WordBagEmbedding

QUERIES = ("Who played Commissioner Gordon?", "Where was Delbert Mann born?", "Who directed Marty?")
EMBEDDER = WordBagEmbedding()


@pytest.fixture(scope="module", autouse=True)
def word_bag_embedder():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "_embed_model", lambda _args: EMBEDDER)
        yield


def store(where: Path) -> list[str]:
    return ["--chroma-path", str(where / "chroma"), "--graph-dir", str(where / "graph")]


def build(where: Path) -> Path:
    corpus = write(where / "corpus", NOTES)
    assert cli.main(["index", str(corpus), "--graph", "--quiet", *store(where)]) == 0
    # A query files the save's query snapshot, as a deployment's first query does.
    assert cli.main(["query", QUERIES[0], "--retriever", "hippo_graph", *store(where)]) == 0
    return corpus


def report(where: Path) -> dict:
    """What two builds of one corpus must share: the passage rows, the graph, Chroma's ids, the document hashes
    and the top-5 of each query, both from the index and from a reader of its save."""
    client = cli._client(cli.build_parser().parse_args(["status", *store(where)]))
    index = HippoGraphIndex.from_persist_dir(where / "graph", chroma_client=client, embed_model=EMBEDDER)
    reader = HippoGraphReader.open(where / "graph", chroma_client=client, embed_model=EMBEDDER)
    rows = client.get_collection("mhop_passages").get(include=["documents", "metadatas"])
    g = index.graph
    ranked = {name: [[(n.node.node_id, n.node.text) for n in source.as_retriever(similarity_top_k=5).retrieve(q)]
                     for q in QUERIES] for name, source in (("index", index), ("reader", reader))}
    assert ranked["reader"] == ranked["index"]
    return {
        "rows": sorted(zip(rows["ids"], rows["documents"], [m.get("document_id") for m in rows["metadatas"]], strict=True)),
        "graph": [sorted(g.passages), sorted(g.entity_names.items()), sorted(g.facts.items()), g.edge_list()],
        "chroma": [sorted(c.get(include=[])["ids"]) for c in (index.passages_collection, index.entities_collection,
                                                              index.facts_collection)],
        "hashes": sorted(index.document_hashes.get_all_document_hashes().values()),
        "top5": ranked["index"],
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """An uninterrupted build's report."""
    where = tmp_path_factory.mktemp("reference")
    build(where)
    return report(where)


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def zero(path: Path) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def flip(path: Path) -> None:
    """One bit of the file's last byte (an array's last value, a JSON file's closing brace) ..."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))


def flip_inside(path: Path) -> None:
    """... or one letter of a setting's name, which still parses."""
    data = path.read_bytes()
    assert data.count(b'"synonymy_threshold"') == 1
    path.write_bytes(data.replace(b'"synonymy_threshold"', b'"synonymy_thresholc"'))


def rename_entity(path: Path) -> None:
    """One letter of an entity's name in the record text, a valid array still."""
    data = path.read_bytes()
    assert data.count(b"delbert mann") == 1
    path.write_bytes(data.replace(b"delbert mann", b"eelbert mann"))


def substitute(path: Path) -> None:
    """A valid array of the same shape and kind in its place, other values in it."""
    values = np.load(path)
    np.save(path, values * 2, allow_pickle=False)


def garbage(path: Path) -> None:
    path.write_bytes(b"\x00\xff not json \x81" * 8)


def remove(path: Path) -> None:
    path.unlink()


def one(pattern: str):
    def find(graph: Path) -> list[Path]:
        found = sorted(graph.glob(pattern))
        assert found, pattern
        return found[:1]
    return find


TABLES, CONFIG = one("hippo_graph/tables.json"), one("hippo_config.json")
EDGES, NODES = one("hippo_graph/edge_values.*.npy"), one("hippo_graph/node_kinds.*.npy")
TEXT = one("hippo_graph/text.*.npy")
INDEX_STORE, DOCSTORE = one("index_store.json"), one("docstore.json")
STATE_VECTORS = one("state_files/passages-*.npy")

# (the files damaged, how): a row of the table of what a damaged save must do.
DAMAGES = {
    "tables.json truncated": (TABLES, truncate),
    "tables.json zeroed": (TABLES, zero),
    "tables.json: one byte flipped": (TABLES, flip),
    "tables.json: one letter changed, still JSON": (TABLES, flip_inside),
    "tables.json missing": (TABLES, remove),
    "record text: an entity renamed, still an array": (TEXT, rename_entity),
    "edge array truncated": (EDGES, truncate),
    "edge array zeroed": (EDGES, zero),
    "edge array: a value flipped": (EDGES, flip),
    "edge array missing": (EDGES, remove),
    "edge array substituted, still a valid array": (EDGES, substitute),
    "node array: a value flipped": (NODES, flip),
    "node array zeroed": (NODES, zero),
    "hippo_config.json truncated": (CONFIG, truncate),
    "hippo_config.json: one byte flipped": (CONFIG, flip),
    "index_store.json zeroed": (INDEX_STORE, zero),
    "docstore.json garbage": (DOCSTORE, garbage),
    "a state-file vector array flipped": (STATE_VECTORS, flip),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_file_is_named_by_a_query_then_rebuilt_by_the_next_index_run(tmp_path, damage, reference,
                                                                                capsys, caplog):
    files, how = DAMAGES[damage]
    corpus = build(tmp_path)
    graph = tmp_path / "graph"
    damaged = files(graph)
    for path in damaged:
        how(path)
    capsys.readouterr()
    code = cli.main(["query", QUERIES[0], "--retriever", "hippo_graph", "--top-k", "5", *store(tmp_path)])
    out = capsys.readouterr().out
    if code == 0:  # answered: from what was verified, as the uninterrupted build answers
        assert "Pat Hingle" in out
        assert report(tmp_path)["top5"] == reference["top5"]
    else:
        lines = out.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), out
        if how is not remove or files is not TABLES:
            assert str(damaged[0]) in lines[0], lines[0]
            assert "mhop index CORPUS --graph" in lines[0]
    # mhop status reads the graph's own files too: each checked, a damaged one named in one line.
    status = cli.main(["status", *store(tmp_path)])
    out = capsys.readouterr().out
    if how is remove and files is TABLES:  # no saved graph: none reported
        assert status == 0 and "graph" not in json.loads(out)
    elif files in (TABLES, CONFIG, EDGES, NODES, TEXT):  # the graph files status reads
        assert status == 2 and len(out.strip().splitlines()) == 1 and str(damaged[0]) in out, out
    else:
        assert status == 0 and json.loads(out)["graph"]["passages"] == len(NOTES)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert cli.main(["index", str(corpus), "--graph", "--quiet", *store(tmp_path)]) == 0, capsys.readouterr()
    if code != 0 and not (how is remove and files is TABLES):
        assert any("rebuilding the graph index" in r.getMessage() and str(graph) in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert report(tmp_path) == reference


def test_a_reader_never_serves_a_substituted_passage_text_file(tmp_path, reference, caplog):
    build(tmp_path)
    graph = tmp_path / "graph"
    [snapshot] = graph.glob("state_files/snapshot-*")
    texts = snapshot / "passage-texts.jsonl"
    data = texts.read_bytes()
    assert b"Commissioner Gordon" in data
    texts.unlink()  # a file put in its place, of the same length: the offsets still fit it
    texts.write_bytes(data.replace(b"Commissioner Gordon", b"Commissioner Xordon"))
    with caplog.at_level(logging.WARNING):
        reader = HippoGraphReader.open(graph, chroma_client=cli._client(cli.build_parser().parse_args(
            ["status", *store(tmp_path)])), embed_model=EMBEDDER)
    served = [[(n.node.node_id, n.node.text) for n in reader.as_retriever(similarity_top_k=5).retrieve(q)]
              for q in QUERIES]
    assert served == reference["top5"]
    assert any(str(texts) in r.getMessage() for r in caplog.records)
    assert b"Xordon" not in b"".join(p.read_bytes() for p in graph.glob("state_files/**/passage-texts*"))
    # Substituted again under the open reader: it keeps the file it verified and mapped.
    [snapshot] = graph.glob("state_files/snapshot-*")
    substitute = snapshot / "substitute.jsonl"
    substitute.write_bytes((snapshot / "passage-texts.jsonl").read_bytes().replace(b"Gordon", b"Xordon"))
    substitute.replace(snapshot / "passage-texts.jsonl")
    assert [[(n.node.node_id, n.node.text) for n in reader.as_retriever(similarity_top_k=5).retrieve(q)]
            for q in QUERIES] == reference["top5"]


def python_build(root: Path) -> HippoGraphIndex:
    return HippoGraphIndex.from_documents(notes(), embed_model=EMBEDDER, persist_dir=root, show_progress=False)


def python_report(index: HippoGraphIndex) -> dict:
    retriever = index.as_retriever(similarity_top_k=5)
    return {**contents(index), "hashes": sorted(index.document_hashes.get_all_document_hashes().values()),
            "top5": [[(n.node.node_id, n.node.text) for n in retriever.retrieve(q)] for q in QUERIES]}


@pytest.mark.parametrize("damage", ["tables.json: one letter changed, still JSON", "edge array: a value flipped",
                                    "index_store.json zeroed"])
def test_the_python_build_over_a_damaged_save_rebuilds_it(tmp_path, damage, caplog):
    reference = python_report(python_build(tmp_path / "reference"))
    root = tmp_path / "damaged"
    python_build(root)
    files, how = DAMAGES[damage]
    [path] = files(root)
    how(path)
    with pytest.raises(ValueError, match=rf"{path}: .*rebuild it"):
        HippoGraphIndex.from_persist_dir(root, embed_model=EMBEDDER)
    with caplog.at_level(logging.WARNING):
        rebuilt = python_build(root)  # the same call as the first build: its sync path
    assert any(str(path) in r.getMessage() and "rebuilding the graph index" in r.getMessage() for r in caplog.records)
    assert python_report(rebuilt) == reference
    assert python_report(HippoGraphIndex.from_persist_dir(root, embed_model=EMBEDDER)) == reference
    assert (root / "chroma").is_dir()  # Chroma's folder is the source of truth: never removed


def test_a_reader_over_a_damaged_graph_names_the_file(tmp_path):
    build(tmp_path)
    [tables] = TABLES(tmp_path / "graph")
    flip_inside(tables)
    with pytest.raises(ValueError, match=rf"{tables}: its bytes do not match .*rebuild it") as exc:
        HippoGraphReader.open(tmp_path / "graph", chroma_client=cli._client(cli.build_parser().parse_args(
            ["status", *store(tmp_path)])), embed_model=EMBEDDER)
    assert "\n" not in str(exc.value)


def test_a_damaged_save_over_an_unreadable_chroma_store_says_it_cannot_be_rebuilt(tmp_path):
    built = tmp_path / "built"
    python_build(built)
    root = tmp_path / "copy"  # a folder no client of this process has opened (Chroma keeps one system per path)
    shutil.copytree(built, root)
    [tables] = TABLES(root)
    flip_inside(tables)
    zero(root / "chroma" / "chroma.sqlite3")
    with pytest.raises(ValueError) as exc:
        python_build(root)
    message = str(exc.value)
    assert "\n" not in message and str(tables) in message and "cannot be rebuilt" in message
    assert str(root / "chroma") in message and "--chroma-path NEW_PATH" in message
    assert tables.is_file() and (root / "hippo_config.json").is_file()  # nothing removed
