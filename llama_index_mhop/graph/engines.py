"""The LlamaIndex engines a graph answers through: a query engine and the chat engines over its retriever, and
:class:`GraphEngines`, the ``as_retriever`` / ``as_query_engine`` / ``as_chat_engine`` of the index and of its
reader."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.chat_engine.types import BaseChatEngine
    from llama_index.core.query_engine import RetrieverQueryEngine

    from ..components.hippo_graph import HippoGraphRetriever

__all__ = ["GraphEngines", "chat_engine", "query_engine"]

logger = logging.getLogger(__name__)


def query_engine(retriever: BaseRetriever, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
    """A ``RetrieverQueryEngine`` answering from ``retriever``; ``kwargs`` are ``RetrieverQueryEngine.from_args``'s.

    With no ``llm`` and no ``Settings.llm`` set by the app, the engine retrieves without writing an answer
    (LlamaIndex's ``NoText`` synthesizer: the passages are ``response.source_nodes``), and says so once at WARNING,
    rather than reach for LlamaIndex's default LLM, which needs an OpenAI key.
    """
    from llama_index.core.query_engine import RetrieverQueryEngine

    from ..lm.steps import app_llm

    if llm is None and app_llm() is None and "response_synthesizer" not in kwargs:
        from llama_index.core.llms import MockLLM
        from llama_index.core.response_synthesizers.no_text import NoText

        _warn_once("no LLM given and none set in Settings.llm: the query engine returns the retrieved passages "
                   "(response.source_nodes) without an answer; pass llm= or set Settings.llm for answers")
        # Built here with an LLM it never calls: LlamaIndex's factory builds NoText without one, which reaches for
        # its OpenAI default.
        llm = MockLLM()
        kwargs.pop("response_mode", None)
        kwargs["response_synthesizer"] = NoText(llm=llm)
    return RetrieverQueryEngine.from_args(retriever, llm=llm, **kwargs)


def chat_engine(retriever: BaseRetriever, chat_mode: Any = "condense_plus_context", llm: Any = None,
                **kwargs: Any) -> BaseChatEngine:
    """A chat engine answering from ``retriever``: ``"condense_plus_context"`` (a follow-up is condensed into a
    standalone question first; also LlamaIndex's ``ChatMode.BEST``) or ``"context"`` (each message retrieves as it
    is); ``chat_mode`` may be LlamaIndex's ``ChatMode``. ``kwargs`` are the engine's ``from_defaults``'s.

    Raises:
        ValueError: another chat mode, or no ``llm`` and no ``Settings.llm`` (a chat engine answers with an LLM).
    """
    from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine

    from ..lm.steps import app_llm

    if llm is None and app_llm() is None:
        raise ValueError("a chat engine answers with an LLM: pass llm= or set Settings.llm "
                         "(as_retriever() or as_query_engine() retrieve without one)")

    engines = {"condense_plus_context": CondensePlusContextChatEngine, "context": ContextChatEngine,
               "best": CondensePlusContextChatEngine}  # LlamaIndex's default mode: its best engine here
    chat_mode = str(getattr(chat_mode, "value", chat_mode))
    if chat_mode not in engines:
        raise ValueError(f"chat_mode must be one of {', '.join(engines)}, got {chat_mode!r}")
    return engines[chat_mode].from_defaults(retriever=retriever, llm=llm, **kwargs)


class GraphEngines:
    """The retriever and engines of a graph a :class:`~llama_index_mhop.components.hippo_graph.HippoGraphRetriever`
    searches (a :class:`~.retrieval_source.RetrievalSource`: the index, or a reader of it)."""

    def as_retriever(self, **kwargs: Any) -> HippoGraphRetriever:
        """A :class:`~llama_index_mhop.components.hippo_graph.HippoGraphRetriever` over this graph; ``kwargs`` are
        its arguments (``help(HippoGraphRetriever)``): ``similarity_top_k=5`` and the other
        :class:`~llama_index_mhop.components.hippo_graph.HippoGraphConfig` settings, ``fact_filter``, ``lm``..."""
        from ..components.hippo_graph import HippoGraphRetriever

        return HippoGraphRetriever(index=self, **kwargs)

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
        """A ``RetrieverQueryEngine`` answering from this graph's retriever.

        Args:
            llm: the LlamaIndex LLM that writes answers (default: LlamaIndex's ``Settings.llm``).
            **kwargs: retriever arguments (see ``HippoGraphRetriever``) and ``RetrieverQueryEngine.from_args``
                arguments (``response_mode``, ``node_postprocessors``, ...).
        """
        return query_engine(self._retriever_from(kwargs), llm, **kwargs)

    def as_chat_engine(self, chat_mode: str = "condense_plus_context", llm: Any = None,
                       **kwargs: Any) -> BaseChatEngine:
        """A LlamaIndex chat engine answering from this graph's retriever (see :func:`chat_engine`).

        Args:
            chat_mode: ``"condense_plus_context"`` (a follow-up is condensed into a standalone question first; also
                what LlamaIndex's default ``ChatMode.BEST`` gives) or ``"context"`` (each message retrieves as it
                is).
            llm: the LlamaIndex LLM that answers (default: LlamaIndex's ``Settings.llm``).
            **kwargs: retriever arguments (see ``HippoGraphRetriever``) and the chat engine's ``from_defaults``
                arguments (``system_prompt``, ``memory``, ``node_postprocessors``, ...).

        Raises:
            ValueError: another chat mode.
        """
        return chat_engine(self._retriever_from(kwargs), chat_mode, llm, **kwargs)

    def _retriever_from(self, kwargs: dict[str, Any]) -> HippoGraphRetriever:
        """The retriever an engine answers from, built from the retriever arguments among an engine's ``kwargs``
        (taken out of them; the rest are the engine's)."""
        from ..components.hippo_graph import HippoGraphRetriever

        return self.as_retriever(**{k: kwargs.pop(k) for k in list(kwargs) if k in HippoGraphRetriever.ARGUMENTS})


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)
