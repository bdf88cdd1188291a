"""Closed-loop clients at run time: when each request is sent, and the engine's queue of
requests sent but not yet seen.

N clients (``workload.concurrency``) send requests 0..N-1 at t = 0. Every request that
ends — finished, rejected, timed out or failed — frees its client at its client-side end
time: the engine's time plus the frontend's ``response_s`` for an answer the server
sends (a last token, a refusal, an error), the deadline itself for a client that gave
up waiting (``admission.timeout_s``). The freed client sends the next request in
workload order ``think_time_s`` later, so request N+k goes out when the k-th request
to end has ended, and send times never decrease. The engine sees a request sent at s at
``s + frontend.request_delay(prompt)``, in (that time, id) order (:meth:`Clients.head`).

Paced clients. A request may also carry the earliest time it may be sent (``earliest``,
from a finite arrival time): it then goes at the later of that time and the moment a
client is free for it, in workload order. That is vLLM's benchmark client with both a
request rate and ``--max-concurrency``: requests come due at the rate and wait, first
come first served, for one of the capped slots.

Same-instant causality. A request sent and due at the engine at the very instant t of
the end that caused it (no think time, no frontend) is routed after every other event
at t (a :class:`_Late` event): busy replicas see it at their next iteration boundary and
an idle one starts on it at t. So no decision at t depends on the order in which SimPy
happens to process the replicas' events at t. Every other arrival is routed before any
replica changes state at its time, as an open-loop arrival is.

With ``admission.timeout_s`` each deadline is an event (:meth:`Clients._deadline`): the
client gives up at it exactly and sends its next request then, whatever the engine was
doing; an open-loop run applies timeouts lazily (sim/policies/admission.py), with the same
verdicts.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from bisect import bisect_left
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from sim.core.request import PENDING, TIMED_OUT
from sim.errors import ServesimError
from sim.workload.closedloop import concat, take

if TYPE_CHECKING:
    from sim.core.engine import Engine
    from sim.workload.requests import Requests

# SimPy orders events by (time, priority, creation); URGENT is 0 and NORMAL 1.
LATE = 2
# Sends at one instant, with only duration_s bounding the clients, before the run is
# declared stuck: every request ending the moment it is sent (refused at the door).
MAX_BURST = 100_000


class _Late(simpy.Event):
    """An event processed after every normal event at its time, including those
    scheduled while that time is being processed."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        # Triggered at creation, as simpy.Timeout is, but with a later priority.
        self._ok = True
        self._value = None
        env.schedule(self, LATE)  # type: ignore[arg-type]


def delay_at_least(now: float, target: float) -> float:
    """The smallest delay d (s) with ``now + d >= target`` as SimPy adds them: an event
    lands on ``target`` exactly when rounding allows, and never before it."""
    d = max(0.0, target - now)
    while now + d < target:
        d = math.nextafter(d, math.inf)
    return d


@dataclass(frozen=True)
class ClientStats:
    """A closed loop's figures for the summary: clients, think time (s), requests sent
    and, when the run had a fixed number to send, how many it did not send. Paced clients
    (requests with due times) add how many sent requests waited for a free client past
    their due time, and that wait's mean and maximum (s) over the requests sent."""

    concurrency: int
    think_time_s: float
    sent: int
    not_sent: int | None
    paced: bool = False
    held: int = 0
    wait_mean_s: float = 0.0
    wait_max_s: float = 0.0
    # Paced clients: each request's due and send times (s; +inf: not sent within the
    # run), from which sim.report.overload judges whether the clients kept up.
    due_s: np.ndarray | None = None
    sent_s: np.ndarray | None = None


