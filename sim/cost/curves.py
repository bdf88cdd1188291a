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

    def outside(self, x: float, formula: float, edge: float | None) -> float:
        """Seconds at a count ``x`` outside the knots, where a component's formula gives
        ``formula``: from one count up to the first knot, the first knot's time (a kernel
        on fewer rows is no cheaper); past the last knot the formula's value scaled to
        meet the last knot (``edge``: the formula at the last knot's count), so the price
        does not jump where the measurements end; else, or without an ``edge`` above 0,
        the formula's own."""
        if x > self.xs[-1]:
            if edge is not None and edge > 0:
                return self.ys[-1] * formula / edge
            return formula
        if x >= 1:
            return self.ys[0]
        return formula

    def over_edges(self, x: Any, formula: Any, edge: float | None) -> Any:
        """:meth:`outside` and the knots inside their range, for an array of counts ``x``
        and the formula's values ``formula`` at them (the same floats as one count at a
        time)."""
        x = np.asarray(x, dtype=float)
        formula = np.asarray(formula, dtype=float)
        past = self.ys[-1] * formula / edge if edge is not None and edge > 0 else formula
        out = np.where(x > self.xs[-1], past, np.where(x >= 1, self.ys[0], formula))
        return self.over(x, out)

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
        """Seconds at row quantity ``r`` and column quantity ``c`` (numbers): rows
        joined first, then columns (the order :meth:`over` uses)."""
        rows, cols, v = self.rows, self.cols, self.values
        scale = r / rows[-1] if r > rows[-1] else 1.0
        if r <= rows[0]:
            lo = hi = v[0]
            w = 0.0
        elif r >= rows[-1]:
            lo = hi = v[-1]
            w = 0.0
        else:
            i = bisect_right(rows, r)
            lo, hi = v[i - 1], v[i]
            w = (r - rows[i - 1]) / (rows[i] - rows[i - 1])
        if c >= cols[-1]:
            return scale * ((lo[-1] + (hi[-1] - lo[-1]) * w) * (c / cols[-1]))
        if c <= cols[0]:
            return scale * (lo[0] + (hi[0] - lo[0]) * w)
        j = bisect_right(cols, c)
        a = lo[j - 1] + (hi[j - 1] - lo[j - 1]) * w
        b = lo[j] + (hi[j] - lo[j]) * w
        return scale * (a + (b - a) * ((c - cols[j - 1]) / (cols[j] - cols[j - 1])))

    def run_at(self, r: float, c: float, k: int) -> float:
        """Σ at(r, c + i) for i < k: seconds of k points one column unit apart at row
        quantity ``r``. The row is joined once; where all k points share a column
        interval (or all lie past the last column, or before the first) the sum is
        linear in them and is taken at their mean, else point by point."""
        if k == 1:
            return self.at(r, c)
        cols = self.cols
        last = c + (k - 1)
        mean = c + (k - 1) / 2
        if c >= cols[-1] or last <= cols[0]:
            return k * self.at(r, mean)
        j = bisect_right(cols, c)
        if c > cols[0] and j < len(cols) and last <= cols[j]:
            return k * self.at(r, mean)
        return sum(self.at(r, c + i) for i in range(k))

    def over(self, r: Any, c: Any) -> Any:
        """Seconds at arrays of row and column quantities (elementwise), with the
        arithmetic of :meth:`at`."""
        rows, cols = np.asarray(self.rows), np.asarray(self.cols)
        v = np.asarray(self.values)
        r, c = np.asarray(r, dtype=float), np.asarray(c, dtype=float)
        scale = np.where(r > rows[-1], r / rows[-1], 1.0)
        i = np.clip(np.searchsorted(rows, r, side="right"), 1, max(len(rows) - 1, 1))
        if len(rows) > 1:
            wr = (np.clip(r, rows[0], rows[-1]) - rows[i - 1]) / (rows[i] - rows[i - 1])
            lo, hi = v[i - 1], v[i]
            vals = lo + (hi - lo) * wr[..., None]
        else:
            vals = np.broadcast_to(v[0], r.shape + (len(cols),))
        vals = np.where((r <= rows[0])[..., None], v[0], vals)
        vals = np.where((r >= rows[-1])[..., None], v[-1], vals)
        j = np.clip(np.searchsorted(cols, c, side="right"), 1, max(len(cols) - 1, 1))
        take = np.take_along_axis
        a = take(vals, (j - 1)[..., None], axis=-1)[..., 0]
        if len(cols) > 1:
            b = take(vals, j[..., None], axis=-1)[..., 0]
            inside = a + (b - a) * ((c - cols[j - 1]) / (cols[j] - cols[j - 1]))
        else:
            inside = a
        out = np.where(c >= cols[-1], vals[..., -1] * (c / cols[-1]),
                       np.where(c <= cols[0], vals[..., 0], inside))
        return scale * out
