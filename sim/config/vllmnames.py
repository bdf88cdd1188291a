"""The names a ``vllm`` section understands (:mod:`sim.config.vllmflags`): which
servesim key each vLLM flag sets, the flags accepted only at vLLM's default, those that
change nothing a simulation prices, kernel settings accepted with a note, short
spellings, and vLLM's human-readable integers."""

from __future__ import annotations

import re
from typing import Any

from sim.config.vllmspec import json_object
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
    "performance_mode": ("serving", "performance_mode"),
    "kv_cache_memory_bytes": ("serving", "kv_cache_memory_bytes"),
    "disable_hybrid_kv_cache_manager": ("serving", "disable_hybrid_kv_cache_manager"),
    "scheduler_reserve_full_isl": ("serving", "scheduler_reserve_full_isl"),
}
# The KV block sizes vLLM's --block-size takes (its CacheConfig's BlockSize; 256 since
# 0.11): a pasted flag set vLLM would refuse is refused here too.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
# Other spellings of a servesim key that count as setting it.
SAME = {("hardware", "memory_utilization"): ("gpu_memory_utilization",),
         ("serving", "num_gpu_blocks"): ("num_kv_blocks",)}
# Flags accepted only at the value servesim models (vLLM's default).
ONLY: dict[str, tuple[Any, ...]] = {
    "dtype": ("auto", "bfloat16", "float16", "half"),
    "max_long_partial_prefills": (1,),
    # NCCL in place of the custom all-reduce: slower collectives than the tables time.
    "disable_custom_all_reduce": (False,),
    # More API-server processes: the frontend prior was fitted under one.
    "api_server_count": (1,),
    "enable_lora": (False,),
    # How data-parallel ranks dispatch tokens to the experts: an all-gather and a
    # reduce-scatter (vLLM's default) is what servesim prices (sim/core/dpgroup.py).
    "all2all_backend": ("allgather_reducescatter",),
    # A Gated DeltaNet model caches as "align" whatever is given: "none" (the default)
    # turns into it when prefix caching is on, and "all" falls back to it for these
    # layers (only Mamba2 kernels keep states inside a step); nothing else reads it.
    "mamba_cache_mode": ("none", "align", "all"),
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
# Why a quantisation vLLM knows is not priced (added to the error that refuses it).
UNPRICED_QUANT = {
    "bitsandbytes": "its 4-bit NF4 weights are dequantised to 16 bits for every GEMM, a "
                    "kernel no public table times, and users report it slower than the "
                    "16-bit model",
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
    "disable_hybrid_kv_cache_manager", "enable_reasoning", "language_model_only",
    "data_parallel_hybrid_lb", "data_parallel_external_lb", "scheduler_reserve_full_isl",
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
    # Where data-parallel ranks meet, which launcher starts them and how requests are
    # balanced over them (the ranks themselves: data-parallel-size).
    "data_parallel_address", "data_parallel_rpc_port", "data_parallel_backend",
    "distributed_executor_backend", "data_parallel_hybrid_lb", "data_parallel_external_lb",
    "data_parallel_size_local", "data_parallel_start_rank", "data_parallel_rank",
    # Reasoning output parsed apart (vLLM 0.8's switch beside reasoning-parser), and a
    # multimodal checkpoint served as text only, as servesim models every preset.
    "enable_reasoning", "language_model_only",
))
# Kernel and compilation settings: CUDA-graph capture, compilation passes and fusions, the
# attention kernel. Accepted, with a note that the run prices vLLM's default kernels
# (the measured tables time those; servesim prices no fusion or capture setting).
KERNEL = frozenset((
    "max_cudagraph_capture_size", "cuda_graph_sizes", "cudagraph_capture_sizes",
    "compilation_config", "optimization_level", "max_seq_len_to_capture",
    "attention_backend",
))
# vLLM's short spellings of flags (-O was compilation-config, then optimization-level:
# a compilation setting either way).
ALIASES = {"tp": "tensor_parallel_size", "pp": "pipeline_parallel_size",
           "dp": "data_parallel_size", "q": "quantization", "cc": "compilation_config",
           "O": "optimization_level", "ep": "enable_expert_parallel",
           "dpn": "data_parallel_rank",
           "dpr": "data_parallel_start_rank", "dpl": "data_parallel_size_local",
           "dpa": "data_parallel_address", "dpp": "data_parallel_rpc_port",
           "dpb": "data_parallel_backend"}
