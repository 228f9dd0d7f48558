"""The LlamaIndex engines a graph index answers through: a query engine and the chat engines over its retriever."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.chat_engine.types import BaseChatEngine
    from llama_index.core.query_engine import RetrieverQueryEngine

__all__ = ["chat_engine", "query_engine"]


def query_engine(retriever: BaseRetriever, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
    """A ``RetrieverQueryEngine`` answering from ``retriever``; ``kwargs`` are ``RetrieverQueryEngine.from_args``'s."""
    from llama_index.core.query_engine import RetrieverQueryEngine

    return RetrieverQueryEngine.from_args(retriever, llm=llm, **kwargs)


def chat_engine(retriever: BaseRetriever, chat_mode: Any = "condense_plus_context", llm: Any = None,
                **kwargs: Any) -> BaseChatEngine:
    """A chat engine answering from ``retriever``: ``"condense_plus_context"`` (a follow-up is condensed into a
    standalone question first; also LlamaIndex's ``ChatMode.BEST``) or ``"context"`` (each message retrieves as it
    is); ``chat_mode`` may be LlamaIndex's ``ChatMode``. ``kwargs`` are the engine's ``from_defaults``'s.

    Raises:
        ValueError: another chat mode.
    """
    from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine

    engines = {"condense_plus_context": CondensePlusContextChatEngine, "context": ContextChatEngine,
               "best": CondensePlusContextChatEngine}  # LlamaIndex's default mode: its best engine here
    chat_mode = str(getattr(chat_mode, "value", chat_mode))
    if chat_mode not in engines:
        raise ValueError(f"chat_mode must be one of {', '.join(engines)}, got {chat_mode!r}")
    return engines[chat_mode].from_defaults(retriever=retriever, llm=llm, **kwargs)
