"""vLLM's async scheduling seen from a request: a request that reaches a busy engine
joins the step after next, not the next one.

With async scheduling (vLLM's default since 0.14) the engine core keeps two steps in
flight (its batch queue): it schedules step n + 1 and hands it to the workers before
it waits for step n to end. New requests are read from the input queue just before a
step is scheduled, so a request that arrives while step n runs was not there when
step n + 1 was scheduled: it is read once step n ends and scheduled into step n + 2,
which runs after step n + 1. It waits the rest of step n and all of step n + 1, one
step more than under a synchronous loop, which schedules step n + 1 only once step n
has ended. An idle engine blocks on its input queue and schedules a request the
moment it comes, so one that reaches an idle replica is not held; nor is one when
the replica has nothing else to run (no step n + 1 was scheduled ahead). Woken, the
engine reads everything its queue holds before it schedules, so requests that reach
an idle replica at the same instant share its first step (``Gate.woken``).

:class:`AsyncGate` holds the requests routed to a replica while an iteration runs and
hands them to its waiting queue one iteration later. Held requests count as the
replica's, as a :class:`sim.core.recvgate.RecvGate`'s do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.core.recvgate import Gate, RecvGate
from sim.core.request import Request

if TYPE_CHECKING:
    from sim.core.replica import Replica


class AsyncGate(Gate):
    """The intake of a replica under vLLM's async scheduling (module docstring):
    ``held`` arrived while the current iteration ran, ``late`` while the one before it
    ran (read at the next scheduling)."""

    __slots__ = ("late",)

    def __init__(self) -> None:
        super().__init__()
        self.late: list[Request] = []

    def __len__(self) -> int:
        return len(self.held) + len(self.late)

    def drain(self) -> list[Request]:
        """Every request the gate holds, in arrival order, and none left (a crash)."""
        out, self.late, self.held = self.late + self.held, [], []
        return out

    def discard(self, ids: set[int]) -> int:
        """As :meth:`sim.core.recvgate.Gate.discard`, from both lists."""
        gone = super().discard(ids)
        if self.late:
            n = len(self.late)
            self.late = [r for r in self.late if r.id not in ids]
            gone += n - len(self.late)
        return gone

    def tick(self, rep: Replica) -> None:
        """The top of ``rep``'s scheduler loop, the iteration before it just ended: read
        the requests that arrived during the iteration before that one (all of them when
        the replica has nothing else to run), and keep those that arrived during the
        one that ended for the next scheduling."""
        late, held = self.late, self.held
        if not (late or held):
            return  # most iterations: nothing arrived (no lists made)
        if not (rep.running or rep.waiting):
            late, held = late + held, []
        for r in late:
            rep.queue(r)
        self.late, self.held = held, []


def intake_gate(recv_interval: int, async_sched: bool) -> Gate | None:
    """The gate in front of an entry replica's waiting queue: SGLang's
    ``--scheduler-recv-interval`` above 1 (new requests read every so many decode steps;
    checked against pp at load), vLLM's async scheduling, or none (every request read
    at the next iteration)."""
    if recv_interval > 1:
        return RecvGate(recv_interval)
    return AsyncGate() if async_sched else None
