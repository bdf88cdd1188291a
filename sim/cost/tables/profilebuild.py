"""Build a cost profile from public measured kernel tables, for one model on one GPU.

For one tensor-parallel rank of the model the builder takes its real GEMM shapes and
prices every step-time component of :data:`sim.cost.profile.FORMS` from NVIDIA
AIConfigurator's tables (:mod:`sim.cost.tables.kerneltables`):

- ``linear`` (per layer): fused QKV (n = (H + 2·KV)·d / tp, k = h), attention output
  (n = h, k = H·d / tp), fused gate+up (n = 2·I / tp, k = h), down (n = h, k = I / tp)
  from the GEMM table at every measured m (:mod:`sim.cost.tables.gemmtable`), plus the layer's
  memory-bound kernels (two fused residual-add RMSNorms, rotary embedding, the KV-cache
  write, SiLU-and-multiply): 5 launches and their bytes at the bandwidth the same GEMM
  table shows. Kept as knots over new tokens; past the last, the fitted formula.
- ``lm_head``: the LM-head GEMM (n = vocab / tp) on one row per sequence, the final
  norm, the logits all-gather under tp and the sampler's passes over fp32 logits.
- ``allreduce``: two per layer and one for the vocabulary-parallel embedding, of
  new_tokens·h·2 bytes each (:mod:`sim.cost.tables.commtable`), and for a model whose
  query/key norm spans all heads (MiniMax-M2) one more a layer of new_tokens·8 bytes
  (with one more norm kernel in ``linear``); zero at tp = 1.
- ``prefill_attention``: its formula fitted to the prefill table at the rank's heads;
  the tables have no cached prefix, so a chunk's pairs to cached context are priced as
  its own pairs and its cached tokens at the decode table's per-token read.
- ``decode_attention``: the decode table itself, a grid over entries and KV per entry.
- A model with sliding-window layers (gpt-oss) takes both attention terms as the mean
  of its full and sliding layers (:mod:`sim.cost.tables.windowattn`), one with Gated
  DeltaNet layers (Qwen3.5) as the mean of its attention and linear-attention layers,
  projections and token mixing alike (:mod:`sim.cost.tables.gdntable`); a mixture of
  experts its MoE layer from the MoE tables in the experts' own dtype (gpt-oss: mxfp4,
  :mod:`sim.cost.tables.moetable`).
- ``step`` and ``frontend``: not in any table (scheduling, input preparation, the API
  server's per-request work); fitted priors per framework (:mod:`sim.cost.priors`), named
  as such in the profile. ``host``, ``in_situ`` and ``wake`` are zero: the priors hold
  what a server adds around its kernels.

Every component records where its prices came from and its held-out error.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from sim.cost.gpus import GPUS, dtype_note
from sim.cost.measured import QUANT_VARIANTS
from sim.cost.presets import MODELS
from sim.cost.priors import Priors, framework_priors
from sim.cost.profile import FORMS
from sim.cost.profilefile import SCHEMA
from sim.cost.profilefit import fit_component
from sim.cost.roofline import ep_note
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.cost.shard import Shard, shard
from sim.cost.specs import QK_NORM_BYTES, ModelSpec, qk_norm_allreduces, recorded_fields
from sim.cost.tables.commtable import Collectives, load_collectives
from sim.cost.tables.dsaattn import dense_knots, fit_sparse_prefill, sparse_attention
from sim.cost.tables.gdntable import gdn_times, with_linear_layers
from sim.cost.tables.gemmtable import GemmTable, gemm_table, projection_gemms
from sim.cost.tables.kerneltables import (
    FRAMEWORKS,
    TABLE_DTYPES,
    coverage,
    describe_coverage,
    load_table,
    wheel_version,
)
from sim.cost.tables.mlaattn import mla_attention
from sim.cost.tables.moetable import MoeTimes, moe_times
from sim.cost.tables.windowattn import ModelAttention, model_attention
from sim.errors import ServesimError

FRAMEWORK_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
GPU_LABELS = {"a100-80gb": "A100-SXM-80GB", "h100-sxm": "H100-SXM", "h200": "H200-SXM",
              "b200": "B200-SXM", "l40s": "L40S", "gb200": "GB200", "b300": "B300-SXM",
              "gb300": "GB300"}
# Tokens up to which a framework runs a step inside a CUDA graph by default (vLLM v1:
# capture sizes to min(2·max_num_seqs, 512); SGLang: cuda_graph_max_bs 256 on 80 GB
# parts; TensorRT-LLM's PyTorch backend: 128): its all-reduces then run graph-captured.
GRAPH_TOKENS = {"vllm": 512, "sglang": 256, "trtllm": 128}
# The tables' KV-cache dtype for each of servesim's (``auto`` is the activations' bf16).
KV_TABLE_DTYPES = {"auto": "bfloat16", "fp8": "fp8"}
# The memory-bound kernels of a layer outside GEMMs and attention (see the module doc).
LAYER_ELEMENTWISE_KERNELS = 5
SAMPLER_PASSES = 3  # fp32 logits read by softmax, top-k/p and sampling
SAMPLER_KERNELS = 2
FORMULA_FROM_TOKENS = 1024  # the formula past the knots is fitted on knots from here up


@dataclass(frozen=True)
class BuildSpec:
    """What to build: ``model`` on ``tp`` GPUs of ``gpu`` (servesim names) under
    ``framework`` at table ``version`` (None: the newest); the model's ``dtype`` picks
    the GEMM table of its projections and its ``kv_dtype`` the attention tables."""

    model: ModelSpec
    gpu: str
    framework: str
    tp: int = 1
    version: str | None = None
    ep: int = 1  # expert parallelism (ep = tp, or dp x tp): experts whole, E/ep a GPU
    # How a mixture of experts' router spreads tokens: a name of
    # sim.cost.tables.moetable.ROUTINGS ("auto": the model family's power law).
    routing: str = "auto"
    # Which MoE kernel prices its experts: a name of sim.cost.tables.moetable.MOE_BACKENDS
    # ("auto": the tables' most-measured kernel; "triton": the Triton fused-MoE kernel;
    # "mxfp8": mxfp4 experts with MXFP8 activations).
    moe_backend: str = "auto"
    # Data-parallel attention ranks sharing the experts: the profile is one rank's, its
    # routed experts apart (components.experts, over every rank's tokens).
    dp: int = 1


def resolve_version(spec: BuildSpec) -> str:
    """The table version to build from: the one asked for, or the newest with both
    GEMM and attention tables; an error listing what exists."""
    if spec.framework not in FRAMEWORKS:
        raise ServesimError(f"unknown framework {spec.framework!r}; valid: "
                            f"{', '.join(FRAMEWORKS)}", where="--framework")
    if spec.gpu not in coverage():
        raise ServesimError(f"no tables for GPU {spec.gpu!r}; tables exist for: "
                            f"{describe_coverage()}", where="--gpu")
    have = coverage()[spec.gpu].get(spec.framework, [])
    if not have:
        raise ServesimError(f"no {spec.framework} tables for {spec.gpu}; tables exist for: "
                            f"{describe_coverage()}", where="--framework")
    if spec.version is None:
        return have[-1]
    if spec.version not in have:
        raise ServesimError(f"no {spec.framework} {spec.version} tables for {spec.gpu}; "
                            f"versions: {', '.join(have)}", where="--version")
    return spec.version


def attention_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one layer's attention projections on one rank: fused QKV and the output;
    for latent attention the fused q_a/kv_a down-projection (whole on every rank), q_b
    (a plain query projection from the hidden state where there is no query latent),
    with sparse attention its indexer's, and the output (kv_b belongs to
    attention: :mod:`sim.cost.tables.mlaattn`)."""
    if rank.kv_lora_rank:
        q_width = rank.heads * (rank.qk_nope_head_dim + rank.qk_rope_head_dim)
        down = rank.q_lora_rank + rank.kv_lora_rank + rank.qk_rope_head_dim
        q = [(q_width, rank.q_lora_rank or rank.hidden)]
        # Sparse attention's indexer, whole on every rank: its key rides the fused
        # down-projection (as SGLang fuses it); its queries come from the query latent,
        # its heads' weights from the hidden state.
        index = [(rank.index_n_heads * rank.index_head_dim, rank.q_lora_rank),
                 (rank.index_n_heads, rank.hidden)] if rank.sparse else []
        return [(down + rank.index_head_dim * rank.sparse, rank.hidden), *q, *index,
                (rank.hidden, rank.heads * rank.v_head_dim)]
    queries = rank.heads * (2 if rank.attn_output_gate else 1)  # a gate per head too
    return [((queries + 2 * rank.kv_heads) * rank.head_dim, rank.hidden),
            (rank.hidden, rank.heads * rank.head_dim)]


