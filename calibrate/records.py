"""What a calibration records of each point: its timing samples and outcome.

Kept apart from the timing itself (:mod:`calibrate.timing`, :mod:`calibrate.sweeps`),
which needs torch, so that reading a calibration's CSV and fitting it again
(:mod:`calibrate.refit`) runs on a machine without torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from calibrate.grids import Point
from sim.cost.shape import StepShape, shape_of


@dataclass(frozen=True)
class Timing:
    """Result of timing one callable: all in seconds."""

    samples: tuple[float, ...]
    graph: bool

    @property
    def median_s(self) -> float:
        """Median of the samples."""
        return statistics.median(self.samples)

    @property
    def mean_s(self) -> float:
        """Mean of the samples."""
        return statistics.fmean(self.samples)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the samples, nearest-rank."""
        s = sorted(self.samples)
        return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass
class Measurement:
    """A point's outcome: ``status`` is ``ok``, ``oom`` or ``error`` (then ``note`` says why)."""

    point: Point
    status: str
    timing: Timing | None = None
    note: str = ""
    split: str = ""          # train / test for operators, validate for whole steps
    predicted_s: float | None = None

    @property
    def shape(self) -> StepShape:
        """The point's batch as the simulator sees it."""
        return shape_of(self.point.entries)
