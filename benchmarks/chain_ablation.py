"""``mhop bench`` with ``hippo_graph`` also run without its evidence chain, in the same run.

Registers ``hippo_graph_no_chain`` (``hippo_graph`` with ``chain_hops=0``: the walk seeded as before the chain)
and hands every argument to ``mhop bench``, so the result file holds both retrievers, timed interleaved question
by question after the same warm-up, and their paired per-question recall.

Usage:
    python benchmarks/chain_ablation.py --dataset ../shared/datasets/hotpotqa-100 \\
        --retrievers vector,hippo_graph,hippo_graph_no_chain --out benchmarks/results/chain-ablation.json
"""

from __future__ import annotations

import sys

from llama_index.core.base.base_retriever import BaseRetriever

from llama_index_mhop.bench.registry import RetrieverContext, register_retriever
from llama_index_mhop.cli.commands import main


@register_retriever("hippo_graph_no_chain", "hippo_graph without the evidence chain (chain_hops=0)",
                    needs_index="vector")
def _hippo_graph_no_chain(ctx: RetrieverContext) -> BaseRetriever:
    return ctx.graph_index.as_retriever(similarity_top_k=ctx.top_k, lm=ctx.lm, program=ctx.program, chain_hops=0)


if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
