"""The graph index's place in LlamaIndex's storage: its index struct, and the registration that lets
``load_index_from_storage`` reopen it.

A ``StorageContext`` keeps what an index is in its index store, one index struct per index, and
``load_index_from_storage`` maps each struct's type to the index class that opens it. The graph index's struct
names the folder of its files (the graph's tables and memory-mapped arrays, its config, its LM programs): the
graph itself stays there, saved atomically by every change, rather than in one JSON file of the storage context.
LlamaIndex's type table is a plain mapping from type names, so the graph index adds its own name to it: importing
the package in any way registers an opener that imports the index class only when a saved graph is opened
(:func:`register_index_opener`), and importing :mod:`.index` registers the class itself
(:func:`register_index_class`).

The struct records no absolute path: a storage folder copied, moved or restored from a backup must open as itself,
never write into the folder it came from. A ``StorageContext`` read from disk does not say which folder it was read
from, so ``load_index_from_storage`` is given that folder as ``persist_dir=`` (or the index is opened with
``HippoGraphIndex.from_persist_dir``); without it the index refuses to open, and says what to pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llama_index.core.data_structs.data_structs import IndexStruct
from llama_index.core.data_structs.registry import INDEX_STRUCT_TYPE_TO_INDEX_STRUCT_CLASS
from llama_index.core.indices.registry import INDEX_STRUCT_TYPE_TO_INDEX_CLASS

__all__ = ["HIPPO_GRAPH_STRUCT_TYPE", "SAVED_BESIDE", "HippoGraphStruct", "register_index_class",
           "register_index_opener"]

#: The struct's type name in an index store's JSON.
HIPPO_GRAPH_STRUCT_TYPE = "hippo_graph"
#: ``persist_dir`` of a saved index: its files are in the folder its storage context is saved in.
SAVED_BESIDE = "."


@dataclass
class HippoGraphStruct(IndexStruct):
    """The graph index in an index store.

    Attributes:
        persist_dir: :data:`SAVED_BESIDE` for a saved index (its files are beside its storage context's; an index
            saved by an older version recorded an absolute path, which is never used to find them), or None for an
            index kept in memory.
    """

    persist_dir: str | None = None

    @classmethod
    def get_type(cls) -> Any:  # LlamaIndex types this as its enum; its tables look the value up as a string
        return HIPPO_GRAPH_STRUCT_TYPE


def register_index_class(index_class: type) -> None:
    """Let ``load_index_from_storage`` read the graph index's struct and reopen it with ``index_class``."""
    INDEX_STRUCT_TYPE_TO_INDEX_STRUCT_CLASS[HIPPO_GRAPH_STRUCT_TYPE] = HippoGraphStruct  # type: ignore[index]
    INDEX_STRUCT_TYPE_TO_INDEX_CLASS[HIPPO_GRAPH_STRUCT_TYPE] = index_class  # type: ignore[index]


def register_index_opener() -> None:
    """Let ``load_index_from_storage`` read the graph index's struct, and open it with the index class imported
    only then; the class itself, once imported, takes the opener's place."""
    INDEX_STRUCT_TYPE_TO_INDEX_STRUCT_CLASS[HIPPO_GRAPH_STRUCT_TYPE] = HippoGraphStruct  # type: ignore[index]
    INDEX_STRUCT_TYPE_TO_INDEX_CLASS.setdefault(HIPPO_GRAPH_STRUCT_TYPE, _open_saved_index)  # type: ignore[arg-type]


def _open_saved_index(**kwargs: Any) -> Any:
    from .index import HippoGraphIndex

    return HippoGraphIndex(**kwargs)
