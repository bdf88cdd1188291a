"""Step-time cost models: pure functions from a :class:`StepShape` to seconds, and
:func:`build_cost`, which picks the scenario's.

- :class:`LinearCost`: user-given coefficients; what hand-worked tests use.
- :class:`sim.cost.roofline.RooflineCost`: analytic, from the model's dimensions and a
  GPU's datasheet figures with fitted efficiency factors.
- Measured profiles (shipped, built from public kernel tables, or written by
  calibrate/) are evaluated by :mod:`sim.cost.profile`.

Every model accepts numpy arrays in the shape's fields and then returns an array.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from sim.configtools import bounded
from sim.cost.eager import EagerSteps, default_graphs, floored, vllm_capture_tokens
from sim.cost.frontend import NO_FRONTEND, Frontend
from sim.cost.gpus import GPUS, GPUSpec, gpu, gpu_of_device
from sim.cost.overlap import HostOverlap, async_scheduling, late_intake
from sim.cost.roofline import RooflineCost
from sim.cost.shape import StepShape
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.config.serving import ServingConfig


class CostModel(Protocol):
    """Anything with ``step_time(shape) -> seconds``; must be pure (no state, no I/O).

    ``frontend`` is the API server's per-request latency outside the steps
    (:class:`sim.cost.frontend.Frontend`; zero where a model does not price it)."""

    @property
    def frontend(self) -> Frontend:
        """The API server's per-request latency (seconds) outside the steps."""
        ...

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase (printed with every result)."""
        ...

    def step_time(self, shape: StepShape) -> Any:
        """Seconds one iteration of ``shape`` takes on one replica."""
        ...


@dataclass(frozen=True)
class LinearCost:
    """t = step_s + per_new_token_s·new + per_context_token_s·context + per_seq_s·seqs (seconds)."""

    step_s: float = bounded(0.0, ge=0)
    per_new_token_s: float = bounded(0.0, ge=0)
    per_context_token_s: float = bounded(0.0, ge=0)
    per_seq_s: float = bounded(0.0, ge=0)
    frontend: Frontend = NO_FRONTEND

    def __post_init__(self) -> None:
        # Every coefficient zero prices every step at no time: every latency would come out
        # 0, which no server shows, rather than an error.
        if not (self.step_s or self.per_new_token_s or self.per_context_token_s
                or self.per_seq_s):
            raise ServesimError("every coefficient is 0 (steps would take no time); give at "
                                "least one of step_s, per_new_token_s, per_context_token_s, "
                                "per_seq_s above 0")

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase."""
        return "linear cost model, given coefficients"

    def step_time(self, shape: StepShape) -> Any:
        """Seconds for one iteration of ``shape``."""
        return (
            self.step_s
            + self.per_new_token_s * shape.new_tokens
            + self.per_context_token_s * shape.context_tokens
            + self.per_seq_s * shape.seqs
        )


def build_cost(scenario: Scenario, pool_gpu: str | GPUSpec | None = None,
               tp: int | None = None, serving: ServingConfig | None = None) -> CostModel:
    """The scenario's cost model (a shipped measured profile, roofline, linear, or a
    loaded profile), for its hardware or for a pool's GPU (a table name or its figures),
    ``tp`` and ``serving`` limits (a disaggregated pool's) when given; its host work
    overlapped with the device where the replicas run vLLM's async scheduling
    (:mod:`sim.cost.overlap`)."""
    base = _build_cost(scenario, pool_gpu, tp)
    cost = eager_steps(scenario, base, _gpu_spec(scenario, pool_gpu),
                       tp or scenario.hardware.tp, serving)
    if not async_scheduling(scenario) or not hasattr(base, "host_terms"):
        return cost  # a model without host work (the linear one) has nothing to overlap
    if scenario.serving.async_scheduling is None and _framework(base) not in (None, "vllm"):
        # An SGLang or TensorRT-LLM profile named by path prices its own framework's
        # steps, as `cost: measured` with that framework does.
        return cost
    return HostOverlap(cost)


def eager_steps(scenario: Scenario, cost: Any, spec: GPUSpec, tp: int,
                serving: ServingConfig | None = None) -> Any:
    """``cost`` with the steps that run without CUDA graphs floored at the host's
    dispatch (:class:`sim.cost.eager.EagerSteps`): which ones by ``serving.cuda_graphs``,
    ``serving.cuda_graph_max_bs`` and (vLLM) ``serving.cuda_graph_max_tokens``, or the
    default of the framework whose kernels price ``cost`` (vLLM's where none is said),
    its capture size from the sequence and token limits of ``serving`` (a pool's; the
    scenario's where None); ``cost`` itself where every step is graphed."""
    sv = serving or scenario.serving
    version = _source(cost).get("version")
    # vLLM's largest capture size bounds the graphed steps of a model that prices a GPU's
    # kernels (tables, roofline); a linear model or a calibrated profile times no kernels
    # apart from the steps they make.
    kernels = isinstance(cost, RooflineCost) or _source(cost).get("kind") == "measured-kernels"
    capture = vllm_capture_tokens(sv.max_num_seqs, sv.max_num_batched_tokens,
                                  sv.speculative.num_tokens if sv.speculative else 0
                                  ) if kernels else 0
    graphs = default_graphs(_framework(cost), None if version is None else str(version),
                            scenario.model, spec, tp, capture)
    if sv.cuda_graphs != "auto":
        graphs = dataclasses.replace(graphs, mode=sv.cuda_graphs)
    if sv.cuda_graph_max_bs is not None:
        graphs = dataclasses.replace(graphs, max_decode_seqs=sv.cuda_graph_max_bs)
    if sv.cuda_graph_max_tokens is not None:
        graphs = dataclasses.replace(graphs, max_tokens=sv.cuda_graph_max_tokens)
    return floored(cost, graphs, scenario.model)


