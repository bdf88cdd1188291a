"""Command-line arguments the studies share (``sweep``, ``capacity``, ``compare``): rate
grids, integer and name lists with their bounds, scenario overrides and where points
run (process pool or Ray)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from sim.cliargs import ascii_float, ascii_int, comma_items, float_arg, int_arg
from sim.config.scenario import Scenario, from_dict
from sim.errors import ServesimError
from sim.report.rejections import add_rejection_args
from sim.study.rates import (
    RATE_RANGE,
    rate_problem,
)

# Replications beyond a few hundred narrow a 95% interval by little (it shrinks as
# 1/sqrt(seeds)); the caps keep a mistyped count from queueing millions of points.
MAX_SEEDS = 10_000
MAX_WORKERS = 4096
# A rate grid of more points than this is a typo (a step of 1e-9), not a study: each
# point is a whole simulation.
MAX_RATES = 10_000


RATES_ALLOWED = ("START:STOP:STEP or a comma list of rates in requests/s, e.g. 1:20:1 or "
                 "2,4,8")


def parse_rates(text: str, flag: str = "--rates") -> list[float]:
    """``START:STOP:STEP`` (inclusive of STOP) or a comma list, in requests/s, ascending;
    every rate within [:data:`~sim.study.rates.MIN_RATE`, :data:`~sim.study.rates.MAX_RATE`]."""
    try:
        if ":" in text:
            rates = _range_rates(text, flag)
        else:
            rates = [ascii_float(x) for x in comma_items(text, flag, RATES_ALLOWED)]
    except ValueError:
        raise ServesimError(f"{flag} {text}: expected {RATES_ALLOWED}") from None
    for r in rates:
        why = rate_problem(r)
        if why is not None:
            raise ServesimError(f"{flag} {text}: rate {r:g} {why}; {RATE_RANGE}")
    if len(set(rates)) != len(rates):
        raise ServesimError(f"{flag} {text}: a rate is given twice")
    if len(rates) > MAX_RATES:
        raise ServesimError(f"{flag}: {len(rates):,} rates; at most {MAX_RATES:,}")
    return sorted(rates)


def _range_rates(text: str, flag: str) -> list[float]:
    """The rates of ``START:STOP:STEP``; each part's fault named on its own."""
    parts = [ascii_float(x) for x in text.split(":")]
    if len(parts) != 3:
        raise ValueError
    start, stop, step = parts
    for name, v in zip(("START", "STOP", "STEP"), parts, strict=True):
        if not math.isfinite(v):
            raise ServesimError(f"{flag} {text}: {name} must be a finite number of "
                                "requests/s")
    for name, v in (("START", start), ("STOP", stop)):
        why = rate_problem(v)
        if why is not None:
            raise ServesimError(f"{flag} {text}: {name} {v:g} {why}; {RATE_RANGE}")
    if stop < start:
        raise ServesimError(f"{flag} {text}: STOP {stop:g} is below START {start:g}")
    if step <= 0:
        raise ServesimError(f"{flag} {text}: STEP must be greater than 0 requests/s")
    n = math.floor((stop - start) / step + 1e-9) + 1
    if n > MAX_RATES:
        raise ServesimError(f"{flag} {text}: {n:.4g} rates; at most {MAX_RATES:,} "
                            "(a larger STEP, or fewer points)")
    # Rounding keeps 0.1-steps from drifting into 0.30000000000000004.
    return [round(start + i * step, 9) for i in range(n)]


def parse_ints(text: str, flag: str) -> list[int]:
    """A comma list of positive integers (replicas, tp degrees)."""
    allowed = "a comma list of positive integers, e.g. 1,2,4"
    try:
        vals = [ascii_int(x) for x in comma_items(text, flag, allowed)]
    except ValueError:
        raise ServesimError(f"{flag} {text}: expected {allowed}") from None
    if not vals or any(v < 1 for v in vals) or len(set(vals)) != len(vals):
        raise ServesimError(f"{flag} {text}: expected distinct positive integers, e.g. 1,2,4")
    return vals


