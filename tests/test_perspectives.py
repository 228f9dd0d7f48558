from llama_index_mhop.rules.perspectives import (
    ContextPassage,
    bridge_entities,
    heuristic_perspectives,
    repair_perspectives,
)
from llama_index_mhop.rules.text import normalize


def _distinct(perspectives):
    return len({normalize(p) for p in perspectives}) == len(perspectives)


def test_heuristic_keeps_original_query_and_covers_entities():
    query = "Which magazine was started first, Arthur's Magazine or First for Women?"
    perspectives = heuristic_perspectives(query)
    assert 4 <= len(perspectives) <= 5 and _distinct(perspectives)
    assert perspectives[0] == query
    joined = " ".join(perspectives[1:])
    assert "Arthur's Magazine" in joined and "First for Women" in joined
    # comparison angle: the second side with the relation word
    assert "First for Women started" in perspectives


def test_temporal_angle_uses_years():
    query = "Who directed the film that was shot in or around Leland, North Carolina in 1986"
    perspectives = heuristic_perspectives(query)
    assert any("1986" in p and p != query for p in perspectives)


def test_bridge_entities_skip_query_entities_and_found_titles():
    query = "The Oberoi family is part of a hotel company that has a head office in what city?"
    context = [
        ContextPassage(
            "The Oberoi family",
            "The Oberoi family is an Indian family famous for its involvement in hotels, namely through "
            "The Oberoi Group. They were founded by Mohan Singh Oberoi.",
        ),
        ContextPassage("Delhi", "Delhi is the capital territory of India."),
    ]
    bridges = bridge_entities(query, context)
    assert bridges[0] == "Indian"
    assert "Oberoi Group" in bridges
    assert all(normalize(b) not in {"oberoi", "the oberoi family", "delhi"} for b in bridges)
    perspectives = heuristic_perspectives(query, context)
    assert any("Oberoi Group" in p for p in perspectives)


def test_repair_drops_bad_items_and_tops_up():
    query = "Are Imperial River and Amaradia both located in the same country?"
    repaired = repair_perspectives(["Imperial River location", "", 7, None, "imperial river LOCATION"], query)
    assert repaired[0] == "Imperial River location"
    assert 4 <= len(repaired) <= 5 and _distinct(repaired)
    assert all(isinstance(p, str) and p.strip() for p in repaired)


def test_repair_caps_at_five_and_splits_text():
    many = [f"query number {i}" for i in range(12)]
    assert repair_perspectives(many, "q about X") == many[:5]
    lines = repair_perspectives("1. alpha Beta\n2. gamma Delta\n- epsilon\n* zeta\n\n", "q")
    assert lines[:4] == ["alpha Beta", "gamma Delta", "epsilon", "zeta"]


def test_repair_raises_when_nothing_usable():
    import pytest

    for raw in ([], ["", "  "], [1, 2], {"a": 1}, 42):
        with pytest.raises(ValueError):
            repair_perspectives(raw, "Who founded Acme?")


def test_heuristic_on_real_hotpotqa_questions(hotpotqa_questions):
    for question in hotpotqa_questions[:10]:
        perspectives = heuristic_perspectives(question["question"])
        assert 4 <= len(perspectives) <= 5 and _distinct(perspectives), question["question"]
        context = [ContextPassage(t, "".join(s)) for t, s in question["context"][:3]]
        with_context = heuristic_perspectives(question["question"], context)
        assert 4 <= len(with_context) <= 5 and _distinct(with_context)
        assert with_context[0] == question["question"]


def test_bridge_on_real_bridge_question(hotpotqa_questions):
    # "Who directed the film that was shot in or around Leland, North Carolina in 1986" -> Maximum Overdrive
    # names its director, Stephen King, in its first sentence: the bridge to the second gold passage.
    question = next(q for q in hotpotqa_questions if "Leland, North Carolina" in q["question"])
    context = [ContextPassage(t, "".join(s)) for t, s in question["context"] if t == "Maximum Overdrive"]
    assert "Stephen King" in bridge_entities(question["question"], context)
