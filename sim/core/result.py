"""What one simulation run produced (:class:`RunResult`), what it records per request
while it runs (:class:`Outcomes`), and the one way a request finishes
(:func:`finish_requests`).

:class:`Outcomes` holds the per-request result arrays (indexed by request id) that the
simulator's engine (:class:`sim.core.engine.Engine` is one) and the replay loop
(:mod:`calibrate.replay`) fill in. :func:`finish_requests` is the only code that
finishes requests: the replica after an iteration, its DecodeSet's members, and the
replay loop all call it, so a finish always frees the same KV and records the same
fields. Imports no SimPy: ``calibrate.replay`` uses it on a device machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.core.kvmanager import KVCacheManager
from sim.core.request import FINISHED, NOT_ARRIVED, PENDING, TIMED_OUT, UNFINISHED, Request
from sim.cost.frontend import NO_FRONTEND, Frontend

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.core.clients import ClientStats
    from sim.core.histogram import LogHistogram
    from sim.core.replicastats import ReplicaStats
    from sim.workload.requests import Requests


@dataclass
class RunResult:
    """Everything a run produced: per-request arrays (seconds, counts) and per-replica totals.

    ``status`` holds codes from :mod:`sim.core.request`; ``reason`` names why a request was
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
    # every outage (sim/core/faults.py).
    retries: np.ndarray | None = None
    outages: tuple[tuple[int, float, float], ...] = ()
    # When a request last failed (s; None: none did): a run's span reaches it.
    failed_s: float | None = None
    # The API server's latency outside the steps (zero: none), and a closed loop's
    # clients (None: open loop).
    frontend: Frontend = NO_FRONTEND
    clients: ClientStats | None = None
    # Where the step prices came from, in one phrase (sim.cost.models.CostModel.source).
    cost_source: str = ""
    # With speculative decoding, where the drafting price came from, in one phrase
    # (sim.cost.drafter.Drafter.source of the decoding replicas); "" without.
    draft_source: str = ""
    # Each pool's GPU memory terms and KV blocks per replica, by role ("both", or
    # "prefill" and "decode"): :meth:`sim.cost.memorybudget.MemoryBudget.summary`'s mapping.
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    # When each request reached the engine (s): its send time plus the frontend's request
    # delay; NaN for one never delivered. None: the engine saw requests as they were sent.
    seen_s: np.ndarray | None = None
    # With speculative decoding, each finished request's verifies and the output tokens
    # they emitted (counts of its last placement; 0 for one that did not finish). None
    # without speculative decoding.
    verifies: np.ndarray | None = None
    verify_tokens: np.ndarray | None = None


class Outcomes:
    """Per-request results of ``n`` requests: ``first_sched``, ``first_token`` and
    ``finish`` are times in seconds (NaN until they happen), ``preemptions`` counts,
    ``status`` one of :mod:`sim.core.request`'s codes. ``response_s`` (s) is how long
    after the engine's last token its client has the answer (0 here; the engine's
    frontend sets it). ``tells_ends``: whether :meth:`ended` must hear of every finish
    (a closed loop's clients). With ``speculative``, ``verifies`` and ``verify_tokens``
    count each finished request's verifies and the tokens they emitted (None without)."""

    def __init__(self, n: int, speculative: bool = False) -> None:
        self.first_sched = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.status = np.full(n, PENDING, dtype=np.int8)
        self.response_s = 0.0
        self.tells_ends = False
        self.verifies = np.zeros(n, dtype=np.int64) if speculative else None
        self.verify_tokens = np.zeros(n, dtype=np.int64) if speculative else None

    def scheduled(self, r: Request, now: float) -> None:
        """``r`` was admitted at ``now`` (s); the first admission is its scheduling time."""
        if not r.scheduled:
            r.scheduled = True
            self.first_sched[r.id] = now

    def preempted(self, r: Request) -> None:
        """Count one preemption of ``r``."""
        self.preemptions[r.id] += 1

    def ended(self, i: int, client_s: float) -> None:
        """Request ``i`` ended; its client learns it at ``client_s`` (s). Nothing here;
        the engine's closed loop frees the client."""


def finish_requests(done: Sequence[Request], now: float, kv: KVCacheManager,
                    out: Outcomes) -> None:
    """Finish ``done`` (each has emitted its last token at ``now``, s): free its KV and
    its prefix-cache references, record its finish time and status (with speculative
    decoding, its verifies and their tokens too), and tell its client. The caller drops
    them from its running list."""
    finish = out.finish
    status = out.status
    for r in done:
        kv.free(r)
        finish[r.id] = now
        status[r.id] = FINISHED
    verifies, tokens = out.verifies, out.verify_tokens
    if verifies is not None and tokens is not None:
        for r in done:
            verifies[r.id] = r.verifies
            tokens[r.id] = r.verified
    if out.tells_ends:
        client_s = now + out.response_s
        for r in done:
            out.ended(r.id, client_s)


def close_pending(status: np.ndarray, reason: np.ndarray, sent_s: np.ndarray,
                  first_sched: np.ndarray, end_s: float, horizon_s: float | None,
                  timeout_s: float | None) -> None:
    """Give each request still pending when the run ended at ``end_s`` (s) its final
    status, in place. With a horizon, one sent (``sent_s``) at or after it never arrived:
    NOT_ARRIVED, outside every rate and verdict. One still waiting unscheduled with its
    client's deadline (``timeout_s``) passed was abandoned: TIMED_OUT, reason "timeout".
    The rest arrived and were not done: UNFINISHED, the backlog the horizon cut."""
    pending = status == PENDING
    if horizon_s is not None:
        later = pending & (sent_s >= end_s)
        status[later] = NOT_ARRIVED
        pending &= ~later
    if timeout_s is not None:
        late = pending & np.isnan(first_sched) & (sent_s + timeout_s <= end_s)
        status[late] = TIMED_OUT
        reason[late] = "timeout"
        pending &= ~late
    status[pending] = UNFINISHED
