"""The simulation: requests arrive, a router spreads them over replicas, replicas iterate.

Arrivals are delivered lazily: every event first hands the router all arrivals up to
its own time (:meth:`Engine.dispatch`), before any replica changes state at that time.
So an arrival at exactly an iteration boundary is visible to that boundary's
scheduling decision, whatever order SimPy processes same-time events in, and a
separate arrival timer runs only while some replica is idle and must be woken.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from sim.admission import Timeouts, TokenBucket
from sim.cost import CostModel, RooflineCost
from sim.disagg import Handoff, pool_memory, pools, transfer_bytes_per_token, transfer_link
from sim.errors import ServesimError
from sim.faults import Faults
from sim.histogram import LogHistogram
from sim.kvcache import BlockAllocator
from sim.policies import make_policy
from sim.prefix import PrefixCache
from sim.replica import Replica
from sim.replicastats import ReplicaStats
from sim.request import FAILED, PENDING, REJECTED, TIMED_OUT, UNFINISHED, Request
from sim.router import ROUTERS
from sim.scenario import Scenario
from sim.specs import gpu, shard
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
    from sim.profilefile import load_profile  # lazy: only profile scenarios pay for it

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
    end_s: float
    step_log: list[tuple[Any, ...]] | None
    # Disaggregated runs: each request's prefill replica (``replica`` is where it decoded);
    # None otherwise.
    prefill_replica: np.ndarray | None = None
    # With faults: times each request was placed again, and (replica, down_s, up_s) of
    # every outage (sim/faults.py).
    retries: np.ndarray | None = None
    outages: tuple[tuple[int, float, float], ...] = ()
    # Each pool's GPU memory terms and KV blocks per replica, by role ("both", or
    # "prefill" and "decode"): :meth:`sim.kvcache.MemoryBudget.summary`'s mapping.
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)


class Engine:
    """Wires requests, router and replicas into one SimPy environment.

    ``cost`` prices the co-located replicas; a disaggregated scenario's pools build
    their own from their GPU and tp (a linear cost is shared). ``lazy_decodes=False``
    turns off :class:`sim.decodeset.DecodeSet` bookkeeping (same results, slower).
    """

    def __init__(self, scenario: Scenario, requests: Requests, cost: CostModel,
                 rng: np.random.Generator, log_steps: bool = False,
                 fault_seed: np.random.SeedSequence | None = None, lazy_decodes: bool = True):
        self.scenario = scenario
        # False: every policy decodes request by request (tests compare the two ways).
        self.lazy_decodes = lazy_decodes
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
        self.memory: dict[str, dict[str, Any]] = {}
        the_pools = pools(scenario)
        for pool in the_pools:
            sv = pool.serving
            spec = gpu(pool.gpu)
            budget = pool_memory(model, pool)
            # vLLM's --num-gpu-blocks-override replaces the memory-derived count.
            blocks = sv.num_gpu_blocks or budget.fitted().blocks
            self.memory[pool.role] = budget.summary(sv.num_gpu_blocks)
            watermark = int(sv.watermark * blocks)
            pool_cost = cost if pool.role == "both" else build_cost(scenario, pool.gpu, pool.tp)
            # Swapping moves each GPU's KV shard over its own PCIe link to host memory.
            block_bytes = shard(model, pool.tp).kv_bytes_per_token * sv.block_size
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
            prefill, decode = the_pools
            handoff = Handoff(self.decode_pool, routers["decode"],
                              transfer_link(scenario, prefill, decode), len(self.entry),
                              transfer_bytes_per_token(model, prefill, decode))
            for rep in self.entry:
                rep.handoff = handoff
            self.prefill_of = np.full(n, -1, dtype=np.int64)
        self._hashes: list[tuple[int, ...]] | None = None
        if scenario.serving.prefix_caching and requests.prefix_hashes is None:
            raise ServesimError(
                "prefix_caching needs requests with prefix hashes: a trace with hash_ids "
                "(mooncake) or a prefix_hash_ids column, or workload.shared_prefix",
                scenario.source, "serving.prefix_caching")
        if scenario.serving.prefix_caching and requests.prefix_hashes is not None:
            hash_tokens = requests.prefix_block_tokens or scenario.serving.block_size
            if hash_tokens % scenario.serving.block_size:
                raise ServesimError(
                    f"prefix blocks of {hash_tokens} tokens are not a multiple of block_size "
                    f"{scenario.serving.block_size}", scenario.source, "serving.block_size")
            self._hashes = [tuple(h.tolist()) for h in requests.prefix_hashes]
            for rep in self.entry:
                rep.prefix = PrefixCache(rep.kv, hash_tokens)
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
        # Admission control, client timeouts and faults (docs/reliability.md); None when
        # not configured, so such runs keep the plain dispatch path.
        adm = scenario.admission
        self._bucket = TokenBucket(adm.rate_limit) if adm.rate_limit is not None else None
        self._max_waiting = adm.max_waiting
        self.timeouts = Timeouts(self, adm.timeout_s) if adm.timeout_s is not None else None
        self.faults: Faults | None = None
        if scenario.faults.active:
            if fault_seed is None:
                fault_seed = fault_seed_of(scenario)
            self.faults = Faults(self, scenario.faults, fault_seed)
        self._guarded = self.timeouts is not None or self.faults is not None

    def dispatch(self) -> None:
        """Route every arrival with time <= now (called before any state change at now)."""
        if self._guarded:
            self._dispatch_guarded()
            return
        now = self.env.now
        arrival = self._arrival
        i = self._next
        n = len(arrival)
        while i < n and arrival[i] <= now:
            self._route(i)
            i += 1
        self._next = i

    def _dispatch_guarded(self) -> None:
        """dispatch() with retries of requests lost to faults, merged with arrivals in
        (time, id) order, and client timeouts applied up to each placed request's time."""
        now = self.env.now
        arrival = self._arrival
        n = len(arrival)
        retry = self.faults.retry_heap if self.faults is not None else []
        while True:
            a = arrival[self._next] if self._next < n else math.inf
            is_retry = bool(retry) and retry[0] < (a, self._next)
            t = retry[0][0] if is_retry else a
            if t > now:
                break
            if self.timeouts is not None:
                self.timeouts.expire_all(t)
            if is_retry:
                self._route(heapq.heappop(retry)[1], t)
            else:
                self._next += 1
                self._route(self._next - 1)

    def _route(self, i: int, retry_s: float | None = None) -> None:
        """Place request ``i`` on a replica, or end it: refused at the front door (rate
        limit, length), by the replica (capacity, full queue), or lost to a fault. A retry
        (at ``retry_s``) skips the front door: the gateway itself places it again."""
        prompt, output = self._prompt[i], self._output[i]
        t = self._arrival[i] if retry_s is None else retry_s
        if retry_s is None:
            if self._bucket is not None and not self._bucket.take(t):
                self._reject(i, "rate_limited")
                return
            if prompt + output > self._max_context:
                self._reject(i, "exceeds_context")
                return
        elif self.timeouts is not None and self._arrival[i] + self.timeouts.timeout_s <= t:
            self.status[i] = TIMED_OUT  # its client gave up before the retry
            self.reason[i] = "timeout"
            return
        hashes = None if self._hashes is None else self._hashes[i]
        if self.faults is None:
            k = self.router.pick(self.entry, hashes)
        else:
            k = self.faults.pick(self.router, t, hashes)
            if k < 0:
                # Nowhere to go: a new arrival is refused; a retry (accepted once) fails.
                self._reject(i, "no_replica_up")
                if retry_s is not None:
                    self.status[i] = FAILED
                return
        rep = self.entry[k]
        why = rep.fits_ever(prompt, output)
        if why is None and self.decode_pool is not None:
            why = self.decode_pool[0].fits_ever(prompt, output)
            if why is not None:
                why = f"decode_{why}"
        if why is not None:
            self._reject(i, why)
            return
        if self._max_waiting is not None and len(rep.waiting) >= self._max_waiting:
            self._reject(i, "queue_full")
            return
        if self.faults is not None and self.faults.is_down(k):
            self.faults.lose(i, k)  # sent to a failed replica the router still trusts
            return
        self.replica_of[i] = k
        if self.prefill_of is not None:
            self.prefill_of[i] = k
        prio = 0 if self._priority is None else self._priority[i]
        r = Request(i, self._arrival[i], prompt, output, prio)
        if rep.prefix is not None:
            r.hashes = hashes
        rep.enqueue(r)
        if self.timeouts is not None:
            self.timeouts.track(rep, r)

    def _reject(self, i: int, why: str) -> None:
        self.status[i] = REJECTED
        self.reason[i] = why

    def skip_bound(self, replica: Replica | None = None) -> float:
        """Time (s) no skipped run of ``replica`` may reach: the next undelivered arrival,
        the horizon, the next fault or retry, and the next client timeout on it."""
        nxt = self._arrival[self._next] if self._next < len(self._arrival) else math.inf
        horizon = self.scenario.horizon_s
        bound = nxt if horizon is None else min(nxt, horizon)
        if self._guarded:
            if self.faults is not None:
                bound = min(bound, self.faults.next_change_s())
            if self.timeouts is not None and replica is not None:
                bound = min(bound, self.timeouts.next_deadline(replica))
        return bound

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
        if self.timeouts is not None:
            # Still waiting unscheduled at the end with its deadline passed: abandoned.
            late = pending & np.isnan(self.first_sched) & (
                self.requests.arrival_s + self.timeouts.timeout_s <= end)
            self.status[late] = TIMED_OUT
            self.reason[late] = "timeout"
            pending &= ~late
        self.status[pending] = UNFINISHED
        for rep in self.replicas:
            if rep.prefix is not None:
                rep.stats.prefix_evictions = rep.prefix.evictions
        itl = LogHistogram()
        for rep in self.replicas:
            itl.merge(rep.itl)
        return RunResult(
            scenario=self.scenario, requests=self.requests, first_sched=self.first_sched,
            first_token=self.first_token, finish=self.finish, preemptions=self.preemptions,
            replica=self.replica_of, status=self.status, reason=self.reason, itl=itl,
            replica_stats=[r.stats for r in self.replicas],
            end_s=float(end), step_log=self.step_log, prefill_replica=self.prefill_of,
            retries=None if self.faults is None else self.faults.retries,
            outages=() if self.faults is None else tuple(self.faults.log),
            memory=self.memory,
        )


def simulate(scenario: Scenario, log_steps: bool = False) -> RunResult:
    """Build the workload and cost model of ``scenario`` and run it."""
    # Children in a fixed order (workload, router, faults): adding one leaves the
    # earlier ones, and so every result without faults, unchanged.
    seeds = np.random.SeedSequence(scenario.workload.seed).spawn(3)
    workload_rng, router_rng = (np.random.default_rng(s) for s in seeds[:2])
    requests = build_requests(scenario.workload, scenario.base_dir, workload_rng,
                              scenario.source, scenario.model.max_context)
    cost = build_cost(scenario)
    return Engine(scenario, requests, cost, router_rng, log_steps, fault_seed=seeds[2]).run()


def fault_seed_of(scenario: Scenario) -> np.random.SeedSequence:
    """The fault stream's seed: the third child of the workload seed (as simulate())."""
    return np.random.SeedSequence(scenario.workload.seed).spawn(3)[2]
