"""``servesim sweep``: a grid of simulations over request rate, policy, replicas, tp and seed.

The command line: its arguments, the trace replications a sweep's seeds replay, the
table it prints and the refusal of a grid whose points rejected too many requests. The
grid, its outputs and their layout: :mod:`sim.study.sweep`.
"""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Any

from sim.cliargs import ArgParser, int_arg
from sim.errors import ServesimError
from sim.report.csvmeta import csv_header
from sim.report.outputs import default_out
from sim.report.rejections import max_share, row_share
from sim.report.slospec import parse_slos
from sim.study.rates import check_rate
from sim.study.steady import (
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
    parse_rates,
    refuse_grid_overrides,
)
from sim.study.sweep import Row, SweepSpec, run_sweep
from sim.study.sweeppoint import PointKey, point_sets, refuse_closed_loop, show_progress
from sim.study.traceplan import TracePlan, trace_plan


def summary_table(grid: list[Row]) -> str:
    """A short text table of the grid (latencies in ms)."""
    head = (f"{'policy':<14}{'rep':>4}{'tp':>4}{'pp':>4}{'rate':>8}{'ttft p99 ms':>13}"
            f"{'tpot p99 ms':>13}{'e2e p99 ms':>13}{'req/s':>9}{'goodput':>9}  sat")
    lines = [head, "-" * len(head)]

    def ms(v: float | None) -> str:
        return f"{'-':>13}" if v is None else f"{v * 1e3:>13.1f}"

    def num(v: float | None) -> str:
        return f"{'-':>9}" if v is None else f"{v:>9.2f}"

    for g in grid:
        sat = "yes" if g["saturated"] else ""
        lines.append(f"{g['policy']:<14}{g['replicas']:>4}{g['tp']:>4}{g['pp']:>4}"
                     f"{g['rate']:>8g}"
                     f"{ms(g['ttft_p99'])}{ms(g['tpot_p99'])}{ms(g['e2e_p99'])}"
                     f"{num(g['throughput_rps'])}{num(g['goodput_rps'])}  {sat}")
    return "\n".join(lines)


def sweep_plan(base: dict[str, Any], path: Path, seeds: list[int],
               rates: list[float]) -> TracePlan | None:
    """Replications of a trace workload (None for a generated one), each replaying its
    own stretch: as many as fit without overlap at the sweep's highest rate, whose
    window is the longest when ``duration_s`` bounds it."""
    w = base.get("workload") or {}
    sizes = [int(w["num_requests"])] if w.get("num_requests") is not None else []
    if w.get("duration_s") is not None:
        sizes.append(max(1, math.ceil(max(rates) * float(w["duration_s"]))))
    if len(seeds) == 1:
        return None  # one replication replays the trace from its start, as always
    return trace_plan(base, str(path), path.parent.resolve(), len(seeds), min(sizes, default=None))


def sweep_parser() -> ArgParser:
    """The ``servesim sweep`` command line."""
    p = ArgParser(prog="servesim sweep", description=__doc__.split("\n")[0])
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--rates", required=True,
                   help="request rates (req/s, whole cluster): START:STOP:STEP or a,b,c")
    p.add_argument("--policies", default=None, help="comma list of batching policies")
    p.add_argument("--replicas", default=None, help="comma list of replica counts")
    p.add_argument("--tp", default=None, help="comma list of tensor-parallel degrees")
    p.add_argument("--pp", default=None,
                   help="comma list of pipeline stages per replica (hardware.pp)")
    p.add_argument("--seeds", type=int_arg(ge=1, le=MAX_SEEDS), default=1,
                   help="replications per point with seeds seed..seed+N-1 (default 1)")
    p.add_argument("--slo", action="append", default=[], metavar="METRIC_STAT=SECONDS",
                   help="target drawn on the plots, e.g. ttft_p99=0.5 (repeatable)")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default out/<scenario name>-sweep)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    add_execution_args(p)
    add_steady_args(p, precision=0.0, warmup=0.0)
    return p


