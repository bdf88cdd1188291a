"""What a run simulated, as its summary records it: the scenario's digest, the
resolved set-up (model, hardware, serving features, cost source: :func:`simulated`,
:func:`describe_scenario`) and the closed loop's and frontend's blocks."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from sim.config.scenario import Scenario
from sim.core.engine import RunResult
from sim.cost.dtypes import SPARSE_FIELDS
from sim.cost.frontend import FRONTEND_COEFS, NO_FRONTEND
from sim.cost.specs import ModelSpec, recorded_fields
from sim.files import shown
from sim.report.metrics import clean

# serving.kv_offload keys added after the section (key, default), left out where default.
OFFLOAD_LATER: tuple[tuple[str, object], ...] = (("write_policy", "write_back"),
                                                 ("store_outputs", True))


def scenario_digest(scenario: Any) -> str:
    """SHA-256 (hex) of the validated scenario's settings, file locations excluded: two
    runs with equal digests simulated the same configuration (trace files' contents are
    not hashed)."""
    fields = dataclasses.asdict(scenario)
    fields.pop("base_dir", None)
    fields.pop("source", None)
    fields.pop("overrides", None)  # the input, not the settings: already applied above
    if not fields.get("notes"):
        fields.pop("notes", None)  # notes on accepted flags, hashed only when there are any
    fields.pop("read", None)  # file locations, as base_dir and source
    # A setting since removed (it never changed results), hashed at its old default so
    # digests of earlier runs stay valid.
    fields["event_skipping"] = True
    # Sections added later are hashed only when set, so older digests stay valid.
    from sim.config.faults import FaultsConfig
    from sim.policies.admission import AdmissionConfig

    for key, default in (("admission", AdmissionConfig()), ("faults", FaultsConfig())):
        if fields.get(key) == dataclasses.asdict(default):
            fields.pop(key)
    if fields["serving"].get("speculative", 0) is None:
        fields["serving"].pop("speculative")
    offload = fields["serving"].get("kv_offload")
    for key, later in OFFLOAD_LATER:
        if isinstance(offload, dict) and offload.get(key) == later:
            offload.pop(key)  # keys added later: hashed only when not the default
    fields["model"] = recorded_fields(scenario.model)  # later fields: hashed only when set
    for section, key in (("workload", "concurrency"), ("workload", "think_time_s"),
                         ("workload", "stages"), ("serving", "kv_offload"),
                         ("serving", "async_scheduling"), ("hardware", "host_memory_gb"),
                         ("serving", "vllm_version"), ("serving", "linear_state_pool"),
                         ("serving", "kv_cache_memory_bytes"),
                         ("serving", "cuda_graph_max_bs"), ("serving", "cuda_graph_max_tokens"),
                         ("serving", "scheduler_reserve_full_isl")):
        if fields[section].get(key) is None:
            fields[section].pop(key, None)
    # Keys added later, hashed only when they differ from their old, implicit value.
    for section, key, unset in (("serving", "long_prefill_token_threshold", 0),
                                ("serving", "max_num_partial_prefills", 1),
                                ("serving", "batch_wait_timeout_iters", 0),
                                ("serving", "batch_wait_max_tokens_ratio", 0.0),
                                ("serving", "scheduler_recv_interval", 1),
                                ("serving", "stream_interval", 1),
                                ("serving", "stream_first_token", True),
                                ("serving", "disable_hybrid_kv_cache_manager", False),
                                ("serving", "performance_mode", "balanced"),
                                ("serving", "cuda_graphs", "auto"),
                                ("hardware", "pp", 1), ("hardware", "ep", 1),
                                ("hardware", "ep_imbalance", 1.0), ("hardware", "dp", 1)):
        if fields[section].get(key) == unset:
            fields[section].pop(key)
    for role in ("prefill", "decode"):
        pool = fields["disaggregated"][role]
        if pool.get("watermark") is None:
            pool.pop("watermark", None)  # a pool key added later: hashed only when set
    trace = fields["workload"].get("trace")
    if isinstance(trace, dict) and trace.get("start_row") == 0:
        trace.pop("start_row")  # replaying from the first row, as before the key existed
    if isinstance(trace, dict) and trace.get("prefix_block_tokens") is None:
        trace.pop("prefix_block_tokens", None)  # the format's own, as before the key
    for params in fields["cost"].values():
        if isinstance(params, dict) and params.get("frontend") == dataclasses.asdict(
                NO_FRONTEND):
            params.pop("frontend")
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def setup_summary(res: RunResult) -> dict[str, Any]:
    """``workload`` for a closed loop (clients, think time in s, requests sent and not
    sent; for paced clients the requests held past their due time and the wait, s) and
    ``frontend`` (seconds) when the cost model prices one; empty otherwise."""
    out: dict[str, Any] = {}
    c = res.clients
    if c is not None:
        out["workload"] = {"kind": "closed_loop", "concurrency": c.concurrency,
                           "think_time_s": c.think_time_s, "requests_sent": c.sent,
                           "requests_not_sent": c.not_sent}
        if c.paced:
            # Time requests spent due but waiting for a free client: before their send,
            # so in no latency (vLLM's benchmark measures from the send too).
            out["workload"].update(paced=True, requests_held=c.held,
                                   client_wait_mean_s=c.wait_mean_s,
                                   client_wait_max_s=c.wait_max_s)
    if res.frontend.active:
        out["frontend"] = {k: getattr(res.frontend, k) for k in FRONTEND_COEFS}
    return out


# A mixture of experts adds these (a dense model's summary has none of them).
MOE_KEYS = ("experts", "experts_per_token", "expert_intermediate", "shared_experts",
            "dense_layers")
# Latent attention (DeepSeek-V2/V3) adds these.
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
MODEL_KEYS = ("name", "dtype", "kv_dtype", "layers", "hidden", "heads", "kv_heads", "head_dim",
              "intermediate", "vocab", "max_context")
# Listed where they differ from their default: sliding-window attention (gpt-oss,
# Mistral), dtypes kept apart, Gated DeltaNet layers (Qwen3.5), and the norms and gates
# some families add. Two models that differ in one of them are not recorded alike.
OPTIONAL_KEYS = ("sliding_window", "sliding_layers", "attention_sinks", "expert_dtype",
                 "qkv_dtype", "layer_qk_norm", "attn_output_gate", "linear_layers",
                 "linear_key_heads", "linear_value_heads", "linear_key_dim",
                 "linear_value_dim", "linear_conv", "linear_state_dtype")


def model_keys(model: ModelSpec) -> dict[str, Any]:
    """The ``simulated.model`` section: the model's dimensions and dtypes, with its mixture
    of experts, latent or sparse attention where it has them and the optional fields
    that differ from their defaults."""
    keys = (MODEL_KEYS + (MOE_KEYS if model.experts else ()) + (MLA_KEYS if model.mla else ())
            + (SPARSE_FIELDS if model.sparse else ()))
    out = {k: getattr(model, k) for k in keys}
    defaults = {f.name: f.default for f in dataclasses.fields(model)}
    out.update({k: getattr(model, k) for k in OPTIONAL_KEYS
                if getattr(model, k) != defaults[k]})
    return out


def package_version() -> str:
    """servesim's installed version (package metadata), or ``unknown`` when not installed."""
    from importlib import metadata

    try:
        return metadata.version("servesim")
    except metadata.PackageNotFoundError:
        return "unknown"


