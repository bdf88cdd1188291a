"""Gated DeltaNet layers from the linear-attention tables, and a hybrid model's mixers.

AIConfigurator's ``linear_attention/<framework>/<version>/gdn_perf.parquet`` times one
Gated DeltaNet layer's two token-mixing kernels per phase at a GPU's share of the heads
(``num_k_heads``, ``num_v_heads`` of ``head_k_dim`` x ``head_v_dim``):

- context: the short causal convolution over the chunk (``causal_conv1d_fn``) and the
  chunked delta rule (``chunk_gated_delta_rule``, or FlashInfer's in vLLM), at
  ``batch_size`` sequences of ``seq_len`` new tokens each;
- generation: the convolution's one-token update (``causal_conv1d_update``) and the
  recurrent step (``fused_recurrent_gated_delta_rule*``), at ``batch_size`` sequences.

A layer's time in a phase is the sum of its two kernels at the same point. Between
measured points it is joined linearly (in the tokens a sequence at each measured batch
size, then in the batch size); past the largest measured it grows in proportion. The
layer's projections (in_proj_qkvz, in_proj_ba, out_proj) are GEMMs, priced from the GEMM
table with the model's other projections.

A hybrid model (``linear_layers`` of its L layers Gated DeltaNet, the other A softmax
attention) is priced per layer as the mean of its two kinds of mixer, as
:mod:`sim.cost.tables.windowattn` does for sliding layers: A/L of the attention rows
plus G/L of the Gated DeltaNet rows at every measured point, which times L is the sum.
The decode grid gains G/L of the layer's recurrent step at each row's sequences, the
same in every column, since the state a sequence reads does not grow with its context.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.cost.curves import Grid
from sim.cost.shard import Shard
from sim.cost.specs import ModelSpec
from sim.cost.tables.attntables import AttentionRows, grid_holdout_errors
from sim.cost.tables.kerneltables import Table, load_table, versions
from sim.cost.tables.windowattn import ModelAttention
from sim.errors import ServesimError

TABLE = "gdn_perf"
FAMILY = "linear_attention"


@dataclass(frozen=True)
class GDNTimes:
    """One Gated DeltaNet layer's token mixing on one GPU, seconds: ``context`` maps a
    measured batch size to (tokens a sequence, seconds) sorted by tokens; ``decode`` is
    (sequences, seconds) sorted; ``kernels`` names the kernels summed, ``note`` which
    rows were taken."""

    context: dict[int, tuple[np.ndarray, np.ndarray]]
    decode_seqs: np.ndarray
    decode_s: np.ndarray
    kernels: str
    note: str

    def prefill(self, batch: float, tokens: float) -> float:
        """Seconds of one layer for ``batch`` sequences of ``tokens`` new tokens each."""
        sizes = sorted(self.context)

        def at(b: int) -> float:
            t, s = self.context[b]
            if tokens > t[-1]:
                return float(s[-1] * tokens / t[-1])
            return float(np.interp(tokens, t, s))

        if batch >= sizes[-1]:
            return at(sizes[-1]) * batch / sizes[-1]
        if batch <= sizes[0]:
            return at(sizes[0])
        hi = next(b for b in sizes if b >= batch)
        lo = max(b for b in sizes if b <= batch)
        if hi == lo:
            return at(lo)
        w = (batch - lo) / (hi - lo)
        return at(lo) * (1 - w) + at(hi) * w

    def step(self, seqs: float) -> float:
        """Seconds of one layer's decode of ``seqs`` sequences, one token each."""
        n, s = self.decode_seqs, self.decode_s
        if seqs > n[-1]:
            return float(s[-1] * seqs / n[-1])
        return float(np.interp(seqs, n, s))


