"""A flow's round of searches is embedded in one call and answered from one Chroma query, and the flows rank
exactly as they do searching one query at a time."""

from __future__ import annotations

import asyncio

import chromadb
import numpy as np
import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_mhop import ConfidenceLoopRetriever, RRFFusionRetriever
from llama_index_mhop.components.base import (
    BatchSearcher,
    Search,
    StepRecord,
    StepRunner,
    arun_flow,
    run_flow,
)
from llama_index_mhop.lm.steps import FallbackCounter
from llama_index_mhop.stores.passage_table import PassageSearch
from llama_index_mhop.stores.search import (
    GuardedChromaVectorStore,
    QueryVectors,
    embed_queries,
)
from tests.word_bag import WordBagEmbedding


class CountingWordBag(WordBagEmbedding):
    """Counts the queries it embeds."""

    queries: int = 0

    def _get_query_embedding(self, query: str) -> list[float]:
        self.queries += 1
        return self._vector(query)


class OneAtATime(BaseRetriever):
    """A retriever that hides its inner vector retriever: the flows search it one query at a time."""

    def __init__(self, inner: BaseRetriever) -> None:
        super().__init__()
        self.inner = inner

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.inner.retrieve(query_bundle.query_str)


def test_each_distinct_query_is_embedded_once_and_the_oldest_leave_first():
    embedder = CountingWordBag(dim=64)
    vectors = QueryVectors(embedder, max_queries=3)
    first = vectors(["a b", "c d", "a b"])
    assert embedder.queries == 2 and first[0] == first[2] == embedder._vector("a b")
    vectors(["c d", "e f", "g h"])  # "a b" is now the least recently used of four
    assert embedder.queries == 4
    vectors(["c d"])
    assert embedder.queries == 4
    vectors(["a b"])
    assert embedder.queries == 5


def test_a_batch_of_queries_embeds_as_each_query_alone(embed_model):
    queries = ["Who directed Lover Come Back?", "Delbert Mann", "Doris Day films of 1961"]
    batch = np.array(embed_queries(embed_model, queries))
    alone = np.array([embed_model.get_query_embedding(q) for q in queries])
    assert batch.shape == alone.shape
    assert np.abs(batch - alone).max() < 1e-5


@pytest.fixture
def guarded(tmp_path):
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))
    collection = client.get_or_create_collection("passages", metadata={"hnsw:space": "l2"})
    store = GuardedChromaVectorStore.over(client, collection)
    embedder = WordBagEmbedding(dim=64)
    texts = [f"passage {i} about {topic}" for i, topic in enumerate(
        ["films", "actors", "directors", "Kansas", "Yale", "Batman", "Miami", "the Navy", "Marty", "1955"])]
    nodes = [TextNode(text=t, id_=f"p{i}", embedding=embedder._vector(t)) for i, t in enumerate(texts)]
    store.add(nodes)
    return store, collection, embedder


def test_a_round_of_several_depths_is_one_chroma_query_equal_to_each_query_alone(guarded):
    store, collection, embedder = guarded
    queries = [VectorStoreQuery(query_embedding=embedder._vector(q), similarity_top_k=k)
               for q, k in (("films directors", 3), ("Kansas Yale", 3), ("Batman Miami", 5))]
    alone = [store.query(q) for q in queries]
    calls = []
    real_query = collection.query
    store._collection.query = lambda **kw: calls.append(len(kw["query_embeddings"])) or real_query(**kw)
    answered = store.answering(queries)
    together = [answered.query(q) for q in queries]
    assert calls == [3]  # one call at the deepest depth answers the shallower queries too
    for a, t in zip(alone, together, strict=True):
        assert t.similarities == pytest.approx(a.similarities, abs=1e-9)
        untied = sum(s > a.similarities[-1] + 1e-9 for s in a.similarities)  # passages tied at the k-th may differ
        assert t.ids[:untied] == a.ids[:untied]
        assert [n.get_content() for n in t.nodes][:untied] == [n.get_content() for n in a.nodes][:untied]
    assert store.query(queries[0]).ids == alone[0].ids  # the store itself still asks Chroma
    assert len(calls) == 2