def simulated(res: RunResult) -> dict[str, Any]:
    """The ``simulated`` section of the summary: what was run, resolved — the scenario
    file as given, its digest and ``--set`` overrides, the model's dimensions and
    dtypes, each pool's GPU, tp, replicas and serving limits (with its KV blocks per
    replica), where the prices come from, the workload seed and servesim's version.
    Nothing in it depends on the machine or the time of the run."""
    blocks = [s.kv_total for s in res.replica_stats]
    return describe_scenario(res.scenario, res.cost_source, blocks)


def describe_scenario(sc: Scenario, cost_source: str,
                      kv_blocks: list[int] | None = None) -> dict[str, Any]:
    """What :func:`simulated` says of a validated scenario ``sc`` before (or without) a
    run: ``kv_blocks`` (each replica's KV blocks, in pool order) is known only after
    one, and its per-pool entry is left out when None."""
    from sim.config.disagg import pools

    per_pool: dict[str, Any] = {}
    start = 0
    for pool in pools(sc):
        sv = pool.serving
        per_pool[pool.role] = {
            "gpu": pool.gpu, "tp": pool.tp, **({"pp": pool.pp} if pool.pp > 1 else {}),
            **({"ep": pool.ep} if pool.ep > 1 else {}),
            **({"dp": pool.dp} if pool.dp > 1 else {}),
            "replicas": pool.replicas, "router": pool.router,
            "policy": sv.policy, "max_num_seqs": sv.max_num_seqs,
            "max_num_batched_tokens": sv.max_num_batched_tokens,
            # Only chunked spends a token budget: another policy given one ignores it.
            "token_budget": sv.chunk_budget if sv.policy == "chunked" else None,
            "long_prefill_token_threshold": sv.long_prefill_token_threshold,
            "block_size": sv.block_size, "watermark": sv.kv_watermark,
            **({"stream_interval": sv.stream_interval} if sv.stream_interval > 1 else {}),
            **_serving_features(sv),
        }
        if kv_blocks is not None:
            # A data-parallel replica's ranks each keep their own blocks: one entry a rank.
            ranks = pool.replicas * pool.dp
            per_pool[pool.role]["kv_blocks_per_replica"] = kv_blocks[start:start + ranks]
        start += pool.replicas * pool.dp
    return {
        "file": shown(sc.source),
        "sha256": scenario_digest(sc),
        "overrides": list(sc.overrides),
        "servesim_version": package_version(),
        "model": model_keys(sc.model),
        "policy": sc.serving.policy,
        "pools": per_pool,
        "cost_source": cost_source,
        "seed": sc.workload.seed,
        "horizon_s": sc.horizon_s,
        # Settings accepted without being priced (a vLLM kernel flag): absent when none.
        **({"notes": list(sc.notes)} if sc.notes else {}),
        # Sections that change what is simulated, present only when set.
        **({"admission": admission} if (admission := _set_fields(sc.admission)) else {}),
        **({"faults": clean(_plain(sc.faults))} if sc.faults.active else {}),
    }


