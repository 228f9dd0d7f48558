"""The confidence loop's LLM-free strategies: the confidence formula, bridge gaps and targeted queries."""

from __future__ import annotations

import pytest

from llama_index_mhop.rules.confidence import (
    Gap,
    GapKind,
    analyze_query,
    assess_confidence,
    targeted_queries,
)
from llama_index_mhop.rules.ranking import PassageView
from tests.leland_corpus import PASSAGES, QUERY


def test_assess_confidence_formula_and_bridge_gap():
    views = [PassageView(f"n{i:02d}", text, title) for i, (title, text) in enumerate(PASSAGES)]
    result = assess_confidence(QUERY, views)
    # Entity "Leland" has its own passage (coverage 1). Relation stems {direct, film, shot} found in the
    # Leland passage: film, shot -> 2/3. The bridges (Maximum Overdrive, then Stephen King) have their own
    # passages among the four, so none is open and none costs points.
    assert result.entity_coverage == 1.0 and result.term_coverage == pytest.approx(2 / 3)
    assert result.confidence == round(100 * (0.5 * 1.0 + 0.5 * 2 / 3))
    bridge = [g for g in result.gaps if g.kind == GapKind.BRIDGE][0]
    assert bridge.entities[0] == "Maximum Overdrive" and bridge.source == "Leland, North Carolina"
    # Its round-2 query is the entity itself: a search for the whole sentence would find the Leland passage.
    assert bridge.query == "Maximum Overdrive"
    # With the Leland passage alone the Maximum Overdrive bridge is open and costs bridge_penalty points.
    open_result = assess_confidence(QUERY, views[:1], bridge_penalty=10)
    assert open_result.confidence == result.confidence - 10


def test_targeted_queries_use_gap_queries_then_text_gaps():
    gaps = [
        Gap(GapKind.BRIDGE, "Maximum Overdrive", "The film Maximum Overdrive was shot in Leland in 1986."),
        "the director",
    ]
    assert targeted_queries(QUERY, gaps, issued_queries=[QUERY]) == [
        "The film Maximum Overdrive was shot in Leland in 1986.",
        "the director directed film shot",
    ]
    assert targeted_queries(QUERY, gaps, max_queries=1) == [
        "The film Maximum Overdrive was shot in Leland in 1986."
    ]


def test_analyze_query_writes_one_link_query_per_entity():
    analysis = analyze_query(QUERY, max_queries=3)
    assert analysis.entities == ["Leland"]
    assert analysis.queries == ["Leland directed film shot"]
    assert analysis.entity_chains == ["Leland -> directed film shot"]
    with pytest.raises(ValueError, match="max_queries"):
        analyze_query(QUERY, max_queries=0)


def test_a_passage_without_title_is_about_its_first_entity():
    view = PassageView("x", "Maximum Overdrive is a 1986 horror film. It was shot in Leland.")
    assert view.subject == "Maximum Overdrive"
    assert view.is_about("Maximum Overdrive") and not view.is_about("Leland")
    assert PassageView("y", "text", "Giant (1956 film)").subject == "Giant"
