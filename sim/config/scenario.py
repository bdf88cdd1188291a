"""Scenario files: YAML → validated, frozen :class:`Scenario`. Loading writes nothing.

Top-level keys: ``name``, ``model``, ``hardware``, ``cost``, ``serving``, ``cluster``,
``workload``, ``slo``, ``disaggregated`` (pools and link of the ``disaggregated`` policy,
see docs/policies.md), ``admission`` and ``faults`` (docs/reliability.md), ``horizon_s``.
``event_skipping`` is still accepted and has no effect (runs of decode iterations were
once fused into one event, with the same results). docs/scenarios.md is the reference.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sim.config.disagg import (
    DisaggConfig,
    Pool,
    check_pools,
    kv_bytes_blocks,
    pool_memory,
    pools,
)
from sim.config.faults import FaultsConfig, check_faults
from sim.config.gpu import DEFAULT_GPU, HardwareConfig
from sim.config.loadnotes import settings_notes
from sim.config.modelsection import model_section
from sim.config.overrides import load_raw
from sim.config.serving import ServingConfig
from sim.config.speculative import check_speculative
from sim.config.statepool import resolve_state_pool
from sim.config.vllmdefaults import pool_defaults, serving_defaults
from sim.config.vllmflags import apply_vllm
from sim.config.vllmnames import flag_name
from sim.configtools import (
    MAX_TIME_S,
    bounded,
    build,
    check_slo_seconds,
    convert,
    printable,
    rename_alias,
)
from sim.cost.frontend import FRONTEND_COEFS
from sim.cost.gpus import GPUS, NODE_HOST_MEMORY_GIB
from sim.cost.measured import MeasuredConfig
from sim.cost.models import LinearCost
from sim.cost.roofline import RooflineParams
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.policies.admission import AdmissionConfig
from sim.workload.checks import check_prefix_blocks, check_trace_keys
from sim.workload.requests import WorkloadConfig


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

    def __post_init__(self) -> None:
        check_slo_seconds(self)


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
    horizon_s: float | None = bounded(None, gt=0, le=MAX_TIME_S)
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    base_dir: Path | None = None
    source: str = "<scenario>"
    # The ``--set`` overrides applied on loading, as given (already part of the fields
    # above; kept so that a summary can say what was asked).
    overrides: tuple[str, ...] = ()
    # What loading accepted unpriced or that changes less than it seems (loadnotes).
    notes: tuple[str, ...] = ()
    # Files loading read beside those the keys name (a vLLM config file): an output
    # folder keeps them, and a study's cache covers their bytes (input_files).
    read: tuple[Path, ...] = ()


_TOP = ("name", "model", "hardware", "cost", "serving", "cluster", "workload", "slo",
        "disaggregated", "horizon_s", "event_skipping", "admission", "faults", "vllm")


def _section(raw: dict[str, Any], key: str) -> Any:
    """The scenario's ``key`` section: {} when absent or null (a section left empty or
    all commented out); a value of another kind is refused here, where ``or {}`` would
    have read 0, "" or [] as the defaults without a word."""
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a mapping", where=key)
    return value


def _cost(value: Any) -> CostConfig:
    if value in ("roofline", None):
        return CostConfig(roofline=RooflineParams())
    if value == "measured":
        return CostConfig(measured=MeasuredConfig())
    if isinstance(value, str):
        raise ServesimError(f"got {value!r}; give measured, roofline, or a mapping with one "
                            f"of {', '.join(COST_KINDS)}", where="cost")
    if isinstance(value, dict):
        named = [k for k in COST_KINDS if k in value]
        if len(named) > 1:  # a second kind left empty (null) is still a second kind
            raise ServesimError(f"give exactly one cost model of {', '.join(COST_KINDS)} "
                                f"(got {', '.join(named)})", where="cost")
        # `roofline:` or `measured:` with nothing under it takes the defaults.
        value = {k: {} if k in ("roofline", "measured") and v is None else v
                 for k, v in value.items()}
        roof = value.get("roofline")
        if isinstance(roof, dict) and isinstance(roof.get("frontend"), dict):
            # The figures a frontend leaves out keep the roofline's own (vLLM's prior),
            # as its other knobs do: `frontend: {jitter_s: 0.001}` adds jitter to vLLM's
            # fitted latency, it does not set that to zero.
            default = RooflineParams().frontend
            given = roof["frontend"]
            value = {**value, "roofline": {**roof, "frontend": {
                **{k: getattr(default, k) for k in FRONTEND_COEFS}, **given}}}
    return build(CostConfig, value, "cost")


def _check_recv(scenario: Scenario) -> None:
    """``serving.scheduler_recv_interval`` above 1 needs a single-stage replica: a
    pipeline's stages run their own loop, whose reads are not modelled."""
    n = scenario.serving.scheduler_recv_interval
    if n > 1 and scenario.hardware.pp > 1:
        raise ServesimError(f"got {n} with hardware.pp {scenario.hardware.pp}: reading new "
                            "requests every few steps is modelled for single-stage replicas; "
                            "set 1 or hardware.pp 1", where="serving.scheduler_recv_interval")


