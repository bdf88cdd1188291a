"""Scenario files: YAML → validated, frozen :class:`Scenario`. Loading writes nothing.

Top-level keys: ``name``, ``model``, ``hardware``, ``cost``, ``serving``, ``cluster``,
``workload``, ``slo``, ``disaggregated`` (pools and link of the ``disaggregated`` policy,
see docs/policies.md), ``admission`` and ``faults`` (docs/reliability.md), ``horizon_s``.
``event_skipping`` is still accepted and has no effect (runs of decode iterations were
once fused into one event, with the same results). docs/scenarios.md is the reference.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from sim.config.disagg import DisaggConfig, check_pools, pools
from sim.config.faults import FaultsConfig, check_faults
from sim.config.vllmflags import apply_vllm, section_mapping
from sim.configtools import (
    bounded,
    build,
    convert,
    parse_yaml,
    rename_alias,
    resolve_alias,
    yaml_error,
)
from sim.cost.measured import MeasuredConfig
from sim.cost.models import LinearCost, RooflineParams
from sim.cost.specs import GPUS, MODELS, ModelSpec, gpu, model_preset
from sim.errors import ServesimError
from sim.files import read_text
from sim.policies.admission import AdmissionConfig
from sim.workload.requests import WorkloadConfig


@dataclass(frozen=True)
class HardwareConfig:
    """One replica's GPUs: type, count (tensor-parallel degree), and the fraction of each
    GPU's reported memory vLLM may use (``gpu_memory_utilization``; that name is accepted
    in the file too)."""

    gpu: str = "h100-sxm"
    tp: int = bounded(1, ge=1)
    memory_utilization: float = bounded(0.9, gt=0, le=1)

    def __post_init__(self) -> None:
        if self.gpu not in GPUS:
            raise ServesimError(f"unknown gpu {self.gpu!r}; valid: {', '.join(sorted(GPUS))}",
                                where="gpu")


@dataclass(frozen=True)
class CostConfig:
    """Exactly one of: ``measured`` (the shipped profile built from public kernel
    tables), ``roofline`` (analytic), ``linear`` (coefficients), ``profile`` (a file)."""

    measured: MeasuredConfig | None = None
    roofline: RooflineParams | None = None
    linear: LinearCost | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        given = [k for k in COST_KINDS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ServesimError(f"give exactly one cost model of {', '.join(COST_KINDS)} "
                                f"(got {given or 'none'})")


COST_KINDS = ("measured", "roofline", "linear", "profile")


@dataclass(frozen=True)
class ServingConfig:
    """Batching policy and its limits (sequences, tokens per iteration, KV blocks)."""

    policy: str = "continuous"
    max_num_seqs: int = bounded(256, ge=1)
    max_num_batched_tokens: int = bounded(8192, ge=1)
    block_size: int = bounded(16, ge=1)
    watermark: float = bounded(0.01, ge=0, lt=1)
    preemption: Literal["recompute", "swap"] = "recompute"
    # vLLM's --num-gpu-blocks-override: KV blocks per replica instead of the memory-derived
    # count (the "GPU blocks" / "KV cache size" a vLLM log prints); num_kv_blocks is an alias.
    num_gpu_blocks: int | None = bounded(None, ge=1)
    num_kv_blocks: int | None = bounded(None, ge=1)
    # Host memory per GPU for swapped KV (GiB); a PiB is beyond any host.
    swap_space_gib: float = bounded(4.0, ge=0, le=2**20)
    # chunked: tokens per iteration (default 2048, or max_num_batched_tokens if smaller)
    token_budget: int | None = bounded(None, ge=1)
    static_batch_size: int | None = bounded(None, ge=1)  # static: requests per batch
    priority: bool = False  # admit by (priority class, arrival) instead of arrival
    prefix_caching: bool = False  # share KV of equal prompt prefixes (needs prefix hashes)

    def __post_init__(self) -> None:
        from sim.policies.registry import POLICIES

        resolve_alias(self, "num_gpu_blocks", "num_kv_blocks")
        if self.policy not in POLICIES:
            raise ServesimError(
                f"unknown policy {self.policy!r}; valid: {', '.join(sorted(POLICIES))}",
                where="policy",
            )
        if self.prefix_caching and (self.policy not in ("continuous", "chunked")
                                    or self.preemption != "recompute"):
            raise ServesimError(
                f"prefix caching is modelled for policies continuous and chunked with "
                f"preemption recompute (vLLM's automatic prefix caching), not policy "
                f"{self.policy!r} with preemption {self.preemption!r}", where="prefix_caching")
        if self.policy == "chunked":
            # A budget below one block could never grow a prefill by a whole block, and
            # one above the per-iteration cap would break that cap.
            if self.chunk_budget < self.block_size:
                raise ServesimError(f"got {self.chunk_budget}, must be at least block_size "
                                    f"{self.block_size}", where="token_budget")
            if self.token_budget is not None and self.token_budget > self.max_num_batched_tokens:
                raise ServesimError(f"got {self.token_budget}, must be at most "
                                    f"max_num_batched_tokens {self.max_num_batched_tokens}",
                                    where="token_budget")

    @property
    def chunk_budget(self) -> int:
        """The chunked policy's tokens per iteration."""
        if self.token_budget is not None:
            return self.token_budget
        return min(2048, self.max_num_batched_tokens)


