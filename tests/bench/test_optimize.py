"""``mhop optimize``: DSPy's optimizer compiles a retriever's program on a seeded train split, saves DSPy's JSON,
and the saved program reloads with the same predictions."""

from __future__ import annotations

import hashlib
import json

import chromadb
import pytest

from llama_index_mhop.bench.context import BenchContext, passage_documents
from llama_index_mhop.bench.loaders import load_dataset
from llama_index_mhop.bench.optimize import optimize_program, retrieval_metric, split_questions
from llama_index_mhop.bench.registry import get_retriever_spec
from llama_index_mhop.bench.synthetic import write_dataset
from llama_index_mhop.components.fact_filter import DSPyFactFilter
from llama_index_mhop.lm.clients import function_lm, render_fields
from tests.fact_filter_lm import recognising_lm


def _perspective_lm():
    """Perspectives that depend on the whole prompt, demos included."""

    def chat(messages):
        digest = hashlib.sha256(json.dumps(messages).encode()).hexdigest()
        return render_fields({"perspectives": [f"{messages[-1][1][-60:]} {digest[i:i + 4]}" for i in range(0, 20, 4)]})

    return function_lm(chat, model="scripted/perspectives")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, embed_model):
    dataset = load_dataset(write_dataset(tmp_path_factory.mktemp("tiny"), n_passages=40, n_questions=6))
    lm = _perspective_lm()
    context = BenchContext(passage_documents(dataset.passages), embed_model=embed_model,
                           chroma_client=chromadb.EphemeralClient(), work_dir=tmp_path_factory.mktemp("work"),
                           top_k=21, lm=lm)
    return dataset, context, lm


def test_split_is_seeded_and_disjoint(tiny):
    dataset, _, _ = tiny
    train, dev = split_questions(dataset.questions, 4, seed=3)
    assert [q.qid for q in train] == [q.qid for q in split_questions(dataset.questions, 4, seed=3)[0]]
    assert len(train) == 4 and len(dev) == 2 and not {q.qid for q in train} & {q.qid for q in dev}
    with pytest.raises(ValueError, match="--train"):
        split_questions(dataset.questions, 6)


def test_bootstrap_compiles_saves_and_reloads(tiny, tmp_path):
    dataset, context, lm = tiny
    retriever = get_retriever_spec("rrf_fusion").factory(context)
    result = optimize_program(retriever, "rrf_fusion", dataset, "bootstrap", "recall@5", 4, tmp_path / "p.json", lm=lm)
    assert (result.train, result.dev) == (4, 2) and 0.0 <= result.dev_before <= 100.0
    saved = json.loads(result.program_path.read_text())
    assert saved["perspectives.generate"]["demos"], "the optimizer kept no demo"
    context.program = str(result.program_path)
    reloaded = get_retriever_spec("rrf_fusion").factory(context)
    context.program = None
    question = dataset.questions[0].text
    assert [n.node.node_id for n in reloaded.retrieve(question)] == [n.node.node_id for n in retriever.retrieve(question)]


def test_metric_reads_passage_ids():
    class Node:
        def __init__(self, pid):
            self.node = type("N", (), {"metadata": {"passage_id": pid}, "node_id": f"node-{pid}"})()

    prediction = type("P", (), {"nodes": [Node("a"), Node("x"), Node("b")]})()
    example = type("E", (), {"gold": ["a", "b"]})()
    assert retrieval_metric("recall@5")(example, prediction) == 1.0
    assert retrieval_metric("all_gold@21")(example, prediction) == 1.0
    with pytest.raises(ValueError, match="unknown metric"):
        retrieval_metric("mrr")


def test_hippo_graph_compiles_its_fact_filter_saves_and_reloads(tiny, tmp_path):
    dataset, context, perspective_lm = tiny
    context.lm = lm = recognising_lm()
    try:
        retriever = get_retriever_spec("hippo_graph").factory(context)
        result = optimize_program(retriever, "hippo_graph", dataset, "bootstrap", "recall@5", 4,
                                  tmp_path / "hippo.json", lm=lm)
        saved = json.loads(result.program_path.read_text())
        assert saved["filter"]["demos"], "the optimizer kept no demo"
        context.program = str(result.program_path)
        reloaded = get_retriever_spec("hippo_graph").factory(context)
    finally:
        context.lm, context.program = perspective_lm, None
    assert reloaded.program.dump_state() == retriever.program.dump_state()
    assert retriever.fact_filter.program.filter.demos == retriever.program.filter.demos  # one predictor
    for question in (q.text for q in dataset.questions[:2]):
        assert [n.node.node_id for n in reloaded.retrieve(question)] == [
            n.node.node_id for n in retriever.retrieve(question)]
        assert reloaded.last_trace["kept_facts"] == retriever.last_trace["kept_facts"]
    # The JSON is the fact filter's too: a DSPyFactFilter loads it as it is.
    assert DSPyFactFilter(program=result.program_path).program.dump_state() == reloaded.program.dump_state()