def test_a_shallower_chroma_search_is_the_first_results_of_a_deeper_one():
    """HNSW's top k against the first k of its top 30: the same passages without ties; with passages at exactly
    the same distance, the same distances (Chroma keeps any of the passages tied at the k-th place)."""
    rng = np.random.default_rng(0)
    client = chromadb.EphemeralClient()
    for name, vectors in (("distinct", rng.normal(size=(600, 16))),
                          ("tied", np.repeat(rng.normal(size=(60, 16)), 10, axis=0))):
        collection = client.create_collection(name)
        collection.add(ids=[f"p{i:04d}" for i in range(len(vectors))], embeddings=vectors.tolist())
        for query in rng.normal(size=(10, 16)).tolist():
            deep = collection.query(query_embeddings=[query], n_results=30)
            for k in range(1, 31):
                shallow = collection.query(query_embeddings=[query], n_results=k)
                assert shallow["distances"][0] == pytest.approx(deep["distances"][0][:k], abs=1e-6)
                if name == "distinct":
                    assert shallow["ids"][0] == deep["ids"][0][:k]


def fused(retriever: BaseRetriever, questions: list[str]) -> list[list[tuple[str, float]]]:
    return [[(n.node.node_id, round(n.score or 0.0, 9)) for n in retriever.retrieve(q)] for q in questions]


def test_the_flows_rank_as_when_searching_one_query_at_a_time(hotpotqa_slice, hotpotqa_slice_index, monkeypatch):
    # The flows' text rounds (an LM's perspectives and queries; LLM-free over Chroma they look passages up instead).
    monkeypatch.setattr(PassageSearch, "of", classmethod(lambda cls, retriever: None))
    questions = [q["question"] for q in hotpotqa_slice[0][:6]]
    index = hotpotqa_slice_index
    batched = RRFFusionRetriever.from_defaults(index)
    plain = RRFFusionRetriever(OneAtATime(index.as_retriever(similarity_top_k=batched.config.search_depth)))
    assert fused(batched, questions) == fused(plain, questions)
    batched_loop = ConfidenceLoopRetriever.from_defaults(index)
    plain_loop = ConfidenceLoopRetriever(
        retriever_factory=lambda k: OneAtATime(index.as_retriever(similarity_top_k=k)))
    assert fused(batched_loop, questions) == fused(plain_loop, questions)


def test_async_rounds_rank_as_blocking_ones(hotpotqa_slice, hotpotqa_slice_index):
    question = hotpotqa_slice[0][0]["question"]
    retriever = RRFFusionRetriever.from_defaults(hotpotqa_slice_index)
    blocking = [(n.node.node_id, n.score) for n in retriever.retrieve(question)]
    awaited = [(n.node.node_id, n.score) for n in asyncio.run(retriever.aretrieve(question))]
    assert awaited == blocking


