"""HippoGraphReader: query workers open a save's query snapshot (columns, arrays and vector files every worker maps)
instead of the graph's tables, and answer exactly as the index does."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from llama_index_mhop.graph import persistence
from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.graph.reader import HippoGraphReader
from llama_index_mhop.graph.state import NameLookup, StringColumn
from llama_index_mhop.graph.state_files import STATE_FOLDER, write_string_column
from llama_index_mhop.graph.state_load import snapshot_folder
from llama_index_mhop.stores.corpus import make_document
from tests.graph.film_chain import documents
from tests.word_bag import WordBagEmbedding

QUESTIONS = ["Who wrote the film that Delbert Mann directed in 1955?", "Where was the writer of Marty born?",
             "Which comedy did the director of Marty make in 1961?"]


@pytest.fixture()
def saved(tmp_path):
    root = tmp_path / "index"
    index = HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root,
                                           name="films", show_progress=False)
    return root, index


def answers(source) -> list:
    retriever = source.as_retriever(similarity_top_k=4)
    return [[(n.node.node_id, n.score, n.node.text, n.node.metadata) for n in retriever.retrieve(q)]
            for q in QUESTIONS]


def open_reader(root) -> HippoGraphReader:
    return HippoGraphReader.open(root, embed_model=WordBagEmbedding())


def test_a_reader_answers_as_the_index_from_mapped_columns(saved):
    root, index = saved
    reader = open_reader(root)
    assert answers(reader) == answers(index)
    mine, theirs = reader.retrieval_state(), index.retrieval_state()
    assert isinstance(mine.passage_ids, StringColumn) and isinstance(mine.entity_names, StringColumn)
    assert isinstance(mine.fact_nodes, np.memmap) and isinstance(mine.passage_vectors.matrix, np.memmap)
    for field in ("passage_ids", "entity_ids", "entity_names", "fact_ids", "fact_triples"):
        assert list(getattr(mine, field)) == list(getattr(theirs, field)), field
    assert np.array_equal(mine.passage_counts, theirs.passage_counts)
    assert np.array_equal(mine.fact_nodes, theirs.fact_nodes)
    assert mine.version == theirs.version == reader.version
    mapped, built = (s.walk.pagerank.transition for s in (mine, theirs))  # the index's, mapped read-only
    assert (mapped != built).nnz == 0 and not mapped.data.flags.writeable and not mapped.indices.flags.writeable
    for name in [*theirs.entity_names, "no such entity"]:
        assert mine.entity_key_node.get(name) == theirs.entity_key_node.get(name)


def test_a_second_reader_opens_the_snapshot_without_the_graphs_tables(saved, monkeypatch):
    root, index = saved
    first = open_reader(root)  # files the current save's snapshot (the index never loaded its state)

    def no_tables(*args, **kwargs):
        raise AssertionError("the graph's tables were read")

    monkeypatch.setattr(persistence, "read_saved_index", no_tables)
    second = open_reader(root)
    assert second.digest == first.digest and answers(second) == answers(index)
    folders = [p.name for p in (root / STATE_FOLDER).iterdir() if p.is_dir()]
    assert folders == [snapshot_folder(root / STATE_FOLDER, first.digest).name]


def test_refresh_moves_a_reader_to_the_writers_new_save(saved):
    root, index = saved
    reader = open_reader(root)
    before = answers(reader)
    assert not reader.refresh()
    index.insert(make_document("The Bronx", "The Bronx is a borough of New York City where Paddy Chayefsky was born."))
    assert answers(reader) == before  # still the save it opened
    assert reader.refresh()
    assert reader.version == index.graph.version and answers(reader) == answers(index) != before
    folders = [p.name for p in (root / STATE_FOLDER).iterdir() if p.is_dir()]
    assert folders == [snapshot_folder(root / STATE_FOLDER, reader.digest).name]  # the older one is removed


def test_a_damaged_snapshot_is_removed_and_filed_again(saved, caplog):
    root, index = saved
    digest = open_reader(root).digest
    ends = snapshot_folder(root / STATE_FOLDER, digest) / "entity_names.ends.npy"
    np.save(ends, np.load(ends)[:-1])  # one name short
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.state_load"):
        reader = open_reader(root)
    assert "damaged" in caplog.text
    assert reader.digest == digest and answers(reader) == answers(index)
    names = index.retrieval_state().entity_names
    assert list(StringColumn.open(ends.parent, "entity_names", len(names))) == names  # filed whole again


def test_a_readers_query_engine_cites_its_retrievers_passages(saved):
    from llama_index.core.llms import MockLLM

    root, index = saved
    reader = open_reader(root)
    response = reader.as_query_engine(llm=MockLLM(), similarity_top_k=3).query(QUESTIONS[0])
    expected = reader.as_retriever(similarity_top_k=3).retrieve(QUESTIONS[0])
    assert [n.node.node_id for n in response.source_nodes] == [n.node.node_id for n in expected]


def test_a_reader_of_a_folder_without_an_index_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no HippoGraphIndex saved"):
        open_reader(tmp_path)


def test_a_reader_of_a_graph_saved_in_format_1_says_how_to_upgrade_it(saved):
    import json
    import shutil

    from llama_index_mhop.graph.layout import CONFIG_FILE, GRAPH_DIR, LEGACY_GRAPH_FILE

    root, index = saved
    (root / LEGACY_GRAPH_FILE).write_text(json.dumps(index.graph.to_dict()))
    shutil.rmtree(root / GRAPH_DIR)
    config = json.loads((root / CONFIG_FILE).read_text())
    config.pop("digest")  # a format 1 save records none
    (root / CONFIG_FILE).write_text(json.dumps({**config, "format_version": 1}))
    with pytest.raises(ValueError, match="format 1.*persist"):
        open_reader(root)
    HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding()).persist()  # as the message says
    assert answers(open_reader(root)) == answers(index)


AWKWARD = ["plain", "", "line one\nline two", 'quoted "name" \\ slash', "Émile Zola ✓", "{not json]", "plain"]


def test_a_string_column_reads_back_every_string(tmp_path):
    write_string_column(tmp_path, "names", AWKWARD)
    column = StringColumn.open(tmp_path, "names", len(AWKWARD))
    assert list(column) == AWKWARD and column[-1] == AWKWARD[-1] and column[1:3] == AWKWARD[1:3]
    with pytest.raises(IndexError):
        column[len(AWKWARD)]
    with pytest.raises(ValueError, match="expected 8 lines"):
        StringColumn.open(tmp_path, "names", len(AWKWARD) + 1)
    (tmp_path / "names.jsonl").write_bytes((tmp_path / "names.jsonl").read_bytes()[:-3])  # cut short
    with pytest.raises(ValueError, match="names.jsonl"):
        StringColumn.open(tmp_path, "names", len(AWKWARD))


def test_a_name_lookup_finds_what_a_dict_filled_in_order_finds():
    expected = {name: i for i, name in enumerate(AWKWARD)}  # a repeated name keeps its last position
    lookup = NameLookup(AWKWARD, offset=10)
    for name, position in expected.items():
        assert lookup.get(name) == 10 + position
    assert lookup.get("absent") is None and lookup.get("absent", -1) == -1
    assert NameLookup([]).get("x") is None


def test_facts_past_the_hnsw_threshold_are_filed_as_their_sum_alone(saved, tmp_path):
    from llama_index_mhop.graph.state_load import load_retrieval_state, open_saved_state
    from llama_index_mhop.graph.walk import WalkSettings

    root, index = saved
    folder, facts = tmp_path / "state", index.graph.num_facts
    assert facts > index.graph.num_passages  # so that only the facts cross the threshold below
    load_retrieval_state(index.graph, index.stores, 0.5, state_folder=folder)  # below it: the rows, as a file
    assert len(list(folder.glob("facts-*.npy"))) == 1
    walk = WalkSettings(hnsw_min_facts=facts, hnsw_min_passages=facts)
    loaded = load_retrieval_state(index.graph, index.stores, 0.5, walk, state_folder=folder, snapshot_digest="d")
    opened = open_saved_state(folder, "d", index.stores, 0.5)
    assert loaded.fact_vectors.method == opened.fact_vectors.method == "hnsw"
    assert loaded.fact_vectors.matrix is None and not list(folder.glob("facts-*.npy"))  # none written, the old gone
    query = index.embed_model.get_query_embedding(QUESTIONS[0])
    query = np.asarray(query, dtype=np.float32) / np.linalg.norm(query)
    one, two = (s.fact_vectors.search(query, top_k=3) for s in (loaded, opened))
    assert one.top.tolist() == two.top.tolist() and one.top_scores.tolist() == two.top_scores.tolist()
    assert (one.high, one.low, one.rest) == (two.high, two.low, two.rest) and len(one.top) == 3


def test_a_readers_async_retrieval_and_chat_engine_answer_from_the_same_state(saved):
    import asyncio

    from llama_index.core.llms import MockLLM

    root, _ = saved
    reader = open_reader(root)
    retriever = reader.as_retriever(similarity_top_k=3)
    expected = [(n.node.node_id, n.score) for n in retriever.retrieve(QUESTIONS[1])]
    assert [(n.node.node_id, n.score) for n in asyncio.run(retriever.aretrieve(QUESTIONS[1]))] == expected
    chat = reader.as_chat_engine(chat_mode="context", llm=MockLLM(), similarity_top_k=3)
    assert [(n.node.node_id, n.score) for n in chat.chat(QUESTIONS[1]).source_nodes] == expected


def test_a_worker_forked_after_preload_answers_as_the_index(saved):
    root, index = saved
    script = textwrap.dedent(f"""
        import gc, json, os, sys
        from llama_index_mhop.graph import HippoGraphReader
        from tests.word_bag import WordBagEmbedding

        HippoGraphReader.preload()
        assert gc.get_freeze_count() > 0 and "torch" in sys.modules and "chromadb" in sys.modules
        pid = os.fork()
        if pid == 0:
            retriever = HippoGraphReader.open({str(root)!r}, embed_model=WordBagEmbedding()).as_retriever(
                similarity_top_k=4)
            print(json.dumps([[[n.node.node_id, n.score] for n in retriever.retrieve(q)] for q in {QUESTIONS!r}]))
            sys.stdout.flush()
            os._exit(0)
        sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2], text=True,
                          capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    retriever = index.as_retriever(similarity_top_k=4)
    expected = [[[n.node.node_id, n.score] for n in retriever.retrieve(q)] for q in QUESTIONS]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == expected


