"""Latent attention (MLA) per layer from the tables' MLA rows, as SGLang and TensorRT-LLM
run it.

DeepSeek-V3's attention on one tensor-parallel rank of H/tp query heads takes two forms,
and the tables time each form's kernels apart (AIConfigurator's DeepSeek model composes
them the same way):

- **prefill** (``context_mla_perf``: ``batch_size`` sequences of ``isl`` new tokens, no
  cached prefix) runs expanded: ``kv_b_proj`` turns each new token's latent into per-head
  keys (128 wide, with the shared 64-wide rotary key) and values (128), then a
  multi-head attention kernel runs over them. The table times the kernel; kv_b's GEMM
  (n = H/tp·(qk_nope + v), k = kv_lora_rank) is added to each row from the GEMM table at
  m = batch·isl. A chunk after cached context up-projects the cached latents as well:
  :attr:`ModelAttention.context_token_s` is kv_b's marginal price of one token at the GEMM
  table's largest measured m (the profile adds it to the per-context-token read).
- **decode** (``generation_mla_perf``: ``batch_size`` entries of one token over
  ``step`` cached tokens) runs absorbed: a batched GEMM folds kv_b's key half into each
  head's query (``mla_bmm_perf``, ``mla_gen_pre``), the kernel attends to the latents
  themselves, and a second batched GEMM expands the result through kv_b's value half
  (``mla_gen_post``). The decode grid is the sum of the three at each entry count.
- **heads**: rows are matched on ``num_heads`` (per GPU) as for ordinary attention
  (:func:`sim.cost.tables.attntables.rows_at_heads`); the tables' ``tp_size`` column
  names how the collection's own model was split and is not read.
- the batched GEMMs run in FP8 when the weights are FP8 (both frameworks quantise the
  absorbed halves of kv_b per tensor), else in bf16.

The projections outside attention (the fused q_a/kv_a down-projection, q_b and the
output) belong to the linear stack (:mod:`sim.cost.tables.profilebuild`).

vLLM's tables time MLA only as whole modules (``mla_context_module_perf``,
``mla_generation_module_perf``: projections, kv_b or the batched GEMMs, and the kernel
of its default backend). Its attention terms are each module row less the block's
three projections priced from the same GEMM table as the linear stack, so that a step
of prefills only or decodes only costs what the module measured
(:func:`_from_modules`). TensorRT-LLM's tables hold both forms: :func:`module_errors`
measures the per-kernel composition against its modules.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sim.cost.dtypes import FP8_WEIGHTS
from sim.cost.shard import Shard
from sim.cost.specs import ModelSpec
from sim.cost.tables.attntables import (
    AttentionRows,
    attention_rows,
    decode_grid,
    default_kernel,
    grid_holdout_errors,
    rows_at_heads,
)
from sim.cost.tables.commtable import Curve
from sim.cost.tables.gemmtable import GemmTable, projection_gemms
from sim.cost.tables.kerneltables import Table, load_table
from sim.cost.tables.windowattn import ModelAttention
from sim.errors import ServesimError

# Frameworks whose tables time MLA kernel by kernel.
MLA_FRAMEWORKS = ("sglang", "trtllm")
# The share of module points whose remainder may be raised to the GEMM floor before a
# build from modules is refused (none are on H200 and B200).
MAX_RAISED = 0.1
# Whole-module MLA rows one GPU's collection times inconsistently, and the GPU whose rows
# of the same framework and version stand in for them. vLLM 0.24.0's B300 module rows
# are 1.98x its B200 ones at the median over the decode points both timed (16 heads,
# FP8 cache; 1.50x over the prefill points), where SGLang 0.5.14's and TensorRT-LLM
# 1.3.0rc20's MLA decode kernels time B300 within 1% of B200 (their prefill kernels at
# 0.86-0.90x), and InferenceX's Kimi-K2.5 runs under vLLM measured B300's TPOT at or
# below B200's in the same setups (7.83 against 8.16 ms at tp 4, 4 clients, 1,024/1,024).
MODULE_DONORS = {("vllm", "b300"): "b200"}


def kv_b_shape(rank: Shard) -> tuple[int, int]:
    """(n, k) of the expanded form's kv_b up-projection on one rank."""
    return rank.heads * (rank.qk_nope_head_dim + rank.v_head_dim), rank.kv_lora_rank


