"""Public end-to-end serving measurements, simulated row by row.

AIConfigurator's ``silicon_sample.csv`` (in the ``aiconfigurator-core`` wheel,
Apache-2.0) records real serving benchmarks: a model on ``tp_size`` GPUs of one kind
under vLLM, SGLang or TensorRT-LLM, measured with a closed-loop client at fixed
concurrency (``batch_size``), mean TTFT and mean TPOT in milliseconds. The benchmark
(SemiAnalysis InferenceX's fork of vLLM's ``benchmark_serving.py``) sends
10 × concurrency requests of random tokens, request rate unbounded, with input and
output lengths drawn uniformly from [0.8·L, L] (``--random-range-ratio 0.8``) and
``--ignore-eos`` so every request generates its drawn output length.

A row servesim can model becomes a scenario: the model's preset, the GPU and tp, the
framework's default scheduler and limits (:data:`SCHEDULERS`), that closed-loop
workload, priced by a profile built from the same wheel's kernel tables for that
framework (:mod:`sim.cost.tables.profilebuild`). Rows it cannot model are kept with the reason
(:func:`classify`): FP4 weights of a mixture of experts whose checkpoint servesim cannot
lay out (a dense model's NVFP4 rows are simulated with the preset at ``nvfp4``,
MiniMax-M2.5's with its checkpoint's NVFP4 experts, :data:`NVFP4_MOE_CHECKPOINTS`),
models without a preset, disaggregated or
pipeline-parallel serving, experts split other than by tensor parallelism or by expert
parallelism over the tp GPUs, GPUs without tables. FP8 rows (``gemm_quant_mode`` fp8 or
fp8_block) are simulated with the preset's FP8 variant and are never used to fit the
priors: they are all held out. So are gpt-oss's rows (labelled fp4): its preset holds
the released checkpoint's mxfp4 experts; a MoE layer the newest tables of the row's
framework did not time at its tp is a reason (:func:`tables_cover`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.core.request import FINISHED
from sim.cost.dtypes import ExpertDtype, KVDtype, StateDtype
from sim.cost.gpus import GPUS
from sim.cost.presets import MODELS
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.files import read_text
from sim.report.metrics import per_request
from sim.validate.hybridruns import QWEN35_PATHS, qwen35_recipe, sglang_state_pool

# Hugging Face names of the dense models servesim has presets for.
MODEL_PRESETS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "nvidia/Llama-3.1-70B-Instruct-FP8": "llama-3.1-70b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "openai/gpt-oss-20b": "gpt-oss-20b",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "deepseek-ai/DeepSeek-R1": "deepseek-r1",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "zhipuai/GLM-5": "glm-5",
}
# Labels the sample gives rows of checkpoints released with 4-bit experts, by the
# preset's expert dtype: gpt-oss (mxfp4 experts, the rest bf16) "fp4" (GEMM mode
# "nvfp4"), Kimi-K2.5 (int4 experts) "int4"; Kimi's "fp4" rows with NVFP4 GEMMs ran
# NVIDIA's checkpoint (:data:`NVFP4_MOE_CHECKPOINTS`), those without a GEMM mode say no
# more.
FOUR_BIT_LABELS = {"mxfp4": ("fp4", "mxfp4"), "int4": ("int4",)}
SYSTEM_GPUS = {"a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200",
               "b200_sxm": "b200", "b300_sxm": "b300", "l40s": "l40s"}
# The GEMM quantisation modes of FP8 rows, as servesim's weight dtypes.
FP8_MODES = {"fp8": "fp8", "fp8_block": "fp8-block"}
# The GEMM quantisation mode of FP4 rows (W4A4 on FP4 tensor cores), simulated for dense
# models, whose FP4 releases (NVIDIA's Llama-3.1-70B-Instruct-FP4, Qwen3-32B-NVFP4) quantise
# every projection. A mixture of experts' FP4 row does not say which of its projections
# the checkpoint it ran keeps at 4 bits (the experts alone, or attention too): that comes
# from the checkpoint its recipe serves (:data:`NVFP4_MOE_CHECKPOINTS`).
FP4_MODES = {"nvfp4": "nvfp4"}
# Checkpoints whose own quantization_config fixes their weights' dtype whatever a row's
# label says: Qwen's FP8 releases are "fine-grained" FP8, weight_block_size [128, 128]
# (the sample labels some of their vLLM rows plain fp8).
# DeepSeek's V3 and R1 and MiniMax's M2.5 releases are block-scaled too (their rows say
# fp8); the sample's FP4 rows of those names (NVFP4 GEMMs) are not those releases.
CHECKPOINT_DTYPES = {"Qwen/Qwen3-235B-A22B-FP8": "fp8-block",
                     "deepseek-ai/DeepSeek-V3": "fp8-block",
                     "deepseek-ai/DeepSeek-R1": "fp8-block",
                     "MiniMaxAI/MiniMax-M2.5": "fp8-block",
                     # Its rows give the experts' mode as fp8_block: Qwen's FP8 release.
                     "Qwen/Qwen3.5-397B-A17B": "fp8-block",
                     # InferenceX's GLM-5 FP8 recipes serve zai-org/GLM-5-FP8 (128 x 128).
                     "zhipuai/GLM-5": "fp8-block"}
# Mixtures of experts whose FP4 rows' checkpoint is known, as (the other projections'
# dtype, the experts' dtype, the KV cache's). InferenceX's MiniMax-M2.5 FP4 recipes
# (minimaxm2.5_fp4_{b200,b300}.sh) serve nvidia/MiniMax-M2.5-NVFP4, quantised by ModelOpt's
# experts-only NVFP4 recipe with an FP8 KV cache: the routed experts' three projections at
# NVFP4, attention's projections, the router and the LM head left in bf16 (the model cards
# of requantised copies that match its hf_quant_config.json say so), KV scales calibrated
# in the checkpoint, and the B300 recipe passes --kv-cache-dtype fp8. (A bf16 cache would
# hold 114k tokens on one B200 beside the 125 GiB of weights: the tp 1 runs of 8,192-token
# prompts at 16 and 32 clients would have queued for seconds; they measured 348 and
# 500 ms.) DeepSeek's FP4 runs: :data:`QKV_BF16_CHECKPOINTS`.
NVFP4_MOE_CHECKPOINTS: dict[str, tuple[str, ExpertDtype, str]] = {
    "MiniMaxAI/MiniMax-M2.5": ("bf16", "nvfp4", "fp8"),
    # nvidia/Qwen3.5-397B-A17B-NVFP4 (its hf_quant_config.json ships in aiconfigurator-core
    # 0.12.0; InferenceX's qwen3.5_fp4_b200.sh serves it): routed experts NVFP4; attention,
    # the Gated DeltaNet projections, the shared experts and the LM head kept bf16; an FP8
    # KV cache. servesim gives shared experts the routed ones' dtype in memory (0.4 of
    # 1.5 GB a model, over the GPUs) and prices their GEMMs at the projections' bf16.
    "Qwen/Qwen3.5-397B-A17B": ("bf16", "nvfp4", "fp8"),
    # nvidia/Kimi-K2.5-NVFP4 (its config.json ships in aiconfigurator-core 0.12.0; the
    # NVFP4 Kimi checkpoint vLLM's Kimi-K2.5 recipe names for Blackwell): every layer's
    # self_attn* and the LM head left bf16 in its ignore list, the experts (and the first
    # layer's dense MLP) NVFP4, an 8-bit float KV-cache scheme, which vLLM's
    # kv-cache-dtype auto takes as FP8 since vllm-project/vllm PR 29980 (December 2025;
    # these rows ran 0.17 and 0.19).
    "moonshotai/Kimi-K2.5": ("bf16", "nvfp4", "fp8"),
    # nvidia/GLM-5-NVFP4 (its config.json and hf_quant_config.json ship in
    # aiconfigurator-core 0.12.0; InferenceX's glm5_fp4_b200.sh serves it): every
    # attention projection (the indexer's too) and the LM head excluded, so bf16; the
    # experts and the first three layers' dense MLPs NVFP4 (servesim keeps those dense
    # MLPs at the projections' bf16: 0.7B of 744B weights); an FP8 KV cache
    # (kv_cache_quant_algo FP8, and the recipe's --kv-cache-dtype fp8_e4m3).
    "zhipuai/GLM-5": ("bf16", "nvfp4", "fp8")}
# The checkpoint InferenceX's DeepSeek FP4 recipes serve (dsr1_fp4_b200.sh,
# dsr1_fp4_b200_trt.sh: nvidia/DeepSeek-R1-0528-NVFP4-v2; the sample's DeepSeek-V3 FP4
# rows are taken to have run the same), by ModelOpt's NVFP4 recipe as NVIDIA's DeepSeek
# NVFP4 exports lay out (nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json ships in
# aiconfigurator-core 0.12.0): every projection at NVFP4 but attention's q_a, q_b, kv_a
# and kv_b (and the LM head), kept bf16; an FP8 KV cache. Only InferenceX's rows: its
# recipes name the checkpoint, AIConfigurator's own runs do not.
QKV_BF16_CHECKPOINTS = {"deepseek-ai/DeepSeek-R1": "DeepSeek-R1-0528-NVFP4-v2",
                        "deepseek-ai/DeepSeek-V3": "DeepSeek-R1-0528-NVFP4-v2"}
# What InferenceX's launch recipes set that its rows do not record: an FP8 KV cache
# (`kv-cache-dtype: fp8` in vLLM's config, `kv_cache_config.dtype: fp8` in TensorRT-LLM's)
# for Llama-3.1-70B under both on every GPU, and for gpt-oss-120b under vLLM and
# TensorRT-LLM on B200 (SemiAnalysisAI/InferenceX, benchmarks/70b_fp8_*.sh,
# gptoss_fp4_b200.sh, gptoss_fp4_b200_trt.sh; its H200 TensorRT-LLM recipe keeps auto).
# Its DeepSeek recipes (dsr1_fp8_*.sh) do the same under TensorRT-LLM on every GPU and
# under SGLang on B200 (`--kv-cache-dtype fp8_e4m3`); SGLang on H200 keeps bf16. The
# sample's DeepSeek-V3 rows are taken to have run the same recipes. Its B300 recipes
# (single_node/dsr1_fp8_b300.sh, minimaxm2.5_fp8_b300.sh) say they reuse the B200 ones
# as they stood: B300 rows take the B200 rows' settings. Its GLM-5 FP8 recipes pass
# --kv-cache-dtype fp8_e4m3 on B200 and B300 (glm5_fp8_{b200,b300}.sh) and leave SGLang's
# default (the model's bf16) on H200 (glm5_fp8_h200.sh).
INFERENCEX_FP8_KV = frozenset({("meta-llama/Llama-3.1-70B", "vllm", None),
                               ("meta-llama/Llama-3.1-70B", "trtllm", None),
                               ("openai/gpt-oss-120b", "vllm", "b200_sxm"),
                               ("openai/gpt-oss-120b", "trtllm", "b200_sxm"),
                               ("deepseek-ai/DeepSeek-R1", "trtllm", None),
                               ("deepseek-ai/DeepSeek-V3", "trtllm", None),
                               ("deepseek-ai/DeepSeek-R1", "sglang", "b200_sxm"),
                               ("deepseek-ai/DeepSeek-V3", "sglang", "b200_sxm"),
                               ("deepseek-ai/DeepSeek-R1", "sglang", "b300_sxm"),
                               ("deepseek-ai/DeepSeek-V3", "sglang", "b300_sxm"),
                               ("zhipuai/GLM-5", "sglang", "b200_sxm"),
                               ("zhipuai/GLM-5", "sglang", "b300_sxm")})
# The MoE kernel InferenceX's MiniMax-M2.5 recipes force on vLLM: Triton's fused MoE,
# by VLLM_USE_FLASHINFER_MOE_FP8=0 and VLLM_MOE_USE_DEEP_GEMM=0 on B200
# (minimaxm2.5_fp8_b200.sh) and by --moe-backend triton on H200 (minimaxm2.5_fp8_h200.sh);
# the H100 recipe leaves vLLM's default. Its gpt-oss-120b B200 recipe (gptoss_fp4_b200.sh)
# sets VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: MXFP8 activations. Keyed by (model,
# framework, system).
MOE_BACKEND = {("MiniMaxAI/MiniMax-M2.5", "vllm", "b200_sxm"): "triton",
               ("openai/gpt-oss-120b", "vllm", "b200_sxm"): "mxfp8",
               ("MiniMaxAI/MiniMax-M2.5", "vllm", "b300_sxm"): "triton",
               ("MiniMaxAI/MiniMax-M2.5", "vllm", "h200_sxm"): "triton"}
# AIConfigurator's files whose rows are InferenceX's runs: of the 76 rows of its Qwen3.5
# gap analysis, 68 have the measured TTFT and TPOT of an InferenceX row of the same setup
# rounded to hundredths of a millisecond, 7 are setups of the same sweep InferenceX's
# exports lack (expert parallelism 4 at 4 to 16 clients), and one differs from its twin
# by 4% in TTFT (checked 2026-12-03).
INFERENCEX_COPIES = frozenset({"source_file=qwen3.5-397b-gap-analysis.csv"})
LENGTH_RATIO = 0.8  # lengths drawn uniformly from [int(0.8 L), L]
REQUESTS_PER_CLIENT = 10


# GPUs whose InferenceX rows do not fit the plain server's per-request latency (they are
# still simulated, and reported as held out). On B200, vLLM's Llama-3.1-70B FP8 rows come
# out with TTFT low at the median at every tp (-11% at tp 1 to -33% at tp 8, with the
# latency fitted on all GPUs): the tables' Blackwell kernels price these runs faster than
# they ran, by a share that grows with tp (cause not known). A per-request constant
# cannot represent that; fitted on them too, it rose from 15.9 to 29.5 ms, which prices
# Hopper's 1,024-token rows at 4 clients 25-36% high.
FRONTEND_UNFIT_GPUS = frozenset({"b200", "b300"})


@dataclass(frozen=True)
class Row:
    """One measured run: ``concurrency`` clients, lengths ``isl``/``osl`` (tokens),
    measured mean TTFT and TPOT (milliseconds); ``line`` its line in the file."""

    id: str
    line: int
    backend: str
    version: str
    model_path: str
    system: str
    precision: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    attention_dp: int
    ttft_ms: float
    tpot_ms: float
    source: str = ""
    gemm_quant_mode: str = ""
    moe_tp: int = 0  # 0: not given
    moe_ep: int = 0
    file: str = ""  # the CSV it was read from

    @property
    def collection(self) -> str:
        """Who measured the row: ``inferencex`` (SemiAnalysis InferenceX: its ``db-dump``
        rows and its dated exports, ``source_file=YYYY-MM-DD.csv``; the engine's own
        server and vLLM's benchmark client, which draws lengths from [0.8 L, L]) or
        ``aic`` (AIConfigurator's own gap-analysis collection, some of it served behind
        NVIDIA Dynamo's frontend, whose client settings are not published). Files of
        that collection which copy InferenceX's runs (:data:`INFERENCEX_COPIES`) count as
        InferenceX's."""
        inferencex = self.source.startswith("db-dump") or re.match(
            r"source_file=\d{4}-\d{2}-\d{2}\.csv", self.source) is not None
        copied = self.source.partition(";")[0] in INFERENCEX_COPIES
        return "inferencex" if inferencex or copied else "aic"

    @property
    def held_out(self) -> bool:
        """Whether the row is kept out of fitting the priors: half the rows, chosen by a
        hash of the row's id (reproducible, independent of file order)."""
        return hashlib.sha256(self.id.encode()).digest()[0] % 2 == 1


def default_path() -> Path:
    """``silicon_sample.csv`` of the installed ``aiconfigurator-core``."""
    from sim.cost.tables.kerneltables import systems_dir

    return systems_dir() / "silicon_sample.csv"


# What a row's counts may be: far above any public run (the sample's largest: prompts
# of 15,000 tokens, 8,192 clients, 72 GPUs), so that a mistyped cell is refused rather
# than simulated as 10^8-token prompts, or 10^9 requests that never end. Prompt and
# output lengths: four times the longest context of any preset (262,144 tokens); a row
# longer than its model's own context is skipped (:func:`fits_context`). Clients: the
# row's batch_size times its attention_dp_size. 0 or an empty cell: not given.
MAX_TOKENS = 1 << 20
MAX_CLIENTS = 1 << 16
MAX_GPUS = 1024
# Each count column: (its value when not given, its bound).
COUNTS = {"isl": (0, MAX_TOKENS), "osl": (0, MAX_TOKENS), "batch_size": (0, MAX_CLIENTS),
          "tp_size": (0, MAX_GPUS), "pp_size": (1, MAX_GPUS),
          "attention_dp_size": (1, MAX_GPUS), "moe_tp_size": (0, MAX_GPUS),
          "moe_ep_size": (0, MAX_GPUS)}
COLUMNS = ("id", "backend", "backend_version", "model_path", "system", "precision", "mode",
           "isl", "osl", "batch_size", "tp_size", "pp_size", "silicon_ttft_ms",
           "silicon_tpot_ms")


def _int(value: str | None, default: int, top: int) -> int:
    """A whole number in [0, ``top``] from a CSV cell ("" or nan: ``default``);
    ValueError otherwise."""
    if value is None or value.strip() in ("", "nan"):
        return default
    x = float(value)
    if not math.isfinite(x) or x != int(x) or not 0 <= x <= top:  # int(inf) would overflow
        raise ValueError(value)
    return int(x)


def _records(path: Path) -> list[tuple[int, dict[str, str]]]:
    """Each record of a silicon CSV, with the line it starts on and its cells by column.
    A header that lacks a column or names one twice, a quote left open, a cell that runs
    over lines, or a row with more cells than the header: an error naming the line."""
    reader = csv.reader(io.StringIO(read_text(path, "silicon CSV"), newline=""), strict=True)
    header: list[str] = []
    out: list[tuple[int, dict[str, str]]] = []
    start = 1
    try:
        for cells in reader:
            if reader.line_num > start:
                # No field of the format holds a line break: a quote opened here was
                # closed lines later, and the lines between were read as one cell.
                raise ServesimError(
                    f"malformed CSV line: a quoted cell runs on to line {reader.line_num} "
                    "(a quote left open?); no cell of a silicon CSV spans lines",
                    source=str(path), where=f"line {start}")
            if cells and not header:
                header = _header(cells, path, start)
            elif len(cells) > len(header) and any(c.strip() for c in cells[len(header):]):
                raise ServesimError(
                    f"malformed CSV line: {len(cells)} cells where the header names "
                    f"{len(header)} columns (a comma in a cell not quoted?)",
                    source=str(path), where=f"line {start}")
            elif cells:  # a blank line is no row
                out.append((start, dict(zip(header, cells, strict=False))))
            start = reader.line_num + 1
    except csv.Error as exc:
        why = ("a quote opened here is never closed" if "end of data" in str(exc)
               else str(exc))
        raise ServesimError(f"malformed CSV line: {why}", source=str(path),
                            where=f"line {start}") from None
    if not header:
        _header([], path, 1)  # an empty file: no column at all
    return out


def _header(cells: list[str], path: Path, line: int) -> list[str]:
    """``cells`` (on ``line``) as the header: every column of :data:`COLUMNS`, none named
    twice."""
    seen: dict[str, int] = {}
    for i, name in enumerate(cells, start=1):
        if name and name in seen:
            raise ServesimError(f"column {name!r} is named twice (columns {seen[name]} and "
                                f"{i}); which one holds the data is not clear",
                                source=str(path), where=f"line {line}")
        seen[name] = i
    missing = [c for c in COLUMNS if c not in seen]
    if missing:
        raise ServesimError(f"missing column {missing[0]!r}", source=str(path))
    return cells


def read_rows(path: Path) -> list[Row]:
    """Every row of a silicon CSV; a malformed one is an error naming file, line and column."""
    return [_row(r, line, path) for line, r in _records(path)]


def _row(r: dict[str, str], line: int, path: Path) -> Row:
    """The :class:`Row` of the cells ``r`` on ``line`` (a cell the row lacks: empty)."""
    col = ""
    try:
        n = {}
        for col, (default, top) in COUNTS.items():
            n[col] = _int(r.get(col), default, top)
        col = "silicon_ttft_ms"
        ttft = float(r.get(col) or "nan")
        col = "silicon_tpot_ms"
        tpot = float(r.get(col) or "nan")
    except (TypeError, ValueError):
        what = "a number" if col.startswith("silicon_") else \
            f"a whole number from 0 to {COUNTS[col][1]:,}"
        raise ServesimError(f"got {r.get(col)!r}, expected {what}",
                            source=str(path), where=f"line {line}, {col}") from None
    clients = n["batch_size"] * max(n["attention_dp_size"], 1)
    if clients > MAX_CLIENTS:
        raise ServesimError(
            f"got {r.get('batch_size')!r} clients per attention-data-parallel rank, times "
            f"{n['attention_dp_size']} ranks: {clients:,} clients, expected at most "
            f"{MAX_CLIENTS:,}", source=str(path), where=f"line {line}, batch_size")
    for col, ms in (("silicon_ttft_ms", ttft), ("silicon_tpot_ms", tpot)):
        if not (ms > 0) and not math.isnan(ms):  # a missing one is an incomplete row
            raise ServesimError(f"got {r.get(col)!r}, expected a positive time (ms)",
                                source=str(path), where=f"line {line}, {col}")
    text = {k: str(r.get(k) or "") for k in (
        "id", "backend", "backend_version", "model_path", "system", "precision",
        "mode", "silicon_data_source", "gemm_quant_mode")}  # missing cells: empty
    return Row(text["id"], line, text["backend"], text["backend_version"],
               text["model_path"], text["system"], text["precision"], text["mode"],
               n["isl"], n["osl"], n["batch_size"], n["tp_size"], n["pp_size"],
               max(n["attention_dp_size"], 1), ttft, tpot, text["silicon_data_source"],
               text["gemm_quant_mode"], n["moe_tp_size"], n["moe_ep_size"], str(path))


@dataclass(frozen=True)
class Case:
    """A row servesim simulates: which preset, GPU and framework stand for it, its
    weights' and KV cache's dtypes, and how its client drew lengths: ``ranged`` (uniform
    in [0.8 L, L]) or ``exact`` (L)."""

    row: Row
    model: str
    gpu: str
    framework: str
    lengths: str = "ranged"
    dtype: str = "bf16"
    ep: int = 1  # expert parallelism (moe_ep_size = tp, moe_tp_size 1)
    dp: int = 1  # data-parallel attention ranks (of row.tp / dp GPUs each)
    moe_backend: str = "auto"  # the MoE kernel its recipe forces (:data:`MOE_BACKEND`)
    kv_dtype: KVDtype = "auto"  # the KV cache's: the run's recipe's where known
    expert_dtype: ExpertDtype = ""  # the experts': "" the preset's, else its checkpoint's
    state_dtype: StateDtype = "fp32"  # a Gated DeltaNet model's recurrent state's
    qkv_dtype: ExpertDtype = ""  # attention's query/key/value projections': "" dtype

    @property
    def held_out(self) -> bool:
        """Whether the case is kept out of fitting: the row's hash says so, or it is a
        mixture of experts, or its weights are FP8 outside InferenceX's dense rows, or it
        is an InferenceX row on one of :data:`FRONTEND_UNFIT_GPUS`. The
        engine's priors are fitted on AIConfigurator's bf16 rows; the plain server's
        per-request latency on InferenceX's dense rows, whatever their weights (its
        kernel tables price the FP8 GEMMs)."""
        if self.row.held_out or self.spec.experts or self.spec.expert_dtype:
            return True
        if self.row.collection == "inferencex" and self.gpu in FRONTEND_UNFIT_GPUS:
            return True
        return self.dtype != "bf16" and self.row.collection != "inferencex"

    @property
    def tp(self) -> int:
        """Tensor-parallel GPUs of one rank: the row's tp over its data-parallel ranks."""
        return self.row.tp // self.dp

    @property
    def spec(self) -> ModelSpec:
        """The :class:`sim.cost.specs.ModelSpec` simulated: the preset at the row's weight
        and KV-cache dtypes."""
        import dataclasses

        return dataclasses.replace(MODELS[self.model], dtype=self.dtype,  # type: ignore[arg-type]
                                   kv_dtype=self.kv_dtype,
                                   linear_state_dtype=self.state_dtype,
                                   qkv_dtype=self.qkv_dtype,
                                   expert_dtype=(self.expert_dtype
                                                 or MODELS[self.model].expert_dtype))


def classify(row: Row) -> Case | str:
    """The :class:`Case` of ``row``, or why servesim does not simulate it."""
    if row.mode != "agg":
        return "disaggregated serving (prefill and decode pools of their own)"
    if row.model_path not in MODEL_PRESETS:
        return f"model {row.model_path} has no preset in servesim"
    dtype = "bf16"
    qkv = ""  # the query/key/value projections' where the checkpoint keeps them apart
    checkpoint_kv = False  # the checkpoint's own FP8 KV cache
    preset = MODELS[MODEL_PRESETS[row.model_path]]
    experts = preset.expert_dtype
    mode = row.gemm_quant_mode or row.precision
    if experts and mode in FP4_MODES and row.model_path in NVFP4_MOE_CHECKPOINTS:
        # A release with 4-bit experts of another kind (Kimi-K2.5's int4) whose NVFP4
        # rows ran NVIDIA's checkpoint.
        dtype, experts, kv = NVFP4_MOE_CHECKPOINTS[row.model_path]
        checkpoint_kv = kv == "fp8"
    elif experts:
        if row.precision not in FOUR_BIT_LABELS[experts]:
            return (f"{row.precision} weights of {row.model_path}: servesim models its "
                    f"released {experts} experts")
    elif row.precision not in ("", "nan", "bf16", "bfloat16"):
        dtype = FP8_MODES.get(mode, "")
        if dtype:
            dtype = CHECKPOINT_DTYPES.get(row.model_path, dtype)
        elif mode in FP4_MODES and row.model_path in QKV_BF16_CHECKPOINTS and \
                row.collection == "inferencex":
            dtype, qkv, checkpoint_kv = FP4_MODES[mode], "bf16", True
        elif mode in FP4_MODES and preset.experts:
            if row.model_path not in NVFP4_MOE_CHECKPOINTS:
                return (f"{mode} weights of a mixture of experts: the row does not say "
                        "which projections its checkpoint keeps at 4 bits (experts alone, "
                        "or attention too)")
            dtype, experts, kv = NVFP4_MOE_CHECKPOINTS[row.model_path]
            checkpoint_kv = kv == "fp8"
        elif mode in FP4_MODES:
            dtype = FP4_MODES[mode]
        else:
            return (f"{row.precision} weights ({row.gemm_quant_mode or 'no GEMM mode'}): "
                    f"servesim models bf16, FP8 ({', '.join(FP8_MODES)}) and, for dense "
                    f"models, NVFP4 ({', '.join(FP4_MODES)}) weights")
    if row.system not in SYSTEM_GPUS:
        return (f"system {row.system} is not compared: servesim prices public runs on "
                f"{', '.join(sorted(set(SYSTEM_GPUS.values())))}")
    row = _single_node_split(row)
    if row.pp != 1 or row.attention_dp > 1 and not _dep(row, preset):
        return f"pipeline ({row.pp}) or attention-data ({row.attention_dp}) parallelism"
    ep = dp = 1
    # The clients of a row labelled attention-data-parallel: its batch_size is one rank's
    # share (AIConfigurator counts batches per attention-data-parallel rank); every such
    # row's source field records silicon_concurrency = batch_size x attention_dp_size.
    clients = row.concurrency * row.attention_dp
    if row.attention_dp > 1 and experts in DP_SCRIPTS.get(row.model_path, ()):
        ep = dp = row.tp
    elif row.attention_dp > 1:
        # A recipe whose script ignores DP_ATTENTION: it ran tp with expert parallelism.
        ep = row.tp
    elif preset.experts and not (
            row.moe_tp in (0, row.tp) and row.moe_ep in (0, 1)):
        if not (row.moe_tp in (0, 1) and row.moe_ep == row.tp):
            return (f"experts split other than by tensor parallelism or by expert "
                    f"parallelism over the tp GPUs (tp {row.tp}, expert tp {row.moe_tp}, "
                    f"expert parallelism {row.moe_ep})")
        ep = row.moe_ep
    if row.backend not in SCHEDULERS:
        return f"backend {row.backend} is not modelled"
    if min(row.isl, row.osl, row.concurrency, row.tp) < 1 or not (
            math.isfinite(row.ttft_ms) and math.isfinite(row.tpot_ms)):
        return "incomplete row (lengths, concurrency, tp or latencies missing)"
    fp8_kv = checkpoint_kv or row.collection == "inferencex" and any(
        (row.model_path, row.backend, gpu) in INFERENCEX_FP8_KV for gpu in (None, row.system))
    if clients != row.concurrency:
        row = replace(row, concurrency=clients)
    # MiniMax's FP4 recipes, whose checkpoint's experts are not the preset's, leave
    # vLLM's default MoE kernel.
    forced = recipe_moe_backend(row) if experts == preset.expert_dtype else "auto"
    state = "fp32"
    if row.model_path in QWEN35_PATHS and row.collection == "inferencex" and \
            row.backend == "sglang":
        hybrid = qwen35_recipe(SYSTEM_GPUS[row.system], dtype, clients,
                               experts if experts != preset.expert_dtype else "")
        fp8_kv = fp8_kv or hybrid.get("kv_dtype") == "fp8"
        state = hybrid.get("state_dtype", state)
    return Case(row, MODEL_PRESETS[row.model_path], SYSTEM_GPUS[row.system], row.backend,
                dtype=dtype, ep=ep, kv_dtype="fp8" if fp8_kv else "auto", moe_backend=forced,
                expert_dtype=experts, dp=dp, state_dtype=state,  # type: ignore[arg-type]
                qkv_dtype=qkv)  # type: ignore[arg-type]


def _single_node_split(row: Row) -> Row:
    """``row`` with the split it ran where an InferenceX export wrote tp × ep as its tp:
    an aggregated row whose tp_size equals moe_tp_size × moe_ep_size with the two equal,
    and either exceeds one node's GPUs or has an id naming that split (``..._tp2_ep2``
    on tp_size 4), ran tp = moe_tp_size with its experts over those GPUs (expert tp 1,
    expert parallelism moe_ep_size). InferenceX's aggregated runs are its single-node
    scripts; the rows' ids say so where they name the split (``..._tp8_ep8`` on tp_size
    64, ``..._tp4_ep4`` on 16), and the runs that appear in another export as
    (tp 8, expert tp 1, expert parallelism 8) measured the same latencies to the digit
    (DeepSeek-R1 FP4 under SGLang 0.5.9 on B200: TTFT 189 ms and TPOT 8.05 ms at 4 clients
    of 1,024/1,024 in both)."""
    gpu = GPUS.get(SYSTEM_GPUS.get(row.system, ""))
    if (row.collection != "inferencex" or gpu is None or row.moe_ep < 2
            or row.moe_tp != row.moe_ep or row.tp != row.moe_tp ** 2):
        return row
    named = f"_tp{row.moe_tp}_ep{row.moe_ep}_" in f"{row.id}_"
    return replace(row, tp=row.moe_tp, moe_tp=1) if named or row.tp > gpu.node_gpus else row


def _dep(row: Row, preset: ModelSpec) -> bool:
    """Whether ``row`` is one of InferenceX's vLLM runs of a mixture of experts labelled
    attention-data-parallel (``dp-attn`` in its configuration, passed to the script as
    DP_ATTENTION): the sample records attention_dp_size = tp_size and moe_ep_size as
    tp_size or their product, on tp_size GPUs. What ran is its script's
    (:data:`DP_SCRIPTS`)."""
    return (row.backend == "vllm" and row.collection == "inferencex" and bool(preset.experts)
            and row.model_path in DP_SCRIPTS and row.attention_dp == row.tp
            and row.moe_tp in (0, 1) and row.moe_ep in (row.tp, row.tp * row.attention_dp))


# InferenceX's vLLM scripts that turn DP_ATTENTION into --tensor-parallel-size 1
# --data-parallel-size TP --enable-expert-parallel, by model and the experts' dtype of
# their checkpoint: MiniMax-M2.5's FP4 ones (single_node/minimaxm2.5_fp4_{b200,b300}.sh
# and their fixed_seq_len copies; nvidia/MiniMax-M2.5-NVFP4, NVFP4 experts). Its FP8
# scripts (minimaxm2.5_fp8_{b200,b300,h100,h200}.sh, every stored version) never read
# DP_ATTENTION and launch --tensor-parallel-size TP with --enable-expert-parallel; the
# runs agree: on 4 H100s those rows measured what the tp 4 expert-parallel rows did at
# the same clients (TPOT 10.09 against 10.12 ms at 4, 25.69 against 25.66 at 64).
# Kimi-K2.5's FP4 script (single_node/kimik2.5_fp4_b200.sh) reads neither DP_ATTENTION
# nor EP_SIZE in its stored version, yet its rows labelled attention-data-parallel (dp 4,
# tp 4) measured what the rows labelled expert-parallel (ep 4, tp 4) did at the same
# clients (TPOT 8.36 against 8.42 ms at 4, 10.50 against 10.60 at 8, 27.87 against 27.13
# at 64; 1,024/1,024 tokens on B200), and not what its plain tp 4 rows did (22.87 at
# 64): both ran tp 4 with expert parallelism.
DP_SCRIPTS: dict[str, tuple[str, ...]] = {"MiniMaxAI/MiniMax-M2.5": ("nvfp4",),
                                          "moonshotai/Kimi-K2.5": ()}


def tables_cover(case: Case) -> Case | str:
    """``case``, or why the installed tables cannot price it: a mixture of experts whose
    MoE layer the newest tables of its framework did not time at its tp."""
    from sim.cost.tables.moetable import moe_times
    from sim.cost.tables.profilebuild import BuildSpec, resolve_version

    if not case.spec.experts:
        return case
    try:
        version = resolve_version(BuildSpec(case.spec, case.gpu, case.framework, case.tp,
                                            ep=case.ep, dp=case.dp))
    except ServesimError:
        return f"no {case.framework} tables for {case.gpu}"
    try:
        moe_times(case.gpu, case.framework, version, case.spec, case.row.tp, case.ep,
                  backend=case.moe_backend)
        if case.dp > 1:
            from sim.cost.tables.commtable import load_collectives

            load_collectives(case.gpu, case.framework, version, case.row.tp)
    except ServesimError:
        split = f" with expert parallelism {case.ep}" if case.ep > 1 else ""
        kernel = "" if case.moe_backend == "auto" else f" (its recipe's {case.moe_backend} kernel)"
        return (f"{case.model}'s MoE layer{kernel} is not in the {case.framework} {version} "
                f"tables at tp {case.row.tp}{split}")
    return case


def fits_context(case: Case) -> Case | str:
    """``case``, or why not: its longest prompt plus output exceeds its model's context,
    so the simulated server would refuse those requests (and with all refused, there is
    no latency to compare)."""
    longest, context = case.row.isl + case.row.osl, case.spec.max_context
    if longest > context:
        return (f"prompt plus output longer than the model's context ({case.model}: "
                f"{context:,} tokens)")
    return case


def _large(gpu: str) -> bool:
    """vLLM's defaults treat GPUs of 70 GiB or more, except A100s, as large."""
    return gpu in ("h100-sxm", "h200", "b200", "b300")


# Each framework's default scheduling, as servesim's policies and limits:
# - vLLM v1: chunked prefill always on, decodes first, the rest of a step's token budget
#   (max_num_batched_tokens: 8192 on large GPUs, 2048 otherwise) filled with prefill
#   chunks; max_num_seqs 1024 or 256; 16-token blocks.
# - SGLang: prefill batches run apart from decode batches, new prefills first, up to
#   chunked_prefill_size 8192 tokens; token-granular KV pages (block 1).
# - TensorRT-LLM (PyTorch backend): in-flight batching mixes whole context requests with
#   generation in one step (chunked context off by default), max_num_tokens 8192,
#   32-token KV blocks.
SCHEDULERS: dict[str, Any] = {
    "vllm": lambda gpu: {"policy": "chunked",
                         "max_num_batched_tokens": 8192 if _large(gpu) else 2048,
                         "token_budget": 8192 if _large(gpu) else 2048,
                         "max_num_seqs": 1024 if _large(gpu) else 256,
                         "block_size": 16, "watermark": 0.0},
    "sglang": lambda gpu: {"policy": "continuous", "max_num_batched_tokens": 8192,
                           "max_num_seqs": 2048, "block_size": 1, "watermark": 0.0},
    "trtllm": lambda gpu: {"policy": "orca", "max_num_batched_tokens": 8192,
                           "max_num_seqs": 2048, "block_size": 32, "watermark": 0.0},
}


# How much of a GPU each framework gives its KV cache by default, beside the weights:
# - vLLM: servesim's memory model (sim.cost.memory: 0.9 of the reported memory less weights,
#   profiled activations, non-torch and CUDA-graph memory);
# - SGLang: mem_fraction_static (about 0.88 on 80 GB parts) of the memory holds weights
#   and the KV pool, activations and graphs living in the rest;
# - TensorRT-LLM: free_gpu_memory_fraction 0.9 of what is free after the weights and
#   the activation buffers are allocated.
STATIC_FRACTION = {"sglang": 0.88}
FREE_FRACTION = {"trtllm": 0.9}


# What InferenceX's DeepSeek recipes (dsr1_fp8_h200.sh, dsr1_fp8_b200.sh,
# dsr1_fp8_h200_trt.sh, dsr1_fp8_b200_trt.sh) launch with, beyond each framework's
# defaults. SGLang: --chunked-prefill-size and --max-prefill-tokens 32768 (8192 at tp 4 on
# B200), --mem-fraction-static 0.82 (0.95 at tp 4 on B200), and on B200
# --scheduler-recv-interval 10 (30 at tp 8 from 16 clients up; three stored versions of
# dsr1_fp8_b200.sh agree); --stream-interval 30 on B200 and 10 on H200, and
# --max-running-requests 128 (32 at tp 4) on B200, 512 (256 past 1,024/1,024) on H200.
# TensorRT-LLM: --max_num_tokens sized to one whole prompt beside every client's decode,
# max(8192, ⌈(clients + ISL + 64) / 64⌉·64), and kv_cache_config.free_gpu_memory_fraction
# 0.75 on H200, 0.8 on B200. On B200 (dsr1_fp8_b200_trt.sh) also: moe_config.backend
# TRTLLM (TensorRT-LLM's generated MoE kernels), except DEEPGEMM with a 0.7 fraction
# from 256 clients at 1,024/1,024 and 1,024/8,192 tokens (deepseek_deepgemm); a 0.75
# fraction at tp 4 for 8,192/1,024; batch waiting (batch_wait_timeout_iters 40,
# batch_wait_max_tokens_ratio 0.8) at 64 to 255 clients of 1,024/1,024; stream_interval
# 10 (on H200 too, dsr1_fp8_h200_trt.sh, whose MoE backend is CUTLASS, the kernel its
# tables time).
DEEPSEEK_PATHS = ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1")
# Its MiniMax-M2.5 recipes (single_node/minimaxm2.5_fp8_{b200,h200,h100}.sh) run vLLM at
# --gpu-memory-utilization 0.95 on B200 and H200 (0.90 on H100), and on H100 with
# --max-num-seqs 256 (both stored versions of the H100 script); their other settings
# changed between the runs' vLLM releases and are left at vLLM's defaults.
MINIMAX_MEMORY = {"b200": 0.95, "b300": 0.95, "h200": 0.95}
MINIMAX_SEQS = {"h100-sxm": 256}
# Its Llama-3.1-70B TensorRT-LLM recipes (70b_fp8_{b200,h200}_trt_slurm.sh,
# 70b_fp4_b200_trt_slurm.sh) pass --max_num_tokens 16384 for FP8 on B200 and the run's
# max model length (ISL + OSL in its sweep workflows) for FP8 on H200 and FP4 on B200,
# and for 1,024/1,024 runs below tp 8 turn batch waiting on: batch_wait_timeout_iters 20,
# batch_wait_max_tokens_ratio 0.9.
LLAMA70_PATHS = ("meta-llama/Llama-3.1-70B",)
# Its gpt-oss-120b TensorRT-LLM recipes (gptoss_fp4_{b200,h200}_trt.sh) pass
# --max_num_tokens 20000 and set kv_cache_config.free_gpu_memory_fraction 0.85 and
# stream_interval 20 on both GPUs.
GPTOSS_PATHS = ("openai/gpt-oss-120b",)
# Its GLM-5 SGLang recipes: on B200 and B300 FP8 (glm5_fp8_{b200,b300}.sh)
# --chunked-prefill-size 32768, --mem-fraction-static 0.85, --stream-interval 30 and
# --max-running-requests of the run's clients; on B200 FP4 (glm5_fp4_b200.sh) the same
# chunk, 0.9 of memory, --stream-interval 30 and --scheduler-recv-interval 10; on H200
# (glm5_fp8_h200.sh) SGLang's defaults but --mem-fraction-static 0.85.
GLM5_PATHS = ("zhipuai/GLM-5",)
# GPUs whose InferenceX recipes are the B200 ones (the B300 scripts reuse them as-is).
BLACKWELL = frozenset({"b200", "b300"})


def recipe(case: Case) -> dict[str, float]:
    """The launch settings of ``case``'s run that differ from its framework's defaults,
    where its public recipe is known (InferenceX's DeepSeek and MiniMax runs, and its
    TensorRT-LLM Llama-3.1-70B and gpt-oss-120b runs): any of ``max_num_batched_tokens`` (tokens),
    ``static_fraction`` and ``free_fraction`` (fractions of GPU memory, as
    :data:`STATIC_FRACTION` and :data:`FREE_FRACTION`), ``memory_utilization`` (vLLM's
    ``gpu_memory_utilization``), ``max_num_seqs``, TensorRT-LLM's ``batch_wait_timeout_iters`` and
    ``batch_wait_max_tokens_ratio``, and SGLang's ``scheduler_recv_interval``,
    ``stream_interval`` and ``max_running`` (``--max-running-requests``: see
    :func:`running_cap`)."""
    r = case.row
    if r.collection != "inferencex":
        return {}
    if r.model_path in QWEN35_PATHS and case.framework == "sglang":
        own = case.expert_dtype if case.expert_dtype != MODELS[case.model].expert_dtype else ""
        return {k: v for k, v in qwen35_recipe(case.gpu, case.dtype, r.concurrency,
                                               own).items()
                if k not in ("kv_dtype", "state_dtype")}
    if r.model_path == "MiniMaxAI/MiniMax-M2.5" and case.framework == "vllm":
        # Its FP4 recipes (minimaxm2.5_fp4_{b200,b300}.sh), whose checkpoint has experts
        # of their own dtype, keep vLLM's 0.90.
        fp4 = case.expert_dtype != ""
        seqs = {} if fp4 or case.gpu not in MINIMAX_SEQS else {
            "max_num_seqs": MINIMAX_SEQS[case.gpu]}
        return {"memory_utilization": 0.9 if fp4 else MINIMAX_MEMORY.get(case.gpu, 0.9),
                **seqs}
    if r.model_path in LLAMA70_PATHS and case.framework == "trtllm":
        fixed = case.gpu == "b200" and case.dtype != "nvfp4"
        out: dict[str, float] = {"max_num_batched_tokens": 16384 if fixed else r.isl + r.osl}
        if (r.isl, r.osl) == (1024, 1024) and r.tp < 8:
            out.update(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)
        return out
    if r.model_path in GLM5_PATHS and case.framework == "sglang":
        return _glm5_recipe(case)
    if r.model_path in GPTOSS_PATHS and case.framework == "trtllm":
        return {"max_num_batched_tokens": 20000, "free_fraction": 0.85, "stream_interval": 20}
    if r.model_path not in DEEPSEEK_PATHS:
        return {}
    if case.dtype == "nvfp4":
        return _deepseek_fp4_recipe(case)
    if case.framework == "sglang":
        if case.gpu not in BLACKWELL:
            return {"max_num_batched_tokens": 32768, "static_fraction": 0.82,
                    "stream_interval": 10,
                    "max_running": 512 if (r.isl, r.osl) == (1024, 1024) else 256}
        if r.tp == 4:
            return {"max_num_batched_tokens": 8192, "static_fraction": 0.95,
                    "scheduler_recv_interval": 10, "stream_interval": 30, "max_running": 32}
        return {"max_num_batched_tokens": 32768, "static_fraction": 0.82,
                "scheduler_recv_interval": 30 if r.concurrency >= 16 else 10,
                "stream_interval": 30, "max_running": 128}
    if case.framework == "trtllm":
        tokens = _trtllm_deepseek_tokens(r)
        if case.gpu not in BLACKWELL:
            return {"max_num_batched_tokens": tokens, "free_fraction": 0.75,
                    "stream_interval": 10}
        free = 0.7 if deepseek_deepgemm(r) else 0.75 if (
            r.tp == 4 and (r.isl, r.osl) == (8192, 1024)) else 0.8
        out = {"max_num_batched_tokens": tokens, "free_fraction": free, "stream_interval": 10}
        if (r.isl, r.osl) == (1024, 1024) and 64 <= r.concurrency < 256:
            out.update(batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
        return out
    return {}


def _glm5_recipe(case: Case) -> dict[str, float]:
    """InferenceX's GLM-5 SGLang recipes as launched (:data:`GLM5_PATHS`)."""
    if case.gpu not in BLACKWELL:
        return {"static_fraction": 0.85}
    if case.expert_dtype == "nvfp4":
        return {"max_num_batched_tokens": 32768, "static_fraction": 0.9,
                "stream_interval": 30, "scheduler_recv_interval": 10}
    return {"max_num_batched_tokens": 32768, "static_fraction": 0.85, "stream_interval": 30,
            "max_running": case.row.concurrency}


def _trtllm_deepseek_tokens(r: Row) -> int:
    """The --max_num_tokens InferenceX's DeepSeek TensorRT-LLM scripts pass for ``r``:
    its clients plus its prompt plus 64, up to a multiple of 64, never below 8,192."""
    return max(8192, -(-(r.concurrency + r.isl + 64) // 64) * 64)


def _deepseek_fp4_recipe(case: Case) -> dict[str, float]:
    """InferenceX's DeepSeek FP4 recipes on B200 as launched: SGLang's dsr1_fp4_b200.sh
    (--mem-fraction-static 0.85, --chunked-prefill-size 16384, --max-running-requests
    256, --scheduler-recv-interval 30 from 16 clients and 10 below, --stream-interval 10)
    and TensorRT-LLM's dsr1_fp4_b200_trt.sh (max_num_tokens of at least 8,192 and the
    clients plus the prompt plus 64 rounded up to 64, free_gpu_memory_fraction 0.8,
    stream_interval 10, no batch waiting)."""
    r = case.row
    if case.framework == "sglang":
        return {"max_num_batched_tokens": 16384, "static_fraction": 0.85,
                "scheduler_recv_interval": 30 if r.concurrency >= 16 else 10,
                "stream_interval": 10, "max_running": 256}
    if case.framework == "trtllm":
        return {"max_num_batched_tokens": _trtllm_deepseek_tokens(r), "free_fraction": 0.8,
                "stream_interval": 10}
    return {}


def recipe_moe_backend(row: Row) -> str:
    """The MoE backend (:data:`sim.cost.tables.moetable.MOE_BACKENDS`) InferenceX's recipe
    for ``row`` forces, "auto" where it forces none or the row is not InferenceX's:
    :data:`MOE_BACKEND`'s, and on B200 and B300 DeepSeek's TensorRT-LLM TRTLLM kernel
    unless the recipe picks DEEPGEMM (:func:`deepseek_deepgemm`) or, for its FP4 rows,
    CUTLASS (:func:`deepseek_fp4_cutlass`; the tables' own kernel there, "auto")."""
    if row.collection != "inferencex":
        return "auto"
    if row.model_path in DEEPSEEK_PATHS and row.backend == "trtllm" and \
            SYSTEM_GPUS.get(row.system) in BLACKWELL:
        if (row.gemm_quant_mode or row.precision) in FP4_MODES:
            return "auto" if deepseek_fp4_cutlass(row) else "trtllm-gen"
        return "auto" if deepseek_deepgemm(row) else "trtllm-gen"
    return MOE_BACKEND.get((row.model_path, row.backend, row.system), "auto")


def deepseek_fp4_cutlass(row: Row) -> bool:
    """Whether InferenceX's DeepSeek FP4 TensorRT-LLM recipe (dsr1_fp4_b200_trt.sh) runs
    ``row`` with the CUTLASS MoE backend rather than TRTLLM: from 256 clients at
    1,024/1,024 and 1,024/8,192 tokens, above 32 at 8,192/1,024, at tp 4 and 8."""
    if row.tp not in (4, 8):
        return False
    if (row.isl, row.osl) == (8192, 1024):
        return row.concurrency > 32
    return row.concurrency >= 256 and (row.isl, row.osl) in ((1024, 1024), (1024, 8192))


def deepseek_deepgemm(row: Row) -> bool:
    """Whether InferenceX's DeepSeek TensorRT-LLM recipe on B200 runs ``row`` with the
    DEEPGEMM MoE backend (256 clients or more at 1,024/1,024 and 1,024/8,192 tokens)
    rather than TRTLLM."""
    return row.concurrency >= 256 and (row.isl, row.osl) in ((1024, 1024), (1024, 8192))


def sglang_first_token_waits(version: str) -> bool:
    """Whether the SGLang build ``version`` (the row's) held a streamed request's first
    token until its first chunk of ``--stream-interval`` tokens. SGLang's output processor
    has had two rules: stream when the output's length is a multiple of N (the first
    token waits for N), and, as a 2026 version of sgl-project/sglang's
    scheduler_output_processor_mixin.py reads, when the length is 1 more than a multiple
    of N (the first token at once). Which release changed it is not recorded; the public
    rows split at 0.5.10: InferenceX's runs on 0.5.6 to 0.5.9 and on the nightly builds
    of February to April 2026 measured TTFTs of the prefill plus some 10 to 30 of their
    own decode steps at 4 to 8 clients, which only the first rule gives, and its
    0.5.10.post1 runs did not (docs/validation.md). So builds before 0.5.10, and
    nightlies, wait."""
    if version.startswith("nightly"):
        return True
    nums = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return nums is not None and tuple(int(x) for x in nums.groups()) < (0, 5, 10)


def running_cap(settings: dict[str, float], clients: int) -> int | None:
    """The running requests a recipe's ``--max-running-requests`` allows (None: not
    set), never below the row's ``clients``. InferenceX swept its SGLang scripts to 256
    and 512 clients past the caps their stored versions set (128 on B200): a row above
    the cap would have queued half its requests for a running slot, a request's whole
    decode long, and the rows measured no such wait (DeepSeek-R1 on 8 B200s at 512
    clients, 1,024/1,024 tokens: 3.1 s TTFT; servesim gave 81.6 s with 128 running). The
    cap sizes a Gated DeltaNet model's state pool (:func:`kv_blocks`); it bounds nothing
    else here."""
    cap = settings.get("max_running")
    return None if cap is None else max(int(cap), clients)


def kv_blocks(case: Case, serving: dict[str, Any], settings: dict[str, float]) -> int | None:
    """KV blocks per replica under ``case``'s framework's own memory defaults (or its
    run's recipe ``settings``, :func:`recipe`); None for vLLM (servesim's memory model
    sizes it). At least one block, so a row that ran for real still runs (and shows the
    starvation it had)."""
    from sim.cost.gpus import GPUS
    from sim.cost.memory import memory_budget
    from sim.cost.shard import shard

    if case.framework not in STATIC_FRACTION and case.framework not in FREE_FRACTION:
        return None
    b = memory_budget(case.spec, GPUS[case.gpu], case.tp, 0.9,
                      serving["block_size"], serving["max_num_batched_tokens"],
                      serving["max_num_seqs"], ep=case.ep, dp=case.dp)
    if case.framework in STATIC_FRACTION:
        static = settings.get("static_fraction", STATIC_FRACTION[case.framework])
        kv = static * b.total - b.weights
        if case.spec.linear_layers:
            # SGLang's state pool beside the KV pool; it also bounds the running requests.
            state = shard(case.spec, case.tp, ep=case.ep).linear_state_bytes
            kv, serving["max_num_seqs"] = sglang_state_pool(
                kv, state, running_cap(settings, case.row.concurrency),
                serving["max_num_seqs"])
    else:
        free = settings.get("free_fraction", FREE_FRACTION[case.framework])
        kv = free * (b.total - b.weights - b.activation)
    return max(int(kv // b.block_bytes), 1)


def scenario_raw(case: Case, seed: int = 0) -> dict[str, Any]:
    """The scenario mapping that stands for ``case``'s benchmark run."""
    r = case.row
    serving = SCHEDULERS[case.framework](case.gpu)
    settings = recipe(case)
    tokens = settings.get("max_num_batched_tokens")
    if tokens is not None:
        serving["max_num_batched_tokens"] = int(tokens)
    if "max_num_seqs" in settings:
        serving["max_num_seqs"] = int(settings["max_num_seqs"])
    for key in ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                "scheduler_recv_interval", "stream_interval"):
        if key in settings:
            serving[key] = settings[key]
    if case.framework == "sglang" and "stream_interval" in settings:
        serving["stream_first_token"] = not sglang_first_token_waits(r.version)
    if case.framework == "sglang" and r.isl + r.osl > serving["max_num_batched_tokens"]:
        # servesim's continuous policy (vLLM v0's rules) refuses a request that could not
        # be recomputed in one step; SGLang takes it (its prompt fits one prefill batch).
        serving["max_num_batched_tokens"] = r.isl + r.osl
    if case.framework == "trtllm" and r.isl > serving["max_num_batched_tokens"]:
        # TensorRT-LLM refuses a prompt longer than max_num_tokens unless chunked prefill
        # is on; a run that finished such prompts had room for one in a step.
        serving["max_num_batched_tokens"] = r.isl
    blocks = kv_blocks(case, serving, settings)
    if blocks is not None:
        serving["num_gpu_blocks"] = blocks

    def lengths(n: int) -> dict[str, Any]:
        if case.lengths == "exact":
            return {"dist": "fixed", "value": n}
        return {"dist": "uniform", "low": max(int(n * LENGTH_RATIO), 1), "high": n}

    # The experts' dtype where the row's checkpoint differs from the preset's.
    own = case.expert_dtype if case.expert_dtype != MODELS[case.model].expert_dtype else ""
    return {
        "name": f"silicon-{r.line}",
        # The KV cache's dtype too: vLLM's memory model sizes the cache from it (the
        # other frameworks' block counts come from kv_blocks, which reads case.spec).
        "model": case.model if (case.dtype, case.kv_dtype, own, case.state_dtype) == (
            "bf16", "auto", "", "fp32") else {
            "preset": case.model, "dtype": case.dtype,
            **({"kv_dtype": case.kv_dtype} if case.kv_dtype != "auto" else {}),
            **({"expert_dtype": own} if own else {}),
            **({"qkv_dtype": case.qkv_dtype} if case.qkv_dtype else {}),
            **({"linear_state_dtype": case.state_dtype} if case.state_dtype != "fp32"
               else {})},
        "hardware": {"gpu": case.gpu, "tp": case.tp,
                     "memory_utilization": settings.get("memory_utilization", 0.9),
                     **({"ep": case.ep} if case.ep > 1 else {}),
                     **({"dp": case.dp} if case.dp > 1 else {})},
        "cost": "roofline",  # replaced by the built profile when simulated
        "serving": serving,
        "workload": {"concurrency": r.concurrency,
                     "lengths": {"prompt": lengths(r.isl), "output": lengths(r.osl)},
                     "num_requests": REQUESTS_PER_CLIENT * r.concurrency, "seed": seed},
    }


def predict(case: Case, cost: Any, seed: int = 0) -> tuple[float, float, str]:
    """(mean TTFT ms, mean TPOT ms, note) of ``case`` simulated with ``cost``."""
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate

    sc = from_dict(scenario_raw(case, seed), f"<silicon line {case.row.line}>")
    res = simulate(sc, cost=cost)
    lat = per_request(res)
    done = res.status == FINISHED
    note = "" if done.all() else f"{int((~done).sum())} of {len(done)} requests not finished"
    ttft = lat["ttft"][done]
    tpot = lat["tpot"][done & np.isfinite(lat["tpot"])]
    return _mean_ms(ttft), _mean_ms(tpot), note


def _mean_ms(x: np.ndarray) -> float:
    return float(np.mean(x)) * 1e3 if x.size else math.nan
