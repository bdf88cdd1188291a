"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5) per layer from the tables'
whole-module rows.

The tables time a sparse-attention layer only as a whole module (``sparse_attention``
family: ``dsa_context_module_perf`` for prefill, ``dsa_generation_module_perf`` for
decode): the fused down-projection with the indexer's key, q_b, the indexer's own
projections, its FP8 logits and top-k, the latent attention over the selected tokens
(prefill of up to 2,048 tokens runs dense, which SGLang chooses by shape: the rows
record the kernel that ran), the absorbed batched GEMMs and the output projection. As
for vLLM's MLA modules (:func:`sim.cost.tables.mlaattn.less_projections`), each row
less the block's projections priced from the GEMM table is the attention term, so that
a step of prefills only, or of decodes only, costs the module exactly and the
projections scale with tokens as the linear stack prices them.

Rows are those of the module's architecture (the tables name DeepSeek-V3.2's and
GLM-5's; a sparse model of other dimensions is an error), of its projections' dtype and
KV-cache dtype, and of layers that run their own indexer (``op_name`` without
``_skip_indexer``: GLM-5.2's layers that reuse another's selection are timed apart).
Where several checkpoints of one architecture were timed, the one with the most rows is
read. Prefill rows are those with no cached prefix (``step`` 0); query heads are matched
per GPU as for the other attention tables (:func:`sim.cost.tables.attntables.rows_at_heads`).

What the profile builder makes of the rows: the decode grid, its untimed cells grown by
measured rates (:func:`sparse_decode_grid`); the prefill term within the top-k as knots
over the step's tokens (:func:`dense_knots`: SGLang's rows there are launch-bound); and
past it the ``sparse_prefill`` component's price per token (:func:`fit_sparse_prefill`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sim.cost.curves import Grid, Knots
from sim.cost.profile import FORMS
from sim.cost.shape import StepShape
from sim.cost.shard import Shard
from sim.cost.specs import ModelSpec
from sim.cost.tables.attntables import (
    AttentionRows,
    attention_rows,
    default_kernel,
    grid_holdout_errors,
    raw_grid,
)
from sim.cost.tables.gemmtable import GemmTable, projection_gemms
from sim.cost.tables.kerneltables import Table, load_table, versions
from sim.cost.tables.mlaattn import (
    MODULE_GEMM_TYPES,
    TablesDisagree,
    kv_b_per_token,
    less_projections,
)
from sim.cost.tables.windowattn import ModelAttention
from sim.errors import ServesimError

FAMILY = "sparse_attention"
# The architectures the module tables time, by the dimensions that set a module's work:
# (hidden, query latent, no-rope key width, value width, indexer heads, indexer width).
ARCHITECTURES = {(7168, 1536, 128, 128, 64, 128): "DeepseekV32ForCausalLM",
                 (6144, 2048, 192, 256, 32, 128): "GlmMoeDsaForCausalLM"}


def architecture(model: ModelSpec) -> str:
    """The tables' architecture name for ``model``'s sparse-attention layer, or a
    :class:`ServesimError` listing the ones they time."""
    key = (model.hidden, model.q_lora_rank, model.qk_nope_head_dim, model.v_head_dim,
           model.index_n_heads, model.index_head_dim)
    if key not in ARCHITECTURES:
        timed = "; ".join(f"{name} (hidden {k[0]}, q_lora_rank {k[1]}, qk_nope_head_dim "
                          f"{k[2]}, v_head_dim {k[3]}, index_n_heads {k[4]}, index_head_dim "
                          f"{k[5]})" for k, name in ARCHITECTURES.items())
        raise ServesimError(f"{model.name}'s sparse attention is not one the tables time; "
                            f"they time {timed}", where="model")
    return ARCHITECTURES[key]


