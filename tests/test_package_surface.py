"""What the installed package offers: its public names at the top level and the ``py.typed`` marker."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import llama_index_mhop

ROOT = Path(__file__).resolve().parents[1]


def test_sync_and_delete_are_exported_at_the_top_level():
    from llama_index_mhop import delete_documents, sync_vector_index, vector_index

    assert {"sync_vector_index", "delete_documents"} <= set(llama_index_mhop.__all__)
    assert sync_vector_index is vector_index.sync_vector_index
    assert delete_documents is vector_index.delete_documents
    for name in llama_index_mhop.__all__:  # every exported name resolves
        assert getattr(llama_index_mhop, name) is not None


def test_the_package_is_marked_typed_and_ships_the_marker():
    assert (resources.files("llama_index_mhop") / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["llama_index_mhop"]
