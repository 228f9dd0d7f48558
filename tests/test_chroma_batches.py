"""Batched Chroma calls: every id is written, read and deleted across batch boundaries."""

from __future__ import annotations

import chromadb
import numpy as np

from llama_index_mhop.stores.chroma_batches import (
    all_ids,
    delete_ids,
    existing_ids,
    get_records,
    iter_all,
    pages,
    upsert_vectors,
)


def test_vectors_written_in_batches_are_each_ids_row_alone():
    collection = chromadb.EphemeralClient().get_or_create_collection("batched_vectors")
    ids = [f"id-{i}" for i in range(7)]
    vectors = np.arange(7 * 4, dtype=np.float32).reshape(7, 4) + 1.0
    upsert_vectors(collection, ids, vectors, batch=3)
    records = get_records(collection, ids, ["embeddings", "documents", "metadatas"], batch=2)
    assert sorted(records) == sorted(ids)
    for i, record_id in enumerate(ids):
        assert np.array_equal(np.asarray(records[record_id]["embeddings"]), vectors[i])
        assert records[record_id]["documents"] is None and records[record_id]["metadatas"] is None
    delete_ids(collection, ids[:5], batch=2)
    assert existing_ids(collection, ids, batch=3) == set(ids[5:])


def test_a_whole_collection_is_read_once_a_batch_of_ids_at_a_time():
    collection = chromadb.EphemeralClient().get_or_create_collection("read_whole")
    ids = [f"id-{i:02d}" for i in range(11)]
    collection.upsert(ids=ids, embeddings=np.eye(11, 4, dtype=np.float32) + 0.5,
                      documents=[f"text {i}" for i in range(11)], metadatas=[{"row": i} for i in range(11)])
    assert sorted(all_ids(collection)) == ids
    read = list(pages(collection, ["documents", "metadatas"], batch=4))
    assert [len(page["ids"]) for page in read] == [4, 4, 3]
    seen = [(record_id, page["documents"][i], page["metadatas"][i]["row"])
            for page in read for i, record_id in enumerate(page["ids"])]
    assert sorted(seen) == [(f"id-{i:02d}", f"text {i}", i) for i in range(11)]
    assert sorted(r["id"] for r in iter_all(collection, ["metadatas"], batch=5)) == ids