def has_rows(gpu: str, framework: str, version: str, model: ModelSpec) -> bool:
    """Whether ``framework`` ``version`` on ``gpu`` has prefill and decode module rows of
    ``model``'s sparse-attention architecture for its projections' dtype."""
    if version not in versions(gpu, FAMILY, framework):
        return False
    gemm_type = MODULE_GEMM_TYPES.get(model.qkv_dtype or model.dtype)
    for name in ("dsa_context_module_perf", "dsa_generation_module_perf"):
        try:
            table = load_table(gpu, FAMILY, framework, version, name)
        except ServesimError:
            return False
        if not len(table.where(architecture=architecture(model), gemm_type=gemm_type)):
            return False
    return True


def sparse_attention(gpu: str, framework: str, version: str, model: ModelSpec, rank: Shard,
                     kv_dtype: str, gemm: GemmTable,
                     projections: list[tuple[int, int]]) -> ModelAttention:
    """``model``'s sparse attention per layer on one ``rank`` under ``framework``'s
    ``version`` module rows on ``gpu``, KV cache in ``kv_dtype`` (the tables' name), less
    ``projections`` ((n, k) GEMMs the linear stack prices) from ``gemm``, the query/key/
    value projections' table. See the module doc.

    The term left is the attention kernels' own, whatever dtype the projections have: where
    the rows of the model's projection dtype disagree with its GEMM table (bf16 module rows
    faster than their projections priced alone), it is taken from the same architecture's
    FP8 (fp8_block) rows less their projections at the FP8 GEMM table's prices."""
    dtype = model.qkv_dtype or model.dtype
    try:
        return _from_rows(gpu, framework, version, model, rank, kv_dtype, dtype, gemm,
                          projections, "")
    except TablesDisagree:
        if dtype == "fp8-block":
            raise
        fp8 = projection_gemms(gpu, framework, version, "fp8-block")[0].table
        why = (f"; its {dtype} rows disagree with the {dtype} GEMM table (faster than the "
               f"block's projections priced alone), so the attention term is the fp8_block "
               f"rows' less their projections at FP8 prices")
        return _from_rows(gpu, framework, version, model, rank, kv_dtype, "fp8-block", fp8,
                          projections, why)


def _from_rows(gpu: str, framework: str, version: str, model: ModelSpec, rank: Shard,
               kv_dtype: str, dtype: str, gemm: GemmTable, projections: list[tuple[int, int]],
               why: str) -> ModelAttention:
    """:func:`sparse_attention` from the module rows of projections in ``dtype``, less
    ``projections`` priced from ``gemm``; ``why`` ends the note."""
    arch = architecture(model)
    gemm_type = MODULE_GEMM_TYPES.get(dtype)

    def rows(name: str, op: str, decode: bool) -> AttentionRows:
        table = load_table(gpu, FAMILY, framework, version, name)
        where = f"{table.name} ({table.path})"
        t = table.where(architecture=arch, op_name=op, gemm_type=gemm_type,
                        kv_cache_dtype=kv_dtype, mla_dtype="bfloat16",
                        optional=("mla_dtype",))
        if gemm_type is None or not len(t):
            have = table.where(architecture=arch, op_name=op)
            raise ServesimError(
                f"{where} has no {arch} rows for {dtype} projections with a {kv_dtype} KV "
                f"cache; its rows of that architecture: projections "
                f"{', '.join(map(str, have.values('gemm_type'))) or 'none'}, KV cache "
                f"{', '.join(map(str, have.values('kv_cache_dtype'))) or 'none'}")
        t = t.where(model=_most_rows(t, "model"))
        if decode:
            kernel = default_kernel(t)
            t = t.where(kernel_source=kernel)
        else:
            t = t.where(step=0)
            kernel = " / ".join(_by_length(t))
        return attention_rows(t, rank.heads, decode, kernel,
                              f"{where}: no measured rows at {rank.heads} heads")

    prefill, decode, pre_low, dec_low = less_projections(
        rows("dsa_context_module_perf", "dsa_context_module", False),
        rows("dsa_generation_module_perf", "dsa_generation_module", True),
        gemm, projections, model.name, gpu, framework, "sparse-attention module rows")
    notes = (f"DeepSeek sparse attention (top {model.index_topk} of the cached tokens) from "
             f"{framework}'s whole-module {arch} rows (prefill {prefill.kernel}; decode "
             f"{decode.kernel}; {decode.note}) less the block's projections, the indexer's "
             f"too, from the GEMM table, which the linear stack prices; remainders raised to "
             f"the table's smallest time: {pre_low} of {len(prefill.seconds)} prefill and "
             f"{dec_low} of {len(decode.seconds)} decode points{why}",)
    return ModelAttention(decode, prefill, sparse_decode_grid(decode, model.index_topk),
                          grid_holdout_errors(decode), notes, kv_b_per_token(gemm, rank))


