"""OpenIE for the HippoRAG 2 graph: the LLM-free extractor on encyclopedic text, and the DSPy path with DummyLM."""

from __future__ import annotations

import asyncio
import time

import dspy
import pytest
from dspy.utils import DummyLM

from llama_index_mhop.graph.extraction import (
    EXTRACTION_STEP,
    Extraction,
    OpenIEExtractor,
    OpenIEModule,
    entity_key,
    extract_llm_free,
    parse_extraction,
    title_entities,
)

LOVER = (
    "Lover Come Back is a 1961 Eastmancolor romantic comedy released by Universal Pictures and directed by "
    "Delbert Mann. The film stars Doris Day and Rock Hudson in their second film together."
)
MANN = (
    "Delbert Martin Mann Jr. (January 30, 1920 – November 11, 2007) was an American television and film director. "
    'He won the Academy Award for Best Director for "Marty" in 1955.'
)
LAIE = (
    "Laie is a census-designated place located in the Koolauloa District on the island of Oahu in Honolulu County, "
    "Hawaii. However, the town grew after 1865. Brigham Young University is located in Laie."
)


def test_title_entities_strip_disambiguation_and_keep_comma_head():
    assert title_entities("Lover Come Back (1961 film)") == ["Lover Come Back"]
    assert title_entities("Laie, Hawaii") == ["Laie, Hawaii", "Laie"]
    assert title_entities("Delbert Mann") == ["Delbert Mann"]
    assert title_entities("") == []


def test_entity_key_normalises_mentions_to_title_keys():
    assert entity_key("Delbert Mann") == "delbert mann"
    assert entity_key("Delbert Mann's") == "delbert mann"
    assert entity_key("The Hukilau Song") == entity_key("Hukilau Song") == "hukilau song"
    assert entity_key("Alû") == "alu"
    assert entity_key("Leland, North Carolina") == "leland north carolina"


def test_film_passage_title_is_subject_of_first_sentence():
    result = extract_llm_free(LOVER, "Lover Come Back (1961 film)")
    assert result.entities == (
        "Lover Come Back", "1961", "Eastmancolor", "Universal Pictures", "Delbert Mann", "Doris Day", "Rock Hudson",
    )
    assert result.triples == (
        ("Lover Come Back", "is a", "1961"),
        ("Lover Come Back", "is a", "Eastmancolor"),
        ("Lover Come Back", "released by", "Universal Pictures"),
        ("Lover Come Back", "directed by", "Delbert Mann"),
        ("Lover Come Back", "stars", "Doris Day"),
        ("Lover Come Back", "stars", "Rock Hudson"),
    )


def test_biography_with_dates_and_quoted_title():
    result = extract_llm_free(MANN, "Delbert Mann")
    assert result.entities == (
        "Delbert Mann", "Delbert Martin Mann Jr", "January 30, 1920", "November 11, 2007", "American",
        "Academy Award for Best Director", "Marty", "1955",
    )
    # The sentence split at "Jr. (" leaves a fragment opening with a date: its subject is still the title.
    assert result.triples == (
        ("Delbert Mann", "was an", "American"),
        ("Delbert Mann", "won the", "Academy Award for Best Director"),
        ("Delbert Mann", "for", "Marty"),
        ("Delbert Mann", "in", "1955"),
    )


def test_place_passage_alias_and_sentence_opening_with_another_entity():
    result = extract_llm_free(LAIE, "Laie, Hawaii")
    # "However" opens a sentence and is never capitalised inside one: not an entity.
    assert result.entities == (
        "Laie, Hawaii", "Laie", "Koolauloa District", "Oahu", "Honolulu County", "Hawaii", "1865",
        "Brigham Young University",
    )
    assert result.triples == (
        ("Laie, Hawaii", "located in the", "Koolauloa District"),
        ("Laie, Hawaii", "on the island of", "Oahu"),
        ("Laie, Hawaii", "in", "Honolulu County"),
        ("Laie, Hawaii", "in", "Hawaii"),
        ("Laie, Hawaii", "the town grew after", "1865"),
        ("Brigham Young University", "located in", "Laie"),
    )


