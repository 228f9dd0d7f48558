"""A seeded synthetic multi-hop corpus of any size, written in the raw HotpotQA format (for scaling runs). For one
seed and question count the corpus of N passages is a prefix of the corpus of M > N: only distractors grow."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_N_QUESTIONS", "DEFAULT_SEED", "QUESTION_KINDS", "SyntheticDataset", "SyntheticEntity", "World",
           "generate_dataset", "write_dataset"]

DEFAULT_SEED = 0
DEFAULT_N_QUESTIONS = 50
#: How many non-gold passages of the question chains go into a question's ``context`` (HotpotQA shows 8).
N_CONTEXT_DISTRACTORS = 8


#: How often each kind of background passage is drawn.
BACKGROUND_WEIGHTS = {"river": 0.05, "town": 0.2, "person": 0.35, "company": 0.15, "filler": 0.25}

_ONSETS = ("b br c ch d dr f g gr h k l m n p r s st t tr th v w z".split())
_VOWELS = ("a e i o u a e o ei ou".split())
_CODAS = ("", "", "", "", "n", "r", "l", "s", "m", "nd", "rk", "st")
_TOWN_SUFFIXES = ("", "", "ford", "wick", "by", "ton", "holm", "mouth", "field", "stead", "bury")
# Given names repeat across people (as real ones do); the first half are "she", the second half "he".
_GIVEN_NAMES = tuple(
    """Ada Alda Bela Brenna Calla Dagny Edda Elin Fenna Greta Hilde Ilse Jonna Kira Lene Linnea Mira Noor Oda
    Petra Rosa Runa Selma Tilde Una Anselm Arvo Bertil Corin Dorian Emric Galen Halvar Ivo Jarek Kaspar Lars
    Magnus Nils Osric Quill Sander Soren Tobin Viggo Wendel Yorick Zeno Henrik Matthis""".split())
_OCCUPATIONS = ("cartographer", "engineer", "painter", "botanist", "architect", "merchant", "composer",
                "surveyor", "printer", "chemist", "clockmaker", "shipwright", "historian", "physician")
# (industry, the noun in the company's name, what it is known for)
_INDUSTRIES = (("textile", "Mills", "woollen cloth"), ("engineering", "Works", "steam pumps"),
               ("brewing", "Brewery", "pale ale"), ("shipping", "Lines", "coastal freight"),
               ("publishing", "Press", "school atlases"), ("ironworking", "Foundry", "cast-iron stoves"),
               ("insurance", "Mutual", "marine policies"), ("glassmaking", "Glassworks", "window glass"),
               ("milling", "Flour Company", "rye flour"), ("rope-making", "Ropeworks", "hemp cordage"))
_TOWN_KINDS = ("market town", "village", "port town", "mill town", "cathedral town", "small town")
_TOWN_FEATURES = ("its covered market", "a medieval bridge", "an annual horse fair", "its sandstone church",
                  "a lace-making tradition", "a disused canal basin", "its botanical garden", "a large salt works")
_FILLER_CRAFTS = ("pottery", "weaving", "embroidery", "basketry", "woodcarving", "bookbinding")
_FILLER_SONGS = ("ballad", "hymn", "march", "waltz", "lullaby", "sea shanty")
# Words of the templates that a generated name must not be (a town called "Lake" would read as a lake).
_RESERVED_WORDS = frozenset(
    """lake river the sea land mark shire mills works brewery lines press foundry mutual glassworks flour
    company ropeworks festival town village port city founder born north south east west saint""".split())


@dataclass
class SyntheticEntity:
    """One passage of the corpus: its title, kind, sentences and the titles its first sentence links to."""

    title: str
    kind: str
    sentences: list[str]
    links: dict[str, str] = field(default_factory=dict)  # relation -> title of the linked entity (or a name)


def article(word: str) -> str:
    """``word`` with its indefinite article ("an engineer", "a town")."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


