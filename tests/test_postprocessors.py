"""DSPyFactFilter: the LM path with scripted answers (good, malformed, invented, hostile), fallbacks, LLM-free rule."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import dspy
import pytest
from dspy.utils import DummyLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode

from llama_index_mhop.components.fact_filter import (
    DSPyFactFilter,
    FactFilterModule,
    FactSelection,
    fact_node,
    select_by_mentions,
)
from llama_index_mhop.lm.steps import Fact, FactFilterSignature
from tests.fact_filter_lm import BrokenLM, answer

# seeds/003, example 1, with embedding scores falling in list order.
RIVER_QUERY = "Are Imperial River (Florida) and Amaradia (Dolj) both located in the same country?"
RIVER_FACTS = [
    ("imperial river", "is located in", "florida"),
    ("imperial river", "is a river in", "united states"),
    ("imperial river", "may refer to", "south america"),
    ("amaradia", "flows through", "ro ia de amaradia"),
    ("imperial river", "may refer to", "united states"),
]
RIVER_SCORES = [0.61, 0.58, 0.52, 0.50, 0.47]


def river_nodes() -> list[NodeWithScore]:
    return [fact_node(*fact, score=score) for fact, score in zip(RIVER_FACTS, RIVER_SCORES, strict=True)]


def assert_subset_of_input(result: list[NodeWithScore], nodes: list[NodeWithScore]) -> None:
    assert all(any(r is n for n in nodes) for r in result), "a returned node was not in the input"


class SlowLM(DummyLM):
    """An LM that answers too late."""

    def forward(self, *args, **kwargs):
        time.sleep(1.0)
        return super().forward(*args, **kwargs)

    async def aforward(self, *args, **kwargs):
        await asyncio.sleep(1.0)
        return await super().aforward(*args, **kwargs)


# --- fact nodes and the signature -----------------------------------------------------------------------


def test_fact_node_holds_the_triple():
    node = fact_node("imperial river", "is located in", "florida", 0.61, passage_ids=["p1"])
    assert node.score == pytest.approx(0.61)
    assert node.node.get_content() == "imperial river is located in florida"
    assert node.node.metadata == {
        "subject": "imperial river",
        "predicate": "is located in",
        "object": "florida",
        "passage_ids": ["p1"],
    }
    # The triple keys stay out of what is embedded (the text already says it).
    assert "subject:" not in node.node.get_content(MetadataMode.EMBED)
    assert node.node.node_id == fact_node("imperial river", "is located in", "florida", 0.1).node.node_id
    assert node.node.node_id != fact_node("imperial river", "is located in", "georgia").node.node_id


@pytest.mark.parametrize("bad", [("", "p", "o"), ("s", "p", "  "), ("s", None, "o"), ("s", "p", 3)])
def test_fact_node_rejects_bad_parts(bad):
    with pytest.raises(ValueError, match="non-empty string"):
        fact_node(*bad)


def test_signature_and_module_shape():
    assert set(FactFilterSignature.input_fields) == {"question", "fact_before_filter"}
    assert FactFilterSignature.output_fields["fact_after_filter"].annotation is Fact
    assert (
        "up to 4" in FactFilterSignature.instructions and '{"fact": []}' in FactFilterSignature.instructions
    )
    module = FactFilterModule()
    assert [name for name, _ in module.named_predictors()] == ["filter"]


# --- the LM path ------------------------------------------------------------------------------------------


def test_good_answer_keeps_the_lms_order_and_the_input_nodes():
    nodes = river_nodes()
    lm = DummyLM([answer(RIVER_FACTS[3], RIVER_FACTS[0], RIVER_FACTS[1])])
    fact_filter = DSPyFactFilter(lm=lm)
    result = fact_filter.postprocess_nodes(nodes, QueryBundle(RIVER_QUERY))
    assert result == [nodes[3], nodes[0], nodes[1]]
    assert_subset_of_input(result, nodes)
    assert [n.score for n in result] == [0.50, 0.61, 0.58]  # embedding scores unchanged
    assert fact_filter.fallback_counts.total == 0
    # The LM saw every candidate, serialised as the seed's JSON, best score first.
    prompt = lm.history[-1]["messages"][-1]["content"]
    assert json.dumps({"fact": [list(f) for f in RIVER_FACTS]}) in prompt
    assert RIVER_QUERY in prompt


def test_lightly_altered_copies_still_match_their_candidates():
    nodes = river_nodes()
    lm = DummyLM(
        [
            answer(
                ("Imperial River", "located in", "Florida."),
                ("amaradia", "flows through", "roia de amaradia"),
            )
        ]
    )
    result = DSPyFactFilter(lm=lm).postprocess_nodes(nodes, query_str=RIVER_QUERY)
    assert result == [nodes[0], nodes[3]]


def test_non_json_answer_falls_back_to_top_scores(caplog):
    nodes = river_nodes()
    fact_filter = DSPyFactFilter(
        lm=DummyLM([{"fact_after_filter": "The first and fourth facts are relevant."}])
    )
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        result = fact_filter.postprocess_nodes(nodes, QueryBundle(RIVER_QUERY))
    assert result == nodes[:4]
    assert fact_filter.fallback_counts["fact_filter"] == 1
    assert "fact_filter" in caplog.text


@pytest.mark.parametrize(
    "raw",
    ['{"fact": "imperial river"}', '[["imperial river", "is located in", "florida"]]', '{"facts": []}'],
)
def test_wrong_shape_falls_back(raw):
    nodes = river_nodes()
    fact_filter = DSPyFactFilter(lm=DummyLM([{"fact_after_filter": raw}]), top_n=2)
    assert fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY) == nodes[:2]
    assert fact_filter.fallback_counts["fact_filter"] == 1


def test_an_empty_fact_list_is_the_answer_nothing_is_relevant(caplog):
    # {"fact": []} is what the prompt asks for when no fact is relevant: no fact kept, and no fallback.
    nodes = river_nodes()
    fact_filter = DSPyFactFilter(lm=DummyLM([answer(), answer()]), top_n=3)
    with caplog.at_level(logging.WARNING):
        assert fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY) == []
        assert asyncio.run(fact_filter.apostprocess_nodes(nodes, query_str=RIVER_QUERY)) == []
    assert fact_filter.fallback_counts.total == 0 and "LM step failed" not in caplog.text
    passage = NodeWithScore(node=TextNode(text="Imperial River is located in Florida.",
                                          metadata={"title": "Imperial River"}), score=0.5)
    keep_all = DSPyFactFilter(lm=DummyLM([answer()]))
    assert keep_all.postprocess_nodes([passage], query_str=RIVER_QUERY) == [passage]
    supporting = DSPyFactFilter(lm=DummyLM([answer()]), supporting_only=True)
    assert supporting.postprocess_nodes([passage], query_str=RIVER_QUERY) == []
    assert keep_all.fallback_counts.total == supporting.fallback_counts.total == 0


def test_invented_facts_are_dropped():
    nodes = river_nodes()
    lm = DummyLM(
        [
            answer(
                ("imperial river", "is located in", "georgia"),  # close in text, but another object
                ("amaradia", "is a tributary of", "the jiu"),  # not a candidate at all
                RIVER_FACTS[2],
                ("dolj", "is a county of", "romania"),
            )
        ]
    )
    fact_filter = DSPyFactFilter(lm=lm)
    assert fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY) == [nodes[2]]
    assert fact_filter.fallback_counts.total == 0


def test_only_invented_facts_fall_back():
    nodes = river_nodes()
    fact_filter = DSPyFactFilter(lm=DummyLM([answer(("dolj", "is a county of", "romania"))]), top_n=1)
    assert fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY) == [nodes[0]]
    assert fact_filter.fallback_counts.total == 1


def test_code_in_facts_is_never_run(tmp_path):
    marker = tmp_path / "pwned_x"
    payload = f"__import__('os').system('touch {marker}')"
    # The payload sits in a stored candidate (facts come from an LM at indexing time) and in the answer.
    nodes = [*river_nodes(), fact_node("amaradia", "flows through", payload, score=0.3)]
    lm = DummyLM(
        [
            answer(
                ("amaradia", "flows through", payload),
                (payload, payload, payload),
                [f"{payload}"],
                RIVER_FACTS[0],
            )
        ]
    )
    result = DSPyFactFilter(lm=lm).postprocess_nodes(nodes, query_str=RIVER_QUERY)
    assert not marker.exists()
    assert result == [nodes[5], nodes[0]]
    assert_subset_of_input(result, nodes)


def test_ten_times_too_many_facts_are_capped_at_top_n():
    facts = [(f"entity {i}", "is related to", f"thing {i}") for i in range(40)]
    nodes = [fact_node(*f, score=1.0 - i / 100) for i, f in enumerate(facts)]
    lm = DummyLM([answer(*reversed(facts))])
    result = DSPyFactFilter(lm=lm, top_n=4).postprocess_nodes(nodes, query_str="Which entity is related?")
    assert result == [nodes[39], nodes[38], nodes[37], nodes[36]]


def test_duplicate_answers_are_kept_once():
    nodes = river_nodes()
    lm = DummyLM(
        [answer(RIVER_FACTS[1], RIVER_FACTS[1], ("Imperial river", "is a river in", "United States"))]
    )
    assert DSPyFactFilter(lm=lm).postprocess_nodes(nodes, query_str=RIVER_QUERY) == [nodes[1]]


def test_lm_that_raises_falls_back_and_warns(caplog):
    nodes = river_nodes()
    fact_filter = DSPyFactFilter(lm=BrokenLM(), top_n=2)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        result = fact_filter.postprocess_nodes(nodes, QueryBundle(RIVER_QUERY))
    assert result == [nodes[0], nodes[1]]
    assert fact_filter.fallback_counts["fact_filter"] == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and "LM down" in warnings[0].getMessage()


async def test_lm_that_raises_falls_back_on_the_async_path(caplog):
    nodes = river_nodes()
    fact_filter = DSPyFactFilter(lm=BrokenLM(), top_n=2)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        result = await fact_filter.apostprocess_nodes(nodes, QueryBundle(RIVER_QUERY))
    assert result == [nodes[0], nodes[1]]
    assert fact_filter.fallback_counts["fact_filter"] == 1
    assert "LM down" in caplog.text


async def test_lm_that_times_out_falls_back():
    nodes = river_nodes()
    slow = SlowLM([answer(RIVER_FACTS[4]), answer(RIVER_FACTS[4])])
    fact_filter = DSPyFactFilter(lm=slow, timeout=0.1, top_n=1)
    assert fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY) == [nodes[0]]
    assert await fact_filter.apostprocess_nodes(nodes, query_str=RIVER_QUERY) == [nodes[0]]
    assert fact_filter.fallback_counts["fact_filter"] == 2


async def test_sync_and_async_agree():
    nodes = river_nodes()
    scripted = [answer(RIVER_FACTS[4], ("nowhere", "is in", "nothing"), RIVER_FACTS[0])] * 2
    fact_filter = DSPyFactFilter(lm=DummyLM(scripted))
    sync_result = fact_filter.postprocess_nodes(nodes, QueryBundle(RIVER_QUERY))
    async_result = await fact_filter.apostprocess_nodes(nodes, QueryBundle(RIVER_QUERY))
    assert sync_result == async_result == [nodes[4], nodes[0]]
    llm_free = DSPyFactFilter(lm=None)
    assert llm_free.postprocess_nodes(nodes, QueryBundle(RIVER_QUERY)) == await llm_free.apostprocess_nodes(
        nodes, QueryBundle(RIVER_QUERY)
    )


def test_lm_from_dspy_settings_is_used_when_the_filter_runs():
    nodes = river_nodes()
    fact_filter = DSPyFactFilter()  # built before any LM is configured
    with dspy.context(lm=DummyLM([answer(RIVER_FACTS[2])])):
        assert fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY) == [nodes[2]]
    assert fact_filter.fallback_counts.total == 0


def test_llamaindex_llm_is_accepted():
    from llama_index.core.llms import MockLLM

    nodes = river_nodes()
    fact_filter = DSPyFactFilter(llm=MockLLM(), top_n=2)
    result = fact_filter.postprocess_nodes(nodes, query_str=RIVER_QUERY)
    # MockLLM echoes the prompt, which is no Fact: the filter falls back, and the query still answers.
    assert result == nodes[:2]
    assert fact_filter.fallback_counts.total == 1


# --- the LLM-free rule ------------------------------------------------------------------------------------


def test_llm_free_rule_keeps_only_what_the_query_mentions():
    # seeds/003, example 2: only the fact about "The Ancestor" is mentioned; the birthdays of other directors
    # share no entity or content word with the query, even though "born on" is about birthdays.
    facts = [
        ("jean jacques annaud", "born on", "1 october 1943"),
        ("tsui hark", "born on", "15 february 1950"),
        ("pablo trapero", "born on", "4 october 1971"),
        ("the ancestor", "directed by", "guido brignone"),
        ("benh zeitlin", "born on", "october 14  1982"),
    ]
    nodes = [fact_node(*f, score=s) for f, s in zip(facts, [0.7, 0.69, 0.68, 0.6, 0.5], strict=True)]
    result = DSPyFactFilter().postprocess_nodes(
        nodes, QueryBundle("When is the director of film The Ancestor's birthday?")
    )
    assert result == [nodes[3]]


def test_llm_free_rule_ranks_named_entities_before_shared_words():
    # seeds/003, example 3, plus one fact that only shares the word "country" with the query.
    facts = [
        ("teafuaniua", "is on the", "east"),
        ("motuloa", "lies between", "teafuaniua"),
        ("tuvalu", "is a", "country"),
        ("teafuone", "is", "islet"),
        ("teafuone", "located in", "nukufetau"),
    ]
    nodes = [fact_node(*f, score=s) for f, s in zip(facts, [0.9, 0.8, 0.75, 0.5, 0.6], strict=True)]
    query = "In what geographic region is the country where Teafuone is located?"
    result = DSPyFactFilter(top_n=4).postprocess_nodes(nodes, query_str=query)
    # Teafuone is a named entity (strength 2, by score 0.6 then 0.5); "country" is a shared word (strength 1).
    assert result == [nodes[4], nodes[3], nodes[2]]
    assert DSPyFactFilter(top_n=2).postprocess_nodes(nodes, query_str=query) == [nodes[4], nodes[3]]


def test_llm_free_rule_matches_entity_containment():
    nodes = [
        fact_node("imperial river florida", "flows into", "estero bay", score=0.2),
        fact_node("river", "is a", "stream", score=0.9),
        fact_node("dolj county", "is in", "romania", score=0.1),
    ]
    result = select_by_mentions(RIVER_QUERY, nodes, top_n=4)
    # "imperial river" is inside the first subject, "dolj" inside the third: both strength 2. "river" alone is
    # a shared word only (strength 1), so it comes last despite its score.
    assert result == [nodes[0], nodes[2], nodes[1]]


def test_llm_free_rule_returns_nothing_when_nothing_is_mentioned():
    nodes = [fact_node("tsui hark", "born on", "15 february 1950", score=0.9)]
    assert DSPyFactFilter().postprocess_nodes(nodes, query_str="Who wrote Hamlet?") == []


def test_top_score_strategy_without_an_lm():
    nodes = [fact_node(f"e{i}", "p", f"o{i}", score=s) for i, s in enumerate([0.1, None, 0.9, 0.5])]
    fact_filter = DSPyFactFilter(llm_free_strategy="top_score", top_n=3)
    assert fact_filter.llm_free_strategy is FactSelection.TOP_SCORE
    assert fact_filter.postprocess_nodes(nodes, query_str="anything") == [nodes[2], nodes[3], nodes[0]]


# --- the postprocessor contract ---------------------------------------------------------------------------


def test_is_a_llamaindex_node_postprocessor():
    fact_filter = DSPyFactFilter(top_n=3, timeout=5)
    assert isinstance(fact_filter, BaseNodePostprocessor)
    assert DSPyFactFilter.class_name() == "DSPyFactFilter"
    config = fact_filter.to_dict()
    assert config["top_n"] == 3 and config["timeout"] == 5 and config["class_name"] == "DSPyFactFilter"
    assert "_lm" not in config and "_module" not in config
    assert fact_filter.postprocess_nodes([], query_str="Who?") == []


def test_bad_input_raises():
    nodes = river_nodes()
    with pytest.raises(ValueError, match="needs the query"):
        DSPyFactFilter().postprocess_nodes(nodes)
    with pytest.raises(ValueError, match="non-empty string"):
        DSPyFactFilter().postprocess_nodes(nodes, query_str="   ")
    plain = NodeWithScore(node=TextNode(text="a passage, not a fact"), score=0.3)
    # A node without a triple is a passage: one that states no fact is kept as it is (or dropped, if asked).
    assert DSPyFactFilter().postprocess_nodes([plain], query_str=RIVER_QUERY) == [plain]
    assert DSPyFactFilter(supporting_only=True).postprocess_nodes([plain], query_str=RIVER_QUERY) == []
    with pytest.raises(ValueError, match="top_n"):
        DSPyFactFilter(top_n=0)
    with pytest.raises(ValueError, match="either lm="):
        DSPyFactFilter(lm=DummyLM([]), llm=object())


def test_a_saved_filter_program_reloads_and_asks_the_same(tmp_path):
    from tests.fact_filter_lm import recognising_lm

    facts = [fact_node("imperial river", "is located in", "florida", 0.8),
             fact_node("tsui hark", "born on", "15 february 1950", 0.4),
             fact_node("florida", "is a state of", "united states", 0.3)]
    compiled = DSPyFactFilter()
    compiled.program.filter.demos = [dspy.Example(question="Where is Laie?", fact_before_filter="{}",
                                                  fact_after_filter={"fact": [["laie", "is in", "hawaii"]]})]
    path = compiled.save_program(tmp_path / "filter.json")

    def ask(program):
        prompts = []
        kept = DSPyFactFilter(lm=recognising_lm(prompts), program=program).postprocess_nodes(
            facts, query_str="Where is the Imperial River?")
        return [n.node.node_id for n in kept], prompts

    reloaded = ask(path)
    assert reloaded == ask(compiled.program) and "Where is Laie?" in reloaded[1][0]
    assert "Where is Laie?" not in ask(None)[1][0]
    with pytest.raises(ValueError, match="ending in .json"):
        compiled.save_program(tmp_path / "filter.txt")
