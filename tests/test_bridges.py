"""Bridge links: the entity a passage leads to for a question, and the passage about it."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.rules.ranking import (
    PassageView,
    _only_sentence_initial,
    bridge_targets,
    follow_chain,
    link_passages,
    relation_order,
)
from llama_index_mhop.rules.text import stems

FIRM = PassageView(
    "firm",
    "Peserk Works is an engineering firm headquartered in Bogrobury and founded by Rosa Chandvei in 1935. "
    "It employs about 1800 people.",
    "Peserk Works",
)
FOUNDER = PassageView("rosa", "Rosa Chandvei was a printer born in Varanbury.", "Rosa Chandvei")
FOUNDER_AGAIN = PassageView("rosa-2", "Rosa Chandvei later moved to the coast.", "Rosa Chandvei")
TOWN = PassageView("town", "Bogrobury is a market town on the Zovast River.", "Bogrobury")
BIRTHPLACE = PassageView("varanbury", "Varanbury is a port town on the Grelnel River.", "Varanbury")
QUESTION = "In which town was the person who founded Peserk Works born?"


def test_the_entity_a_question_word_governs_comes_first():
    sentence = FIRM.text.split(". ")[0]
    assert relation_order(sentence, ["Bogrobury", "Rosa Chandvei"], stems("who founded it")) == [
        "Rosa Chandvei", "Bogrobury"]
    # "headquartered in Bogrobury": asked about the headquarters, the town comes first.
    assert relation_order(sentence, ["Bogrobury", "Rosa Chandvei"], stems("where is it headquartered")) == [
        "Bogrobury", "Rosa Chandvei"]
    # No question word before either: sentence order.
    assert relation_order(sentence, ["Rosa Chandvei", "Bogrobury"], stems("what river")) == [
        "Bogrobury", "Rosa Chandvei"]


def test_bridge_targets_skip_the_question_and_the_source_subject():
    assert bridge_targets(QUESTION, FIRM) == ["Rosa Chandvei", "Bogrobury"]
    assert bridge_targets(QUESTION, FIRM, skip=["Rosa Chandvei"]) == ["Bogrobury"]
    # No sentence shares a word with the question: the first sentence names the links, in sentence order.
    assert bridge_targets("Which river is longest?", FIRM) == ["Bogrobury", "Rosa Chandvei"]
    # A sentence sharing a word with the question is preferred to the first sentence.
    town = PassageView("t", "Bogrobury is a market town on the Zovast River. Its mayor is Edda Voss.", "Bogrobury")
    assert bridge_targets("Who is the mayor of Bogrobury?", town) == ["Edda Voss"]


def test_a_view_answers_each_question_with_its_own_skipped_names():
    """A view works out its sentences' names once; what a question skips is applied per question."""
    firm = PassageView(FIRM.id, FIRM.text, FIRM.title)
    assert bridge_targets(QUESTION, firm, skip=["Rosa Chandvei"]) == ["Bogrobury"]
    assert bridge_targets(QUESTION, firm) == ["Rosa Chandvei", "Bogrobury"]
    assert bridge_targets(QUESTION, firm, skip=["Bogrobury"]) == ["Rosa Chandvei"]


def test_a_capitalised_sentence_opener_is_no_bridge_but_a_word_also_met_inside_a_sentence_is():
    moved = PassageView("m", "Peserk Works was founded in 1935. Lately it moved to Bogrobury.", "Peserk Works")
    assert bridge_targets("Where did Peserk Works move to lately?", moved) == ["Bogrobury"]
    twice = PassageView("t", "Peserk Works was founded in 1935. Marlow hosts its works. It moved to Marlow.",
                        "Peserk Works")
    assert bridge_targets("Where did Peserk Works move to?", twice) == ["Marlow"]


@settings(max_examples=300, deadline=None)
@given(word=st.text(alphabet="Ab._é ", min_size=1, max_size=3),
       text=st.text(alphabet='Ab .!?"“(_é1\n', max_size=30))
def test_a_word_counts_as_sentence_initial_as_the_regular_expression_defines_it(word, text):
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    expected = all(not text[: m.start()].rstrip() or text[: m.start()].rstrip()[-1] in '.!?"“('
                   for m in pattern.finditer(text))
    assert _only_sentence_initial(word, text) == expected


def test_link_passages_follows_the_first_pool_passage_about_the_bridge():
    pool = [TOWN, FOUNDER_AGAIN, FOUNDER, FIRM]
    # Of the two passages about Rosa Chandvei the pool ranks "rosa-2" first; the town is not the bridge.
    assert link_passages(QUESTION, [FIRM], pool) == {"firm": ["rosa-2"]}
    # Without a passage about the founder the next bridge entity is followed.
    assert link_passages(QUESTION, [FIRM], [TOWN, FIRM]) == {"firm": ["town"]}
    assert link_passages(QUESTION, [FIRM], [FIRM]) == {}


def test_link_passages_chains_hops():
    question = "In which town was the person who founded Peserk Works born, and what river is the town on?"
    chain = link_passages(question, [FIRM], [TOWN, FOUNDER, BIRTHPLACE, FIRM])
    # firm -> founder ("founded by"), founder -> Varanbury ("born in"); the town passage is never a hop.
    assert chain == {"firm": ["rosa"], "rosa": ["varanbury"]}


def _about(*passages: PassageView):
    return lambda name: next((p for p in passages if p.is_about(name)), None)


def test_follow_chain_scores_each_hop_by_the_relation_words_its_sentence_states():
    question = "In which province was the founder of Peserk Works born?"
    steps = follow_chain(question, [FIRM], _about(FIRM, FOUNDER, TOWN, BIRTHPLACE), hops=3)
    # "founder" meets "founded by" (3 relation stems open: province, found, born); "born in" closes the next.
    assert [(s.hop, s.title, s.entity, s.matched, s.target) for s in steps] == [
        (1, "Peserk Works", "Rosa Chandvei", ("found",), "rosa"),
        (2, "Rosa Chandvei", "Varanbury", ("born",), "varanbury"),
        (3, "Varanbury", "Grelnel River", (), ""),
    ]
    assert [s.weight for s in steps] == pytest.approx([2 / 4, 2 / 4 * 2 / 3, 2 / 4 * 2 / 3 * 1 / 2])
    assert steps[1].sentence == FOUNDER.text


def test_follow_chain_stops_where_no_passage_is_about_the_entity_and_never_revisits():
    question = "In which town was the person who founded Peserk Works born?"
    steps = follow_chain(question, [FIRM], _about(FIRM), hops=3)
    assert [(s.entity, s.target) for s in steps] == [("Rosa Chandvei", "")]
    # A passage that leads back to a source is not followed again.
    loop = PassageView("rosa-loop", "Rosa Chandvei founded Peserk Works.", "Rosa Chandvei")
    steps = follow_chain(question, [FIRM], _about(FIRM, loop), hops=3)
    assert [(s.hop, s.entity) for s in steps] == [(1, "Rosa Chandvei")]
    assert follow_chain(question, [FIRM], _about(FIRM, FOUNDER), hops=0) == []
    # Once the sentences have stated every relation word of the question the chain is complete.
    steps = follow_chain("Who founded Peserk Works?", [FIRM], _about(FIRM, FOUNDER, BIRTHPLACE), hops=3)
    assert [(s.entity, s.target, s.weight) for s in steps] == [("Rosa Chandvei", "rosa", 1.0)]
