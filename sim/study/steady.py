"""Steady-state statistics of a sweep or capacity point and its zero-load floor (how many
independent replications a trace allows: :mod:`sim.study.traceplan`).

**Warm-up and drain.** A point starts from an empty cluster: its first requests see
short queues and half-empty batches; its last ones see the arrivals stop and their
batches drain. Each end of the run loses the ``warmup`` fraction of its arrivals (10%
by default) or, when more, the arrivals within one request lifetime (the p99 of E2E) of
the first or last arrival; a run that keeps less than half its arrivals is not yet
settled. The cut applies to the latency statistics of TTFT, TPOT, E2E and queueing
delay; throughput, counts and the saturation verdict stay whole-run figures, as does
ITL (a histogram of every token gap, with no per-request record).

**Precision.** The kept requests are cut, in arrival order, into :data:`BATCHES`
contiguous batches; a statistic's 95% half-width is Student's t (9 degrees of freedom)
times the standard deviation of its per-batch values over the square root of their
number (the batch-means method: batches of consecutive requests are close to
independent once each is much longer than a queue's memory). The point estimate is the
statistic over all kept requests. A settled point whose named statistics are all within
``precision`` (relative half-width), or, in a capacity search, whose verdict is clear
(an interval wholly above its target, or every interval wholly below its own), is done;
otherwise it runs again with twice the requests (``num_requests`` and ``duration_s``
doubled), up to ``max_requests``. A saturated point is done at once: it fails whatever
its percentiles.

**Zero-load floor.** The point's first requests (at most :data:`FLOOR_REQUESTS`) are
run one at a time, each alone on one replica, without the idle wake-up price a profile
may add: since a step costs no less with more work in it, a request's latency under
load is at least its latency alone, so these statistics bound what any load can reach.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.report.slospec import SLO

BATCHES = 10  # batch-means batches per point
# Requests a point keeps (and, for a saturation verdict, sees arrive) before its figures
# end it: batches of 20 or more consecutive requests, as the batch-means method needs (a
# 50-request point at 99% load had passed with 4 a batch; 8 requests were called
# saturated). A smaller workload runs again with twice the requests until it has them.
MIN_KEPT = 20 * BATCHES
# Student's t 97.5% quantiles by degrees of freedom (no scipy import in each worker).
T975 = {4: 2.7764451, 9: 2.2621572, 19: 2.0930241}
# Latencies with a per-request record, so with a warm-up and batch means.
STEADY_METRICS = ("ttft", "tpot", "e2e", "queueing")
STEADY_COLUMNS = ("requests_used", "discarded_requests", "rel_halfwidth")
FLOOR_REQUESTS = 500  # requests run alone for the zero-load floor
FLOOR_GAP_S = 1e6  # seconds between them: longer than any one request takes alone
FLOOR_METRICS = ("ttft", "tpot", "e2e")  # queueing is zero alone; ITL has no record
MAX_REQUESTS = 64000  # the most a point grows to under --precision, unless --max-requests
# Fields of sim.workload.requests.Requests with one entry per request (besides arrivals).
PER_REQUEST = ("prompt_tokens", "output_tokens", "priority", "klass", "prefix_hashes")


@dataclass(frozen=True)
class Steady:
    """How a point is measured in steady state.

    ``warmup``: fraction of arrivals left out of the latency statistics at each end of
    the run (0 to below 0.5).
    ``precision``: relative 95% half-width each statistic in ``columns`` must reach.
    ``max_requests``: cap on the requests a point grows to (it starts at the scenario's).
    ``columns``: statistics held to the precision (e.g. ``ttft_p99``; those of ITL or a
    ``max`` have no batch means and are left out). ``targets``: (column, limit in
    seconds) pairs of a capacity search, whose verdict may end a point early.
    """

    warmup: float = 0.1
    precision: float = 0.1
    max_requests: int = MAX_REQUESTS
    columns: tuple[str, ...] = ("ttft_p99", "tpot_p99")
    targets: tuple[tuple[str, float], ...] = ()


def steady_columns(slos: list[SLO]) -> tuple[str, ...]:
    """The SLO statistics that batch means can bound (per-request metrics, not ``max``);
    TTFT and TPOT p99 when no SLO names one."""
    cols = tuple(dict.fromkeys(s.column for s in slos
                               if s.metric in STEADY_METRICS and s.stat != "max"))
    return cols or ("ttft_p99", "tpot_p99")


def _stat(values: np.ndarray, stat: str) -> float | None:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return None
    if stat == "mean":
        return float(v.mean())
    if stat == "max":
        return float(v.max())
    return float(np.percentile(v, float(stat[1:])))


def half_width(values: np.ndarray, stat: str, batches: int = BATCHES) -> float | None:
    """95% batch-means half-width (seconds) of ``stat`` over ``values`` in arrival order;
    None when a batch has no finite value or there are fewer values than batches."""
    if len(values) < batches:
        return None
    per = [_stat(b, stat) for b in np.array_split(values, batches)]
    if any(p is None for p in per):
        return None
    a = np.asarray(per, dtype=float)
    return float(T975[batches - 1] * a.std(ddof=1) / math.sqrt(batches))


@dataclass(frozen=True)
class Measured:
    """A run's steady-state figures: latency columns over the kept requests (seconds),
    each named column's relative 95% half-width (None: not measurable), the requests
    left out at the two ends, whether enough was kept to call it steady, and how many
    requests arrived."""

    cols: dict[str, float | None]
    rel: dict[str, float | None]
    discarded: int
    settled: bool
    arrived: int


def steady_stats(lat: dict[str, np.ndarray], arrival_s: np.ndarray, arrived: np.ndarray,
                 steady: Steady) -> Measured:
    """Latency statistics of the requests between the warm-up and the drain.

    ``lat`` holds per-request latencies and ``arrival_s`` arrival times (s), in arrival
    order; ``arrived`` marks the requests that arrived before any horizon (the others
    take no part). Each end loses ``warmup`` of the arrivals, or, when more, those
    within one request lifetime (the p99 of E2E) of the first or last arrival: the
    batch fills for about one lifetime and drains for another. The run is settled when
    at least half its arrivals are kept, and no fewer than :data:`MIN_KEPT`; when fewer
    than :data:`BATCHES` would be (lives
    as long as the run: an overloaded point), the figures are those of the fraction
    rule alone."""
    idx = np.flatnonzero(arrived)
    n = len(idx)
    frac = int(math.floor(steady.warmup * n))
    lo, hi = frac, n - frac
    if n and steady.warmup > 0:
        t = arrival_s[idx]
        e2e = lat["e2e"][idx]
        done = e2e[np.isfinite(e2e)]
        life = float(np.percentile(done, 99)) if done.size else 0.0
        lo = max(lo, int(np.searchsorted(t, t[0] + life, side="left")))
        hi = min(hi, int(np.searchsorted(t, t[-1] - life, side="right")))
    settled = n > 0 and 2 * (hi - lo) >= n and hi - lo >= MIN_KEPT
    if hi - lo < BATCHES:
        # Lives as long as the run (an overloaded point): report what the fraction
        # rule keeps rather than nothing; the run is not settled either way.
        lo, hi = frac, n - frac
    keep = idx[lo:max(lo, hi)]
    cols: dict[str, float | None] = {}
    for m in STEADY_METRICS:
        v = lat[m][keep]
        for stat in ("p50", "p90", "p95", "p99", "mean", "max"):
            cols[f"{m}_{stat}"] = _stat(v, stat)
    rel: dict[str, float | None] = {}
    for c in steady.columns:
        m, _, stat = c.rpartition("_")
        h, val = half_width(lat[m][keep], stat), cols.get(c)
        rel[c] = h / abs(val) if h is not None and val else None
    return Measured(cols, rel, n - len(keep), settled, n)


def point_done(row: dict[str, Any], m: Measured, steady: Steady) -> bool:
    """Whether a point needs no more requests: saturated (on at least :data:`MIN_KEPT`
    arrivals); or settled, and every named statistic within the precision or (with
    targets) a clear verdict: one target's interval wholly above it, or every target's
    wholly below it."""
    if steady.precision <= 0 or row.get("saturated") and m.arrived >= MIN_KEPT:
        return True
    if not m.settled:
        return False
    rel = m.rel
    precise = all(r is not None and r <= steady.precision for r in rel.values())
    if precise or not steady.targets:
        return precise
    # Per target: True clearly met, False clearly missed, None unclear.
    verdicts: list[bool | None] = []
    for col, limit in steady.targets:
        r, v = rel.get(col), row.get(col)
        if r is None or v is None:
            verdicts.append(None)
        else:
            verdicts.append(True if v * (1 + r) < limit else False if v * (1 - r) > limit
                            else None)
    # One target clearly missed fails the point whatever the others do.
    return False in verdicts or all(verdicts)


def floor_stats(raw: dict[str, Any], source: str, base_dir: Path | None
                ) -> dict[str, float | None]:
    """Zero-load statistics (seconds) of a point's scenario: ``<metric>_<stat>`` for TTFT,
    TPOT and E2E, each with ``<column>_low``, a one-sided 95% lower bound (order
    statistics for percentiles, Student's t for the mean, p99's for the max)."""
    from sim.config.scenario import from_dict
    from sim.core.engine import Engine, entry_cost
    from sim.report.metrics import per_request
    from sim.workload.build import build_requests

    sc = from_dict(raw, source, base_dir)
    sc = dataclasses.replace(sc, horizon_s=None)
    seeds = np.random.SeedSequence(sc.workload.seed).spawn(3)
    rng, router_rng = (np.random.default_rng(s) for s in seeds[:2])
    reqs = build_requests(sc.workload, sc.base_dir, rng, sc.source, sc.model.max_context,
                          sc.serving.block_size)
    n = min(FLOOR_REQUESTS, len(reqs))
    cut: dict[str, Any] = {k: None if v is None else v[:n] for k in PER_REQUEST
                           for v in [getattr(reqs, k)]}
    alone = dataclasses.replace(reqs, arrival_s=np.arange(n, dtype=np.float64) * FLOOR_GAP_S,
                                stage_windows=None, **cut)
    res = Engine(sc, alone, _NoWake(entry_cost(sc)), router_rng, fault_seed=seeds[2]).run()
    lat = per_request(res)
    out: dict[str, float | None] = {}
    for m in FLOOR_METRICS:
        v = np.sort(lat[m][np.isfinite(lat[m])])
        for stat in ("p50", "p90", "p95", "p99", "mean", "max"):
            out[f"{m}_{stat}"] = _stat(v, stat)
            out[f"{m}_{stat}_low"] = _lower_bound(v, stat)
    return out


def _lower_bound(v: np.ndarray, stat: str) -> float | None:
    """One-sided 95% lower bound of ``stat`` from the sorted sample ``v``."""
    from scipy.stats import binom, t

    if v.size == 0:
        return None
    if stat == "mean":
        if v.size < 2:
            return float(v[0])
        return float(v.mean() - t.ppf(0.95, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    q = 0.99 if stat == "max" else float(stat[1:]) / 100
    # The k-th smallest value lies below the q-quantile with probability >= 95%.
    k = int(binom.ppf(0.05, v.size, q))
    return float(v[k - 1]) if k >= 1 else None


class _NoWake:
    """A cost model without its idle wake-up price (attribute access passes through)."""

    def __init__(self, cost: Any) -> None:
        self._cost = cost

    def __getattr__(self, name: str) -> Any:
        if name == "wake_time":
            raise AttributeError(name)
        return getattr(self._cost, name)


def floor_violations(floor: dict[str, float | None], slos: list[SLO]) -> list[str]:
    """One phrase per target that the zero-load floor rules out (its 95% lower bound is
    above the limit), e.g. ``ttft_p99 at zero load is 38 ms; the target is 0.1 ms``."""
    out = []
    for s in slos:
        low = floor.get(f"{s.column}_low")
        if low is not None and low > s.limit_s:
            est = floor[s.column]
            assert est is not None
            out.append(f"{s.column} at zero load is {_ms(est)}; the target is {_ms(s.limit_s)}")
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms" if seconds < 10 else f"{seconds:.3g} s"


def add_steady_args(p: Any, precision: float, warmup: float) -> None:
    """``--warmup``, ``--precision`` and ``--max-requests`` on an argparse parser, with
    the command's defaults (0 and 0 measure each point once, over all its requests)."""
    p.add_argument("--warmup", type=float, default=warmup, metavar="FRAC",
                   help=f"fraction of each point's arrivals left out of its latency "
                        f"statistics at the start (warm-up) and again at the end (drain) "
                        f"(default {warmup:g})")
    p.add_argument("--precision", type=float, default=precision, metavar="REL",
                   help="relative 95%% half-width (batch means) the SLO statistics must "
                        "reach; a point doubles its requests until they do, up to "
                        f"--max-requests (default {precision:g}; 0: one run per point)")
    p.add_argument("--max-requests", type=int, default=None, metavar="N",
                   help=f"most requests a point grows to under --precision (default "
                        f"{MAX_REQUESTS})")


def steady_from_args(a: Any, slos: list[SLO], targets: bool) -> Steady | None:
    """The :class:`Steady` the flags ask for (None when both ``--warmup`` and
    ``--precision`` are 0: each point is one run over all its requests, as before);
    ``targets``: the SLOs' verdicts may end a point early (capacity)."""
    from sim.errors import ServesimError

    if not (math.isfinite(a.warmup) and 0 <= a.warmup < 0.5):
        raise ServesimError(f"--warmup {a.warmup}: must be a fraction from 0 to below 0.5")
    if not (math.isfinite(a.precision) and 0 <= a.precision < 1):
        raise ServesimError(f"--precision {a.precision}: must be from 0 (off) to below 1 "
                            "(a relative half-width, e.g. 0.1)")
    if a.max_requests is not None and a.max_requests < 1:
        raise ServesimError(f"--max-requests {a.max_requests}: must be at least 1")
    if a.max_requests is not None and a.precision == 0:
        # It bounds how far a point grows to reach --precision; without that it did nothing.
        raise ServesimError(f"--max-requests {a.max_requests}: bounds the requests a point "
                            "grows to under --precision, which is 0 (each point runs once "
                            "over workload.num_requests); give --precision too, or leave "
                            "--max-requests out")
    if a.warmup == 0 and a.precision == 0:
        return None
    most = MAX_REQUESTS if a.max_requests is None else a.max_requests
    tg = tuple((s.column, s.limit_s) for s in slos
               if s.metric in STEADY_METRICS and s.stat != "max") if targets else ()
    return Steady(a.warmup, a.precision, most, steady_columns(slos), tg)


def check_start(steady: Steady | None, raw: Any) -> None:
    """Refuse a ``--max-requests`` below the requests each point starts with (the base
    scenario ``raw``'s ``workload.num_requests``): a point would run past the cap it
    was given, without a word."""
    from sim.errors import ServesimError

    if steady is None or not steady.precision:
        return
    w = raw.get("workload") if isinstance(raw, dict) else None
    n = w.get("num_requests") if isinstance(w, dict) else None
    if isinstance(n, int) and not isinstance(n, bool) and n > steady.max_requests:
        raise ServesimError(f"--max-requests {steady.max_requests}: below the {n} requests "
                            "each point starts with (workload.num_requests); give at least "
                            f"{n}, or a smaller workload.num_requests")


def stopped_at_cap(steady: Steady, rows: list[Any], cap: int | None = None) -> int:
    """How many of the points ``rows`` stopped growing at the cap (``cap``, else
    ``steady.max_requests``) with statistics short of the precision: neither saturated
    nor settled within it."""
    cap = steady.max_requests if cap is None else cap
    return sum(1 for r in rows if not r.get("saturated")
               and (r.get("rel_halfwidth") is None or r["rel_halfwidth"] > steady.precision)
               and (r.get("requests_used") or 0) >= cap)
