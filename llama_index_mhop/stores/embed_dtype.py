"""The arithmetic a local embedder runs in: float32, or bfloat16 on a CPU that multiplies bfloat16 natively.
On a CPU with bfloat16 instructions (AVX-512 BF16, AMX) torch's autocast runs a graph index's many short-text
embeddings about twice as fast, each vector within cosine 0.9999 of float32's; elsewhere bfloat16 is emulated
and slower, so float32 is used (logged once at INFO). Autocast reaches only an embedder that runs torch in the
calling thread; a process that has not imported torch never loads it for this."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

__all__ = ["EMBED_DTYPES", "EmbedDType", "check_embed_dtype", "embedding_dtype", "native_bfloat16"]

logger = logging.getLogger(__name__)

EmbedDType = Literal["float32", "bfloat16"]
EMBED_DTYPES: tuple[str, ...] = ("float32", "bfloat16")


def check_embed_dtype(dtype: str) -> EmbedDType:
    """``dtype`` if it is one of :data:`EMBED_DTYPES`, else ValueError."""
    if dtype not in EMBED_DTYPES:
        raise ValueError(f"embedding dtype must be one of {', '.join(EMBED_DTYPES)}, got {dtype!r}")
    return dtype  # type: ignore[return-value]


@functools.cache
def native_bfloat16() -> bool:
    """Whether torch is installed and this CPU multiplies bfloat16 in hardware."""
    try:
        import torch

        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:  # no torch, or a build without oneDNN: no native bfloat16 to use
        return False


@contextmanager
def embedding_dtype(dtype: EmbedDType) -> Iterator[EmbedDType]:
    """Run the embedding calls inside the block in ``dtype``; yields the dtype actually used."""
    if dtype != "float32" and "torch" in sys.modules:
        if native_bfloat16():
            import torch

            with torch.autocast("cpu", dtype=torch.bfloat16):
                yield "bfloat16"
            return
        _note_emulated()
    yield "float32"


@functools.cache
def _note_emulated() -> None:
    logger.info("this CPU has no native bfloat16 (or torch is missing): short texts are embedded in float32")
