"""One point of a sweep: a scenario at one (policy, replicas, tp, rate, seed), run and cached.

A point is the user's scenario with a few keys overridden through
:func:`sim.config.scenario.apply_overrides`, so :func:`sim.config.scenario.from_dict` validates it
exactly as it validates a file. Its result is a flat *row* of numbers (seconds,
requests/s, tokens/s, counts). Rows are cached as JSON files named by a hash of the
point's whole scenario, so a sweep or capacity search run again, after an interrupt or
with a wider grid, never recomputes a point it already has.

Rates far beyond capacity would let queues grow for a long simulated time; unless the
scenario sets ``horizon_s`` a point is cut at ``horizon_factor`` times its expected
arrival span (plus 60 s), and a point that left requests unfinished, or whose queueing
delay kept growing through its arrivals, is marked ``saturated``. Requests due after a
horizon (``not_arrived``) are no part of the point: its offered rate, counts and verdict
are of the requests that arrived, and when the horizon fell among the arrivals the run's
queue-growth verdict, not the requests still in service at it, says whether it kept up.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.config.scenario import Scenario, apply_overrides, from_dict
from sim.config.vllmflags import flag_name
from sim.configtools import MAX_TIME_S, parse_yaml, yaml_error
from sim.errors import ServesimError
from sim.files import read_text
from sim.report.outputs import write_atomic
from sim.report.slospec import METRICS, STATS
from sim.study.steady import Steady, point_done, steady_stats

KEY_COLUMNS = ("policy", "replicas", "tp", "pp", "rate", "seed")
LATENCY_COLUMNS = tuple(f"{m}_{s}" for m in METRICS for s in STATS)
OTHER_COLUMNS = ("throughput_rps", "output_tps", "goodput_rps", "slo_attainment", "offered_rps",
                 "throughput_ratio", "queue_growth_s", "finished", "rejected", "unfinished",
                 "preemptions", "busy_fraction", "kv_peak_utilization", "span_s", "saturated")
METRIC_COLUMNS = LATENCY_COLUMNS + OTHER_COLUMNS
# A point is saturated when its mean queueing delay grew, from the second to the last
# quarter of the arrivals, by more than this fraction of the arrival span: a queue that
# keeps growing at that pace serves under ~96% of what arrives. (A throughput ratio
# would be biased by the drain of the last long requests in short runs.)
SATURATION_GROWTH = 0.02


@dataclass(frozen=True)
class PointKey:
    """Where a point sits in the grid; ``rate`` is the whole cluster's requests/s."""

    policy: str
    replicas: int
    tp: int
    rate: float
    seed: int
    pp: int = 1  # pipeline stages per replica

    def values(self) -> tuple[str, int, int, int, float, int]:
        """The key in :data:`KEY_COLUMNS` order."""
        return (self.policy, self.replicas, self.tp, self.pp, self.rate, self.seed)

    @classmethod
    def of(cls, row: dict[str, Any]) -> PointKey:
        """The key of a row holding the :data:`KEY_COLUMNS`."""
        return cls(**{c: row[c] for c in KEY_COLUMNS})


@dataclass(frozen=True)
class PointTask:
    """All a worker needs to run one point: the raw scenario mapping and where it came from."""

    key: PointKey
    raw: dict[str, Any]
    source: str
    base_dir: str | None
    digest: str
    steady: Steady | None = None  # measured in steady state (sim/study/steady.py)
    grow_horizon: float | None = None  # horizon factor, when the horizon follows the size


def show_progress(quiet: bool) -> bool:
    """Whether a study draws its progress bar: not with ``--quiet``, and only on a
    terminal (as ``simulate`` does), so a log file gets no carriage-return lines."""
    return not quiet and sys.stderr.isatty()


