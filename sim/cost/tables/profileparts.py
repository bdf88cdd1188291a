"""The parts of a measured profile built from the kernel tables: the tables a build
prices a layer's GEMMs from (:class:`Gemms`; the shapes are
:mod:`sim.cost.tables.layergemms`'), the linear stack (dense or mixture of experts), the
LM head and all-reduce, and the attention components. Assembled into a profile by
:func:`sim.cost.tables.profilebuild.build_profile`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.cost.measured import QUANT_VARIANTS
from sim.cost.profile import FORMS, GRID_FORMULA
from sim.cost.profilefile import FRAMEWORK_NAMES
from sim.cost.profilefit import fit_component
from sim.cost.shape import StepShape
from sim.cost.shard import QK_NORM_BYTES, Shard, qk_norm_allreduces
from sim.cost.specs import ModelSpec
from sim.cost.tables.commtable import Collectives, load_collectives
from sim.cost.tables.dsaattn import dense_knots, fit_sparse_prefill, sparse_attention
from sim.cost.tables.gdntable import gdn_times, with_linear_layers
from sim.cost.tables.gemmtable import (
    BORROWED_GEMMS,
    GemmSource,
    GemmTable,
    projection_gemms,
)
from sim.cost.tables.kerneltables import (
    TABLE_DTYPES,
    load_table,
)
from sim.cost.tables.layergemms import (
    attention_gemms,
    gdn_gemms,
    layer_gemms,
    mixer_times,
    mlp_gemms,
)
from sim.cost.tables.mlaattn import mla_attention
from sim.cost.tables.moetable import MoeTimes, moe_times
from sim.cost.tables.profilefmt import (
    component_entry,
    err_stats,
    formula_fit,
    knot_lists,
    sig6,
    tokens_shape,
)
from sim.cost.tables.windowattn import ModelAttention, model_attention
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.cost.tables.profilebuild import BuildSpec

# The most tokens a step runs as a CUDA graph under each framework's defaults.
GRAPH_TOKENS = {"vllm": 512, "sglang": 256, "trtllm": 128}
# The tables' KV-cache dtype for each of servesim's (``auto`` is the activations' bf16).
KV_TABLE_DTYPES = {"auto": "bfloat16", "fp8": "fp8"}
# The memory-bound kernels of a layer outside GEMMs and attention (see the module doc).
LAYER_ELEMENTWISE_KERNELS = 5
SAMPLER_PASSES = 3  # fp32 logits read by softmax, top-k/p and sampling
SAMPLER_KERNELS = 2


@lru_cache(maxsize=16)
def attention_table(gpu: str, framework: str, version: str, name: str) -> Any:
    """Attention table ``name`` (prefill or decode), read once per process."""
    return load_table(gpu, "attention", framework, version, name)


@dataclass(frozen=True)
class Gemms:
    """The GEMM tables one build prices from: bf16 (the LM head, and the projections of a
    16-bit model), the projections' own (``lin``: FP8 or NVFP4 rows, perhaps of another
    framework), the query/key/value projections', and what the bf16 table gives: the
    launch floor (s) and the weight-bound bandwidth (bytes/s)."""

    source: GemmSource  # the bf16 table
    lin: GemmTable
    lin_kernel: str
    lin_fw: str
    lin_version: str
    qkv: GemmTable
    floor_s: float
    bandwidth: float


def gemm_tables(spec: BuildSpec, version: str, notes: list[str]) -> Gemms:
    """The GEMM tables of a build (:class:`Gemms`); what their choice means goes to
    ``notes``."""
    m, fw, gpu = spec.model, spec.framework, spec.gpu
    # The LM head and the memory-bound kernels run in bf16 whatever the weights' dtype.
    source, bf16_fw, bf16_version = projection_gemms(gpu, fw, version, "bf16")
    gemm = source.table
    # FP8 and NVFP4 projections are priced from their own GEMM rows, the rest from bf16's.
    lin_source, lin_fw, lin_version = (projection_gemms(gpu, fw, version, m.dtype)
                                       if m.dtype in QUANT_VARIANTS
                                       else (source, bf16_fw, bf16_version))
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
    if lin_source.one_grid is not None:
        lo, hi = lin_source.one_grid
        notes.append(f"{m.dtype} projections' rows at {lo}-{hi} tokens priced at their "
                     f"median for each shape: {FRAMEWORK_NAMES[lin_fw]}'s kernel runs them "
                     "on one grid of tiles, and the rows time 1 token 1.6-1.9x above the "
                     "others (ONE_GRID, sim/cost/tables/gemmtable.py)")
    borrowed = [("bf16", bf16_fw, bf16_version)] + (
        [(m.dtype, lin_fw, lin_version)] if m.dtype in QUANT_VARIANTS else [])
    for dtype, by, by_version in borrowed:
        if by != fw:
            what = "projections" if dtype in QUANT_VARIANTS else "bf16 GEMMs"
            notes.append(f"{what} priced from {by} {by_version}'s {TABLE_DTYPES[dtype]} rows of "
                         f"the same library: {fw}'s own table {BORROWED_GEMMS[(fw, dtype)][1]} "
                         "(sim/cost/tables/gemmtable.py)")
    qkv_gemm = qkv_table(m, gpu, fw, version, lin_gemm, notes)
    if fw == "vllm":
        # vLLM V1 pads every step of up to its largest CUDA-graph size to a captured size.
        # One padded table per table (the QKV table is often the projections' own, which
        # mixer_times reads as a fast path).
        padded: dict[int, GemmTable] = {}
        gemm, lin_gemm, qkv_gemm = (padded.setdefault(id(t), t.graph_padded(GRAPH_TOKENS[fw]))
                                    for t in (gemm, lin_gemm, qkv_gemm))
        source = dataclasses.replace(source, table=gemm)
    big = float(gemm.ns[gemm.ns <= 16384][-1])
    bandwidth = big * big * 2 / float(gemm.times(big, big)[0])  # m = 1: weight-bound
    return Gemms(source, lin_gemm, lin_kernel, lin_fw, lin_version, qkv_gemm,
                  float(gemm.cube.min()), bandwidth)


def linear_stack(spec: BuildSpec, version: str, rank: Shard, g: Gemms, notes: list[str]
                  ) -> tuple[np.ndarray, np.ndarray, MoeTimes | None, dict[str, Any] | None]:
    """One layer's linear stack at every token count of the projections' table (s), with
    its elementwise kernels; the interpolation errors of the GEMMs priced; the MoE
    layer's times and its ``experts`` component (None for a dense model)."""
    m, lin_gemm = spec.model, g.lin
    shapes = layer_gemms(rank)
    moe, experts = None, None
    if m.experts:
        linear, width, shapes, moe, experts = moe_stack(spec, version, rank, lin_gemm,
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


def head_and_allreduce(spec: BuildSpec, version: str, rank: Shard, g: Gemms,
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
        return head, {**component_entry("allreduce", dict.fromkeys(FORMS["allreduce"].coefs, 0.0)),
                      "fit": {"source": "none (tp=1)"}}, None
    try:
        comm = load_collectives(gpu, fw, version, spec.tp)
    except ServesimError as exc:
        # The table's own path says little to whoever gave --tp; the option comes first.
        raise ServesimError(f"got {spec.tp}: the collective tables do not time "
                            f"{spec.tp} GPUs on {gpu}: {exc.message}", where="--tp") from None
    head = head + comm.gather.at(ms * rank.vocab * spec.tp * 2)
    graphed = ms <= GRAPH_TOKENS[fw]
    reduce = (2 * m.layers + 1) * comm.allreduce(ms * rank.hidden * 2, graphed)
    if qk_norm_allreduces(m, spec.tp):
        # Each layer's query/key norm over all heads waits for the sums of squares of
        # every GPU's heads: a small all-reduce of its own.
        reduce = reduce + m.layers * comm.allreduce(ms * QK_NORM_BYTES, graphed)
    ar_fit = formula_fit("allreduce", ms, reduce, tokens_shape)
    allreduce = {**component_entry("allreduce", ar_fit["coef"]), **knot_lists(ms, reduce),
                 "fit": {"source": f"tables: {comm.sources['custom_allreduce']}, "
                                   f"{comm.sources['nccl']}", **ar_fit["fit"]}}
    return head, allreduce, comm


def attention_components(spec: BuildSpec, version: str, rank: Shard, g: Gemms, notes: list[str]
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
        pre_knots = knot_lists(np.array(knots.xs), np.array(knots.ys))
        sparse = {"sparse_prefill": fit_sparse_prefill(pre.coef, knots, pre_shapes, pre_s,
                                                       m.index_topk, pre_rows.kernel)}
    else:
        pre = fit_component("prefill_attention", pre_shapes, pre_s)
    cols = grid.cols
    per_kv = (grid.values[0][-1] - grid.values[0][-2]) / (cols[-1] - cols[-2])
    pre_coef = {**pre.coef, "per_context_pair_s": pre.coef["per_self_pair_s"],
                "per_context_token_s": max(per_kv, 0.0) + att.context_token_s}
    comps = {
        "prefill_attention": {**component_entry("prefill_attention", {k: sig6(v) for k, v in
                                                             pre_coef.items()}), **pre_knots,
                              "fit": {"source": f"tables: {pre_rows.kernel} ({version}); "
                                                "cached-context terms derived",
                                      "mape_test": sig6(pre.mape_test),
                                      "max_err_test": sig6(pre.max_err_test),
                                      "n_train": pre.n_train, "n_test": pre.n_test}},
        **sparse,
        "decode_attention": {"formula": GRID_FORMULA,
                             "per_layer": True,
                             "grid": {"seqs": [sig6(x) for x in grid.rows],
                                      "kv_per_seq": [sig6(x) for x in grid.cols],
                                      "s": [[sig6(x) for x in row] for row in grid.values]},
                             "fit": {"source": f"tables: {dec_rows.kernel} ({version})",
                                     "interpolation": err_stats(att.decode_errors)}},
    }
    return comps, pre_rows.kernel, dec_rows.kernel


def qkv_table(m: ModelSpec, gpu: str, fw: str, version: str, lin_gemm: GemmTable,
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


def moe_stack(spec: BuildSpec, version: str, rank: Shard, lin_gemm: GemmTable,
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
    (:func:`shared_expert_times`; the projections then leave them out), else None."""
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
    experts = shared_expert_times(spec, version, rank, moe, ms) if apart else None
    return linear, width, used, moe, experts


def shared_expert_times(spec: BuildSpec, version: str, rank: Shard, moe: Any,
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
            **knot_lists(ms, seconds),
            "fit": {"source": f"tables: moe {moe.kernel}; {comm.sources['nccl']} all_gather "
                              f"and reduce_scatter over {group} GPUs"}}


