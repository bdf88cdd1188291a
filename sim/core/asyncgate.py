"""A serving loop that schedules a step ahead, seen from a request: a request that
reaches a busy engine joins the step after next, not the next one.

vLLM's async scheduling (its default since 0.14), SGLang's overlap scheduler and
TensorRT-LLM's (both on by default) keep two steps in flight: the loop schedules step
n + 1 and launches it before it waits for step n to end. New requests are read just
before a step is scheduled, so a request that arrives while step n runs was not there
when step n + 1 was scheduled: it is read once step n ends and scheduled into step
n + 2, which runs after step n + 1. It waits the rest of step n and all of step n + 1,
one step more than under a synchronous loop, which schedules step n + 1 only once step
n has ended. An idle engine blocks on its input queue and schedules a request the
moment it comes, so one that reaches an idle replica is not held; nor is one when the
replica has nothing else to run (no step n + 1 was scheduled ahead). Woken, the engine
reads everything its queue holds before it schedules, so requests that reach an idle
replica at the same instant share its first step (``Gate.woken``).

:class:`AsyncGate` holds the requests routed to a replica while an iteration runs and
hands them to its waiting queue one iteration later. Held requests count as the
replica's, as a :class:`sim.core.recvgate.RecvGate`'s do; a RecvGate of an overlapped
loop reads a step late the same way (``lag``). Which replicas run so:
:func:`sim.cost.overlap.late_intake`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.core.recvgate import Gate, RecvGate

if TYPE_CHECKING:
    from sim.core.replica import Replica


class AsyncGate(Gate):
    """The intake of a replica whose loop schedules a step ahead (module docstring):
    ``held`` arrived while the current iteration ran, ``late`` while the one before it
    ran (read at the next scheduling)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(lag=True)

    def tick(self, rep: Replica) -> None:
        """The top of ``rep``'s scheduler loop, the iteration before it just ended: read
        the requests that arrived during the iteration before that one (all of them when
        the replica has nothing else to run), and keep those that arrived during the
        one that ended for the next scheduling."""
        self.take(rep, True)


def intake_gate(recv_interval: int, overlapped: bool) -> Gate | None:
    """The gate in front of an entry replica's waiting queue: SGLang's
    ``--scheduler-recv-interval`` above 1 (new requests read every so many decode steps;
    checked against pp at load), a step late where the loop is ``overlapped`` (vLLM's
    async scheduling, SGLang's and TensorRT-LLM's overlap schedulers), or none (every
    request read at the next iteration)."""
    if recv_interval > 1:
        return RecvGate(recv_interval, lag=overlapped)
    return AsyncGate() if overlapped else None
