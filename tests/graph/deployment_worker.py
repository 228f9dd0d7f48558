"""A query worker of the deployment test: opens a persisted graph index beside a Chroma server, answers queries.

Run as ``python -m tests.graph.deployment_worker ROOT HOST PORT QUERY...``. It opens the index and prints one JSON
line (graph version, whether the edge arrays are memory-mapped, from which files, a digest of their contents, and
the rankings); then for each line on stdin, until stdin closes, it prints another: ``again`` answers from the index
it holds (the arrays it mapped), ``reopen`` opens the index afresh first.

With ``--reader`` first, the worker is a ``HippoGraphReader``: each line reports the graph version, the save it
answers from, the files of its state, and the rankings; ``refresh`` moves it to the newest save first.
"""

from __future__ import annotations

import hashlib
import json
import sys

import numpy as np

from llama_index_mhop.graph.index import HippoGraphIndex
from llama_index_mhop.graph.reader import HippoGraphReader
from llama_index_mhop.stores.defaults import default_chroma_client
from tests.word_bag import WordBagEmbedding


def open_index(root: str, host: str, port: int) -> HippoGraphIndex:
    return HippoGraphIndex.from_persist_dir(root, chroma_client=default_chroma_client(host=host, port=port),
                                            embed_model=WordBagEmbedding(), show_progress=False)


def answer(index: HippoGraphIndex, queries: list[str]) -> dict:
    pairs, values = index.graph._edges.table()
    retriever = index.as_retriever(similarity_top_k=4)
    return {
        "version": index.graph.version,
        "memory_mapped": isinstance(pairs, np.memmap) and isinstance(values, np.memmap) and not pairs.flags.writeable,
        "files": sorted({str(pairs.filename), str(values.filename)}) if isinstance(pairs, np.memmap) else [],
        "digest": hashlib.sha256(np.ascontiguousarray(pairs).tobytes() + np.ascontiguousarray(values).tobytes())
        .hexdigest(),
        "rankings": [[(n.node.node_id, round(float(n.score), 9)) for n in retriever.retrieve(q)] for q in queries],
    }


def read(reader: HippoGraphReader, queries: list[str]) -> dict:
    state = reader.retrieval_state()
    retriever = reader.as_retriever(similarity_top_k=4)
    return {
        "version": reader.version,
        "save": reader.digest,
        "files": sorted({str(state.passage_vectors.matrix.filename), str(state.passage_texts.path)}),
        "rankings": [[(n.node.node_id, round(float(n.score), 9)) for n in retriever.retrieve(q)] for q in queries],
    }


def main_reader(root: str, host: str, port: int, queries: list[str]) -> None:
    client = default_chroma_client(host=host, port=port)
    reader = HippoGraphReader.open(root, chroma_client=client, embed_model=WordBagEmbedding())
    print(json.dumps(read(reader, queries)), flush=True)
    for line in sys.stdin:
        if line.strip() == "refresh":
            reader.refresh()
        print(json.dumps(read(reader, queries)), flush=True)


def main(argv: list[str]) -> None:
    if argv[0] == "--reader":
        main_reader(argv[1], argv[2], int(argv[3]), argv[4:])
        return
    root, host, port, queries = argv[0], argv[1], int(argv[2]), argv[3:]
    index = open_index(root, host, port)
    print(json.dumps(answer(index, queries)), flush=True)
    for line in sys.stdin:
        if line.strip() == "reopen":
            index = open_index(root, host, port)
        print(json.dumps(answer(index, queries)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
