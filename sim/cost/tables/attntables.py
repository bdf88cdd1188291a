"""Attention latency tables at a model's heads per GPU.

The public tables time prefill (``context_attention_perf``: ``batch_size`` sequences
of ``isl`` tokens each, no cached prefix) and decode (``generation_attention_perf``:
``batch_size`` sequences of one new token over ``step`` cached tokens) for listed
combinations of query heads, KV heads and head size. This module picks the rows for
one model shard:

- **kernel**: a table may hold several attention backends; the one with the most
  measured rows is the collection's default backend for that GPU and framework (FA3
  on Hopper, FA2 on Ampere and Ada, FlashInfer's TRT-LLM kernels on Blackwell under
  vLLM), and the one used. Its name is recorded in the profile.
- **query heads** not measured at the shard's KV heads and head size: linear
  interpolation between the nearest measured head counts (attention work and launch
  grids grow with the heads), in proportion past the largest, and the nearest measured
  count below the smallest. Which happened is returned as a note.
- KV heads or a head size the table lacks: an error listing what it has.
- **window**: dense attention (``window_size`` 0) unless a sliding window is asked for;
  :func:`windows` lists the windows a table measured.
- **isolated spikes**: a measured cell more than :data:`SPIKE` times every one of its
  (up to four) grid neighbours, in batch and in tokens, at least one of them a larger
  problem and two of them on either side of it, is a glitch of the collection: a larger
  problem is not that much faster. Its value is replaced by the neighbours'
  interpolation (the mean over the axes where it has a neighbour on each side), before
  heads are matched, and the note says which cell. Cells at an edge are kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.cost.curves import Grid
from sim.cost.tables.kerneltables import Table
from sim.errors import ServesimError


def default_kernel(table: Table) -> str:
    """The kernel source with the most rows in ``table``."""
    names, counts = np.unique(table.columns["kernel_source"], return_counts=True)
    return str(names[int(np.argmax(counts))])


@dataclass(frozen=True)
class AttentionRows:
    """Measured attention latencies at one shard's heads: ``batch`` sequences,
    ``tokens`` (prefill: each sequence's new tokens; decode: cached tokens + 1),
    ``seconds``; ``kernel`` the backend used; ``note`` how the heads were matched."""

    batch: np.ndarray
    tokens: np.ndarray
    seconds: np.ndarray
    kernel: str
    note: str


Keyed = dict[tuple[int, ...], float]


# How many times every neighbour a cell must exceed to be taken for a glitch. The
# tables' own neighbours differ by far less: attention over twice the batch or twice
# the tokens costs at most about twice as much, and rarely much less than before.
SPIKE = 2.0


def _rows_at(table: Table, heads: int, cols: tuple[str, ...]) -> tuple[Keyed, list[str]]:
    """Seconds of the rows at ``heads`` keyed by ``cols``, isolated spikes replaced, and
    a description of each replaced cell."""
    t = table.where(num_heads=heads)
    c = t.columns
    rows = {tuple(int(x) for x in key): float(s) / 1e3
            for key, s in zip(zip(*(c[k] for k in cols), strict=True), c["latency"],
                              strict=True)}
    return screen_spikes(rows, cols)


def screen_spikes(rows: Keyed, cols: tuple[str, ...]) -> tuple[Keyed, list[str]]:
    """``rows`` over a two-column grid with isolated spikes (the module doc) replaced,
    and what was replaced (``cols`` name the key's columns); other keys unchanged."""
    if len(cols) != 2 or not rows:
        return rows, []
    axes = [sorted({k[a] for k in rows}) for a in (0, 1)]
    out, said = dict(rows), []
    for key, v in rows.items():
        near: list[float] = []
        across: list[float] = []
        larger = False
        for a in (0, 1):
            grid = axes[a]
            i = grid.index(key[a])
            side = [(grid[i + d], rows.get(_moved(key, a, grid[i + d])))
                    for d in (-1, 1) if 0 <= i + d < len(grid)]
            have = [(x, y) for x, y in side if y is not None]
            near += [y for _, y in have]
            larger = larger or any(x > key[a] for x, _ in have)
            if len(have) == 2:
                (x0, y0), (x1, y1) = have
                across.append(y0 + (y1 - y0) * (key[a] - x0) / (x1 - x0))
        # Twice the work may take twice the time: only a cell above a larger problem's
        # time as well is out of line, and only one with neighbours on both sides of an
        # axis (at an edge a steep but real trend cannot be told from a glitch).
        if not across or not larger or v <= SPIKE * max(near):
            continue
        out[key] = sum(across) / len(across)
        where = ", ".join(f"{n} {x}" for n, x in zip(cols, key, strict=True))
        said.append(f"a cell {v / max(near):.1f}x its neighbours' largest ({where}: "
                    f"{v * 1e6:.1f} us) set to {out[key] * 1e6:.1f} us")
    return out, said


def _moved(key: tuple[int, ...], axis: int, value: int) -> tuple[int, ...]:
    return tuple(value if a == axis else k for a, k in enumerate(key))


def rows_at_heads(t: Table, heads: int, cols: tuple[str, ...]) -> tuple[Keyed, str]:
    """Seconds of ``t``'s rows keyed by their values of ``cols`` (counts) at ``heads``
    query heads a GPU, matched as the module doc says, and a note of how."""
    measured = [int(h) for h in t.values("num_heads")]
    below = [h for h in measured if h < heads]
    above = [h for h in measured if h > heads]
    if heads in measured:
        rows, said = _rows_at(t, heads, cols)
        note = f"{heads} heads measured"
    elif below and above:
        lo, hi = max(below), min(above)
        (a, said), (b, more) = _rows_at(t, lo, cols), _rows_at(t, hi, cols)
        said = [f"at {lo} heads, {x}" for x in said] + [f"at {hi} heads, {x}" for x in more]
        w = (heads - lo) / (hi - lo)
        rows = {key: a[key] * (1 - w) + b[key] * w for key in a.keys() & b.keys()}
        note = f"{heads} heads interpolated between measured {lo} and {hi}"
    elif below:
        lo = max(below)
        rows, said = _rows_at(t, lo, cols)
        rows = {key: v * heads / lo for key, v in rows.items()}
        note = f"{heads} heads scaled in proportion from measured {lo}"
    else:
        hi = min(above)
        rows, said = _rows_at(t, hi, cols)
        note = f"{heads} heads priced as measured {hi}"
    return rows, "; ".join([note, *said])


def windows(table: Table) -> list[int]:
    """The sliding windows (tokens) ``table`` measured, besides dense attention (0)."""
    return [int(w) for w in table.values("window_size") if w] if table.has("window_size") else []


def select(table: Table, heads: int, kv_heads: int, head_dim: int, kv_dtype: str,
           decode: bool, window: int = 0) -> AttentionRows:
    """Rows of ``table`` for ``heads`` query and ``kv_heads`` KV heads per GPU of
    ``head_dim``, KV cache in ``kv_dtype`` (the tables' names: bfloat16, fp8), attention
    over a sliding ``window`` of tokens (0: dense attention), the default kernel."""
    where = f"{table.name} ({table.path})"
    kernel = default_kernel(table)
    t = table.where(kernel_source=kernel, beam_width=1, window_size=window,
                    optional=("beam_width", "window_size"))
    for col, want, what in (("head_dim", head_dim, "head sizes"),
                            ("kv_cache_dtype", kv_dtype, "KV-cache dtypes"),
                            ("num_key_value_heads", kv_heads, "KV heads per GPU")):
        have = t.values(col)
        if want not in have:
            raise ServesimError(f"{where} has no rows for {col.replace('_', ' ')} {want!r}; "
                                f"its {what}: {', '.join(map(str, have))}")
        equal: dict[str, Any] = {col: want}
        t = t.where(**equal)
    return attention_rows(t, heads, decode, kernel, f"{where}: no measured rows at {heads} "
                                                    f"heads, {kv_heads} KV heads")


def attention_rows(t: Table, heads: int, decode: bool, kernel: str, empty: str) -> AttentionRows:
    """:class:`AttentionRows` of ``t`` (one kernel, one KV dtype) at ``heads`` a GPU:
    ``tokens`` are the cached tokens + 1 (decode: the ``step`` column) or the new tokens
    (prefill: ``isl``); ``empty`` is the error when no row matches."""
    rows, note = rows_at_heads(t, heads, ("batch_size", "step" if decode else "isl"))
    if not rows:
        raise ServesimError(empty)
    keys = sorted(rows)
    batch = np.array([k[0] for k in keys], dtype=float)
    tokens = np.array([k[1] for k in keys], dtype=float) + (1.0 if decode else 0.0)
    return AttentionRows(batch, tokens, np.array([rows[k] for k in keys]), kernel, note)


def decode_grid(rows: AttentionRows, window: int = 0) -> Grid:
    """Decode attention as a :class:`Grid` over (entries, KV tokens per entry), seconds.
    Cells the collection skipped (the largest batches at the longest contexts, beyond
    one GPU's memory) are filled in proportion to the KV read from the longest context
    measured at that batch size (for rows of a sliding ``window`` of tokens, to the KV
    read capped at the window: flat past it)."""

    def read(c: float) -> float:
        return min(c, window) if window else c
    bs, cs, g = raw_grid(rows)
    for i in range(len(bs)):
        have = np.flatnonzero(~np.isnan(g[i]))
        if not len(have):
            raise ServesimError(f"decode attention has no measurement at batch {bs[i]:g}")
        last = have[-1]
        for j in range(len(cs)):
            if np.isnan(g[i, j]):
                if j < last:
                    g[i, j] = np.interp(cs[j], cs[have], g[i, have])
                else:
                    g[i, j] = g[i, last] * read(cs[j]) / read(cs[last])
    return Grid(tuple(bs), tuple(cs), tuple(tuple(r) for r in g))


def raw_grid(rows: AttentionRows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(entries axis, tokens axis, seconds with NaN where not measured)."""
    bs, cs = np.unique(rows.batch), np.unique(rows.tokens)
    g = np.full((len(bs), len(cs)), np.nan)
    g[np.searchsorted(bs, rows.batch), np.searchsorted(cs, rows.tokens)] = rows.seconds
    return bs, cs, g


def grid_holdout_errors(rows: AttentionRows) -> np.ndarray:
    """|relative error| of each interior grid row and column predicted from its
    neighbours with it left out (twice the real spacing: an upper estimate), on
    measured cells only."""
    bs, cs, v = raw_grid(rows)
    errs = []
    for axis, coords in ((0, bs), (1, cs)):
        for i in range(1, len(coords) - 1):
            w = (coords[i] - coords[i - 1]) / (coords[i + 1] - coords[i - 1])
            lo, hi, truth = (np.take(v, j, axis=axis) for j in (i - 1, i + 1, i))
            e = np.abs((lo * (1 - w) + hi * w) / truth - 1.0)
            errs.append(e[np.isfinite(e)])
    return np.concatenate(errs) if errs else np.zeros(0)
