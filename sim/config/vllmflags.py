"""A vLLM server's own flags in a scenario: the ``vllm`` section.

A user who runs ``vllm serve MODEL --max-model-len 8192 --gpu-memory-utilization 0.9
...`` can paste those flags, under vLLM's names (``max-model-len`` or
``max_model_len``), into a ``vllm`` section; each is moved to the servesim key it means
(:data:`MAPPED`) before the scenario is validated, and what the flags leave unset
takes the value ``vllm serve`` (the V1 engine, the OpenAI API server) would:

- chunked prefill (V1 always chunks): ``serving.policy: chunked``, whose per-iteration
  token budget is ``max_num_batched_tokens``;
- ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 on a GPU reporting at least
  70 GiB that is not an A100, else 2048 and 256 (vLLM's ``get_batch_defaults``);
- no admission watermark (V1's KV-cache manager keeps none);
- prefix caching on (V1's default) where servesim models it (not for models with
  linear-attention layers, nor with swap preemption and no host tier): requests that
  carry prefix hashes share their cached blocks, and requests without them, unique
  prompts, share none.

``enable-expert-parallel`` sets ``hardware.ep`` to the tensor-parallel size times the
data-parallel size (vLLM's expert-parallel group); with it, ``data-parallel-size`` N is
data-parallel attention (``hardware.dp``: N ranks sharing the experts), and without it
N independent copies (``cluster.replicas``). ``kv-cache-dtype fp8`` and
``quantization fp8`` set the model's KV-cache and weight
dtypes (:data:`DTYPE_FLAGS`); ``speculative-config`` sets ``serving.speculative``'s method
and k (:mod:`sim.config.vllmspec`). Flags that change nothing a simulation prices (``port``,
``served-model-name``, ..., :data:`NO_EFFECT`) are accepted; a flag for something
servesim does not model yet (other quantisations, eager mode, long partial prefills)
is an error naming it, as is any other name and a flag whose servesim key the scenario
also sets.
"""

from __future__ import annotations

from typing import Any

from sim.config.gpu import InlineGPU
from sim.config.vllmspec import merge_speculative, speculative_keys
from sim.configtools import build
from sim.cost.gpus import GPUS, GPUSpec
from sim.errors import ServesimError

# vLLM flag (underscored) -> (scenario section, key).
MAPPED: dict[str, tuple[str, str]] = {
    "max_model_len": ("model", "max_context"),
    "gpu_memory_utilization": ("hardware", "memory_utilization"),
    "tensor_parallel_size": ("hardware", "tp"),
    "pipeline_parallel_size": ("hardware", "pp"),
    "data_parallel_size": ("cluster", "replicas"),
    "max_num_seqs": ("serving", "max_num_seqs"),
    "max_num_batched_tokens": ("serving", "max_num_batched_tokens"),
    "block_size": ("serving", "block_size"),
    "enable_prefix_caching": ("serving", "prefix_caching"),
    "num_gpu_blocks_override": ("serving", "num_gpu_blocks"),
    "swap_space": ("serving", "swap_space_gib"),
    "preemption_mode": ("serving", "preemption"),
    "long_prefill_token_threshold": ("serving", "long_prefill_token_threshold"),
    "max_num_partial_prefills": ("serving", "max_num_partial_prefills"),
    "async_scheduling": ("serving", "async_scheduling"),
    "stream_interval": ("serving", "stream_interval"),
}
# Other spellings of a servesim key that count as setting it.
_SAME = {("hardware", "memory_utilization"): ("gpu_memory_utilization",),
         ("serving", "num_gpu_blocks"): ("num_kv_blocks",)}
