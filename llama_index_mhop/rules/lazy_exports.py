"""A package's exported names imported on first use (PEP 562), so importing a light module of the package
imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose name ``n`` lives in module ``exports[n]``
    (relative to ``package``); ``namespace`` is the package's ``globals()``, where each is kept once imported."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # imported once: later lookups do not come here
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})
    return __getattr__, __dir__
