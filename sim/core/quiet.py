"""Iterations that end without a SimPy event of their own.

Every iteration of a replica is, in principle, one SimPy event: the process sleeps for
the step's seconds and the clock moves on. On the only replica of a run that costs an
event and a context switch for nothing whenever no other process could act or look
before the step ends. So an iteration (or a pipeline's micro-batch) may end without
one when all of these hold:

- the replica is the run's only one (no other replica could read its state);
- it ends before the next arrival is due (the engine routes arrivals at the replica's
  own events; a closed loop, client timeouts or faults leave ``next_due`` at −inf:
  never) and before the horizon;
- nobody is waiting to be admitted, nor held at the replica's intake gate (vLLM's async
  scheduling, SGLang's receive interval): an admission stamps SimPy's clock;
- SimPy's clock would read at most twice what it reads now (``reach``).

The process then keeps the clock SimPy would read had every iteration had its event
(the same sums of step times), and one timeout of the difference catches SimPy up
before the next real event. By Sterbenz's lemma that difference is exact while the
kept clock is at most twice SimPy's, so SimPy's clock lands on the kept one to the bit
and every result is the same as with one event per iteration (tests/test_quiet.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.core.engine import Engine


def limits(engine: Engine) -> tuple[float, float]:
    """(limit, reach) in seconds, read at one of a replica process's events: a step that
    ends before ``limit`` with SimPy's clock then at most ``reach`` may end without an
    event (module docstring); (−inf, −inf) unless the engine runs one replica and allows
    the shortcut (``Engine.skip_events``)."""
    if not (engine.skip_events and len(engine.replicas) == 1):
        return -math.inf, -math.inf
    horizon = engine.scenario.horizon_s
    return min(engine.next_due, math.inf if horizon is None else horizon), 2.0 * engine.env.now
