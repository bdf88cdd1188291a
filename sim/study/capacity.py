"""``servesim capacity``: the highest load meeting SLOs, and the cheapest cluster for a target.

Every point is measured in steady state by default (:mod:`sim.study.steady`: warm-up and
drain left out, run length doubled until the SLO statistics are precise or their verdict
clear, capped by ``--max-requests``); a trace's seeds replay different stretches of it.

0. **Zero-load floor.** A candidate whose requests, each run alone, already miss a
   target is skipped, with the reason; when every candidate is, a one-line error names
   the floor and the target.
1. **Maximum rate per replica.** For each candidate (policy, tp, pp), on one replica, and for
   each seed separately, the rate is bracketed (doubling or halving from a start rate)
   and then bisected until the bracket is narrower than ``tol`` (relative). A rate
   *passes* when the point is not saturated and every SLO holds. Each seed gives the
   highest rate known to pass; the reported maximum is their mean, with a 95%
   Student-t interval over seeds. Seeds advance in lock step so that one round's
   simulations run in parallel; every simulation is cached like a sweep point.
   Per seed, a seeded Poisson workload at a higher rate is the same arrival pattern
   compressed in time, so each seed's pass/fail is (in practice) monotone in rate and
   bisection is sound.
2. **Cheapest configuration for ``--target-rate``.** For each candidate, the replica
   count starts at ceil(target / max rate per replica) and is checked by simulating the
   whole cluster at the target rate over all seeds (mean over seeds must meet every
   SLO, no seed saturated): down while it still passes, up until it does. Candidates
   go cheapest estimate first, and configurations with more GPUs than the best passing
   one so far are skipped (they cannot win), each skip said in ``pruned``. The cheapest
   passing configuration uses the fewest GPUs (replicas x tp x pp); cost per million output
   tokens = GPUs x $/GPU-hour / 3600 / (output tokens/s) x 1e6.

The search's shared inputs and step 1: :mod:`sim.study.ratesearch`. The command line and
the files a run writes: :mod:`sim.study.capacitycli`.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.errors import ServesimError
from sim.report.rejections import NOT_SERVED, row_share
from sim.report.slospec import SLO, all_met
from sim.study.pointrun import point_words
from sim.study.rates import arrived, empty_point_error
from sim.study.ratesearch import MaxRate, Row, Search, max_rate, round_rate, shape_name
from sim.study.steady import floor_stats, floor_violations
from sim.study.sweep import aggregate
from sim.study.sweeppoint import (
    PointKey,
    cost_source,
    describe_base,
    point_raw,
    shape_memory,
)


@dataclass
class Config:
    """A checked cluster configuration at the target rate."""

    policy: str
    replicas: int
    tp: int
    passed: bool
    row: Row  # mean over seeds, with _ci columns
    pp: int = 1  # pipeline stages per replica

    @property
    def gpus(self) -> int:
        """GPUs used: replicas x tensor-parallel degree x pipeline stages."""
        return self.replicas * self.tp * self.pp


def check_config(s: Search, policy: str, replicas: int, tp: int, rate: float,
                 pp: int = 1) -> Config:
    """Simulate the whole cluster at ``rate`` over every seed; mean must meet every SLO."""
    rows = s.run([PointKey(policy, replicas, tp, round_rate(rate), seed, pp)
                  for seed in s.seeds], f"{replicas}x {shape_name(policy, tp, pp)}")
    for r in rows:
        if not arrived(r):
            raise empty_point_error(s.raw, r["rate"], point_words(PointKey.of(r),
                                                                  s._start_row(r["seed"])))
    agg = aggregate(rows)[0]
    ok = not any(r["saturated"] or row_share(r, NOT_SERVED) > s.max_rejected_share
                 for r in rows) and all_met(s.slos, agg)
    return Config(policy, replicas, tp, ok, agg, pp)


def size_for(s: Search, mr: MaxRate, target: float, allowed: list[int] | None,
             max_steps: int = 4, limit_gpus: int | None = None
             ) -> tuple[Config | None, list[Config]]:
    """Fewest replicas of candidate ``mr`` that meet the SLOs at ``target`` req/s; with
    ``limit_gpus`` (the best configuration found so far), configurations using more GPUs
    cannot win and are not simulated (a line in ``s.pruned`` says so)."""
    if mr.mean <= 0:
        return None, []
    guess = max(1, math.ceil(target / mr.mean - 1e-9))
    # A range, not a list: a target far above one replica's rate makes the guess huge.
    counts: Sequence[int] = sorted(allowed) if allowed else range(1, guess + max_steps + 1)
    name = mr.name
    if limit_gpus is not None:
        fit = (counts[:limit_gpus // mr.gpus] if isinstance(counts, range)
               else [n for n in counts if n * mr.gpus <= limit_gpus])
        if not fit:
            s.pruned.append(f"{name}: not checked at {target:g} requests/s; even "
                            f"{counts[0]} replica(s) use {counts[0] * mr.gpus} GPUs, more than "
                            f"the {limit_gpus} of the best configuration found")
            return None, []
        if len(fit) < len(counts):
            s.pruned.append(f"{name}: {fit[-1] + 1 if not allowed else 'larger'} replicas "
                            f"and up not checked; they use more GPUs than the {limit_gpus} "
                            "of the best configuration found")
        counts = fit
    # Start at the estimate (or the allowed count nearest below it) and walk.
    i = max(0, bisect_right(counts, guess) - 1)
    tried: dict[int, Config] = {}

    def check(j: int) -> Config:
        if j not in tried:
            tried[j] = check_config(s, mr.policy, counts[j], mr.tp, target, mr.pp)
        return tried[j]

    if check(i).passed:
        i = fewest_passing(lambda j: check(j).passed, i)
        return tried[i], [tried[j] for j in sorted(tried)]
    for j in range(i + 1, min(len(counts), i + 1 + max_steps)):
        if check(j).passed:
            return tried[j], [tried[k] for k in sorted(tried)]
    return None, [tried[j] for j in sorted(tried)]


def fewest_passing(passed: Callable[[int], bool], i: int) -> int:
    """The lowest index at or below ``i`` (which passes) whose count still passes, taking
    pass to hold from some index up. Steps down by 1, 2, 4, ... and bisects the last
    step: a right estimate costs one check below it, as a walk one at a time would, and
    one far too high (a tiny workload at a huge target) a few dozen, not one a replica."""
    step = 1
    while i > 0:
        j = max(0, i - step)
        if not passed(j):
            while i - j > 1:  # j fails and i passes: bisect between them
                mid = (i + j) // 2
                i, j = (mid, j) if passed(mid) else (i, mid)
            return i
        i, step = j, step * 2
    return i


def cost_row(c: Config, gpu_cost: float | None) -> Row:
    """A configs.csv row: shape, GPUs, pass, key metrics and cost per million output tokens."""
    tps = c.row.get("output_tps")
    gpu_h = c.gpus / 3600.0 / tps * 1e6 if tps else None  # GPU-hours per 1e6 output tokens
    out: Row = {"policy": c.policy, "replicas": c.replicas, "tp": c.tp, "pp": c.pp,
                "gpus": c.gpus,
                "passed": int(c.passed), "output_tps": tps,
                "gpu_hours_per_mtok": gpu_h,
                "usd_per_mtok": gpu_h * gpu_cost if gpu_h is not None and gpu_cost else None}
    for col in ("ttft_p99", "tpot_p99", "ttft_mean", "throughput_rps", "saturated"):
        out[col] = c.row.get(col)
    return out


def default_start(raw: dict[str, Any]) -> float:
    """The scenario's own rate (arrivals.rate or trace.target_rate), else 1 req/s."""
    w = raw.get("workload") or {}
    for sect, key in (("arrivals", "rate"), ("trace", "target_rate")):
        v = (w.get(sect) or {}).get(key) if isinstance(w.get(sect), dict) else None
        if isinstance(v, int | float) and v > 0:
            return float(v)
    return 1.0


