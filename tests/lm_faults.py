"""A scripted LM that misbehaves in every way an LM can, one way per call."""

from __future__ import annotations

import itertools
import json
import threading
import time

from llama_index_mhop.lm.clients import function_lm, output_schema, render_fields, turn_of

FAULTS = ("raise", "hang", "empty", "invalid_json", "wrong_shape", "too_many")


def _too_many(schema: dict) -> dict:
    values = {}
    for name, field in schema["properties"].items():
        kind = field.get("type")
        if kind == "array":
            values[name] = [f"{name} item {i}" for i in range(50)]
        elif kind == "object" and "fact" in field.get("properties", {}):
            values[name] = {"fact": [[f"subject {i}", "relates to", f"object {i}"] for i in range(40)]}
        elif kind in ("integer", "number"):
            values[name] = 10_000
        else:
            values[name] = "word " * 2000
    return values


def faulty_lm(faults=FAULTS, hang_seconds: float = 1.5):
    """An LM that answers each call with the next fault of ``faults`` (cycling).

    It takes one call at a time, like most local models: after a hang, callers fall back until the hung call
    returns. ``lm.wait_idle()`` waits for that, so a test can send every fault to the LM in turn.
    """
    script = itertools.cycle(faults)
    calls: list[str] = []
    idle = threading.Event()
    idle.set()

    def chat(messages):
        idle.clear()
        try:
            return _answer(next(script), messages)
        finally:
            idle.set()

    def _answer(fault, messages):
        calls.append(fault)
        schema = output_schema(messages[0][1]) or {"properties": {"answer": {"type": "string"}}}
        if fault == "raise":
            raise RuntimeError("scripted LM failure")
        if fault == "hang":
            time.sleep(hang_seconds)
            return ""
        if fault == "empty":
            return ""
        if fault == "invalid_json":
            return render_fields({name: "{not: valid json [" for name in schema["properties"]})
        if fault == "wrong_shape":
            return render_fields({name: json.dumps({"unexpected": [1, 2]}) for name in schema["properties"]})
        return render_fields(_too_many(schema))

    lm = function_lm(chat, model="scripted/faulty")
    lm.fault_calls = calls
    # the hung call has returned and given its turn back (the turn outlives chat() by a few instructions)
    lm.wait_idle = lambda: idle.wait(timeout=10 * hang_seconds) and turn_of(lm).wait_idle(timeout=10 * hang_seconds)
    return lm


def unbalanced_quotes_lm(chars: int = 200_000):
    """An LM answering every field with ``chars`` characters of a list whose quotes never balance
    (``["a"b"b"b...``): the input on which DSPy's JSON repair is quadratic."""
    body = '["a' + '"b' * (chars // 2)

    def chat(messages):
        schema = output_schema(messages[0][1]) or {"properties": {"answer": {}}}
        fields = [f"[[ ## {name} ## ]]\n{body}" for name in schema["properties"]]
        return "\n\n".join([*fields, "[[ ## completed ## ]]"])

    return function_lm(chat, model="scripted/unbalanced-quotes")


def hung_lm(release: threading.Event, thread_safe: bool = True):
    """An LM whose every call waits until ``release`` is set: a server that took the request and went silent."""

    def chat(messages):
        release.wait()
        return ""

    return function_lm(chat, model="scripted/hung", thread_safe=thread_safe)
