"""Public end-to-end serving measurements, simulated row by row.

AIConfigurator's ``silicon_sample.csv`` (in the ``aiconfigurator-core`` wheel,
Apache-2.0) records real serving benchmarks: a model on ``tp_size`` GPUs of one kind
under vLLM, SGLang or TensorRT-LLM, measured with a closed-loop client at fixed
concurrency (``batch_size``), mean TTFT and mean TPOT in milliseconds. The benchmark
(SemiAnalysis InferenceX's fork of vLLM's ``benchmark_serving.py``) sends
10 × concurrency requests of random tokens, request rate unbounded, with input and
output lengths drawn uniformly from [0.8·L, L] (``--random-range-ratio 0.8``) and
``--ignore-eos`` so every request generates its drawn output length.

This module decides what each row is (:class:`Case`) or why it is not simulated; the
rows are read by :mod:`sim.validate.siliconrows`. A row servesim can model becomes a
scenario (:mod:`sim.validate.siliconrecipes`): the model's preset, the GPU and tp, the
framework's default scheduler and limits and the run's published launch recipe, that
closed-loop workload, priced by a profile built from the same wheel's kernel tables for
that framework (:mod:`sim.cost.tables.profilebuild`). Rows it cannot model are kept with the reason
(:func:`classify`): FP4 weights of a mixture of experts whose checkpoint servesim cannot
lay out (a dense model's NVFP4 rows are simulated with the preset at ``nvfp4``,
MiniMax-M2.5's with its checkpoint's NVFP4 experts, :mod:`sim.validate.siliconcheckpoints`),
models without a preset, disaggregated or
pipeline-parallel serving, experts split other than by tensor parallelism or by expert
parallelism over the tp GPUs, GPUs without tables. FP8 rows (``gemm_quant_mode`` fp8 or
fp8_block) are simulated with the preset's FP8 variant and are never used to fit the
priors: they are all held out. So are gpt-oss's rows (labelled fp4): its preset holds
the released checkpoint's mxfp4 experts; a MoE layer the newest tables of the row's
framework did not time at its tp is a reason (:func:`tables_cover`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sim.cost.dtypes import ExpertDtype, KVDtype, StateDtype
from sim.cost.gpus import GPUS
from sim.cost.presets import MODELS
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.validate.hybridruns import QWEN35_PATHS, qwen35_recipe
from sim.validate.siliconcheckpoints import (
    CHECKPOINT_DTYPES,
    FOUR_BIT_LABELS,
    FP8_MODES,
    INFERENCEX_FP8_KV,
    MODEL_PRESETS,
    MODELOPT_FP8_KV,
    NVFP4_MOE_CHECKPOINTS,
    QKV_BF16_CHECKPOINTS,
)
from sim.validate.siliconrecipes import SCHEDULERS, recipe_moe_backend
from sim.validate.siliconrows import FP4_MODES, SYSTEM_GPUS, Row

# GPUs whose InferenceX rows do not fit the plain server's per-request latency (they are
# still simulated, and reported as held out). On B200, vLLM's Llama-3.1-70B FP8 rows come
# out with TTFT low at the median at every tp (-11% at tp 1 to -33% at tp 8, with the
# latency fitted on all GPUs): the tables' Blackwell kernels price these runs faster than
# they ran, by a share that grows with tp (cause not known). A per-request constant
# cannot represent that; fitted on them too, it rose from 15.9 to 29.5 ms, which prices
# Hopper's 1,024-token rows at 4 clients 25-36% high.
FRONTEND_UNFIT_GPUS = frozenset({"b200", "b300"})


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


def classify(row: Row, mtp_as_plain: bool = False) -> Case | str:
    """The :class:`Case` of ``row``, or why servesim does not simulate it. An unlabelled
    MTP run (:attr:`Row.unlabelled_mtp`) is kept out unless ``mtp_as_plain``, which gives
    it the case of its plain recipe (for docs/scripts/mtp_rows.py to add the drafting)."""
    if row.mode == "disagg":
        return "disaggregated serving (prefill and decode pools of their own)"
    if row.mode != "agg":
        return f"mode {row.mode!r}: neither agg (one pool) nor disagg"
    if row.model_path not in MODEL_PRESETS:
        return f"model {row.model_path} has no preset in servesim"
    if row.unlabelled_mtp and not mtp_as_plain:
        return ("speculative decoding (multi-token prediction) that the row does not "
                "label: InferenceX's TensorRT-LLM MTP recipe, whose acceptance the sample "
                "does not record")
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
    elif mode not in ("", "nan", "bf16", "bfloat16"):
        # The GEMM mode, where given, is what the kernels ran, whatever the precision
        # column says (AIConfigurator's own rows may leave that empty).
        dtype = FP8_MODES.get(mode, "")
        if dtype:
            dtype = CHECKPOINT_DTYPES.get(row.model_path, dtype)
            checkpoint_kv = dtype == "fp8" and (row.model_path, row.backend) in MODELOPT_FP8_KV
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
            return (f"{row.precision or 'unlabelled'} weights "
                    f"({row.gemm_quant_mode or 'no GEMM mode'}): "
                    f"servesim models bf16, FP8 ({', '.join(FP8_MODES)}) and, for dense "
                    f"models, NVFP4 ({', '.join(FP4_MODES)}) weights")
    if row.system not in SYSTEM_GPUS:
        return (f"system {row.system} is not compared: servesim prices public runs on "
                f"{', '.join(sorted(set(SYSTEM_GPUS.values())))}")
    # Before the splits are judged: a tp of 0 (or a missing length or latency) is an
    # incomplete row, not an expert split servesim does not model.
    if min(row.isl, row.osl, row.concurrency, row.tp) < 1 or not (
            math.isfinite(row.ttft_ms) and math.isfinite(row.tpot_ms)):
        return "incomplete row (lengths, concurrency, tp or latencies missing)"
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
