"""Running sweep points: one point's simulation (whole, or in steady state) and its flat
row of numbers (:func:`row_of`), and many points at once, cached, in a process pool or
on Ray (:func:`run_points`). What a point is: :mod:`sim.study.sweeppoint`."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.scenario import Scenario, from_dict
from sim.configtools import is_number
from sim.errors import ServesimError
from sim.report.outputs import write_atomic
from sim.report.overload import SATURATION_SHARE
from sim.report.shapes import load_json
from sim.report.slospec import METRICS, STATS
from sim.study.steady import point_done, steady_stats
from sim.study.sweeppoint import (
    KEY_COLUMNS,
    METRIC_COLUMNS,
    SATURATION_GROWTH,
    PointKey,
    PointTask,
    resized,
)


def _num(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else float(v)


def queue_growth_s(arrival_s: np.ndarray, queueing_s: np.ndarray) -> float | None:
    """Mean queueing delay (s) of the last quarter of arrivals minus that of the second.

    Requests never scheduled (NaN) are left out; None when a quarter is empty.
    """
    if len(arrival_s) < 8:
        return None
    t0, span = float(arrival_s[0]), float(arrival_s[-1] - arrival_s[0])
    pos = (arrival_s - t0) / span if span > 0 else np.zeros(len(arrival_s))
    q2 = queueing_s[(pos >= 0.25) & (pos < 0.5)]
    q4 = queueing_s[pos >= 0.75]
    q2, q4 = q2[np.isfinite(q2)], q4[np.isfinite(q4)]
    if not q2.size or not q4.size:
        return None
    return float(q4.mean() - q2.mean())


def row_of(summary: dict[str, Any], arrival_span_s: float,
           growth_s: float | None = None) -> dict[str, float | None]:
    """The flat metric row of one run's :func:`sim.report.summary.summarize` output;
    ``arrival_span_s`` is the span of the arrivals the run had, ``growth_s``
    :func:`queue_growth_s` of the run. ``offered_rps`` is the rate the run was offered, as
    simulated: the summary's (requests that arrived - 1) / their span."""
    lat = summary["latency_s"]
    row: dict[str, float | None] = {f"{m}_{s}": _num(lat[m][s]) for m in METRICS for s in STATS}
    tp, rq = summary["throughput"], summary["requests"]
    offered = _num(summary["saturation"]["offered_rps"])
    served = _num(tp["requests_per_s"])
    ratio = served / offered if served is not None and offered else None
    # Left unfinished after the arrivals ended: backlog. When the scenario's horizon fell
    # among the arrivals, requests in service at it are no sign of overload: the run's
    # own verdict (its waiting queue's growth, sim/report/overload.py) judges instead.
    backlog = (summary["saturation"]["saturated"] if rq.get("not_arrived")
               else rq["unfinished"] > 0)
    saturated = backlog or (
        growth_s is not None and growth_s > SATURATION_GROWTH * arrival_span_s)
    # Requests refused at arrival or abandoned by their clients past the share the run's
    # own verdict allows: saturated, as simulate says (their queueing delays, never
    # measured, are not in the quarters' comparison).
    saturated = saturated or summary["saturation"]["refused_fraction"] > SATURATION_SHARE
    if "faults" in summary or (summary.get("workload") or {}).get("paced"):
        # An outage breaks the quarters' comparison: a queue built while a replica was
        # down can leave the second quarter's delays above the last's though the run
        # never caught up; paced clients hold their backlog before the engine sees it.
        # The run's own verdict (its queues' trends) counts too.
        saturated = saturated or bool(summary["saturation"]["saturated"])
    row.update({
        "throughput_rps": served,
        "output_tps": _num(tp["output_tokens_per_s"]),
        "goodput_rps": _num(tp["goodput_requests_per_s"]),
        "slo_attainment": _num(tp["slo_attainment"]),
        "offered_rps": offered,
        "throughput_ratio": ratio,
        "queue_growth_s": growth_s,
        "finished": float(rq["finished"]),
        "rejected": float(rq["rejected"]),
        "unfinished": float(rq["unfinished"]),
        "timed_out": float(rq.get("timed_out", 0)),
        "failed": float(rq.get("failed", 0)),
        "preemptions": float(summary["preemptions"]),
        "busy_fraction": _num(summary["busy_fraction"]),
        "kv_peak_utilization": _num(summary["kv"]["peak_utilization"]),
        "span_s": _num(summary["span_s"]),
        "saturated": 1.0 if saturated else 0.0,
    })
    return row


