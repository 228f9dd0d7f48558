"""Bridge links: the entity a passage leads to for a question, and the passage about it."""

from __future__ import annotations

from llama_index_mhop.rules.ranking import PassageView, bridge_targets, link_passages, relation_order
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
