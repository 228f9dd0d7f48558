"""A seeded synthetic multi-hop corpus of any size, written in the raw HotpotQA format (for scaling runs).

Entities (rivers, towns, people, companies) each get one passage whose first sentence names the entities it links
to; fillers link to nothing. 2- and 3-hop questions name only a chain's first entity, so each later hop is reached
through the bridge the previous passage names. The chains come first from their own random stream, so for one
seed and question count the corpus of N passages is a prefix of the corpus of M > N: only distractors grow.
Written as ``questions.json`` and ``corpus.json`` for :func:`~llama_index_mhop.bench.loaders.load_dataset`::

    python -m llama_index_mhop.bench.synthetic --passages 10000 --questions 50 --seed 0 --out data/syn-10k
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .synthetic_world import BACKGROUND_WEIGHTS, SyntheticEntity, World

__all__ = [
    "DEFAULT_N_QUESTIONS",
    "DEFAULT_SEED",
    "QUESTION_KINDS",
    "SyntheticDataset",
    "SyntheticEntity",
    "generate_dataset",
    "write_dataset",
]

DEFAULT_SEED = 0
DEFAULT_N_QUESTIONS = 50
#: How many non-gold passages of the question chains go into a question's ``context`` (HotpotQA shows 8).
N_CONTEXT_DISTRACTORS = 8

# Share of each passage kind among the passages added after the question chains.
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


# -- question chains ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Kind:
    hops: int
    templates: tuple[str, ...]
    build: Callable[[World, random.Random], tuple[list[str], str]]  # -> (chain of gold titles, answer)


def _town_on_river(world: World, rng: random.Random) -> tuple[str, str]:
    """A new river and a town on it."""
    river = world.river(rng)
    return world.town(rng, river=river), river


def _company_of_native(world: World, rng: random.Random, town: str) -> tuple[str, str]:
    """A new company and its founder, born in ``town``."""
    founder = world.person(rng, town=town, with_employer=False)
    return world.company(rng, founder=founder), founder


def _founder_birthplace(world: World, rng: random.Random) -> tuple[list[str], str]:
    town = world.town(rng)
    company, founder = _company_of_native(world, rng, town)
    return [company, founder], town


def _birthplace_river(world: World, rng: random.Random) -> tuple[list[str], str]:
    town, river = _town_on_river(world, rng)
    person = world.person(rng, town=town)
    return [person, town], river


def _headquarters_province(world: World, rng: random.Random) -> tuple[list[str], str]:
    town = world.town(rng)
    company = world.company(rng, headquarters=town)
    return [company, town], world.entities[town].links["province"]


def _employer_founder(world: World, rng: random.Random) -> tuple[list[str], str]:
    founder = world.person(rng, with_employer=False)
    company = world.company(rng, founder=founder)
    person = world.person(rng, employer=company)
    return [person, company], founder


def _founder_birthplace_river(world: World, rng: random.Random) -> tuple[list[str], str]:
    town, river = _town_on_river(world, rng)
    company, founder = _company_of_native(world, rng, town)
    return [company, founder, town], river


def _founder_birthplace_province(world: World, rng: random.Random) -> tuple[list[str], str]:
    town = world.town(rng)
    company, founder = _company_of_native(world, rng, town)
    return [company, founder, town], world.entities[town].links["province"]


def _employer_founder_birthplace(world: World, rng: random.Random) -> tuple[list[str], str]:
    town = world.town(rng)
    company, founder = _company_of_native(world, rng, town)
    person = world.person(rng, employer=company)
    return [person, company, founder], town


def _employer_headquarters_river(world: World, rng: random.Random) -> tuple[list[str], str]:
    town, river = _town_on_river(world, rng)
    company = world.company(rng, headquarters=town)
    person = world.person(rng, employer=company)
    return [person, company, town], river


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


def _check_args(n_passages: int, n_questions: int, three_hop_share: float) -> None:
    if isinstance(n_questions, bool) or not isinstance(n_questions, int) or n_questions < 1:
        raise ValueError(f"n_questions must be an integer >= 1, got {n_questions!r}")
    if isinstance(n_passages, bool) or not isinstance(n_passages, int) or n_passages < 1:
        raise ValueError(f"n_passages must be an integer >= 1, got {n_passages!r}")
    if not 0.0 <= three_hop_share <= 1.0:
        raise ValueError(f"three_hop_share must be in [0, 1], got {three_hop_share!r}")


def generate_dataset(
    n_passages: int,
    n_questions: int = DEFAULT_N_QUESTIONS,
    seed: int = DEFAULT_SEED,
    three_hop_share: float = 0.5,
) -> SyntheticDataset:
    """A corpus of exactly ``n_passages`` passages (the chains take about 4 a question) and ``n_questions``
    questions, ``three_hop_share`` of them 3-hop, the kinds taking turns; the same arguments give the same
    dataset. ValueError for a bad argument or too few passages for the chains."""
    _check_args(n_passages, n_questions, three_hop_share)
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
        questions.append({
            "_id": f"syn{seed}-{number:04d}",
            "question": text,
            "answer": answer,
            "type": "bridge",
            "level": "hard" if hops == 3 else "medium",
            "supporting_facts": [[title, 0] for title in chain],
            "context": [],
            "hops": hops,
            "kind": name,
            "chain": list(chain),
            "bridge_entities": list(chain[1:]),
        })
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


def write_dataset(
    folder: str | os.PathLike[str],
    n_passages: int,
    n_questions: int = DEFAULT_N_QUESTIONS,
    seed: int = DEFAULT_SEED,
    three_hop_share: float = 0.5,
) -> Path:
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
