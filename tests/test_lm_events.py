"""LM steps as LLM events: one pair per LM call on the callback manager and through instrumentation."""

import asyncio

import pytest
from dspy.utils import DummyLM
from llama_index.core.callbacks import CallbackManager, CBEventType, EventPayload, LlamaDebugHandler
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMChatStartEvent

from llama_index_mhop.components import RRFFusionRetriever
from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.lm.clients import function_lm
from tests.recording_retriever import QUERY, RecordingRetriever

PERSPECTIVES = {"perspectives": ["Arthur's Magazine founding year", "First for Women founding year",
                                 "Arthur's Magazine publisher history", "First for Women launch date",
                                 "magazines started in the 19th century"]}


class ChatEvents(BaseEventHandler):
    """Collects the LLM chat events that reach the root dispatcher."""

    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "ChatEvents"

    def handle(self, event, **kwargs) -> None:
        if isinstance(event, LLMChatStartEvent | LLMChatEndEvent):
            self.events.append(event)


@pytest.fixture
def chat_events():
    handler = ChatEvents(events=[])
    root = get_dispatcher()
    root.add_event_handler(handler)
    try:
        yield handler.events
    finally:
        root.event_handlers.remove(handler)


def _debug() -> tuple[LlamaDebugHandler, CallbackManager]:
    handler = LlamaDebugHandler(print_trace_on_end=False)
    return handler, CallbackManager([handler])


def _outcomes(pairs) -> list[tuple[str, str]]:
    return [(end.payload[EventPayload.RESPONSE].additional_kwargs["lm_step"],
             end.payload[EventPayload.RESPONSE].additional_kwargs["outcome"]) for _, end in pairs]


def _spans(events) -> list[tuple[str, str | None]]:
    return [(type(event).__name__, event.span_id) for event in events]


@pytest.mark.parametrize("use_async", [False, True])
def test_each_lm_call_of_rrf_fusion_is_one_llm_event_pair(chat_events, use_async):
    handler, callbacks = _debug()
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), lm=DummyLM([PERSPECTIVES] * 3),
                                   callback_manager=callbacks)
    asyncio.run(retriever.aretrieve(QUERY)) if use_async else retriever.retrieve(QUERY)
    pairs = handler.get_llm_inputs_outputs()
    assert _outcomes(pairs) == [("perspectives", "lm")] * 3
    start, end = pairs[0]
    assert QUERY in start.payload[EventPayload.MESSAGES][0].content
    assert "founding year" in end.payload[EventPayload.RESPONSE].message.content
    assert EventPayload.EXCEPTION not in end.payload
    # Instrumentation: a start and an end per call, both in the call's own span.
    spans = _spans(chat_events)
    assert [name for name, _ in spans] == ["LLMChatStartEvent", "LLMChatEndEvent"] * 3
    ids = [span for _, span in spans]
    assert None not in ids and ids[0::2] == ids[1::2] and len(set(ids)) == 3
    assert [e.response.additional_kwargs["outcome"] for e in chat_events[1::2]] == ["lm"] * 3


def test_a_failing_lm_gives_events_marked_fallback(chat_events):
    def down(messages):
        raise RuntimeError("model down")

    handler, callbacks = _debug()
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), lm=function_lm(down),
                                   callback_manager=callbacks)
    assert len(retriever.retrieve(QUERY)) == 21
    pairs = handler.get_llm_inputs_outputs()
    assert _outcomes(pairs) == [("perspectives", "fallback")] * 3
    _, end = pairs[0]
    assert end.payload[EventPayload.RESPONSE].additional_kwargs["reason"].endswith("model down")
    assert "model down" in str(end.payload[EventPayload.EXCEPTION])
    ends = [e for e in chat_events if isinstance(e, LLMChatEndEvent)]
    assert [e.response.additional_kwargs["outcome"] for e in ends] == ["fallback"] * 3


def test_no_lm_means_no_call_and_no_event(chat_events):
    handler, callbacks = _debug()
    retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), callback_manager=callbacks)
    retriever.retrieve(QUERY)
    assert handler.get_llm_inputs_outputs() == [] and chat_events == []
    assert handler.get_event_pairs(CBEventType.RETRIEVE)  # the handler was listening all along


def test_the_fact_filter_reports_to_its_own_callback_manager(chat_events):
    handler, callbacks = _debug()
    facts = [fact_node("imperial river", "is located in", "florida", 0.8),
             fact_node("tsui hark", "born on", "15 february 1950", 0.4)]
    lm = DummyLM([{"fact_after_filter": {"fact": [["imperial river", "is located in", "florida"]]}}])
    kept = DSPyFactFilter(lm=lm, callback_manager=callbacks).postprocess_nodes(
        facts, query_str="Where is the Imperial River?")
    assert [n.node.metadata["subject"] for n in kept] == ["imperial river"]
    assert _outcomes(handler.get_llm_inputs_outputs()) == [("fact_filter", "lm")]
    assert len(chat_events) == 2
