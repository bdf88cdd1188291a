"""Write a calibration's results: the profile YAML (schema in docs/cost-model.md) and its CSV.

The YAML is small and is all the simulator reads; the CSV beside it keeps every
timing sample of every point, for audit and refitting.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from calibrate.grids import DENSE_LINEAR, OPERATORS, WHOLE_STEP, Point
from calibrate.records import Measurement, Timing
from sim.cost.profile import FORMS, WAKE_FORMULA
from sim.cost.profilekeys import SCHEMA
from sim.errors import ServesimError

if TYPE_CHECKING:
    from calibrate.calresult import CalibrationConfig, CalibrationResult

CSV_COLUMNS = ("component", "label", "status", "split", "graph", "seqs", "new_tokens",
               "context_tokens", "prefill_seqs", "prefill_tokens", "prefill_pairs", "decode_kv",
               "median_s", "mean_s", "p10_s", "p90_s", "repeats", "predicted_s", "note", "entries",
               "samples_s")


def _g(x: float) -> str:
    return f"{x:.6g}"


def write_csv(path: Path, rows: list[Measurement]) -> None:
    """One row per point, with every timing sample (seconds, space-separated)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for m in rows:
            t = m.timing
            w.writerow([
                m.point.component, m.point.label, m.status, m.split,
                int(t.graph) if t else "", *m.shape,
                _g(t.median_s) if t else "", _g(t.mean_s) if t else "",
                _g(t.quantile(0.1)) if t else "",
                _g(t.quantile(0.9)) if t else "", len(t.samples) if t else 0,
                _g(m.predicted_s) if m.predicted_s is not None else "", m.note,
                " ".join(f"{n}:{c}" for n, c in m.point.entries),
                # Every digit: a refit from this file (calibrate.refit) fits the same numbers.
                " ".join(repr(s) for s in t.samples) if t else "",
            ])


def read_csv(path: Path) -> list[Measurement]:
    """The measurements :func:`write_csv` wrote to ``path`` (status, note, split and
    every sample; the summary columns are recomputed from the samples); a file that is
    not one is a one-line error naming it and the line."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as exc:
        raise ServesimError(f"cannot read it: {exc}", source=str(path)) from None
    if not rows or tuple(rows[0]) != CSV_COLUMNS:
        raise ServesimError(f"not a calibration CSV: expected the columns "
                            f"{', '.join(CSV_COLUMNS)}", source=str(path))
    col = {name: i for i, name in enumerate(CSV_COLUMNS)}
    out: list[Measurement] = []
    for line, r in enumerate(rows[1:], start=2):
        try:
            if len(r) != len(CSV_COLUMNS):
                raise ValueError(f"{len(r)} cells, expected {len(CSV_COLUMNS)}")
            entries = tuple((int(n), int(c)) for n, c in
                            (pair.split(":") for pair in r[col["entries"]].split()))
            samples = tuple(float(x) for x in r[col["samples_s"]].split())
            graph = r[col["graph"]] == "1"
            _check_row(r[col["component"]], r[col["status"]], samples)
        except ValueError as exc:
            raise ServesimError(f"not a measurement row ({exc})", source=str(path),
                                where=f"line {line}") from None
        point = Point(r[col["component"]], entries, r[col["label"]])
        out.append(Measurement(point, r[col["status"]],
                               Timing(samples, graph) if samples else None,
                               r[col["note"]], r[col["split"]]))
    return out


# What a calibration writes in the component and status columns.
COMPONENTS = (*OPERATORS, DENSE_LINEAR, WHOLE_STEP, "host", "wake")
STATUSES = ("ok", "oom", "error")


def _check_row(component: str, status: str, samples: tuple[float, ...]) -> None:
    """Raise ValueError (the reason) unless the row is one a calibration writes: a known
    component and status, and, when ``ok``, timings that are seconds above zero."""
    if component not in COMPONENTS:
        raise ValueError(f"component {component!r}, expected one of {', '.join(COMPONENTS)}")
    if status not in STATUSES:
        raise ValueError(f"status {status!r}, expected one of {', '.join(STATUSES)}")
    if status == "ok" and not samples:
        raise ValueError("status ok but no samples_s")
    bad = next((x for x in samples if not (math.isfinite(x) and x > 0)), None)
    if bad is not None:
        raise ValueError(f"samples_s holds {bad!r}, expected seconds above 0")


META_SCHEMA = "servesim-calibration-meta/1"


def meta_path(csv_path: Path) -> Path:
    """Where a calibration CSV's settings are kept: ``NAME.csv.meta.json`` beside it."""
    return csv_path.with_name(csv_path.name + ".meta.json")


def measurements_path(out: Path) -> Path:
    """The measurements CSV of the profile ``out``: ``NAME.csv`` beside ``NAME.yaml``."""
    return out.with_suffix(".csv")


def staging_path(out: Path) -> Path:
    """Where a calibration or refit writing the profile ``out`` keeps its measurements
    (and their settings beside them) until the profile is written: ``NAME.partial.csv``.
    A run that fails or is stopped leaves them there, refittable, and the measurements
    of a profile already at ``out`` stay with it."""
    return out.with_name(out.stem + ".partial.csv")


