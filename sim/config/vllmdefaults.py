"""The limits and switches ``vllm serve`` picks where neither its flags nor a scenario
set them: its batch limits for a GPU's memory class, chunked prefill, no watermark and
prefix caching, for the ``serving`` section, the ``vllm`` section's flags
(:mod:`sim.config.vllmflags`) and each pool of a disaggregated cluster.
"""

from __future__ import annotations

from typing import Any

from sim.config.gpu import InlineGPU
from sim.configtools import build
from sim.cost.gpus import GPUS, GPUSpec
from sim.errors import ServesimError


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
        tokens, seqs = batch_defaults(raw_gpu(pool["gpu"]) if pool.get("gpu") else gpu)
        given = {k: serving[k] for k in ("max_num_batched_tokens", "max_num_seqs", "watermark")
                 if serving.get(k) is not None}
        out[role] = {"max_num_batched_tokens": tokens, "max_num_seqs": seqs, "watermark": 0.0,
                     **given, **pool}
    return out


def raw_gpu(value: Any) -> str | GPUSpec:
    """``hardware.gpu`` as the file gives it, before validation: a name, or an inline
    mapping's figures (a bad mapping counts as an unknown GPU here; validation then
    names its fault)."""
    if not isinstance(value, dict):
        return str(value)
    try:
        return build(InlineGPU, value).spec
    except ServesimError:
        return ""


def v1_defaults(serving: dict[str, Any], gpu_name: str | GPUSpec) -> None:
    """What ``vllm serve`` (V1) uses where neither the flags nor the scenario say: its
    batch limits for the GPU even when chunked prefill is turned off, no watermark, and
    prefix caching on where servesim models it (``None``:
    :meth:`sim.config.serving.ServingConfig.resolved_caching`)."""
    tokens, seqs = mode_defaults(serving, gpu_name)
    serving.setdefault("policy", "chunked")
    serving.setdefault("max_num_batched_tokens", tokens)
    serving.setdefault("max_num_seqs", seqs)
    serving.setdefault("watermark", 0.0)
    serving.setdefault("prefix_caching", None)


def serving_defaults(serving: Any, gpu_name: str | GPUSpec) -> Any:
    """The ``serving`` section with vLLM v1's defaults filled in where the section leaves
    them unset and its policy is ``chunked`` (the default): the batch limits for
    ``gpu_name`` (doubled under ``performance_mode: throughput``, as vLLM doubles them),
    and prefix caching on where servesim models it (``None``, resolved by
    :meth:`sim.config.serving.ServingConfig.resolved_caching`), as ``vllm serve`` caches
    by default. ``serving`` itself otherwise (other policies keep the dataclass defaults,
    prefix caching off as vLLM v0's default was, and a section that is not a mapping is
    left for validation to refuse)."""
    if not isinstance(serving, dict) or serving.get("policy", "chunked") != "chunked":
        return serving
    check_limits(serving)
    tokens, seqs = mode_defaults(serving, gpu_name)
    return {"max_num_batched_tokens": tokens, "max_num_seqs": seqs, "prefix_caching": None,
            **serving}


def mode_defaults(serving: dict[str, Any], gpu_name: str | GPUSpec) -> tuple[int, int]:
    """:func:`batch_defaults`, both doubled under ``performance_mode: throughput`` as
    vLLM's scheduler config doubles its defaults then (values given stay as given)."""
    tokens, seqs = batch_defaults(gpu_name)
    if serving.get("performance_mode") == "throughput":
        return 2 * tokens, 2 * seqs
    return tokens, seqs


def check_limits(serving: dict[str, Any]) -> None:
    """Refuse what vLLM's scheduler config refuses where a scenario (or a ``vllm`` flag
    set, whose unset limits take ``vllm serve``'s defaults) gives both: a step's token
    limit under the running-sequence limit (each running sequence takes at least a token
    a step). Values of the wrong type are left for validation to name."""
    tokens, seqs = serving.get("max_num_batched_tokens"), serving.get("max_num_seqs")
    if not isinstance(tokens, int) or not isinstance(seqs, int) or \
            isinstance(tokens, bool) or isinstance(seqs, bool):
        return
    if tokens < seqs:
        raise ServesimError(f"got {tokens}, below max_num_seqs {seqs}: vLLM refuses a "
                            "step's token limit under its running-sequence limit; raise "
                            "max_num_batched_tokens or lower max_num_seqs",
                            where="serving.max_num_batched_tokens")