@dataclass(frozen=True)
class ClusterConfig:
    """Identical replicas behind one router."""

    replicas: int = bounded(1, ge=1)
    router: Literal["round_robin", "least_outstanding", "random", "power_of_two",
                    "prefix_affinity"] = "round_robin"


@dataclass(frozen=True)
class SLOConfig:
    """Latency targets a request must meet to count towards goodput (seconds)."""

    ttft_s: float | None = bounded(None, gt=0)
    tpot_s: float | None = bounded(None, gt=0)


@dataclass(frozen=True)
class Scenario:
    """A whole, validated scenario. ``base_dir`` resolves relative paths in it."""

    model: ModelSpec
    workload: WorkloadConfig
    name: str = "scenario"
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    cost: CostConfig = field(default_factory=lambda: CostConfig(roofline=RooflineParams()))
    serving: ServingConfig = field(default_factory=ServingConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    slo: SLOConfig = field(default_factory=SLOConfig)
    disaggregated: DisaggConfig = field(default_factory=DisaggConfig)
    horizon_s: float | None = bounded(None, gt=0)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    base_dir: Path | None = None
    source: str = "<scenario>"
    # The ``--set`` overrides applied on loading, as given (already part of the fields
    # above; kept so that a summary can say what was asked).
    overrides: tuple[str, ...] = ()


_TOP = ("name", "model", "hardware", "cost", "serving", "cluster", "workload", "slo",
        "disaggregated", "horizon_s", "event_skipping", "admission", "faults", "vllm")


def _model(value: Any, base_dir: Path | None) -> ModelSpec:
    if isinstance(value, str):
        try:
            return model_preset(value)
        except ServesimError as exc:
            raise exc.located(prefix="model") from None
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a preset name or a mapping", where="model")
    spec = dict(value)
    preset = spec.pop("preset", None)
    hf_config = spec.pop("hf_config", None)
    if preset is not None and hf_config is not None:
        raise ServesimError("give preset or hf_config, not both", where="model.hf_config")
    base: ModelSpec | None = None
    if preset is not None:
        if not isinstance(preset, str) or preset not in MODELS:
            raise ServesimError(f"unknown model preset {preset!r}; valid: "
                                f"{', '.join(sorted(MODELS))}", where="model.preset")
        base = MODELS[preset]
    if hf_config is not None:
        from sim.cost.hfconfig import from_hf_config

        if not isinstance(hf_config, str):
            raise ServesimError(f"got {hf_config!r}, expected a path to a config.json",
                                where="model.hf_config")
        path = Path(hf_config)
        try:
            base = from_hf_config(path if base_dir is None else base_dir / path)
        except ServesimError as exc:
            raise ServesimError(f"{exc}", where="model.hf_config") from None
    if base is not None:
        spec = {**{k: getattr(base, k) for k in base.__dataclass_fields__}, **spec}
    return build(ModelSpec, spec, "model")


def _cost(value: Any) -> CostConfig:
    if value in ("roofline", None):
        return CostConfig(roofline=RooflineParams())
    if value == "measured":
        return CostConfig(measured=MeasuredConfig())
    if isinstance(value, str):
        raise ServesimError(f"got {value!r}; give measured, roofline, or a mapping with one "
                            f"of {', '.join(COST_KINDS)}", where="cost")
    if isinstance(value, dict):
        # `roofline:` or `measured:` with nothing under it takes the defaults.
        value = {k: {} if k in ("roofline", "measured") and v is None else v
                 for k, v in value.items()}
    return build(CostConfig, value, "cost")


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``raw`` with each ``dotted.key=value`` set (value parsed as YAML)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ServesimError(f"--set needs dotted.key=value, got {item!r}")
        key, text = item.split("=", 1)
        try:
            val = parse_yaml(text)
        except yaml.YAMLError:
            raise ServesimError(f"cannot parse value {text!r}", where=key) from None
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            if not isinstance(node.get(p), dict):
                # A preset name stays the model the keys are set on.
                node[p] = section_mapping(p, node.get(p)) if node is out else {}
            node = node[p]
        node[parts[-1]] = val
    return out


def from_dict(raw: Any, source: str = "<scenario>", base_dir: Path | None = None,
              overrides: tuple[str, ...] = ()) -> Scenario:
    """Validate a parsed scenario mapping; errors name ``source`` and the dotted key.
    ``overrides`` (already applied to ``raw``) are recorded on the scenario."""
    try:
        if not isinstance(raw, dict):
            raise ServesimError(f"expected a mapping of {', '.join(_TOP)}, got {raw!r}")
        unknown = sorted(set(map(str, raw)) - set(_TOP))
        if unknown:
            raise ServesimError(f"unknown key {unknown[0]!r}; allowed: {', '.join(_TOP)}",
                                where=unknown[0])
        for required in ("model", "workload"):
            if required not in raw:
                raise ServesimError("required key is missing", where=required)
        raw = apply_vllm(raw, HardwareConfig.gpu)  # server flags, moved to their keys
        try:
            hw_raw = rename_alias(raw.get("hardware") or {}, "memory_utilization",
                                  "gpu_memory_utilization")
        except ServesimError as exc:
            raise exc.located(prefix="hardware") from None
        hardware = build(HardwareConfig, hw_raw, "hardware")
        gpu(hardware.gpu)
        # Files written for older versions may set it; it must still be a boolean.
        convert(bool, raw.get("event_skipping", True), "event_skipping")
        scenario = Scenario(
            model=_model(raw["model"], base_dir),
            workload=build(WorkloadConfig, raw["workload"], "workload"),
            name=convert(str, raw.get("name", "scenario"), "name"),
            hardware=hardware,
            cost=_cost(raw.get("cost")),
            serving=build(ServingConfig, raw.get("serving") or {}, "serving"),
            cluster=build(ClusterConfig, raw.get("cluster") or {}, "cluster"),
            slo=build(SLOConfig, raw.get("slo") or {}, "slo"),
            disaggregated=build(DisaggConfig, raw.get("disaggregated") or {}, "disaggregated"),
            horizon_s=convert(float | None, raw.get("horizon_s"), "horizon_s"),
            admission=build(AdmissionConfig, raw.get("admission") or {}, "admission"),
            faults=build(FaultsConfig, raw.get("faults") or {}, "faults"),
            base_dir=base_dir,
            source=source,
            overrides=tuple(overrides),
        )
        # A tp that cannot shard the model, or a model that does not fit, is a load-time
        # error with the numbers.
        check_pools(scenario)
        wl = scenario.workload
        check_faults(scenario.faults, pools(scenario)[0].replicas,
                     scenario.horizon_s if scenario.horizon_s is not None else wl.duration_s,
                     wl.concurrency is not None)
        if scenario.cost.measured is not None:
            from sim.cost.measured import find

            for pool in pools(scenario):
                find(scenario.model, pool.gpu, pool.tp, scenario.cost.measured.framework)
        if scenario.horizon_s is not None and scenario.horizon_s <= 0:
            raise ServesimError(f"got {scenario.horizon_s}, must be greater than 0",
                                where="horizon_s")
        return scenario
    except ServesimError as exc:
        raise exc.located(source) from None


def load(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read and validate the scenario file at ``path``, applying ``--set`` overrides."""
    p = Path(path)
    text = read_text(p, "scenario")
    try:
        raw = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, str(p)) from None
    if overrides:
        if not isinstance(raw, dict):
            raise ServesimError("expected a mapping at the top level", str(p))
        try:
            raw = apply_overrides(raw, overrides)
        except ServesimError as exc:
            raise exc.located(str(p)) from None
    return from_dict(raw, str(p), p.parent.resolve(), tuple(overrides or ()))