def reads_late(scenario: Scenario, cost: Any) -> bool:
    """Whether replicas of ``scenario`` priced by ``cost`` (:func:`build_cost`'s) run a
    loop that reads a request reaching them busy a step late: vLLM's async scheduling
    (its overlap priced), SGLang's and TensorRT-LLM's overlapped loops
    (:func:`sim.cost.overlap.late_intake`)."""
    return late_intake(scenario, _framework(unwrapped(cost)), isinstance(cost, HostOverlap))


def unwrapped(cost: Any) -> Any:
    """The model under async scheduling's overlap and the eager-step floor."""
    while isinstance(cost, (HostOverlap, EagerSteps)):
        cost = cost.cost
    return cost


def _gpu_spec(scenario: Scenario, pool_gpu: str | GPUSpec | None) -> GPUSpec:
    """The GPU a pool runs on: ``pool_gpu`` (a table name or its figures), else the
    scenario's."""
    if pool_gpu is None:
        return scenario.hardware.gpu_spec
    return gpu(pool_gpu) if isinstance(pool_gpu, str) else pool_gpu


def _source(cost: Any) -> dict[str, Any]:
    """A profile's ``source`` mapping (empty for another model, or a profile without one)."""
    source = getattr(cost, "meta", {}).get("source")
    return source if isinstance(source, dict) else {}


def _framework(cost: Any) -> str | None:
    """The serving framework a profile's kernels were measured under (None: not said)."""
    return _source(cost).get("framework")


def _build_cost(scenario: Scenario, pool_gpu: str | GPUSpec | None,
                tp: int | None) -> CostModel:
    """:func:`build_cost` before async scheduling's overlap."""
    c = scenario.cost
    spec = _gpu_spec(scenario, pool_gpu)
    gpu_name = spec.name
    tp = tp or scenario.hardware.tp
    ep, skew = scenario.hardware.ep, scenario.hardware.ep_imbalance
    if c.linear is not None:
        return c.linear
    if c.roofline is not None:
        return RooflineCost(scenario.model, spec, tp, c.roofline, ep, skew,
                            scenario.hardware.dp)
    from sim.cost.measured import UNTIMED, architecture, find  # lazy, as load_profile
    from sim.cost.profilefile import load_profile  # lazy: only profile scenarios pay for it

    if c.measured is not None:
        try:
            return load_profile(find(scenario.model, gpu_name, tp, c.measured.framework, ep,
                                     scenario.hardware.dp))
        except ServesimError as exc:
            raise exc.located(scenario.source) from None
    assert c.profile is not None
    try:
        prof = load_profile(c.profile, scenario.base_dir)
    except ServesimError as exc:
        if exc.source:  # a fault inside the profile file: its own keys and lines
            raise exc from None
        named = (exc.where or "").startswith("cost.profile")
        raise exc.located(scenario.source, None if named else "cost.profile") from None
    # A tables profile names its GPU; a calibrated one the device torch reported (a CPU
    # or a GPU the table lacks: not compared).
    tables = _source(prof).get("kind") == "measured-kernels"
    measured_on = prof.device if tables else gpu_of_device(prof.device) or gpu_name
    mismatch = [
        f"{k} {a!r} != {b!r}"
        for k, a, b in (("gpu", measured_on, gpu_name), ("tp", prof.tp, tp),
                        ("ep", prof.meta.get("ep", 1), ep),
                        ("dp", prof.meta.get("dp", 1), scenario.hardware.dp))
        if a != b
    ]
    if architecture(prof.model) != architecture(scenario.model):
        # Only the shape the kernels were timed on, as cost: measured matches it: a name,
        # a context limit (vLLM's max-model-len) or a rotary base changes no step's time.
        # The fields that differ, not two whole specs of some forty fields each.
        diff = [f"{f.name} {getattr(prof.model, f.name)!r} != "
                f"{getattr(scenario.model, f.name)!r}"
                for f in fields(prof.model) if f.name not in UNTIMED
                and getattr(prof.model, f.name) != getattr(scenario.model, f.name)]
        mismatch.insert(0, f"model ({', '.join(diff[:6])}"
                           f"{f', and {len(diff) - 6} more' if len(diff) > 6 else ''})")
    if mismatch:
        hint = ("" if measured_on == gpu_name else
                "; an inline GPU prices with cost: roofline or a profile calibrated on it"
                if gpu_name not in GPUS else
                "; cost: measured picks the shipped profile of each GPU and tp" if tables
                else "")
        raise ServesimError(f"profile {c.profile} was measured for another setup: "
                            f"{'; '.join(mismatch)}{hint}", scenario.source, "cost.profile")
    return prof
