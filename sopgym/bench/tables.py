"""Plain-text tables as the commands print them: a header, a rule, then left-aligned columns (the library's
tables, sopgym/bench/eval_command.py, and the command layer's, sopgym/cli/list_envs.py)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["table"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``header`` and ``rows`` as aligned columns, two spaces apart, with a dashed rule under the header."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(line, widths)).rstrip() for line in (header, *rows)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
