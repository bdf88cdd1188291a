"""One point of a sweep: a scenario at one (policy, replicas, tp, rate, seed), run and cached.

A point is the user's scenario with a few keys overridden through
:func:`sim.config.overrides.apply_overrides`, so :func:`sim.config.scenario.from_dict` validates it
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
Running points, their rows and that verdict are :mod:`sim.study.pointrun`'s.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from sim.config.flagaxes import axis_key, policy_setting
from sim.config.overrides import apply_overrides
from sim.config.scenario import Scenario, from_dict, input_files
from sim.configtools import MAX_TIME_S
from sim.errors import ServesimError
from sim.files import read_text
from sim.report.slospec import METRICS, STATS
from sim.study.steady import Steady
from sim.yamlload import parse_yaml, yaml_error

KEY_COLUMNS = ("policy", "replicas", "tp", "pp", "rate", "seed")
LATENCY_COLUMNS = tuple(f"{m}_{s}" for m in METRICS for s in STATS)
OTHER_COLUMNS = ("throughput_rps", "output_tps", "goodput_rps", "slo_attainment", "offered_rps",
                 "throughput_ratio", "queue_growth_s", "finished", "rejected", "unfinished",
                 "timed_out", "failed", "preemptions", "busy_fraction", "kv_peak_utilization",
                 "span_s", "saturated")
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


def refuse_closed_loop(raw: dict[str, Any], source: str, flag: str,
                       paced: bool = True) -> None:
    """Sweeps and capacity searches vary the arrival rate: a closed loop
    (``workload.concurrency``) has none, its load is set by its clients; nor do classes
    with arrival processes of their own where no shared one is given. Paced clients
    (``workload.arrivals`` beside ``concurrency``) have one, which a sweep may vary
    (``paced``); a capacity search may not, as their cap on requests in flight is the
    whole cluster's and more replicas cannot carry more than the clients send."""
    w = raw.get("workload")
    if isinstance(w, dict) and w.get("concurrency") is not None:
        n = w["concurrency"]
        if w.get("arrivals") is None:
            raise ServesimError(f"{flag} varies the arrival rate, but this workload is closed "
                                f"loop ({n} clients send as their requests end); vary "
                                "workload.concurrency with --set instead, one run each, or "
                                "pace the clients with workload.arrivals to vary its rate",
                                source, "workload.concurrency")
        if not paced:
            raise ServesimError(f"{flag} sizes a cluster for an offered rate, but these "
                                f"paced clients cap the requests in flight at {n} for the "
                                "whole cluster, so more replicas cannot carry more than "
                                "they send; remove workload.concurrency (an open loop at the "
                                "same arrivals) to size a cluster", source,
                                "workload.concurrency")
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
    sets = [*policy_setting(base, key.policy), f"{axis_key(base, 'replicas')}={key.replicas}",
            f"{axis_key(base, 'tp')}={key.tp}", f"workload.seed={key.seed}"]
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
    """Where the base scenario sets its pipeline stages (:func:`axis_key`) and the value
    given there; 1 where it gives none (a config file's is set again whenever a point
    differs from 1)."""
    where = axis_key(base, "pp")
    node: Any = base
    for part in where.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return where, int(node) if isinstance(node, int) and not isinstance(node, bool) else 1


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
# to the window simulated, offered_rps counting refused arrivals; 4: async scheduling's
# one-iteration wait for a request reaching a busy replica; 5: KV use counting only the
# blocks requests hold, and a vllm section's prefix caching on by default; 6: KV capacity
# sized by a vLLM release's memory profile, sim/cost/vllmmemory.py; 7: a sliding-window
# model's window pages taken per request from the one pool, not set aside beforehand;
# 8: a resumed request's recomputed prompt cached as soon as it is computed, and its
# prefix queries counted apart; 9: prefix caching on by default under chunked, so a
# preempted request takes back the blocks the cache kept; 10: a finished request's other
# blocks kept in the prefix cache's LRU order, as vLLM's free queue keeps them).
CACHE_SCHEMA = 10


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


@lru_cache(maxsize=32)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    # Keyed on size and mtime too, so a file edited in place is read again.
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def inputs_fingerprint(sc: Scenario) -> str:
    """What the files a scenario reads beside itself hold (:func:`input_files`: its trace,
    lengths files, a profile given as a path) and the model an ``hf_config`` resolves to,
    so a cache filled before one of them was edited in place is not served."""
    parts = [repr(sc.model)]
    for path in input_files(sc)[1:]:  # [0] is the scenario, whose keys the hash covers
        st = path.stat()
        parts.append(f"{path}:{_file_sha256(str(path), st.st_size, st.st_mtime_ns)}")
    return "|".join(parts)


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


def shape_memory(base: dict[str, Any], source: str, base_dir: Path | None,
                 key: PointKey) -> dict[str, Any]:
    """Each pool's memory terms and KV blocks, by role, of the point ``key`` (a
    :meth:`sim.cost.memorybudget.MemoryBudget.summary`, as a run's summary gives them: the
    memory-derived blocks, or ``num_gpu_blocks``). A replica's memory depends on its
    policy, tp and pp, not on the rate, the seed or how many replicas there are."""
    from sim.config.disagg import pool_memory, pools
    from sim.core.cluster import pool_kv

    sc = from_dict(point_raw(base, key, None), source, base_dir)
    return {pool.role: pool_kv(pool.serving, pool_memory(sc.model, pool))[1]
            for pool in pools(sc)}


def make_task(base: dict[str, Any], source: str, base_dir: Path | None, key: PointKey,
              horizon_factor: float | None = 4.0, steady: Steady | None = None,
              start_row: int = 0) -> PointTask:
    """A runnable, hashed point; invalid values (e.g. an unknown policy) fail here, early.
    With ``steady`` the point is measured in steady state, which its hash covers."""
    raw = point_raw(base, key, horizon_factor, start_row)
    bd = str(base_dir) if base_dir is not None else None
    sc = from_dict(raw, source, base_dir)
    prices = f"{cost_fingerprint(sc)}|{inputs_fingerprint(sc)}"
    if steady is None:
        return PointTask(key, raw, source, bd, digest(raw, bd, prices))
    grow = horizon_factor if base.get("horizon_s") is None else None
    return PointTask(key, raw, source, bd, digest(raw, bd, f"{prices}|{steady!r}"), steady,
                     grow)