def gdn_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one Gated DeltaNet layer's projections on one rank: in_proj_qkvz (its
    queries, keys, values and output gate), in_proj_ba (two scalars a value head) and
    out_proj; none without such layers."""
    if not rank.linear_layers:
        return []
    keys = rank.linear_key_heads * rank.linear_key_dim
    values = rank.linear_value_heads * rank.linear_value_dim
    return [(2 * keys + 2 * values, rank.hidden), (2 * rank.linear_value_heads, rank.hidden),
            (rank.hidden, values)]


def mixer_times(rank: Shard, gemm: GemmTable, qkv_gemm: GemmTable | None = None) -> np.ndarray:
    """Seconds of a layer's token-mixer projections at ``gemm``'s token counts, the mean
    over the layers: attention's in the attention layers, Gated DeltaNet's in the others.
    ``qkv_gemm`` (None: ``gemm``) prices attention's query/key/value projections, all but
    its last GEMM, the output, where a checkpoint keeps them at a dtype of their own."""
    qkv_gemm = gemm if qkv_gemm is None else qkv_gemm
    *qkv, out = attention_gemms(rank)
    attn: np.ndarray = np.sum(
        [gemm.times(n, k) if qkv_gemm is gemm
         else np.array([qkv_gemm.at(float(x), n, k) for x in gemm.ms]) for n, k in qkv]
        + [gemm.times(*out)], axis=0)
    if not rank.linear_layers:
        return attn
    g = rank.linear_layers / rank.layers
    gdn: np.ndarray = np.sum([gemm.times(n, k) for n, k in gdn_gemms(rank)], axis=0)
    return (1 - g) * attn + g * gdn


def mlp_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one dense layer's SwiGLU on one rank: fused gate+up, down."""
    return [(2 * rank.intermediate, rank.hidden), (rank.hidden, rank.intermediate)]


