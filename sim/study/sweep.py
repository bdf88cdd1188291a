"""``servesim sweep``: a grid of simulations over request rate, policy, replicas, tp and seed.

Outputs in ``--out`` (default ``out/<scenario name>-sweep``):

- ``points.csv``: one row per simulation (grid point x seed), metrics in seconds,
  requests/s and output tokens/s.
- ``sweep.csv``: one row per grid point; each metric is the mean over seeds and
  ``<metric>_ci`` the half-width of its 95% Student-t confidence interval (empty with
  one seed).
- ``sweep.json``: what was swept and the resolved base scenario (``simulated``, for
  ``servesim report``); PNG plots (:mod:`sim.report.plots`).
- ``points.csv.meta.json``, ``sweep.csv.meta.json``: each column's unit and meaning
  (:mod:`sim.report.csvmeta`: latencies in seconds, ``_s``, as in every CSV).
- ``cache/``: one JSON per finished simulation, keyed by a hash of its scenario; a sweep
  run again (after an interrupt, or with more rates) skips every point found there.

Everything but the cache is written into a temporary folder that replaces ``--out``
whole at the end (:mod:`sim.report.folder`); the cache is written in place as points
finish, so an interrupt keeps them, and carried into the new folder.

Both CSVs are written in grid order with exact float text, so the same inputs give
byte-identical files whatever the number of workers or the order points finished in.
The command line: :mod:`sim.study.sweepcli`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.scenario import from_dict, input_files
from sim.errors import ServesimError
from sim.report.csvmeta import csv_header, internal_name
from sim.report.folder import check_replaceable, replaced_folder
from sim.report.outputs import write_atomic, write_meta
from sim.report.slospec import SLO
from sim.study.pointrun import PointCache, RunStats, point_words, run_points
from sim.study.rates import (
    arrived,
    empty_point_error,
)
from sim.study.steady import STEADY_COLUMNS, Steady
from sim.study.sweeppoint import (
    KEY_COLUMNS,
    METRIC_COLUMNS,
    PointKey,
    PointTask,
    cost_source,
    describe_base,
    make_task,
    shape_memory,
)
from sim.study.traceplan import TracePlan

GROUP_COLUMNS = ("policy", "replicas", "tp", "pp", "rate")
Row = dict[str, Any]


@dataclass
class SweepSpec:
    """A sweep: the scenario (raw mapping), the grid, and the targets to draw."""

    raw: dict[str, Any]
    source: str
    base_dir: Path | None
    rates: list[float]
    policies: list[str]
    replicas: list[int]
    tps: list[int]
    seeds: list[int]
    slos: list[SLO] = field(default_factory=list)
    pps: list[int] = field(default_factory=lambda: [1])  # pipeline stages per replica
    horizon_factor: float | None = 4.0
    steady: Steady | None = None  # steady-state measurement of every point
    plan: TracePlan | None = None  # a trace's replications: each seed its own stretch
    overrides: list[str] = field(default_factory=list)  # --set, already applied to raw

    def keys(self) -> list[PointKey]:
        """Every simulation of the grid, in output order (rate innermost, then seed)."""
        return [PointKey(p, r, t, rate, s, pp) for p in self.policies for r in self.replicas
                for t in self.tps for pp in self.pps for rate in self.rates
                for s in self.seeds]

    def tasks(self) -> list[PointTask]:
        """The grid's runnable points (each validated; errors name the point)."""
        out = []
        steady = self.steady
        if steady is not None and self.plan is not None:
            # A replication never grows into the next one's stretch of the trace.
            steady = replace(steady, max_requests=min(steady.max_requests, self.plan.segment))
        for k in self.keys():
            start = self.start_row(k.seed)
            try:
                out.append(make_task(self.raw, self.source, self.base_dir, k,
                                     self.horizon_factor, steady, start))
            except ServesimError as exc:
                raise ServesimError(f"{exc} ({point_words(k, start)})") from None
        return out

    def start_row(self, seed: int) -> int:
        """The trace row the replication of ``seed`` starts at (0 without a plan)."""
        return 0 if self.plan is None else self.plan.start_row(self.seeds.index(seed))