def sparse_decode_grid(rows: AttentionRows, topk: int) -> Grid:
    """Decode attention as a :class:`Grid` over (entries, KV tokens per entry), seconds,
    from sparse-attention module rows. The collections time the largest batches at short
    contexts only (GLM-5 on H200: 32 sequences to 4,096 cached tokens, 256 at one), and
    one sequence to the model's whole context. A batch's cells past its longest timed
    context add, for each of its entries, the time per cached token that the largest
    batch timing it grew by: within the ``topk`` (the selected latents' reads grow with
    the context) from its first context to the top-k, past it (only the indexer's scan
    grows) beyond the top-k. The dense tables' rule, in proportion to the KV read
    (:func:`sim.cost.tables.attntables.decode_grid`), would price every cached token as a
    dense kernel reads it. Cells between two timed contexts are joined linearly."""
    bs, cs, g = raw_grid(rows)
    timed = ~np.isnan(g)
    knee = int(np.searchsorted(cs, topk + 1))  # the first column past the top-k
    if knee >= len(cs):
        raise ServesimError(f"the sparse decode rows time no context past the top-k "
                            f"({topk} tokens)")

    def rate(a: int, b: int) -> float:
        """Seconds per entry and cached token between columns ``a`` and ``b`` (b > a),
        grown by the largest batch that timed both at no column after the
        smallest of ``b`` and its last timed column."""
        for i in range(len(bs) - 1, -1, -1):
            cols = np.flatnonzero(timed[i])
            hi = cols[cols >= b]
            if timed[i, a] and len(hi):
                last = int(hi[-1]) if a >= knee else b
                return max((g[i, last] - g[i, a]) / (bs[i] * (cs[last] - cs[a])), 0.0)
        raise ServesimError(f"the sparse decode rows time no batch at both {cs[a]:g} and "
                            f"{cs[b]:g} tokens")
    inside, past = rate(0, knee), rate(knee, knee + 1) if knee + 1 < len(cs) else 0.0
    for i in range(len(bs)):
        cols = np.flatnonzero(timed[i])
        if not len(cols):
            raise ServesimError(f"sparse decode attention has no measurement at batch "
                                f"{bs[i]:g}")
        last = int(cols[-1])
        for j in range(len(cs)):
            if j < last and not timed[i, j]:
                g[i, j] = np.interp(cs[j], cs[cols], g[i, cols])
            elif j > last:
                # Columns count the cached tokens and the new one: the top-k's is topk + 1.
                grow_in = max(min(cs[j], topk + 1) - min(cs[last], topk + 1), 0.0)
                grow_out = max(cs[j] - max(cs[last], topk + 1), 0.0)
                g[i, j] = g[i, last] + bs[i] * (inside * grow_in + past * grow_out)
    return Grid(tuple(bs), tuple(cs), tuple(tuple(r) for r in g))


def _most_rows(t: Table, column: str) -> str:
    """The value of ``column`` with the most rows in ``t`` (the first by name on a tie)."""
    values = [str(v) for v in t.columns[column]]
    return max(sorted(set(values)), key=values.count)


