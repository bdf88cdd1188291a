"""The inputs every simulation of a capacity search shares (:class:`Search`) and its
first step: the highest rate one replica of a candidate sustains within the SLOs, per
seed, bracketed and then bisected (:func:`max_rate`; the method is in
:mod:`sim.study.capacity`'s docstring, which sizes clusters from these rates).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sim.config.scenario import from_dict
from sim.errors import ServesimError
from sim.report.rejections import NOT_SERVED, row_share
from sim.report.slospec import SLO, all_met, unmet
from sim.study.pointrun import PointCache, RunStats, point_words, run_points
from sim.study.rates import MAX_RATE, arrived, empty_point_error, rate_floor
from sim.study.steady import Steady
from sim.study.sweep import ci95
from sim.study.sweeppoint import PointKey, make_task
from sim.study.traceplan import TracePlan

Row = dict[str, Any]


MAX_BRACKET_STEPS = 40  # doublings before concluding the SLOs do not bound the load


MAX_HALVINGS = 16  # halvings (a factor 65,536 below the start) before calling it unreachable


# The narrowest relative bracket the rate search bisects to: 0.01% of the rate is beyond
# the 4 significant figures printed and the noise of any point, and rates are rounded
# to 9 digits, so a far finer one would bisect until the search's step cap instead.
MIN_TOL = 1e-4


@dataclass
class Search:
    """Shared inputs of every simulation a capacity run makes."""

    raw: dict[str, Any]
    source: str
    base_dir: Path | None
    slos: list[SLO]
    seeds: list[int]
    cache: PointCache
    horizon_factor: float | None = 4.0
    backend: str = "local"
    workers: int | None = None
    address: str | None = None
    progress: bool = False
    # A point that rejected more than this share of its arrived requests fails
    # (sim/report/rejections.py); 1.0 with --allow-rejections.
    max_rejected_share: float = 0.01
    force: bool = False  # run points whatever their memory estimate
    stats: RunStats = field(default_factory=RunStats)
    log: list[Row] = field(default_factory=list)
    steady: Steady | None = None  # steady-state measurement of every point
    plan: TracePlan | None = None  # a trace's replications: each seed its own stretch
    pruned: list[str] = field(default_factory=list)  # what was skipped, and why
    notes: list[str] = field(default_factory=list)  # how a search ended, where unusual
    overrides: list[str] = field(default_factory=list)  # --set, already applied to raw

    @property
    def pp(self) -> int:
        """Pipeline stages per replica of the scenario searched (its ``hardware.pp``):
        the one candidate stage count when none are given."""
        return from_dict(self.raw, self.source, self.base_dir).hardware.pp

    def run(self, keys: list[PointKey], desc: str) -> list[Row]:
        """Rows (key columns + metrics + ``pass``) of ``keys``, simulated or from the cache."""
        steady = self.steady
        if steady is not None and self.plan is not None:
            # A replication never grows into the next one's stretch of the trace.
            steady = replace(steady, max_requests=min(steady.max_requests, self.plan.segment))
        tasks = [make_task(self.raw, self.source, self.base_dir, k, self.horizon_factor,
                           steady, self._start_row(k.seed)) for k in keys]
        rows = run_points(tasks, self.cache, self.backend, self.workers, self.address,
                          self.progress, desc, self.stats, self.force)
        out = []
        for t in tasks:
            r = {"policy": t.key.policy, "replicas": t.key.replicas, "tp": t.key.tp,
                 "pp": t.key.pp, "rate": t.key.rate, "seed": t.key.seed, **rows[t.digest]}
            # Timed out or failed count as rejected do: requests the point did not serve.
            r["pass"] = passes(self.slos, r) and \
                row_share(r, NOT_SERVED) <= self.max_rejected_share
            out.append(r)
        self.log += out
        return out


    def _start_row(self, seed: int) -> int:
        return 0 if self.plan is None else self.plan.start_row(self.seeds.index(seed))


def passes(slos: list[SLO], row: Row) -> bool:
    """A point passes when it kept up with its arrivals and meets every target."""
    return not row.get("saturated") and all_met(slos, row)


def round_rate(r: float) -> float:
    """``r`` (requests/s) to nine significant digits: cache keys stay stable and CSVs
    readable."""
    return float(f"{r:.9g}")


@dataclass
class MaxRate:
    """Highest passing rate per replica for one candidate (requests/s)."""

    policy: str
    tp: int
    per_seed: list[float]
    brackets: list[tuple[float, float | None]]
    mean: float
    ci: float | None
    pp: int = 1  # pipeline stages per replica
    # Each pool's memory terms and KV blocks (sim.cost.memorybudget.MemoryBudget.summary), by
    # role; the tokens one replica's KV cache holds (its decode pool's when split).
    memory: dict[str, Any] | None = None
    kv_tokens: int | None = None

    @property
    def name(self) -> str:
        """``policy, tp T`` (``, pp P`` with stages): the candidate in words."""
        return shape_name(self.policy, self.tp, self.pp)

    @property
    def gpus(self) -> int:
        """GPUs one replica of this candidate uses."""
        return self.tp * self.pp

    @property
    def resolution(self) -> float:
        """Widest final bracket over seeds (requests/s): how finely the search placed
        each seed's answer, so the least spread an interval can honestly claim."""
        return max((h - lo for lo, h in self.brackets if h is not None and lo > 0),
                   default=0.0)

    def interval_text(self) -> str:
        """The answer's interval for the console: a 95% Student-t interval over
        independent replications, never narrower than the search's resolution, and no
        interval from one replication."""
        n = len(self.per_seed)
        if self.ci is None:
            return " (one replication: no interval)" if n == 1 else ""
        if self.ci < self.resolution:
            return (f" ± {self.resolution:.3g} (search resolution: the {n} independent "
                    "replications agree to within it)")
        return f" ± {self.ci:.3g} (95% CI over {n} independent replications)"

    def row(self) -> Row:
        """A flat row for capacity.csv."""
        lo = None if self.ci is None else max(0.0, self.mean - self.ci)
        hi = None if self.ci is None else self.mean + self.ci
        return {"policy": self.policy, "tp": self.tp, "pp": self.pp,
                "max_rate_per_replica": self.mean,
                "ci_low": lo, "ci_high": hi, "seeds": len(self.per_seed),
                "per_seed": " ".join(f"{v:.6g}" for v in self.per_seed),
                "kv_tokens_per_replica": self.kv_tokens}


