"""A profile fitted again from a calibration's saved measurements, without a device.

A calibration writes every point it times to ``NAME.partial.csv`` (every sample, to
the last digit) and its settings to ``NAME.partial.csv.meta.json`` as it goes, renamed to
``NAME.csv`` and ``NAME.csv.meta.json`` with the profile, so a run cut short by a
hard time limit, or a profile written by an older fit, can be fitted again from them:
``servesim calibrate --refit NAME.csv --out NEW.yaml``. On a complete run's files the
refit writes the profile the run wrote (components, fits and errors; the notes add that
it is a refit), because it fits the same numbers with the same code
(:func:`calibrate.fitprofile.fit_profile`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from calibrate.calresult import CalibrationConfig, CalibrationResult
from calibrate.fitprofile import Measured, fit_profile
from calibrate.grids import WHOLE_STEP
from calibrate.output import meta_path, read_csv, read_meta
from calibrate.records import Measurement
from calibrate.wakefit import WakeTimes, fit_wake
from sim.configtools import build
from sim.cost.gpus import GPUS
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

KEYS = ("model", "device", "tp", "gpu", "quick", "budget_s", "seed", "passes", "gpu_key",
        "info", "layers", "table_max")


def _check(meta: dict[str, Any], where: str) -> None:
    """Each setting of the right kind, or a one-line error naming the key and value."""
    def bad(key: str, want: str) -> ServesimError:
        return ServesimError(f"{key}: got {meta.get(key)!r}, expected {want}", source=where)

    missing = [k for k in KEYS if k not in meta]
    if missing:
        raise ServesimError(f"the run's settings lack {', '.join(missing)}", source=where)
    for key in ("tp", "layers", "table_max", "passes"):
        if type(meta[key]) is not int or meta[key] < 1:
            raise bad(key, "a whole number of at least 1")
    if type(meta["seed"]) is not int:
        raise bad("seed", "a whole number")
    if meta["device"] not in ("cpu", "cuda"):
        raise bad("device", "cpu or cuda")
    if type(meta["quick"]) is not bool:
        raise bad("quick", "true or false")
    if type(meta["budget_s"]) not in (int, float) or not 0 < meta["budget_s"] < math.inf:
        raise bad("budget_s", "seconds greater than 0 (finite)")
    if meta["gpu"] is not None and not isinstance(meta["gpu"], str):
        raise bad("gpu", "a GPU name or null")
    if meta["gpu_key"] is not None and (not isinstance(meta["gpu_key"], str)
                                        or meta["gpu_key"] not in GPUS):
        raise bad("gpu_key", f"null or one of {', '.join(sorted(GPUS))}")
    if not isinstance(meta["info"], dict) or not isinstance(meta["info"].get("name"), str):
        raise bad("info", "the device's figures, with its name")
    notes = meta.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise bad("notes", "a list of strings")
    elapsed = meta.get("elapsed_s", 0.0)
    if type(elapsed) not in (int, float) or not 0 <= elapsed < math.inf:
        raise bad("elapsed_s", "seconds, at least 0 (finite)")


def wake_of(rows: list[Measurement]) -> tuple[dict[str, float] | None, dict[str, float] | None]:
    """The wake term and its fit from the CSV's ``wake`` rows (None, None without any)."""
    times = WakeTimes.from_measurements(rows)
    if not times.step_s:
        return None, None
    points = times.excess()
    wake, err = fit_wake(points)
    return wake, {"points": len(points), "mean_abs_err_s": err}


def refit(csv_path: Path, out: Path) -> CalibrationResult:
    """Fit ``csv_path``'s measurements (with the settings beside it) into the profile
    ``out``; its CSV and settings go beside it. One-line errors name the file."""
    if not csv_path.is_file():
        what = "a folder" if csv_path.is_dir() else "no such file"
        raise ServesimError(f"{what}: --refit takes the CSV a calibration wrote (its settings "
                            f"in {csv_path.name}.meta.json beside it)", source=str(csv_path))
    meta = read_meta(csv_path)
    where = str(meta_path(csv_path))
    _check(meta, where)
    rows = read_csv(csv_path)
    try:
        model = build(ModelSpec, meta["model"], "model")
    except ServesimError as exc:
        raise ServesimError(str(exc), source=where) from None
    if meta["layers"] > model.layers:
        # Whole steps are timed at the model's layers, or fewer where memory runs short.
        raise ServesimError(f"layers: got {meta['layers']}, more than the model's "
                            f"{model.layers} (model.layers); expected at most that",
                            source=where)
    cfg = CalibrationConfig(model=model, out=out, device=meta["device"], dtype=model.dtype,
                            tp=meta["tp"], budget_s=meta["budget_s"], quick=meta["quick"],
                            gpu=meta["gpu"], progress=False, seed=meta["seed"],
                            passes=meta["passes"])
    try:
        wake, wake_fit = wake_of(rows)
    except ServesimError as exc:
        raise ServesimError(str(exc), source=str(csv_path)) from None
    m = Measured(model, meta["info"], meta["gpu_key"], meta["layers"], meta["table_max"],
                 [r for r in rows if r.point.component != WHOLE_STEP],
                 [r for r in rows if r.point.component == WHOLE_STEP], wake, wake_fit,
                 list(meta.get("notes", [])), bool(meta.get("stopped")),
                 bool(meta.get("stopped_steps")), bool(meta.get("interrupted")),
                 float(meta.get("elapsed_s", 0.0)))
    return fit_profile(cfg, m, refit_of=csv_path.name)