def _check_async(scenario: Scenario) -> None:
    """``serving.async_scheduling: true`` where servesim cannot price it: across pipeline
    stages (each stage's loop would overlap on its own, not modelled) or with the linear
    cost model (it does not say which of its seconds are host work)."""
    if scenario.serving.async_scheduling is not True:
        return
    if scenario.hardware.pp > 1:
        raise ServesimError(f"got true with hardware.pp {scenario.hardware.pp}: overlapping "
                            "host work across pipeline stages is not modelled (vLLM 0.14 "
                            "turns it off there too); set false or leave it unset",
                            where="serving.async_scheduling")
    if scenario.cost.linear is not None:
        raise ServesimError("got true with cost: linear, which does not say which of its "
                            "seconds are host work; use roofline, measured or a profile",
                            where="serving.async_scheduling")


def input_files(sc: Scenario) -> list[Path]:
    """The files the scenario reads beside itself, as they resolve (shipped names left
    out): its trace, empirical lengths files (the workload's and its classes'), a cost
    profile given as a path and a vLLM config file its ``vllm`` section reads. A run's
    output folder keeps them (sim.report.folder)."""
    w = sc.workload
    refs = [w.trace.path if w.trace is not None else None,
            w.lengths.empirical if w.lengths is not None else None,
            *(c.lengths.empirical for c in (w.classes or {}).values() if c.lengths is not None),
            sc.cost.profile]
    out = [Path(sc.source), *sc.read]
    for ref in refs:
        if ref:
            path = Path(ref).expanduser()
            if not path.is_absolute() and sc.base_dir is not None:
                path = sc.base_dir / path
            if path.is_file():
                out.append(path)
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
        flag_tier = _tier_flag(raw)
        raw, notes, read = apply_vllm(raw, DEFAULT_GPU, base_dir)  # server flags, to their keys
        hw_section = _section(raw, "hardware")
        try:
            hw_raw = rename_alias(hw_section, "memory_utilization",
                                  "gpu_memory_utilization")
        except ServesimError as exc:
            raise exc.located(prefix="hardware") from None
        hardware = build(HardwareConfig, hw_raw, "hardware")
        # Files written for older versions may set it; it must still be a boolean.
        convert(bool, raw.get("event_skipping", True), "event_skipping")
        check_trace_keys(raw["workload"])
        model = model_section(raw["model"], base_dir)
        serving_raw = _section(raw, "serving")
        serving = build(ServingConfig, serving_defaults(serving_raw, hardware.gpu_spec),
                        "serving")
        resolved, said = serving.resolved_caching(model.linear_layers)
        notes += said
        disagg_raw = _section(raw, "disaggregated")
        if disagg_raw and resolved.policy != "disaggregated":
            # Kept, not refused: compare --policies runs one file under several policies.
            notes += (f"disaggregated: not used under policy {resolved.policy}; its pools "
                      "run under serving.policy: disaggregated",)
        scenario = Scenario(
            model=model,
            workload=build(WorkloadConfig, raw["workload"], "workload"),
            name=printable(raw.get("name", "scenario"), "name"),
            hardware=hardware,
            cost=_cost(raw.get("cost")),
            serving=resolved,
            cluster=build(ClusterConfig, _section(raw, "cluster"), "cluster"),
            slo=build(SLOConfig, _section(raw, "slo"), "slo"),
            disaggregated=build(DisaggConfig,
                                pool_defaults(disagg_raw, serving_raw, hardware.gpu_spec),
                                "disaggregated"),
            horizon_s=convert(float | None, raw.get("horizon_s"), "horizon_s"),
            admission=build(AdmissionConfig, _section(raw, "admission"), "admission"),
            faults=build(FaultsConfig, _section(raw, "faults"), "faults"),
            base_dir=base_dir,
            source=source,
            overrides=tuple(overrides),
            notes=notes,
            read=read,
        )
        horizon = scenario.horizon_s
        if horizon is not None and not 0 < horizon <= MAX_TIME_S:
            # Past 1e9 s the run would idle its clock out of range and fail after the fact.
            raise ServesimError(f"got {horizon:g}, must be greater than 0 and at most "
                                f"{MAX_TIME_S:g} s (31 years, the most the simulated clock "
                                "resolves, as for every workload time)", where="horizon_s")
        # A tp that cannot shard the model, or a model that does not fit, is a load-time
        # error with the numbers.
        check_speculative(scenario)
        scenario = kv_bytes_blocks(resolve_state_pool(scenario))
        _check_async(scenario)
        _check_recv(scenario)
        check_pools(scenario)
        check_host_memory(scenario, flag_tier)
        wl = scenario.workload
        if scenario.serving.caches_prefixes and scenario.serving.linear_state_pool is None:
            # (A Gated DeltaNet model's block, vLLM's, not the user's: any hash size goes.)
            check_prefix_blocks(wl, scenario.serving.block_size)
        check_faults(scenario.faults, pools(scenario)[0].replicas,
                     scenario.horizon_s if scenario.horizon_s is not None else wl.duration_s,
                     wl.concurrency is not None)
        if scenario.cost.measured is not None:
            from sim.cost.measured import find

            for pool in pools(scenario):
                if pool.gpu not in GPUS:
                    raise ServesimError(
                        f"the inline GPU {pool.gpu!r} has no measured kernel tables; use "
                        f"cost: roofline (or a profile calibrated on it)", where="cost.measured")
                find(scenario.model, pool.gpu, pool.tp, scenario.cost.measured.framework,
                     pool.ep, pool.dp)
            if scenario.hardware.ep_imbalance != 1:
                raise ServesimError(f"got {scenario.hardware.ep_imbalance:g} with cost: "
                                    "measured, whose MoE layers are the tables' own timings "
                                    "under a skewed routing (servesim profile build "
                                    "--routing); ep_imbalance applies to cost: roofline",
                                    where="hardware.ep_imbalance")
        # Only a scenario that passed every check gets notes on its settings.
        return dataclasses.replace(scenario,
                                   notes=scenario.notes + settings_notes(scenario, raw))
    except ServesimError as exc:
        raise exc.located(source) from None