def layer_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one dense layer's projections on one rank (attention, then SwiGLU; a
    hybrid model's Gated DeltaNet projections after attention's)."""
    return attention_gemms(rank) + gdn_gemms(rank) + mlp_gemms(rank)


@lru_cache(maxsize=16)
def attention_table(gpu: str, framework: str, version: str, name: str) -> Any:
    """Attention table ``name`` (prefill or decode), read once per process."""
    return load_table(gpu, "attention", framework, version, name)


def _g(x: float) -> float:
    """Six significant digits: what a profile keeps of a number."""
    return float(f"{x:.6g}")


def _err_stats(errs: np.ndarray) -> dict[str, float | int]:
    e = np.asarray(errs, dtype=float)
    if not e.size:
        return {"points": 0}
    return {"median": _g(float(np.median(e))), "p90": _g(float(np.percentile(e, 90))),
            "max": _g(float(e.max())), "points": int(e.size)}


def _formula_fit(name: str, xs: np.ndarray, ys: np.ndarray, shape_at: Any) -> dict[str, Any]:
    """Fit ``name``'s formula to the knots at counts >= FORMULA_FROM_TOKENS (for prices
    past the last knot; at least the last 8); coefficients and held-out error."""
    # At least the last 8 knots: a coarse grid (A100's stops at 8,192) has few past 1,024.
    keep = (xs >= FORMULA_FROM_TOKENS) | (np.arange(len(xs)) >= len(xs) - 8)
    fit = fit_component(name, [shape_at(int(x)) for x in xs[keep]], list(ys[keep]))
    return {"coef": {k: _g(v) for k, v in fit.coef.items()},
            "fit": {"mape_test": _g(fit.mape_test), "max_err_test": _g(fit.max_err_test),
                    "n_train": fit.n_train, "n_test": fit.n_test}}


def _tokens_shape(n: int) -> StepShape:
    return shape_of([(n, 0)])


def _seqs_shape(n: int) -> StepShape:
    return decode_shape(n, 0)


@dataclass(frozen=True)
class _Gemms:
    """The GEMM tables one build prices from: bf16 (the LM head, and the projections of a
    16-bit model), the projections' own (``lin``: FP8 or NVFP4 rows, perhaps of another
    framework), the query/key/value projections', and what the bf16 table gives: the
    launch floor (s) and the weight-bound bandwidth (bytes/s)."""

    source: Any  # the bf16 GemmSource
    lin: GemmTable
    lin_kernel: str
    lin_fw: str
    lin_version: str
    qkv: GemmTable
    floor_s: float
    bandwidth: float


def _check_spec(spec: BuildSpec) -> None:
    """Refuse what the tables cannot build: a dtype they do not time, NVFP4 on a GPU
    without FP4 tensor cores, data-parallel attention for a dense model."""
    m, gpu = spec.model, spec.gpu
    if m.dtype not in TABLE_DTYPES:
        raise ServesimError(f"dtype {m.dtype!r} is not built from the tables; built: "
                            f"{', '.join(TABLE_DTYPES)}", where="--dtype")
    if m.dtype == "nvfp4" and not GPUS[gpu].fp4_flops:
        with_fp4 = ", ".join(g for g in GPUS if GPUS[g].fp4_flops)
        raise ServesimError(f"nvfp4 projections run on FP4 tensor cores, which {gpu} lacks, "
                            f"so its tables time no nvfp4 GEMM (GPUs with them: {with_fp4}); "
                            "cost: roofline prices nvfp4 weights there as weight-only",
                            where="--dtype")
    if spec.dp > 1 and not m.experts:
        raise ServesimError(f"got {spec.dp}, but model {m.name} is dense: data-parallel "
                            "attention ranks share a mixture of experts' experts",
                            where="--dp")


def _gemms(spec: BuildSpec, version: str, notes: list[str]) -> _Gemms:
    """The GEMM tables of a build (:class:`_Gemms`); what their choice means goes to
    ``notes``."""
    m, fw, gpu = spec.model, spec.framework, spec.gpu
    # The LM head and the memory-bound kernels run in bf16 whatever the weights' dtype.
    source = gemm_table(gpu, fw, version, "bf16")
    gemm = source.table
    # FP8 and NVFP4 projections are priced from their own GEMM rows, the rest from bf16's.
    lin_source, lin_fw, lin_version = (projection_gemms(gpu, fw, version, m.dtype)
                                       if m.dtype in QUANT_VARIANTS else (source, fw, version))
    lin_gemm, lin_kernel = lin_source.table, lin_source.kernel
    if m.dtype in QUANT_VARIANTS and lin_source.input_quant_s:
        notes.append(f"{m.dtype} projections from the {TABLE_DTYPES[m.dtype]} GEMM rows "
                     f"({lin_kernel}) less {lin_source.input_quant_s * 1e6:.1f} us a call: "
                     f"the rows quantise a bf16 input at a dynamic scale, {FRAMEWORK_NAMES[fw]}"
                     "'s served model takes FP8 input from the fused kernel before; LM head, "
                     "norms and activations in bf16")
    elif m.dtype in QUANT_VARIANTS:
        notes.append(f"{m.dtype} projections from the {TABLE_DTYPES[m.dtype]} GEMM rows "
                     f"({lin_kernel}), taken to include quantising their input; LM head, "
                     "norms and activations in bf16")
    if lin_fw != fw:
        notes.append(f"{fw}'s own {TABLE_DTYPES[m.dtype]} GEMM rows are inconsistent with "
                     f"its other tables (sim/cost/tables/gemmtable.py): the projections are "
                     f"priced from {lin_fw} {lin_version}'s rows of the same library")
    qkv_gemm = _qkv_gemm(m, gpu, fw, version, lin_gemm, notes)
    big = float(gemm.ns[gemm.ns <= 16384][-1])
    bandwidth = big * big * 2 / float(gemm.times(big, big)[0])  # m = 1: weight-bound
    return _Gemms(source, lin_gemm, lin_kernel, lin_fw, lin_version, qkv_gemm,
                  float(gemm.cube.min()), bandwidth)


def _linear_stack(spec: BuildSpec, version: str, rank: Shard, g: _Gemms, notes: list[str]
                  ) -> tuple[np.ndarray, np.ndarray, MoeTimes | None, dict[str, Any] | None]:
    """One layer's linear stack at every token count of the projections' table (s), with
    its elementwise kernels; the interpolation errors of the GEMMs priced; the MoE
    layer's times and its ``experts`` component (None for a dense model)."""
    m, lin_gemm = spec.model, g.lin
    shapes = layer_gemms(rank)
    moe, experts = None, None
    if m.experts:
        linear, width, shapes, moe, experts = _moe_stack(spec, version, rank, lin_gemm,
                                                         g.source.table, g.qkv, notes)
    else:
        dense: np.ndarray = mixer_times(rank, lin_gemm, g.qkv) + sum(
            lin_gemm.times(n, k) for n, k in mlp_gemms(rank))
        linear, width = dense, rank.intermediate
    for n, k in shapes:  # the GEMMs priced
        for size, axis, what in ((n, lin_gemm.ns, "n"), (k, lin_gemm.ks, "k")):
            if size > axis[-1]:
                notes.append(f"GEMM {what}={size} past the measured grid: scaled in proportion")
    elementwise_bytes = 2 * (8 * rank.hidden + 2 * (rank.heads + rank.kv_heads) * rank.head_dim
                             + 4 * rank.kv_heads * rank.head_dim + 3 * width)
    # A layer-wide query/key norm under tp splits into a sums-of-squares kernel and a
    # scaling one around its all-reduce.
    kernels = LAYER_ELEMENTWISE_KERNELS + qk_norm_allreduces(m, spec.tp)
    linear = linear + kernels * g.floor_s + lin_gemm.ms * elementwise_bytes / g.bandwidth
    return linear, lin_gemm.holdout_errors(shapes), moe, experts


