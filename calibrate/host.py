"""The serving loop's host work between device steps, timed on the reference loop.

A serving iteration is more than its device step: the loop admits arrivals, asks the
batching policy for a batch, assigns cache slots, books KV blocks and records the
tokens the step produced, all on the host and, in a loop like vLLM's v0 engine or
calibrate.replay's, in series with the device. On the 2-core development machine that
work took 15-36 µs per iteration in validation replays of the tiny model (median
11 µs before a 1-entry decode, 96 µs before a 17-64-entry one), about 1% of the busy
time, and it grows with the batch because the loop walks the running requests.

It is measured here the way it happens: :func:`calibrate.replay.run_loop` (the same
code validation runs, with the ``continuous`` policy) drives the full-depth model on a
short synthetic workload, every request queued at once so that batches shrink from
the slot count to one as requests finish (each size run :data:`STEPS_PER_SIZE` times), and every
interval between the end of one device step and the start of the next is recorded
against the size of the batch that follows. The model running in between is what
leaves the loop's data out of the caches, so the host work is timed with it, not in a
loop of its own (there it took a quarter of the time).

:func:`time_loop_terms` runs it together with the other term the loop alone shows,
the price of waking from idle (:mod:`calibrate.wake`), and hands calibrate.run both.

Both keep to a window of the calibration's budget. The loop's length grows with the
square of its slot count and, on a device whose kernel launches are slow, a full-depth
decode step with many scattered slots can take a large fraction of a second: Llama-3-8B on
a lent H200 ran its 64-slot loop (512 decode steps) for over two minutes and overran a
90 s budget by more than 100 s. So the loop first times a decode step of one sequence,
of every slot, and of half the slots scattered (the loop's slots scatter as requests
finish, and each run of consecutive slots costs launches of its own), runs on as many
slots as those say fit the window (:func:`fitting_slots`), and stops at the window's
end whatever the estimate said.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from calibrate.executor import ModelExecutor
from calibrate.grids import Point
from calibrate.records import Measurement, Timing
from calibrate.replay import STEP_FIELDS, VirtualClock, run_loop
from calibrate.timing import is_oom
from calibrate.wake import time_wake_on
from calibrate.wakefit import fit_wake
from sim.config.serving import ServingConfig
from sim.cost.kvpages import blocks_for

# Distinct batch sizes need this many intervals each to make a point.
MIN_SAMPLES = 3
# Steps the workload runs at each batch size. The first after a request finishes also
# frees its slot and blocks (measured: often the size's slowest interval), so a median
# needs several of the others beside it: at four per size, held-out MAPE reached 10%
# on a noisy day.
STEPS_PER_SIZE = 8
# Share of its window the loop's estimated decode steps may fill: its prefills, the host
# work itself and the estimate's error have the rest before the hard stop.
WINDOW_FILL = 0.7
# Fewest slots the loop runs on, however short its window: sizes 1-4 still give the
# ``host`` form its slope.
MIN_SLOTS = 4
# Share of the loop terms' window the host loop has; waking has the rest.
HOST_SHARE = 2 / 3


@dataclass(frozen=True)
class HostTimes:
    """Host seconds between device steps, each with the size of the batch that followed."""

    seqs: tuple[int, ...]
    host_s: tuple[float, ...]
    slots: int = 0      # slots the loop ran on (0: not recorded)
    of_slots: int = 0   # slots the executor had
    cut: bool = False   # the loop reached its window's end before its last finish

    def measurements(self) -> list[Measurement]:
        """One ``host`` point per batch size seen at least ``MIN_SAMPLES`` times, with
        every interval as its samples (in the order they were taken)."""
        out = []
        for b in sorted(set(self.seqs)):
            xs = tuple(t for s, t in zip(self.seqs, self.host_s, strict=True) if s == b)
            if len(xs) >= MIN_SAMPLES:
                point = Point("host", ((1, 0),) * b, f"loop seqs={b}")
                out.append(Measurement(point, "ok", Timing(xs, False)))
        return out


def workload(slots: int, capacity: int, rng: np.random.Generator
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``slots`` requests queued at 0 s: (arrival s, prompt tokens, output tokens).

    Prompts are short (the host work does not depend on their length, the device time
    does). Outputs are 2, 2 + k, 2 + 2k, ... tokens with k = :data:`STEPS_PER_SIZE` (capped
    by ``capacity``), in random order: once all are admitted, the batch shrinks by one
    sequence every k steps, so every size from ``slots`` down to one is run k times.
    """
    prompt = rng.integers(8, max(9, min(64, capacity // 4)), size=slots)
    k = STEPS_PER_SIZE
    room = max(2, capacity - int(prompt.max()))
    output = np.minimum(2 + k * rng.permutation(slots), room)
    return np.zeros(slots), prompt, output


def fitting_slots(slots: int, one_s: float, full_s: float, scattered_s: float,
                  window_s: float, k: int = STEPS_PER_SIZE) -> int:
    """The most slots, from ``min(slots, MIN_SLOTS)`` up to ``slots``, whose
    :func:`workload` has its decode steps fit :data:`WINDOW_FILL` of ``window_s``
    seconds: ``k`` steps at each batch size b from S down to 1.

    A step of b sequences among S slots is priced ``base(b) + run_s (runs - 1)``: base
    straight between ``one_s`` (one sequence) and ``full_s`` (every slot, one run of
    consecutive slots); runs = b (S - b + 1) / S, the runs of consecutive slots that b
    sequences left at random among S make on average (the model attends to each run
    apart, calibrate.model.prepare); ``run_s``, the price of a run past the first, from
    ``scattered_s``: a step of h = ``slots // 2`` sequences on every other slot (h runs).
    """
    slope = (full_s - one_s) / max(1, slots - 1)
    h = slots // 2
    base_h = one_s + slope * (h - 1)
    run_s = max(0.0, scattered_s - base_h) / (h - 1) if h > 1 else 0.0
    best = min(slots, MIN_SLOTS)
    for s in range(best + 1, slots + 1):
        b = np.arange(1, s + 1, dtype=float)
        step_s = one_s + slope * (b - 1) + run_s * (b * (s - b + 1) / s - 1)
        if k * float(step_s.sum()) > WINDOW_FILL * window_s:
            break
        best = s
    return best


def _decode_s(ex: ModelExecutor, slots: list[int]) -> float:
    """Seconds of one decode step of a sequence in each of ``slots`` at a short context
    on ``ex``, the second of two (the first warms the shape); the cache's contents do
    not matter."""
    ctx = min(32, ex.capacity - 1)
    entries = [(i, 1, ctx) for i in slots]
    ex.step(entries, [1] * len(slots))
    return ex.step(entries, [1] * len(slots))[1]


def time_host(ex: ModelExecutor, max_context: int, seed: int = 0,
              window_s: float | None = None) -> HostTimes:
    """Run the reference loop (``continuous``, one sequence per cache slot, enough KV
    blocks for all) over the full-depth model of ``ex`` on :func:`workload`; the host
    intervals it recorded (``host_s``), every step's but the first (timed from the
    loop's start, not from a previous step). With ``window_s`` the loop runs on the
    slots :func:`fitting_slots` finds from three timed decode steps (one sequence, every
    slot, half the slots scattered), and no step starts ``window_s`` seconds after the
    timing began."""
    slots, stop_at = ex.slots, None
    if window_s is not None:
        stop_at = time.perf_counter() + window_s
        every = list(range(ex.slots))
        slots = fitting_slots(ex.slots, _decode_s(ex, [0]), _decode_s(ex, every),
                              _decode_s(ex, every[: 2 * (ex.slots // 2): 2] or [0]), window_s)
    arrival, prompt, output = workload(slots, ex.capacity, np.random.default_rng(seed))
    serving = ServingConfig(policy="continuous", max_num_seqs=slots,
                            max_num_batched_tokens=max(2048, int(prompt.sum())),
                            num_gpu_blocks=slots * blocks_for(ex.capacity, 16))
    # Virtual time never sleeps: every request is already there, and the loop times its
    # host work by the wall clock whatever clock drives it.
    res = run_loop(arrival, prompt, output, serving, max_context, ex, VirtualClock(),
                   vocab=ex.model.d.vocab, stop_at=stop_at)
    seqs, host = STEP_FIELDS.index("seqs"), STEP_FIELDS.index("host_s")
    return HostTimes(tuple(int(r[seqs]) for r in res.steps[1:]),
                     tuple(float(r[host]) for r in res.steps[1:]), slots, ex.slots,
                     res.interrupted)


# Rounds of the wake timing (calibrate.wake), quick grid and full: about 4 and 7 s on
# the tiny model on CPU, mostly the idle spells themselves.
WAKE_ROUNDS = {True: 6, False: 10}


class LoopTerms(NamedTuple):
    """What timing the serving loop's host work and waking gave: their measurements, the
    wake coefficients and fit (seconds), or the note saying why they were not measured."""

    measurements: list[Measurement]
    wake: dict[str, float] | None = None
    wake_fit: dict[str, float] | None = None
    note: str | None = None

    @classmethod
    def unmeasured(cls, why: str) -> LoopTerms:
        """Nothing measured, because of ``why``."""
        return cls([], note=f"{why}: host work between steps and waking from idle not "
                            "measured (priced 0)")


def time_loop_terms(loop: ModelExecutor, max_context: int, quick: bool, seed: int,
                    window_s: float | None = None) -> LoopTerms:
    """Host work between steps (:func:`time_host`) and the price of waking from idle
    (:mod:`calibrate.wake`, fitted) on ``loop``, within ``window_s`` seconds if given
    (:data:`HOST_SHARE` of it for the host loop; waking runs at least one round);
    running out of memory gives :meth:`LoopTerms.unmeasured`, any other failure is
    raised. The note says when the window made the loop smaller or cut it."""
    start = time.perf_counter()
    try:
        times = time_host(loop, max_context, seed,
                          None if window_s is None else HOST_SHARE * window_s)
        woken = time_wake_on(loop, WAKE_ROUNDS[quick], seed,
                             None if window_s is None else start + window_s)
    except Exception as exc:  # noqa: BLE001 - out of memory is recorded; anything else raised
        if not is_oom(exc):
            raise
        return LoopTerms.unmeasured("out of memory timing them")
    points = woken.excess()
    wake, err = fit_wake(points)
    note = None
    if times.slots < times.of_slots or times.cut:
        note = (f"host work timed on a loop of {times.slots} of {times.of_slots} slots"
                + (", stopped at the end of its window" if times.cut else "")
                + f" ({window_s:.0f} s for host work and waking)")
    return LoopTerms(times.measurements() + woken.measurements(), wake,
                     {"points": len(points), "mean_abs_err_s": err}, note)
