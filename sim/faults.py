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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from sim.configtools import bounded
from sim.errors import ServesimError
from sim.request import FAILED

if TYPE_CHECKING:
    from sim.engine import Engine, RunResult
    from sim.replica import Replica


@dataclass(frozen=True)
class OutageConfig:
    """One planned outage: replica index (among those receiving arrivals), start and
    length in seconds."""

    replica: int = bounded(ge=0)
    at_s: float = bounded(ge=0)
    duration_s: float = bounded(gt=0)


@dataclass(frozen=True)
class FaultsConfig:
    """Planned outages, a random failure rate, and what happens to requests lost."""

    outages: tuple[OutageConfig, ...] = ()
    failures_per_hour: float = bounded(0.0, ge=0)  # per replica
    repair_s: float = bounded(300.0, gt=0)
    detection_s: float = bounded(5.0, ge=0)
    on_failure: Literal["retry", "fail"] = "retry"
    max_retries: int = bounded(3, ge=0)

    @property
    def active(self) -> bool:
        """Whether any fault can happen."""
        return bool(self.outages) or self.failures_per_hour > 0


def check_faults(cfg: FaultsConfig, n_replicas: int, closed_end_s: float | None = None,
                 closed: bool = False) -> None:
    """Load-time check that every planned outage names an existing replica, and that a
    closed loop (``closed``) with random failures ends by ``closed_end_s`` (its
    horizon or duration, s): its send times are not known before the run."""
    if closed and cfg.failures_per_hour > 0 and closed_end_s is None:
        raise ServesimError("random failures are drawn up to the last arrival, which a "
                            "closed loop does not know in advance; set horizon_s or "
                            "workload.duration_s", where="faults.failures_per_hour")
    for k, o in enumerate(cfg.outages):
        if o.replica >= n_replicas:
            raise ServesimError(f"got replica {o.replica}, the cluster has {n_replicas} "
                                f"replica(s) receiving arrivals (0..{n_replicas - 1})",
                                where=f"faults.outages[{k}].replica")


def outage_plan(cfg: FaultsConfig, n_replicas: int, end_s: float,
                seed: np.random.SeedSequence) -> list[list[tuple[float, float]]]:
    """Per replica, its outages as sorted, disjoint ``(down_s, up_s)`` windows: the
    planned ones plus, at ``failures_per_hour``, random ones starting before ``end_s``."""
    windows: list[list[tuple[float, float]]] = [[] for _ in range(n_replicas)]
    for o in cfg.outages:
        windows[o.replica].append((o.at_s, o.at_s + o.duration_s))
    if cfg.failures_per_hour > 0:
        mean_up = 3600.0 / cfg.failures_per_hour
        for k, child in enumerate(seed.spawn(n_replicas)):
            rng = np.random.default_rng(child)
            t = 0.0
            while True:
                t += float(rng.exponential(mean_up))
                if not t < end_s:
                    break
                windows[k].append((t, t + cfg.repair_s))
                t += cfg.repair_s
    merged: list[list[tuple[float, float]]] = []
    for ws in windows:
        out: list[tuple[float, float]] = []
        for down, up in sorted(ws):
            if out and down <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], up))
            else:
                out.append((down, up))
        merged.append(out)
    return merged


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
        if horizon is not None:
            end = horizon
        elif wl.concurrency is not None:
            # Closed-loop send times are not known before the run: until the clients stop
            # (check_faults makes rate-based faults need one of the two).
            end = wl.duration_s if wl.duration_s is not None else math.inf
        else:
            end = float(arrivals[-1]) if len(arrivals) else 0.0
        n = len(engine.entry)
        self.plan = outage_plan(cfg, n, end, seed)
        self.down_since: list[float | None] = [None] * n
        self.retry_heap: list[tuple[float, int]] = []  # (time_s, request id)
        self.retries = np.zeros(len(arrivals), dtype=np.int64)
        self.lost = 0
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
            eng.ended(i, eng.env.now + eng.response_s)

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
            for r in rep.crash():
                self.lose(r.id, k)
            env.timeout(self.cfg.detection_s).callbacks.append(self._deliver)
            yield env.timeout(_exact_delay(env.now, up))
            eng.dispatch()  # arrivals up to the repair do not see it
            self.down_since[k] = None

    def _deliver(self, _event: Any) -> None:
        self.engine.dispatch()


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


def fault_summary(res: RunResult, lat: dict[str, np.ndarray]) -> dict[str, Any]:
    """The ``faults`` section of the summary (present only when faults are configured):
    outages, downtime (s), requests lost (losses, counting each attempt), retried and
    failed, and TTFT/E2E distributions (s) of affected requests (placed again at least
    once) next to the unaffected ones: the latency impact of the faults."""
    from sim.metrics import distribution

    if not res.scenario.faults.active:
        return {}
    status = res.status
    retries = res.retries if res.retries is not None else np.zeros(len(status), np.int64)
    failed = status == FAILED
    hit = retries > 0
    return {"faults": {
        "outages": len(res.outages),
        "downtime_s": float(sum(up - down for _, down, up in res.outages)),
        # Each loss either scheduled a retry or failed the request on the spot.
        "requests_lost": int(retries.sum()) + int((res.reason[failed] == "replica_failure").sum()),
        "requests_retried": int(hit.sum()),
        "requests_failed": int(failed.sum()),
        "latency_s": {
            group: {k: distribution(lat[k][mask]) for k in ("ttft", "e2e")}
            for group, mask in (("affected", hit), ("unaffected", ~hit))
        },
    }}
