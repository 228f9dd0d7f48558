"""The invented world behind :mod:`llama_index_mhop.bench.synthetic`: made-up names, and the rivers, towns, people,
companies and fillers whose passages link to one another."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BACKGROUND_WEIGHTS", "SyntheticEntity", "World", "article"]


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
    Magnus Nils Osric Quill Sander Soren Tobin Viggo Wendel Yorick Zeno Henrik Matthis""".split()
)
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
    company ropeworks festival town village port city founder born north south east west saint""".split()
)


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
    """The entities made so far. Every new passage names only entities that already exist.

    Provinces and seas are names only (no passage), drawn once per seed.
    """

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

    # -- names: every generated word is used once, so no name is part of another -------------------------------

    def word(self, rng: random.Random) -> str:
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

    # -- entities --------------------------------------------------------------------------------------------

    def river(self, rng: random.Random) -> str:
        title = f"{self.word(rng)} River"
        province, water, length = rng.choice(self.provinces), rng.choice(self.waters), rng.randint(20, 400)
        first = rng.choice((
            f"The {title} is a river of {province} that flows {length} km into {water}.",
            f"The {title} rises in the hills of {province} and runs {length} km to {water}.",
        ))
        rest = [f"Its valley was surveyed in {rng.randint(1700, 1900)}.",
                rng.choice(("It is navigable by barges in its lower course.", "Its waters are rich in trout.",
                            "Several water mills once stood on its banks."))]
        return self.add(SyntheticEntity(title, "river", [first, *rest], {"province": province, "mouth": water}))

    def town(self, rng: random.Random, river: str | None = None) -> str:
        title = self.word(rng) + rng.choice(_TOWN_SUFFIXES)
        river = river or self.pick("river", rng, lambda: self.river(rng))
        province = rng.choice(self.provinces)
        kind = rng.choice(_TOWN_KINDS)
        first = rng.choice((
            f"{title} is {article(kind)} on the {river} in {province}.",
            f"{title} is {article(kind)} in {province}, built on the banks of the {river}.",
            f"{title} is {article(kind)} of {province} that lies on the {river}.",
        ))
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
            first = rng.choice((
                f"{title} ({born}–{born + rng.randint(40, 90)}) was {article(job)} born in {town} who worked for "
                f"{employer}.",
                f"{title} was {article(job)} from {town}, born in {born}, who spent most of a long career at "
                f"{employer}.",
            ))
        else:
            first = rng.choice((
                f"{title} ({born}–{born + rng.randint(40, 90)}) was {article(job)} born in {town}.",
                f"{title} was {article(job)} born in {born} in {town}.",
            ))
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
        first = rng.choice((
            f"{title} is {article(industry)} company founded in {year} by {founder}, with its headquarters in "
            f"{headquarters}.",
            f"{title} is {article(industry)} firm headquartered in {headquarters} and founded by {founder} in {year}.",
        ))
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
