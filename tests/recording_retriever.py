"""A base retriever that ranks 60 fixed nodes by a hash of (query, node id) and records every query."""

import asyncio
import hashlib

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

QUERY = "Which magazine was started first, Arthur's Magazine or First for Women?"

NODES = [TextNode(id_=f"n{i:02d}", text=f"Passage {i} about Topic{i % 7}", metadata={"title": f"T{i}"})
         for i in range(60)]


class RecordingRetriever(BaseRetriever):
    """Ranks the 60 nodes by a hash of (query, node id): deterministic and different for every query."""

    def __init__(self, depth: int = 20) -> None:
        self.calls: list[str] = []
        self.depth = depth
        super().__init__()

    def _rank(self, query: str) -> list[NodeWithScore]:
        def key(node):
            return hashlib.sha256(f"{query}|{node.node_id}".encode()).hexdigest()

        ranked = sorted(NODES, key=key)[: self.depth]
        return [NodeWithScore(node=n, score=1.0 - i / 100) for i, n in enumerate(ranked)]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append(query_bundle.query_str)
        return self._rank(query_bundle.query_str)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.calls.append(query_bundle.query_str)
        await asyncio.sleep(0)
        return self._rank(query_bundle.query_str)