@dataclass
class CapacityResult:
    """Everything a capacity run found."""

    slos: list[SLO]
    seeds: list[int]
    tol: float
    max_rates: list[MaxRate]
    target_rate: float | None
    gpu_cost_per_hour: float | None
    checked: list[Config]
    best: Config | None
    search: list[Row]
    redundancy: int = 0  # spare replicas (N+K) added to the cheapest configuration
    cost_source: str = ""  # where the step prices come from, in one phrase
    pruned: list[str] = field(default_factory=list)  # what was skipped, and why
    notes: list[str] = field(default_factory=list)  # how the points were measured
    simulated: dict[str, Any] = field(default_factory=dict)  # the base scenario, resolved


def run_capacity(s: Search, policies: list[str], tps: list[int], start: float, tol: float,
                 target: float | None = None, allowed: list[int] | None = None,
                 gpu_cost: float | None = None, pps: list[int] | None = None
                 ) -> CapacityResult:
    """Maximum rate per replica for every (policy, tp, pp) whose zero-load floor allows the
    SLOs; then, with ``target``, the cheapest passing configuration (fewest GPUs, then
    lowest cost per token, then lowest p99 TTFT), candidates tried cheapest estimate first
    and configurations that cannot beat the best found skipped."""
    cands = feasible(s, policies, tps, start, pps or [s.pp])
    rates = [with_memory(s, max_rate(s, pol, tp, start, tol, pp)) for pol, tp, pp in cands]
    checked: list[Config] = []
    passing: list[Config] = []

    def rank(c: Config) -> tuple[float, float, float]:
        tps_ = c.row.get("output_tps") or 0.0
        return (c.gpus, -tps_, c.row.get("ttft_p99") or math.inf)

    if target is not None:
        est = [(math.ceil(target / mr.mean - 1e-9) * mr.gpus if mr.mean > 0 else math.inf, k)
               for k, mr in enumerate(rates)]
        for _, k in sorted(est):
            limit = min(c.gpus for c in passing) if passing else None
            best, tried = size_for(s, rates[k], target, allowed, limit_gpus=limit)
            checked += tried
            if best is not None:
                passing.append(best)

    best = min(passing, key=rank) if passing else None
    prices = cost_source(s.raw, s.source, s.base_dir)
    return CapacityResult(s.slos, s.seeds, tol, rates, target, gpu_cost, checked, best,
                          list(s.log), cost_source=prices,
                          simulated=describe_base(s.raw, s.source, s.base_dir, prices,
                                                  s.overrides),
                          pruned=list(s.pruned))


