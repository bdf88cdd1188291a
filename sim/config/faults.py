"""Replica faults as configured: planned outages, a failure rate, what happens to the
requests lost, and the outage windows they resolve to.

The YAML and the semantics are described in :mod:`sim.core.faults`, which runs them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from sim.configtools import MAX_TIME_S, bounded
from sim.errors import ServesimError


@dataclass(frozen=True)
class OutageConfig:
    """One planned outage: replica index (among those receiving arrivals), start and
    length in seconds."""

    replica: int = bounded(ge=0)
    # Times are held below MAX_TIME_S (31 years), where the clock stops resolving a step.
    at_s: float = bounded(ge=0, le=MAX_TIME_S)
    duration_s: float = bounded(gt=0, le=MAX_TIME_S)


@dataclass(frozen=True)
class FaultsConfig:
    """Planned outages, a random failure rate, and what happens to requests lost."""

    outages: tuple[OutageConfig, ...] = ()
    failures_per_hour: float = bounded(0.0, ge=0)  # per replica
    repair_s: float = bounded(300.0, gt=0, le=MAX_TIME_S)
    detection_s: float = bounded(5.0, ge=0, le=MAX_TIME_S)
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


# Random outages a run may draw in all: far beyond any fault study (a replica failing
# every minute for a year is half a million), far below what fills the memory.
MAX_OUTAGES = 1_000_000


def outage_plan(cfg: FaultsConfig, n_replicas: int, end_s: float,
                seed: np.random.SeedSequence) -> list[list[tuple[float, float]]]:
    """Per replica, its outages as sorted, disjoint ``(down_s, up_s)`` windows: the
    planned ones plus, at ``failures_per_hour``, random ones starting before ``end_s``."""
    windows: list[list[tuple[float, float]]] = [[] for _ in range(n_replicas)]
    for o in cfg.outages:
        windows[o.replica].append((o.at_s, o.at_s + o.duration_s))
    if cfg.failures_per_hour > 0:
        mean_up = 3600.0 / cfg.failures_per_hour
        expected = n_replicas * end_s / (mean_up + cfg.repair_s)
        if expected > MAX_OUTAGES:
            # Each outage is a pair of events and a list entry: millions would fill the
            # memory before the run began (a rate in failures per second, say).
            raise ServesimError(
                f"got {cfg.failures_per_hour:g} failures an hour with repair_s "
                f"{cfg.repair_s:g}: {n_replicas} replica(s) over the run's {end_s:.4g} s "
                f"would fail about {expected:.3g} times, more than {MAX_OUTAGES:,}; a "
                "replica fails a few times a day to a few times an hour (failures_per_hour "
                "counts per replica per hour)", where="faults.failures_per_hour")
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
