"""The price of waking: a step that starts after the device sat idle runs longer.

Timed back to back, a step finds the model's weights and the loop's data in the
caches; after an idle spell it does not (on a CPU the core may also have been given
to others or parked, on a GPU its clocks fall), so the first step pays for bringing
them back. Measured on the 2-core development machine with the tiny model, the
extra seconds grew with the idle time and then levelled off, nearly the same for a
50-token prefill as for a 600-token one (+0.83 and +0.62 ms after 100 ms): a fixed
amount of state to restore rather than a share of the step. In serving this is the
first-token step of a request that arrives at an idle server, the common case at low
load, so it sits in TTFT.

:func:`time_wake` runs prefill steps on the full-depth model (the replay's executor)
after idle spells of :data:`IDLE_S`, each preceded by the same step so that only the
idle time differs, in a seeded random order; :func:`fit_wake` fits the profile's
``wake`` term, ``max_s * (1 - exp(-idle_s / tau_s))``, to the medians' excess over
the back-to-back step.
"""

from __future__ import annotations

import math
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import curve_fit

from calibrate.executor import ModelExecutor
from calibrate.grids import Point
from calibrate.model import spread_ids
from calibrate.sweeps import Measurement
from calibrate.timing import Timing
from sim.cost.profile import wake_curve
from sim.errors import ServesimError

# Idle spells before the timed step, seconds (0: back to back, the reference).
IDLE_S = (0.0, 0.002, 0.01, 0.05, 0.2)
# Prompt lengths of the timed prefill steps, tokens (capped by the cache).
PROMPTS = (64, 256)
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


def time_wake(step: Callable[[int], float], prompts: Sequence[int], rounds: int,
              rng: np.random.Generator, idles: Sequence[float] = IDLE_S,
              sleep: Callable[[float], None] = time.sleep, stop_at: float | None = None,
              clock: Callable[[], float] = time.perf_counter) -> WakeTimes:
    """Time a prefill of each prompt length after each idle spell, ``rounds`` times, or
    fewer: no round after the first starts once ``clock()`` reaches ``stop_at``.

    ``step(n)`` runs one prefill of ``n`` tokens and returns its seconds. Each timed
    step follows the same step run just before it (the device busy and warm), then the
    idle spell; the (prompt, idle) pairs of a round come in a random order so that a
    slow stretch of the machine does not fall on one idle length.
    """
    rows: list[tuple[int, float, float]] = []
    pairs = [(n, i) for n in prompts for i in idles]
    for r in range(rounds):
        if r > 0 and stop_at is not None and clock() >= stop_at:
            break
        for k in rng.permutation(len(pairs)):
            n, idle = pairs[int(k)]
            step(n)
            if idle > 0:
                sleep(idle)
            rows.append((n, idle, step(n)))
    prompt, idle_s, step_s = zip(*rows, strict=True) if rows else ((), (), ())
    return WakeTimes(tuple(prompt), tuple(idle_s), tuple(step_s))


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


def time_wake_on(ex: ModelExecutor, rounds: int, seed: int = 0, stop_at: float | None = None
                 ) -> WakeTimes:
    """:func:`time_wake` on the full-depth model of the replay's executor ``ex`` (cache
    slot 0), so the steps are timed as a serving loop times them; no round after the
    first starts past ``stop_at`` (``time.perf_counter`` seconds)."""
    prompts = sorted({max(1, min(n, ex.capacity - 1)) for n in PROMPTS})

    def step(n: int) -> float:
        return ex.step([(0, n, 0)], spread_ids(n, ex.model.d.vocab))[1]
    return time_wake(step, prompts, rounds, np.random.default_rng(seed), stop_at=stop_at)
