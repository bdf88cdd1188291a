"""Measured curves a profile component may carry instead of, or beside, its formula.

- :class:`Knots`: seconds measured at chosen counts of one shape quantity (tokens or
  sequences), joined by straight lines. Inside the measured range it replaces the
  component's formula; outside it the formula prices. A GEMM's time is a staircase in
  its rows (kernels handle rows in tiles), and a table measured at the tile edges and
  one past them (16, 17, 32, 33, ...) keeps the steps where a line through the points
  would smooth them away. Knots at every count 1..N are the measured tables of
  ``calibrate`` (the same prices: the line through whole-number knots is only ever read
  at whole numbers).
- :class:`Grid`: seconds measured over two quantities, for decode attention the decode
  entries b and the mean KV tokens each reads c, joined bilinearly.

Both price one step with Python floats (``at``) or many at once with numpy (``over``),
the same arithmetic in the same order, so the two agree to rounding.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def _checked_axis(xs: Sequence[float], what: str) -> tuple[float, ...]:
    out = tuple(float(x) for x in xs)
    if not out or any(b <= a for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"{what} must be a non-empty, strictly increasing list")
    return out


@dataclass(frozen=True)
class Knots:
    """Seconds ``ys`` at counts ``xs`` (strictly increasing), linear in between."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "xs", _checked_axis(self.xs, "knot counts"))
        object.__setattr__(self, "ys", tuple(float(y) for y in self.ys))
        if len(self.ys) != len(self.xs):
            raise ValueError(f"{len(self.ys)} times for {len(self.xs)} knot counts")

    @classmethod
    def counts(cls, ys: Sequence[float]) -> Knots:
        """Knots at every count 1, 2, ..., len(ys)."""
        return cls(tuple(float(i) for i in range(1, len(ys) + 1)), tuple(ys))

    def at(self, x: float) -> float | None:
        """Seconds at count ``x`` inside the knots' range, None outside it."""
        xs = self.xs
        if x < xs[0] or x > xs[-1]:
            return None
        i = bisect_right(xs, x)
        if xs[i - 1] == x:
            return self.ys[i - 1]
        x0, y0 = xs[i - 1], self.ys[i - 1]
        return y0 + (self.ys[i] - y0) * (x - x0) / (xs[i] - x0)

    def over(self, x: Any, otherwise: Any) -> Any:
        """Seconds at each count of array ``x``: the knots inside their range,
        ``otherwise`` (an array or a number) outside it."""
        x = np.asarray(x, dtype=float)
        xs, ys = np.asarray(self.xs), np.asarray(self.ys)
        inside = (x >= xs[0]) & (x <= xs[-1])
        i = np.clip(np.searchsorted(xs, x, side="right"), 1, len(xs) - 1)
        x0, y0 = xs[i - 1], ys[i - 1]
        with np.errstate(invalid="ignore", divide="ignore"):
            line = y0 + (ys[i] - y0) * (x - x0) / (xs[i] - x0)
        exact = x == x0
        at = np.where(exact, y0, np.where(x == xs[-1], ys[-1], line))
        return np.where(inside, at, otherwise)


@dataclass(frozen=True)
class Grid:
    """Seconds ``values[i][j]`` at ``rows[i]`` × ``cols[j]``, bilinear in between.

    Past the last row or column a value grows in proportion (a decode batch of twice the
    largest measured entries, or twice the longest measured context, reads twice the
    KV); before the first it is held at the first (one entry, one cached token are the
    smallest there are).
    """

    rows: tuple[float, ...]
    cols: tuple[float, ...]
    values: tuple[tuple[float, ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", _checked_axis(self.rows, "grid rows"))
        object.__setattr__(self, "cols", _checked_axis(self.cols, "grid columns"))
        vals = tuple(tuple(float(v) for v in row) for row in self.values)
        if len(vals) != len(self.rows) or any(len(r) != len(self.cols) for r in vals):
            raise ValueError(f"grid values must be {len(self.rows)} rows of "
                             f"{len(self.cols)} numbers")
        object.__setattr__(self, "values", vals)

    def at(self, r: float, c: float) -> float:
        """Seconds at row quantity ``r`` and column quantity ``c`` (numbers)."""
        rows, cols, v = self.rows, self.cols, self.values
        scale = 1.0
        if r > rows[-1]:
            scale, r = r / rows[-1], rows[-1]
        if c > cols[-1]:
            scale, c = scale * c / cols[-1], cols[-1]
        r, c = max(r, rows[0]), max(c, cols[0])
        i = min(bisect_right(rows, r), len(rows) - 1) if len(rows) > 1 else 0
        j = min(bisect_right(cols, c), len(cols) - 1) if len(cols) > 1 else 0
        wr = (r - rows[i - 1]) / (rows[i] - rows[i - 1]) if i else 0.0
        wc = (c - cols[j - 1]) / (cols[j] - cols[j - 1]) if j else 0.0
        i0, j0 = max(i - 1, 0), max(j - 1, 0)
        lo = v[i0][j0] + (v[i0][j] - v[i0][j0]) * wc
        hi = v[i][j0] + (v[i][j] - v[i][j0]) * wc
        return scale * (lo + (hi - lo) * wr)

    def over(self, r: Any, c: Any) -> Any:
        """Seconds at arrays of row and column quantities (elementwise)."""
        rows, cols = np.asarray(self.rows), np.asarray(self.cols)
        v = np.asarray(self.values)
        r, c = np.asarray(r, dtype=float), np.asarray(c, dtype=float)
        scale = np.where(r > rows[-1], r / rows[-1], 1.0)
        scale = scale * np.where(c > cols[-1], c / cols[-1], 1.0)
        r = np.clip(r, rows[0], rows[-1])
        c = np.clip(c, cols[0], cols[-1])

        def locate(x: np.ndarray, axis: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if len(axis) == 1:
                return np.zeros(x.shape, dtype=np.int64), np.zeros(x.shape)
            k = np.minimum(np.searchsorted(axis, x, side="right"), len(axis) - 1)
            w = (x - axis[k - 1]) / (axis[k] - axis[k - 1])
            return k, np.where(k > 0, w, 0.0)

        i, wr = locate(r, rows)
        j, wc = locate(c, cols)
        i0, j0 = np.maximum(i - 1, 0), np.maximum(j - 1, 0)
        lo = v[i0, j0] + (v[i0, j] - v[i0, j0]) * wc
        hi = v[i, j0] + (v[i, j] - v[i, j0]) * wc
        return scale * (lo + (hi - lo) * wr)
