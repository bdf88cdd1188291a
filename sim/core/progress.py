"""Running a simulation's clock in slices so that a progress bar can follow it.

The slices do not change a result: with a horizon the clock stops at points before it
(:meth:`simpy.Environment.run` with a time, whose stop event takes a place in the event
queue but changes no other event's order) and then runs to the horizon as one run would;
without one it steps event by event exactly as :meth:`simpy.Environment.run` does, and
stops when none is left, so the run ends at the time of its last event.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import simpy
from simpy.core import EmptySchedule

from sim.core.request import PENDING
from sim.core.result import Outcomes

Tick = Callable[[int, int], None]
"""Told (requests ended, requests in the run) between slices."""

SLICES = 200  # stops on the way to a horizon
STEPS = 20_000  # events between two reports when the run has no horizon


def run_clock(env: simpy.Environment, horizon: float | None, out: Outcomes,
              tick: Tick | None) -> None:
    """Run ``env`` to ``horizon`` (s; None: until no event is left), reporting the
    requests of ``out`` no longer pending to ``tick`` as it goes (a closed loop's
    arrays grow, so they are read afresh each time)."""
    if tick is None:
        env.run(until=horizon)
        return

    def report() -> None:
        tick(int(np.count_nonzero(out.status != PENDING)), len(out.status))

    if horizon is not None:
        for k in range(1, SLICES):
            t = horizon * k / SLICES
            if t > env.now:
                env.run(until=t)
                report()
        env.run(until=horizon)
    else:
        step = env.step
        try:
            while True:
                for _ in range(STEPS):
                    step()
                report()
        except EmptySchedule:
            pass
    report()
