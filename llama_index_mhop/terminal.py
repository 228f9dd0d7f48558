"""Untrusted text made safe to print: plain Rich ``Text`` with control characters shown as escapes.

Passage text, titles, queries, LM answers and error messages that quote them are data. Printed as a Rich
markup string, ``[/bold]`` in a passage crashes the print and ``[link=...]`` becomes a hyperlink; printed raw,
ESC sequences reach the terminal (colours, cursor moves, window titles) and bidi overrides reorder what is shown.
"""

from __future__ import annotations

import unicodedata

from rich.text import Text

__all__ = ["escape_controls", "plain_text"]


def _visible(char: str) -> str:
    # Cc: C0/C1 controls and DEL (ESC, NUL, BEL...); Cf: format characters (bidi overrides, zero-width).
    if unicodedata.category(char) in ("Cc", "Cf"):
        return char.encode("unicode_escape").decode("ascii")
    return char


def escape_controls(text: str) -> str:
    """``text`` with every control and format character written as its escape (``"\\x1b"``, ``"\\u202e"``)."""
    if text.isprintable():  # the common case, checked in C
        return text
    return "".join(_visible(char) for char in text)


def plain_text(value: object, style: str = "") -> Text:
    """``value`` as Rich text that is never read as markup, with control characters escaped."""
    return Text(escape_controls(str(value)), style=style)