def main(argv: list[str]) -> int:
    """``servesim sweep FILE --rates A:B:S [...]``."""
    a = sweep_parser().parse_args(argv)
    rates = parse_rates(a.rates)
    check_execution(a)
    slos = parse_slos(a.slo)
    steady = steady_from_args(a, slos, targets=False)
    refuse_grid_overrides(a, rates=True)
    base, sc = grid_base(a)
    check_start(steady, base)
    refuse_closed_loop(base, a.scenario, "sweep --rates")
    check_rate(base, rates[0], f"--rates {a.rates}",
               None if steady is None else steady.max_requests)
    grid = grid_args(a, sc)
    path = Path(a.scenario)
    plan = sweep_plan(base, path, grid["seeds"], rates)
    if plan is not None:
        grid["seeds"] = grid["seeds"][:plan.replications]
        if plan.note and not a.quiet:
            print(f"note: {plan.note}")
    spec = SweepSpec(base, str(path), path.parent.resolve(), rates, slos=slos,
                     horizon_factor=a.horizon_factor, steady=steady, plan=plan,
                     overrides=a.overrides, **grid)
    out = (a.out if a.out is not None
           else default_out(str(base.get("name", "scenario")), "-sweep", a.scenario))
    limit = max_share(a)
    res = run_sweep(spec, out, a.backend, a.workers, a.ray_address, progress=show_progress(a.quiet),
                    plots=not a.no_plots, use_cache=not a.no_cache, force=a.force)
    flagged = rejecting_points(res.points, limit, spec, a.overrides)
    if flagged is not None:  # so that `report` on the folder says so too
        mark_refused(out / "sweep.json", str(flagged))
    if a.json:  # the manifest and the grid (CSV column names) alone on stdout
        from sim.report.metrics import clean

        grid_rows = [{csv_header(k): v for k, v in g.items()} for g in res.grid]
        blob = {"sweep": json.loads((out / "sweep.json").read_text()), "grid": grid_rows}
        print(json.dumps(clean(blob), indent=2, allow_nan=False))
    elif not a.quiet:
        print(summary_table(res.grid))
        for note in sc.notes:  # settings accepted without being priced
            print(f"note: {note}")
        print(f"{len(res.points)} simulations: {res.stats.computed} run, "
              f"{res.stats.cached} from the cache")
        if steady is not None and steady.precision:
            # A trace's replications never grow past their stretch (SweepSpec.tasks).
            cap = min(steady.max_requests, plan.segment) if plan else steady.max_requests
            if capped := stopped_at_cap(steady, res.points, cap):
                print(f"note: {capped} of {len(res.points)} points stopped at "
                      f"--max-requests ({cap}) before their statistics reached "
                      f"±{steady.precision * 100:g}%: their rel_halfwidth is empty or above it")
        print("wrote " + ", ".join(str(x) for x in res.paths))
    if flagged is not None:  # every point is written; the grid as a whole is refused
        raise flagged
    return 0


def mark_refused(path: Path, message: str) -> None:
    """Record in the JSON file ``path`` (a mapping) the error its outputs were refused
    with, under :data:`sim.report.rejections.REFUSED`."""
    from sim.report.outputs import write_atomic
    from sim.report.rejections import REFUSED

    blob = json.loads(path.read_text(encoding="utf-8"))
    blob[REFUSED] = message
    write_atomic(path, (json.dumps(blob, indent=2, sort_keys=True) + "\n").encode())


def rejecting_points(points: list[Row], limit: float, spec: SweepSpec,
                     overrides: list[str]) -> ServesimError | None:
    """The error for a grid some of whose points rejected more than ``limit`` of their
    requests, naming the worst point and the command that shows its limit; or None."""
    over = [p for p in points if row_share(p) > limit]
    if not over:
        return None
    worst = max(over, key=row_share)
    key = PointKey.of(worst)
    # Quoted for a shell: the command is meant to be pasted, and a user's own --set value
    # may hold spaces or braces.
    sets = " ".join(f"--set {shlex.quote(o)}"
                    for o in [*overrides, *point_sets(spec.raw, key, spec.horizon_factor,
                                                      spec.start_row(key.seed))])
    source = spec.source
    command = f"servesim simulate {shlex.quote(str(source))} {sets}"
    return ServesimError(
        f"{len(over)} of {len(points)} points rejected more than {limit:.1%} of their "
        f"arrived requests (--max-rejected-share), worst {row_share(worst):.1%} at policy "
        f"{worst['policy']}, replicas {worst['replicas']}, tp {worst['tp']}, pp "
        f"{worst['pp']}, rate "
        f"{worst['rate']:g}; the outputs were written; `{command}` "
        "names the limit to raise; --allow-rejections accepts them", source)
