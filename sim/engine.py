"""The simulation: requests arrive, a router spreads them over replicas, replicas iterate.

Arrivals are delivered lazily: every event first hands the router all arrivals up to
its own time (:meth:`Engine.dispatch`), before any replica changes state at that time.
So an arrival at exactly an iteration boundary is visible to that boundary's
scheduling decision, whatever order SimPy processes same-time events in, and a
separate arrival timer runs only while some replica is idle and must be woken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from sim.cost import CostModel, RooflineCost
from sim.disagg import Handoff, pools
from sim.errors import ServesimError
from sim.histogram import LogHistogram
from sim.kvcache import BlockAllocator, kv_capacity_blocks
from sim.policies import make_policy
from sim.replica import Replica, ReplicaStats
from sim.request import PENDING, REJECTED, UNFINISHED, Request
from sim.router import ROUTERS
from sim.scenario import Scenario
from sim.specs import gpu
from sim.workload import Requests, build_requests


def build_cost(scenario: Scenario, gpu_name: str | None = None,
               tp: int | None = None) -> CostModel:
    """The scenario's cost model (roofline, linear, or a loaded profile), for its
    hardware or for a pool's ``gpu_name`` and ``tp`` when given."""
    c = scenario.cost
    gpu_name = gpu_name or scenario.hardware.gpu
    tp = tp or scenario.hardware.tp
    if c.linear is not None:
        return c.linear
    if c.roofline is not None:
        return RooflineCost(scenario.model, gpu(gpu_name), tp, c.roofline)
    from sim.profile import load_profile  # lazy: only profile scenarios pay for it

    assert c.profile is not None
    try:
        prof = load_profile(c.profile, scenario.base_dir)
    except ServesimError as exc:
        raise exc.located(scenario.source, "cost.profile") from None
    mismatch = [
        f"{k} {a!r} != {b!r}"
        for k, a, b in (("model", prof.model, scenario.model),
                        ("tp", prof.tp, tp))
        if a != b
    ]
    if mismatch:
        raise ServesimError(f"profile {c.profile} was measured for another setup: "
                            f"{'; '.join(mismatch)}", scenario.source, "cost.profile")
    return prof


@dataclass
class RunResult:
    """Everything a run produced: per-request arrays (seconds, counts) and per-replica totals.

    ``status`` holds codes from :mod:`sim.request`; ``reason`` names why a request was
    rejected ("" otherwise). Times of events that did not happen are NaN.
    """

    scenario: Scenario
    requests: Requests
    first_sched: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    preemptions: np.ndarray
    replica: np.ndarray
    status: np.ndarray
    reason: np.ndarray
    itl: LogHistogram
    replica_stats: list[ReplicaStats]
    kv_blocks: int
    end_s: float
    step_log: list[tuple[Any, ...]] | None
    # Disaggregated runs: each request's prefill replica (``replica`` is where it decoded);
    # None otherwise. ``kv_blocks`` is then the mean over replicas of unequal pools.
    prefill_replica: np.ndarray | None = None


