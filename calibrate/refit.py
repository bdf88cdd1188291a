"""A profile fitted again from a calibration's saved measurements, without a device.

A calibration writes every point it times to ``NAME.csv`` (every sample, to the last
digit) and its settings to ``NAME.csv.meta.json`` as it goes, so a run cut short by a
hard time limit, or a profile written by an older fit, can be fitted again from them:
``servesim calibrate --refit NAME.csv --out NEW.yaml``. On a complete run's files the
refit writes the profile the run wrote (components, fits and errors; the notes add that
it is a refit), because it fits the same numbers with the same code
(:func:`calibrate.fitprofile.fit_profile`).
"""

from __future__ import annotations

import re
from pathlib import Path

from calibrate.calresult import CalibrationConfig, CalibrationResult
from calibrate.fitprofile import Measured, fit_profile
from calibrate.grids import WHOLE_STEP
from calibrate.output import read_csv, read_meta
from calibrate.sweeps import Measurement
from calibrate.wake import WakeTimes, fit_wake
from sim.configtools import build
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# A wake row's label, as calibrate.wake.WakeTimes.measurements writes it.
WAKE_LABEL = re.compile(r"prefill (\d+) after ([0-9.e+-]+) ms idle")
KEYS = ("model", "device", "tp", "gpu", "quick", "budget_s", "seed", "passes", "gpu_key",
        "info", "layers", "table_max")


def wake_of(rows: list[Measurement]) -> tuple[dict[str, float] | None, dict[str, float] | None]:
    """The wake term and its fit from the CSV's ``wake`` rows (None, None without any)."""
    prompt: list[int] = []
    idle: list[float] = []
    step: list[float] = []
    for m in rows:
        if m.point.component != "wake" or m.timing is None:
            continue
        got = WAKE_LABEL.fullmatch(m.point.label)
        if got is None:
            raise ServesimError(f"a wake row's label {m.point.label!r} is not "
                                "'prefill N after T ms idle'")
        for s in m.timing.samples:
            prompt.append(int(got[1]))
            idle.append(float(got[2]) / 1e3)
            step.append(s)
    if not step:
        return None, None
    points = WakeTimes(tuple(prompt), tuple(idle), tuple(step)).excess()
    wake, err = fit_wake(points)
    return wake, {"points": len(points), "mean_abs_err_s": err}


def refit(csv_path: Path, out: Path) -> CalibrationResult:
    """Fit ``csv_path``'s measurements (with the settings beside it) into the profile
    ``out``; its CSV and settings go beside it. One-line errors name the file."""
    meta = read_meta(csv_path)
    missing = [k for k in KEYS if k not in meta]
    if missing:
        raise ServesimError(f"the run's settings lack {', '.join(missing)}",
                            source=str(csv_path) + ".meta.json")
    rows = read_csv(csv_path)
    model = build(ModelSpec, meta["model"], "model")
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
