"""The simulation: requests arrive, a router spreads them over replicas, replicas iterate.

Arrivals are delivered lazily: every event first hands the router all arrivals up to its
own time (:meth:`Engine.dispatch`), before any replica changes state at that time. So an
arrival at exactly an iteration boundary is visible to that boundary's scheduling
decision, whatever order SimPy processes same-time events in, and a separate arrival
timer runs only while some replica is idle and must be woken.

A request arrives at the engine the frontend's request delay after its client sent it
(sim/cost/frontend.py); arrivals are routed in (engine time, id) order. Closed-loop clients
(sim/core/clients.py) send each request when an earlier one ends, and queue their own.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import simpy

from sim.config.disagg import pools
from sim.config.scenario import Scenario
from sim.core.clients import Clients, keep
from sim.core.cluster import build_cluster
from sim.core.faults import Faults
from sim.core.histogram import LogHistogram
from sim.core.prefix import HEADS, block_hashes
from sim.core.progress import Tick, run_clock
from sim.core.request import PENDING, REJECTED, TIMED_OUT, Request
from sim.core.result import Outcomes, RunResult, close_pending
from sim.core.runchecks import check_acceptance_classes, check_hash_counts, within_clock
from sim.cost.frontend import Frontend
from sim.cost.models import CostModel, build_cost
from sim.errors import ServesimError
from sim.policies.admission import Timeouts, TokenBucket
from sim.workload.build import build_requests
from sim.workload.closedloop import supply
from sim.workload.requests import Requests


class Engine(Outcomes):
    """Wires requests, router and replicas into one SimPy environment, and records the
    run's per-request outcomes (:class:`sim.core.result.Outcomes`).

    ``cost`` prices the co-located replicas; a disaggregated scenario's pools build
    their own from their GPU and tp (a linear cost is shared). ``lazy_decodes=False``
    turns off the decode sets, ``skip_events=False`` gives every iteration its own SimPy
    event (:mod:`sim.core.quiet`): same results, slower. A closed loop's ``supply`` draws
    more requests when its clients have sent all of ``requests`` (only ``duration_s``
    bounds them); None: there are no more."""

    def __init__(self, scenario: Scenario, requests: Requests, cost: CostModel,
                 rng: np.random.Generator, log_steps: bool = False,
                 fault_seed: np.random.SeedSequence | None = None, lazy_decodes: bool = True,
                 supply: Callable[[], Requests] | None = None, skip_events: bool = True):
        self.scenario = scenario
        self.lazy_decodes, self.skip_events = lazy_decodes, skip_events  # the class doc
        self.requests = requests
        self.env = simpy.Environment()
        n = len(requests)
        super().__init__(n, scenario.serving.speculative is not None)
        self.replica_of = np.full(n, -1, dtype=np.int64)
        self.reason = np.full(n, "", dtype=object)
        self.step_log: list[tuple[Any, ...]] | None = [] if log_steps else None
        cluster = build_cluster(self, scenario, cost, rng)
        self.replicas, self.entry, self.router = cluster.replicas, cluster.entry, cluster.router
        self.decode_pool, self.memory = cluster.decode_pool, cluster.memory
        self.prefill_of: np.ndarray | None = (
            None if self.decode_pool is None else np.full(n, -1, dtype=np.int64))
        self._hashes = self._prefix_hashes(scenario, requests)
        self._priority = None if requests.priority is None else requests.priority.tolist()
        # Plain lists index faster than numpy arrays in the per-arrival path.
        self._prompt = requests.prompt_tokens.tolist()
        self._output = requests.output_tokens.tolist()
        # The API server in front of the entry pool (sim/cost/frontend.py): the engine sees a
        # request request_delay(prompt) after it was sent, the client every token
        # response_s after the engine emitted it.
        self.frontend: Frontend = self.entry[0].cost.frontend
        self.cost_source = self.entry[0].cost.source
        self.response_s = self.frontend.response_s
        # The frontend's random extra delay: one draw per request, in send order (which
        # is id order), from the workload seed's fourth stream.
        self._jitter_rng = np.random.default_rng(jitter_seed_of(scenario))
        wl = scenario.workload
        self._schedule_arrivals(requests, wl.concurrency is not None)
        self._max_context = scenario.model.max_context
        self._idle = len(self.entry)  # idle entry replicas (counted by the replicas)
        self._timer_wait: Any = None
        if wl.concurrency is None:
            self.env.process(self._arrival_timer())
        self._guards(scenario, fault_seed, supply)
        # Retries, client timeouts or a closed loop: arrivals take the general path.
        self._general = self._guarded or self.clients is not None
        self.progress: Tick | None = None  # told of ended requests as the run goes

    def _guards(self, scenario: Scenario, fault_seed: np.random.SeedSequence | None,
                supply: Callable[[], Requests] | None) -> None:
        """Admission control, client timeouts, faults (docs/reliability.md) and closed-loop
        clients; each None when not configured, so such runs keep the plain dispatch path."""
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
        self.clients: Clients | None = None
        wl = scenario.workload
        if wl.concurrency is not None:
            self.clients = Clients(self, wl.concurrency, wl.think_time_s or 0.0,
                                   wl.duration_s, supply)
            self.tells_ends = True

    def _prefix_hashes(self, scenario: Scenario, requests: Requests
                       ) -> list[tuple[int, ...]] | None:
        """Turn on the entry replicas' prefix caches when the scenario asks; the requests'
        prefix hashes as tuples (None when caching is off, or when they carry none: every
        prompt its own, the caches find nothing to share; the summary says so)."""
        sv = scenario.serving
        if not sv.caches_prefixes:
            return None
        bs = sv.block_size
        drop = sv.speculative is not None and sv.speculative.method in HEADS
        for rep in self.entry:  # retain false: a write-through host tier alone keeps them
            rep.kv.enable_prefix_caching(bs, bool(sv.prefix_caching), drop)
            rep.kv.shares = requests.prefix_hashes is not None
        if requests.prefix_hashes is None:
            return None
        # KV blocks' hashes, as vLLM's: coarser trace hashes split, finer ones chained.
        hash_tokens, combine = requests.prefix_block_tokens or bs, bool(self.entry[0].kv.snapshot)
        check_hash_counts(requests, hash_tokens, scenario.source)
        return [block_hashes(h, hash_tokens, bs, scenario.source, combine)
                for h in requests.prefix_hashes]

    def _schedule_arrivals(self, requests: Requests, closed: bool) -> None:
        """When each request is sent and reaches the engine, and the routing order."""
        # Per request, the client's send time and the engine's arrival time (s); routed in
        # (arrival, id) order: _due[_next:] are the arrival times still to route and
        # _ids their requests (None: in id order). A closed loop queues its own.
        self._send: list[float] = requests.arrival_s.tolist()
        self._arrival = self._send
        self._due = self._arrival
        self._ids: list[int] | None = None
        self._next = 0
        # The earliest time dispatch() has work (s); -inf on the general path: always.
        self.next_due = -math.inf
        n = len(requests)
        if closed:
            self._send = [math.inf] * n
            self._arrival = [math.inf] * n
            self._due = []
        elif self.frontend.delays:
            fe = self.frontend
            # One draw per request in id order: the stream a closed loop draws one by one.
            jitter = self._jitter_rng.exponential(fe.jitter_s, n) if fe.jitter_s > 0 else 0.0
            seen = requests.arrival_s + fe.request_delay(requests.prompt_tokens, jitter)
            order = np.argsort(seen, kind="stable")
            self._arrival = seen.tolist()
            self._due = seen[order].tolist()
            self._ids = order.tolist()

    def jitter(self) -> float:
        """The next request's draw of the frontend's random extra delay (seconds)."""
        j = self.frontend.jitter_s
        return float(self._jitter_rng.exponential(j)) if j > 0 else 0.0

    def dispatch(self, now: float | None = None) -> None:
        """Route every arrival due by ``now`` (s; default: the clock), before any change."""
        if self._general:
            self._dispatch_general()
            return
        now = self.env.now if now is None else now
        due = self._due
        i = self._next
        n = len(due)
        ids = self._ids
        if ids is None:
            while i < n and due[i] <= now:
                self._route(i)
                i += 1
        else:
            while i < n and due[i] <= now:
                self._route(ids[i])
                i += 1
        self._next = i
        self.next_due = due[i] if i < n else math.inf

    def _head(self) -> tuple[float, int]:
        """(arrival s, id) of the next request to route; (inf, -1) when none is known."""
        if self.clients is not None:
            return self.clients.head()
        i = self._next
        if i >= len(self._due):
            return math.inf, -1
        return self._due[i], i if self._ids is None else self._ids[i]

    def _dispatch_general(self) -> None:
        """dispatch() with retries of requests lost to faults, merged with arrivals in
        (time, id) order, client timeouts applied up to each placed request's time, and
        a closed loop's arrivals."""
        now = self.env.now
        retry = self.faults.retry_heap if self.faults is not None else []
        while True:
            a, j = self._head()
            is_retry = bool(retry) and retry[0] < (a, j)
            t = retry[0][0] if is_retry else a
            if t > now:
                break
            if self.timeouts is not None:
                self.timeouts.expire_all(t)
            if is_retry:
                self._route(heapq.heappop(retry)[1], t)
            else:
                if self.clients is not None:
                    self.clients.pop()
                else:
                    self._next += 1
                self._route(j)

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
        elif self.status[i] != PENDING:
            return  # a closed loop's client gave up at its deadline (sim/core/clients.py)
        elif self.timeouts is not None and self._send[i] + self.timeouts.timeout_s <= t:
            self.status[i] = TIMED_OUT  # its client gave up before the retry
            self.reason[i] = "timeout"
            self.ended(i, self.env.now)
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
                    self.faults.fail_retry(i)
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
        if self._max_waiting is not None and rep.queued >= self._max_waiting:
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
            self.timeouts.track(rep, r, self._send[i] + self.timeouts.timeout_s)

    def _reject(self, i: int, why: str) -> None:
        self.status[i] = REJECTED
        self.reason[i] = why
        self.ended(i, self.env.now + self.response_s)

    def ended(self, i: int, client_s: float) -> None:
        """Request ``i`` has ended; its client learns it at ``client_s`` (s): in a closed
        loop that frees the client (sim/core/clients.py)."""
        if self.clients is not None:
            self.clients.ended(i, client_s)

    def replica_busy(self) -> None:
        """An idle entry replica was woken: it delivers arrivals at its own iterations."""
        self._idle -= 1

    def replica_idle(self) -> None:
        """A replica ran out of work: make sure the arrival timer is running."""
        self._idle += 1
        if self._timer_wait is not None and not self._timer_wait.triggered:
            self._timer_wait.succeed()

    def _arrival_timer(self) -> Any:
        env, arrival = self.env, self._due
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
        try:
            run_clock(self.env, horizon, self, self.progress)
        except ServesimError as exc:
            raise exc.located(self.scenario.source) from None
        end = self.env.now
        stats = None
        if self.clients is not None:
            sent, stats, note = self.clients.stats(end, horizon)
            keep(self, sent, note)
        close_pending(self.status, self.reason, self.requests.arrival_s, self.first_sched, end,
                      horizon, None if self.timeouts is None else self.timeouts.timeout_s)
        itl = LogHistogram()
        for rep in self.replicas:
            rep.stats.clip(end)
            if rep.first_chunk is not None and rep.group is not None:
                rep.group.flush(rep.running)  # chunks sent by the end set first tokens
            if rep.prefix is not None:
                rep.stats.prefix_evictions = rep.prefix.evictions
            rep.stats.record_host(rep.kv.host)
            itl.merge(rep.itl)
        first_token, finish = self.first_token, self.finish
        seen = None
        if self._arrival is not self._send:
            # The engine saw requests later than their clients sent them (frontend).
            seen = np.asarray(self._arrival[:len(self.status)], dtype=float)
            seen[~np.isfinite(seen)] = np.nan
        if self.response_s:
            # Clients receive every token response_s after the engine emitted it; gaps
            # between tokens (TPOT, ITL) do not change.
            first_token = first_token + self.response_s
            finish = finish + self.response_s
        return RunResult(
            scenario=self.scenario, requests=self.requests, first_sched=self.first_sched,
            first_token=first_token, finish=finish, preemptions=self.preemptions,
            replica=self.replica_of, status=self.status, reason=self.reason, itl=itl,
            replica_stats=[r.stats for r in self.replicas], verifies=self.verifies,
            end_s=float(end), step_log=self.step_log, prefill_replica=self.prefill_of,
            **({} if self.faults is None else self.faults.outcome()),
            frontend=self.frontend, clients=stats, cost_source=self.cost_source,
            draft_source=next((r.spec.drafter.source for r in self.replicas if r.spec), ""),
            memory=self.memory, seen_s=seen, verify_tokens=self.verify_tokens,
        )