def _head_and_allreduce(spec: BuildSpec, version: str, rank: Shard, g: _Gemms,
                        notes: list[str]
                        ) -> tuple[np.ndarray, dict[str, Any], Collectives | None]:
    """The LM head, sampler and (under tp) logits all-gather per step at every count of
    the bf16 table (s); the ``allreduce`` component; the collective tables read (None at
    tp 1)."""
    m, fw, gpu = spec.model, spec.framework, spec.gpu
    gemm, floor_s, bandwidth = g.source.table, g.floor_s, g.bandwidth
    ms = gemm.ms
    head_n = rank.vocab
    if head_n > gemm.ns[-1]:
        notes.append(f"LM head n={head_n} past the measured n={gemm.ns[-1]:g}: scaled in "
                     "proportion (measured on the grid: 4x n=16384 against n=65536)")
    head = (gemm.times(head_n, rank.hidden) + floor_s + ms * 4 * rank.hidden / bandwidth
            + SAMPLER_KERNELS * floor_s + ms * m.vocab * 4 * SAMPLER_PASSES / bandwidth)
    if spec.tp == 1:
        return head, {**_entry("allreduce", dict.fromkeys(FORMS["allreduce"].coefs, 0.0)),
                      "fit": {"source": "none (tp=1)"}}, None
    comm = load_collectives(gpu, fw, version, spec.tp)
    head = head + comm.gather.at(ms * rank.vocab * spec.tp * 2)
    graphed = ms <= GRAPH_TOKENS[fw]
    reduce = (2 * m.layers + 1) * comm.allreduce(ms * rank.hidden * 2, graphed)
    if qk_norm_allreduces(m, spec.tp):
        # Each layer's query/key norm over all heads waits for the sums of squares of
        # every GPU's heads: a small all-reduce of its own.
        reduce = reduce + m.layers * comm.allreduce(ms * QK_NORM_BYTES, graphed)
    ar_fit = _formula_fit("allreduce", ms, reduce, _tokens_shape)
    allreduce = {**_entry("allreduce", ar_fit["coef"]), **_knots(ms, reduce),
                 "fit": {"source": f"tables: {comm.sources['custom_allreduce']}, "
                                   f"{comm.sources['nccl']}", **ar_fit["fit"]}}
    return head, allreduce, comm


