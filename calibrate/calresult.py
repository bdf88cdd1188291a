"""What a calibration takes and what it gives: its configuration and its result.

Apart from calibrate.run so that the fit (calibrate.fitprofile), which both a run and a
refit from a saved CSV call, and the output writers can name them without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from calibrate.records import Measurement
from calibrate.rounds import RoundsConfig
from sim.cost.profilecost import ProfileCost
from sim.cost.profilefit import FitResult
from sim.cost.specs import ModelSpec

# Held-out component MAPE and whole-step error bars (fractions) by device type.
BARS = {"cpu": 0.10, "cuda": 0.05}


@dataclass(frozen=True)
class CalibrationConfig:
    """Everything one calibration needs; ``budget_s`` is wall-clock seconds for the run."""

    model: ModelSpec
    out: Path
    device: str = "cpu"
    dtype: str | None = None       # default: the model's dtype on CUDA, fp32 on CPU
    tp: int = 1
    budget_s: float = 600.0
    quick: bool = False
    gpu: str | None = None         # hardware-table entry for all-reduce figures when tp > 1
    threads: int = 1               # CPU only; see DESIGN.md on why 1
    progress: bool = True
    seed: int = 0
    passes: int = 2                # sweeps over every operator point; each keeps its fastest
    rounds: RoundsConfig = RoundsConfig()  # how whole steps are timed (calibrate.rounds)


@dataclass
class CalibrationResult:
    """What a run produced: the profile, its measurements, fits and whole-step errors."""

    profile_path: Path
    csv_path: Path
    cost: ProfileCost
    fits: dict[str, FitResult]
    measurements: list[Measurement]
    step_mape: float
    step_max_err: float
    elapsed_s: float
    stopped_early: bool
    bar: float = BARS["cpu"]
    notes: list[str] = field(default_factory=list)
    # The wake term's fit: points (prompt x idle spell) and mean absolute error, seconds.
    wake_fit: dict[str, float] | None = None
    interrupted: bool = False  # a SIGINT ended the whole steps; fitted on what was timed
    refit_of: str | None = None  # the CSV a refit (calibrate.refit) fitted, else None
