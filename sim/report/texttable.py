"""Right-aligned columns of the tables a run prints (latencies, classes, stages).

A fixed width per column ran cells together once a value outgrew it (a TTFT of
7153086.5 ms beside 15714971.4 ms read as one number); here each column is as wide as
its widest cell or label needs, plus one space, and never narrower than the width
the tables have always used, so ordinary runs print as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def right_columns(labels: Sequence[str], rows: Sequence[Sequence[str]], least: int = 10
                  ) -> tuple[str, list[str]]:
    """The header text of the columns ``labels`` and each row's cells (already written
    as text, one per label), right-aligned in columns at least ``least`` characters
    wide with at least one space before every label and cell."""
    widths = [max(least, len(label) + 1, *(len(r[i]) + 1 for r in rows))
              for i, label in enumerate(labels)]
    head = "".join(f"{c:>{w}}" for c, w in zip(labels, widths, strict=True))
    return head, ["".join(f"{c:>{w}}" for c, w in zip(r, widths, strict=True)) for r in rows]


def left_width(least: int, names: Sequence[str]) -> int:
    """The width of a left-aligned first column: ``least``, or one more than its
    longest name."""
    return max([least, *(len(n) + 1 for n in names)])  # a list: no names is ``least``


def cell(v: float | None, fmt: str, none: str = "-") -> str:
    """A table cell: ``v`` formatted by ``fmt``, or ``none`` when there is no value."""
    return none if v is None else format(v, fmt)


def ms_cell(d: Mapping[str, float | None], k: str) -> str:
    """The latency ``d[k]`` (s) as a cell in milliseconds, one decimal."""
    v = d[k]
    return "-" if v is None else f"{v * 1e3:.1f}"