def read_raw(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The scenario file at ``path`` as a mapping, with ``--set`` overrides applied.

    It is validated once here (through :func:`from_dict`), so a broken file fails before
    any point is scheduled.
    """
    p = Path(path)
    try:
        raw = parse_yaml(read_text(p, "scenario"))
    except yaml.YAMLError as exc:
        raise yaml_error(exc, str(p)) from None
    if not isinstance(raw, dict):
        raise ServesimError("expected a mapping at the top level", str(p))
    if overrides:
        try:
            raw = apply_overrides(raw, overrides)
        except ServesimError as exc:
            raise exc.located(str(p)) from None
    from_dict(raw, str(p), p.parent.resolve())
    return raw


def _expected_span_s(raw: dict[str, Any], rate: float) -> float | None:
    """Seconds over which the point's requests arrive, when knowable without loading a trace."""
    w = raw.get("workload") or {}
    spans = []
    if w.get("duration_s") is not None:
        spans.append(float(w["duration_s"]))
    if w.get("num_requests") is not None:
        spans.append(float(w["num_requests"]) / rate)
    return min(spans) if spans else None


def refuse_closed_loop(raw: dict[str, Any], source: str, flag: str) -> None:
    """Sweeps and capacity searches vary the arrival rate: a closed loop
    (``workload.concurrency``) has none, its load is set by its clients; nor do classes
    with arrival processes of their own where no shared one is given."""
    w = raw.get("workload")
    if isinstance(w, dict) and w.get("concurrency") is not None:
        raise ServesimError(f"{flag} varies the arrival rate, but this workload is closed loop "
                            f"({w['concurrency']} clients send as their requests end); vary "
                            "workload.concurrency with --set instead, one run each",
                            source, "workload.concurrency")
    if not isinstance(w, dict):
        return
    if w.get("stages") is not None:
        # Each point runs the whole workload at the one rate it varies; a staged load's
        # rates are the stages' own, and no single rate stands for them.
        raise ServesimError(f"{flag} runs each point at one arrival rate, but this workload "
                            "is staged (workload.stages gives each stage its own rate); "
                            "simulate the staged load as it is (servesim simulate), or drop "
                            "the stages and bound the workload by time to study one rate at "
                            "a time (--set workload.stages=null --set "
                            "workload.duration_s=SECONDS)", source, "workload.stages")
    classes = w.get("classes")
    own = [name for name, c in classes.items() if isinstance(c, dict) and c.get("arrivals")] \
        if isinstance(classes, dict) else []
    if own and not w.get("arrivals"):
        # There is no one rate to vary: each class's process has its own.
        raise ServesimError(f"{flag} varies workload.arrivals.rate, but class {own[0]!r} "
                            "has an arrival process of its own and there is no shared one; "
                            "give the classes weights under one workload.arrivals, or vary "
                            "each class's rate with --set, one run each", source,
                            f"workload.classes.{own[0]}.arrivals")


def point_sets(base: dict[str, Any], key: PointKey, horizon_factor: float | None,
               start_row: int = 0) -> list[str]:
    """The ``--set`` overrides that make the base scenario this point: its policy, shape,
    rate and seed, a trace replayed from row ``start_row`` (a replication's own stretch)
    when it is not 0, and the horizon that cuts it."""
    refuse_closed_loop(base, "<scenario>", "a rate point")
    w = base.get("workload") or {}
    sets = [f"serving.policy={key.policy}", f"cluster.replicas={key.replicas}",
            f"hardware.tp={key.tp}", f"workload.seed={key.seed}"]
    where, pp = _pp_key(base)
    if key.pp != pp:
        # Set only when it differs, so points of scenarios without stages keep their digest.
        sets.append(f"{where}={key.pp}")
    if isinstance(w, dict) and w.get("trace") is not None:
        # target_rate rescales the trace; time_scale must then stay at its neutral 1.0.
        sets += [f"workload.trace.target_rate={key.rate!r}", "workload.trace.time_scale=1.0"]
        if start_row:
            sets.append(f"workload.trace.start_row={start_row}")
    else:
        sets.append(f"workload.arrivals.rate={key.rate!r}")
    if base.get("horizon_s") is None and horizon_factor is not None:
        span = _expected_span_s(apply_overrides(base, sets), key.rate)
        if span is not None:
            sets.append(f"horizon_s={_horizon(horizon_factor, span)!r}")
    return sets


def _horizon(horizon_factor: float, span: float) -> float:
    """Where a point of arrival span ``span`` (s) is cut: a little slack beyond the
    arrivals lets a point near capacity drain its queue; never past the range the
    simulated clock resolves, which a cut beyond would only let a saturated run reach."""
    return min(float(f"{horizon_factor * span + 60.0:.6g}"), MAX_TIME_S)


def _pp_key(base: dict[str, Any]) -> tuple[str, int]:
    """Where the base scenario sets its pipeline stages (``hardware.pp``, or the
    ``vllm`` block's ``pipeline_parallel_size`` flag) and the value; ``hardware.pp`` and
    1 when it sets none."""
    flags = base.get("vllm")
    if isinstance(flags, dict):
        for flag, value in flags.items():
            if flag_name(flag) == "pipeline_parallel_size":
                return f"vllm.{flag}", int(value)
    hw = base.get("hardware")
    return "hardware.pp", int(hw.get("pp", 1)) if isinstance(hw, dict) else 1


def point_raw(base: dict[str, Any], key: PointKey, horizon_factor: float | None,
              start_row: int = 0) -> dict[str, Any]:
    """The base scenario with this point's policy, shape, rate and seed set (and its
    trace's start row: :func:`point_sets`)."""
    return apply_overrides(base, point_sets(base, key, horizon_factor, start_row))


def _set_horizon(raw: dict[str, Any], rate: float, horizon_factor: float) -> None:
    span = _expected_span_s(raw, rate)
    if span is not None:
        raw["horizon_s"] = _horizon(horizon_factor, span)


def resized(raw: dict[str, Any], factor: float, rate: float,
            horizon_factor: float | None) -> dict[str, Any] | None:
    """``raw`` with ``factor`` times its requests (``num_requests`` and ``duration_s``
    scaled) and, when the horizon follows the size, its horizon recomputed; None when
    nothing bounds the workload's size (a whole trace), so it cannot grow."""
    w = dict(raw.get("workload") or {})
    if w.get("num_requests") is None and w.get("duration_s") is None:
        return None
    if w.get("num_requests") is not None:
        w["num_requests"] = max(int(w["num_requests"]) + 1,
                                int(math.ceil(int(w["num_requests"]) * factor)))
    if w.get("duration_s") is not None:
        w["duration_s"] = float(f"{float(w['duration_s']) * factor:.9g}")
    out = {**raw, "workload": w}
    if horizon_factor is not None:
        _set_horizon(out, rate, horizon_factor)
    return out


# Bumped when what a cached point holds stops matching what the code would compute
# for reasons no scenario key shows (2: measured costs, fitted roofline defaults; 3:
# requests due after the horizon left out of every figure, a trace's target_rate applied
# to the window simulated, offered_rps counting refused arrivals).
CACHE_SCHEMA = 3


def cost_fingerprint(sc: Scenario) -> str:
    """What a scenario's prices resolve to, beyond its own keys: the bytes of the profile
    it loads, or the full parameters (defaults included) of a roofline or linear cost,
    and the GPU's figures — so regenerated profiles or refitted defaults are not served
    from a cache filled before them."""
    from sim.cost.measured import find
    from sim.cost.profilefile import resolve
    c = sc.cost
    if c.measured is not None or c.profile is not None:
        ref = (find(sc.model, sc.hardware.gpu_name, sc.hardware.tp, c.measured.framework,
                    sc.hardware.ep, sc.hardware.dp)
               if c.measured is not None else str(c.profile))
        try:
            prices = hashlib.sha256(resolve(ref, sc.base_dir).read_bytes()).hexdigest()
        except ServesimError:
            prices = ref  # a disaggregated scenario's pools may not match hardware.tp
    else:
        prices = repr(c.roofline if c.roofline is not None else c.linear)
    return f"{prices}|{sc.hardware.gpu_spec!r}"


def digest(raw: dict[str, Any], base_dir: str | None, prices: str = "") -> str:
    """A stable hash of a point's scenario and what its prices resolve to
    (:func:`cost_fingerprint`): the cache key (hex, 20 characters)."""
    from sim import __version__

    blob = json.dumps({"raw": raw, "base_dir": base_dir, "servesim": __version__,
                       "cache": CACHE_SCHEMA, "prices": prices},
                      sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cost_source(base: dict[str, Any], source: str, base_dir: Path | None) -> str:
    """Where the base scenario's step prices come from, in one phrase (what every point
    of a sweep or capacity search over policies, replicas and tp shares: the same GPU,
    model and cost model)."""
    from sim.core.engine import entry_cost

    return entry_cost(from_dict(base, source, base_dir)).source


def describe_base(base: dict[str, Any], source: str, base_dir: Path | None, prices: str,
                  overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """What a study's base scenario simulates (:func:`sim.report.setup.describe_scenario`:
    model, GPU, tp, serving limits, seed, the ``--set`` ``overrides`` already applied to
    ``base``...), its prices from ``prices``; the study's own grid varies some of it."""
    from sim.report.setup import describe_scenario

    return describe_scenario(from_dict(base, source, base_dir, tuple(overrides)), prices)


def make_task(base: dict[str, Any], source: str, base_dir: Path | None, key: PointKey,
              horizon_factor: float | None = 4.0, steady: Steady | None = None,
              start_row: int = 0) -> PointTask:
    """A runnable, hashed point; invalid values (e.g. an unknown policy) fail here, early.
    With ``steady`` the point is measured in steady state, which its hash covers."""
    raw = point_raw(base, key, horizon_factor, start_row)
    bd = str(base_dir) if base_dir is not None else None
    sc = from_dict(raw, source, base_dir)
    prices = cost_fingerprint(sc)
    if steady is None:
        return PointTask(key, raw, source, bd, digest(raw, bd, prices))
    grow = horizon_factor if base.get("horizon_s") is None else None
    return PointTask(key, raw, source, bd, digest(raw, bd, f"{prices}|{steady!r}"), steady,
                     grow)


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
    if "faults" in summary:
        # An outage breaks the quarters' comparison: a queue built while a replica was
        # down can leave the second quarter's delays above the last's though the run
        # never caught up. The run's own verdict (its waiting queue's trend) counts too.
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
        """The cached row of ``task``, or None (also for an unreadable, partial file)."""
        if self.folder is None:
            return None
        path = self.folder / f"{task.digest}.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        row = data.get("row") if isinstance(data, dict) else None
        return row if isinstance(row, dict) and set(METRIC_COLUMNS) <= set(row) else None

    def put(self, task: PointTask, row: dict[str, float | None]) -> None:
        """Store ``row`` atomically, with the point's key for whoever reads the folder."""
        if self.folder is None:
            return
        blob = {"key": dict(zip(KEY_COLUMNS, task.key.values(), strict=True)), "row": row}
        write_atomic(self.folder / f"{task.digest}.json",
                     (json.dumps(blob, sort_keys=True, allow_nan=False) + "\n").encode())


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
