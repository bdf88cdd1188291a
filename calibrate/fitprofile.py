"""The fit half of a calibration: from its measurements to the profile it writes.

A run (calibrate.run) measures, then calls :func:`fit_profile`; a refit
(calibrate.refit) reads a run's CSV and its ``.meta.json`` back into the same
:class:`Measured` and calls it too, so the two write the same profile from the same
numbers.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

from calibrate.calresult import BARS, CalibrationConfig, CalibrationResult
from calibrate.fitsteps import fit_steps_in_situ, knots_note, layer_mean, sweep_knots
from calibrate.grids import OPERATORS
from calibrate.output import (
    measurements_path,
    settle,
    staging_path,
    write_csv,
    write_meta,
    write_profile,
)
from calibrate.records import Measurement
from sim.cost.curves import Knots
from sim.cost.gpus import GPUS
from sim.cost.profile import FORMS
from sim.cost.profilecost import ProfileCost
from sim.cost.profilefit import MIN_TEST, FitResult, allreduce_coefs, fit_component
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


@dataclass
class Measured:
    """Everything a calibration measured and needs to fit: the model (in the run's
    dtype), the device's figures, the GPU-table entry priced for all-reduces, the
    layers the whole steps ran at, the operator, host and wake points (``ops``), the
    whole steps, the wake term (seconds) and its fit, the notes so far, and how the
    run ended. ``elapsed_s`` is the measuring's own wall-clock seconds."""

    model: ModelSpec
    info: dict[str, Any]
    gpu_key: str | None
    layers: int
    table_max: int
    ops: list[Measurement]
    steps: list[Measurement]
    wake: dict[str, float] | None = None
    wake_fit: dict[str, float] | None = None
    notes: list[str] = field(default_factory=list)
    stopped: bool = False          # the operator sweep's first pass was cut short
    stopped_steps: bool = False    # the whole steps' first round was cut short
    interrupted: bool = False      # a SIGINT ended the whole steps
    elapsed_s: float = 0.0


def run_meta(cfg: CalibrationConfig, m: Measured) -> dict[str, Any]:
    """What a refit needs beside the CSV: the run's settings, the device's figures, the
    layers the whole steps ran at, the notes of the measuring and how it ended."""
    return {"model": dataclasses.asdict(m.model), "device": cfg.device, "tp": cfg.tp,
            "gpu": cfg.gpu, "quick": cfg.quick, "budget_s": cfg.budget_s, "seed": cfg.seed,
            "passes": cfg.passes, "gpu_key": m.gpu_key, "info": m.info, "layers": m.layers,
            "table_max": m.table_max, "stopped": m.stopped, "stopped_steps": m.stopped_steps,
            "interrupted": m.interrupted, "notes": m.notes, "elapsed_s": round(m.elapsed_s, 3)}


def grid_name(cfg: CalibrationConfig) -> str:
    """Name of the grid used, recorded in the profile."""
    return f"{cfg.device}-{'quick' if cfg.quick else 'full'}"


def _component_fits(m: Measured, notes: list[str]) -> dict[str, FitResult]:
    """Each operator's (and the host work's) fit; each fitted point's split set."""
    fits: dict[str, FitResult] = {}
    for name in OPERATORS + ("host",):
        good = [p for p in m.ops if p.point.component == name and p.status == "ok"]
        if name == "host" and not good:
            continue
        good, ys = layer_mean(m.model, good, m.ops) if name == "linear" else (
            good, [p.timing.median_s for p in good if p.timing])
        fits[name] = fit_component(name, [p.shape for p in good], ys, m.table_max)
        if name == "linear" and m.model.experts:
            formula = fits[name]
            fits[name] = sweep_knots(formula, good, ys)
            notes.append(knots_note(fits[name], formula))
        for p, role in zip(good, fits[name].roles, strict=True):
            p.split = role
    return fits


def fit_profile(cfg: CalibrationConfig, m: Measured, refit_of: str | None = None
                ) -> CalibrationResult:
    """Fit every component on ``m``, fit the in-situ term on its whole steps, write the
    CSV (splits filled in), its settings (:func:`run_meta`) and the profile ``cfg.out``;
    a fit that cannot be made is a :class:`ServesimError` naming the CSV, which is
    written first. ``refit_of``: the CSV a refit read, named in the profile's notes."""
    t0 = time.perf_counter()
    csv_path = staging_path(cfg.out)
    write_meta(csv_path, run_meta(cfg, m))
    model, notes = m.model, list(m.notes)
    if refit_of:
        notes.append(f"refitted without a device from {refit_of}")
    try:
        fits = _component_fits(m, notes)
    except ServesimError as exc:
        write_csv(csv_path, m.ops)
        raise ServesimError(f"{exc}; measurements kept in {csv_path}") from None
    coefs: dict[str, dict[str, float]] = {n: f.coef for n, f in fits.items()}
    # A ring of more GPUs than one node holds crosses the network (GPUSpec.tp_link).
    link_bw, link_s = GPUS[m.gpu_key].tp_link(cfg.tp) if m.gpu_key else (1.0, 0.0)
    coefs["allreduce"] = allreduce_coefs(model.layers, model.hidden, model.act_bytes, cfg.tp,
                                         link_bw, link_s)
    coefs["in_situ"] = dict.fromkeys(FORMS["in_situ"].coefs, 0.0)
    coefs.setdefault("host", dict(FORMS["host"].defaults))
    cost = ProfileCost(model, cfg.tp, m.info["name"], model.dtype, coefs,
                       knots={n: Knots(f.table_at, f.table) if f.table_at else f.table
                              for n, f in fits.items() if f.table},
                       wake=m.wake)
    if m.layers < model.layers:
        notes.append(f"whole steps timed at {m.layers} of {model.layers} layers (memory)")
    if m.stopped_steps:
        notes.append(f"budget exhausted: {len(m.steps)} whole steps timed")
    done = [s for s in m.steps if s.status == "ok" and s.timing]
    if len(done) < 2 * MIN_TEST:
        write_csv(csv_path, m.ops + m.steps)
        raise ServesimError(f"only {len(done)} whole steps timed, need {2 * MIN_TEST}; "
                            f"raise --budget-s; measurements kept in {csv_path}")
    fits["in_situ"], errs, base_errs = fit_steps_in_situ(cost, m.layers, done)
    # A cost picks the components it prices when it is built: rebuilt, it prices the
    # in_situ term just fitted, as the profile written below will.
    cost = cost.replace(coefs=cost.coefs)
    skipped = [s for s in m.ops + m.steps if s.status != "ok"]
    notes += [f"skipped {s.point.component} {s.point.label}: {s.note}" for s in skipped]
    notes.append(f"operators alone (no in_situ term) on the whole steps: mean error "
                 f"{base_errs.mean():.1%}, worst {base_errs.max():.1%}")
    bar = BARS["cuda" if cfg.device == "cuda" else "cpu"]
    result = CalibrationResult(cfg.out, measurements_path(cfg.out), cost, fits, m.ops + m.steps,
                               float(errs.mean()), float(errs.max()),
                               m.elapsed_s + time.perf_counter() - t0,
                               m.stopped or m.stopped_steps or m.interrupted, bar, notes,
                               m.wake_fit, m.interrupted, refit_of)
    write_csv(csv_path, result.measurements)
    write_profile(cfg, result, m.info, m.layers, bar, grid_name(cfg))
    settle(csv_path, result.csv_path)
    return result
