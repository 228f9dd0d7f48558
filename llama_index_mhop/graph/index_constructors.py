"""The graph index's constructors: from documents or a corpus folder, from a Chroma-backed vector index, and from
the folder a saved index lives in.

:class:`IndexConstructors` is mixed into :class:`~.index.HippoGraphIndex`. A new index is built once, from its
settings (:class:`~.index_config.HippoGraphIndexConfig`); a saved one is opened by the index's constructor, given
the struct saved in its storage context (the road ``load_index_from_storage`` takes too), which reads and checks
its files (:mod:`.persistence`) before building it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager

from ..adapters.llama_index import index_embed_model
from ..stores.dimension_check import check_embedding_dimension
from ..stores.corpus import load_documents
from .extraction import Extractor, OpenIEExtractor
from .graph_stores import resolve_client, vector_index_collection
from .index_config import HippoGraphIndexConfig
from .indexing import BatchHook
from .json_files import DamagedFileError
from .layout import saved_index_exists
from .openie_file import with_stored_openie
from .persistence import discard_damaged_save, saved_storage
from .sync import corpus_of
from .writer import IndexWriter

__all__ = ["IndexConstructors"]

#: The index class a constructor builds (the host of the mixin).
Index = TypeVar("Index", bound="IndexConstructors")


class IndexConstructors:
    """The classmethods that build or reopen a graph index (a mixin of :class:`~.index.HippoGraphIndex`, whose
    constructor they call). The host provides its writer (``_writer``) and its ``extractor``."""

    _writer: IndexWriter
    extractor: Extractor

    @classmethod
    def from_documents(
        cls: type[Index],
        documents: Sequence[Document] | str | os.PathLike[str] | VectorStoreIndex,
        embed_model: BaseEmbedding | None = None,
        chroma_client: Any = None,
        persist_dir: str | os.PathLike[str] | None = None,
        lm: Any = None,
        llm: Any = None,
        show_progress: bool | None = None,
        *,
        config: HippoGraphIndexConfig | None = None,
        extractor: Extractor | None = None,
        on_batch_end: BatchHook | None = None,
        openie_results: str | os.PathLike[str] | None = None,
        storage_context: StorageContext | None = None,
        callback_manager: CallbackManager | None = None,
        **settings: Any,
    ) -> Index:
        """Index documents (a corpus path, see ``stores.load_documents``, or the passages of a Chroma-backed
        ``VectorStoreIndex`` with their stored embeddings) into a new or resumed index, by :meth:`insert`'s rule.

        With ``persist_dir``, the index is saved there when done, its Chroma data lives in ``persist_dir/chroma``
        (unless a ``chroma_client`` is given), and an interrupted build resumes from its checkpoint: calling this
        again with the same arguments continues where the last batch ended. A finished index already in
        ``persist_dir`` is reopened (with the settings it was built with) and only documents it lacks are added; a
        damaged one is rebuilt (see :meth:`reopen_or_discard`).

        Args:
            documents: LlamaIndex documents (their metadata is kept on the passage nodes), a corpus path, or a
                ``VectorStoreIndex`` over Chroma (see :meth:`from_vector_index`).
            embed_model: the embedder of all three stores; default the vector index's, else
                ``Settings.embed_model`` if the app set one, else all-MiniLM-L6-v2.
            chroma_client: a Chroma client; default ``persist_dir/chroma``, or a store of this index alone.
            persist_dir: where the config, graph and checkpoint are written.
            lm: a DSPy LM for OpenIE. llm: a LlamaIndex LLM for OpenIE. Neither: the LLM-free extractor (unless
                ``dspy.settings.lm`` is set).
            show_progress: show a progress bar over passages (a setting, as the keywords below).
            config: the index's settings (:class:`~.index_config.HippoGraphIndexConfig`: name, chunk_size,
                chunk_overlap, insert_batch_size, num_workers, synonymy_threshold, synonymy_top_k,
                title_edge_weight, short_text_batch_size, short_text_dtype, exact_synonymy_max_entities); or give
                them one by one as keywords (``**settings``), which replace those of ``config``.
            extractor: a custom extractor (anything with ``extract(text, title) -> Extraction``); overrides lm/llm.
            on_batch_end: called as ``on_batch_end(batch_number, passages_done)`` after each checkpointed batch.
            openie_results: a HippoRAG ``openie_results_ner_<model>.json``: passages whose text it holds take their
                extraction from it; the rest are extracted (the counts are logged at INFO).
            storage_context: the app's LlamaIndex storage for the index (its index store keeps the index's
                struct; default one of the index's own, saved in ``persist_dir``).
            callback_manager: LlamaIndex's callbacks (default ``Settings.callback_manager``).

        Raises:
            CorpusError: no text to index.
            ValueError: a bad name, or a setting unknown or out of range.
        """
        from ..stores.defaults import resolve_embed_model  # the defaults layer, only once it is needed

        config = HippoGraphIndexConfig.of(config, settings if show_progress is None
                                          else {**settings, "show_progress": show_progress})
        source = None
        docs: list[Document] = []
        if isinstance(documents, VectorStoreIndex):
            source = vector_index_collection(documents)
            # LlamaIndex keeps the index's embedder private; its stored vectors are only comparable with its queries.
            embed_model = embed_model or index_embed_model(documents)
        else:
            docs = load_documents(documents)
        embed_model = resolve_embed_model(embed_model)
        if source is not None:  # its stored vectors are read as they are: the embedder must fit them
            check_embedding_dimension(source, embed_model)
        index = None
        if persist_dir is not None and saved_index_exists(Path(persist_dir)):
            index = cls.reopen_or_discard(persist_dir, chroma_client=chroma_client, embed_model=embed_model, lm=lm,
                                          llm=llm, storage_context=storage_context,  # with the saved OpenIE program
                                          config=config)
        if index is not None:
            index.extractor = with_stored_openie(extractor or index.extractor, openie_results)
        else:
            client, mode = resolve_client(chroma_client, persist_dir)
            index = cls(storage_context=storage_context, callback_manager=callback_manager, config=config,
                        chroma_client=client, embed_model=embed_model, persist_dir=persist_dir, chroma_mode=mode,
                        extractor=with_stored_openie(extractor or OpenIEExtractor(lm=lm, llm=llm), openie_results))
        index._writer.follow(index.extractor, source, docs, on_batch_end, corpus_of(documents))
        return index

    @classmethod
    def from_vector_index(cls: type[Index], vector_index: VectorStoreIndex, **kwargs: Any) -> Index:
        """A graph index over the passages of a Chroma-backed ``VectorStoreIndex``, reusing their nodes and
        stored embeddings (only entities and facts are embedded). ``kwargs`` are :meth:`from_documents`'s.

        In the vector index's own Chroma store (the same ``chroma_client``, or the same persistent path) the graph
        reads the vector index's collection in place instead of copying it: its passages are stored once, and
        the graph neither writes to that collection nor deletes from it. Passages the graph gets later that the
        vector index lacks go into the graph's own passage collection. In another store the passages are copied.

        Raises:
            TypeError: the index does not keep its nodes in Chroma.
        """
        return cls.from_documents(vector_index, **kwargs)

    @classmethod
    def reopen_or_discard(cls: type[Index], persist_dir: str | os.PathLike[str], **kwargs: Any) -> Index | None:
        """The index saved in ``persist_dir`` (:meth:`from_persist_dir`, with ``kwargs``), or None when its save is
        damaged: its derived files are then removed (logged, :func:`~.persistence.discard_damaged_save`), so that
        the build that follows writes them again from Chroma and the corpus.

        Raises:
            ValueError: the save is damaged and its Chroma store cannot be read, so nothing can be rebuilt (one
                line naming both and what to do); :meth:`from_persist_dir`'s other errors.
        """
        try:
            return cls.from_persist_dir(persist_dir, **kwargs)
        except DamagedFileError as exc:
            discard_damaged_save(Path(persist_dir), exc, kwargs.get("chroma_client"))
            return None

    @classmethod
    def from_persist_dir(
        cls: type[Index],
        persist_dir: str | os.PathLike[str],
        chroma_client: Any = None,
        embed_model: BaseEmbedding | None = None,
        lm: Any = None,
        llm: Any = None,
        show_progress: bool | None = None,
        storage_context: StorageContext | None = None,
        *,
        config: HippoGraphIndexConfig | None = None,
    ) -> Index:
        """Reopen an index saved by :meth:`persist` (or by a build with ``persist_dir``), in the storage context
        saved beside it (``load_index_from_storage(StorageContext.from_defaults(persist_dir=DIR), persist_dir=DIR)``
        is the same). The folder may have been copied, moved or restored: it opens where it lies, as itself.

        Args:
            persist_dir: the directory :meth:`persist` wrote (the graph's edge arrays are memory-mapped read-only).
            chroma_client: the Chroma client holding the collections; default ``persist_dir/chroma`` for an index
                whose Chroma data lives there, else :func:`~llama_index_mhop.stores.defaults.default_chroma_client`.
            embed_model: the embedder (it must be the one the index was built with); default
                ``Settings.embed_model`` if the app set one, else all-MiniLM-L6-v2.
            lm, llm: the LM for OpenIE of later inserts.
            show_progress: show a progress bar over passages of later inserts.
            storage_context: the app's storage context to reopen the index in, instead of the one saved beside it.
            config: settings the index was not saved with (``num_workers``, ``show_progress``); the others are the
                saved index's.

        Raises:
            FileNotFoundError: no saved index in ``persist_dir``.
            ValueError: an unknown format version, or Chroma collections that do not hold the graph's records.
        """
        root = Path(persist_dir)
        saved_context, struct = saved_storage(root)
        settings = {} if show_progress is None else {"show_progress": show_progress}
        return cls(index_struct=struct, storage_context=storage_context or saved_context, chroma_client=chroma_client,
                   embed_model=embed_model, persist_dir=root, lm=lm, llm=llm, config=config, **settings)