def _simulated_row(scenario: Scenario) -> tuple[dict[str, float | None],
                                                 dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Simulate ``scenario``: its metric row, per-request latencies, arrived mask and
    arrival times (s)."""
    from sim.core.engine import simulate
    from sim.core.request import NOT_ARRIVED, REJECTED
    from sim.report.metrics import per_request
    from sim.report.summary import summarize

    res = simulate(scenario)
    came = res.status != NOT_ARRIVED  # due after a horizon: not part of the run
    arr = res.requests.arrival_s[came]
    span = float(arr[-1] - arr[0]) if len(arr) > 1 else 0.0
    admitted = res.status[came] != REJECTED
    lat = per_request(res)
    growth = queue_growth_s(arr[admitted], lat["queueing"][came][admitted])
    row = row_of(summarize(res), span, growth)
    # Kept beside the metric columns (in the cache, not the CSVs): a point none of whose
    # requests arrived measured nothing, which its studies refuse to report as a row.
    row["arrived"] = float(came.sum())
    return row, lat, came, res.requests.arrival_s


def run_scenario(scenario: Scenario) -> dict[str, float | None]:
    """Simulate ``scenario`` and return its metric row."""
    return _simulated_row(scenario)[0]


def run_steady(task: PointTask) -> dict[str, float | None]:
    """The point measured in steady state (:mod:`sim.study.steady`): simulated, then
    again with twice the requests while its statistics are not yet precise (nor, in a
    capacity search, its verdict clear), up to the cap. Latency columns of TTFT, TPOT,
    E2E and queueing leave out the warm-up; ``requests_used`` says how many arrived."""
    st = task.steady
    assert st is not None
    bd = Path(task.base_dir) if task.base_dir is not None else None
    raw: dict[str, Any] | None = task.raw
    prev = 0
    while True:
        assert raw is not None
        row, lat, came, arrival_s = _simulated_row(from_dict(raw, task.source, bd))
        m = steady_stats(lat, arrival_s, came, st)
        row.update(m.cols)
        used = int(came.sum())
        rels = list(m.rel.values())
        row.update(requests_used=float(used), discarded_requests=float(m.discarded),
                   rel_halfwidth=(max(r for r in rels if r is not None)
                                  if rels and None not in rels and m.settled else None))
        if point_done(row, m, st) or used >= st.max_requests or used <= prev:
            return row
        prev = used
        raw = resized(raw, min(2.0, st.max_requests / used), task.key.rate, task.grow_horizon)
        if raw is None:
            return row


def run_task(task: PointTask) -> dict[str, float | None]:
    """Worker entry point (top level, so it pickles): validate, simulate, summarise. An
    error names the point it came from, so that a grid's many runs say which one."""
    try:
        if task.steady is not None:
            return run_steady(task)
        bd = Path(task.base_dir) if task.base_dir is not None else None
        return run_scenario(from_dict(task.raw, task.source, bd))
    except ServesimError as exc:
        raise ServesimError(f"{exc.message} ({point_words(task.key, _start_row(task.raw))})",
                            exc.source, exc.where) from None


def point_words(key: PointKey, start_row: int = 0) -> str:
    """A point in words for an error: its policy, shape, rate and seed, and the trace
    row its replication replays from when that is not the first."""
    text = (f"point policy={key.policy} replicas={key.replicas} tp={key.tp} pp={key.pp} "
            f"rate={key.rate:g} seed={key.seed}")
    if start_row:
        text += (f", its replication replaying the trace from row {start_row} "
                 "(workload.trace.start_row)")
    return text


def _start_row(raw: dict[str, Any]) -> int:
    trace = (raw.get("workload") or {}).get("trace")
    return int(trace.get("start_row") or 0) if isinstance(trace, dict) else 0


class PointCache:
    """Finished rows on disk, one JSON file per point hash; None disables caching."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ServesimError(f"cannot create cache folder: {exc.strerror}",
                                    str(folder)) from None

    def get(self, task: PointTask) -> dict[str, float | None] | None:
        """The cached row of ``task``, or None: also for an unreadable or partial file,
        and for a row that is not one :meth:`put` writes (a value that is not a finite
        number or null, a negative count), which the point then runs again rather than
        carry into the sweep's tables."""
        if self.folder is None:
            return None
        path = self.folder / f"{task.digest}.json"
        try:
            data = load_json(path.read_text())  # NaN, Infinity: not what put writes
        except (OSError, ValueError):
            return None
        row = data.get("row") if isinstance(data, dict) else None
        if not (isinstance(row, dict) and set(METRIC_COLUMNS) <= set(row)):
            return None
        for key, v in row.items():
            if v is not None and not (is_number(v) and math.isfinite(v)
                                      and (v >= 0 or key not in COUNTS)):
                return None
        return row

    def put(self, task: PointTask, row: dict[str, float | None]) -> None:
        """Store ``row`` atomically, with the point's key for whoever reads the folder."""
        if self.folder is None:
            return
        blob = {"key": dict(zip(KEY_COLUMNS, task.key.values(), strict=True)), "row": row}
        write_atomic(self.folder / f"{task.digest}.json",
                     (json.dumps(blob, sort_keys=True, allow_nan=False) + "\n").encode())


# Cached columns that count (requests, preemptions): never below zero.
COUNTS = ("arrived", "finished", "rejected", "unfinished", "timed_out", "failed",
          "preemptions")


@dataclass
class RunStats:
    """How many points came from the cache and how many were simulated now."""

    cached: int = 0
    computed: int = 0


def check_memory(tasks: list[PointTask], parallel: int) -> None:
    """Refuse points of which ``parallel`` copies of the largest (by its memory estimate,
    :mod:`sim.core.budget`) would not fit in the memory this machine has free."""
    from sim.core.budget import available_bytes, check, estimate

    free = available_bytes()
    if free is None or not tasks:
        return
    scenarios = [from_dict(t.raw, t.source, Path(t.base_dir) if t.base_dir else None)
                 for t in tasks]
    biggest = max(range(len(tasks)), key=lambda i: estimate(scenarios[i]).peak_bytes)
    k = tasks[biggest].key
    try:
        check(scenarios[biggest], False, free // max(1, parallel))
    except ServesimError as exc:
        raise ServesimError(f"point policy={k.policy} replicas={k.replicas} tp={k.tp} "
                            f"rate={k.rate:g}, {parallel} at once: {exc.message}", exc.source,
                            exc.where) from None


def run_points(tasks: list[PointTask], cache: PointCache, backend: str = "local",
               workers: int | None = None, address: str | None = None,
               progress: bool = False, desc: str = "points",
               stats: RunStats | None = None,
               force: bool = False) -> dict[str, dict[str, float | None]]:
    """Rows of every task by digest: cached ones read, the rest simulated and cached.

    Points to simulate on this machine are first checked against its free memory
    (:func:`check_memory`; ``force`` skips that). Each row is cached the moment it
    arrives, so an interrupt (KeyboardInterrupt propagates) loses only the points in
    flight. A progress bar on stderr shows points done out of the total and the time left.
    """
    from tqdm import tqdm

    from sim.study.parallel import run_all

    rows: dict[str, dict[str, float | None]] = {}
    todo: list[PointTask] = []
    seen: set[str] = set()
    for t in tasks:
        if t.digest in seen:  # the same scenario asked for twice runs once
            continue
        seen.add(t.digest)
        hit = cache.get(t)
        if hit is not None:
            rows[t.digest] = hit
        else:
            todo.append(t)
    if stats is not None:
        stats.cached += len(rows)
    if backend != "ray" and not force:
        from sim.study.parallel import default_workers

        check_memory(todo, min(len(todo), workers or default_workers()))
    bar = tqdm(total=len(rows) + len(todo), initial=len(rows), desc=desc, unit="pt",
               disable=not progress, leave=False, dynamic_ncols=True)
    try:
        for i, row in run_all(run_task, todo, backend, workers, address):
            cache.put(todo[i], row)
            rows[todo[i].digest] = row
            if stats is not None:
                stats.computed += 1
            bar.update(1)
    finally:
        bar.close()
    return rows
