"""What one simulation run produced: :class:`RunResult`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.frontend import NO_FRONTEND, Frontend

if TYPE_CHECKING:
    from sim.clients import ClientStats
    from sim.histogram import LogHistogram
    from sim.replicastats import ReplicaStats
    from sim.scenario import Scenario
    from sim.workload import Requests


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
    # The API server's latency outside the steps (zero: none), and a closed loop's
    # clients (None: open loop).
    frontend: Frontend = NO_FRONTEND
    clients: ClientStats | None = None
    # Where the step prices came from, in one phrase (sim.cost.CostModel.source).
    cost_source: str = ""
    # Each pool's GPU memory terms and KV blocks per replica, by role ("both", or
    # "prefill" and "decode"): :meth:`sim.kvcache.MemoryBudget.summary`'s mapping.
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    # When each request reached the engine (s): its send time plus the frontend's request
    # delay; NaN for one never delivered. None: the engine saw requests as they were sent.
    seen_s: np.ndarray | None = None