# Flags accepted only at the value servesim models (vLLM's default).
ONLY: dict[str, tuple[Any, ...]] = {
    "dtype": ("auto", "bfloat16", "float16", "half"),
    "enforce_eager": (False,),
    "max_long_partial_prefills": (1,),
    # Kernel-level settings the measured tables were not timed under: CUDA-graph capture
    # sizes and compilation passes, NCCL in place of the custom all-reduce.
    "max_cudagraph_capture_size": (None,),
    "cuda_graph_sizes": (None,),
    "compilation_config": (None,),
    "disable_custom_all_reduce": (False,),
    # More API-server processes: the frontend prior was fitted under one.
    "api_server_count": (1,),
    "enable_lora": (False,),
    "kv_transfer_config": (None,),
    # How data-parallel ranks dispatch tokens to the experts: an all-gather and a
    # reduce-scatter (vLLM's default) is what servesim prices (sim/core/dpgroup.py).
    "all2all_backend": ("allgather_reducescatter",),
}
# Flags that set the model's dtypes: vLLM's value -> (model key, servesim's value).
DTYPE_FLAGS: dict[str, dict[Any, tuple[str, str] | None]] = {
    "kv_cache_dtype": {"auto": None, "fp8": ("kv_dtype", "fp8"),
                       "fp8_e4m3": ("kv_dtype", "fp8"), "fp8_e5m2": ("kv_dtype", "fp8")},
    # A Gated DeltaNet model's recurrent state ("auto": the checkpoint's mamba_ssm_dtype).
    "mamba_ssm_cache_dtype": {"auto": None, "float32": ("linear_state_dtype", "fp32"),
                              "bfloat16": ("linear_state_dtype", "bf16")},
    # fp8: online quantisation of a 16-bit checkpoint (per-tensor scales). The others name
    # how a pre-quantised checkpoint's weights are stored: 4-bit integer groups (AWQ and
    # GPTQ, with or without the Marlin kernels) and NVIDIA's FP4 (ModelOpt).
    "quantization": {None: None, "fp8": ("dtype", "fp8"), "awq": ("dtype", "int4"),
                     "awq_marlin": ("dtype", "int4"), "gptq": ("dtype", "int4"),
                     "gptq_marlin": ("dtype", "int4"), "modelopt_fp4": ("dtype", "nvfp4")},
}
# Boolean flags vLLM also takes negated (``--no-enable-prefix-caching``, as argparse's
# BooleanOptionalAction spells them, and as its --config files write them).
NEGATABLE = frozenset((
    "enable_prefix_caching", "async_scheduling", "enable_chunked_prefill",
    "enable_expert_parallel", "enforce_eager", "trust_remote_code", "disable_log_requests",
    "enable_log_requests", "disable_log_stats", "disable_uvicorn_access_log",
    "disable_fastapi_docs", "enable_auto_tool_choice", "disable_custom_all_reduce",
    "enable_lora", "enable_prompt_tokens_details", "enable_server_load_tracking",
    "enable_force_include_usage", "enable_request_id_headers",
))
# Flags that change nothing a simulation prices.
NO_EFFECT = frozenset((
    "model", "served_model_name", "tokenizer", "revision", "host", "port", "api_key",
    "trust_remote_code", "download_dir", "seed", "disable_log_requests", "enable_log_requests",
    "disable_log_stats", "uvicorn_log_level", "disable_uvicorn_access_log", "chat_template",
    "generation_config", "max_logprobs", "disable_fastapi_docs", "root_path",
    # The API server's request and response formats, tool and reasoning parsing,
    # TLS and CORS, and where and how the weights are loaded.
    "enable_auto_tool_choice", "tool_call_parser", "tool_parser_plugin", "reasoning_parser",
    "chat_template_content_format", "response_role", "return_tokens_as_token_ids",
    "enable_prompt_tokens_details", "enable_server_load_tracking",
    "enable_force_include_usage", "enable_request_id_headers", "max_log_len",
    "allowed_origins", "allowed_methods", "allowed_headers", "allow_credentials",
    "ssl_keyfile", "ssl_certfile", "ssl_ca_certs", "ssl_cert_reqs", "middleware",
    "load_format", "tokenizer_mode", "tokenizer_revision", "code_revision", "config_format",
    "hf_token", "ignore_patterns",
    # Where data-parallel ranks meet and which launcher starts them.
    "data_parallel_address", "data_parallel_rpc_port", "data_parallel_backend",
))


def section_mapping(name: str, value: Any) -> dict[str, Any]:
    """A copy of scenario section ``name`` as a mapping to add keys to: a ``model`` given
    as a preset name is ``{preset: NAME}``; anything else not a mapping is empty."""
    if name == "model" and isinstance(value, str):
        value = {"preset": value}
    return dict(value) if isinstance(value, dict) else {}


def flag_name(flag: Any) -> str:
    """A flag as vLLM's Python names spell it: ``--max-model-len`` -> ``max_model_len``."""
    return str(flag).lstrip("-").replace("-", "_")