def _attention(spec: BuildSpec, version: str, rank: Shard, g: _Gemms, notes: list[str]
               ) -> tuple[dict[str, Any], str, str]:
    """The attention components (``prefill_attention``, ``sparse_prefill`` where the
    model has it, ``decode_attention``) at the rank's heads (a model with sliding layers:
    the layers' mean), and the prefill and decode kernels they were timed with."""
    m, fw, gpu = spec.model, spec.framework, spec.gpu
    if m.sparse:
        att: ModelAttention = sparse_attention(gpu, fw, version, m, rank,
                                               KV_TABLE_DTYPES[m.kv_dtype], g.qkv,
                                               attention_gemms(rank))
    elif m.mla:
        att = mla_attention(gpu, fw, version, m, rank, KV_TABLE_DTYPES[m.kv_dtype], g.qkv,
                            attention_gemms(rank))
    else:
        att = model_attention(attention_table(gpu, fw, version, "generation_attention_perf"),
                              attention_table(gpu, fw, version, "context_attention_perf"), m,
                              rank, KV_TABLE_DTYPES[m.kv_dtype])
        if m.linear_layers:
            att = with_linear_layers(att, gdn_times(gpu, fw, version, m, rank), m)
    dec_rows, grid, pre_rows = att.decode, att.grid, att.prefill
    notes += att.notes
    # A one-token "prefill" is a decode to the simulator: its rows are left out.
    keep = pre_rows.tokens > 1
    pre_shapes = [StepShape(b, b * t, 0.0, b, b * t, b * t * (t + 1) / 2, 0.0)
                  for b, t in zip(pre_rows.batch[keep], pre_rows.tokens[keep], strict=True)]
    pre_s = list(pre_rows.seconds[keep])
    sparse: dict[str, Any] = {}
    pre_knots: dict[str, Any] = {}
    if m.sparse:
        # The prompts the top-k covers: measured knots over the step's tokens (the
        # module rows' launch floor makes the term fall as they grow, which no formula
        # follows), the formula past them; the sparse path, a price per token of its
        # own (sim.cost.tables.dsaattn).
        covered = [i for i, t in enumerate(pre_rows.tokens[keep]) if t <= m.index_topk]
        dense_shapes, dense_s = [pre_shapes[i] for i in covered], [pre_s[i] for i in covered]
        pre = fit_component("prefill_attention", dense_shapes, dense_s)
        knots = dense_knots(dense_shapes, dense_s)
        pre_knots = _knots(np.array(knots.xs), np.array(knots.ys))
        sparse = {"sparse_prefill": fit_sparse_prefill(pre.coef, knots, pre_shapes, pre_s,
                                                       m.index_topk, pre_rows.kernel)}
    else:
        pre = fit_component("prefill_attention", pre_shapes, pre_s)
    cols = grid.cols
    per_kv = (grid.values[0][-1] - grid.values[0][-2]) / (cols[-1] - cols[-2])
    pre_coef = {**pre.coef, "per_context_pair_s": pre.coef["per_self_pair_s"],
                "per_context_token_s": max(per_kv, 0.0) + att.context_token_s}
    comps = {
        "prefill_attention": {**_entry("prefill_attention", {k: _g(v) for k, v in
                                                             pre_coef.items()}), **pre_knots,
                              "fit": {"source": f"tables: {pre_rows.kernel} ({version}); "
                                                "cached-context terms derived",
                                      "mape_test": _g(pre.mape_test),
                                      "max_err_test": _g(pre.max_err_test),
                                      "n_train": pre.n_train, "n_test": pre.n_test}},
        **sparse,
        "decode_attention": {"formula": "grid over (decode_seqs, decode_kv / decode_seqs)",
                             "per_layer": True,
                             "grid": {"seqs": [_g(x) for x in grid.rows],
                                      "kv_per_seq": [_g(x) for x in grid.cols],
                                      "s": [[_g(x) for x in row] for row in grid.values]},
                             "fit": {"source": f"tables: {dec_rows.kernel} ({version})",
                                     "interpolation": _err_stats(att.decode_errors)}},
    }
    return comps, pre_rows.kernel, dec_rows.kernel