def settle(staging: Path, final: Path) -> None:
    """Move the measurements at ``staging`` and their settings to ``final``."""
    os.replace(staging, final)
    os.replace(meta_path(staging), meta_path(final))


def is_calibration_file(path: Path) -> bool:
    """Whether ``path`` is a calibration's measurements CSV (its header row) or their
    settings (their schema), the files ``calibrate --out`` may replace."""
    try:
        with path.open("rb") as f:
            data = f.read((1 << 20) + 1)  # settings are a few kB; a CSV is read for its header
        first = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8")
        if first == ",".join(CSV_COLUMNS):
            return True
        meta = json.loads(data.decode("utf-8")) if len(data) <= 1 << 20 else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("schema") == META_SCHEMA


def write_meta(csv_path: Path, meta: dict[str, Any]) -> None:
    """Write the run's settings and how far it got beside its CSV (JSON, sorted keys)."""
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    meta_path(csv_path).write_text(
        json.dumps({"schema": META_SCHEMA, **meta}, indent=1, sort_keys=True) + "\n",
        encoding="utf-8")


def read_meta(csv_path: Path) -> dict[str, Any]:
    """The settings :func:`write_meta` kept beside ``csv_path``; one-line errors."""
    path = meta_path(csv_path)
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ServesimError(f"no {path.name} beside it: a refit needs the run's settings, "
                            "which calibrations write there since 2026-12-04",
                            source=str(csv_path)) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ServesimError(f"cannot read it: {exc}", source=str(path)) from None
    if not isinstance(meta, dict) or meta.get("schema") != META_SCHEMA:
        raise ServesimError(f"not a calibration's settings: expected schema {META_SCHEMA!r}",
                            source=str(path))
    return meta


def _num(x: float) -> float | None:
    # YAML has no portable NaN; a missing error (too few points) is written as null.
    return None if math.isnan(x) else float(f"{x:.6g}")


def profile_dict(cfg: CalibrationConfig, res: CalibrationResult, device: dict[str, Any],
                 layers_checked: int, bar: float, grid: str) -> dict[str, Any]:
    """The profile as a plain mapping, in schema order."""
    comps: dict[str, Any] = {}
    for name, form in FORMS.items():
        entry: dict[str, Any] = {"formula": form.formula, "per_layer": form.per_layer,
                                 "coef": {k: float(f"{v:.6g}") for k, v in
                                          res.cost.coefs[name].items()}}
        knots = res.cost.knots.get(name)
        if knots is not None:
            entry["table_s"] = [float(f"{v:.6g}") for v in knots.ys]
            if name not in res.cost.tables:  # knots at chosen counts (a MoE linear stack)
                entry["table_at"] = [float(f"{v:.6g}") for v in knots.xs]
        fit = res.fits.get(name)
        if fit is not None:
            entry["fit"] = {"source": "measured", "mape_test": _num(fit.mape_test),
                            "max_err_test": _num(fit.max_err_test),
                            "mape_train": _num(fit.mape_train),
                            "n_train": fit.n_train, "n_test": fit.n_test,
                            "passed": bool(fit.mape_test <= bar)}
        elif name == "allreduce":
            entry["fit"] = {"source": "datasheet" if cfg.tp > 1 else "none (tp=1)"}
        else:
            entry["fit"] = {"source": "not measured"}
        comps[name] = entry
    if res.cost.wake and res.wake_fit is not None:
        comps["wake"] = {"formula": WAKE_FORMULA, "per_layer": False,
                         "coef": {k: float(f"{v:.6g}") for k, v in res.cost.wake.items()},
                         "fit": {"source": "measured", "points": int(res.wake_fit["points"]),
                                 "mean_abs_err_s": _num(res.wake_fit["mean_abs_err_s"])}}
    # Whole steps are cross-validated (calibrate/run.py): each was predicted by an in_situ
    # fitted without it, and the kept coefficients are fitted on all of them.
    steps = [m for m in res.measurements if m.split in ("cv-a", "cv-b")
             and m.predicted_s is not None]
    fit_steps = len(steps)
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "dtype": res.cost.dtype,
        "tp": cfg.tp,
        "model": dataclasses.asdict(res.cost.model),
        "components": comps,
        "validation": {
            "whole_steps": len(steps), "fit_steps": fit_steps, "layers": layers_checked,
            "mape": _num(res.step_mape), "max_err": _num(res.step_max_err), "bar": bar,
            "passed": bool(res.step_mape <= bar),
        },
        "calibration": {
            "grid": grid, "budget_s": cfg.budget_s, "elapsed_s": round(res.elapsed_s, 2),
            "stopped_early": res.stopped_early,
            "points": len(res.measurements),
            "points_skipped": sum(m.status != "ok" for m in res.measurements),
            "notes": res.notes,
        },
        "measurements": res.csv_path.name,
    }


def write_profile(cfg: CalibrationConfig, res: CalibrationResult, device: dict[str, Any],
                  layers_checked: int, bar: float, grid: str) -> None:
    """Write the profile YAML at ``res.profile_path``."""
    data = profile_dict(cfg, res, device, layers_checked, bar, grid)
    res.profile_path.parent.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(data, sort_keys=False, width=100)
    res.profile_path.write_text(f"# servesim cost profile, written by calibrate\n{text}",
                                encoding="utf-8")
