"""Batched Chroma calls: every id is written, read and deleted across batch boundaries."""

from __future__ import annotations

import chromadb
import numpy as np

from llama_index_mhop.chroma_batches import delete_ids, existing_ids, get_records, upsert_vectors


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
