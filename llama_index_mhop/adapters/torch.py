"""torch names outside its public API, each behind one function, so a torch release that moves them breaks here."""

from __future__ import annotations

from typing import Any

__all__ = ["has_int8_matmul", "int8_matmul"]


def has_int8_matmul() -> bool:
    """Whether this torch has the int8-weight matrix product :func:`int8_matmul` calls."""
    import torch

    return hasattr(torch, "_weight_int8pack_mm")


def int8_matmul(query: Any, codes: Any, scales: Any) -> Any:
    """``query @ (codes * scales[:, None]).T`` (bfloat16 ``(m, k)``, int8 ``(n, k)``, bfloat16 ``(n,)``; ``k`` a
    multiple of 16) by torch's weight-only int8 kernel ``torch._weight_int8pack_mm``; RuntimeError without it."""
    import torch

    if not has_int8_matmul():
        raise RuntimeError("this torch has no _weight_int8pack_mm")
    return torch._weight_int8pack_mm(query, codes, scales)