def test_a_retriever_without_a_query_vector_is_searched_query_by_query():
    seen: list[str] = []

    class Recording(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            seen.append(query_bundle.query_str)
            assert query_bundle.embedding is None
            return [NodeWithScore(node=TextNode(text=query_bundle.query_str, id_=query_bundle.query_str), score=1.0)]

    searcher = BatchSearcher(lambda k: Recording())
    results = searcher.search(["a", "b", "a"], 3)
    assert seen == ["a", "b", "a"] and [r[0].node.node_id for r in results] == ["a", "b", "a"]


def _repeating_flow():
    """Searches "a" and "b", "b" again with a new "c", "a" deeper, then "a" and "c" shallower; returns every answer."""
    first = yield Search(["a", "b"], 3)
    second = yield Search(["b", "c", "b"], 3)
    deeper = yield Search(["a"], 5)
    shallower = yield Search(["a", "c"], 2)
    return first, second, deeper, shallower


def _recording_search(asked: list[tuple[tuple[str, ...], int]]):
    def search(queries: list[str], k: int) -> list[list[str]]:
        asked.append((tuple(queries), k))
        return [[f"{q}{i}@{k}#{len(asked)}" for i in range(k)] for q in queries]

    return search


def _check_repeating_answers(asked, answers) -> None:
    first, second, deeper, shallower = answers
    assert asked == [(("a", "b"), 3), (("c",), 3), (("a",), 5)]  # nothing searched twice
    assert first == [["a0@3#1", "a1@3#1", "a2@3#1"], ["b0@3#1", "b1@3#1", "b2@3#1"]]
    assert second == [first[1], ["c0@3#2", "c1@3#2", "c2@3#2"], first[1]]
    assert deeper == [["a0@5#3", "a1@5#3", "a2@5#3", "a3@5#3", "a4@5#3"]]
    assert shallower == [["a0@5#3", "a1@5#3"], ["c0@3#2", "c1@3#2"]]  # the first k of the deepest search


def test_a_query_a_run_already_searched_as_deep_is_answered_by_the_first_results_of_its_deepest_search():
    asked: list[tuple[tuple[str, ...], int]] = []
    answers = run_flow(_repeating_flow(), StepRunner(None, FallbackCounter()), StepRecord(), _recording_search(asked))
    _check_repeating_answers(asked, answers)
    answers[1][0].append("changed by the flow")
    assert answers[1][2] == answers[0][1]  # each answer is the flow's own list


def test_awaited_runs_answer_repeated_searches_alike():
    asked: list[tuple[tuple[str, ...], int]] = []
    search = _recording_search(asked)

    async def asearch(queries: list[str], k: int) -> list[list[str]]:
        return search(queries, k)

    answers = asyncio.run(arun_flow(_repeating_flow(), StepRunner(None, FallbackCounter()), StepRecord(), asearch))
    _check_repeating_answers(asked, answers)


def test_each_round_of_a_retrieval_is_at_most_one_chroma_query_and_no_vector_is_searched_twice(
        hotpotqa_slice, hotpotqa_slice_index, monkeypatch):
    monkeypatch.setattr(PassageSearch, "of", classmethod(lambda cls, retriever: None))  # the text perspectives' path
    collection = hotpotqa_slice_index.vector_store._collection
    sent: list[list[tuple[float, ...]]] = []
    real_query = collection.query

    def counting(**kwargs):
        sent.append([tuple(v) for v in kwargs["query_embeddings"]])
        return real_query(**kwargs)

    collection.query = counting
    try:
        for question in [q["question"] for q in hotpotqa_slice[0][:3]]:
            sent.clear()
            retriever = RRFFusionRetriever.from_defaults(hotpotqa_slice_index)
            retriever.retrieve(question)
            perspectives = [it["perspectives"] for it in retriever.last_trace["iterations"]]
            rounds = [[question, *perspectives[0]], *perspectives[1:]]
            new = [r for i, r in enumerate(rounds) if set(r) - {q for earlier in rounds[:i] for q in earlier}]
            assert len(sent) == len(new)  # one call a round that has a query not searched yet, none else
            vectors = [v for call in sent for v in call]
            assert len(vectors) == len(set(vectors)) == len({q for r in rounds for q in r})
    finally:
        collection.query = real_query


def test_a_round_over_the_guarded_store_is_one_chroma_query_and_leaves_the_retriever_as_it_was(guarded):
    from llama_index.core import VectorStoreIndex

    store, collection, embedder = guarded
    retriever = VectorStoreIndex.from_vector_store(store, embed_model=embedder).as_retriever(similarity_top_k=3)
    queries = ["films directors", "Kansas Yale", "Batman Miami"]
    alone = [[(n.node.node_id, n.score) for n in retriever.retrieve(q)] for q in queries]
    calls = []
    real_query = collection.query
    store._collection.query = lambda **kw: calls.append(len(kw["query_embeddings"])) or real_query(**kw)
    searcher = BatchSearcher(lambda k: retriever)
    together = [[(n.node.node_id, n.score) for n in r] for r in searcher.search(queries, 3)]
    awaited = [[(n.node.node_id, n.score) for n in r] for r in asyncio.run(searcher.asearch(queries, 3))]
    assert calls == [3, 3] and together == awaited == alone
    assert retriever._vector_store is store and store.query(retriever._build_vector_store_query(
        QueryBundle(query_str=queries[0], embedding=embedder._vector(queries[0])))).ids == [i for i, _ in alone[0]]
    assert len(calls) == 3
