"""Untrusted text made safe to print: plain Rich ``Text`` with control characters shown as escapes.

Passage text, titles, queries, LM answers and error messages that quote them are data. Printed as a Rich
markup string, ``[/bold]`` in a passage crashes the print and ``[link=...]`` becomes a hyperlink; printed raw,
ESC sequences reach the terminal (colours, cursor moves, window titles) and bidi overrides reorder what is shown.
The escaping itself is :func:`llama_index_mhop.text.escape_controls`, which log lines use too.
"""

from __future__ import annotations

from rich.text import Text

from .text import escape_controls

__all__ = ["escape_controls", "plain_text"]


def plain_text(value: object, style: str = "") -> Text:
    """``value`` as Rich text that is never read as markup, with control characters escaped."""
    return Text(escape_controls(value), style=style)