class Engine:
    """Wires requests, router and replicas into one SimPy environment.

    ``cost`` prices the co-located replicas; a disaggregated scenario's pools build
    their own from their GPU and tp (a linear cost is shared).
    """

    def __init__(self, scenario: Scenario, requests: Requests, cost: CostModel,
                 rng: np.random.Generator, log_steps: bool = False):
        self.scenario = scenario
        self.requests = requests
        self.env = simpy.Environment()
        n = len(requests)
        self.first_sched = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.replica_of = np.full(n, -1, dtype=np.int64)
        self.status = np.full(n, PENDING, dtype=np.int8)
        self.reason = np.full(n, "", dtype=object)
        self.finished_count = 0
        self.step_log: list[tuple[Any, ...]] | None = [] if log_steps else None
        self.replicas: list[Replica] = []
        by_role: dict[str, list[Replica]] = {}
        routers: dict[str, Any] = {}
        model = scenario.model
        for pool in pools(scenario):
            sv = pool.serving
            spec = gpu(pool.gpu)
            blocks = sv.num_kv_blocks or kv_capacity_blocks(
                model, spec, pool.tp, pool.memory_utilization, sv.block_size)
            watermark = int(sv.watermark * blocks)
            pool_cost = cost if pool.role == "both" else build_cost(scenario, pool.gpu, pool.tp)
            # Swapping moves each GPU's KV shard over its own PCIe link to host memory.
            block_bytes = model.kv_bytes_per_token / pool.tp * sv.block_size
            swap_blocks = int(sv.swap_space_gib * 2**30 // block_bytes)
            members = [
                Replica(len(self.replicas) + i, self, make_policy(sv), pool_cost,
                        BlockAllocator(blocks, sv.block_size, watermark), sv, pool.role,
                        block_bytes / spec.host_bw, swap_blocks)
                for i in range(pool.replicas)
            ]
            self.replicas += members
            by_role[pool.role] = members
            routers[pool.role] = ROUTERS[pool.router](rng)
        self.entry = by_role.get("both") or by_role["prefill"]
        self.router = routers.get("both") or routers["prefill"]
        self.decode_pool = by_role.get("decode")
        self.prefill_of: np.ndarray | None = None
        if self.decode_pool is not None:
            handoff = Handoff(self.decode_pool, routers["decode"], scenario.disaggregated.link,
                              len(self.entry), model.kv_bytes_per_token)
            for rep in self.entry:
                rep.handoff = handoff
            self.prefill_of = np.full(n, -1, dtype=np.int64)
        self.kv_blocks = round(sum(r.kv.total for r in self.replicas) / len(self.replicas))
        self._priority = (requests.priority.tolist() if requests.priority is not None
                          else None)
        # Plain lists index faster than numpy arrays in the per-arrival path.
        self._arrival = requests.arrival_s.tolist()
        self._prompt = requests.prompt_tokens.tolist()
        self._output = requests.output_tokens.tolist()
        self._next = 0
        self._max_context = scenario.model.max_context
        self._idle = len(self.entry)  # idle entry replicas (counted by the replicas)
        self._timer_wait: Any = None
        self.env.process(self._arrival_timer())

    def dispatch(self) -> None:
        """Route every arrival with time <= now (called before any state change at now)."""
        now = self.env.now
        arrival = self._arrival
        i = self._next
        n = len(arrival)
        while i < n and arrival[i] <= now:
            self._route(i)
            i += 1
        self._next = i

    def _route(self, i: int) -> None:
        prompt, output = self._prompt[i], self._output[i]
        if prompt + output > self._max_context:
            self._reject(i, "exceeds_context")
            return
        k = self.router.pick(self.entry)
        rep = self.entry[k]
        why = rep.fits_ever(prompt, output)
        if why is None and self.decode_pool is not None:
            why = self.decode_pool[0].fits_ever(prompt, output)
            if why is not None:
                why = f"decode_{why}"
        if why is not None:
            self._reject(i, why)
            return
        self.replica_of[i] = k
        if self.prefill_of is not None:
            self.prefill_of[i] = k
        prio = 0 if self._priority is None else self._priority[i]
        rep.enqueue(Request(i, self._arrival[i], prompt, output, prio))

    def _reject(self, i: int, why: str) -> None:
        self.status[i] = REJECTED
        self.reason[i] = why

    def skip_bound(self) -> float:
        """Time (s) no skipped run may reach: the next undelivered arrival or the horizon."""
        nxt = self._arrival[self._next] if self._next < len(self._arrival) else math.inf
        horizon = self.scenario.horizon_s
        return nxt if horizon is None else min(nxt, horizon)

    def replica_idle(self) -> None:
        """A replica ran out of work: make sure the arrival timer is running."""
        self._idle += 1
        if self._timer_wait is not None and not self._timer_wait.triggered:
            self._timer_wait.succeed()

    def _arrival_timer(self) -> Any:
        env = self.env
        arrival = self._arrival
        n = len(arrival)
        while self._next < n:
            if self._idle == 0:
                # Busy replicas deliver arrivals at their own iteration boundaries.
                self._timer_wait = env.event()
                yield self._timer_wait
                continue
            t = arrival[self._next]
            if t > env.now:
                yield env.timeout(t - env.now)
            self.dispatch()

    def run(self) -> RunResult:
        """Run to completion (or the scenario's horizon) and collect the results."""
        horizon = self.scenario.horizon_s
        self.env.run(until=horizon)
        end = self.env.now
        pending = self.status == PENDING
        self.status[pending] = UNFINISHED
        itl = LogHistogram()
        for rep in self.replicas:
            itl.merge(rep.itl)
        return RunResult(
            scenario=self.scenario, requests=self.requests, first_sched=self.first_sched,
            first_token=self.first_token, finish=self.finish, preemptions=self.preemptions,
            replica=self.replica_of, status=self.status, reason=self.reason, itl=itl,
            replica_stats=[r.stats for r in self.replicas], kv_blocks=self.kv_blocks,
            end_s=float(end), step_log=self.step_log, prefill_replica=self.prefill_of,
        )


def simulate(scenario: Scenario, log_steps: bool = False) -> RunResult:
    """Build the workload and cost model of ``scenario`` and run it."""
    seeds = np.random.SeedSequence(scenario.workload.seed).spawn(2)
    workload_rng, router_rng = (np.random.default_rng(s) for s in seeds)
    requests = build_requests(scenario.workload, scenario.base_dir, workload_rng,
                              scenario.source, scenario.model.max_context)
    cost = build_cost(scenario)
    return Engine(scenario, requests, cost, router_rng, log_steps).run()