class Clients:
    """The clients of one closed-loop run; ``engine._send`` and ``engine._arrival``
    hold each request's send time and engine arrival time (s, +inf until sent);
    ``earliest`` the time before which each may not be sent (s; None: any time), from
    the requests' finite arrival times.

    ``supply`` draws more requests when the ones known are all sent (only
    ``duration_s`` bounds the run); None: the requests known are all there are.
    """

    def __init__(self, engine: Engine, concurrency: int, think_s: float,
                 stop_s: float | None, supply: Callable[[], Requests] | None):
        self.engine = engine
        # Per request, the earliest send time (s): its arrival time where finite (paced
        # clients); None when none is (every request goes when a client is free).
        due = engine.requests.arrival_s
        finite = np.isfinite(due)
        self.earliest: list[float] | None = (
            np.where(finite, due, 0.0).tolist() if finite.any() else None)
        self.env = engine.env
        fe = engine.frontend
        self.delay = fe.request_delay if fe.delays else None
        self.request_s = fe.request_s
        self.response_s = fe.response_s
        self.concurrency = concurrency
        self.think = think_s
        self.stop_s = stop_s
        self.supply = supply
        self.sent = 0
        self.in_flight = 0
        self.done = False  # no client will send again
        self.stopped = False  # ... because they reached stop_s
        self.heap: list[tuple[float, int]] = []  # (engine arrival s, id), not yet routed
        self.fresh: list[tuple[float, int]] = []  # due now, sent now: routed late
        self.late = False  # inside the late routing of this instant
        self.late_pending = False
        self.freeing: list[float] = []  # client-side end times still ahead (s)
        self.deadlines: deque[tuple[float, int]] = deque()  # (client deadline s, id)
        self.last_send = 0.0
        self.burst = 0
        for _ in range(concurrency):
            if self.done:
                break  # more clients than requests: the rest never send
            self._send_next(0.0, initial=True)

    # -- sending ---------------------------------------------------------------------
    def _send_next(self, t: float, initial: bool = False) -> None:
        """A client is free at client time ``t``: it sends the next request."""
        if self.done:
            return
        eng = self.engine
        s = t if initial else t + self.think
        # Ends are handled in time order, so s only falls below the last send by rounding
        # (or by a request held back to its earliest time, which later ones wait behind).
        s = max(s, self.last_send)
        if self.earliest is not None and self.sent < len(self.earliest):
            s = max(s, self.earliest[self.sent])
        if self.stop_s is not None and not s < self.stop_s:
            self.done = self.stopped = True
            return
        i = self.sent
        if i == len(eng._send):
            if self.supply is None:
                self.done = True
                return
            grow(eng, self.supply())
        if self.supply is not None:
            self.burst = self.burst + 1 if s == self.last_send else 0
            if self.burst > MAX_BURST:
                raise ServesimError(
                    f"closed loop: {self.burst} requests sent at {s:g} s without simulated "
                    "time passing (each ends as it is sent: refused?); give num_requests or "
                    "think_time_s > 0", where="workload.concurrency")
        self.last_send = s
        self.sent = i + 1
        self.in_flight += 1
        a = s if self.delay is None else s + self.delay(eng._prompt[i], eng.jitter())
        eng._send[i] = s
        eng._arrival[i] = a
        if eng.timeouts is not None:
            d = s + eng.timeouts.timeout_s
            self.deadlines.append((d, i))
            self._call_at(d, self._deadline)
        if a > self.env.now or initial:
            heapq.heappush(self.heap, (a, i))
            self._call_at(a, self._arrive)
        elif self.late:
            heapq.heappush(self.heap, (a, i))  # the late routing under way takes it
        else:
            self.fresh.append((a, i))
            if not self.late_pending:
                self.late_pending = True
                _Late(self.env).callbacks.append(self._route_fresh)
        if self.supply is None and self.sent == len(eng._send):
            self.done = True

    def _call_at(self, t: float, callback: Callable[[Any], None]) -> None:
        self.env.timeout(delay_at_least(self.env.now, t)).callbacks.append(callback)

    def _arrive(self, _event: Any) -> None:
        self.engine.dispatch()

    def _route_fresh(self, _event: Any) -> None:
        self.late_pending = False
        for x in self.fresh:
            heapq.heappush(self.heap, x)
        self.fresh = []
        self.late = True
        try:
            self.engine.dispatch()
        finally:
            self.late = False

    # -- what the engine calls ---------------------------------------------------------
    def head(self) -> tuple[float, int]:
        """(engine arrival s, id) of the next request to route; (inf, -1) when none."""
        heap = self.heap
        status = self.engine.status
        while heap and status[heap[0][1]] != PENDING:
            heapq.heappop(heap)  # its client gave up before the engine saw it
        return heap[0] if heap else (math.inf, -1)

    def pop(self) -> None:
        """Drop the head (the engine routes it)."""
        heapq.heappop(self.heap)

    def ended(self, i: int, t: float) -> None:
        """Request ``i`` ended; its client knows at client time ``t`` (s, >= now)."""
        self.in_flight -= 1
        assert self.in_flight >= 0, f"request {i} ended twice"
        if self.done:
            return
        if t <= self.env.now:
            self._send_next(t)
        else:
            heapq.heappush(self.freeing, t)
            self._call_at(t, self._free)

    def _free(self, _event: Any) -> None:
        self._send_next(heapq.heappop(self.freeing))

    def _deadline(self, _event: Any) -> None:
        """A client's deadline: its request, if nobody has scheduled it, is abandoned."""
        d, i = self.deadlines.popleft()
        eng = self.engine
        if eng.status[i] != PENDING or not math.isnan(eng.first_sched[i]):
            return
        k = int(eng.replica_of[i])
        if k < 0:  # not seen by the engine yet, or lost and waiting for its retry
            eng.status[i] = TIMED_OUT
            eng.reason[i] = "timeout"
            self.ended(i, d)
        else:
            assert eng.timeouts is not None
            eng.timeouts.expire(eng.entry[k], self.env.now)

    def stats(self, end_s: float, horizon_s: float | None) -> tuple[int, ClientStats, str]:
        """After the run ended at ``end_s``: requests sent (ids 0..sent-1; a send due at
        or after a horizon never happened), the summary's figures, and a note on the
        requests not sent ("" when none)."""
        sent = self.sent
        if horizon_s is not None:
            sent = bisect_left(self.engine._send, end_s, 0, self.sent)
        planned = None if self.supply is not None else len(self.engine._send)
        not_sent = None if planned is None else planned - sent
        why = []
        if self.stopped:
            why.append(f"clients stop sending at workload.duration_s {self.stop_s:g} s")
        if horizon_s is not None and (sent < self.sent or not self.done):
            why.append(f"the run ended at horizon_s {horizon_s:g} s")
        note = ""
        if not_sent:
            note = f"closed loop: {not_sent} of {planned} requests not sent ({'; '.join(why)})"
        figures = ClientStats(self.concurrency, self.think, sent, not_sent)
        if self.earliest is not None:
            due = np.array(self.earliest)
            sends = np.array(self.engine._send)
            sends[sent:] = np.inf  # not sent within the run
            wait = sends[:sent] - due[:sent]
            figures = dataclasses.replace(
                figures, paced=True, held=int((wait > 0).sum()),
                wait_mean_s=float(wait.mean()) if sent else 0.0,
                wait_max_s=float(wait.max()) if sent else 0.0, due_s=due, sent_s=sends)
        return sent, figures, note