# A reader in a second process of an embedded store: opens, answers, waits for the writer, then queries and
# refreshes; prints what each raised, and every Chroma delete and file lock it attempted.
SECOND_READER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import filelock
    from chromadb.api.models.Collection import Collection
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.graph import HippoGraphReader
    from tests.word_bag import WordBagEmbedding

    root, chroma, go = sys.argv[1:4]
    writes = []
    real_delete, real_acquire = Collection.delete, filelock.BaseFileLock.acquire
    Collection.delete = lambda self, *a, **k: writes.append("delete " + self.name) or real_delete(self, *a, **k)
    filelock.BaseFileLock.acquire = lambda self, *a, **k: writes.append("lock") or real_acquire(self, *a, **k)
    reader = HippoGraphReader.open(root, chroma_client=default_chroma_client(chroma), embed_model=WordBagEmbedding())
    question = "Who played Commissioner Gordon?"
    found = [n.node.node_id for n in reader.as_retriever(similarity_top_k=2).retrieve(question)]
    Path(go + ".ready").touch()
    while not Path(go).exists():
        time.sleep(0.05)
    raised = []
    for step in (lambda: reader.as_retriever(similarity_top_k=2).retrieve(question), reader.refresh):
        try:
            step()
            raised.append(None)
        except Exception as exc:
            raised.append([type(exc).__name__, str(exc)])
    print(json.dumps({"found": found, "raised": raised, "writes": writes}))