def mla_attention(gpu: str, framework: str, version: str, model: ModelSpec, rank: Shard,
                  kv_dtype: str, gemm: GemmTable,
                  projections: list[tuple[int, int]]) -> ModelAttention:
    """``model``'s latent attention per layer on one ``rank`` under ``framework``'s
    ``version`` tables on ``gpu``, KV cache in ``kv_dtype`` (the tables' name), kv_b's
    GEMMs priced from ``gemm`` (the query/key/value projections' table); under vLLM from
    its whole-module rows at those projections' dtype less ``projections`` ((n, k) GEMMs
    the linear stack prices) priced from ``gemm``. See the module doc."""
    if framework not in MLA_FRAMEWORKS:
        return _from_modules(gpu, framework, version, model, rank, kv_dtype, gemm, projections)
    context = load_table(gpu, "mla", framework, version, "context_mla_perf")
    generation = load_table(gpu, "mla", framework, version, "generation_mla_perf")
    bmm_table = load_table(gpu, "mla_bmm", framework, version, "mla_bmm_perf")
    pre_rows, pre_note = _kernel_rows(context, rank.heads, kv_dtype, decode=False)
    dec_rows, dec_note = _kernel_rows(generation, rank.heads, kv_dtype, decode=True)

    n, k = kv_b_shape(rank)
    up = np.array([gemm.at(b * t, n, k) for b, t in zip(pre_rows.batch, pre_rows.tokens,
                                                        strict=True)])
    prefill = AttentionRows(pre_rows.batch, pre_rows.tokens, pre_rows.seconds + up,
                            pre_rows.kernel, pre_rows.note)
    context_token_s = kv_b_per_token(gemm, rank)

    # kv_b's halves are absorbed in its own dtype, the query/key/value projections'.
    bmm_dtype = "fp8" if (model.qkv_dtype or model.dtype) in FP8_WEIGHTS else "bfloat16"
    pre_bmm, pre_bmm_note = _bmm(bmm_table, "mla_gen_pre", bmm_dtype, rank.heads)
    post_bmm, post_bmm_note = _bmm(bmm_table, "mla_gen_post", bmm_dtype, rank.heads)
    decode = AttentionRows(dec_rows.batch, dec_rows.tokens,
                           dec_rows.seconds + pre_bmm(dec_rows.batch) + post_bmm(dec_rows.batch),
                           dec_rows.kernel, dec_rows.note)
    notes = (f"latent attention (MLA) as {framework} runs it: prefill expanded ({pre_note}; "
             f"kv_b up-projection n={n}, k={k} from the GEMM table added), decode absorbed "
             f"({dec_note}; {bmm_dtype} batched GEMMs around it: {pre_bmm_note}, "
             f"{post_bmm_note})",)
    return ModelAttention(decode, prefill, decode_grid(decode), grid_holdout_errors(decode),
                        notes, context_token_s)


def _projections_s(gemm: GemmTable, projections: list[tuple[int, int]],
                   tokens: float) -> float:
    """Seconds of the (n, k) ``projections`` on ``tokens`` rows, from ``gemm``."""
    return float(sum(gemm.at(tokens, n, k) for n, k in projections))


def kv_b_per_token(gemm: GemmTable, rank: Shard) -> float:
    """kv_b's marginal seconds per token at the GEMM table's largest measured m: what
    re-expanding one cached latent costs a prefill chunk that attends to it."""
    n, k = kv_b_shape(rank)
    m_hi, m_lo = float(gemm.ms[-1]), float(gemm.ms[-2])
    return max((gemm.at(m_hi, n, k) - gemm.at(m_lo, n, k)) / (m_hi - m_lo), 0.0)