def ci95(values: list[float]) -> tuple[float | None, float | None]:
    """Mean and 95% Student-t half-width of ``values`` (None half-width for fewer than 2)."""
    if not values:
        return None, None
    a = np.asarray(values, dtype=float)
    mean = float(a.mean())
    if a.size < 2:
        return mean, None
    from scipy.stats import t

    half = float(t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size))
    return mean, half


def aggregate(rows: list[Row]) -> list[Row]:
    """One row per grid point (rows of equal policy, replicas, tp, pp, rate), in first-seen order:
    ``seeds``, and per metric its mean over seeds and ``<metric>_ci``."""
    groups: dict[tuple[Any, ...], list[Row]] = {}
    for r in rows:
        groups.setdefault(tuple(r[c] for c in GROUP_COLUMNS), []).append(r)
    out = []
    for g, members in groups.items():
        agg: Row = dict(zip(GROUP_COLUMNS, g, strict=True))
        agg["seeds"] = len(members)
        for m in METRIC_COLUMNS:
            mean, half = ci95([r[m] for r in members if r[m] is not None])
            agg[m], agg[f"{m}_ci"] = mean, half
        out.append(agg)
    return out


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)


def to_csv(rows: list[Row], columns: list[str]) -> bytes:
    """Rows as CSV text; floats as their shortest exact repr, missing values empty; the
    header names each column with its unit (:func:`sim.report.csvmeta.csv_header`)."""
    lines = [",".join(csv_header(c) for c in columns)]
    lines += [",".join(_cell(r.get(c)) for c in columns) for r in rows]
    return ("\n".join(lines) + "\n").encode()


def read_csv(path: Path) -> list[Row]:
    """A CSV written by :func:`to_csv` back as rows (numbers as float, empty as None)."""
    return csv_rows(path.read_text())


def csv_rows(text: str) -> list[Row]:
    """The text of a CSV written by :func:`to_csv` as rows (numbers as float, empty as
    None)."""
    lines = text.splitlines()
    head = [internal_name(c) for c in lines[0].split(",")]
    out = []
    for line in lines[1:]:
        row: Row = {}
        for c, v in zip(head, line.split(","), strict=True):
            if v == "":
                row[c] = None
            else:
                try:
                    row[c] = float(v)
                except ValueError:
                    row[c] = v
        out.append(row)
    return out


POINT_COLUMNS = [*KEY_COLUMNS, *METRIC_COLUMNS]
# What marks a folder as a sweep's outputs (one interrupted before writing holds cache/).
SWEEP_FILES = ("sweep.json", "points.csv", "sweep.csv")
SWEEP_COLUMNS = [*GROUP_COLUMNS, "seeds", *(c for m in METRIC_COLUMNS for c in (m, f"{m}_ci"))]


@dataclass
class SweepResult:
    """Rows of a finished sweep and the files written."""

    points: list[Row]
    grid: list[Row]
    paths: list[Path]
    stats: RunStats


