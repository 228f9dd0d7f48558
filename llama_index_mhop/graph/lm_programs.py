"""The graph index's DSPy programs on disk: the OpenIE extractor's and the fact filter's, beside the graph.

:meth:`HippoGraphIndex.persist <llama_index_mhop.graph.index.HippoGraphIndex.persist>` writes them as DSPy's
JSON (a compiled program keeps its instructions and demos): the extractor's program, and the fact filter program
the index's retrievers start from (``index.fact_filter_program``; none saved when it is unset). Reopening the index loads them
back, so the reopened index extracts (later inserts) and recognises facts (its retrievers) exactly as the saved
one did. A custom extractor without a DSPy program saves none.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy

from ..programs import load_program, save_program
from ..signatures import FactFilterModule
from .openie_file import StoredOpenIE

if TYPE_CHECKING:
    from .index import HippoGraphIndex

__all__ = ["EXTRACTOR_PROGRAM_FILE", "FACT_FILTER_PROGRAM_FILE", "load_lm_programs", "save_lm_programs"]

EXTRACTOR_PROGRAM_FILE = "hippo_openie_program.json"
FACT_FILTER_PROGRAM_FILE = "hippo_fact_filter_program.json"


def _extractor_program(extractor: Any) -> dspy.Module | None:
    """The DSPy program of the index's extractor (behind a stored OpenIE file, the one it falls back to)."""
    if isinstance(extractor, StoredOpenIE):
        extractor = extractor.fallback
    program = getattr(extractor, "program", None)  # a custom extractor need not have one
    return program if isinstance(program, dspy.Module) else None


def save_lm_programs(index: HippoGraphIndex, root: Path) -> None:
    """Write the extractor's and the fact filter's programs into ``root``."""
    extractor = _extractor_program(index.extractor)
    if extractor is not None:
        save_program(extractor, root / EXTRACTOR_PROGRAM_FILE)
    if index.fact_filter_program is not None:
        save_program(index.fact_filter_program, root / FACT_FILTER_PROGRAM_FILE)
    else:  # unset: reopening must not bring back an earlier one
        (root / FACT_FILTER_PROGRAM_FILE).unlink(missing_ok=True)


def load_lm_programs(index: HippoGraphIndex, root: Path) -> HippoGraphIndex:
    """Load the programs :func:`save_lm_programs` wrote into ``index`` (an index saved without them keeps the
    default programs) and return ``index``.

    Raises:
        ValueError: a program file that is not a saved program of its kind.
    """
    extractor = _extractor_program(index.extractor)
    if extractor is not None and (root / EXTRACTOR_PROGRAM_FILE).is_file():
        load_program(extractor, root / EXTRACTOR_PROGRAM_FILE)
    if (root / FACT_FILTER_PROGRAM_FILE).is_file():
        index.fact_filter_program = load_program(FactFilterModule(), root / FACT_FILTER_PROGRAM_FILE)
    return index
