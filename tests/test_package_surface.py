"""What the installed package offers: its public names at the top level and the ``py.typed`` marker."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import pytest

import llama_index_mhop

ROOT = Path(__file__).resolve().parents[1]


def test_sync_and_delete_are_exported_at_the_top_level():
    from llama_index_mhop import delete_documents, sync_vector_index
    from llama_index_mhop.stores import vector_index

    assert {"sync_vector_index", "delete_documents"} <= set(llama_index_mhop.__all__)
    assert sync_vector_index is vector_index.sync_vector_index
    assert delete_documents is vector_index.delete_documents
    for name in llama_index_mhop.__all__:  # every exported name resolves
        assert getattr(llama_index_mhop, name) is not None


def test_the_package_is_marked_typed_and_ships_the_marker():
    assert (resources.files("llama_index_mhop") / "py.typed").is_file()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["llama_index_mhop"]


@pytest.fixture(scope="module")
def saved_graph(tmp_path_factory) -> str:
    from llama_index_mhop.graph.index import HippoGraphIndex
    from llama_index_mhop.stores.corpus import make_document
    from tests.word_bag import WordBagEmbedding

    folder = str(tmp_path_factory.mktemp("saved") / "hippo")
    HippoGraphIndex.from_documents([make_document("Pat Hingle", "Pat Hingle acted in Maximum Overdrive.")],
                                   embed_model=WordBagEmbedding(), persist_dir=folder, show_progress=False)
    return folder


OPEN_GRAPH = """
import sys
{first}
from llama_index.core import StorageContext, load_index_from_storage
from tests.word_bag import WordBagEmbedding
index = load_index_from_storage(StorageContext.from_defaults(persist_dir=sys.argv[1]), persist_dir=sys.argv[1],
                               embed_model=WordBagEmbedding())
print(type(index).__name__, len(index.graph.passages))
"""


@pytest.mark.slow
@pytest.mark.parametrize("first", [
    "import llama_index_mhop",
    "from llama_index_mhop import RRFFusionRetriever",
    "from llama_index_mhop import HippoGraphReader",
    "import llama_index.core, llama_index_mhop",  # LlamaIndex first, the package after
])
def test_importing_the_package_in_any_way_lets_load_index_from_storage_open_a_graph(saved_graph, first):
    # A fresh process each: the registration must come from the import named, not from this process's imports.
    opened = subprocess.run([sys.executable, "-c", OPEN_GRAPH.format(first=first), saved_graph], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert opened.returncode == 0, opened.stderr[-2000:]
    assert opened.stdout.split() == ["HippoGraphIndex", "1"]


def test_every_retriever_setting_is_a_keyword_argument_help_shows():
    import inspect

    from llama_index_mhop import ConfidenceLoopRetriever, HippoGraphRetriever, RRFFusionRetriever

    for retriever in (RRFFusionRetriever, ConfidenceLoopRetriever, HippoGraphRetriever):
        for function in (retriever, retriever.from_defaults):
            parameters = inspect.signature(function).parameters
            for name, field in retriever.config_type.model_fields.items():
                assert parameters[name].default == field.default, (retriever.__name__, name)
            assert {"lm", "llm", "program", "callback_manager"} <= set(parameters)
            assert not any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    assert "similarity_top_k: int = 21" in str(inspect.signature(RRFFusionRetriever.from_defaults))
