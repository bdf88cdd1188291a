"""A model's attention per layer from the tables, sliding-window layers included.

A profile prices attention per layer and multiplies by the layer count. A model whose
``sliding_layers`` of ``layers`` attend to a window of W tokens (gpt-oss: half of them,
W = 128) has two kinds of layer, so its per-layer attention is their mean, weighted by
how many there are: F full layers and S sliding ones give (F·full + S·sliding) / L at
every measured point, which times L is the exact sum. Bilinear interpolation in a grid
is linear in its values, so the mean grid prices every decode shape as the two grids
would apart; the prefill formula is fitted to the mean rows, and its held-out error is
measured on them.

Sliding layers' rows are the tables' own where they measured the model's window
(``window_size`` = W: AIConfigurator times 128, 1,024 and 8,192); otherwise the full
rows capped at the window: a decode entry reads at most W cached tokens, and a prefill
chunk of n > W tokens costs n / W times a W-token chunk. Which was done is a note of
the profile. Decode grids past their longest measured context grow with the KV read,
which a sliding layer caps at W: the mean grid gains a column at the model's context
length so that its sliding part stays flat out there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sim.cost.curves import Grid
from sim.cost.shard import Shard
from sim.cost.specs import ModelSpec
from sim.cost.tables.attntables import (
    AttentionRows,
    decode_grid,
    grid_holdout_errors,
    select,
    windows,
)
from sim.cost.tables.kerneltables import Table


@dataclass(frozen=True)
class ModelAttention:
    """Attention per layer of one model shard: ``decode`` and ``prefill`` rows (for a
    model with sliding layers, the layers' mean), the decode ``grid``, the grid's
    held-out interpolation errors (``decode_errors``), what was done (``notes``) and
    ``context_token_s``: seconds a layer spends on each cached token a prefill chunk
    attends to beyond reading it (latent attention re-expands its latent; 0 otherwise)."""

    decode: AttentionRows
    prefill: AttentionRows
    grid: Grid
    decode_errors: np.ndarray
    notes: tuple[str, ...]
    context_token_s: float = 0.0


def model_attention(decode_table: Table, prefill_table: Table, model: ModelSpec,
                    rank: Shard, kv_dtype: str) -> ModelAttention:
    """``model``'s attention per layer on one ``rank`` from the two attention tables,
    KV cache in ``kv_dtype`` (the tables' name); see the module doc."""
    def rows(table: Table, decode: bool, window: int = 0) -> AttentionRows:
        return select(table, rank.heads, rank.kv_heads, rank.head_dim, kv_dtype, decode,
                      window)

    dec, pre = rows(decode_table, True), rows(prefill_table, False)
    notes = [f"decode attention: {dec.note}", f"prefill attention: {pre.note}"]
    if model.attention_sinks:
        notes.append("attention sinks (one logit per head, a term more in each softmax): "
                     "not timed by the tables, taken as negligible")
    w = model.sliding_window
    if not w:
        return ModelAttention(dec, pre, decode_grid(dec), grid_holdout_errors(dec),
                              tuple(notes))
    full, slid, layers = model.full_layers, model.sliding_layers, model.layers
    full_grid = decode_grid(dec)
    have = sorted(set(windows(decode_table)) & set(windows(prefill_table)))
    if w in have:
        dec_w, pre_w = rows(decode_table, True, w), rows(prefill_table, False, w)
        w_grid = decode_grid(dec_w, w)
        last = w_grid.cols[-1]

        def slide_at(b: float, c: float) -> float:
            return w_grid.at(b, min(c, last))
        how = f"the tables' window-{w} rows"
    else:
        dec_w, pre_w = _capped(dec, w, decode=True), _capped(pre, w, decode=False)

        def slide_at(b: float, c: float) -> float:
            return full_grid.at(b, min(c, w))
        how = (f"no window-{w} rows (windows measured: {', '.join(map(str, have)) or 'none'})"
               f"; full-attention rows capped at the window")
    notes.append(f"sliding-window layers ({slid} of {layers}, window {w}): {how}; attention "
                 f"per layer is the mean of {full} full and {slid} sliding layers")
    dec_mean = _mean_rows(dec, dec_w, full / layers, slid / layers)
    grid = _mean_grid(full_grid, slide_at, full / layers, slid / layers, model.max_context)
    return ModelAttention(dec_mean, _mean_rows(pre, pre_w, full / layers, slid / layers),
                          grid, grid_holdout_errors(dec_mean), tuple(notes))


def _mean_rows(a: AttentionRows, b: AttentionRows, wa: float, wb: float) -> AttentionRows:
    """``wa``·a + ``wb``·b at the (batch, tokens) points both measured."""
    def keyed(r: AttentionRows) -> dict[tuple[float, float], float]:
        return {(float(x), float(t)): float(s)
                for x, t, s in zip(r.batch, r.tokens, r.seconds, strict=True)}
    ka, kb = keyed(a), keyed(b)
    keys = sorted(ka.keys() & kb.keys())
    secs = np.array([wa * ka[k] + wb * kb[k] for k in keys])
    return AttentionRows(np.array([k[0] for k in keys]), np.array([k[1] for k in keys]), secs,
                         a.kernel, a.note)


def _mean_grid(full: Grid, slide_at: Callable[[float, float], float], wf: float, ws: float,
               context: int) -> Grid:
    """The layers' mean decode grid on ``full``'s axes, plus a column at ``context``
    tokens where that lies past them (see the module doc)."""
    cols = full.cols + ((float(context),) if context > full.cols[-1] else ())
    values = [[wf * full.at(b, c) + ws * slide_at(b, c) for c in cols] for b in full.rows]
    return Grid(full.rows, cols, tuple(tuple(r) for r in values))


def _capped(rows: AttentionRows, window: int, decode: bool) -> AttentionRows:
    """Full-attention ``rows`` as a sliding layer of ``window`` tokens would take them:
    a decode reads at most ``window`` cached tokens (the time at that context, joined
    linearly between measured ones); a prefill chunk of n > ``window`` tokens costs
    n / ``window`` times one of ``window`` tokens."""
    secs = np.empty_like(rows.seconds)
    for b in np.unique(rows.batch):
        at = rows.batch == b
        t, s = rows.tokens[at], rows.seconds[at]
        order = np.argsort(t)
        cap = np.interp(float(window), t[order], s[order])
        secs[at] = np.where(t <= window, s, cap if decode else cap * t / window)
    return AttentionRows(rows.batch, rows.tokens, secs, rows.kernel, rows.note)