# Flags taking vLLM's human-readable integers (1k = 1,000, 1K = 1,024).
HUMAN_INTS = frozenset(("max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes"))
# Host KV offloading (vLLM's OffloadingConnector or LMCache): the backends it names.
OFFLOAD_BACKENDS = ("native", "lmcache")


def flag_name(flag: Any) -> str:
    """A flag as vLLM's Python names spell it: ``--max-model-len`` -> ``max_model_len``,
    ``-tp`` -> ``tensor_parallel_size``, ``-cc.pass_config.x`` ->
    ``compilation_config.pass_config.x``."""
    name = str(flag).lstrip("-").replace("-", "_")
    if _LEVEL.fullmatch(name):
        return "optimization_level"  # -O3: the level written into the flag
    head, dot, rest = name.partition(".")  # a JSON flag's dotted key: alias its head
    return ALIASES.get(head, head) + dot + rest


_LEVEL = re.compile(r"O[0-9]")  # \d would take any script's digit


def plain_name(flag: Any) -> str:
    """A flag's name without a negation (``no-enable-prefix-caching`` is the same flag as
    ``enable-prefix-caching``)."""
    name = flag_name(flag)
    return name[3:] if name.startswith("no_") and name[3:] in NEGATABLE else name


def flag_value(flag: Any, value: Any) -> Any:
    """The value a flag carries: its own for all but ``-O<level>``, whose level is part
    of the flag (``O3: true`` is level 3); such a flag given any value but true is an
    error, not read as set (``O0: false`` had been level 0)."""
    name = str(flag).lstrip("-")
    if not _LEVEL.fullmatch(name):
        return value
    if value is not True:
        raise ServesimError(f"got {value!r}: -{name} sets optimization level {name[1:]} "
                            f"and takes no value; write {name}: true, or leave it out (or "
                            "give optimization-level: N)", where=f"vllm.{flag}")
    return int(name[1:])


# Compilation mode (``level`` before vLLM renamed it) 0, named NONE (NO_COMPILATION in
# older releases): no torch.compile, and vLLM then defaults cudagraph_mode to NONE too.
_NO_COMPILE = ("NONE", "NO_COMPILATION")
# The other names vLLM's CompilationMode (and CompilationLevel before it) gives levels 1
# to 3: any other word is no level vLLM reads.
_COMPILE = ("STOCK_TORCH_COMPILE", "DYNAMO_TRACE_ONCE", "VLLM_COMPILE", "DYNAMO_AS_IS",
            "DYNAMO_ONCE", "PIECEWISE")
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _level_is_0(value: Any, where: str) -> bool:
    """Whether a compilation ``level``/``mode`` or an optimization level ``value`` is 0
    (NONE). vLLM reads an integer, its digits or a mode's name; a float or a boolean,
    which vLLM's own validation may or may not coerce to 0, is refused rather than guessed
    at. None (not set) is not 0."""
    if value is None:
        return False
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
        return value == 0
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER.fullmatch(text) and 0 <= int(text) <= 3:
            return int(text) == 0
        if text.upper() in (*_NO_COMPILE, *_COMPILE):
            return text.upper() in _NO_COMPILE
    raise ServesimError(f"got {value!r}, expected an integer from 0 (no compilation) to 3 "
                        f"or a mode name ({', '.join((*_NO_COMPILE, *_COMPILE))})",
                        where=where)


def compilation_config(value: Any, where: str) -> dict[str, Any] | int | None:
    """vLLM's ``--compilation-config`` ``value``: a mapping, its JSON text, or vLLM's bare
    integer level (``0``, ``'3'``); None when not given. The JSON is read as the other
    JSON flags' is (malformed text, duplicate keys and over-deep nesting refused); any
    other value is refused, naming ``where``."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, (str, dict)):
        return json_object(value, where, "compilation settings (such as mode and "
                           "cudagraph_mode), or an integer level")
    raise ServesimError(f"got {value!r}, expected a mapping (or its JSON text) with "
                        "compilation settings (such as mode and cudagraph_mode), or an "
                        "integer level", where=where)


# vLLM's CUDA graph modes (CUDAGraphMode) and the steps each replays, as
# serving.cuda_graphs names them: decode-only steps alone, or all of them (the piecewise
# and full modes differ in kernels, which are not priced).
GRAPH_MODES = {"NONE": "none", "FULL_DECODE_ONLY": "decode", "PIECEWISE": "all",
               "FULL": "all", "FULL_AND_PIECEWISE": "all"}


def _graph_mode(value: Any, where: str) -> str | None:
    """``serving.cuda_graphs`` for a ``cudagraph_mode`` value (None: not set); a value
    that is not one of vLLM's mode names is an error naming ``where``."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().upper() in GRAPH_MODES:
        return GRAPH_MODES[value.strip().upper()]
    raise ServesimError(f"got {value!r}; vLLM's CUDA graph modes are "
                        f"{', '.join(GRAPH_MODES)}", where=where)


