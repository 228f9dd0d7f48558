"""How an LM step shows in an app's LlamaIndex tracing: one LLM event per LM call, on both of LlamaIndex's channels.

* The callback manager: a ``CBEventType.LLM`` start/end pair (the ``LlamaDebugHandler`` lists it among
  ``get_llm_inputs_outputs()``). The callback manager is the component's own when it has handlers, else the one of
  the retriever the step runs in (:func:`step_callbacks`), else ``Settings.callback_manager``.
* Instrumentation: ``LLMChatStartEvent`` / ``LLMChatEndEvent`` inside a span of ``get_dispatcher(__name__)``, as
  LlamaIndex's own LLMs report a chat.

The prompt is the step's inputs as JSON (one user message); the response is the prediction's fields as JSON. The
response's ``additional_kwargs`` say which step it was, whether the LM answered (``outcome="lm"``) or the step fell
back (``outcome="fallback"``, with the one-line ``reason``; the callback event then also carries the exception), or
a ``KeyboardInterrupt`` stopped it (``outcome="interrupted"``).
A step with no LM makes no call and so no event. A LlamaIndex LLM given as ``llm=`` reports its own chat inside.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent
from llama_index.core.settings import Settings

__all__ = ["LMCallEvents", "dispatcher", "step_callbacks"]

dispatcher = get_dispatcher(__name__)

# The callback manager of the component whose flow is running (set by the retrievers around their program).
_ENCLOSING: ContextVar[CallbackManager | None] = ContextVar("mhop_step_callbacks", default=None)


@contextmanager
def step_callbacks(callback_manager: CallbackManager | None) -> Iterator[None]:
    """Within this block, LM steps without a callback manager of their own report to ``callback_manager``."""
    token = _ENCLOSING.set(callback_manager)
    try:
        yield
    finally:
        _ENCLOSING.reset(token)


def _callbacks(own: CallbackManager | None) -> CallbackManager | None:
    # A callback manager without handlers is no one listening: look further out.
    for candidate in (own, _ENCLOSING.get(), Settings.callback_manager):
        if candidate is not None and candidate.handlers:
            return candidate
    return None


def _json(value: Any) -> str:
    def plain(item: Any) -> Any:
        return item.model_dump() if hasattr(item, "model_dump") else str(item)

    return json.dumps(value, ensure_ascii=False, default=plain)


class LMCallEvents:
    """The LLM events of one LM call: started when made, ended once by :meth:`end`.

    Args:
        step: the step's name. inputs: the predictor's inputs. lm: the LM called.
        callback_manager: the component's own callback manager (None: see the module's rules).
    """

    def __init__(self, step: str, inputs: dict[str, Any], lm: Any, callback_manager: CallbackManager | None) -> None:
        self._step = step
        self._messages = [ChatMessage(role=MessageRole.USER, content=_json(inputs))]
        self._callbacks = _callbacks(callback_manager)
        model = {"model": str(getattr(lm, "model", type(lm).__name__)), "lm_step": step}
        dispatcher.event(LLMChatStartEvent(messages=self._messages, additional_kwargs={"lm_step": step},
                                           model_dict=model))
        self._event_id = "" if self._callbacks is None else self._callbacks.on_event_start(
            CBEventType.LLM,
            payload={EventPayload.MESSAGES: self._messages, EventPayload.ADDITIONAL_KWARGS: {"lm_step": step},
                     EventPayload.SERIALIZED: model},
        )

    def end(self, prediction: Any, outcome: str, reason: str, error: BaseException | None = None) -> None:
        """Report how the call ended: ``outcome`` is ``"lm"``, ``"fallback"`` or ``"interrupted"``; ``prediction``
        may be None."""
        fields = {} if prediction is None else dict(prediction.items()) if hasattr(prediction, "items") else {
            "output": prediction}
        response = ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=_json(fields) if fields else ""),
            additional_kwargs={"lm_step": self._step, "outcome": outcome, "reason": reason},
        )
        if self._callbacks is not None:
            payload: dict[str, Any] = {EventPayload.MESSAGES: self._messages, EventPayload.RESPONSE: response}
            if error is not None:
                payload[EventPayload.EXCEPTION] = error
            self._callbacks.on_event_end(CBEventType.LLM, payload=payload, event_id=self._event_id)
        dispatcher.event(LLMChatEndEvent(messages=self._messages, response=response))