def with_memory(s: Search, mr: MaxRate) -> MaxRate:
    """``mr`` with its candidate's memory (:func:`sim.study.sweeppoint.shape_memory`) and
    the tokens a replica's cache holds (the decode pool's in a disaggregated candidate)."""
    key = PointKey(mr.policy, 1, mr.tp, round_rate(mr.mean or 1.0), s.seeds[0], mr.pp)
    memory = shape_memory(s.raw, s.source, s.base_dir, key)
    last = memory.get("decode") or memory["both"]
    return dataclasses.replace(mr, memory=memory, kv_tokens=int(last["kv_tokens"]))


def feasible(s: Search, policies: list[str], tps: list[int], start: float,
             pps: list[int]) -> list[tuple[str, int, int]]:
    """Candidates whose zero-load floor (:func:`sim.study.steady.floor_stats`) leaves the
    SLOs reachable; the others are skipped with their reason in ``s.pruned``. When none
    is left the SLOs are impossible: a one-line error naming the floor and the target."""
    ok: list[tuple[str, int, int]] = []
    reasons: list[str] = []
    for pol, tp, pp in ((a, b, c) for a in policies for b in tps for c in pps):
        key = PointKey(pol, 1, tp, round_rate(start), s.seeds[0], pp)
        raw = point_raw(s.raw, key, None)
        why = floor_violations(floor_stats(raw, s.source, s.base_dir), s.slos)
        if why:
            reasons.append(f"{why[0]} ({shape_name(pol, tp, pp)})")
            s.pruned.append(f"{shape_name(pol, tp, pp)}: skipped, no load meets the SLOs: "
                            + "; ".join(why))
        else:
            ok.append((pol, tp, pp))
    if not ok:
        raise ServesimError("--slo: no load can meet the targets: " + "; ".join(reasons)
                            + " (a request alone, with nothing queued, already takes longer)")
    return ok
