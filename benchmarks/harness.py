"""Benchmarks runnable from the CLI (`nas bench ...`)."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(rows: Sequence[Sequence[str]], *, rule: bool = False) -> str:
    """Rows of cells as aligned text: the first column left-aligned, the others right-aligned; with
    ``rule`` a line of dashes under the first row (the header).

    >>> print(text_table([["side", "s/trial"], ["ours", "0.0012"], ["tune", "0.0419"]], rule=True))
    side  s/trial
    -------------
    ours   0.0012
    tune   0.0419
    """
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))) for r in rows]
    if rule:
        lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)
