"""What the package shows on a terminal: untrusted text made safe to print, and progress bars.

Untrusted text is shown as plain Rich ``Text`` with control characters shown as escapes.

Passage text, titles, queries, LM answers and error messages that quote them are data. Printed as a Rich
markup string, ``[/bold]`` in a passage crashes the print and ``[link=...]`` becomes a hyperlink; printed raw,
ESC sequences reach the terminal (colours, cursor moves, window titles) and bidi overrides reorder what is shown.
The escaping itself is :func:`llama_index_mhop.rules.text.escape_controls`, which log lines use too.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from rich.text import Text
from tqdm.auto import tqdm

from .text import escape_controls

__all__ = ["PROGRESS_DELAY", "escape_controls", "plain_text", "progress"]

T = TypeVar("T")

#: Seconds of work before a progress bar appears: shorter work shows none.
PROGRESS_DELAY = 1.0


def plain_text(value: object, style: str = "") -> Text:
    """``value`` as Rich text that is never read as markup, with control characters escaped."""
    return Text(escape_controls(value), style=style)


def progress(iterable: Iterable[T] | None = None, show: bool = True, **kwargs: Any) -> tqdm:
    """A tqdm progress bar shown only when ``show``, on a terminal, and after :data:`PROGRESS_DELAY` seconds of
    work: piped output and short work get none. ``kwargs`` are tqdm's (``total``, ``desc``, ``unit``)."""
    return tqdm(iterable, disable=None if show else True, delay=PROGRESS_DELAY, **kwargs)
