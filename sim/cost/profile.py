"""Measured cost profiles: the step-time components and their formulas.

A profile holds fitted coefficients for a fixed set of step-time components
(:data:`FORMS`), measured curves where a formula cannot follow the kernels
(:mod:`sim.cost.curves`), and the extra seconds a step takes when the server was idle
before it (``wake``). This module owns the component formulas, so the fits (of
``calibrate`` and of the public-table builder) and the evaluation in
:mod:`sim.cost.profilecost` can never disagree about what a coefficient means;
:mod:`sim.cost.profilefile` reads and checks the YAML file.

Only numpy and pure ``sim`` modules are imported: no torch, no simpy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from sim.cost.shape import StepShape

# The wake term's coefficients and formula (seconds; idle_s is the idle time before a step).
WAKE_COEFS = ("max_s", "tau_s")
WAKE_FORMULA = "max_s*(1 - exp(-idle_s/tau_s))"
# How a component priced by a measured grid (decode attention) describes itself.
GRID_FORMULA = "grid over (decode_seqs, decode_kv / decode_seqs)"


def wake_curve(idle_s: Any, max_s: float, tau_s: float) -> Any:
    """:data:`WAKE_FORMULA`: extra seconds of a step after ``idle_s`` seconds idle (a
    number or an array), for ``max_s`` seconds and ``tau_s`` > 0 seconds. The one
    definition: the profile prices with it and calibrate.wake fits it."""
    if isinstance(idle_s, np.ndarray):
        return max_s * -np.expm1(-idle_s / tau_s)
    # One spell at a time in the simulator's step loop: math is 20x cheaper than numpy.
    return max_s * -math.expm1(-idle_s / tau_s)


class Ops(NamedTuple):
    """The elementwise operations a formula uses, for scalars or for numpy arrays: the
    same formula text then prices one step with Python floats (fast) or many at once."""

    minimum: Callable[[Any, Any], Any]
    maximum: Callable[[Any, Any], Any]
    positive: Callable[[Any], Any]  # x > 0, as 1/0 (bool) or a boolean array


SCALAR = Ops(min, max, lambda x: x > 0)
ARRAY = Ops(np.minimum, np.maximum, lambda x: np.asarray(x) > 0)


def _prefill_context(s: StepShape) -> Any:
    """Tokens already cached before the step's prefill entries (decode entries excluded)."""
    return s.context_tokens - (s.decode_kv - s.decode_seqs)


def _mean_chunk(s: StepShape, o: Ops) -> Any:
    """Mean new tokens of the prefill entries (chunks taken as equal-sized)."""
    return s.prefill_tokens / o.maximum(s.prefill_seqs, 1.0)


def _self_pairs(s: StepShape, o: Ops = ARRAY) -> Any:
    """Query–key pairs of the prefill chunks among themselves, Σ n·(n+1)/2.

    The shape keeps only Σ n, so chunks are taken as equal-sized: exact for one prefill
    per step and for equal chunks, and close for the usual mixes.
    """
    return s.prefill_tokens * (_mean_chunk(s, o) + 1.0) / 2.0


def _block_pairs(s: StepShape, block: float, o: Ops = ARRAY) -> Any:
    """Σ n·min(n, block) over the prefill chunks (equal-sized, as in :func:`_self_pairs`):
    the query–key pairs a block-tiled causal kernel computes beyond the triangle."""
    return s.prefill_tokens * o.minimum(_mean_chunk(s, o), block)


def _context_pairs(s: StepShape, o: Ops = ARRAY) -> Any:
    """Query–key pairs from prefill chunks to their cached context, Σ n·c."""
    return o.maximum(s.prefill_pairs - _self_pairs(s, o), 0.0)


