"""``servesim capacity``: the highest load meeting SLOs, and the cheapest cluster for a target.

The command line, its output files and its console summary; the search itself is
:mod:`sim.study.capacity`'s.

Outputs in ``--out``: ``capacity.json`` (everything), ``capacity.csv`` (per candidate),
``configs.csv`` (target checks), ``search.csv`` (every simulated point) and
``capacity_search.png``, with a ``NAME.csv.meta.json`` beside each CSV
(:mod:`sim.report.csvmeta`), written into a temporary folder that replaces ``--out`` whole
at the end; ``cache/`` (as a sweep's) is written in place and carried across.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from sim.cliargs import ArgParser, float_arg, int_arg
from sim.config.scenario import input_files
from sim.errors import ServesimError
from sim.report.csvmeta import csv_header
from sim.report.folder import check_replaceable, replaced_folder
from sim.report.outputs import default_out, write_atomic, write_meta
from sim.report.rejections import max_share, row_share
from sim.report.slospec import SLO, parse_slos
from sim.study.capacity import CapacityResult, cost_row, default_start, run_capacity
from sim.study.pointrun import PointCache
from sim.study.rates import (
    MAX_RATE,
    MIN_RATE,
    check_rate,
    rate_arg,
)
from sim.study.ratesearch import MIN_TOL, Search, check_tol
from sim.study.steady import (
    STEADY_COLUMNS,
    Steady,
    add_steady_args,
    check_start,
    steady_from_args,
    stopped_at_cap,
)
from sim.study.studyargs import (
    MAX_SEEDS,
    add_execution_args,
    check_execution,
    grid_args,
    grid_base,
    parse_ints,
    refuse_fixed_outages,
    refuse_grid_overrides,
    refuse_pinned,
)
from sim.study.sweep import to_csv
from sim.study.sweeppoint import (
    METRIC_COLUMNS,
    PointKey,
    point_sets,
    refuse_closed_loop,
    show_progress,
)
from sim.study.traceplan import TracePlan, trace_plan

Row = dict[str, Any]


CAPACITY_FILES = ("capacity.json", "capacity.csv", "search.csv")


def capacity_parser() -> ArgParser:
    """The ``servesim capacity`` command line."""
    p = ArgParser(prog="servesim capacity", description=__doc__.split("\n")[0])
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_STAT=SECONDS",
                   help="target, e.g. ttft_p99=0.5 or ttft_mean=200ms (repeatable; required)")
    p.add_argument("--target-rate", type=rate_arg, default=None,
                   help="requests/s the cluster must serve: find the cheapest configuration")
    p.add_argument("--gpu-cost-per-hour", type=float_arg(gt=0), default=None,
                   help="$ per GPU-hour, for the cost per million output tokens")
    p.add_argument("--policies", default=None, help="candidate policies (comma list)")
    p.add_argument("--tp", default=None, help="candidate tensor-parallel degrees (comma list)")
    p.add_argument("--pp", default=None,
                   help="candidate pipeline stages per replica (comma list; hardware.pp)")
    p.add_argument("--replicas", default=None,
                   help="allowed replica counts for --target-rate (default: any)")
    p.add_argument("--seeds", type=int_arg(ge=1, le=MAX_SEEDS), default=3,
                   help="replications per rate (default 3)")
    p.add_argument("--tol", type=float_arg(gt=0, lt=1), default=0.02,
                   help="relative width at which the rate search stops, from "
                        f"{MIN_TOL:g} (default 0.02)")
    # The search doubles the rate until it fails; from far above any server's rate the
    # doubling overflows before a verdict.
    p.add_argument("--rate-start", type=rate_arg, default=None,
                   help=f"first rate tried, req/s, {MIN_RATE:g} to {MAX_RATE:g} (default: "
                        "the scenario's rate)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default out/<scenario name>-capacity)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    p.add_argument("--redundancy", type=int_arg(ge=0, le=10_000), default=0, metavar="K",
                   help="spare replicas for failures (N+K): the cheapest configuration's "
                        "N replicas meet the target; K more keep it met with K down")
    add_execution_args(p)
    add_steady_args(p, precision=0.1, warmup=0.1)
    return p


def check_flags(a: argparse.Namespace) -> list[SLO]:
    """The ``--slo`` targets, once every flag that needs no scenario is checked."""
    if not a.slo:
        raise ServesimError("--slo: give at least one target, e.g. --slo ttft_p99=0.5")
    slos = parse_slos(a.slo)
    check_execution(a)
    if a.gpu_cost_per_hour is not None and not (math.isfinite(a.gpu_cost_per_hour)
                                                and a.gpu_cost_per_hour > 0):
        raise ServesimError(f"--gpu-cost-per-hour {a.gpu_cost_per_hour}: must be a positive "
                            "number")
    check_tol(a.tol)
    if a.redundancy < 0:
        raise ServesimError(f"--redundancy {a.redundancy}: must be 0 or more spare replicas")
    if a.redundancy and a.target_rate is None:
        # Spares are added to the cheapest configuration meeting --target-rate; without
        # one there is no configuration to add them to.
        raise ServesimError(f"--redundancy {a.redundancy}: needs --target-rate (the spares "
                            "go on the cheapest configuration that meets it)")
    if a.replicas is not None and a.target_rate is None:
        # Without a target the search finds each candidate's rate for one replica; the
        # replica counts would be dropped without a word.
        raise ServesimError(f"--replicas {a.replicas}: needs --target-rate (it bounds the "
                            "replica counts tried for the target; without one the search "
                            "finds the rate of one replica)")
    return slos


def check_rates(a: argparse.Namespace, base: dict[str, Any], start: float,
                steady: Steady | None) -> None:
    """Refuse a first rate or target below what the workload measures
    (:func:`sim.study.rates.check_rate`), naming the flag, or the default it came from."""
    grow_to = None if steady is None else steady.max_requests
    check_rate(base, start, f"--rate-start {a.rate_start:g}" if a.rate_start else
               f"the search's first rate, {start:g} (the scenario's own rate, or 1; "
               "--rate-start sets it)", grow_to)
    if a.target_rate is not None:
        check_rate(base, a.target_rate, f"--target-rate {a.target_rate:g}", grow_to)


def main(argv: list[str]) -> int:
    """``servesim capacity FILE --slo ttft_p99=0.5 [--target-rate R] [...]``."""
    a = capacity_parser().parse_args(argv)
    slos = check_flags(a)
    refuse_grid_overrides(a, rates=False)
    allowed = parse_ints(a.replicas, "--replicas") if a.replicas is not None else None
    base, sc = grid_base(a)
    refuse_closed_loop(base, a.scenario, "capacity", paced=False)
    refuse_fixed_outages(sc, a.scenario)
    grid = grid_args(argparse.Namespace(**{**vars(a), "replicas": None}), sc)
    path = Path(a.scenario)
    if "disaggregated" in grid["policies"]:
        refuse_pinned(sc, "--replicas", a.replicas, "replicas")
        refuse_pinned(sc, "--target-rate", a.target_rate, "replicas",
                      "the replica counts its search tries")
    name = str(base.get("name", "scenario"))
    out = a.out if a.out is not None else default_out(name, "-capacity", a.scenario)
    inputs = input_files(sc)
    check_replaceable(out, CAPACITY_FILES, inputs, ("cache",))
    start = a.rate_start or default_start(base)
    steady = steady_from_args(a, slos, targets=True)
    check_start(steady, base)
    check_rates(a, base, start, steady)
    plan = trace_plan(base, str(path), path.parent.resolve(), len(grid["seeds"]),
                      window_requests(base, start))
    seeds = grid["seeds"][:plan.replications] if plan is not None else grid["seeds"]
    s = Search(base, str(path), path.parent.resolve(), slos, seeds,
               PointCache(None if a.no_cache else out / "cache"), a.horizon_factor, a.backend,
               a.workers, a.ray_address, progress=show_progress(a.quiet), steady=steady, plan=plan,
               overrides=a.overrides, max_rejected_share=max_share(a), force=a.force)
    result = run_capacity(s, grid["policies"], grid["tps"], start,
                          a.tol, a.target_rate, allowed, a.gpu_cost_per_hour, grid["pps"])
    result.redundancy = a.redundancy
    result.notes = measurement_notes(steady, plan, result.search) + s.notes
    paths = write_outputs(result, out, inputs, not a.no_plots)
    if a.json:  # capacity.json alone on stdout
        sys.stdout.write(result_json(result).decode())
    elif not a.quiet:
        print_summary(result)
        for note in sc.notes:  # settings accepted without being priced
            print(f"note: {note}")
        print(f"{s.stats.computed + s.stats.cached} simulations: {s.stats.computed} run, "
              f"{s.stats.cached} from the cache")
        print("wrote " + ", ".join(str(x) for x in paths))
    return rejections_verdict(result.search, s)


def write_outputs(result: CapacityResult, out: Path, inputs: list[Path],
                  plots: bool) -> list[Path]:
    """The result's files (:func:`write_files`, and its plot) in a folder that replaces
    ``out`` whole, its cache carried across; the paths they have there."""
    with replaced_folder(out, CAPACITY_FILES, carry=("cache",), inputs=inputs) as stage:
        names = [p.name for p in write_files(result, stage)]
        if plots:
            from sim.report.plots import capacity_plot

            names.append("capacity_search.png")
            capacity_plot(result.search, result.slos, [m.row() for m in result.max_rates],
                          stage / names[-1])
    return [out / n for n in names]


def rejections_verdict(search: list[Row], s: Search) -> int:
    """0, after a note on stderr when some points failed for their rejections; an error
    when every point failed and some for that reason (then no rate is an answer)."""
    over = [r for r in search if row_share(r) > s.max_rejected_share]
    if not over:
        return 0
    worst = max(over, key=row_share)
    key = PointKey.of(worst)
    sets = " ".join(f"--set {o}" for o in point_sets(s.raw, key, s.horizon_factor,
                                                        s._start_row(key.seed)))
    what = (f"{len(over)} of {len(search)} points rejected more than "
            f"{s.max_rejected_share:.1%} of their arrived requests (--max-rejected-share) "
            f"and count as failing; worst {row_share(worst):.1%} at policy {key.policy}, tp "
            f"{key.tp}, pp {key.pp}, rate {key.rate:g}; `servesim simulate {s.source} {sets}` "
            "names the limit to raise")
    if any(r["pass"] for r in search):
        print(f"servesim: note: {what}", file=sys.stderr)
        return 0
    raise ServesimError(f"no point passed: {what}; --allow-rejections accepts them",
                        s.source)


def window_requests(raw: dict[str, Any], rate: float) -> int | None:
    """Requests one point replays at ``rate`` req/s: ``num_requests``, or what arrives in
    ``duration_s`` (the fewer); None when neither is set (the whole workload)."""
    w = raw.get("workload") or {}
    sizes = [int(w["num_requests"])] if w.get("num_requests") is not None else []
    if w.get("duration_s") is not None:
        sizes.append(max(1, math.ceil(rate * float(w["duration_s"]))))
    return min(sizes, default=None)


def measurement_notes(steady: Steady | None, plan: TracePlan | None,
                      search: list[Row]) -> list[str]:
    """How the points were measured, in a line or two for the console and capacity.json."""
    notes = []
    if plan is not None:
        notes.append(f"trace replications: seed i replays from row i x {plan.segment} of "
                     f"{plan.rows}" + (f"; {plan.note}" if plan.note else ""))
    used = sorted(int(r["requests_used"]) for r in search if r.get("requests_used"))
    if steady is not None and used:
        capped = stopped_at_cap(steady, search)
        notes.append(f"steady state: first and last {steady.warmup:.0%} of arrivals left out; "
                     f"{', '.join(steady.columns)} to ±{steady.precision:.0%} (95%, batch "
                     f"means) or a clear verdict; points used {used[0]}-{used[-1]} requests "
                     f"(median {used[len(used) // 2]})"
                     + (f"; {capped} stopped at --max-requests" if capped else ""))
    return notes


def result_json(r: CapacityResult) -> bytes:
    """The whole result as stable JSON (for ``servesim report``)."""
    from sim.report.metrics import clean

    blob = {
        "kind": "capacity",
        "slo_targets": [{"metric": x.metric, "stat": x.stat, "limit_s": x.limit_s}
                        for x in r.slos],
        "seeds": r.seeds, "tol": r.tol,
        "max_rate_per_replica": [m.row() | {"brackets": m.brackets, "memory": m.memory}
                                 for m in r.max_rates],
        "target_rate": r.target_rate, "gpu_cost_per_hour": r.gpu_cost_per_hour,
        "checked": [cost_row(c, r.gpu_cost_per_hour) for c in r.checked],
        "best": cost_row(r.best, r.gpu_cost_per_hour) if r.best is not None else None,
        "cost_source": r.cost_source,
        "simulated": r.simulated,
    }
    if r.pruned or r.notes:
        blob["pruned"], blob["notes"] = r.pruned, r.notes
    if r.redundancy:
        blob["redundancy"] = r.redundancy
        if r.best is not None:
            blob["best_with_redundancy"] = {"replicas": r.best.replicas + r.redundancy,
                                            "gpus": (r.best.replicas + r.redundancy)
                                            * r.best.tp * r.best.pp}
    return (json.dumps(clean(blob), indent=2, sort_keys=True, allow_nan=False) + "\n").encode()


SEARCH_COLUMNS = ["policy", "replicas", "tp", "pp", "rate", "seed", "pass", *METRIC_COLUMNS]


def search_csv(r: CapacityResult) -> bytes:
    """Every simulated point in the order it was asked for."""
    return to_csv([{**x, "pass": int(x["pass"])} for x in r.search], search_columns(r))


def search_columns(r: CapacityResult) -> list[str]:
    """search.csv's columns: the steady-state ones too when the points were measured so."""
    cols = list(SEARCH_COLUMNS)
    if any("requests_used" in x for x in r.search):
        cols += STEADY_COLUMNS
    return cols


