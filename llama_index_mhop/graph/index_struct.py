"""The graph index's index struct, and the registration that lets ``load_index_from_storage`` reopen it. The struct
records no absolute path, so a folder copied or moved opens as itself (given as ``persist_dir=``)."""

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
    """The graph index in an index store; ``persist_dir``: :data:`SAVED_BESIDE` for a saved index (an older
    version's absolute path is never used), None for one kept in memory."""

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
