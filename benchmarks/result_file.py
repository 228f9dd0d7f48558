"""How a benchmark script reports: its result printed as JSON and written to its ``--out`` file.

Importing it also points the benchmark at the checkout it sits in: a script's own folder, not the checkout, heads
``sys.path``, and an editable install of another checkout would otherwise be the package measured.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

CHECKOUT = Path(__file__).resolve().parents[1]
if str(CHECKOUT) not in sys.path:
    sys.path.insert(0, str(CHECKOUT))


def measured_on(load_avg: list[Any], *packages: str) -> dict[str, Any]:
    """What a result records of its run: the load averages before and after it, Python's version, the CPU count
    and the installed version of each of ``packages``."""
    return {"load_avg_before_after": load_avg,
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                        **{name: version(name) for name in packages}}}


def write_result(result: dict[str, Any], out: Path | None) -> None:
    """Print ``result`` as indented JSON and, when ``out`` is given, write it there (creating the folder)."""
    text = json.dumps(result, indent=2)
    print(text)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
