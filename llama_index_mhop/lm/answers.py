"""How an LM's raw answer reaches a parser: cut to a bounded length, repaired only while repairing is cheap.
DSPy's ``ChatAdapter`` repairs non-text fields with ``json_repair``, quadratic in the length of some broken
JSON (``["a"b"b"b...``; docs/BENCHMARKS.md): :class:`BoundedChatAdapter` reads at most
:data:`MAX_ANSWER_CHARS`, and a field over :data:`MAX_REPAIRED_CHARS` only when it is valid JSON already."""

from __future__ import annotations

import json
import re
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

__all__ = ["MAX_ANSWER_CHARS", "MAX_REPAIRED_CHARS", "BoundedChatAdapter"]

#: Characters of an LM's answer that are parsed; the rest is dropped (no step asks for more than a few thousand).
MAX_ANSWER_CHARS = 20_000
#: Longest field value that ``json_repair`` may repair, where its worst case is still cheap (docs/BENCHMARKS.md).
MAX_REPAIRED_CHARS = 2_000
# DSPy's ChatAdapter field header, as ChatAdapter.parse reads it (one per line).
_HEADER = re.compile(r"\[\[ ## (\w+) ## \]\]")


def _first_sections(completion: str) -> dict[str, str]:
    """Each field's text in a ChatAdapter answer, first occurrence only (the one ``ChatAdapter.parse`` reads)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in completion.splitlines():
        match = _HEADER.match(line.strip())
        if match:
            name = match.group(1)
            current = None if name in sections else sections.setdefault(name, [])
            rest = line.strip()[match.end():].strip()
            if current is not None and rest:
                current.append(rest)
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in sections.items()}


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # deep nesting overflows the decoder
        return False
    return True


class BoundedChatAdapter(dspy.ChatAdapter):
    """DSPy's ``ChatAdapter`` (without its JSON-adapter retry: one LM call per step) whose parse is bounded: a
    non-text field longer than :data:`MAX_REPAIRED_CHARS` that is not valid JSON is an ``AdapterParseError``."""

    def __init__(self) -> None:
        super().__init__(use_json_adapter_fallback=False)

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        completion = completion[:MAX_ANSWER_CHARS]
        fields = signature.output_fields
        for name, value in _first_sections(completion).items():
            if name not in fields or fields[name].annotation is str or len(value) <= MAX_REPAIRED_CHARS:
                continue
            if not _is_json(value):
                raise AdapterParseError(adapter_name=type(self).__name__, signature=signature,
                                        lm_response=completion[:200], message=f"field {name}: {len(value)} characters "
                                        "that are not valid JSON (an answer this long is not repaired)")
        return super().parse(signature, completion)
