"""torch names outside its public API, each behind one function, so a torch release that moves them breaks here."""

from __future__ import annotations

from typing import Any

__all__ = ["has_int8_matmul", "int8_matmul"]


def has_int8_matmul() -> bool:
    """Whether this torch has the int8-weight matrix product :func:`int8_matmul` calls."""
    import torch

    return hasattr(torch, "_weight_int8pack_mm")


def int8_matmul(query: Any, codes: Any, scales: Any) -> Any:
    """``query @ (codes * scales[:, None]).T`` by torch's weight-only int8 kernel (``torch._weight_int8pack_mm``).

    Args:
        query: ``(m, k)`` bfloat16 tensor (``k`` a multiple of 16).
        codes: ``(n, k)`` int8 tensor, one row per output column.
        scales: ``(n,)`` bfloat16 tensor, each row's scale.

    Returns:
        The ``(m, n)`` bfloat16 product.

    Raises:
        RuntimeError: this torch has no such kernel.
    """
    import torch

    if not has_int8_matmul():
        raise RuntimeError("this torch has no _weight_int8pack_mm")
    return torch._weight_int8pack_mm(query, codes, scales)