""")


def test_a_second_process_reader_of_an_embedded_store_is_refused_in_one_line_and_writes_nothing(tmp_path):
    import time

    from llama_index_mhop.graph.sync import REMOVAL_FILE
    from llama_index_mhop.stores.defaults import default_chroma_client
    from llama_index_mhop.stores.vector_index import sync_vector_index
    from tests.graph.test_sync import NOTES

    corpus, chroma, root, go = tmp_path / "corpus", tmp_path / "chroma", tmp_path / "graph", tmp_path / "go"
    for doc_id, text in NOTES.items():
        (corpus / doc_id).parent.mkdir(parents=True, exist_ok=True)
        (corpus / doc_id).write_text(text)
    client, embedder = default_chroma_client(chroma), WordBagEmbedding()
    sync = dict(chroma_client=client, embed_model=embedder, show_progress=False, delete_missing=True)
    vectors = sync_vector_index(corpus, **sync).index
    graph = HippoGraphIndex.from_vector_index(vectors, chroma_client=client, persist_dir=root, embed_model=embedder,
                                              show_progress=False)
    reader = subprocess.Popen([sys.executable, "-c", SECOND_READER, str(root), str(chroma), str(go)],
                              cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        while not Path(f"{go}.ready").exists():
            assert reader.poll() is None, reader.stderr.read()[-3000:]
            time.sleep(0.05)
        (corpus / "notes/Pat Hingle.txt").unlink()  # the writer: a sync, the graph following it
        sync_vector_index(corpus, **sync)
        graph.reconcile(show_progress=False)
        # ...and a removal a killed writer left: only the next writer may complete it.
        graph.entities_collection.add(ids=["left-over"], embeddings=[[1.0] * embedder.dim])
        (root / REMOVAL_FILE).write_text(json.dumps({"passages": [], "entities": ["left-over"], "facts": []}))
        go.touch()
        out, err = reader.communicate(timeout=600)
    finally:
        reader.kill()
    assert reader.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert len(report["found"]) == 2  # it answered before the writer came
    assert [r[0] for r in report["raised"]] == ["StaleStoreError", "StaleStoreError"], report["raised"]
    assert all("share a Chroma server between processes" in r[1] and "\n" not in r[1] for r in report["raised"])
    assert report["writes"] == []
    assert (root / REMOVAL_FILE).is_file() and graph.entities_collection.get(ids=["left-over"])["ids"] == ["left-over"]


def test_the_llm_free_fusion_over_a_readers_retriever_keeps_the_readers_ranking_first(saved):
    from llama_index_mhop.components.rrf_fusion import RRFFusionRetriever

    root, _ = saved
    base = open_reader(root).as_retriever(similarity_top_k=21)
    fused = RRFFusionRetriever(base, similarity_top_k=4).retrieve(QUESTIONS[0])
    assert fused[0].node.node_id == base.retrieve(QUESTIONS[0])[0].node.node_id
