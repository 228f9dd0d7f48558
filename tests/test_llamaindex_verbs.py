"""LlamaIndex's own document verbs on the package's passage index keep one version of each document: an edited
document's passages replace the old ones, an unchanged one is neither rewritten nor embedded again, and the next
sync of the folder finds the documents those verbs indexed unchanged."""

from __future__ import annotations

import pytest
from llama_index.core import Document

from llama_index_mhop.stores.corpus import load_documents
from llama_index_mhop.stores.vector_index import PassageIndex, passage_collection, sync_vector_index
from tests.graph.test_reconcile import synced_folder
from tests.graph.test_sync import EDITED, NOTES
from tests.word_bag import WordBagEmbedding

OLD = "Commissioner Gordon"


EMBEDDED: list[str] = []  # what the embedder was given since the fixture's sync


class CountingEmbedding(WordBagEmbedding):
    """Records the passages it embeds."""

    def _get_text_embeddings(self, texts):
        EMBEDDED.extend(texts)
        return super()._get_text_embeddings(texts)


def texts(index, query="Who was Pat Hingle?", k=10) -> str:
    return " ".join(n.node.get_content() for n in index.as_retriever(similarity_top_k=k).retrieve(query))


@pytest.fixture
def synced(tmp_path):
    embedder = CountingEmbedding()
    folder, client, index = synced_folder(tmp_path, "verbs", embedder)
    assert isinstance(index, PassageIndex) and OLD in texts(index)
    EMBEDDED.clear()
    return folder, client, embedder, index


def test_refresh_ref_docs_replaces_an_edited_document_and_leaves_the_rest(synced):
    folder, client, embedder, index = synced
    rows = passage_collection(index).count()
    (folder / "notes/Pat Hingle.txt").write_text(EDITED)
    documents = load_documents(folder)
    flags = index.refresh_ref_docs(documents)
    assert flags == [d.id_ == "notes/Pat Hingle.txt" for d in documents]
    assert passage_collection(index).count() == rows  # one passage out, one in
    assert OLD not in texts(index) and "Miami" in texts(index)
    assert len(EMBEDDED) == 1 and "Miami" in EMBEDDED[0]  # the edited passage alone was embedded
    plan = sync_vector_index(folder, collection_name="verbs", chroma_client=client, embed_model=embedder,
                             show_progress=False, delete_missing=True).plan
    assert plan.counts() == {"added": 0, "updated": 0, "removed": 0, "unchanged": len(NOTES)}


def test_insert_and_update_ref_doc_of_an_indexed_document_keep_one_version(synced):
    _, _, _, index = synced
    rows = passage_collection(index).count()
    edited = Document(text=EDITED, id_="notes/Pat Hingle.txt", metadata={"title": "Pat Hingle"})
    index.insert(edited)
    index.insert(edited)
    assert passage_collection(index).count() == rows and OLD not in texts(index)
    index.update_ref_doc(Document(text=NOTES["notes/Pat Hingle.txt"], id_="notes/Pat Hingle.txt",
                                  metadata={"title": "Pat Hingle"}))
    assert passage_collection(index).count() == rows and "Miami" not in texts(index) and OLD in texts(index)
    index.insert(Document(text="Marty is a 1955 film.", id_="notes/Marty.txt", metadata={"title": "Marty"}))
    assert passage_collection(index).count() == rows + 1
    index.delete_ref_doc("notes/Marty.txt")
    assert passage_collection(index).count() == rows


async def test_the_async_verbs_keep_one_version_too(synced):
    _, _, _, index = synced
    rows = passage_collection(index).count()
    edited = Document(text=EDITED, id_="notes/Pat Hingle.txt", metadata={"title": "Pat Hingle"})
    assert await index.arefresh_ref_docs([edited]) == [True]
    assert await index.arefresh_ref_docs([edited]) == [False]
    await index.ainsert(edited)
    assert passage_collection(index).count() == rows and OLD not in texts(index)