class World:
    """The entities made so far; every new passage names only entities that already exist. Provinces and seas are
    names only (no passage), drawn once per seed."""

    def __init__(self, seed: int) -> None:
        self.entities: dict[str, SyntheticEntity] = {}
        self.by_kind: dict[str, list[str]] = {"river": [], "town": [], "person": [], "company": [], "filler": []}
        # Given names and the templates' own words are never generated as names.
        self._words: set[str] = {w.lower() for w in _GIVEN_NAMES} | set(_RESERVED_WORDS)
        #: Titles a chain made so far: nothing else in the chain may link to them (no shortcut past a hop).
        self.reserved: set[str] = set()
        self.collecting = False
        places = random.Random(f"mhop-synthetic-places-{seed}")
        self.provinces = [self.word(places) + places.choice(("land", "ia", "mark", "shire")) for _ in range(40)]
        self.waters = [f"Lake {self.word(places)}" if i % 2 else f"the {self.word(places)} Sea" for i in range(16)]

    def word(self, rng: random.Random) -> str:
        """A new made-up name; each is used once, so no name is part of another."""
        for _ in range(1000):
            candidate = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                                for _ in range(2)).capitalize()
            if len(candidate) >= 4 and candidate.lower() not in self._words:
                self._words.add(candidate.lower())
                return candidate
        raise RuntimeError("ran out of generated names")  # the name space holds millions; not reached

    def pick(self, kind: str, rng: random.Random, make: Callable[[], str] | None = None) -> str | None:
        """A random existing entity of ``kind`` outside :attr:`reserved`; else ``make()`` (or None)."""
        pool = self.by_kind[kind]
        for _ in range(20 if pool else 0):
            title = rng.choice(pool)
            if title not in self.reserved:
                return title
        return make() if make is not None else None

    def add(self, entity: SyntheticEntity) -> str:
        self.entities[entity.title] = entity
        self.by_kind[entity.kind].append(entity.title)
        self._words.add(entity.title.lower())
        if self.collecting:
            self.reserved.add(entity.title)
        return entity.title

    def river(self, rng: random.Random) -> str:
        title = f"{self.word(rng)} River"
        province, water, length = rng.choice(self.provinces), rng.choice(self.waters), rng.randint(20, 400)
        first = rng.choice((f"The {title} is a river of {province} that flows {length} km into {water}.",
                            f"The {title} rises in the hills of {province} and runs {length} km to {water}."))
        rest = [f"Its valley was surveyed in {rng.randint(1700, 1900)}.",
                rng.choice(("It is navigable by barges in its lower course.", "Its waters are rich in trout.",
                            "Several water mills once stood on its banks."))]
        return self.add(SyntheticEntity(title, "river", [first, *rest], {"province": province, "mouth": water}))

    def town(self, rng: random.Random, river: str | None = None) -> str:
        title = self.word(rng) + rng.choice(_TOWN_SUFFIXES)
        river = river or self.pick("river", rng, lambda: self.river(rng))
        province = rng.choice(self.provinces)
        kind = rng.choice(_TOWN_KINDS)
        first = rng.choice((f"{title} is {article(kind)} on the {river} in {province}.",
                            f"{title} is {article(kind)} in {province}, built on the banks of the {river}.",
                            f"{title} is {article(kind)} of {province} that lies on the {river}."))
        rest = [f"It has a population of about {rng.randint(2, 90) * 1000} and is known for "
                f"{rng.choice(_TOWN_FEATURES)}."]
        if rng.random() < 0.3 and (twin := self.pick("town", rng)):
            rest.append(f"It has been twinned with {twin} since {rng.randint(1950, 2010)}.")
        return self.add(SyntheticEntity(title, "town", [first, *rest], {"river": river, "province": province}))

    def person(self, rng: random.Random, town: str | None = None, employer: str | None = None,
               with_employer: bool | None = None) -> str:
        given = rng.randrange(len(_GIVEN_NAMES))
        title = f"{_GIVEN_NAMES[given]} {self.word(rng)}"
        town = town or self.pick("town", rng, lambda: self.town(rng))
        if employer is None and (with_employer if with_employer is not None else rng.random() < 0.5):
            employer = self.pick("company", rng, lambda: self.company(rng))
        born = rng.randint(1780, 1930)
        job = rng.choice(_OCCUPATIONS)
        links = {"birthplace": town}
        if employer:
            links["employer"] = employer
            first = rng.choice((f"{title} ({born}–{born + rng.randint(40, 90)}) was {article(job)} born in {town} "
                                f"who worked for {employer}.",
                                f"{title} was {article(job)} from {town}, born in {born}, who spent most of a long "
                                f"career at {employer}."))
        else:
            first = rng.choice((f"{title} ({born}–{born + rng.randint(40, 90)}) was {article(job)} born in {town}.",
                                f"{title} was {article(job)} born in {born} in {town}."))
        pronoun = "She" if given < len(_GIVEN_NAMES) // 2 else "He"
        rest = [f"{pronoun} trained in {rng.choice(('the capital', 'a local workshop', 'a provincial academy'))} "
                f"and published {rng.randint(2, 30)} works."]
        if rng.random() < 0.25 and (friend := self.pick("person", rng)):
            rest.append(f"{pronoun} corresponded for years with {friend}.")
        return self.add(SyntheticEntity(title, "person", [first, *rest], links))

    def company(self, rng: random.Random, founder: str | None = None, headquarters: str | None = None) -> str:
        industry, noun, product = rng.choice(_INDUSTRIES)
        title = f"{self.word(rng)} {noun}"
        founder = founder or self.pick("person", rng, lambda: self.person(rng, with_employer=False))
        headquarters = headquarters or self.pick("town", rng, lambda: self.town(rng))
        year = rng.randint(1820, 1980)
        first = rng.choice((f"{title} is {article(industry)} company founded in {year} by {founder}, with its "
                            f"headquarters in {headquarters}.",
                            f"{title} is {article(industry)} firm headquartered in {headquarters} and founded by "
                            f"{founder} in {year}."))
        rest = [f"It employs about {rng.randint(1, 60) * 50} people and is best known for {product}."]
        if rng.random() < 0.3 and (branch := self.pick("town", rng)) and branch != headquarters:
            rest.append(f"In {year + rng.randint(5, 40)} it opened a branch in {branch}.")
        links = {"founder": founder, "headquarters": headquarters}
        return self.add(SyntheticEntity(title, "company", [first, *rest], links))

    def filler(self, rng: random.Random) -> str:
        roll = rng.random()
        if roll < 0.4 and self.by_kind["town"]:
            town = rng.choice(self.by_kind["town"])
            title = f"{self.word(rng)} Festival"
            first = (f"The {title} is an annual {rng.choice(('harvest', 'music', 'lantern', 'boat'))} festival "
                     f"held each {rng.choice(('spring', 'summer', 'autumn', 'winter'))} in {town}.")
            links = {"place": town}
        elif roll < 0.7 and self.by_kind["person"]:
            writer = rng.choice(self.by_kind["person"])
            kind = rng.choice(_FILLER_SONGS)
            name = self.word(rng)
            title = f"{name} ({kind})"
            first = f"\"{name}\" is {article(kind)} written by {writer} in {rng.randint(1800, 1950)}."
            links = {"writer": writer}
        else:
            craft = rng.choice(_FILLER_CRAFTS)
            title = f"{self.word(rng)} {craft}"
            first = f"{title} is a regional style of {craft} with geometric patterns in two colours."
            links = {}
        rest = [rng.choice(("It is described in several local histories.", "It remains popular with visitors.",
                            "Its origins are disputed among historians."))]
        return self.add(SyntheticEntity(title, "filler", [first, *rest], links))