def _by_length(t: Table) -> list[str]:
    """The kernels of prefill rows ``t`` in the order of the prompt lengths they ran, each
    with the longest it ran ("kernel to N tokens"), the last without."""
    kernels: dict[str, int] = {}
    for k, isl in sorted(zip(t.columns["kernel_source"], t.columns["isl"], strict=True),
                         key=lambda row: int(row[1])):
        kernels[str(k)] = max(kernels.get(str(k), 0), int(isl))
    names = sorted(kernels, key=kernels.__getitem__)
    return [f"{k} to {kernels[k]} tokens" for k in names[:-1]] + names[-1:]


def dense_knots(shapes: Sequence[StepShape], seconds: Sequence[float]) -> Knots:
    """Knots over a prefill step's tokens of the module rows whose prompts the top-k
    covers (``shapes``, one batch of equal prompts each, timed at ``seconds`` less
    their projections): at each total of tokens, the median over the batches that make
    it. SGLang's rows there are bound by the module's kernel launches (about 0.84 ms a
    layer on H200 from 4 to 2,048 tokens), so the term left after the projections is a
    function of the step's tokens (GLM-5 on H200: 0.65 ms at 2,048, 0.51 at 4,096, 0.21
    at 8,192, whatever the batch) that falls as they grow; no formula of non-negative
    terms follows it."""
    by: dict[float, list[float]] = {}
    for s, y in zip(shapes, seconds, strict=True):
        by.setdefault(float(s.prefill_tokens), []).append(float(y))
    xs = sorted(by)
    return Knots(tuple(xs), tuple(float(np.median(by[x])) for x in xs))


def fit_sparse_prefill(dense: Mapping[str, float], knots: Knots, shapes: Sequence[StepShape],
                       seconds: Sequence[float], topk: int, kernel: str) -> dict[str, Any]:
    """The ``sparse_prefill`` component of a profile (:data:`sim.cost.profile.FORMS`):
    its price per token of the prompts past the ``topk`` tokens, fitted (least squares on
    relative error) to what the prefill ``shapes`` (one entry each, no cached context)
    measured (``seconds``) beyond the dense term's price (``knots`` over the step's
    tokens where they reach, the ``dense`` formula past them), and the fit's errors: over
    the points, and each point left out of the fit in turn."""
    form = FORMS["prefill_attention"]

    def base(s: StepShape) -> float:
        at = knots.at(float(s.prefill_tokens))
        return float(form.evaluate(dense, s)) if at is None else at
    rows = [(s.prefill_tokens, float(y), base(s))
            for s, y in zip(shapes, seconds, strict=True)
            if s.prefill_tokens / s.prefill_seqs > topk]
    if len(rows) < 2:
        raise ServesimError(f"the sparse-attention prefill rows ({kernel}) measured "
                            f"{len(rows)} prompt lengths past the top-k ({topk} tokens); "
                            "fitting and testing its price needs at least two")
    n, y, b = (np.array(c, dtype=float) for c in zip(*rows, strict=True))

    def slope(keep: np.ndarray) -> float:
        w = n[keep] / y[keep]
        return max(float(np.sum(w * (y[keep] - b[keep]) / y[keep]) / np.sum(w * w)), 0.0)
    per = slope(np.ones(len(n), dtype=bool))
    fit_err = np.abs((b + per * n) / y - 1.0)
    left = np.array([abs((b[i] + slope(np.arange(len(n)) != i) * n[i]) / y[i] - 1.0)
                     for i in range(len(n))])
    return {"formula": FORMS["sparse_prefill"].formula, "per_layer": True,
            "coef": {"per_token_s": float(f"{per:.6g}"), "topk_tokens": float(topk)},
            "fit": {"source": f"tables: {kernel}: prompts past the top-k less the dense "
                              "prefill term; topk_tokens: the model's index_topk",
                    "mape_fit": float(f"{fit_err.mean():.6g}"),
                    "mape_leave_one_out": float(f"{left.mean():.6g}"),
                    "max_err_leave_one_out": float(f"{left.max():.6g}"),
                    "n_points": len(n)}}
