"""The Benchmarker: hand-computed scores with scripted retrievers, and a real run on a HotpotQA slice."""

from __future__ import annotations

import copy
import json
import math

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_mhop.bench.benchmarker import (
    WARM_UP_QUERY,
    Benchmarker,
    passage_ids,
    save_json,
    validate_result,
)
from llama_index_mhop.bench.cli import plot
from llama_index_mhop.bench.loaders import BenchDataset, BenchQuestion, Passage, load_dataset
from llama_index_mhop.bench.registry import RetrieverSpec
from llama_index_mhop.lm.steps import FallbackCounter

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class ScriptedRetriever(BaseRetriever):
    """Returns a fixed list of passage ids per question text, as nodes (repeat an id to simulate chunks)."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        self.script = script
        self.asked: list[str] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.asked.append(query_bundle.query_str)
        if query_bundle.query_str not in self.script:  # the warm-up: a fallback the run must not count
            getattr(self, "fallback_counts", FallbackCounter()).add("perspectives")
        ids = self.script.get(query_bundle.query_str, ["p1", "p2"])
        return [NodeWithScore(node=TextNode(id_=f"{pid}-{i}", text=f"chunk {i} of {pid}",
                                            metadata={"passage_id": pid, "title": f"T{pid}"}),
                              score=1.0 - i / 10) for i, pid in enumerate(ids)]


def _toy_dataset() -> BenchDataset:
    passages = [Passage(f"p{i}", f"Title {i}", f"text {i}") for i in range(1, 7)]
    questions = [
        BenchQuestion("q1", "first?", ["p1", "p2"]),
        BenchQuestion("q2", "second?", ["p3", "p4", "p5"]),
        BenchQuestion("q3", "third?", ["p1", "p3", "p5", "p6"]),
    ]
    return BenchDataset("toy", passages, questions)


SCRIPT = {
    "first?": ["p2", "p2", "p1", "p6"],  # two chunks of p2 count once
    "second?": ["p6", "p3", "p5"],
    "third?": ["p5", "p1"],  # shorter than k
}


def test_scores_are_hand_computed(tmp_path):
    counter = FallbackCounter()
    counter.add("perspectives")

    def factory(ctx):
        retriever = ScriptedRetriever(SCRIPT)
        retriever.fallback_counts = counter
        return retriever

    spec = RetrieverSpec("scripted", "fixed rankings", factory, needs_index=None)
    bench = Benchmarker(_toy_dataset(), {"scripted": spec}, k_values=(3, 1), embed_model=MockEmbedding(embed_dim=8),
                        chroma_client=object(), work_dir=tmp_path, show_progress=False)
    result = bench.run()
    validate_result(result)
    assert (result["dataset"], result["n_questions"], result["n_passages"], result["k_values"]) == ("toy", 3, 6, [1, 3])
    (run,) = result["runs"]
    assert run["name"] == "scripted" and run["index_seconds_shared"] == 0.0
    assert run["fallbacks"] == {"perspectives": 1}
    # k=1: q1 [p2] P1 R1/2 F2/3 | q2 [p6] 0 | q3 [p5] P1 R1/4 F0.4
    # k=3 (the Searcher cuts at 3 nodes, q1 becomes [p2, p1]): q1 P2/3 R1 F0.8 all | q2 P2/3 R2/3 F2/3 |
    #     q3 P2/3 R1/2 F4/7
    expected = {
        "precision@1": 200 / 3, "recall@1": 25.0, "f1@1": 100 * (2 / 3 + 0.4) / 3, "all_gold@1": 0.0,
        "precision@3": 200 / 3, "recall@3": 100 * (1 + 2 / 3 + 1 / 2) / 3,
        "f1@3": 100 * (0.8 + 2 / 3 + 4 / 7) / 3, "all_gold@3": 100 / 3,
    }
    assert run["metrics"].keys() == expected.keys()
    for key, value in expected.items():
        assert run["metrics"][key] == pytest.approx(value, abs=1e-3), key


def test_retrievers_are_warmed_then_asked_question_by_question_in_rotating_order(tmp_path):
    asked: list[tuple[str, str]] = []

    def factory(name):
        def build(ctx):
            retriever = ScriptedRetriever(SCRIPT)
            retriever.asked = _Log(asked, name)
            return retriever
        return RetrieverSpec(name, name, build, needs_index=None)

    specs = {name: factory(name) for name in ("a", "b", "c")}
    result = Benchmarker(_toy_dataset(), specs, k_values=(3,), embed_model=MockEmbedding(embed_dim=8),
                         chroma_client=object(), work_dir=tmp_path, show_progress=False).run()
    warm = [(name, WARM_UP_QUERY) for name in "abc"]
    timed = [("a", "first?"), ("b", "first?"), ("c", "first?"), ("b", "second?"), ("c", "second?"),
             ("a", "second?"), ("c", "third?"), ("a", "third?"), ("b", "third?")]
    assert asked == warm + timed
    assert result["timing"]["method"] == "interleaved"
    assert [run["metrics"] for run in result["runs"]] == [result["runs"][0]["metrics"]] * 3


class _Log:
    """A retriever's ``asked`` list that logs into one shared list, with the retriever's name."""

    def __init__(self, log: list[tuple[str, str]], name: str) -> None:
        self.log, self.name = log, name

    def append(self, query: str) -> None:
        self.log.append((self.name, query))


def test_every_run_is_tested_against_vector_question_by_question(tmp_path):
    better = {"first?": ["p1", "p2"], "second?": ["p3", "p4", "p5"], "third?": ["p1", "p3", "p5", "p6"]}
    specs = {name: RetrieverSpec(name, name, lambda ctx, s=script: ScriptedRetriever(s), needs_index=None)
             for name, script in (("vector", SCRIPT), ("better", better))}
    bench = Benchmarker(_toy_dataset(), specs, k_values=(3,), embed_model=MockEmbedding(embed_dim=8),
                        chroma_client=object(), work_dir=tmp_path, show_progress=False)
    result = bench.run()
    vector, scripted = result["runs"]
    # Per question at k=3: vector recall 100, 66.7, 50 (see test_scores_are_hand_computed); "better" 100, 100, 75.
    assert vector["per_question"]["recall@3"] == pytest.approx([100.0, 200 / 3, 50.0], abs=1e-3)
    assert scripted["per_question"]["recall@3"] == pytest.approx([100.0, 100.0, 75.0])
    assert scripted["per_question"]["all_gold@3"] == [100.0, 100.0, 0.0]
    report = result["significance"]
    assert report["baseline"] == "vector" and set(report["runs"]) == {"better"}
    recall = report["runs"]["better"]["recall@3"]
    assert recall["difference"] == pytest.approx((100 / 3 + 25) / 3, abs=1e-3)
    # Differences 0, 33.3, 25: sign flips of the two non-zero ones reach |sum| >= 58.3 in 2 of 4 patterns.
    assert recall["p_value"] == pytest.approx(0.5)
    assert report["runs"]["better"]["all_gold@3"] == {"difference": pytest.approx(100 / 3), "ci_low": 0.0,
                                                      "ci_high": 100.0, "p_value": 1.0, "n": 3}
    png = plot(result, tmp_path / "plot.png")
    assert png.read_bytes()[:8] == PNG_SIGNATURE


def test_passage_ids_fall_back_to_title_then_node_id():
    nodes = [NodeWithScore(node=TextNode(id_="n1", text="a", metadata={"passage_id": "P", "title": "T"})),
             NodeWithScore(node=TextNode(id_="n2", text="b", metadata={"title": "T2"})),
             NodeWithScore(node=TextNode(id_="n3", text="c", metadata={"passage_id": "P"})),
             NodeWithScore(node=TextNode(id_="n4", text="d"))]
    assert passage_ids(nodes) == ["P", "T2", "n4"]


def test_bad_configurations(tmp_path):
    dataset = _toy_dataset()
    with pytest.raises(ValueError, match="k_values"):
        Benchmarker(dataset, ["bm25"], k_values=(0, 5))
    with pytest.raises(ValueError, match="unknown retriever"):
        Benchmarker(dataset, ["vector", "nope"])
    with pytest.raises(ValueError, match="list of names"):
        Benchmarker(dataset, "vector")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no questions"):
        Benchmarker(BenchDataset("empty", dataset.passages, []), ["bm25"])
    # A bare factory is taken to read the shared vector index, so its run is charged for building it.
    assert Benchmarker(dataset, {"mine": lambda ctx: None}).specs[0].needs_index == "vector"

    spec = RetrieverSpec("broken", "returns a string", lambda ctx: "not a retriever", needs_index=None)
    bench = Benchmarker(dataset, {"broken": spec}, embed_model=MockEmbedding(embed_dim=8), chroma_client=object(),
                        work_dir=tmp_path, show_progress=False)
    with pytest.raises(TypeError, match="'broken' returned str"):
        bench.run()


def _valid_result() -> dict:
    metrics = {f"{m}@{k}": 50.0 for k in (2, 5) for m in ("recall", "all_gold", "precision", "f1")}
    return {"dataset": "d", "n_questions": 1, "n_passages": 2, "k_values": [2, 5], "runs": [
        {"name": "r", "index_seconds": 1.0, "latency_ms_p50": 2.0, "latency_ms_p95": 3.0, "peak_rss_mb": 4.0,
         "metrics": metrics}]}


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("n_passages"), "missing 'n_passages'"),
    (lambda r: r.update(n_questions=True), "'n_questions' must be int"),
    (lambda r: r.update(k_values=[2, 0]), "k_values"),
    (lambda r: r["runs"][0].pop("latency_ms_p95"), "missing 'latency_ms_p95'"),
    (lambda r: r["runs"][0].update(peak_rss_mb="4"), "peak_rss_mb must be a number"),
    (lambda r: r["runs"][0]["metrics"].pop("f1@5"), "missing 'f1@5'"),
    (lambda r: r["runs"][0]["metrics"].update({"recall@2": 0.5 * 300}), "recall@2"),
    (lambda r: r["runs"][0]["metrics"].update({"recall@2": math.nan}), "recall@2"),
])
def test_validate_result_names_the_bad_key(mutate, message):
    validate_result(_valid_result())
    broken = copy.deepcopy(_valid_result())
    mutate(broken)
    with pytest.raises(ValueError, match="invalid benchmark result") as info:
        validate_result(broken)
    assert message in str(info.value)


def _check_schema(result: dict) -> None:
    """The DESIGN.md result schema, checked key by key independently of validate_result."""
    assert isinstance(result["dataset"], str)
    for key in ("n_questions", "n_passages"):
        assert type(result[key]) is int
    assert isinstance(result["k_values"], list) and all(type(k) is int for k in result["k_values"])
    assert isinstance(result["runs"], list) and result["runs"]
    for run in result["runs"]:
        assert isinstance(run["name"], str)
        for key in ("index_seconds", "latency_ms_p50", "latency_ms_p95", "peak_rss_mb"):
            assert type(run[key]) is float and run[key] >= 0, key
        expected = {f"{m}@{k}" for k in result["k_values"] for m in ("recall", "all_gold", "precision", "f1")}
        assert expected <= set(run["metrics"])
        for key in expected:
            assert type(run["metrics"][key]) is float and 0.0 <= run["metrics"][key] <= 100.0, key


def test_real_run_on_a_hotpotqa_slice(hotpotqa_dir, embed_model, tmp_path):
    from llama_index_mhop.stores.defaults import default_chroma_client

    dataset = load_dataset(hotpotqa_dir).head(10, context_only=True)
    assert len(dataset.questions) == 10 and 90 <= len(dataset.passages) <= 100
    bench = Benchmarker(dataset, ["vector", "bm25"], embed_model=embed_model,
                        chroma_client=default_chroma_client(tmp_path / "chroma"), work_dir=tmp_path,
                        show_progress=False)
    result = bench.run()
    out = save_json(result, tmp_path / "out" / "result.json")
    png = plot(result, tmp_path / "out" / "result.png")

    loaded = json.loads(out.read_text())
    _check_schema(loaded)
    assert (loaded["dataset"], loaded["n_questions"], loaded["n_passages"]) == ("hotpotqa-100", 10,
                                                                                 len(dataset.passages))
    assert loaded["k_values"] == [2, 5, 10, 21] and [r["name"] for r in loaded["runs"]] == ["vector", "bm25"]
    assert loaded["n_index_nodes"] >= loaded["n_passages"]
    vector, bm25 = loaded["runs"]
    assert vector["index_seconds_shared"] > 0 and bm25["index_seconds_shared"] == 0.0
    assert vector["index_seconds"] == pytest.approx(vector["index_seconds_shared"] + vector["index_seconds_own"],
                                                    abs=1e-3)
    for run in loaded["runs"]:
        metrics = run["metrics"]
        recalls = [metrics[f"recall@{k}"] for k in (2, 5, 10, 21)]
        assert recalls == sorted(recalls)
        for k in (2, 5, 10, 21):
            # Every HotpotQA question has 2 gold passages, so precision@k = recall@k * 2 / k exactly.
            assert metrics[f"precision@{k}"] == pytest.approx(metrics[f"recall@{k}"] * 2 / k, abs=1e-3)
            assert metrics[f"all_gold@{k}"] <= metrics[f"recall@{k}"]
        # 21 of about 100 passages: if retrieved nodes did not map to the gold ids this would be near 0.
        assert metrics["recall@21"] >= 80.0, run["name"]

    data = png.read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 1000