def _set_fields(cfg: Any) -> dict[str, Any]:
    """A config dataclass's fields that differ from its defaults (JSON-ready)."""
    default = type(cfg)()
    return {f.name: clean(_plain(getattr(cfg, f.name))) for f in dataclasses.fields(cfg)
            if getattr(cfg, f.name) != getattr(default, f.name)}


def _plain(value: Any) -> Any:
    """Dataclasses and tuples as plain mappings and lists, for JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _serving_features(sv: Any) -> dict[str, Any]:
    """The serving features a pool runs with beyond plain batching, only those set:
    speculative decoding, prefix caching, swap preemption, priority admission, a host
    KV tier, SGLang's receive interval."""
    out: dict[str, Any] = {}
    if sv.speculative is not None:
        spec = {k: v for k, v in _plain(sv.speculative).items()
                if v is not None and v != {}}
        spec["acceptance"] = {k: v for k, v in spec["acceptance"].items() if v is not None}
        out["speculative"] = spec
    if sv.prefix_caching:
        out["prefix_caching"] = True
    if sv.preemption != "recompute":
        out["preemption"] = sv.preemption
    if sv.priority:
        out["priority"] = True
    if sv.kv_offload is not None:
        out["kv_offload"] = _plain(sv.kv_offload)
        for key, later in OFFLOAD_LATER:
            if out["kv_offload"][key] == later:
                out["kv_offload"].pop(key)  # shown when not the default
    if sv.scheduler_recv_interval > 1:
        out["scheduler_recv_interval"] = sv.scheduler_recv_interval
    return out
