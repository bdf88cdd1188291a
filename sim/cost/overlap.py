"""A serving loop that overlaps its host work with the device: vLLM's async scheduling.

A synchronous loop (vLLM before 0.14, or ``--no-async-scheduling``) schedules a step,
prepares its inputs, waits for the device, then processes the outputs, so every step
costs its host work plus its device work. With async scheduling (vLLM's default since
0.14.0, January 2026: "enabled unless there is an incompatible option") the scheduler
builds step n+1 while the device runs step n, so the device waits on the host only
when the host work is the longer of the two: a step costs the larger of them.

:class:`HostOverlap` wraps a cost model that can say which of its seconds are host
work (``host_terms()``: the roofline's step and per-sequence overheads, a measured
profile's serving-loop priors and a calibrated profile's timed host work) and prices
each step as ``max(step − host, host)``. Everything else is the wrapped model's.

:func:`async_scheduling` decides whether a scenario's replicas run so, with vLLM's own
defaults: ``serving.async_scheduling`` when given; otherwise on for vLLM v1's
scheduler (policy ``chunked``) unless pipeline stages or a speculative method other
than EAGLE/MTP turn it off, as vLLM 0.14 does, unless ``serving.vllm_version`` names a
release before 0.14, and unless the cost is a measured profile of SGLang or
TensorRT-LLM (their own loops overlap already, and their fitted priors are what is left
after it). Those loops still read a request that reaches a busy replica a step late, as
vLLM's does: :func:`late_intake` says which replicas run so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sim.cost.eager import EagerSteps, host_seconds
from sim.cost.shape import StepShape
from sim.cost.vllmmemory import version_tuple

if TYPE_CHECKING:
    from sim.config.scenario import Scenario

# Speculative methods vLLM 0.14 keeps async scheduling on with (the others turn it off).
ASYNC_SPECULATIVE = frozenset(("eagle", "mtp"))


def _synchronous(scenario: Scenario) -> bool:
    """Whether ``scenario``'s settings keep any framework's loop from overlapping:
    pipeline stages (each framework runs those with a loop of its own) or a speculative
    method other than EAGLE/MTP (vLLM 0.14 and TensorRT-LLM overlap only those)."""
    spec = scenario.serving.speculative
    return scenario.hardware.pp > 1 or (spec is not None
                                        and spec.method not in ASYNC_SPECULATIVE)


def async_scheduling(scenario: Scenario) -> bool:
    """Whether ``scenario``'s replicas overlap host work with the device (module doc)."""
    s = scenario.serving
    if s.async_scheduling is not None:
        return s.async_scheduling
    if s.policy != "chunked" or _synchronous(scenario):
        return False
    if s.vllm_version is not None and version_tuple(s.vllm_version) < (0, 14):
        return False  # a release before async scheduling was on by default
    measured = scenario.cost.measured
    return measured is None or measured.framework == "vllm"


# Frameworks whose own serving loop schedules step n + 1 before step n ends by default:
# SGLang's overlap scheduler (``event_loop_overlap``; ``--disable-overlap-schedule``
# turns it off) and TensorRT-LLM's PyTorch executor (``_executor_loop_overlap``;
# ``disable_overlap_scheduler``). Their measured profiles' priors are fitted net of the
# overlap, so only the intake's one-step wait is theirs to add (:func:`late_intake`).
OVERLAPPED_LOOPS = frozenset(("sglang", "trtllm"))


def late_intake(scenario: Scenario, framework: str | None, priced: bool) -> bool:
    """Whether a replica of ``scenario`` whose steps a ``framework`` profile prices
    (None: not a measured profile) reads a request that reaches it busy a step late
    (:mod:`sim.core.asyncgate`): under vLLM's async scheduling, where the overlap is
    ``priced`` (:class:`HostOverlap` wraps the cost), and under SGLang's and TensorRT-LLM's
    overlapped loops, on unless ``serving.async_scheduling`` says otherwise (false: the
    server runs its loop synchronously; true: priced as vLLM's, so ``priced``), the
    replica has pipeline stages (both run those with a loop of their own), speculation
    keeps SGLang's loop synchronous (as SGLang does unless its spec-v2 path is chosen)
    or is a method other than EAGLE/MTP under TensorRT-LLM, or an SGLang model has
    linear-attention layers (its default Mamba cache strategy with the radix cache
    turns the overlap off)."""
    if priced:
        return True
    s = scenario.serving
    if (s.async_scheduling is not None or framework not in OVERLAPPED_LOOPS
            or _synchronous(scenario)):
        return False
    # SGLang's loop stays synchronous with any speculation (spec v1) and beside a
    # linear-attention model's Mamba cache.
    return not (framework == "sglang"
                and (s.speculative is not None or bool(scenario.model.linear_layers)))


class HostOverlap:
    """``cost`` with its host work overlapped with its device work: each step costs
    ``max(step − host, host)`` seconds (see the module doc); ``frontend``, ``source``
    (with "async scheduling" added) and ``wake_time`` are the wrapped model's. The host
    work is read once from the wrapped model's ``host_terms()``: (fixed s, s per
    sequence, s per decode group, group count cap)."""

    def __init__(self, cost: Any):
        self.cost = cost
        self._step = cost.step_time
        self._terms = tuple(float(x) for x in cost.host_terms())
        self.frontend = cost.frontend
        self.wake_time = getattr(cost, "wake_time", None)

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase."""
        return f"{self.cost.source}; async scheduling"

    def host_time(self, shape: StepShape) -> Any:
        """Host seconds of a step of ``shape`` (numbers or arrays)."""
        return host_seconds(self._terms, shape)

    def device_time(self, shape: StepShape) -> Any:
        """Seconds of the device step alone (the step without its host work)."""
        return self._step(shape) - self.host_time(shape)

    def step_time_plus(self, shape: StepShape, extra_s: float) -> float:
        """Seconds of one iteration of ``shape`` (Python ints) whose device work runs
        ``extra_s`` seconds longer (a data-parallel rank's shared experts): the longer of
        that device work and the host work."""
        h = self.host_time(shape)
        if isinstance(self.cost, EagerSteps):
            # The longer device work may still sit under the dispatch floor.
            return max(self.cost.step_time_plus(shape, extra_s) - h, h)
        return max(self._step(shape) - h + extra_s, h)

    def experts_time(self, tokens: int) -> float:
        """The wrapped model's (data-parallel attention: the shared experts' seconds)."""
        return float(self.cost.experts_time(tokens))

    def step_time(self, shape: StepShape) -> Any:
        """Seconds one iteration of ``shape`` takes: the longer of its device work and
        its host work."""
        t = self._step(shape)
        if type(t) is float:
            # One step: Python floats, the hot path of every simulated iteration, so
            # host_time's sum is written out here (a call more costs as much again).
            const, per_seq, per_group, groups = self._terms
            h = const + per_seq * shape.seqs
            if per_group:
                h += per_group * min(shape.decode_seqs, groups)
            d = t - h
            return d if d > h else h
        h = self.host_time(shape)
        return np.maximum(t - h, h)