def _names_graph_mode(given: dict[str, tuple[str, Any]]) -> bool:
    """Whether some flag of ``given`` (name -> (flag, value)) names a ``cudagraph_mode``
    outright, which then decides whatever compilation level another flag gives, as
    vLLM derives the mode from the level only when it is unset."""
    for name, (_, value) in given.items():
        if name.endswith(".cudagraph_mode") and value is not None:
            return True
        if name == "compilation_config":
            try:
                config = compilation_config(value, "")
            except ServesimError:
                continue  # refused, naming the flag, when that flag is read
            if isinstance(config, dict) and config.get("cudagraph_mode") is not None:
                return True
    return False


def graph_setting(name: str, value: Any, where: str,
                  given: dict[str, tuple[str, Any]]) -> str | None:
    """The ``serving.cuda_graphs`` a kernel setting asks for: its ``cudagraph_mode``
    where it names one (NONE: "none", as enforce-eager; FULL_DECODE_ONLY: "decode"; the
    others "all"); "none" for optimization level 0 or compilation mode or level 0 (also
    vLLM's integer ``compilation-config: 0``) unless some flag of ``given`` names a
    ``cudagraph_mode``; None where it says nothing of graphs. A level, mode or
    compilation config vLLM would not read (malformed JSON, a float level, an unknown
    graph mode) is an error naming ``where``."""
    explicit = _names_graph_mode(given)
    head, _, key = name.partition(".")  # -O.mode is the compilation config's, as -cc.mode
    if name == "optimization_level" or (head in ("compilation_config", "optimization_level")
                                        and key in ("level", "mode")):
        return "none" if _level_is_0(value, where) and not explicit else None
    if name.endswith(".cudagraph_mode"):
        return _graph_mode(value, where)
    if name != "compilation_config":
        return None
    config = compilation_config(value, where)
    if not isinstance(config, dict):
        # vLLM reads a bare number as the compilation level.
        return "none" if config is not None and _level_is_0(config, where) and not explicit \
            else None
    zero = [_level_is_0(config.get(k), f"{where}.{k}") for k in ("level", "mode")]
    mode = _graph_mode(config.get("cudagraph_mode"), f"{where}.cudagraph_mode")
    if mode is not None:  # graphs asked for, or not, outright
        return mode
    return "none" if any(zero) and not explicit else None


DIGITS = re.compile(r"[0-9]+")  # a plain count; not \d, which takes any script's digits
_HUMAN = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kKmMgG])")  # not \d, which takes any script's digits
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30}


def human_int(value: Any, where: str, auto: bool = False) -> Any:
    """``value`` as vLLM reads a human-readable integer: ``32k`` is 32,000 and ``32K``
    32,768 (a decimal only before a lowercase suffix); with ``auto``, ``auto`` or -1 give
    None (vLLM's automatic choice). Text of another form is an error naming ``where``; a
    value that is not text is returned as given, for the key's own validation to name."""
    if auto and (value == -1 or (isinstance(value, str) and value.strip().lower() in
                                 ("auto", "-1"))):
        return None
    if not isinstance(value, str):
        return value
    m = _HUMAN.fullmatch(value.strip())
    if m is None:
        if DIGITS.fullmatch(value.strip()):
            return int(value)
        # Refused here, naming the flag as written: the scenario key it lands on takes
        # plain integers only and would not say that vLLM's suffixes are allowed.
        raise ServesimError(f"got {value!r}, expected an integer, optionally with vLLM's "
                            "suffix k, m or g (x 1000, 1000^2, 1000^3; '1.5k' allowed) or "
                            "K, M or G (x 1024, 1024^2, 1024^3)"
                            + (", or auto" if auto else ""), where=where)
    number, suffix = m.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise ServesimError(f"got {value!r}: a binary suffix ({suffix}) takes a whole number; "
                            f"{number}{suffix.lower()} is {number} x 1000", where=where)
    return int(number) * _BINARY[suffix]