def write_files(r: CapacityResult, out: Path) -> list[Path]:
    """capacity.json, capacity.csv, configs.csv and search.csv, and each CSV's
    description (:mod:`sim.report.csvmeta`), written atomically."""
    paths = [out / "capacity.json", out / "capacity.csv", out / "configs.csv",
             out / "search.csv"]
    write_atomic(paths[0], result_json(r))
    max_cols = ["policy", "tp", "pp", "max_rate_per_replica", "ci_low", "ci_high", "seeds",
                "per_seed", "kv_tokens_per_replica"]
    write_atomic(paths[1], to_csv([m.row() for m in r.max_rates], max_cols))
    rows = [cost_row(c, r.gpu_cost_per_hour) for c in r.checked]
    config_cols = list(rows[0]) if rows else ["policy"]
    write_atomic(paths[2], to_csv(rows, config_cols))
    write_atomic(paths[3], search_csv(r))
    varied = {"policies": list(dict.fromkeys(m.policy for m in r.max_rates)),
              "tp": list(dict.fromkeys(m.tp for m in r.max_rates)),
              "pp": list(dict.fromkeys(m.pp for m in r.max_rates)), "seeds": r.seeds}
    for path, rows_are, cols in (
            (paths[1], "one row per candidate (policy, tp, pp): its highest rate per replica",
             max_cols),
            (paths[2], f"one row per cluster checked at --target-rate {r.target_rate}",
             config_cols),
            (paths[3], "one row per simulation the search ran, in the order asked",
             search_columns(r))):
        paths.append(write_meta(path, rows_are, [csv_header(c) for c in cols], r.simulated,
                                varied))
    return paths