def build_profile(spec: BuildSpec, priors: Priors | None = None) -> dict[str, Any]:
    """The profile of ``spec`` as a plain mapping in schema order (see the module doc)."""
    version = resolve_version(spec)
    m, fw, gpu = spec.model, spec.framework, spec.gpu
    _check_spec(spec)
    rank = shard(m, spec.tp, where="--tp", ep=spec.ep, ep_where="--ep", dp=spec.dp)
    priors = priors if priors is not None else framework_priors(fw)
    notes: list[str] = []
    g = _gemms(spec, version, notes)
    gemm_kernel = g.source.kernel
    linear, interp, moe, experts = _linear_stack(spec, version, rank, g, notes)
    head, allreduce, comm = _head_and_allreduce(spec, version, rank, g, notes)
    attention, pre_kernel, dec_kernel = _attention(spec, version, rank, g, notes)
    ms, lin_ms = g.source.table.ms, g.lin.ms  # an FP8 table may time other token counts
    lin_fit = _formula_fit("linear", lin_ms, linear, _tokens_shape)
    head_fit = _formula_fit("lm_head", ms, head, _seqs_shape)
    comps = {
        "step": {**_entry("step", {"const_s": priors.step_const_s,
                                   "per_seq_s": priors.step_per_seq_s,
                                   "per_new_token_s": _g(rank.hidden * 2 / g.bandwidth),
                                   "per_group_s": 0.0, "group_seqs": 0.0}),
                 "fit": {"source": f"prior: {priors.source}; per_new_token_s: the embedding "
                                   "read at the GEMM table's bandwidth"}},
        "linear": {**_entry("linear", lin_fit["coef"]), **_knots(lin_ms, linear),
                   "fit": {"source": f"tables: gemm {g.lin_kernel} ({g.lin_fw} {g.lin_version})"
                                     if g.lin_fw != fw
                                     else f"tables: gemm {g.lin_kernel} ({version})",
                           "interpolation": _err_stats(interp),
                           "formula_past_knots": lin_fit["fit"]}},
        **attention,
        "lm_head": {**_entry("lm_head", head_fit["coef"]), **_knots(ms, head),
                    "fit": {"source": f"tables: gemm {gemm_kernel} ({version}); norm and "
                                      "sampler at the table's bandwidth",
                            "formula_past_knots": head_fit["fit"]}},
        "allreduce": allreduce,
        "in_situ": {**_entry("in_situ", dict.fromkeys(FORMS["in_situ"].coefs, 0.0)),
                    "fit": {"source": "none (kernel tables are timed in place)"}},
        "host": {**_entry("host", dict.fromkeys(FORMS["host"].coefs, 0.0)),
                 "fit": {"source": "none (in step's prior)"}},
        **({} if experts is None else {"experts": experts}),
        "frontend": {"coef": {"request_s": priors.request_s,
                              "per_prompt_token_s": priors.per_prompt_token_s,
                              "response_s": priors.response_s, "jitter_s": priors.jitter_s},
                     "fit": {"source": f"prior: {priors.source}"}},
    }
    mxfp8 = moe is not None and moe.dtype == "w4a8_mxfp4_mxfp8"
    label = f"{FRAMEWORK_NAMES[fw]} {version} on {GPU_LABELS.get(gpu, gpu)}" + dtype_note(
        m, GPUS[gpu], mxfp8) + ep_note(spec.ep) + (
        f"; data-parallel attention dp={spec.dp}" if spec.dp > 1 else "")
    return {
        "schema": SCHEMA,
        "source": {
            "kind": "measured-kernels", "phrase": f"measured kernels: {label}",
            "tables": f"NVIDIA AIConfigurator kernel tables, aiconfigurator-core "
                      f"{wheel_version()} (Apache-2.0)",
            "framework": fw, "version": version, "gpu": gpu,
            "kernels": {"gemm": gemm_kernel,
                        **({"linear_gemm": g.lin_kernel} if g.lin_kernel != gemm_kernel
                           else {}),
                        **({"moe": moe.kernel} if moe else {}),
                        "prefill_attention": pre_kernel,
                        "decode_attention": dec_kernel, **(comm.sources if comm else {})},
            "derived": {"kernel_floor_s": _g(g.floor_s), "bandwidth_bytes_s": _g(g.bandwidth)},
            "not_in_tables": "per-step scheduling, input preparation and host overhead; the "
                             "API server's per-request work (step and frontend priors)",
            "notes": notes,
        },
        "device": {"name": gpu, "reported": g.source.device},
        "dtype": m.dtype,
        "tp": spec.tp,
        **({"ep": spec.ep} if spec.ep > 1 else {}),
        **({"dp": spec.dp} if spec.dp > 1 else {}),
        "model": recorded_fields(m),
        "components": comps,
    }


