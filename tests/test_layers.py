"""The package's layers, stated as import-linter contracts in pyproject.toml, hold; and every subpackage is in
one of them, so a new folder cannot sit outside the contract."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llama_index_mhop"
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_the_import_contracts_are_kept():
    # In its own process: import-linter reconfigures logging, which would silence every other logger here.
    run = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                          "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_subpackage_is_a_layer_and_the_top_level_holds_only_the_entry_points():
    (layers,) = [contract["layers"] for contract in CONFIG["contracts"] if contract["type"] == "layers"]
    named = {name for layer in layers for name in re.split(r"\s*[:|]\s*", layer)}
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders == named
    assert sorted(path.name for path in PACKAGE.glob("*.py")) == ["__init__.py"]
