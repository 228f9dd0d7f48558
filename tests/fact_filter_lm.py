"""Scripted fact-filter LMs and their answers: one that depends on the whole prompt (instructions and demos
included), one that always raises, and the answer format they write."""

from __future__ import annotations

import hashlib
import json
import re

import dspy
from dspy.utils import DummyLM
from llama_index.core.schema import NodeWithScore

from llama_index_mhop.lm.clients import function_lm, render_fields

_CANDIDATES = re.compile(r"\[\[ ## fact_before_filter ## \]\]\n(\{.*\})")


def recognising_lm(prompts: list[str] | None = None) -> dspy.LM:
    """Keeps two of the candidate facts, chosen by a hash of the whole prompt; records each prompt in ``prompts``.

    The same prompt always keeps the same facts; a prompt with other demos or instructions usually keeps others.
    """

    def chat(messages):
        text = json.dumps(messages)
        if prompts is not None:
            prompts.append(text)
        facts = json.loads(_CANDIDATES.findall(messages[-1][1])[-1])["fact"]
        digest = hashlib.sha256(text.encode()).digest()
        chosen = list(dict.fromkeys(digest[i] % len(facts) for i in range(2)))
        return render_fields({"fact_after_filter": {"fact": [facts[i] for i in chosen]}})

    return function_lm(chat, model="scripted/recognition")


def answer(*facts) -> dict[str, str]:
    return {"fact_after_filter": json.dumps({"fact": [list(f) for f in facts]})}


def texts(nodes: list[NodeWithScore]) -> list[str]:
    return [n.node.get_content() for n in nodes]


class BrokenLM(DummyLM):
    """An LM whose every call raises, as a provider outage would."""

    def __init__(self) -> None:
        super().__init__([])

    def forward(self, *args, **kwargs):
        raise RuntimeError("LM down")

    async def aforward(self, *args, **kwargs):
        raise RuntimeError("LM down")