def print_summary(r: CapacityResult) -> None:
    """The answer in a few lines: max rate per candidate, then the cheapest configuration."""
    print(f"SLO: {', '.join(str(x) for x in r.slos)}; {len(r.seeds)} seed(s), "
          f"search tolerance {r.tol:.0%}")
    for line in r.notes:
        print(f"  {line}")
    for m in r.max_rates:
        print(f"  {m.name}: max {m.mean:.4g} requests/s per replica"
              f"{m.interval_text()}"
              + (f"; KV cache {m.kv_tokens:,} tokens a replica" if m.kv_tokens else ""))
    for line in r.pruned:
        print(f"  pruned: {line}")
    if r.target_rate is None:
        return
    if r.best is None:
        print(f"no candidate meets the SLOs at {r.target_rate:g} requests/s "
              "within the replica counts tried")
        return
    c = cost_row(r.best, r.gpu_cost_per_hour)
    usd = f", ${c['usd_per_mtok']:.3g} per million output tokens" if c["usd_per_mtok"] else ""
    gh = c["gpu_hours_per_mtok"]
    gh_txt = f"{gh:.3g} GPU-hours per million output tokens" if gh else "no output tokens"
    stages = f" x pp {c['pp']}" if c["pp"] != 1 else ""
    print(f"cheapest for {r.target_rate:g} requests/s: {c['policy']}, {c['replicas']} "
          f"replica(s) x tp {c['tp']}{stages} = {c['gpus']} GPU(s); {gh_txt}{usd}")
    if r.redundancy:
        n = r.best.replicas + r.redundancy
        print(f"with N+{r.redundancy} redundancy (the target still met with "
              f"{r.redundancy} replica(s) down): {n} replicas = {n * r.best.tp * r.best.pp} GPU(s)")