def _tier_flag(raw: dict[str, Any]) -> str | None:
    """The vLLM flag that sizes the host tier, as the section writes it (``vllm.NAME``;
    ``the vllm section`` where a config file of its gives it), for errors on that size;
    None where the scenario writes ``serving.kv_offload`` itself or no flag sets one."""
    vllm, serving = raw.get("vllm"), raw.get("serving")
    if not isinstance(vllm, dict) or (isinstance(serving, dict) and "kv_offload" in serving):
        return None
    sizing = ("kv_offloading_size", "kv_transfer_config")
    return next((f"vllm.{k}" for k in vllm if flag_name(k) in sizing), "the vllm section")


def check_host_memory(scenario: Scenario, flag_tier: str | None = None) -> None:
    """A kv_offload tier fits the host memory of a node: ``cpu_gb`` times the pool's GPUs
    on one node (all of them, up to the node's count) at most ``hardware.host_memory_gb``
    (default: the node's installed memory); a ``cpu_gb`` above 0 holds at least one KV
    block. ``flag_tier``: the vLLM flag that set the tier, which its errors name."""
    given = scenario.hardware.host_memory_gb
    for pool in pools(scenario):
        tier = pool.serving.kv_offload
        if tier is None:
            if pool.serving.preemption == "swap":
                check_swap_space(scenario, pool, given)
            continue
        block = pool_memory(scenario.model, pool).block_bytes  # one block's shard, a GPU
        if 0 < tier.cpu_gb * 2**30 < block:
            raise ServesimError(
                f"got {tier.cpu_gb:g} GiB per GPU, less than one KV block ({block:,} bytes, "
                f"{block / 2**20:g} MiB per GPU), so the tier would hold nothing; give at "
                f"least {block / 2**30:.3g} GiB, or 0"
                + (f" (as set by {flag_tier}, whose size is over the tensor-parallel GPUs)"
                   if flag_tier else ""), where="serving.kv_offload.cpu_gb")
        spec = pool.gpu_spec
        cap, source = _node_memory(pool, given)
        if cap is None:
            raise ServesimError(f"the inline GPU {pool.gpu!r} has no installed host memory "
                                f"on record; set hardware.host_memory_gb (GiB per node of "
                                f"{spec.node_gpus} GPUs)", where="hardware.host_memory_gb")
        on_node = min(pool.replicas * pool.tp * pool.dp, spec.node_gpus)
        if tier.cpu_gb * on_node > cap:
            raise ServesimError(
                f"got {tier.cpu_gb:g} GiB per GPU x {on_node} GPUs on a node = "
                f"{tier.cpu_gb * on_node:g} GiB, more than the {cap:g} GiB of {source}; "
                f"lower cpu_gb, or set hardware.host_memory_gb", where="serving.kv_offload.cpu_gb")