def _from_modules(gpu: str, framework: str, version: str, model: ModelSpec, rank: Shard,
                  kv_dtype: str, gemm: GemmTable,
                  projections: list[tuple[int, int]]) -> ModelAttention:
    """Attention from whole-module rows (vLLM's ``mla_context_module_perf`` and
    ``mla_generation_module_perf``: the block's projections, kv_b or the absorbed
    batched GEMMs, and the kernel, timed together at the checkpoint's projection dtype):
    each row less ``projections`` priced from ``gemm`` at its tokens, so that a step of
    prefills only, or of decodes only, costs the module exactly (:func:`less_projections`)."""
    dtype = model.qkv_dtype or model.dtype  # the projections the rows less ``projections``
    gemm_type = MODULE_GEMM_TYPES.get(dtype)
    rows_gpu = MODULE_DONORS.get((framework, gpu), gpu)
    own_gemm = gemm  # the rows' own GPU's, which their projections ran on
    if rows_gpu != gpu:
        own_gemm = projection_gemms(rows_gpu, framework, version, dtype)[0].table

    def rows(name: str, decode: bool) -> AttentionRows:
        table = load_table(rows_gpu, "mla", framework, version, name)
        where = f"{table.name} ({table.path})"
        t = table.where(gemm_type=gemm_type, kv_cache_dtype=kv_dtype, mla_dtype="bfloat16",
                        optional=("mla_dtype",))
        if gemm_type is None or not len(t):
            raise ServesimError(f"{where} has no rows for {dtype} projections with a "
                                f"{kv_dtype} KV cache; its projection dtypes: "
                                f"{', '.join(map(str, table.values('gemm_type')))}")
        kernel = default_kernel(t)
        return attention_rows(t.where(kernel_source=kernel), rank.heads, decode, kernel,
                              f"{where}: no measured rows at {rank.heads} heads")
    prefill, decode, pre_low, dec_low = less_projections(
        rows("mla_context_module_perf", False), rows("mla_generation_module_perf", True),
        own_gemm, projections, model.name, gpu, framework, "whole-module MLA rows")
    borrowed = (f"; {gpu}'s module rows are inconsistent with its other tables "
                f"(sim/cost/tables/mlaattn.py, MODULE_DONORS): {rows_gpu}'s rows of the same "
                f"release, less their projections at {rows_gpu}'s GEMM prices"
                if rows_gpu != gpu else "")
    notes = (f"latent attention (MLA) from {framework}'s whole-module rows (prefill "
             f"{prefill.kernel}, decode {decode.kernel}; {decode.note}) less the block's "
             f"projections from the GEMM table, which the linear stack prices; remainders "
             f"raised to the table's smallest time: {pre_low} of {len(prefill.seconds)} "
             f"prefill and {dec_low} of {len(decode.seconds)} decode points{borrowed}",)
    return ModelAttention(decode, prefill, decode_grid(decode), grid_holdout_errors(decode),
                        notes, kv_b_per_token(gemm, rank))


class TablesDisagree(ServesimError):
    """Whole-module rows faster than their block's projections priced from the GEMM table
    at too many points (:func:`less_projections`): no attention term can be split off."""


# The module tables' names of the projections' dtypes.
MODULE_GEMM_TYPES = {"fp8-block": "fp8_block", "bf16": "bfloat16", "fp16": "bfloat16"}


def less_projections(prefill: AttentionRows, decode: AttentionRows, gemm: GemmTable,
                     projections: list[tuple[int, int]], model: str, gpu: str,
                     framework: str, what: str
                     ) -> tuple[AttentionRows, AttentionRows, int, int]:
    """Whole-module ``prefill`` and ``decode`` rows less the block's ``projections`` ((n,
    k) GEMMs the linear stack prices) from ``gemm`` at each row's tokens, one-token
    prefill rows dropped (a decode to the simulator), and how many remainders of each
    were below the GEMM table's smallest time and raised to it. More than
    :data:`MAX_RAISED` of either phase's points so is an error (the tables disagree)."""
    floor = float(gemm.cube.min())

    def rest(rows: AttentionRows, decode: bool) -> tuple[AttentionRows, int]:
        if not decode:
            keep = rows.tokens > 1
            rows = AttentionRows(rows.batch[keep], rows.tokens[keep], rows.seconds[keep],
                                 rows.kernel, rows.note)
        tokens = rows.batch if decode else rows.batch * rows.tokens
        proj = np.array([_projections_s(gemm, projections, float(m)) for m in tokens])
        left = rows.seconds - proj
        return (AttentionRows(rows.batch, rows.tokens, np.maximum(left, floor), rows.kernel,
                              rows.note), int((left < floor).sum()))
    pre, pre_low = rest(prefill, decode=False)
    dec, dec_low = rest(decode, decode=True)
    for low, rows, phase in ((pre_low, pre, "prefill"), (dec_low, dec, "decode")):
        if low > MAX_RAISED * len(rows.seconds):
            raise TablesDisagree(
                f"{model} on {gpu}: {framework}'s {what} are faster than the block's "
                f"projections priced from the GEMM table at {low} of {len(rows.seconds)} "
                f"{phase} points; the two tables disagree, so no attention term can be "
                f"split from the modules here", where="--gpu")
    return pre, dec, pre_low, dec_low