def test_full_dates_are_one_entity():
    result = extract_llm_free(
        "Jean-Jacques Annaud (born 1 October 1943) is a French film director.", "Jean-Jacques Annaud"
    )
    assert result.entities == ("Jean-Jacques Annaud", "1 October 1943", "French")
    assert result.triples == (
        ("Jean-Jacques Annaud", "born", "1 October 1943"),
        ("Jean-Jacques Annaud", "is a", "French"),
    )


def test_max_triples_keeps_named_objects_before_dates():
    text = "Ann Lee (born 1950) met Bob Ray in 1970, Carl Fox in 1980 and Dan Oak."
    everything = extract_llm_free(text, "Ann Lee", max_triples=None)
    assert [t[2] for t in everything.triples] == ["1950", "Bob Ray", "1970", "Carl Fox", "1980", "Dan Oak"]
    capped = extract_llm_free(text, "Ann Lee", max_triples=3)
    assert [t[2] for t in capped.triples] == ["Bob Ray", "Carl Fox", "Dan Oak"]


def test_untitled_passage_and_empty_text():
    result = extract_llm_free("Stephen King wrote Carrie in 1974.", None)
    assert result.triples == (("Stephen King", "wrote", "Carrie"), ("Stephen King", "in", "1974"))
    assert extract_llm_free("", "Some Title") == Extraction(entities=("Some Title",), triples=())


def test_extraction_round_trips_as_dict():
    result = extract_llm_free(LOVER, "Lover Come Back (1961 film)")
    assert Extraction.from_dict(result.to_dict()) == result


# ---------------------------------------------------------------------- the DSPy path

MARTY = "Marty is a 1955 drama film directed by Delbert Mann."
GOOD = {
    "named_entities": '["Marty", "Delbert Mann"]',
    "triples": '[["Marty", "directed by", "Delbert Mann"], ["Marty", "released in", "1955"]]',
}


class RaisingLM(DummyLM):
    """An LM whose every call raises; counts the calls."""

    def __init__(self) -> None:
        super().__init__([])
        self.calls = 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        raise RuntimeError("service unavailable")

    async def aforward(self, *args, **kwargs):
        self.calls += 1
        raise RuntimeError("service unavailable")


def test_lm_answer_is_used_and_title_entities_added():
    extractor = OpenIEExtractor(lm=DummyLM([GOOD]), backoff_seconds=0)
    result = extractor.extract(MARTY, "Marty (film)")
    assert result.from_lm
    assert result.entities == ("Marty", "Delbert Mann")
    assert result.triples == (("Marty", "directed by", "Delbert Mann"), ("Marty", "released in", "1955"))
    assert extractor.fallback_counts.total == 0


def test_title_entity_added_when_lm_leaves_it_out():
    answer = {"named_entities": '["Delbert Mann"]', "triples": "[]"}
    result = OpenIEExtractor(lm=DummyLM([answer]), backoff_seconds=0).extract(MARTY, "Marty (film)")
    assert result.entities == ("Marty", "Delbert Mann")


def test_malformed_answers_are_retried_then_fall_back(monkeypatch):
    waits = []
    monkeypatch.setattr(time, "sleep", waits.append)
    bad = [
        {"named_entities": "not a list", "triples": "[]"},
        {"named_entities": '["Marty"]', "triples": '[["Marty", "directed by"]]'},  # a triple of two
        {"named_entities": "[]", "triples": "[]"},  # nothing extracted
    ]
    extractor = OpenIEExtractor(lm=DummyLM(bad), backoff_seconds=0.5)
    result = extractor.extract(MARTY, "Marty (film)")
    assert result == extract_llm_free(MARTY, "Marty (film)")
    assert not result.from_lm
    assert extractor.fallback_counts[EXTRACTION_STEP] == 1
    assert waits == [0.5, 1.0]  # exponential backoff between the three attempts


def test_malformed_then_good_answer_recovers(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda _: None)
    lm = DummyLM([{"named_entities": "oops", "triples": "oops"}, GOOD])
    extractor = OpenIEExtractor(lm=lm)
    assert extractor.extract(MARTY, "Marty (film)").from_lm
    assert extractor.fallback_counts.total == 0


