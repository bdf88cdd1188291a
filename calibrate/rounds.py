"""Whole steps timed in interleaved rounds: every shape a little, round after round.

On a shared host the speed of small, dispatch-bound steps wanders, and the wander has
a correlation time of a second or two (tiny/CPU, one thread bound to a core, a
1-entry decode run back to back for 90 s: one-second medians from 0.83 to 1.35 ms,
autocorrelation 0.59 at a lag of 1 s, 0.17 at 5 s). A shape timed for 50 ms and then
left lands in one such state, and the next shape in another, so each shape's figure is
one draw and their differences are partly the machine's. Timing every shape for a
short slice per round, for many rounds, spreads each shape's samples over the whole
phase: every shape sees the same mix of the machine's states.

Each shape's figure is then the **mean** of its samples, not the median: a serving
loop's latencies are sums of step times, and on that machine the mean of a small step
sits 5-10% above its median (the same 90 s: median 0.92 ms, mean 1.03 ms), which a
median-fitted profile leaves out. Whole steps are run eagerly and timed by wall clock
on every device (calibrate/sweeps.py says why).

A shape's first call of each round after the first is a discarded warm-up when the
shape takes several samples per round (a cheap step): a serving loop mostly runs a
decode after a similar decode, not after the expensive prefill timed before it here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from calibrate.grids import Point
from calibrate.progress import bar as progress_bar
from calibrate.records import Measurement, Timing

if TYPE_CHECKING:  # the timing needs torch; a refit reads RoundsConfig without it
    from calibrate.sweeps import Bench


@dataclass(frozen=True)
class RoundsConfig:
    """How whole steps are timed: at most ``rounds`` rounds of ``slice_s`` seconds per shape."""

    rounds: int = 12
    slice_s: float = 0.02    # seconds of samples per shape per round
    warmup: int = 2          # calls before a shape's first sample
    max_per_round: int = 40  # samples per shape per round, at most


class Rounds(NamedTuple):
    """What :func:`time_in_rounds` timed: one measurement per point reached, whether the
    first round was cut short, and whether a SIGINT ended the rounds."""

    measurements: list[Measurement]
    stopped: bool
    interrupted: bool = False


def time_in_rounds(points: list[Point], bench: Bench, deadline: float, cfg: RoundsConfig,
                   progress: bool = False, between: Callable[[], object] | None = None
                   ) -> Rounds:
    """Time ``points`` (whole steps) in rounds until ``cfg.rounds`` or ``deadline``
    (``perf_counter`` seconds). A point that fails (out of memory, say) is recorded once
    and left out of later rounds; points the first round did not reach are absent.
    ``between`` runs once, after the first round: other work on the full-depth model
    (calibrate.run times the serving loop's host work and waking there), which then
    cannot leave the whole steps unmeasured however long it takes. A SIGINT (a hard time
    limit's, say) ends the rounds, inside ``between`` too, with what they had timed:
    the samples are kept, so calibration can still fit and write its profile."""
    try:
        bench.reserve(points)
    except Exception as exc:  # noqa: BLE001 - out of memory, say: every step records it
        return Rounds([bench.failure(p, exc) for p in points], False)
    fns: dict[int, Callable[[], object]] = {}
    per_round: dict[int, int] = {}
    samples: dict[int, list[float]] = {}
    failed: dict[int, Measurement] = {}
    bar = progress_bar(len(points) * cfg.rounds, "whole steps (rounds)", progress)
    stopped = interrupted = False
    try:
        for r in range(cfg.rounds):
            for i, p in enumerate(points):
                if time.perf_counter() >= deadline:
                    stopped = r == 0
                    break
                if r > 0 and i not in fns:  # failed, or not reached in round one
                    continue
                try:
                    if r == 0:
                        fn = fns[i] = bench.prepare(p)
                        first = bench.timer.take(fn, 1, True, warmup=cfg.warmup)
                        k = max(1, min(cfg.max_per_round, int(cfg.slice_s / max(first[0], 1e-7))))
                        per_round[i] = k
                        samples[i] = first + bench.timer.take(fn, k - 1, True)
                    else:
                        k = per_round[i]
                        samples[i] += bench.timer.take(fns[i], k, True, warmup=1 if k > 1 else 0)
                except Exception as exc:  # noqa: BLE001 - a failed step must not end the phase
                    failed[i] = bench.failure(p, exc)
                    fns.pop(i, None)
                bar.update()
            if r == 0 and between is not None:
                between()
            if time.perf_counter() >= deadline:
                break
    except KeyboardInterrupt:
        interrupted = True
        stopped = len(samples) + len(failed) < len(points)  # the first round unfinished
    finally:
        bar.close()
    out: list[Measurement] = []
    for i, p in enumerate(points):
        if i in failed:
            out.append(failed[i])
        elif i in samples:
            t = Timing(tuple(samples[i]), graph=False)
            out.append(Measurement(p, "ok", t, note=(
                f"{len(t.samples) // per_round[i]} rounds x {per_round[i]}; mean {t.mean_s:.4g} s, "
                f"median {t.median_s:.4g} s")))
    return Rounds(out, stopped, interrupted)
