"""calibrate.wake: the order and pairing of the timed steps, the excess over back to
back, and the fit, on a stand-in device whose wake cost is known."""

from __future__ import annotations

import math

import numpy as np
import pytest

from calibrate.wake import IDLE_S, time_wake
from calibrate.wakefit import WakeTimes, fit_wake

MAX_S, TAU_S = 7e-4, 0.012


class FakeDevice:
    """A step of n tokens takes 1 ms + 10 us per token, plus MAX_S x (1 - exp(-idle /
    TAU_S)) after ``idle`` seconds without a step; time is virtual."""

    def __init__(self) -> None:
        self.now = 0.0
        self.last_end = 0.0
        self.calls: list[tuple[int, float]] = []

    def sleep(self, s: float) -> None:
        self.now += s

    def step(self, n: int) -> float:
        idle = self.now - self.last_end
        dt = 1e-3 + 1e-5 * n + MAX_S * -math.expm1(-idle / TAU_S)
        self.calls.append((n, round(idle, 12)))
        self.now += dt
        self.last_end = self.now
        return dt


def test_each_timed_step_follows_the_same_step_then_its_idle_spell() -> None:
    dev = FakeDevice()
    times = time_wake(dev.step, (64, 256), 3, np.random.default_rng(0), sleep=dev.sleep)
    pairs = [(n, i) for n in (64, 256) for i in IDLE_S]
    assert len(times.step_s) == 3 * len(pairs)
    assert sorted(zip(times.prompt, times.idle_s, strict=True)) == sorted(pairs * 3)
    # Calls come in twos: a warm step back to back, then the timed one after the spell.
    for k, (n, idle) in enumerate(zip(times.prompt, times.idle_s, strict=True)):
        assert dev.calls[2 * k][0] == n and dev.calls[2 * k + 1] == (n, round(idle, 12))
    # Seeded shuffles: same seed, same order; the rounds differ from one another.
    again = time_wake(FakeDevice().step, (64, 256), 3, np.random.default_rng(0),
                      sleep=FakeDevice().sleep)
    assert again.prompt == times.prompt and again.idle_s == times.idle_s
    n = len(pairs)
    assert times.idle_s[:n] != times.idle_s[n:2 * n] or times.prompt[:n] != times.prompt[n:2 * n]


def test_no_round_after_the_first_starts_past_the_stop_time() -> None:
    """On the stand-in's virtual clock a round of 10 (prompt, idle) pairs takes 10 x 2
    steps (1.64 ms at 64 tokens, 3.56 ms at 256, plus under 0.7 ms of waking each) and
    2 x 262 ms of idle spells, 0.576-0.583 s: a stop time 0.6 s in lets the second
    round start and no third; one 0.5 s in, none after the first; one already past
    still runs the first."""
    pairs = 2 * len(IDLE_S)
    for stop_at, rounds in ((0.6, 2), (0.5, 1), (-1.0, 1), (float("inf"), 5)):
        dev = FakeDevice()
        times = time_wake(dev.step, (64, 256), 5, np.random.default_rng(0), sleep=dev.sleep,
                          stop_at=stop_at, clock=lambda d=dev: d.now)
        assert len(times.step_s) == rounds * pairs, stop_at


def test_excess_and_fit_recover_the_wake_curve() -> None:
    dev = FakeDevice()
    times = time_wake(dev.step, (64, 256), 2, np.random.default_rng(1), sleep=dev.sleep)
    points = times.excess()
    assert [(p, i) for p, i, _ in points] == [(n, i) for n in (64, 256) for i in IDLE_S[1:]]
    for _, idle, extra in points:
        assert extra == pytest.approx(MAX_S * (1 - math.exp(-idle / TAU_S)), abs=1e-12)
    coef, err = fit_wake(points)
    assert coef["max_s"] == pytest.approx(MAX_S, rel=1e-4)
    assert coef["tau_s"] == pytest.approx(TAU_S, rel=1e-4)
    assert err < 1e-9


def test_no_excess_fits_no_wake_and_rows_keep_every_sample() -> None:
    coef, err = fit_wake([(64, 0.01, -2e-6), (64, 0.2, -1e-6)])
    assert coef["max_s"] == 0.0 and err == pytest.approx(1.5e-6)
    dev = FakeDevice()
    rows = time_wake(dev.step, (32,), 4, np.random.default_rng(2),
                     sleep=dev.sleep).measurements()
    assert [m.point.label for m in rows] == [f"prefill 32 after {i * 1e3:g} ms idle"
                                             for i in IDLE_S]
    assert all(m.point.component == "wake" and m.timing and len(m.timing.samples) == 4
               for m in rows)


def test_the_rows_read_back_into_the_same_steps() -> None:
    """:meth:`WakeTimes.from_measurements` inverts :meth:`measurements` (a refit's path):
    the same excess over back to back, and rows of other components are ignored."""
    dev = FakeDevice()
    times = time_wake(dev.step, (64, 256), 3, np.random.default_rng(0), sleep=dev.sleep)
    rows = times.measurements()
    back = WakeTimes.from_measurements(rows)
    assert back.excess() == times.excess()
    assert sorted(zip(back.prompt, back.idle_s, back.step_s, strict=True)) == \
        sorted(zip(times.prompt, times.idle_s, times.step_s, strict=True))
    assert WakeTimes.from_measurements([]).step_s == ()
