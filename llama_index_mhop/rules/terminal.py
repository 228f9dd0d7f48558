"""What the package shows on a terminal: untrusted text (passages, titles, LM answers) as plain Rich ``Text``
with control characters escaped, never as markup or raw escape sequences; and progress bars."""

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