def _step(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # Decode entries are packed into groups of similar context, each group a few small
    # host-side tensors; a batch has at most about group_seqs distinct groups (a count),
    # so that cost grows with decode entries only up to there.
    return (c["const_s"] + c["per_seq_s"] * s.seqs + c["per_new_token_s"] * s.new_tokens
            + c["per_group_s"] * o.minimum(s.decode_seqs, c["group_seqs"]))


def _linear(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # A layer's projections either stream their weights once (small batches) or are
    # limited by FLOPs (large batches); the slower of the two sets the time.
    return c["const_s"] + o.maximum(c["weight_s"], c["per_token_s"] * s.new_tokens)


def _prefill_attention(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # A chunk with no cached context runs a causal kernel over its own n×n block; one
    # after cached context runs a masked kernel over n×(c+n). Kernels differ in how much
    # of the causal triangle they skip, so the two kinds of pairs get their own price.
    # A block-tiled causal kernel computes the whole n×n square while the chunk fits in
    # one key block (block_tokens, a count) and skips the blocks above the diagonal past
    # it: per_block_pair_s prices those n·min(n, block_tokens) extra pairs.
    # const_s is paid once by a step with any prefill entry: a GPU runs all of a step's
    # chunks in one varlen kernel launch, whose fixed cost dwarfs per-chunk work.
    return (
        c["const_s"] * o.positive(s.prefill_seqs)
        + c["per_seq_s"] * s.prefill_seqs
        + c["per_token_s"] * s.prefill_tokens
        + c["per_context_token_s"] * _prefill_context(s)
        + c["per_self_pair_s"] * _self_pairs(s, o)
        + c["per_block_pair_s"] * _block_pairs(s, c["block_tokens"], o)
        + c["per_context_pair_s"] * _context_pairs(s, o)
    )


def _sparse_prefill(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # DeepSeek sparse attention prefills an entry densely while its sequence (cached
    # context and chunk) fits in the top-k, and by the sparse path past it: the indexer
    # scores every pair and each query attends to topk_tokens picked ones, a cost per
    # token on top of the dense form's (entries taken as equal-sized, as _self_pairs).
    length = (_prefill_context(s) + s.prefill_tokens) / o.maximum(s.prefill_seqs, 1.0)
    return c["per_token_s"] * s.prefill_tokens * o.positive(length - c["topk_tokens"])


def _decode_attention(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # The fixed part is paid only by steps that have decode entries at all. Reading the
    # KV cache costs per_kv_token_s per token while the step's KV fits in the device's
    # caches; beyond spill_kv tokens (a count, not seconds) each token also pays
    # per_spill_token_s, the extra of streaming it from main memory.
    # Entries of similar context share one attention call (a group); a batch has at most
    # about group_seqs groups (a count), so call overheads stop growing there.
    return (
        c["const_s"] * o.positive(s.decode_seqs)
        + c["per_seq_s"] * s.decode_seqs
        + c["per_group_s"] * o.minimum(s.decode_seqs, c["group_seqs"])
        + c["per_kv_token_s"] * s.decode_kv
        + c["per_spill_token_s"] * o.maximum(s.decode_kv - c["spill_kv"], 0.0)
    )


def _lm_head(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    return c["const_s"] + o.maximum(c["weight_s"], c["per_seq_s"] * s.seqs)


def _host(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # The serving loop's own work between device steps (admitting arrivals, scheduling,
    # slot and block bookkeeping, recording outputs), which walks the running batch.
    return c["const_s"] + c["per_seq_s"] * s.seqs


def _allreduce(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    return c["per_step_s"] + c["per_token_s"] * s.new_tokens


def _in_situ(c: Mapping[str, float], s: StepShape, o: Ops = ARRAY) -> Any:
    # What a layer costs inside a real step beyond its operators timed alone: chiefly
    # weights that the step's KV reads pushed out of the caches, streamed again. More KV
    # read evicts more, until past evict_kv tokens (a count) all that can be evicted is.
    # A step of one decode entry runs matrix-vector products and one unmasked attention
    # call; from two entries on, matrix-matrix kernels (which repack the weights they
    # read) and masked or several attention calls: multi_s prices that step. Each entry
    # adds per_seq_s up to sat_seqs entries (a count), each prefill chunk (its own
    # attention call and large temporaries) per_prefill_s, and each of its causal
    # query-key pairs per_prefill_pair_s (its score matrices, too large for the caches
    # that held them when the kernel was timed alone). Fitted on whole steps, after the
    # operators; zero where a device shows no effect.
    d = s.decode_seqs
    return (c["const_s"] * o.positive(d) + c["multi_s"] * o.positive(d - 1)
            + c["per_seq_s"] * o.minimum(d, c["sat_seqs"])
            + c["per_kv_token_s"] * o.minimum(s.decode_kv, c["evict_kv"])
            + c["per_prefill_s"] * s.prefill_seqs
            + c["per_prefill_pair_s"] * s.prefill_pairs)


@dataclass(frozen=True)
class ComponentForm:
    """One term of the step time: its coefficients (seconds unless named in ``knees``) and formula.

    ``per_layer`` terms are measured on one (tensor-parallel-sharded) layer and
    multiplied by the model's layer count. ``linear`` says the formula is linear in
    its coefficients once the ``knees`` coefficients (breakpoints, counts of tokens or
    sequences) are fixed, so the fit can solve it exactly for each candidate breakpoint.
    """

    name: str
    coefs: tuple[str, ...]
    per_layer: bool
    linear: bool
    formula: str
    # (coefficients, shape, ops) -> seconds; ops is SCALAR or ARRAY (the default).
    evaluate: Callable[..., Any]
    knees: tuple[str, ...] = ()
    # The StepShape count (e.g. "new_tokens") over which measured knots may replace the
    # formula inside their range (sim.cost.curves.Knots); "" when the component has none.
    table: str = ""
    # Whether a calibration times the component at every count 1, 2, ... of ``table``
    # (its knots then start there); False where only profiles built from kernel tables
    # carry knots (a sparse-attention model's prefill).
    counts_table: bool = True
    # Whether a measured grid over (decode entries, mean KV tokens per entry) may
    # replace the formula entirely (sim.cost.curves.Grid).
    grid: bool = False
    # The StepShape fields the formula reads, when they are few: one step's price may
    # then be kept per their values (sim.cost.profilecost); () when it reads many.
    reads: tuple[str, ...] = ()
    # A count without which the formula is exactly zero (a step with no prefill entry
    # has no prefill attention): the scalar path skips the component then.
    gate: str = ""
    # Coefficients a profile written before they existed may lack, and the value that
    # gives that profile's formula back exactly.
    defaults: Mapping[str, float] = dataclasses.field(default_factory=dict)


FORMS: dict[str, ComponentForm] = {
    f.name: f
    for f in (
        ComponentForm("step", ("const_s", "per_seq_s", "per_new_token_s", "per_group_s",
                               "group_seqs"), False, True,
                      "const_s + per_seq_s*seqs + per_new_token_s*new_tokens"
                      " + per_group_s*min(decode_seqs, group_seqs)", _step, knees=("group_seqs",),
                      reads=("seqs", "new_tokens", "prefill_seqs")),
        ComponentForm("linear", ("const_s", "weight_s", "per_token_s"), True, False,
                      "const_s + max(weight_s, per_token_s*new_tokens)", _linear,
                      table="new_tokens", reads=("new_tokens",)),
        ComponentForm("prefill_attention",
                      ("const_s", "per_seq_s", "per_token_s", "per_context_token_s",
                       "per_self_pair_s", "per_block_pair_s", "block_tokens",
                       "per_context_pair_s"), True, True,
                      "const_s*[prefill_seqs>0] + per_seq_s*prefill_seqs"
                      " + per_token_s*prefill_tokens + per_context_token_s*prefill_context"
                      " + per_self_pair_s*self_pairs"
                      " + per_block_pair_s*prefill_tokens*min(chunk, block_tokens)"
                      " + per_context_pair_s*context_pairs",
                      _prefill_attention, knees=("block_tokens",), gate="prefill_seqs",
                      table="prefill_tokens", counts_table=False,
                      defaults={"const_s": 0.0, "per_block_pair_s": 0.0,
                                "block_tokens": 0.0}),
        ComponentForm("sparse_prefill", ("per_token_s", "topk_tokens"), True, True,
                      "per_token_s*prefill_tokens*[(prefill_context + prefill_tokens)"
                      "/prefill_seqs > topk_tokens]", _sparse_prefill, knees=("topk_tokens",),
                      gate="prefill_seqs", defaults={"per_token_s": 0.0, "topk_tokens": 1e9}),
        ComponentForm("decode_attention",
                      ("const_s", "per_seq_s", "per_group_s", "group_seqs", "per_kv_token_s",
                       "per_spill_token_s", "spill_kv"),
                      True, True,
                      "const_s*[decode_seqs>0] + per_seq_s*decode_seqs"
                      " + per_group_s*min(decode_seqs, group_seqs) + per_kv_token_s*decode_kv"
                      " + per_spill_token_s*max(decode_kv - spill_kv, 0)",
                      _decode_attention, knees=("group_seqs", "spill_kv"), grid=True),
        ComponentForm("lm_head", ("const_s", "weight_s", "per_seq_s"), False, False,
                      "const_s + max(weight_s, per_seq_s*seqs)", _lm_head, table="seqs",
                      reads=("seqs",)),
        ComponentForm("allreduce", ("per_step_s", "per_token_s"), False, True,
                      "per_step_s + per_token_s*new_tokens", _allreduce, table="new_tokens",
                      reads=("new_tokens",)),
        ComponentForm("in_situ", ("const_s", "multi_s", "per_seq_s", "sat_seqs",
                                  "per_kv_token_s", "evict_kv", "per_prefill_s",
                                  "per_prefill_pair_s"),
                      True, True,
                      "const_s*[decode_seqs>0] + multi_s*[decode_seqs>1]"
                      " + per_seq_s*min(decode_seqs, sat_seqs)"
                      " + per_kv_token_s*min(decode_kv, evict_kv) + per_prefill_s*prefill_seqs"
                      " + per_prefill_pair_s*prefill_pairs",
                      _in_situ, knees=("sat_seqs", "evict_kv"),
                      defaults={"multi_s": 0.0, "sat_seqs": 1e9, "per_prefill_s": 0.0,
                                "per_prefill_pair_s": 0.0}),
        ComponentForm("host", ("const_s", "per_seq_s"), False, True,
                      "const_s + per_seq_s*seqs", _host,
                      defaults={"const_s": 0.0, "per_seq_s": 0.0}, reads=("seqs",)),
    )
}
