"""The first page of a ranking: the passages about what the question names, then where they lead."""

from __future__ import annotations

import pytest

from llama_index_mhop.rules.ranking import FIRST_PAGE_SIZE, PassageView, first_page


def view(title: str, text: str) -> PassageView:
    return PassageView(id=title, text=text, title=title)


EXIES = view("The Exies", "The Exies are an American rock band formed in 1997 in Los Angeles.")
DIABLO = view("Circus Diablo", "Circus Diablo is an American rock band formed in 2004 by Billy Morrison.")
MORRISON = view("Billy Morrison", "Billy Morrison is an English musician and a member of Circus Diablo.")
SATIN = view("Satin Circus", "Satin Circus was a Canadian pop band of the 1990s.")
SPICE = view("Spice Girls", "The Spice Girls are an English pop group formed in 1994.")

PESERK = view("Peserk Works", "Peserk Works is an ironworks in Varanbury. It was founded by Rosa Chandvei in 1901.")
ROSA = view("Rosa Chandvei", "Rosa Chandvei was an engineer born in 1870 in the town of Varanbury.")
OTHER_WORKS = view("Wundserk Foundry", "Wundserk Foundry is a foundry in Bogrobury, founded in 1850.")
WENDEL = view("Wendel Braltro", "Wendel Braltro was a botanist from Bogrobury, born in 1919.")


def titles(passages: list[PassageView], order: list[int]) -> list[str]:
    return [passages[i].title for i in order]


def test_the_passages_about_what_a_comparison_names_lead():
    ranking = [DIABLO, MORRISON, EXIES, SATIN, SPICE]
    page = first_page("Which band was formed first, The Exies or Circus Diablo?", ranking)
    assert titles(ranking, page.order) == ["Circus Diablo", "The Exies", "Billy Morrison", "Satin Circus",
                                           "Spice Girls"]
    assert page.lead == [0, 2]


def test_the_named_passage_is_followed_by_the_passage_its_bridge_leads_to():
    ranking = [OTHER_WORKS, WENDEL, PESERK, SPICE, ROSA]
    page = first_page("In which town was the person who founded Peserk Works born?", ranking)
    assert titles(ranking, page.order)[:2] == ["Peserk Works", "Rosa Chandvei"]
    assert titles(ranking, page.order)[2:] == ["Wundserk Foundry", "Wendel Braltro", "Spice Girls"]
    assert (page.lead, page.hops) == ([2], [4])


def test_without_a_named_passage_the_first_leads_and_its_bridge_follows():
    ranking = [PESERK, SPICE, ROSA]
    page = first_page("In which town was the person who founded the company born?", ranking)
    assert titles(ranking, page.order) == ["Peserk Works", "Rosa Chandvei", "Spice Girls"]
    assert page.lead == []


def test_nothing_moves_across_the_edge_of_the_page():
    ranking = [SATIN, SPICE, WENDEL, OTHER_WORKS, MORRISON, EXIES, DIABLO]
    page = first_page("Which band was formed first, The Exies or Circus Diablo?", ranking)
    assert page.order == list(range(len(ranking)))  # the named passages are past the first five
    small = first_page("Which band was formed first, The Exies or Circus Diablo?", ranking, size=7)
    assert titles(ranking, small.order)[:2] == ["The Exies", "Circus Diablo"]


@pytest.mark.parametrize("size", [0, 1, 2, 3, FIRST_PAGE_SIZE, 50])
def test_the_order_is_a_permutation_that_keeps_every_place_past_the_page(size):
    ranking = [OTHER_WORKS, WENDEL, PESERK, SPICE, ROSA, DIABLO, EXIES]
    order = first_page("Which came first, Peserk Works or The Exies?", ranking, size=size).order
    assert sorted(order) == list(range(len(ranking)))
    assert order[size:] == list(range(size, len(ranking)))[: max(0, len(ranking) - size)]
    assert sorted(order[:size]) == list(range(min(size, len(ranking))))


def test_an_empty_ranking_and_a_bad_size():
    assert first_page("Who founded Peserk Works?", []).order == []
    with pytest.raises(ValueError, match="size"):
        first_page("Who founded Peserk Works?", [PESERK], size=-1)
