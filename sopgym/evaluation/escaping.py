"""Text from trajectory and results files, made safe for where it is printed: a terminal, a Markdown
table, a CSV cell. The one place these rules live (``sopgym show``, ``sopgym report``).

What a model, a tool or a results file wrote is data: it must never drive the terminal (escape
sequences that retitle the window, clear the screen, colour a fake line, or a carriage return that
overwrites the line), add a row or a column to a Markdown table, or run as a spreadsheet formula.

* :func:`visible`: every control character (C0 but the line feed and the tab, DEL, C1), every
  bidirectional control and the Unicode line and paragraph separators are written as escapes
  (``\\x1b``, ``\\u202e``). ``newlines=False`` escapes the line feed and the tab too.
* :func:`markdown_cell`: one line (:func:`visible` without newlines) whose characters that Markdown
  reads inline (``\\ | ` * _ ~ [ ] < >``) are backslash-escaped: a cell stays one cell of its row.
* :func:`csv_cell`: a string cell that a spreadsheet would read as a formula (it starts with ``=``,
  ``+``, ``-``, ``@``, a tab or a carriage return, or their full-width forms) gets a leading ``'``,
  as OWASP recommends; numbers are left as numbers.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["visible", "markdown_cell", "csv_cell"]

_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNSAFE = re.compile(f"[{_CONTROLS}]")
_UNSAFE_OR_NEWLINE = re.compile(f"[{_CONTROLS}\n\t]")
_MARKDOWN = re.compile(r"([\\|`*_~\[\]<>])")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str, *, newlines: bool = True) -> str:
    """``text`` with its control characters written as escapes (line feeds and tabs kept when
    ``newlines``); a ``\\r\\n`` line ending counts as a line feed."""
    if newlines:
        return _UNSAFE.sub(_escape, text.replace("\r\n", "\n"))
    return _UNSAFE_OR_NEWLINE.sub(_escape, text)


def markdown_cell(value: Any) -> str:
    """``value`` as the text of one Markdown table cell."""
    return _MARKDOWN.sub(r"\\\1", visible(str(value), newlines=False))


def csv_cell(value: Any) -> Any:
    """``value`` for a CSV cell: strings on one line and never a formula; other values unchanged."""
    if not isinstance(value, str):
        return value
    text = visible(value, newlines=False)
    return "'" + text if value.startswith(_FORMULA_START) else text
