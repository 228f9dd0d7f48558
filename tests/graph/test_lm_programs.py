"""The graph index keeps its compiled DSPy programs: persist writes them beside the graph, reopening loads them,
and the reopened index asks its LM exactly what the saved one did."""

from __future__ import annotations

import json

import dspy
import pytest

from llama_index_mhop.graph.extraction import OpenIEExtractor
from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.graph.lm_programs import EXTRACTOR_PROGRAM_FILE, FACT_FILTER_PROGRAM_FILE
from llama_index_mhop.lm.clients import function_lm, render_fields
from llama_index_mhop.lm.steps import FactFilterModule
from tests.fact_filter_lm import recognising_lm
from tests.graph.film_chain import documents
from tests.word_bag import WordBagEmbedding

QUERY = "Who directed Lover Come Back?"
FILTER_RULE = "Keep the facts that name who directed a film."
OPENIE_DEMO = "Heinkel HD 23 is a German biplane."


def _compiled_filter() -> FactFilterModule:
    program = FactFilterModule()
    program.filter.signature = program.filter.signature.with_instructions(FILTER_RULE)
    program.filter.demos = [dspy.Example(
        question="Who directed Marty?", fact_before_filter=json.dumps({"fact": [["marty", "directed by", "mann"]]}),
        fact_after_filter={"fact": [["marty", "directed by", "mann"]]})]
    return program


def _compile_extractor(extractor: OpenIEExtractor) -> None:
    extractor.program.extract.demos = [dspy.Example(
        title="Heinkel HD 23", passage=OPENIE_DEMO, named_entities=["Heinkel HD 23"],
        triples=[["Heinkel HD 23", "is", "German biplane"]])]


def _openie_lm(prompts: list[str]) -> dspy.LM:
    def chat(messages):
        prompts.append(json.dumps(messages))
        return render_fields({"named_entities": ["Marty", "Delbert Mann"],
                              "triples": [["Marty", "directed by", "Delbert Mann"]]})

    return function_lm(chat, model="scripted/openie")


def _retrieval(index: HippoGraphIndex) -> tuple[list[str], list[dict], list[str]]:
    prompts: list[str] = []
    retriever = index.as_retriever(similarity_top_k=3, lm=recognising_lm(prompts))
    ids = [n.node.node_id for n in retriever.retrieve(QUERY)]
    return ids, retriever.last_trace["kept_facts"], prompts


def _extraction(extractor: OpenIEExtractor) -> tuple[object, list[str]]:
    prompts: list[str] = []
    with dspy.context(lm=_openie_lm(prompts)):
        extraction = extractor.extract("Marty is a 1955 film directed by Delbert Mann.", "Marty")
    return extraction, prompts


@pytest.fixture
def saved(tmp_path):
    root = tmp_path / "index"
    index = HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root,
                                           name="programs", show_progress=False)
    index.fact_filter_program = _compiled_filter()
    _compile_extractor(index.extractor)
    index.persist()
    return index, root


def test_a_reopened_index_asks_its_lm_what_the_saved_one_did(saved):
    index, root = saved
    assert (root / FACT_FILTER_PROGRAM_FILE).is_file() and (root / EXTRACTOR_PROGRAM_FILE).is_file()
    loaded = HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding())
    assert loaded.fact_filter_program.dump_state() == index.fact_filter_program.dump_state()
    assert loaded.extractor.program.dump_state() == index.extractor.program.dump_state()
    before = _retrieval(index)
    assert _retrieval(loaded) == before
    assert before[1] and len(before[2]) == 1 and FILTER_RULE in before[2][0]
    extraction, prompts = _extraction(loaded.extractor)
    assert (extraction, prompts) == _extraction(index.extractor) and OPENIE_DEMO in prompts[0]
    assert extraction.from_lm and ("Marty", "directed by", "Delbert Mann") in extraction.triples
    # Without the compiled programs the LM is asked something else.
    index.fact_filter_program = None
    assert FILTER_RULE not in _retrieval(index)[2][0]
    assert OPENIE_DEMO not in _extraction(OpenIEExtractor())[1][0]


def test_an_index_saved_without_a_filter_program_reopens_with_the_default(tmp_path):
    index = HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=tmp_path,
                                           name="plain", show_progress=False)
    assert not (tmp_path / FACT_FILTER_PROGRAM_FILE).exists() and (tmp_path / EXTRACTOR_PROGRAM_FILE).is_file()
    assert HippoGraphIndex.from_persist_dir(tmp_path, embed_model=WordBagEmbedding()).fact_filter_program is None
    assert index.fact_filter_program is None


def test_a_corrupt_program_file_is_a_clear_error(saved):
    _, root = saved
    (root / FACT_FILTER_PROGRAM_FILE).write_text('{"filter": ')
    with pytest.raises(ValueError, match=FACT_FILTER_PROGRAM_FILE):
        HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding())


def test_resuming_with_from_documents_keeps_the_saved_extractor_program(saved):
    index, root = saved
    resumed = HippoGraphIndex.from_documents(documents(), embed_model=WordBagEmbedding(), persist_dir=root,
                                             name="programs", show_progress=False)
    assert resumed.extractor.program.dump_state() == index.extractor.program.dump_state()
    resumed.persist()
    reopened = HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding())
    assert OPENIE_DEMO in _extraction(reopened.extractor)[1][0]


def test_an_unset_filter_program_is_not_reloaded(saved):
    index, root = saved
    index.fact_filter_program = None
    index.persist()
    assert not (root / FACT_FILTER_PROGRAM_FILE).exists()
    assert HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding()).fact_filter_program is None
