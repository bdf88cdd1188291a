"""The price of waking, fitted: the timed steps of :mod:`calibrate.wake` as rows of a
calibration's CSV and back, and the fit of the profile's ``wake`` term to them.

Torch-free, unlike the timing, so that a calibration's CSV can be fitted again on a
machine without torch (:mod:`calibrate.refit`).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

from calibrate.grids import Point
from calibrate.records import Measurement, Timing
from sim.cost.profile import wake_curve
from sim.errors import ServesimError

# The label :meth:`WakeTimes.measurements` gives a row, read back by from_measurements.
_IDLE_LABEL = re.compile(r"prefill \d+ after ([0-9.e+-]+) ms idle")


@dataclass(frozen=True)
class WakeTimes:
    """Every timed step: its prompt (tokens), the idle seconds before it and its seconds."""

    prompt: tuple[int, ...]
    idle_s: tuple[float, ...]
    step_s: tuple[float, ...]

    def _samples(self, n: int, idle: float) -> tuple[float, ...]:
        return tuple(t for p, i, t in zip(self.prompt, self.idle_s, self.step_s, strict=True)
                     if p == n and i == idle)

    def excess(self) -> list[tuple[int, float, float]]:
        """(prompt, idle s, median step s after that idle minus back to back) for every
        prompt and idle spell > 0."""
        out = []
        for n in sorted(set(self.prompt)):
            base = statistics.median(self._samples(n, 0.0))
            out += [(n, i, statistics.median(self._samples(n, i)) - base)
                    for i in sorted(set(self.idle_s)) if i > 0]
        return out

    @classmethod
    def from_measurements(cls, rows: Sequence[Measurement]) -> WakeTimes:
        """The timed steps back from :meth:`measurements`' rows (others are ignored): the
        prompt from each row's entry, the idle spell from its label."""
        prompt: list[int] = []
        idle: list[float] = []
        step: list[float] = []
        for m in rows:
            if m.point.component != "wake" or m.timing is None:
                continue
            got = _IDLE_LABEL.fullmatch(m.point.label)
            if got is None:
                raise ServesimError(f"a wake row's label {m.point.label!r} is not "
                                    "'prefill N after T ms idle'")
            n = m.point.entries[0][0]
            prompt += [n] * len(m.timing.samples)
            idle += [float(got[1]) / 1e3] * len(m.timing.samples)
            step += m.timing.samples
        return cls(tuple(prompt), tuple(idle), tuple(step))

    def measurements(self) -> list[Measurement]:
        """One ``wake`` row per prompt and idle spell for the CSV (all samples kept)."""
        out = []
        for n in sorted(set(self.prompt)):
            for i in sorted(set(self.idle_s)):
                point = Point("wake", ((n, 0),), f"prefill {n} after {i * 1e3:g} ms idle")
                out.append(Measurement(point, "ok", Timing(self._samples(n, i), False),
                                       split="wake"))
        return out


def fit_wake(points: Sequence[tuple[int, float, float]]) -> tuple[dict[str, float], float]:
    """Fit ``max_s`` and ``tau_s`` (seconds) to (prompt, idle s, excess s) points, all
    prompts together (the excess is taken to be the same for any step); (coefficients,
    mean absolute error in seconds). A device with no measurable excess gets 0."""
    x = np.array([p[1] for p in points], dtype=float)
    y = np.array([p[2] for p in points], dtype=float)
    if not len(x) or y.max() <= 0.0:
        return {"max_s": 0.0, "tau_s": 0.01}, float(np.abs(y).mean()) if len(y) else 0.0
    # Fitted in milliseconds, where the numbers are near 1 and the solver's tolerances
    # mean something; tau from a tenth of the shortest spell to ten times the longest
    # (the fit cannot see a time constant outside what was measured).
    xm, ym = x * 1e3, y * 1e3
    lo, hi, top0 = float(xm.min()), float(xm.max()), float(ym.max())
    (top, tau), _ = curve_fit(wake_curve, xm, ym, p0=(top0, math.sqrt(lo * hi)),
                              bounds=([0.0, lo / 10], [10 * top0, hi * 10]),
                              xtol=1e-12, ftol=1e-12, gtol=1e-12, maxfev=10000)
    err = float(np.abs(wake_curve(x, top / 1e3, tau / 1e3) - y).mean())
    return {"max_s": float(top) / 1e3, "tau_s": float(tau) / 1e3}, err
