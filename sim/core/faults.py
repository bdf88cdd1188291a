"""Replica faults: outages at given times or at a failure rate, lost requests, retries.

YAML (docs/reliability.md)::

    faults:
      outages:                       # replica R down at at_s for duration_s
        - {replica: 0, at_s: 600, duration_s: 120}
      failures_per_hour: 0.5         # per replica, exponential gaps (seeded) ...
      repair_s: 300                  # ... each repaired after this long
      detection_s: 5                 # until the router stops sending to a failed replica
      on_failure: retry              # retry | fail: what happens to requests it held
      max_retries: 3                 # retries per request before it fails

Faults strike the replicas that receive arrivals: every replica, or the prefill pool
of a disaggregated cluster. When replica R fails at t, every request it holds (waiting,
running; its KV cache is gone) is lost; so is every request the router sends it until
``t + detection_s``, when the router learns of the failure and stops picking R. Lost
requests are placed again through the router at ``t + detection_s`` (``retry``, at most
``max_retries`` times each, then ``failed``) or end ``failed`` at once (``fail``). A
retried request keeps its original arrival time: its TTFT, E2E and queueing delay count
from it, and its first-scheduled and first-token times are those of the attempt that
ran to the end. At ``t + duration_s`` R is repaired, empty, and routable again. An
arrival that finds every replica known to be down is rejected, and a retry that does
fails (reason ``no_replica_up`` both).

Rate-based outages are drawn per replica from its own stream (children of the run's
fault seed), over [0, last arrival) or [0, horizon): adding a replica does not move the
others' failures. Overlapping outages of one replica merge.

A fault at t strikes after every iteration that ends at exactly t has completed (ties
between events go to the replica).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.config.faults import FaultsConfig, outage_plan
from sim.core.request import FAILED, Request
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.core.engine import Engine
    from sim.core.replica import Replica


class Faults:
    """Runs the outages of the engine's entry replicas and keeps the retry queue.

    ``retries[i]`` counts how often request i was placed again; ``lost`` counts losses
    (a request lost twice counts twice); ``log`` lists ``(replica, down_s, up_s)``.
    """

    def __init__(self, engine: Engine, cfg: FaultsConfig, seed: np.random.SeedSequence):
        self.engine = engine
        self.cfg = cfg
        arrivals = engine.requests.arrival_s
        horizon = engine.scenario.horizon_s
        wl = engine.scenario.workload
        # Failures are drawn while the workload sends: until the last arrival, or until
        # closed-loop clients stop (their send times are not known before the run;
        # check_faults makes rate-based faults need duration_s or a horizon), cut at the
        # horizon where it comes first. A horizon the run never reaches changes nothing,
        # so a sweep's point (whose horizon only bounds an overloaded run) draws the same
        # failures as simulate.
        if wl.concurrency is not None:
            end = wl.duration_s if wl.duration_s is not None else math.inf
        else:
            end = float(arrivals[-1]) if len(arrivals) else 0.0
        if horizon is not None:
            end = min(end, horizon)
        n = len(engine.entry)
        try:
            self.plan = outage_plan(cfg, n, end, seed)
        except ServesimError as exc:
            raise exc.located(engine.scenario.source) from None
        self.down_since: list[float | None] = [None] * n
        self.retry_heap: list[tuple[float, int]] = []  # (time_s, request id)
        self.retries = np.zeros(len(arrivals), dtype=np.int64)
        self.lost = 0
        # When a request last failed (s; None: none has): the run's span reaches it, as
        # the work spent on the request did.
        self.failed_s: float | None = None
        self.log: list[tuple[int, float, float]] = []
        for k, ws in enumerate(self.plan):
            if ws:
                engine.env.process(self._outages(k, ws))

    # -- what the engine asks ------------------------------------------------------------
    def pick(self, router: Any, t: float, hashes: Any = None) -> int:
        """The router's choice among the replicas not known to be down at ``t``: index
        into the entry replicas, or -1 when every one is known to be down."""
        entry = self.engine.entry
        det = self.cfg.detection_s
        since = self.down_since
        if all(s is None for s in since):
            return int(router.pick(entry, hashes))
        visible = [k for k, s in enumerate(since) if s is None or t < s + det]
        if not visible:
            return -1
        # Modulo: a round robin's position may exceed a list that just shrank.
        return visible[int(router.pick([entry[k] for k in visible], hashes)) % len(visible)]

    def is_down(self, k: int) -> bool:
        """Whether entry replica ``k`` is down now (known to the router or not)."""
        return self.down_since[k] is not None

    def lose(self, i: int, k: int) -> None:
        """Request ``i`` was lost on entry replica ``k``: schedule its retry at the failure's
        detection, or fail it."""
        eng = self.engine
        self.lost += 1
        eng.first_sched[i] = math.nan
        eng.first_token[i] = math.nan
        eng.replica_of[i] = -1
        if eng.prefill_of is not None:
            eng.prefill_of[i] = -1
        if self.cfg.on_failure == "retry" and self.retries[i] < self.cfg.max_retries:
            self.retries[i] += 1
            since = self.down_since[k]
            assert since is not None
            heapq.heappush(self.retry_heap, (since + self.cfg.detection_s, i))
        else:
            eng.status[i] = FAILED
            eng.reason[i] = "replica_failure"
            self.failed_s = eng.env.now
            eng.ended(i, eng.env.now + eng.response_s)

    def fail_retry(self, i: int) -> None:
        """Request ``i``'s retry found no replica up (it was refused): it failed now."""
        self.engine.status[i] = FAILED
        self.failed_s = self.engine.env.now

    def outcome(self) -> dict[str, Any]:
        """The run result's fault fields: ``retries``, ``outages``, ``failed_s``."""
        return {"retries": self.retries, "outages": tuple(self.log), "failed_s": self.failed_s}

    # -- the outage process ----------------------------------------------------------------
    def _outages(self, k: int, windows: list[tuple[float, float]]) -> Any:
        eng = self.engine
        env = eng.env
        rep: Replica = eng.entry[k]
        for down, up in windows:
            yield env.timeout(_exact_delay(env.now, down))
            # Let iterations ending at exactly this instant complete first: their events
            # were scheduled earlier, so they precede this zero-delay one.
            yield env.timeout(0)
            eng.dispatch()  # arrivals up to now were routed before the fault
            self.down_since[k] = env.now
            self.log.append((k, down, up))
            if eng.timeouts is not None:
                eng.timeouts.forget(rep)
            for r in crash(rep):
                self.lose(r.id, k)
            env.timeout(self.cfg.detection_s).callbacks.append(self._deliver)
            yield env.timeout(_exact_delay(env.now, up))
            eng.dispatch()  # arrivals up to the repair do not see it
            self.down_since[k] = None

    def _deliver(self, _event: Any) -> None:
        self.engine.dispatch()


