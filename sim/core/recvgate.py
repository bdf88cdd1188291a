"""SGLang's ``--scheduler-recv-interval``: a scheduler that takes in new requests only
every so many decode steps (``serving.scheduler_recv_interval``).

SGLang's scheduler loop reads the requests the tokenizer sent it at the top of each
iteration. With the interval N above 1 it skips that read until a counter reaches N
(``SchedulerRecvSkipper``): each finished iteration adds its weight, 1 for a step of
decodes or speculative verifies and 1,000 for any step with a prompt (or prompt chunk)
in it, and a read resets the counter to 0. So during a run of decode steps a request
routed to the replica waits, unseen by the scheduler, until up to N decode steps have
ended: about (N - 1) / 2 on average. A scheduler with nothing to run loops without
pausing and reads at once, so a request reaching an idle replica is taken in
immediately (with any others that reach it at that instant), as are requests held
when the replica runs out of work.

Requests routed here but not yet taken in are :attr:`RecvGate.held`: they count as the
replica's (outstanding tokens, the waiting-queue limit, a crash's losses) but no policy
sees them. A held request's client timeout is applied once it is taken in.

Under SGLang's overlap scheduler (its default) the read at the top of the loop comes
while the step scheduled on the previous pass runs, so what it reads joins the step
after that one: a gate with ``lag`` reads, when its counter says so, only the requests
that arrived before the iteration that just ended began, as
:class:`sim.core.asyncgate.AsyncGate` does every iteration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.core.batch import Batch
from sim.core.request import Request

if TYPE_CHECKING:
    from sim.core.replica import Replica

# The counter's weight of a step with a prompt in it (SGLang's default weight, which any
# forward mode but decode and verify gets): past any interval a server would be run with.
PROMPT_STEP_WEIGHT = 1000


class Gate:
    """What an entry replica's scheduler reads of the requests routed to it: those it
    has not read yet are ``held`` (routed here while it was busy, in routing order)
    and count as the replica's; :meth:`tick`, at the top of each iteration, reads
    what is due into the waiting queue, and :meth:`note` sees the iteration chosen.
    :class:`RecvGate` here and :class:`sim.core.asyncgate.AsyncGate` decide what is due.
    A gate that ``lag``s reads a step late (an overlapped loop: the module docstring):
    ``late`` holds what arrived before the iteration that just ended, ``held`` what
    arrived during it."""

    __slots__ = ("held", "late", "woken", "lag")

    def __init__(self, lag: bool = False) -> None:
        self.held: list[Request] = []
        self.late: list[Request] = []
        self.lag = lag
        # Its replica was woken by an arrival and has not scheduled yet: a scheduler that
        # wakes reads its whole input queue, so requests that reach the replica at that
        # same instant go straight to its waiting queue, not to ``held``.
        self.woken = False

    def __len__(self) -> int:
        return len(self.held) + len(self.late)

    def drain(self) -> list[Request]:
        """Every request the gate holds, in routing order, and none left (a crash)."""
        out, self.late, self.held = self.late + self.held, [], []
        return out

    def discard(self, ids: set[int]) -> int:
        """Take the held requests ``ids`` out (their clients gave up before the scheduler
        read them); how many were here."""
        before = len(self)
        if self.held:
            self.held = [r for r in self.held if r.id not in ids]
        if self.late:
            self.late = [r for r in self.late if r.id not in ids]
        return before - len(self)

    def tick(self, rep: Replica) -> None:
        """The top of ``rep``'s scheduler loop: read what is due into its waiting queue."""
        raise NotImplementedError

    def take(self, rep: Replica, read: bool) -> None:
        """The top of ``rep``'s scheduler loop, the iteration before it just ended: when
        the loop ``read``s its input, queue what it reads (a lagging gate: what arrived
        before that iteration began; otherwise all it holds), keeping the rest for the
        next read; a replica with nothing else to run reads everything at once."""
        late, held = self.late, self.held
        if not (late or held):
            return  # most iterations: nothing arrived (no lists made)
        if not (rep.running or rep.waiting):
            due, late, held = late + held, [], []
        elif not read:
            if self.lag and held:
                self.late, self.held = late + held, []
            return
        elif self.lag:
            due, late, held = late, held, []
        else:
            due, held = held, []
        for r in due:
            rep.queue(r)
        self.late, self.held = late, held

    def note(self, batch: Batch) -> None:
        """The iteration about to run is ``batch`` (nothing to count unless a gate does)."""

    def schedule(self, rep: Replica) -> Batch:
        """:meth:`sim.core.replica.Replica.schedule` behind the gate: read what is due,
        let client timeouts expire, ask the policy, and note the iteration it chose."""
        self.woken = False
        self.tick(rep)
        timeouts = rep.engine.timeouts
        if timeouts is not None:
            timeouts.expire(rep, rep.env.now)
        batch = rep.policy.schedule(rep)
        self.note(batch)
        return batch


class RecvGate(Gate):
    """The intake of a replica whose scheduler reads new requests every ``interval``
    decode steps (see the module docstring), a step late with ``lag``."""

    __slots__ = ("interval", "count", "weight")

    def __init__(self, interval: int, lag: bool = False) -> None:
        super().__init__(lag)
        self.interval = interval
        self.count = 0  # weight of the iterations since the last read
        self.weight = 0  # weight of the iteration now running (added when it ends)

    def tick(self, rep: Replica) -> None:
        """The top of ``rep``'s scheduler loop: count the iteration that ended, and read
        the held requests into its waiting queue when the counter reaches the interval
        or when the replica has nothing else to run."""
        self.count += self.weight
        self.weight = 0
        read = self.count >= self.interval or not (rep.running or rep.waiting)
        if read:
            self.count = 0
        self.take(rep, read)

    def note(self, batch: Batch) -> None:
        """The iteration about to run is ``batch``: its weight is 1 unless a listed entry
        prefills (its prompt or a chunk of it, or a preempted request's recompute: more
        than the one pending token a decode or a verify starts from)."""
        self.weight = 1
        for r in batch:
            if r.generated == 0 or r.prompt + r.generated - r.computed > 1:
                self.weight = PROMPT_STEP_WEIGHT
                return