def simulate(scenario: Scenario, log_steps: bool = False, cost: CostModel | None = None,
             progress: Tick | None = None) -> RunResult:
    """Build the workload and cost model of ``scenario`` (or price with ``cost``) and
    run it, telling ``progress`` of requests ended as it goes."""
    # Children in a fixed order (workload, router, faults): adding one leaves the
    # earlier ones, and so every result without faults, unchanged.
    seeds = np.random.SeedSequence(scenario.workload.seed).spawn(3)
    workload_rng, router_rng = (np.random.default_rng(s) for s in seeds[:2])
    requests = build_requests(scenario.workload, scenario.base_dir, workload_rng, scenario.source,
                              scenario.model.max_context, scenario.serving.block_size)
    check_acceptance_classes(scenario, requests.class_names)
    more = supply(scenario.workload, scenario.base_dir, workload_rng, scenario.source)
    if cost is None:
        cost = entry_cost(scenario)
    engine = Engine(scenario, requests, cost, router_rng, log_steps, fault_seed=seeds[2],
                    supply=more)
    engine.progress = progress
    return within_clock(engine.run())


def entry_cost(scenario: Scenario) -> CostModel:
    """The cost model of the pool requests enter: the co-located replicas', or a
    disaggregated scenario's prefill pool's (its GPU and tp, not ``hardware``'s)."""
    entry = pools(scenario)[0]
    return build_cost(scenario, entry.gpu_spec, entry.tp, entry.serving)


def jitter_seed_of(scenario: Scenario) -> np.random.SeedSequence:
    """The frontend jitter's seed: the fourth child of the workload seed (the first three
    are simulate()'s, unchanged by a fourth)."""
    return np.random.SeedSequence(scenario.workload.seed).spawn(4)[3]


def fault_seed_of(scenario: Scenario) -> np.random.SeedSequence:
    """The fault stream's seed: the third child of the workload seed (as simulate())."""
    return np.random.SeedSequence(scenario.workload.seed).spawn(3)[2]