def crash(rep: Replica) -> list[Request]:
    """A fault on ``rep``: drop every request it holds (waiting, held behind a recv
    interval, running, landing), with their KV, cached prefixes and swapped blocks;
    interrupt an iteration in progress. Returns the lost requests in id order."""
    held: list[Request] = []
    if rep.pipe is not None:
        held = rep.pipe.crash()
    elif rep.group is not None:
        rep.group.flush(rep.running)
    lost = [*rep.running, *held, *rep.waiting, *(x[2] for x in rep.inbox)]
    if rep.gate is not None:
        lost += rep.gate.drain()
    rep.running = []
    rep.waiting = deque()
    rep.inbox = []
    rep.kv.reset(lost)
    rep.outstanding = 0
    rep.swap_s = 0.0
    if not rep.idle:
        assert rep.process is not None  # data-parallel ranks (no process of their own): no faults
        rep.process.interrupt("fault")
    return sorted(lost, key=lambda r: r.id)


def _exact_delay(now: float, target: float) -> float:
    """A delay d (s) with now + d == target exactly, as SimPy adds event times, when
    rounding allows, else target - now; never negative."""
    d = target - now
    # A few ulps either way suffice: the float sum now + d is off by at most one.
    for _ in range(4):
        s = now + d
        if s == target:
            return max(0.0, d)
        d = math.nextafter(d, math.inf if s < target else -math.inf)
    return max(0.0, target - now)

