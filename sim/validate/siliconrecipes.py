"""How each measured run of a silicon CSV was served, and its scenario: the framework's
default scheduler (:data:`SCHEDULERS`), the launch recipe's settings where InferenceX
publishes them (:func:`recipe`), the MoE kernel a recipe forces
(:func:`recipe_moe_backend`), and the closed-loop scenario that simulates the row
(:func:`scenario_raw`, :func:`predict`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sim.cost.eager import vllm_capture_tokens
from sim.cost.presets import MODELS
from sim.cost.vllmmemory import memory_rules, modelled_release
from sim.validate.aicgenerator import aic_recipe
from sim.validate.hybridruns import QWEN35_PATHS, qwen35_recipe, sglang_state_pool
from sim.validate.siliconrows import DEEPSEEK_PATHS, FP4_MODES, SYSTEM_GPUS, Row

if TYPE_CHECKING:
    from sim.validate.silicon import Case



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
LENGTH_RATIO = 0.8  # lengths drawn uniformly from [int(0.8 L), L]
REQUESTS_PER_CLIENT = 10


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
#   32-token KV blocks (AIConfigurator's own runs: its generator's limits instead,
#   sim.validate.aicgenerator).
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
# - SGLang: mem_fraction_static of the memory holds weights and the KV pool, activations
#   and graphs living in the rest; the run's recipe's, else the release's own default for
#   the GPU and parallelism (sim.cost.sglangmemory: 0.835 on one H100 from 0.5.3);
# - TensorRT-LLM: free_gpu_memory_fraction 0.9 of what is free after the weights and
#   the activation buffers are allocated.
STATIC_FRACTION = frozenset({"sglang"})
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
# tables time). The rows: those of DEEPSEEK_PATHS (sim.validate.siliconrows).

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
    :func:`running_cap`); for AIConfigurator's own runs, those its generator gave them
    (:func:`sim.validate.aicgenerator.aic_recipe`: ``mixed_chunk``)."""
    r = case.row
    if r.collection != "inferencex":
        return aic_recipe(case)
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
    from sim.cost.sglangmemory import sglang_static_fraction
    from sim.cost.shard import shard

    if case.framework not in STATIC_FRACTION and case.framework not in FREE_FRACTION:
        return None
    # Activation as vLLM's V1 runner before 0.17 charged it, what these rows were fitted with.
    b = memory_budget(case.spec, GPUS[case.gpu], case.tp, 0.9,
                      serving["block_size"], serving["max_num_batched_tokens"],
                      serving["max_num_seqs"], ep=case.ep, dp=case.dp,
                      rules=memory_rules("0.16.0", case.spec))
    if case.framework in STATIC_FRACTION:
        static = settings.get("static_fraction") or sglang_static_fraction(
            case.row.version, GPUS[case.gpu], case.spec, case.row.tp, dp=case.dp)
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
    return max(int(kv // b.block_bytes) * b.groups_per_block, 1)  # pages, as vLLM counts


def _limits(case: Case) -> tuple[dict[str, Any], dict[str, float]]:
    """``case``'s framework's scheduler settings with its recipe's sequence and token
    limits in them, and the recipe (:func:`recipe`)."""
    serving = SCHEDULERS[case.framework](case.gpu)
    settings = recipe(case)
    for key in ("max_num_batched_tokens", "max_num_seqs"):
        if key in settings:
            serving[key] = int(settings[key])
    if settings.get("mixed_chunk"):
        serving["policy"] = "orca"  # SGLang's mixed chunks (sim.validate.aicgenerator)
    return serving, settings


def capture_tokens(case: Case) -> int:
    """The largest CUDA-graph capture size (tokens) of ``case``'s vLLM server, from its
    sequence and token limits as :func:`scenario_raw` sets them (vLLM's default rule,
    :func:`sim.cost.eager.vllm_capture_tokens`; the rows record no speculation)."""
    serving, _ = _limits(case)
    return vllm_capture_tokens(serving["max_num_seqs"], serving["max_num_batched_tokens"])


def scenario_raw(case: Case, seed: int = 0) -> dict[str, Any]:
    """The scenario mapping that stands for ``case``'s benchmark run."""
    r = case.row
    serving, settings = _limits(case)
    for key in ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                "scheduler_recv_interval", "stream_interval"):
        if key in settings:
            serving[key] = settings[key]
    if case.framework == "sglang" and "stream_interval" in settings:
        serving["stream_first_token"] = not sglang_first_token_waits(r.version)
    if case.framework == "sglang" and serving["policy"] == "continuous" and \
            r.isl + r.osl > serving["max_num_batched_tokens"]:
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
    if case.spec.linear_layers and case.framework != "vllm":
        # SGLang's state pool, sized by kv_blocks, beside its KV pool.
        serving["linear_state_pool"] = "reserved"
    # A vLLM run of a release servesim models is sized as that release (sim/cost/vllmmemory.py).
    release = modelled_release(r.version) if case.framework == "vllm" else None
    if release is not None:
        # The release sizes memory; the loop stays as the priors were fitted (overlapped).
        serving.update(vllm_version=release, async_scheduling=serving["policy"] == "chunked")

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
                     # A vLLM row of a known release: that release's default, else 0.9.
                     **({"memory_utilization": settings.get("memory_utilization", 0.9)}
                        if release is None or "memory_utilization" in settings else {}),
                     **({"ep": case.ep} if case.ep > 1 else {}),
                     **({"dp": case.dp} if case.dp > 1 else {})},
        "cost": "roofline",  # replaced by the built profile when simulated
        "serving": serving,
        "workload": {"concurrency": r.concurrency,
                     "lengths": {"prompt": lengths(r.isl), "output": lengths(r.osl)},
                     "num_requests": REQUESTS_PER_CLIENT * r.concurrency, "seed": seed},
    }