@dataclass
class SyntheticDataset:
    """A generated corpus and its questions, as raw HotpotQA records."""

    questions: list[dict[str, Any]]
    corpus: dict[str, list[str]]
    seed: int
    n_chain_passages: int

    def write(self, folder: str | os.PathLike[str]) -> Path:
        """Write ``questions.json`` and ``corpus.json`` into ``folder`` (created); returns the folder."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        (out / "questions.json").write_text(json.dumps(self.questions, indent=1, ensure_ascii=False) + "\n",
                                            encoding="utf-8")
        (out / "corpus.json").write_text(json.dumps(self.corpus, ensure_ascii=False) + "\n", encoding="utf-8")
        return out


@dataclass(frozen=True)
class _Kind:
    hops: int
    templates: tuple[str, ...]
    build: Callable[[World, random.Random], tuple[list[str], str]]  # -> (chain of gold titles, answer)


def _town_on_river(world: World, rng: random.Random) -> tuple[str, str]:
    """A new river and a town on it."""
    river = world.river(rng)
    return world.town(rng, river=river), river


def _company_of_native(world: World, rng: random.Random, town: str | None = None) -> tuple[str, str, str]:
    """A new company, its founder and the founder's birthplace (``town``, else a new town)."""
    town = town or world.town(rng)
    founder = world.person(rng, town=town, with_employer=False)
    return world.company(rng, founder=founder), founder, town