# The engine's per-request arrays (None where a run does not keep one).
PER_REQUEST = ("first_sched", "first_token", "finish", "preemptions", "replica_of", "status",
               "reason", "prefill_of", "verifies", "verify_tokens")
FILL = {"preemptions": 0, "replica_of": -1, "status": PENDING, "reason": "", "prefill_of": -1,
        "verifies": 0, "verify_tokens": 0}


def grow(engine: Engine, more: Requests) -> None:
    """Append ``more`` (the clients' next chunk of requests) to ``engine``'s requests."""
    m = len(more)
    engine.requests = concat(engine.requests, more)
    for name in PER_REQUEST:
        a = getattr(engine, name)
        if a is not None:
            tail = np.full(m, FILL.get(name, np.nan), dtype=a.dtype)
            setattr(engine, name, np.concatenate([a, tail]))
    if engine.faults is not None:
        engine.faults.retries = np.concatenate([engine.faults.retries, np.zeros(m, np.int64)])
    engine._prompt += more.prompt_tokens.tolist()
    engine._output += more.output_tokens.tolist()
    if engine._priority is not None:
        assert more.priority is not None
        engine._priority += more.priority.tolist()
    if engine._hashes is not None:
        assert more.prefix_hashes is not None
        engine._hashes += [tuple(h.tolist()) for h in more.prefix_hashes]
    engine._send += [math.inf] * m
    engine._arrival += [math.inf] * m


def keep(engine: Engine, n: int, note: str) -> None:
    """Keep ``engine``'s first ``n`` requests (those the clients sent), with their send
    times as arrival times, and ``note`` (why the others were not sent) in their notes."""
    for name in PER_REQUEST:
        a = getattr(engine, name)
        if a is not None:
            setattr(engine, name, a[:n])
    if engine.faults is not None:
        engine.faults.retries = engine.faults.retries[:n]
    engine.requests = dataclasses.replace(
        take(engine.requests, n), arrival_s=np.array(engine._send[:n], dtype=np.float64),
        notes=engine.requests.notes + ((note,) if note else ()))