def _qkv_gemm(m: ModelSpec, gpu: str, fw: str, version: str, lin_gemm: GemmTable,
              notes: list[str]) -> GemmTable:
    """The GEMM table that prices ``m``'s query/key/value projections (and with MLA
    kv_b's up-projection and the absorbed batched GEMMs' dtype): ``lin_gemm``, the other
    projections', unless the checkpoint keeps them at a ``qkv_dtype`` of their own,
    whose rows (:func:`projection_gemms`) it then reads, with a note saying so."""
    qkv = m.own_qkv_dtype
    if not qkv:
        return lin_gemm
    if qkv not in TABLE_DTYPES:
        raise ServesimError(f"qkv_dtype {qkv!r} is not built from the tables; built: "
                            f"{', '.join(TABLE_DTYPES)}", where="--qkv-dtype")
    table = projection_gemms(gpu, fw, version, qkv)[0].table
    notes.append(f"query/key/value projections{' (q_a/kv_a, q_b, kv_b)' if m.mla else ''} "
                 f"at {qkv}, from the {TABLE_DTYPES[qkv]} GEMM rows: the checkpoint keeps "
                 f"them apart from the other projections' {m.dtype}")
    return table


def _moe_stack(spec: BuildSpec, version: str, rank: Shard, lin_gemm: GemmTable,
               bf16_gemm: GemmTable, qkv_gemm: GemmTable,
               notes: list[str]
               ) -> tuple[np.ndarray, float, list[tuple[int, int]], MoeTimes,
                          dict[str, Any] | None]:
    """A mixture-of-experts model's projections per layer, averaged over its layers, at
    ``lin_gemm``'s token counts: attention GEMMs in every layer, the dense SwiGLU in its
    dense layers, in the others the measured MoE layer (:mod:`sim.cost.tables.moetable`),
    its router and any shared experts' GEMMs. Also the layers' mean SwiGLU width on this
    GPU (for the activation's memory traffic), the GEMM shapes used, the MoE layer's
    measured times (its kernel and the rows' dtype), and
    with data-parallel attention (``spec.dp`` > 1) the routed experts apart
    (:func:`_shared_experts`; the projections then leave them out), else None."""
    m = spec.model
    moe = moe_times(spec.gpu, spec.framework, version, m, spec.tp * spec.dp, spec.ep,
                    spec.routing, spec.moe_backend)
    notes.append(moe.note)
    attn, dense = attention_gemms(rank), mlp_gemms(rank)
    # A shared expert's width on this GPU (tensor-parallel even under expert parallelism).
    s_width = rank.shared_expert_params // (3 * rank.hidden)
    shared = [(2 * rank.shared_experts * s_width, rank.hidden),
              (rank.hidden, rank.shared_experts * s_width)]
    f_dense, f_moe = m.dense_layers / m.layers, rank.moe_layers / m.layers
    ms = lin_gemm.ms
    # The router (hidden -> every expert's logit, bf16, whole on every GPU) is not in the
    # MoE tables: their publisher adds it to each MoE layer as a GEMM of its own.
    router = np.array([bf16_gemm.at(float(x), m.experts, rank.hidden) for x in ms])
    notes.append(f"router GEMM (n={m.experts}, k={rank.hidden}, bf16) added to each MoE "
                 "layer: the MoE tables time the experts without it")
    apart = spec.dp > 1
    linear = (mixer_times(rank, lin_gemm, qkv_gemm)
              + f_moe * ((0.0 if apart else moe.at(ms)) + router))
    used = list(attn) + gdn_gemms(rank)
    if m.dense_layers:
        linear = linear + f_dense * sum(lin_gemm.times(n, k) for n, k in dense)
        used += dense
    if rank.shared_experts:
        linear = linear + f_moe * sum(lin_gemm.times(n, k) for n, k in shared)
        used += shared
    if rank.ep == 1:
        width = (f_dense * rank.intermediate + f_moe * (rank.experts_per_token
                                                        + rank.shared_experts)
                 * rank.expert_intermediate)
    else:  # k/ep of a token's experts are local on average, at their whole width
        width = f_dense * rank.intermediate + f_moe * (
            rank.experts_per_token * rank.expert_intermediate / rank.ep
            + rank.shared_experts * s_width)
    experts = _shared_experts(spec, version, rank, moe, ms) if apart else None
    return linear, width, used, moe, experts