def gdn_times(gpu: str, framework: str, version: str, model: ModelSpec,
              rank: Shard) -> GDNTimes:
    """The Gated DeltaNet layer of ``model`` on one ``rank`` from ``framework``'s table
    (the newest version it has up to ``version``'s; see the module doc). Rows are those
    at the rank's key and value heads and head sizes, of the model's own hidden size
    where measured (the kernels do not read it), else the nearest."""
    table = _table(gpu, framework, version)
    where = f"{TABLE} ({table.path})"
    t = table.where(num_k_heads=rank.linear_key_heads, num_v_heads=rank.linear_value_heads,
                    head_k_dim=rank.linear_key_dim, head_v_dim=rank.linear_value_dim)
    if not len(t):
        have = sorted({(int(k), int(v)) for k, v in zip(table.columns["num_k_heads"],
                                                        table.columns["num_v_heads"],
                                                        strict=True)})
        raise ServesimError(f"{where} has no rows at {rank.linear_key_heads} key and "
                            f"{rank.linear_value_heads} value heads a GPU (head sizes "
                            f"{rank.linear_key_dim} x {rank.linear_value_dim}); measured "
                            f"(key, value) heads: {', '.join(map(str, have))}")
    widths = [int(x) for x in t.values("d_model")]
    width = min(widths, key=lambda w: (abs(w - model.hidden), w))
    t = t.where(d_model=width)
    context, ctx_kernels = _phase(t, "context", ("batch_size", "seq_len"), where)
    decode, dec_kernels = _phase(t, "generation", ("batch_size",), where)
    by_batch: dict[int, list[tuple[int, float]]] = {}
    for (b, n), s in sorted(context.items()):
        by_batch.setdefault(b, []).append((n, s))
    seqs = np.array(sorted(k[0] for k in decode), dtype=float)
    note = (f"Gated DeltaNet layers: {TABLE} ({table.version}) at {rank.linear_key_heads} key "
            f"and {rank.linear_value_heads} value heads a GPU, d_model {width}"
            + (" (the model's)" if width == model.hidden else f" (nearest to {model.hidden})")
            + f"; context {ctx_kernels}, decode {dec_kernels}")
    return GDNTimes({b: (np.array([n for n, _ in pts], dtype=float),
                         np.array([s for _, s in pts])) for b, pts in by_batch.items()}, seqs,
                    np.array([decode[(int(n),)] for n in seqs]), f"{ctx_kernels}; {dec_kernels}",
                    note)


@lru_cache(maxsize=16)
def _table(gpu: str, framework: str, version: str) -> Table:
    """The framework's Gated DeltaNet table at ``version``, else its newest, read once per
    process (``profile ship`` asks for each GPU's table at every model and tp)."""
    have = versions(gpu, FAMILY, framework)
    if not have:
        raise ServesimError(f"no {FAMILY} tables for {framework} on {gpu}: Gated DeltaNet "
                            "layers are not timed there", where="--gpu")
    return load_table(gpu, FAMILY, framework, version if version in have else have[-1], TABLE)


def _phase(t: Table, phase: str, keys: tuple[str, ...],
           where: str) -> tuple[dict[tuple[int, ...], float], str]:
    """Seconds of a layer in ``phase`` keyed by ``keys``: its kernels summed at the
    points every one of them measured; and the kernels' names."""
    rows = t.where(phase=phase)
    kernels = rows.values("kernel_source")
    if len(kernels) != 2:
        raise ServesimError(f"{where}: expected two {phase} kernels (convolution and delta "
                            f"rule), found {', '.join(kernels) or 'none'}")
    parts = []
    for k in kernels:
        r = rows.where(kernel_source=k)
        c = r.columns
        parts.append({tuple(int(x) for x in key): float(s) / 1e3
                      for key, s in zip(zip(*(c[col] for col in keys), strict=True),
                                        c["latency"], strict=True)})
    both = sorted(parts[0].keys() & parts[1].keys())
    if not both:
        raise ServesimError(f"{where}: the {phase} kernels share no measured point")
    return {key: parts[0][key] + parts[1][key] for key in both}, " + ".join(kernels)


def with_linear_layers(att: ModelAttention, gdn: GDNTimes, model: ModelSpec) -> ModelAttention:
    """``att`` (the attention layers' rows, per layer) as the mean over all the model's
    layers, Gated DeltaNet ones included (see the module doc)."""
    g = model.linear_layers / model.layers
    a = 1.0 - g

    def mean(rows: AttentionRows, decode: bool) -> AttentionRows:
        mixer = np.array([gdn.step(b) if decode else gdn.prefill(b, t)
                          for b, t in zip(rows.batch, rows.tokens, strict=True)])
        return dataclasses.replace(rows, seconds=a * rows.seconds + g * mixer)

    grid = att.grid
    values = tuple(tuple(a * v + g * gdn.step(b) for v in row)
                   for b, row in zip(grid.rows, grid.values, strict=True))
    decode = mean(att.decode, True)
    notes = (*att.notes, gdn.note,
             f"attention per layer is the mean of {model.attention_layers} softmax-attention "
             f"and {model.linear_layers} Gated DeltaNet layers")
    return ModelAttention(decode, mean(att.prefill, False), Grid(grid.rows, grid.cols, values),
                          grid_holdout_errors(decode), notes, att.context_token_s * a)
