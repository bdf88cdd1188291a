"""How many independent replications of a trace workload a sweep or capacity point can
run (``--seeds``).

Seeds of a generated workload draw new arrivals and lengths. A trace is the same
requests whatever the seed, so replication *r* replays its own stretch instead: it
starts at row *r* x (rows // R) of the transformed trace (``workload.trace.start_row``),
R being the number of replications that fit without overlapping. When only one fits,
there is one replication and no interval; a replication whose stretch starts past a
declared class's last row is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class TracePlan:
    """Independent replications of a trace workload: ``replications`` stretches of
    ``segment`` rows each, out of ``rows``; ``note`` says why there are fewer than asked."""

    replications: int
    segment: int
    rows: int
    note: str = ""

    def start_row(self, r: int) -> int:
        """First row replayed by replication ``r`` (0-based)."""
        return r * self.segment


def trace_plan(raw: dict[str, Any], source: str, base_dir: Path | None, asked: int,
               window: int | None) -> TracePlan | None:
    """How many of ``asked`` replications of a trace workload fit without overlapping
    when each replays ``window`` requests (None: the whole trace, as a workload bounded
    by neither ``num_requests`` nor ``duration_s`` does); None for a generated workload."""
    from sim.config.scenario import from_dict
    from sim.workload.build import build_requests

    w = raw.get("workload") or {}
    if not isinstance(w, dict) or w.get("trace") is None:
        return None
    # The whole transformed trace: no window, no bound, no rescaling (row counts only).
    trace = {k: v for k, v in w["trace"].items() if k not in ("target_rate", "start_row")}
    whole = {**raw, "workload": {**{k: v for k, v in w.items()
                                    if k not in ("num_requests", "duration_s", "stages")},
                                 "trace": trace}}
    sc = from_dict(whole, source, base_dir)
    reqs = build_requests(sc.workload, sc.base_dir, np.random.default_rng(sc.workload.seed),
                          sc.source)
    rows = len(reqs)
    window = rows if window is None else window
    fit = max(1, rows // max(1, window))
    r = min(asked, fit)
    note = ""
    if r < asked:
        note = (f"the trace holds {rows} requests, room for {fit} window(s) of {window} that "
                f"do not overlap: {r} independent replication(s), not {asked}")
        if r == 1:
            note += "; no interval (one replication says nothing about its spread)"
    plan = TracePlan(r, rows // r, rows, note)
    check_classes(plan, list(w.get("classes") or {}), reqs.klass, reqs.class_names, asked,
                  source)
    return plan


def check_classes(plan: TracePlan, declared: list[str], klass: np.ndarray | None,
                  names: tuple[str, ...], asked: int, source: str | None = None) -> None:
    """Refuse replications of which one starts past a declared class's last row: the
    trace has the class, but that replication's stretch (and all after it) would not.
    The error names the replication, its start row, and how many replications keep
    every declared class in reach."""
    from sim.errors import ServesimError

    if klass is None or plan.replications < 2:
        return
    for name in declared:
        rows_of = (np.flatnonzero(klass == names.index(name)) if name in names
                   else np.zeros(0, dtype=np.int64))
        if not rows_of.size:
            continue  # the trace lacks it altogether: the scenario's own check says so
        last = int(rows_of[-1])
        i = last // plan.segment + 1  # the first replication starting after it (0-based)
        if i >= plan.replications:
            continue
        keep = max(k for k in range(1, plan.replications + 1)
                   if (k - 1) * (plan.rows // k) <= last)
        raise ServesimError(
            f"--seeds {asked}: replication {i + 1} of {plan.replications} replays the trace "
            f"from row {plan.start_row(i)} (workload.trace.start_row; each replication its "
            f"own stretch of {plan.segment} rows), but the trace's last row of class "
            f"{name!r} is row {last}, so that replication has none of it; --seeds {keep} "
            "keeps the class within every replication's reach, or spread its rows through "
            "the trace", source, f"workload.classes.{name}")