def _founder_birthplace(world: World, rng: random.Random) -> tuple[list[str], str]:
    company, founder, town = _company_of_native(world, rng)
    return [company, founder], town


def _birthplace_river(world: World, rng: random.Random) -> tuple[list[str], str]:
    town, river = _town_on_river(world, rng)
    return [world.person(rng, town=town), town], river


def _headquarters_province(world: World, rng: random.Random) -> tuple[list[str], str]:
    town = world.town(rng)
    return [world.company(rng, headquarters=town), town], world.entities[town].links["province"]


def _employer_founder(world: World, rng: random.Random) -> tuple[list[str], str]:
    founder = world.person(rng, with_employer=False)
    company = world.company(rng, founder=founder)
    return [world.person(rng, employer=company), company], founder


def _founder_birthplace_river(world: World, rng: random.Random) -> tuple[list[str], str]:
    town, river = _town_on_river(world, rng)
    company, founder, _ = _company_of_native(world, rng, town)
    return [company, founder, town], river


def _founder_birthplace_province(world: World, rng: random.Random) -> tuple[list[str], str]:
    company, founder, town = _company_of_native(world, rng)
    return [company, founder, town], world.entities[town].links["province"]


def _employer_founder_birthplace(world: World, rng: random.Random) -> tuple[list[str], str]:
    company, founder, town = _company_of_native(world, rng)
    return [world.person(rng, employer=company), company, founder], town


def _employer_headquarters_river(world: World, rng: random.Random) -> tuple[list[str], str]:
    town, river = _town_on_river(world, rng)
    company = world.company(rng, headquarters=town)
    return [world.person(rng, employer=company), company, town], river


#: The question chains: name -> hops, question templates ({0} is the first entity) and chain builder.
QUESTION_KINDS: dict[str, _Kind] = {
    "founder_birthplace": _Kind(2, ("Where was the founder of {0} born?",
                                    "In which town was the person who founded {0} born?"), _founder_birthplace),
    "birthplace_river": _Kind(2, ("Which river flows through the birthplace of {0}?",
                                  "On which river lies the town where {0} was born?"), _birthplace_river),
    "headquarters_province": _Kind(2, ("In which province is the town where {0} has its headquarters?",),
                                   _headquarters_province),
    "employer_founder": _Kind(2, ("Who founded the company that {0} worked for?",
                                  "Who was the founder of the firm that employed {0}?"), _employer_founder),
    "founder_birthplace_river": _Kind(3, ("Which river flows through the birthplace of the founder of {0}?",
                                          "On which river lies the town where the founder of {0} was born?"),
                                      _founder_birthplace_river),
    "founder_birthplace_province": _Kind(3, ("In which province was the founder of {0} born?",),
                                         _founder_birthplace_province),
    "employer_founder_birthplace": _Kind(3, ("Where was the founder of the company that {0} worked for born?",),
                                         _employer_founder_birthplace),
    "employer_headquarters_river": _Kind(3, ("On which river is the headquarters town of the firm that "
                                             "employed {0}?",), _employer_headquarters_river),
}


def _check_chain(world: World, chain: Sequence[str], answer: str, question: str) -> None:
    """Each hop's passage names the next hop (the bridge) and the last names the answer; no bridge is asked."""
    for here, nxt in zip(chain, [*chain[1:], answer], strict=True):
        if nxt not in world.entities[here].sentences[0]:
            raise AssertionError(f"{here!r} does not name {nxt!r}")  # a generator bug, not bad input
    for bridge in chain[1:]:
        if re.search(rf"\b{re.escape(bridge)}\b", question, re.IGNORECASE):
            raise AssertionError(f"bridge {bridge!r} appears in the question {question!r}")


