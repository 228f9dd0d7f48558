"""The process's counters: what `mhop status` reports of the components that ran in this process."""

import chromadb
import pytest

from llama_index_mhop.components import RRFFusionRetriever
from llama_index_mhop.lm.steps import FallbackCounter
from llama_index_mhop.rules.counters import process_counters, reset_process_counters
from llama_index_mhop.stores.corpus import make_document
from llama_index_mhop.stores.vector_index import sync_vector_index
from tests.word_bag import WordBagEmbedding


@pytest.fixture(autouse=True)
def fresh_counters():
    reset_process_counters()
    yield
    reset_process_counters()


def test_syncs_queries_and_fallbacks_are_counted():
    docs = [make_document("Sava", "The Sava flows into the Danube.", doc_id="sava"),
            make_document("Danube", "The Danube flows through Belgrade.", doc_id="danube")]
    result = sync_vector_index(docs, chroma_client=chromadb.EphemeralClient(), embed_model=WordBagEmbedding(),
                               collection_name="counted", show_progress=False)
    retriever = RRFFusionRetriever.from_defaults(result.index, similarity_top_k=2)
    retriever.retrieve("Where does the Sava flow?")
    with pytest.raises(ValueError):
        retriever.retrieve("   ")  # refused: not a query served
    FallbackCounter().add("perspectives")
    assert process_counters() == {
        "documents_indexed": 2,
        "documents_removed": 0,
        "lm_fallbacks.perspectives": 1,
        "queries_served.RRFFusionRetriever": 1,
    }
