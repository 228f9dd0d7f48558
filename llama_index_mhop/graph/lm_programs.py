"""The graph index's DSPy programs on disk, as DSPy's JSON beside the graph: the OpenIE extractor's, and the fact
filter program its retrievers start from (``index.fact_filter_program``), so a reopened index works as it did."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dspy

from ..lm.programs import load_program, save_program
from ..lm.steps import FactFilterModule
from .openie_file import StoredOpenIE

__all__ = ["EXTRACTOR_PROGRAM_FILE", "FACT_FILTER_PROGRAM_FILE", "load_lm_programs", "save_lm_programs"]

EXTRACTOR_PROGRAM_FILE = "hippo_openie_program.json"
FACT_FILTER_PROGRAM_FILE = "hippo_fact_filter_program.json"


def _extractor_program(extractor: Any) -> dspy.Module | None:
    """The DSPy program of the index's extractor (behind a stored OpenIE file, the one it falls back to)."""
    if isinstance(extractor, StoredOpenIE):
        extractor = extractor.fallback
    program = getattr(extractor, "program", None)  # a custom extractor need not have one
    return program if isinstance(program, dspy.Module) else None


def save_lm_programs(root: Path, extractor: Any, fact_filter_program: dspy.Module | None) -> None:
    """Write the extractor's program and the fact filter program (if set) into ``root``."""
    program = _extractor_program(extractor)
    if program is not None:
        save_program(program, root / EXTRACTOR_PROGRAM_FILE)
    if fact_filter_program is not None:
        save_program(fact_filter_program, root / FACT_FILTER_PROGRAM_FILE)
    else:  # unset: reopening must not bring back an earlier one
        (root / FACT_FILTER_PROGRAM_FILE).unlink(missing_ok=True)


def load_lm_programs(root: Path, extractor: Any) -> dspy.Module | None:
    """Load the saved extractor program into ``extractor``'s; the saved fact filter program (None: none)."""
    program = _extractor_program(extractor)
    if program is not None and (root / EXTRACTOR_PROGRAM_FILE).is_file():
        load_program(program, root / EXTRACTOR_PROGRAM_FILE)
    saved = root / FACT_FILTER_PROGRAM_FILE
    return load_program(FactFilterModule(), saved) if saved.is_file() else None