def shape_name(policy: str, tp: int, pp: int) -> str:
    """A candidate in words: ``policy, tp T``, with ``, pp P`` when it has stages."""
    return f"{policy}, tp {tp}" + (f", pp {pp}" if pp != 1 else "")


def max_rate(s: Search, policy: str, tp: int, start: float, tol: float,
             pp: int = 1) -> MaxRate:
    """Bracket then bisect, per seed in lock step, the highest passing rate on one replica
    (:func:`_next_rate` says how each point moves its seed's bracket)."""
    floor = rate_floor(s.raw, None if s.steady is None else s.steady.max_requests).rate
    lo: dict[int, float] = {seed: 0.0 for seed in s.seeds}
    hi: dict[int, float | None] = {seed: None for seed in s.seeds}
    nxt: dict[int, float] = {seed: start for seed in s.seeds}
    name = shape_name(policy, tp, pp)
    for _ in range(MAX_BRACKET_STEPS + 200):
        active = [seed for seed in s.seeds if _open(lo[seed], hi[seed], tol)]
        if not active:
            break
        keys = [PointKey(policy, 1, tp, round_rate(nxt[seed]), seed, pp) for seed in active]
        rows = s.run(keys, name)
        for seed, row in zip(active, rows, strict=True):
            b: list[Any] = [lo[seed], hi[seed]]
            nxt[seed] = _next_rate(s, f"{name}, seed {seed}", row, b, start, floor)
            lo[seed], hi[seed] = float(b[0]), b[1]
    per_seed = [lo[seed] for seed in s.seeds]
    mean, ci = ci95(per_seed)
    assert mean is not None
    return MaxRate(policy, tp, per_seed, [(lo[x], hi[x]) for x in s.seeds], mean, ci, pp)