def parse_names(text: str, flag: str) -> list[str]:
    """A comma list of distinct policy names, each one the registry knows (an unknown one
    is named with the valid ones, in one line, before any point is built)."""
    from sim.policies.registry import POLICIES

    allowed = "distinct names separated by commas"
    vals = comma_items(text, flag, allowed)
    if not vals or len(set(vals)) != len(vals):
        raise ServesimError(f"got {text!r}: expected {allowed}", where=flag)
    unknown = [v for v in vals if v not in POLICIES]
    if unknown:
        raise ServesimError(f"got {text!r}: unknown policy {unknown[0]!r}; valid: "
                            f"{', '.join(sorted(POLICIES))}", where=flag)
    return vals


def add_execution_args(p: argparse.ArgumentParser) -> None:
    """Flags shared by ``sweep`` and ``capacity``: scenario overrides and where points run."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key, e.g. --set workload.num_requests=2000")
    p.add_argument("--backend", default="local", choices=("local", "ray"),
                   help="local process pool (default) or a Ray cluster")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="Ray cluster address (ray://host:10001 or auto); default: local Ray")
    p.add_argument("--workers", type=int_arg(ge=1, le=MAX_WORKERS), default=None,
                   help="parallel simulations (default: all cores)")
    # Past a million spans the cut only ever falls at the simulated clock's limit.
    p.add_argument("--horizon-factor", type=float_arg(gt=0, le=1e6), default=4.0,
                   help="cut each simulation at this many times its arrival span (+60 s) "
                        "unless the scenario sets horizon_s (default 4)")
    p.add_argument("--no-cache", action="store_true",
                   help="recompute every point instead of reusing cached results")
    p.add_argument("--quiet", action="store_true", help="no progress bar or table")
    p.add_argument("--json", action="store_true",
                   help="print the result as JSON on stdout instead of the table")
    p.add_argument("--force", action="store_true",
                   help="run points even when their estimated memory is over what this "
                        "machine has free")
    add_rejection_args(p)


def check_execution(a: argparse.Namespace) -> None:
    """Refuse execution flags that would be ignored: a Ray address is only for Ray."""
    if a.ray_address is not None and a.backend != "ray":
        raise ServesimError(f"--ray-address {a.ray_address}: only --backend ray joins a Ray "
                            f"cluster, and this run's backend is {a.backend}; add --backend "
                            "ray, or drop --ray-address")


def refuse_grid_overrides(a: argparse.Namespace, rates: bool) -> None:
    """Refuse a ``--set`` of what the grid sets for each point, dotted or inside a
    mapping (``serving={policy: static}``): the rate (where ``rates``), and the policy
    and replicas where ``--policies`` and ``--replicas`` are given. Each point would
    drop it, as compare's runs would (``--tp`` and ``--pp`` replace theirs, as
    documented)."""
    from sim.config.overrides import override_sets

    varied = [(k, "--rates") for k in ("workload.arrivals.rate", "workload.trace.target_rate")
              if rates]
    varied += [(k, flag) for k, flag, given in (("serving.policy", "--policies", a.policies),
                                                ("cluster.replicas", "--replicas", a.replicas))
               if given is not None]
    for o in a.overrides:
        for key, flag in varied:
            if override_sets(o, key):
                raise ServesimError(f"--set {o}: the sweep sets each point's rate (--rates)"
                                    if flag == "--rates" else
                                    f"--set {o}: {flag} sets {key} for each point, so the "
                                    "override would be lost; leave it out", where=None
                                    if flag == "--rates" else flag)


def grid_args(a: argparse.Namespace, sc: Scenario, flag_seeds: str = "--seeds") -> dict:
    """Policies, replicas, tp degrees and seeds from flags, defaulting to those of the
    base scenario ``sc`` (:func:`grid_base`)."""
    if sc.hardware.dp > 1:
        # Their GPU counts and tp grid are per replica of tp x pp GPUs; a group of ranks
        # would need ep to follow each tp as well.
        raise ServesimError(f"got hardware.dp {sc.hardware.dp}: sweep and capacity vary "
                            "tp, pp and replicas, not data-parallel attention ranks yet; "
                            "simulate each layout (servesim simulate, or compare)",
                            a.scenario, "hardware.dp")
    if a.seeds < 1:
        raise ServesimError(f"{flag_seeds} {a.seeds}: must be at least 1")
    # An empty list is an error (parse_*), not the scenario's value.
    policies = (parse_names(a.policies, "--policies") if a.policies is not None
                else [sc.serving.policy])
    if "disaggregated" in policies:
        for flag, given, key in (("--tp", a.tp, "tp"), ("--replicas", a.replicas, "replicas")):
            refuse_pinned(sc, flag, given, key)
    if a.horizon_factor is not None and not a.horizon_factor > 0:
        raise ServesimError(f"--horizon-factor {a.horizon_factor}: must be greater than 0")
    return {
        "policies": policies,
        "replicas": parse_ints(a.replicas, "--replicas") if a.replicas is not None
        else [sc.cluster.replicas],
        "tps": parse_ints(a.tp, "--tp") if a.tp is not None else [sc.hardware.tp],
        "pps": parse_ints(a.pp, "--pp") if getattr(a, "pp", None) is not None
        else [sc.hardware.pp],
        "seeds": [sc.workload.seed + i for i in range(a.seeds)],
    }


def grid_sets(a: argparse.Namespace, raw: Any) -> list[str]:
    """The ``--set`` overrides that put a sweep's or capacity search's base scenario at
    the first of ``--tp`` and ``--pp``, each where the scenario ``raw`` (parsed, overrides
    applied) gives it (:func:`sim.config.flagaxes.axis_key`: ``hardware.tp``, or a pasted
    vLLM flag), so that the base is the scenario as the grid runs it and its own tp need
    not fit (a 70B model at ``--tp 4,8`` from a scenario of one GPU)."""
    from sim.config.flagaxes import axis_key

    return [f"{axis_key(raw, key)}={parse_ints(given, flag)[0]}"
            for key, flag, given in (("tp", "--tp", a.tp), ("pp", "--pp", getattr(a, "pp", None)))
            if given is not None]


def grid_base(a: argparse.Namespace) -> tuple[dict[str, Any], Scenario]:
    """The raw base scenario of a sweep or capacity search, its ``--set`` overrides and
    :func:`grid_sets` applied, and the scenario it validates to; an error that the first
    of ``--tp`` or ``--pp`` decides names the flag."""
    from sim.config.overrides import apply_overrides, load_raw

    path = Path(a.scenario)
    raw = load_raw(path, a.overrides)
    if not isinstance(raw, dict):
        raise ServesimError("expected a mapping at the top level", str(path))
    sets = grid_sets(a, raw)
    base = apply_overrides(raw, sets) if sets else raw
    try:
        sc = from_dict(base, str(path), path.parent.resolve())
    except ServesimError as exc:
        given = [f"{flag} {v}" for flag, v in (("--tp", a.tp), ("--pp", getattr(a, "pp", None)))
                 if v is not None]
        # Only what the degrees decide: the heads' split, the fit in memory, a pool.
        if not sets or not str(exc.where or "").startswith(
                ("hardware", "vllm", "disaggregated")):
            raise
        raise ServesimError(f"{exc.message} (the first of {' and '.join(given)})",
                            exc.source, exc.where) from None
    return base, sc


def refuse_pinned(sc: Scenario, flag: str, given: Any, key: str,
                  what: str = "the flag") -> None:
    """Refuse an axis ``flag`` (given: not None) that varies ``hardware.key`` or
    ``cluster.key`` where both disaggregated pools set ``key`` themselves: every point
    would run the same pools under different labels. ``what`` varies the key, for the
    message."""
    pinned = sc.disaggregated.pinned(key)
    if given and pinned is not None:
        raise ServesimError(f"got {given}: the disaggregated pools set their own {key} "
                            f"({pinned}), so {what} would change no pool; leave {key} out "
                            "of one or both pools to let it, or vary the pools with --set",
                            where=flag)


def refuse_fixed_outages(sc: Scenario, source: str) -> None:
    """A capacity search first finds each candidate's highest rate on one replica:
    refuse a planned outage of another replica, which that search has no replica to
    strike (the check of cluster sizes alone would name one replica, not the search's
    reason). Random failures (per replica) and outages of replica 0 are measured."""
    for k, o in enumerate(sc.faults.outages):
        if o.replica > 0:
            raise ServesimError(f"got replica {o.replica}: capacity measures each "
                                "candidate's highest rate on one replica (replica 0) before "
                                "sizing the cluster, so a planned outage of another replica "
                                "has none to strike there; size spares with --redundancy K "
                                "(the target met with K replicas down), or run simulate or "
                                "sweep on the whole cluster", source,
                                f"faults.outages[{k}].replica")