def batch_defaults(gpu: str | GPUSpec) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) ``vllm serve`` picks on this GPU (a table
    name or an inline GPU's figures)."""
    spec = GPUS.get(gpu) if isinstance(gpu, str) else gpu
    big = spec is not None and spec.mem_bytes >= 70 * 2**30 and "a100" not in spec.name
    return (8192, 1024) if big else (2048, 256)


def pool_defaults(disagg: Any, serving: Any, gpu: str | GPUSpec) -> Any:
    """The ``disaggregated`` section with vLLM v1's defaults filled into each pool whose
    policy is ``chunked``, where neither the pool nor ``serving`` sets them: the batch
    limits ``vllm serve`` picks for the pool's GPU (``gpu``, the scenario's, unless the
    pool names its own) and v1's watermark of 0. Otherwise such a pool took the
    defaults of ``serving.policy: disaggregated`` (vLLM v0's: 256 sequences, a 1%
    watermark). Sections that are not mappings are left for validation to refuse."""
    if not isinstance(disagg, dict) or not isinstance(serving, dict) or \
            serving.get("policy") != "disaggregated":
        return disagg
    out = dict(disagg)
    for role in ("prefill", "decode"):
        pool = out.get(role)
        if not isinstance(pool, dict) or pool.get("policy") != "chunked":
            continue
        tokens, seqs = batch_defaults(_raw_gpu(pool["gpu"]) if pool.get("gpu") else gpu)
        given = {k: serving[k] for k in ("max_num_batched_tokens", "max_num_seqs", "watermark")
                 if serving.get(k) is not None}
        out[role] = {"max_num_batched_tokens": tokens, "max_num_seqs": seqs, "watermark": 0.0,
                     **given, **pool}
    return out


def _raw_gpu(value: Any) -> str | GPUSpec:
    """``hardware.gpu`` as the file gives it, before validation: a name, or an inline
    mapping's figures (a bad mapping counts as an unknown GPU here; validation then
    names its fault)."""
    if not isinstance(value, dict):
        return str(value)
    try:
        return build(InlineGPU, value).spec
    except ServesimError:
        return ""


def apply_vllm(raw: dict[str, Any], default_gpu: str) -> dict[str, Any]:
    """``raw`` (a scenario mapping) with its ``vllm`` section moved into the scenario's
    own keys, vLLM's defaults filling what it leaves unset (for ``hardware.gpu``, or
    ``default_gpu`` when the scenario names none); ``raw`` itself when it has no such
    section. Errors name ``vllm.FLAG``."""
    if "vllm" not in raw:
        return raw
    flags = raw["vllm"]
    if not isinstance(flags, dict):
        raise ServesimError(f"got {flags!r}, expected a mapping of vLLM flags", where="vllm")
    out = {k: v for k, v in raw.items() if k != "vllm"}
    sections: dict[str, dict[str, Any]] = {}

    def section(name: str) -> dict[str, Any]:
        if name not in sections:
            sections[name] = section_mapping(name, out.get(name))
        return sections[name]

    given: dict[str, tuple[str, Any]] = {}
    for flag, value in flags.items():
        name = flag_name(flag)
        if name.startswith("no_") and name[3:] in NEGATABLE:
            if not isinstance(value, bool):
                raise ServesimError(f"got {value!r}, expected true or false",
                                    where=f"vllm.{flag}")
            name, value = name[3:], not value
        if name in given:
            raise ServesimError(f"given twice (as {given[name][0]!r} and {flag!r})",
                                where=f"vllm.{flag}")
        given[name] = (str(flag), value)
    # Under expert parallelism data-parallel ranks share the experts: one replica of dp ranks.
    shared = given.get("enable_expert_parallel", ("", False))[1] is True
    for name, (flag, value) in given.items():
        where = f"vllm.{flag}"
        if name in MAPPED:
            sect, key = (("hardware", "dp") if name == "data_parallel_size" and shared
                         else MAPPED[name])
            target = section(sect)
            for k in (key, *_SAME.get((sect, key), ())):
                if k in target:
                    raise ServesimError(f"sets {sect}.{k}, which the scenario sets too; give "
                                        "one of them", where=where)
            target[key] = value
        elif name == "scheduling_policy":
            if value not in ("fcfs", "priority"):
                raise ServesimError(f"got {value!r}; vLLM's policies are fcfs and priority",
                                    where=where)
            section("serving")["priority"] = value == "priority"
        elif name == "enable_chunked_prefill":
            if not isinstance(value, bool):
                raise ServesimError(f"got {value!r}, expected true or false", where=where)
            if "policy" in section("serving"):
                raise ServesimError("sets serving.policy, which the scenario sets too; give "
                                    "one of them", where=where)
            section("serving")["policy"] = "chunked" if value else "continuous"
        elif name == "enable_expert_parallel":
            _expert_parallel(value, given, section("hardware"), where)
        elif name == "speculative_config":
            tp = given.get("tensor_parallel_size", ("", section("hardware").get("tp")))[1]
            merge_speculative(section("serving"), speculative_keys(value, tp, where), where)
        elif name in DTYPE_FLAGS:
            choices = DTYPE_FLAGS[name]
            if value not in choices:
                allowed = ", ".join("null" if v is None else str(v) for v in choices)
                raise ServesimError(f"got {value!r}; servesim models {allowed}", where=where)
            target_key = choices[value]
            if target_key is not None:
                model = section("model")
                if target_key[0] in model:
                    raise ServesimError(f"sets model.{target_key[0]}, which the scenario sets "
                                        "too; give one of them", where=where)
                model[target_key[0]] = target_key[1]
        elif name in ONLY:
            if value not in ONLY[name]:
                allowed = " or ".join("null" if v is None else str(v) for v in ONLY[name])
                raise ServesimError(f"got {value!r}: servesim models only {allowed} (vLLM's "
                                    "default) so far", where=where)
        elif name not in NO_EFFECT:
            known = sorted([*MAPPED, "enable_chunked_prefill", "scheduling_policy", *ONLY,
                            *DTYPE_FLAGS, "enable_expert_parallel", "speculative_config"])
            raise ServesimError(f"unknown or not modelled vLLM flag {name!r}; understood: "
                                f"{', '.join(known)}; each boolean one also as no-FLAG "
                                "(and flags with no effect on a simulation: "
                                "docs/scenarios.md)", where=where)
    _v1_defaults(section("serving"), _raw_gpu(section("hardware").get("gpu", default_gpu)))
    for name, value in sections.items():
        out[name] = value
    return out


def _expert_parallel(value: Any, given: dict[str, tuple[str, Any]],
                     hardware: dict[str, Any], where: str) -> None:
    """``--enable-expert-parallel``: ``hardware.ep`` = tp x data-parallel size, vLLM's
    expert-parallel group (the data-parallel size itself is ``hardware.dp``, set with
    the other mapped flags)."""
    if not isinstance(value, bool):
        raise ServesimError(f"got {value!r}, expected true or false", where=where)
    if not value:
        return
    dp = given.get("data_parallel_size", ("", 1))[1]
    if not isinstance(dp, int) or isinstance(dp, bool) or dp < 1:
        return  # hardware.dp's own validation names the bad value
    if "ep" in hardware:
        raise ServesimError("sets hardware.ep, which the scenario sets too; give one of "
                            "them", where=where)
    tp = given.get("tensor_parallel_size", ("", None))[1]
    tp = tp if tp is not None else hardware.get("tp", 1)
    hardware["ep"] = tp * dp if isinstance(tp, int) and not isinstance(tp, bool) else tp


def _v1_defaults(serving: dict[str, Any], gpu_name: str | GPUSpec) -> None:
    """What ``vllm serve`` (V1) uses where neither the flags nor the scenario say: its
    batch limits for the GPU even when chunked prefill is turned off, no watermark, and
    prefix caching on where servesim models it (``None``:
    :meth:`sim.config.serving.ServingConfig.resolved_caching`)."""
    tokens, seqs = batch_defaults(gpu_name)
    serving.setdefault("policy", "chunked")
    serving.setdefault("max_num_batched_tokens", tokens)
    serving.setdefault("max_num_seqs", seqs)
    serving.setdefault("watermark", 0.0)
    serving.setdefault("prefix_caching", None)


def serving_defaults(serving: Any, gpu_name: str | GPUSpec) -> Any:
    """The ``serving`` section with vLLM v1's batch limits for ``gpu_name`` filled in
    where the section leaves them unset and its policy is ``chunked`` (the default);
    ``serving`` itself otherwise (other policies keep the dataclass defaults, and a
    section that is not a mapping is left for validation to refuse)."""
    if not isinstance(serving, dict) or serving.get("policy", "chunked") != "chunked":
        return serving
    tokens, seqs = batch_defaults(gpu_name)
    return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs, **serving}
