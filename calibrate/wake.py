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
idle time differs, in a seeded random order; :func:`calibrate.wakefit.fit_wake` fits
the profile's ``wake`` term, ``max_s * (1 - exp(-idle_s / tau_s))``, to the medians'
excess over the back-to-back step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from calibrate.executor import ModelExecutor
from calibrate.model import spread_ids
from calibrate.wakefit import WakeTimes

# Idle spells before the timed step, seconds (0: back to back, the reference).
IDLE_S = (0.0, 0.002, 0.01, 0.05, 0.2)
# Prompt lengths of the timed prefill steps, tokens (capped by the cache).
PROMPTS = (64, 256)


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


def time_wake_on(ex: ModelExecutor, rounds: int, seed: int = 0, stop_at: float | None = None
                 ) -> WakeTimes:
    """:func:`time_wake` on the full-depth model of the replay's executor ``ex`` (cache
    slot 0), so the steps are timed as a serving loop times them; no round after the
    first starts past ``stop_at`` (``time.perf_counter`` seconds)."""
    prompts = sorted({max(1, min(n, ex.capacity - 1)) for n in PROMPTS})

    def step(n: int) -> float:
        return ex.step([(0, n, 0)], spread_ids(n, ex.model.d.vocab))[1]
    return time_wake(step, prompts, rounds, np.random.default_rng(seed), stop_at=stop_at)
