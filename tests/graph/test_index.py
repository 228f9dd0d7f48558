"""HippoGraphIndex: stores, insert/delete consistency, kill-and-resume indexing, persistence, no duplicates."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import chromadb
import numpy as np
import pytest
from llama_index.core.llms import MockLLM

from llama_index_mhop.graph.extraction import Extraction, extract_llm_free
from llama_index_mhop.graph.graph_stores import index_prefix
from llama_index_mhop.graph.index import CHECKPOINT_FILE, CONFIG_FILE, GRAPH_FILE, HippoGraphIndex, fact_text
from llama_index_mhop.graph.json_files import read_json_object, write_json
from llama_index_mhop.stores.corpus import make_document
from tests.word_bag import WordBagEmbedding

DATA = Path(__file__).parent / "data"


def mini_docs():
    return [make_document(r["title"], r["text"]) for r in json.loads((DATA / "mini_corpus.json").read_text())]


MORE = [
    ("Rock Hudson", "Rock Hudson was an American actor. He starred in Giant with Elizabeth Taylor."),
    ("Giant (1956 film)", "Giant is a 1956 epic drama film directed by George Stevens."),
    ("George Stevens", "George Stevens was an American film director. He directed Shane in 1953."),
    ("Oahu", "Oahu is the third-largest island of Hawaii. Honolulu is on Oahu."),
    ("Honolulu", "Honolulu is the capital of Hawaii. It lies on Oahu."),
    ("Elizabeth Taylor", "Elizabeth Taylor was a British-American actress. She starred in Giant."),
    ("Shane (film)", "Shane is a 1953 Western film directed by George Stevens."),
]


def all_docs():
    return mini_docs() + [make_document(title, text) for title, text in MORE]


def build(docs, name, client=None, **kwargs):
    return HippoGraphIndex.from_documents(
        docs, embed_model=kwargs.pop("embed_model", None) or WordBagEmbedding(),
        chroma_client=client if client is not None else chromadb.EphemeralClient(),
        name=name, show_progress=False, **kwargs,
    )


def test_three_collections_with_counts_matching_the_graph(tmp_path):
    index = build(mini_docs(), "idx_counts", client=chromadb.PersistentClient(path=str(tmp_path)))
    counts = index.counts()
    assert counts["passages"] == counts["chroma_passages"] == 5
    assert counts["entities"] == counts["chroma_entities"] == 14
    assert counts["facts"] == counts["chroma_facts"] == 14
    prefix = index_prefix("idx_counts", index.index_id)  # the name and a digest of the index id
    assert re.fullmatch(r"idx_counts_[0-9a-f]{12}", prefix)
    assert [c.name for c in (index.passages_collection, index.entities_collection, index.facts_collection)] == [
        f"{prefix}_passages", f"{prefix}_entities", f"{prefix}_facts"]

def test_entity_and_fact_records_are_vectors_of_the_graphs_texts():
    index = build(mini_docs(), "idx_records")
    names = index.graph.entity_names
    facts = index.facts_collection.get(include=["embeddings", "documents", "metadatas"])
    entities = index.entities_collection.get(include=["embeddings", "documents", "metadatas"])
    # the graph holds the texts; Chroma is given no document or metadata to index
    assert set(facts["documents"]) | set(facts["metadatas"]) | set(entities["documents"]) == {None}
    assert set(entities["metadatas"]) == {None}
    embedder = WordBagEmbedding()
    for fact_id, vector in zip(facts["ids"], facts["embeddings"], strict=True):
        subject, predicate, obj = index.graph.facts[fact_id]
        expected = embedder.get_text_embedding(fact_text(names[subject], predicate, names[obj]))
        assert np.allclose(vector, expected, atol=1e-6)
    for entity_id, vector in zip(entities["ids"], entities["embeddings"], strict=True):
        assert np.allclose(vector, embedder.get_text_embedding(names[entity_id]), atol=1e-6)


def test_passage_nodes_keep_document_metadata():
    docs = [make_document("Marty (film)", "Marty is a 1955 drama film directed by Delbert Mann.", passage_id="p-7")]
    index = build(docs, "idx_meta")
    state = index.retrieval_state()
    node = state.passage_nodes([0])[0]
    assert node.metadata["title"] == "Marty (film)"
    assert node.metadata["passage_id"] == "p-7"
    assert node.ref_doc_id == docs[0].doc_id


def test_a_state_read_a_few_records_at_a_time_is_the_state_read_at_once(monkeypatch):
    from llama_index_mhop.graph import state_load as state_module
    from llama_index_mhop.graph.state_load import load_retrieval_state

    index = build(all_docs(), "idx_batches")
    whole = load_retrieval_state(index.graph, index.stores, 0.5)
    monkeypatch.setattr(state_module, "CHROMA_BATCH", 3)
    batched = load_retrieval_state(index.graph, index.stores, 0.5)
    assert batched.passage_ids == whole.passage_ids and batched.fact_ids == whole.fact_ids
    rows = range(len(whole.passage_ids))
    assert [n.node_id for n in batched.passage_nodes(rows).values()] == whole.passage_ids
    assert [n.text for n in batched.passage_nodes(rows).values()] == [n.text for n in whole.passage_nodes(rows).values()]
    np.testing.assert_array_equal(batched.passage_vectors.matrix, whole.passage_vectors.matrix)
    np.testing.assert_array_equal(batched.fact_vectors.matrix, whole.fact_vectors.matrix)
    assert batched.passage_vectors.matrix.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batched.fact_vectors.matrix, axis=1), 1.0, rtol=1e-6)


def test_reindexing_adds_no_duplicates(graph_snapshot):
    client = chromadb.EphemeralClient()
    index = build(mini_docs(), "idx_twice", client)
    before = graph_snapshot(index)
    assert index.insert(mini_docs()) == []
    assert graph_snapshot(index) == before


def test_insert_then_delete_equals_fresh_build(graph_snapshot):
    docs = all_docs()
    index = build(docs[:6], "idx_incr")
    index.insert(docs[6:])
    doris = next(d for d in docs if d.metadata["title"] == "Doris Day")
    giant = next(d for d in docs if d.metadata["title"] == "Giant (1956 film)")
    assert len(index.delete(doris.doc_id)) == 1  # by document id
    giant_passage = index.graph.passages_of_document(giant.doc_id)[0]
    assert index.delete(giant_passage) == [giant_passage]  # by passage id
    remaining = [d for d in docs if d.doc_id not in (doris.doc_id, giant.doc_id)]
    fresh = build(remaining, "idx_fresh")
    assert graph_snapshot(index) == {**graph_snapshot(fresh)}
    # Entities only Doris Day's passage named are gone; shared ones stay.
    names = set(index.graph.entity_names.values())
    assert "doris day" in names  # Lover Come Back still names her
    assert "rock hudson" in names


def test_delete_unknown_id_is_a_clear_error():
    index = build(mini_docs(), "idx_del_err")
    with pytest.raises(KeyError, match="no passage or document with id 'nope'"):
        index.delete("nope")


def test_killed_build_resumes_without_redoing_work(tmp_path, counting_extractor, graph_snapshot):
    docs = all_docs()
    extractor = counting_extractor()
    embedder = WordBagEmbedding()

    def stop_after_second_batch(batch: int, done: int) -> None:
        if batch == 2:
            raise KeyboardInterrupt("stopped after batch 2")

    with pytest.raises(KeyboardInterrupt):
        HippoGraphIndex.from_documents(
            docs, embed_model=embedder, persist_dir=tmp_path / "run", extractor=extractor,
            insert_batch_size=3, show_progress=False, name="resume", on_batch_end=stop_after_second_batch,
        )
    assert (tmp_path / "run" / CHECKPOINT_FILE).is_file()
    assert not (tmp_path / "run" / GRAPH_FILE).exists()
    assert len(extractor.titles) == 6
    first_titles = list(extractor.titles)

    resumed_extractor = counting_extractor()
    resumed = HippoGraphIndex.from_documents(
        docs, embed_model=embedder, persist_dir=tmp_path / "run", extractor=resumed_extractor,
        insert_batch_size=3, show_progress=False, name="resume",
    )
    # Only the passages after the checkpoint were read again.
    assert len(resumed_extractor.titles) == len(docs) - 6
    assert not set(resumed_extractor.titles) & set(first_titles)
    assert not (tmp_path / "run" / CHECKPOINT_FILE).exists()
    assert (tmp_path / "run" / GRAPH_FILE).is_file()

    clean = HippoGraphIndex.from_documents(
        docs, embed_model=WordBagEmbedding(), persist_dir=tmp_path / "clean", show_progress=False, name="resume",
    )
    assert resumed.counts() == clean.counts()
    assert graph_snapshot(resumed) == graph_snapshot(clean)


def test_truncated_checkpoint_line_is_ignored(tmp_path):
    docs = all_docs()

    def stop(batch: int, done: int) -> None:
        if batch == 1:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        HippoGraphIndex.from_documents(docs, embed_model=WordBagEmbedding(), persist_dir=tmp_path, name="trunc",
                                       insert_batch_size=4, show_progress=False, on_batch_end=stop)
    with (tmp_path / CHECKPOINT_FILE).open("a") as handle:
        handle.write('{"passages": {"abc": {"entit')  # the process died while writing
    index = HippoGraphIndex.from_documents(docs, embed_model=WordBagEmbedding(), persist_dir=tmp_path,
                                           name="trunc", insert_batch_size=4, show_progress=False)
    assert index.counts()["passages"] == len(docs)


def test_persist_and_reload(tmp_path, graph_snapshot):
    embedder = WordBagEmbedding()
    index = build(mini_docs(), "idx_persist", embed_model=embedder)  # in-memory Chroma
    index.persist(tmp_path)
    assert json.loads((tmp_path / CONFIG_FILE).read_text())["format_version"] == 2
    assert json.loads((tmp_path / GRAPH_FILE).read_text())["array_format_version"] == 3
    assert not list(tmp_path.rglob("*.pkl")) and not list(tmp_path.rglob("*.pickle"))
    loaded = HippoGraphIndex.from_persist_dir(tmp_path, embed_model=embedder)
    assert graph_snapshot(loaded) == graph_snapshot(index)
    query = "Who directed Lover Come Back?"
    before = [(n.node.node_id, n.score) for n in index.as_retriever(similarity_top_k=3).retrieve(query)]
    after = [(n.node.node_id, n.score) for n in loaded.as_retriever(similarity_top_k=3).retrieve(query)]
    assert after == before


def test_from_documents_reopens_a_finished_index(tmp_path, counting_extractor):
    embedder = WordBagEmbedding()
    first = HippoGraphIndex.from_documents(mini_docs(), embed_model=embedder, persist_dir=tmp_path,
                                           show_progress=False, name="reopen")
    extractor = counting_extractor()
    again = HippoGraphIndex.from_documents(all_docs(), embed_model=embedder, persist_dir=tmp_path,
                                           show_progress=False, name="reopen", extractor=extractor)
    assert len(extractor.titles) == len(MORE)  # only the new documents
    assert again.counts()["passages"] == first.counts()["passages"] + len(MORE)


def test_from_persist_dir_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no HippoGraphIndex saved"):
        HippoGraphIndex.from_persist_dir(tmp_path)
    index = build(mini_docs(), "idx_version")
    index.persist(tmp_path)
    config = read_json_object(tmp_path / CONFIG_FILE)
    config["format_version"] = 7
    write_json(tmp_path / CONFIG_FILE, config)  # as a newer version would write it, its digest recorded
    with pytest.raises(ValueError, match="format version 7"):
        HippoGraphIndex.from_persist_dir(tmp_path, embed_model=WordBagEmbedding())


def test_truncated_or_edited_graph_file_is_a_clear_error(tmp_path):
    index = build(mini_docs(), "idx_truncated")
    index.persist(tmp_path)
    graph_file = tmp_path / GRAPH_FILE
    text = graph_file.read_text()
    graph_file.write_text(text[: len(text) // 2])
    with pytest.raises(ValueError, match=f"{GRAPH_FILE}: not valid JSON"):
        HippoGraphIndex.from_persist_dir(tmp_path, chroma_client=index.chroma_client, embed_model=WordBagEmbedding())
    graph_file.write_text('{"nodes": "edited"}')
    with pytest.raises(ValueError, match=GRAPH_FILE):
        HippoGraphIndex.from_persist_dir(tmp_path, chroma_client=index.chroma_client, embed_model=WordBagEmbedding())
    assert index.counts()["passages"] == len(mini_docs())  # the Chroma data is untouched


def test_bad_index_name():
    with pytest.raises(ValueError, match="index name"):
        build(mini_docs(), "x")


def test_as_query_engine_answers_with_sources():
    index = build(mini_docs(), "idx_engine")
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=2)
    response = engine.query("Who directed Marty?")
    assert len(response.source_nodes) == 2
    assert engine.retriever.config.similarity_top_k == 2


def test_pagerank_matrix_is_built_once_per_graph_version():
    index = build(mini_docs(), "idx_version_cache")
    state = index.retrieval_state()
    assert index.retrieval_state() is state
    retriever = index.as_retriever()
    retriever.retrieve("Who directed Marty?")
    retriever.retrieve("Where is Laie?")
    assert index.retrieval_state() is state
    index.insert([make_document("Oahu", "Oahu is an island of Hawaii.")])
    assert index.retrieval_state() is not state
    assert index.retrieval_state().version == index.graph.version


def test_hnsw_synonymy_equals_exact_on_a_small_graph(graph_snapshot):
    docs = all_docs()
    exact = build(docs, "idx_syn_exact")
    searched = build(docs[:8], "idx_syn_hnsw", exact_synonymy_max_entities=0)  # Chroma's HNSW index finds them
    searched.insert(docs[8:])
    assert any(d["synonymy"] for _, _, d in exact.graph.graph.edges(data=True))
    assert graph_snapshot(searched) == graph_snapshot(exact)


# -- queries while the graph changes --------------------------------------------------------------------------------

QUERIES = ["Who directed Giant?", "Which island is Honolulu on?", "Who directed Marty?", "Rock Hudson films"]


def rankings(index: HippoGraphIndex) -> list[list[tuple[str, float]]]:
    retriever = index.as_retriever(similarity_top_k=5)
    return [[(n.node.node_id, n.score) for n in retriever.retrieve(q)] for q in QUERIES]


class PausingExtractor:
    """The LLM-free extractor, stopping before the passage titled ``pause_at`` until :attr:`release` is set."""

    def __init__(self, pause_at: str) -> None:
        self.pause_at = pause_at
        self.reached = threading.Event()
        self.release = threading.Event()

    def extract(self, text: str, title: str | None = None) -> Extraction:
        if title == self.pause_at:
            self.reached.set()
            self.release.wait(timeout=60)
        return extract_llm_free(text, title)


def test_queries_during_an_insert_see_the_graph_before_it_never_a_half_built_one():
    docs = all_docs()
    extractor = PausingExtractor(pause_at=MORE[4][0])
    index = build(mini_docs(), "idx_live", extractor=extractor, insert_batch_size=1)
    before = rankings(index)
    after = rankings(build(docs, "idx_live_fresh"))
    assert before != after  # the inserted passages change the answers
    writer = threading.Thread(target=index.insert, args=(docs[5:],))
    writer.start()
    try:
        assert extractor.reached.wait(timeout=60)
        assert index.graph.num_passages == 9  # four of the seven new passages are in the graph already
        assert rankings(index) == before  # answered at once, from the complete version before the insert
    finally:
        extractor.release.set()
        writer.join(timeout=60)
    assert rankings(index) == after


def test_a_query_never_answers_from_a_version_older_than_the_last_finished_change():
    docs = all_docs()
    extractor = PausingExtractor(pause_at=MORE[4][0])
    index = build(mini_docs(), "idx_stale", extractor=extractor, insert_batch_size=1)
    rankings(index)  # loads the first version
    index.insert(docs[5:7])  # finishes; no query loads this version
    writer = threading.Thread(target=index.insert, args=(docs[7:],))
    writer.start()
    answers: list = []
    reader = threading.Thread(target=lambda: answers.append(rankings(index)))
    try:
        assert extractor.reached.wait(timeout=60)
        reader.start()
        reader.join(timeout=0.5)
        assert not answers  # it waits for the running insert: the one finished version was never loaded
    finally:
        extractor.release.set()
        writer.join(timeout=60)
    reader.join(timeout=60)
    assert answers == [rankings(build(docs, "idx_stale_fresh"))]


def race(index: HippoGraphIndex, change) -> list[list[list[tuple[str, float]]]]:
    """The rankings two reader threads got while ``change()`` ran in this thread."""
    seen: list[list[list[tuple[str, float]]]] = []
    done = threading.Event()

    def query_until_done() -> None:
        while not done.is_set():
            seen.append(rankings(index))

    readers = [threading.Thread(target=query_until_done) for _ in range(2)]
    for reader in readers:
        reader.start()
    try:
        change()
    finally:
        done.set()
        for reader in readers:
            reader.join(timeout=60)
    assert seen
    return seen


def test_queries_racing_an_insert_and_a_delete_get_the_old_or_the_new_answers():
    docs = all_docs()
    doris = next(d for d in docs if d.metadata["title"] == "Doris Day")
    index = build(mini_docs(), "idx_race", insert_batch_size=1)
    before = rankings(index)
    after = rankings(build(docs, "idx_race_all"))
    without_doris = rankings(build([d for d in docs if d is not doris], "idx_race_doris"))
    assert len({str(before), str(after), str(without_doris)}) == 3
    # Each query answers from one complete version (queries of one round may straddle the change).
    for answers in race(index, lambda: index.insert(docs[5:])):
        assert all(answer in (old, new) for answer, old, new in zip(answers, before, after, strict=True))
    for answers in race(index, lambda: index.delete(doris.doc_id)):
        assert all(answer in (old, new) for answer, old, new in zip(answers, after, without_doris, strict=True))
    assert rankings(index) == without_doris