def test_raising_lm_is_called_three_times_then_falls_back(monkeypatch):
    monkeypatch.setattr(time, "sleep", lambda _: None)
    lm = RaisingLM()
    extractor = OpenIEExtractor(lm=lm)
    result = extractor.extract(MARTY, "Marty (film)")
    assert lm.calls == 3
    assert result == extract_llm_free(MARTY, "Marty (film)")
    assert extractor.fallback_counts[EXTRACTION_STEP] == 1


def test_async_path_retries_then_falls_back(monkeypatch):
    async def no_wait(_):
        return None

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    lm = RaisingLM()
    extractor = OpenIEExtractor(lm=lm)
    result = asyncio.run(extractor.aextract(MARTY, "Marty (film)"))
    assert lm.calls == 3
    assert result == extract_llm_free(MARTY, "Marty (film)")


def test_async_path_uses_lm_answer():
    extractor = OpenIEExtractor(lm=DummyLM([GOOD]), backoff_seconds=0)
    result = asyncio.run(extractor.aextract(MARTY, "Marty (film)"))
    assert result.from_lm and ("Marty", "directed by", "Delbert Mann") in result.triples


def test_no_lm_means_llm_free():
    with dspy.context(lm=None):
        extractor = OpenIEExtractor()
    assert not extractor.uses_lm
    assert extractor.extract(MARTY, "Marty (film)") == extract_llm_free(MARTY, "Marty (film)")
    assert extractor.fallback_counts.total == 0


def test_parse_drops_triples_with_empty_slots_and_rejects_bad_shapes():
    ok = dspy.Prediction(named_entities=["A"], triples=[["A", "knows", "B"], ["A", "", "C"], [" ", "is", "D"]])
    assert parse_extraction(ok).triples == (("A", "knows", "B"),)
    with pytest.raises(ValueError):
        parse_extraction(dspy.Prediction(named_entities="A", triples=[]))
    with pytest.raises(ValueError):
        parse_extraction(dspy.Prediction(named_entities=["A"], triples=[["A", 1, "B"]]))


def test_names_the_passage_does_not_contain_are_dropped():
    answer = dspy.Prediction(
        named_entities=["Marty", "Delbert Mann", "Ernest Borgnine", "Mann"],
        triples=[["Marty", "directed by", "Delbert Mann"], ["Marty", "stars", "Ernest Borgnine"], ["Del", "is", "Marty"]],
    )
    source = f"Marty (film)\n{MARTY}"
    result = parse_extraction(answer, source)
    assert result.entities == ("Marty", "Delbert Mann", "Mann")  # whole words only: "Del" is not "Delbert"
    assert result.triples == (("Marty", "directed by", "Delbert Mann"),)
    invented = dspy.Prediction(named_entities=["Subject 0"], triples=[["Subject 0", "relates to", "Object 0"]])
    with pytest.raises(ValueError, match="no entity and no triple"):
        parse_extraction(invented, source)
    assert parse_extraction(invented).triples == (("Subject 0", "relates to", "Object 0"),)  # no source: no check


def test_module_refuses_zero_attempts():
    with pytest.raises(ValueError, match="max_attempts"):
        OpenIEModule(max_attempts=0)


def test_a_saved_extractor_program_reloads(tmp_path):
    compiled = OpenIEExtractor()
    compiled.program.extract.demos = [dspy.Example(title="Laie", passage="Laie is in Hawaii.",
                                                   named_entities=["Laie", "Hawaii"],
                                                   triples=[["Laie", "is in", "Hawaii"]])]
    path = compiled.save_program(tmp_path / "openie.json")
    assert OpenIEExtractor(program=path).program.dump_state() == compiled.program.dump_state()
    assert OpenIEExtractor(program=compiled.program).program.dump_state() == compiled.program.dump_state()
    with pytest.raises(TypeError, match="OpenIEModule"):
        OpenIEExtractor(program=dspy.Module())