def _kernel_rows(table: Table, heads: int, kv_dtype: str,
                 decode: bool) -> tuple[AttentionRows, str]:
    """The MLA kernel's rows at ``heads`` a GPU and KV cache ``kv_dtype``, and a note of
    the kernel and how the heads were matched."""
    kernel = default_kernel(table)
    t = table.where(kernel_source=kernel, mla_dtype="bfloat16", optional=("mla_dtype",))
    have = t.values("kv_cache_dtype")
    if kv_dtype not in have:
        raise ServesimError(f"{table.name} ({table.path}) has no rows for KV-cache dtype "
                            f"{kv_dtype!r}; its KV-cache dtypes: {', '.join(map(str, have))}")
    rows = attention_rows(t.where(kv_cache_dtype=kv_dtype), heads, decode, kernel,
                          f"{table.name} ({table.path}): no measured rows at {heads} heads")
    return rows, f"{kernel}, {rows.note}"


def _bmm(table: Table, op: str, dtype: str,
         heads: int) -> tuple[Callable[[np.ndarray], np.ndarray], str]:
    """Seconds of batched GEMM ``op`` in ``dtype`` at ``heads`` a GPU as a function of
    the tokens it multiplies: joined linearly between measured counts, in proportion past
    the last; and a note of the kernel and the heads' match."""
    t = table.where(op_name=op, bmm_dtype=dtype)
    if not len(t):
        raise ServesimError(f"{table.name} ({table.path}) has no {op} rows in {dtype}")
    kernel = default_kernel(t)
    rows, note = rows_at_heads(t.where(kernel_source=kernel), heads, ("num_tokens",))
    tokens = np.array(sorted(key[0] for key in rows), dtype=float)
    curve = Curve(tokens, np.array([rows[(int(x),)] for x in tokens]))
    return curve.at, f"{op} {kernel} ({note})"


def module_errors(gpu: str, framework: str, version: str, model: ModelSpec, rank: Shard,
                  kv_dtype: str, projections: list[tuple[int, int]],
                  gemm_dtype: str = "fp8_block") -> tuple[np.ndarray, np.ndarray]:
    """Relative errors (decode, prefill) of the composed attention block of one layer —
    :func:`mla_attention` as a profile prices it, plus ``projections`` ((n, k) GEMMs:
    the down-projection, q_b, the output) from the GEMM table — against the tables'
    whole-module timings (``mla_generation_module_perf``, ``mla_context_module_perf``)
    at every point both measured, for ``gemm_dtype`` projections. The builder never
    reads the modules, so this is a held-out check of the composition."""
    servesim_dtype = {"fp8_block": "fp8-block", "bfloat16": "bf16"}[gemm_dtype]
    gemm = projection_gemms(gpu, framework, version, servesim_dtype)[0].table  # as built
    att = mla_attention(gpu, framework, version, model, rank, kv_dtype, gemm, projections)

    pre = {(float(b), float(t)): float(s) for b, t, s in
           zip(att.prefill.batch, att.prefill.tokens, att.prefill.seconds, strict=True)}
    errs: list[list[float]] = [[], []]
    for i, name in enumerate(("mla_generation_module_perf", "mla_context_module_perf")):
        c = load_table(gpu, "mla", framework, version, name).where(
            num_heads=rank.heads, kv_cache_dtype=kv_dtype, gemm_type=gemm_dtype).columns
        for b, isl, step, ms in zip(c["batch_size"], c["isl"], c["step"], c["latency"],
                                    strict=True):
            if i == 0:  # a decode entry over `step` cached tokens
                composed = (att.grid.at(float(b), float(step) + 1)
                            + _projections_s(gemm, projections, float(b)))
            elif (float(b), float(isl)) in pre and isl > 1:
                composed = (pre[(float(b), float(isl))]
                            + _projections_s(gemm, projections, float(b * isl)))
            else:
                continue
            errs[i].append(composed / (float(ms) / 1e3) - 1.0)
    return np.array(errs[0]), np.array(errs[1])