def generate_dataset(n_passages: int, n_questions: int = DEFAULT_N_QUESTIONS, seed: int = DEFAULT_SEED,
                     three_hop_share: float = 0.5) -> SyntheticDataset:
    """A corpus of exactly ``n_passages`` passages and ``n_questions`` questions, deterministic in its arguments.
    ValueError for a bad argument or too few passages for the chains."""
    for name, value in (("n_questions", n_questions), ("n_passages", n_passages)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if not 0.0 <= three_hop_share <= 1.0:
        raise ValueError(f"three_hop_share must be in [0, 1], got {three_hop_share!r}")
    chain_rng = random.Random(f"mhop-synthetic-chains-{seed}")
    world = World(seed)
    n_three = round(n_questions * three_hop_share)
    kinds = {hops: [name for name, kind in QUESTION_KINDS.items() if kind.hops == hops] for hops in (2, 3)}
    plan = [3] * n_three + [2] * (n_questions - n_three)
    chain_rng.shuffle(plan)
    turns = {2: 0, 3: 0}
    questions: list[dict[str, Any]] = []
    for number, hops in enumerate(plan):
        name = kinds[hops][turns[hops] % len(kinds[hops])]
        turns[hops] += 1
        kind = QUESTION_KINDS[name]
        world.reserved, world.collecting = set(), True
        chain, answer = kind.build(world, chain_rng)
        world.collecting = False
        text = chain_rng.choice(kind.templates).format(chain[0])
        _check_chain(world, chain, answer, text)
        questions.append({"_id": f"syn{seed}-{number:04d}", "question": text, "answer": answer, "type": "bridge",
                          "level": "hard" if hops == 3 else "medium",
                          "supporting_facts": [[title, 0] for title in chain], "context": [], "hops": hops,
                          "kind": name, "chain": list(chain), "bridge_entities": list(chain[1:])})
    n_chain = len(world.entities)
    if n_passages < n_chain:
        raise ValueError(f"n_passages={n_passages} is smaller than the {n_chain} passages that {n_questions} "
                         "question chains need; ask for more passages or fewer questions")
    # The context of a question: its gold passages and distractors from the chains (the same at every size).
    chain_titles = list(world.entities)
    for record in questions:
        gold = record["chain"]
        others = [t for t in chain_titles if t not in gold]
        shown = gold + chain_rng.sample(others, min(N_CONTEXT_DISTRACTORS, len(others)))
        chain_rng.shuffle(shown)
        record["context"] = [[t, list(world.entities[t].sentences)] for t in shown]
    world.reserved = set()
    background_rng = random.Random(f"mhop-synthetic-background-{seed}")
    kinds_order, weights = zip(*BACKGROUND_WEIGHTS.items(), strict=True)
    while len(world.entities) < n_passages:
        kind = background_rng.choices(kinds_order, weights)[0]
        getattr(world, kind)(background_rng)
    # A new entity may create the one it links to first (only when none exists, never past the chains): trim.
    corpus = {title: list(entity.sentences) for title, entity in list(world.entities.items())[:n_passages]}
    return SyntheticDataset(questions=questions, corpus=corpus, seed=seed, n_chain_passages=n_chain)


def write_dataset(folder: str | os.PathLike[str], n_passages: int, n_questions: int = DEFAULT_N_QUESTIONS,
                  seed: int = DEFAULT_SEED, three_hop_share: float = 0.5) -> Path:
    """Generate a dataset (see :func:`generate_dataset`) and write it into ``folder``; returns the folder."""
    return generate_dataset(n_passages, n_questions, seed, three_hop_share).write(folder)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a synthetic multi-hop dataset in the raw HotpotQA format.")
    parser.add_argument("--passages", type=int, required=True, help="passages in the corpus")
    parser.add_argument("--questions", type=int, default=DEFAULT_N_QUESTIONS)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--three-hop-share", type=float, default=0.5)
    parser.add_argument("--out", required=True, help="folder for questions.json and corpus.json")
    args = parser.parse_args(argv)
    out = write_dataset(args.out, args.passages, args.questions, args.seed, args.three_hop_share)
    print(f"wrote {args.passages} passages and {args.questions} questions to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