def _shared_experts(spec: BuildSpec, version: str, rank: Shard, moe: Any,
                    ms: np.ndarray) -> dict[str, Any]:
    """The routed experts of every MoE layer of a data-parallel group at ``ms`` new
    tokens of all its ranks: the MoE table's layer (one GPU's E/ep experts fed every
    rank's tokens) plus their dispatch and combine, an NCCL all-gather and a
    reduce-scatter of those tokens' bf16 hidden states over the dp x tp GPUs (vLLM's
    default all-to-all backend under data parallelism), as knots."""
    group = spec.dp * spec.tp
    try:
        comm = load_collectives(spec.gpu, spec.framework, version, group)
    except ServesimError as exc:
        raise ServesimError(f"the ranks' dispatch and combine span {group} GPUs (dp x tp), "
                            f"which the collective tables do not time on {spec.gpu}: "
                            f"{exc.message}", where="--dp") from None
    nbytes = ms * rank.hidden * 2
    seconds = rank.moe_layers * (moe.at(ms) + comm.gather.at(nbytes) + comm.scatter.at(nbytes))
    return {"formula": "knots over the new tokens of every rank of the group, all MoE layers",
            **_knots(ms, seconds),
            "fit": {"source": f"tables: moe {moe.kernel}; {comm.sources['nccl']} all_gather "
                              f"and reduce_scatter over {group} GPUs"}}


def _entry(name: str, coef: dict[str, float]) -> dict[str, Any]:
    form = FORMS[name]
    return {"formula": form.formula, "per_layer": form.per_layer,
            "coef": {k: _g(float(coef[k])) for k in form.coefs}}


def _knots(xs: np.ndarray, ys: np.ndarray) -> dict[str, list[float]]:
    if not np.all(np.isfinite(ys)) or np.any(ys <= 0):
        raise ServesimError("a measured curve came out non-positive or not finite")
    return {"table_at": [int(x) if float(x).is_integer() else _g(x) for x in xs],
            "table_s": [_g(float(y)) for y in ys]}


def profile_name(spec: BuildSpec) -> str:
    """The shipped file stem of ``spec``: ``<gpu>-<model>-tp<N>[-dp<N>][-ep<N>]-<framework>``, then
    ``-<dtype>`` for FP8 or NVFP4 weights and ``-kvfp8`` for an FP8 KV cache."""
    m = spec.model
    base = MODELS.get(m.name)
    # A preset that is FP8 by itself (llama-3.3-70b-fp8) does not repeat it. The suffixes
    # are those sim.cost.measured parses back.
    quant = f"-{m.dtype}" if m.dtype in QUANT_VARIANTS and (base is None or base.dtype != m.dtype) \
        else ""
    kv = "-kvfp8" if m.kv_dtype == "fp8" else ""
    ep = f"-ep{spec.ep}" if spec.ep > 1 else ""
    dp = f"-dp{spec.dp}" if spec.dp > 1 else ""
    return f"{spec.gpu}-{m.name}-tp{spec.tp}{dp}{ep}-{spec.framework}{quant}{kv}"