def run_sweep(spec: SweepSpec, out: Path, backend: str = "local", workers: int | None = None,
              address: str | None = None, progress: bool = False, plots: bool = True,
              use_cache: bool = True, force: bool = False) -> SweepResult:
    """Run (or resume) ``spec`` and write its CSVs, manifest and plots into a temporary
    folder that then replaces ``out`` whole; the cache, ``out/cache``, is written in
    place as points finish (so an interrupt keeps them) and moved into the new folder."""
    tasks = spec.tasks()
    inputs = input_files(from_dict(spec.raw, spec.source, spec.base_dir))
    check_replaceable(out, SWEEP_FILES, inputs, ("cache",))
    cache = PointCache(out / "cache" if use_cache else None)
    stats = RunStats()
    rows = run_points(tasks, cache, backend, workers, address, progress, "sweep", stats,
                      force)
    refuse_empty(spec, tasks, rows)
    points = [{**dict(zip(KEY_COLUMNS, t.key.values(), strict=True)), **rows[t.digest]}
              for t in tasks]
    grid = aggregate(points)
    names = ["points.csv", "sweep.csv", "sweep.json"]
    prices = cost_source(spec.raw, spec.source, spec.base_dir)
    manifest = sweep_manifest(spec, prices)
    scenario_slo = manifest["scenario_slo"]
    cols = POINT_COLUMNS + list(STEADY_COLUMNS if spec.steady is not None else ())
    simulated = describe_base(spec.raw, spec.source, spec.base_dir, prices, spec.overrides)
    manifest["simulated"] = simulated
    # What each shape's replicas hold: the rate, seed and replica count change none of it
    # (the grid's first count is one its scenario accepts: faults may name a replica).
    manifest["memory"] = [
        {"policy": p, "tp": t, "pp": pp,
         "memory": shape_memory(spec.raw, spec.source, spec.base_dir,
                                PointKey(p, spec.replicas[0], t, spec.rates[0], spec.seeds[0],
                                         pp))}
        for p in spec.policies for t in spec.tps for pp in spec.pps]
    varied = {k: manifest[k] for k in ("policies", "replicas", "tp", "pp", "rates", "seeds")}
    with replaced_folder(out, SWEEP_FILES, carry=("cache",), inputs=inputs) as stage:
        write_atomic(stage / names[0], to_csv(points, cols))
        write_atomic(stage / names[1], to_csv(grid, SWEEP_COLUMNS))
        for csv_name, rows_are, columns in (
                (names[0], "one row per simulation (grid point x seed)", cols),
                (names[1], "one row per grid point: each metric the mean over its seeds",
                 SWEEP_COLUMNS)):
            names.append(write_meta(stage / csv_name, rows_are, [csv_header(c) for c in columns],
                                    simulated, varied).name)
        if plots:
            from sim.report import plots as sp

            files = [p.name for p in sp.sweep_plots(grid, spec.slos, scenario_slo, stage)]
            manifest["plots"] = files
            names += files
        write_atomic(stage / names[2],
                     (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return SweepResult(points, grid, [out / n for n in names], stats)


def refuse_empty(spec: SweepSpec, tasks: list[PointTask],
                 rows: dict[str, dict[str, float | None]]) -> None:
    """Refuse a grid with a point none of whose requests arrived: its row would pass for
    a measurement. (The rate check made before the run cannot see every such window: a
    trace whose first arrival comes late, a Poisson draw with none in it.)"""
    for t in tasks:
        if not arrived(rows[t.digest]):
            raise empty_point_error(spec.raw, t.key.rate,
                                    point_words(t.key, spec.start_row(t.key.seed)))


def sweep_manifest(spec: SweepSpec, prices: str) -> dict[str, Any]:
    """``sweep.json`` but for its ``simulated`` scenario and its plots: what was swept."""
    manifest: dict[str, Any] = {
        "kind": "sweep", "scenario": str(spec.raw.get("name", "scenario")),
        "source": spec.source, "rates": spec.rates,
        "policies": spec.policies, "replicas": spec.replicas, "tp": spec.tps,
        "pp": spec.pps, "seeds": spec.seeds, "horizon_factor": spec.horizon_factor,
        "slo_targets": [{"metric": s.metric, "stat": s.stat, "limit_s": s.limit_s}
                        for s in spec.slos],
        "scenario_slo": {k: v for k, v in (spec.raw.get("slo") or {}).items()
                         if v is not None},
        "cost_source": prices,
    }
    if spec.steady is not None:
        manifest["steady"] = {"warmup": spec.steady.warmup, "precision": spec.steady.precision,
                              "max_requests": spec.steady.max_requests,
                              "columns": list(spec.steady.columns)}
    if spec.plan is not None:
        manifest["trace_replications"] = {"replications": spec.plan.replications,
                                          "segment_rows": spec.plan.segment,
                                          "rows": spec.plan.rows, "note": spec.plan.note}
    return manifest