def _next_rate(s: Search, who: str, row: Row, b: list[Any], start: float,
               floor: float) -> float:
    """The next rate for one seed after its point ``row``, with ``b`` = [lo, hi], its
    bracket, updated in place: [0, 0] when nothing passes. A point none of whose requests
    arrived is no verdict: below any failure it moves the search up (its rate was below
    the workload's window), and below a failure it ends the search there (no rate the
    workload can measure lies lower)."""
    r = row["rate"]
    if not arrived(row):
        if b[1] is None and r < MAX_RATE:
            return min(r * 2, MAX_RATE)
        if b[1] is None or b[0] > 0.0:  # empty above a rate that had requests: no rule fits
            raise empty_point_error(s.raw, r, point_words(PointKey.of(row),
                                                          s._start_row(row["seed"])))
        b[1] = 0.0
        s.notes.append(f"{who}: every rate tried failed, and at {r:g} requests/s no request "
                       "arrived in the point's window, so no lower rate can be measured")
        return r
    if row["pass"]:
        b[0] = max(b[0], r)
    else:
        b[1] = r if b[1] is None else min(b[1], r)
    if b[1] is None:
        if r >= MAX_RATE or r > start * 2.0 ** MAX_BRACKET_STEPS:
            raise ServesimError(f"--slo: still met at {r:g} requests/s; the targets do "
                                "not bound the load (is the workload bounded?)")
        return min(r * 2, MAX_RATE)
    if b[0] > 0.0:
        return (b[0] + b[1]) / 2
    if r <= floor * (1 + 1e-9):
        b[1] = 0.0  # nothing passes, down to the lowest rate the workload measures
        s.notes.append(f"{who}: every rate tried failed, down to {r:g} requests/s, the "
                       f"lowest this workload measures; there {_misses(s, row)}")
    elif r < start * 2.0 ** -MAX_HALVINGS:
        b[1] = 0.0  # nothing passes: the SLO is unreachable
        s.notes.append(f"{who}: every rate tried failed, down to {r:g} requests/s "
                       f"({MAX_HALVINGS} halvings below the start); there {_misses(s, row)}")
    return max(r / 2, floor)


def _misses(s: Search, row: Row) -> str:
    """Why a point failed, in words: the targets it missed with their values, a
    saturated queue, too many rejections (one of them at least: :meth:`Search.run`'s
    ``pass``)."""
    why = unmet(s.slos, row)
    if row.get("saturated"):
        why.append("the waiting queue kept growing")
    share = row_share(row, NOT_SERVED)
    if share > s.max_rejected_share:
        why.append(f"{share:.1%} of requests rejected, timed out or failed (at most "
                   f"{s.max_rejected_share:.1%} allowed)")
    return ", ".join(why)


def _open(lo: float, hi: float | None, tol: float) -> bool:
    """Whether a seed's bracket [lo, hi) still needs work."""
    if hi is None or lo == 0.0:
        return hi != 0.0
    return hi - lo > tol * lo


def check_tol(tol: float) -> None:
    """Refuse a ``--tol`` the search cannot honour: outside (0, 1), or finer than
    :data:`MIN_TOL`."""
    if not 0 < tol < 1:
        raise ServesimError(f"--tol {tol}: must be between 0 and 1 (a fraction of the rate)")
    if tol < MIN_TOL:
        raise ServesimError(f"--tol {tol:g}: at least {MIN_TOL:g}; a finer bracket is below "
                            "the 4 significant figures the answer is printed with and the "
                            "noise of any simulated point, and each halving costs one more "
                            "simulation per seed")