def check_swap_space(scenario: Scenario, pool: Pool, given: float | None) -> None:
    """``preemption: swap`` has a swap space of at least one KV block a GPU (a smaller one
    had sent every preemption to recompute unsaid) and, as vLLM v0 checks at start-up,
    the swap space of a server's tensor-parallel GPUs within 70% of the node's host
    memory (``given``, or the node's installed memory where on record)."""
    gib = pool.serving.swap_space_gib
    block = pool_memory(scenario.model, pool).block_bytes
    if gib * 2**30 < block:
        raise ServesimError(
            f"got {gib:g} GiB per GPU under preemption: swap, less than one KV block "
            f"({block:,} bytes, {block / 2**20:g} MiB per GPU), so every preempted request "
            f"would recompute; give at least {block / 2**30:.3g} GiB, or preemption: "
            "recompute", where="serving.swap_space_gib")
    cap, source = _node_memory(pool, given)
    on_node = min(pool.tp, pool.gpu_spec.node_gpus)
    if cap is not None and gib * on_node > 0.7 * cap:
        raise ServesimError(f"got {gib:g} GiB per GPU x {on_node} tensor-parallel GPU(s) = "
                            f"{gib * on_node:g} GiB, more than 70% of the {cap:g} GiB of "
                            f"{source}, which vLLM refuses as too large a swap space; lower "
                            "swap_space_gib, or set hardware.host_memory_gb",
                            where="serving.swap_space_gib")


def _node_memory(pool: Pool, given: float | None) -> tuple[float | None, str]:
    """GiB of host memory on one of ``pool``'s nodes (``given``: hardware.host_memory_gb,
    else the node's installed memory; None where neither is known) and what it is, as
    errors name it."""
    if given is not None:
        return given, "hardware.host_memory_gb"
    return NODE_HOST_MEMORY_GIB.get(pool.gpu), f"the installed memory of a {pool.gpu} node"


def load(path: str | Path, overrides: list[str] | None = None) -> Scenario:
    """Read and validate the scenario file at ``path``, applying ``--set`` overrides."""
    p = Path(path)
    return from_dict(load_raw(p, overrides), str(p), p.parent.resolve(), tuple(overrides or ()))
