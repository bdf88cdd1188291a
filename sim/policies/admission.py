"""Admission control and client behaviour: what a serving front end refuses, and what
clients give up on.

YAML (every key optional; docs/reliability.md)::

    admission:
      max_waiting: 512          # per replica: an arrival finding this many waiting is refused
      rate_limit: {rate: 20.0, burst: 40}   # token bucket at the front door (requests/s, requests)
      timeout_s: 30.0           # a request not scheduled this long after arrival is abandoned

Refusals are ``rejected`` with reason ``rate_limited`` or ``queue_full``; abandoned
requests end ``timed_out`` (reason ``timeout``). Both count against goodput and SLO
attainment, which divide by every request.

Timeouts are processed lazily, yet exactly. A waiting request's expiry changes only
its replica's waiting queue and outstanding-token count. Those are read by (a) the
replica's own scheduling decision, at an iteration boundary, and (b) the router, when
it places an arrival or a retry. So expiries with deadline <= t are applied just before
(a) a decision at time t and (b) a placement of a request whose time is t — the same
state an eager per-request timer would leave there. Between those moments nobody reads
the queue, so deferring is invisible. The recorded time of a timeout is exactly
``arrival + timeout_s``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.configtools import bounded
from sim.core.request import TIMED_OUT, Request

if TYPE_CHECKING:
    from sim.core.engine import Engine
    from sim.core.replica import Replica


@dataclass(frozen=True)
class RateLimitConfig:
    """A token bucket: ``rate`` requests/s refill a bucket of ``burst`` requests (full at
    the start); an arrival that finds less than one token is refused."""

    rate: float = bounded(gt=0)
    burst: int = bounded(1, ge=1)


@dataclass(frozen=True)
class AdmissionConfig:
    """Front-end limits and client patience (requests, seconds); None turns each off."""

    max_waiting: int | None = bounded(None, ge=1)
    rate_limit: RateLimitConfig | None = None
    timeout_s: float | None = bounded(None, gt=0)


class TokenBucket:
    """Token-bucket rate limiting evaluated at each arrival's own time (seconds), so the
    verdict does not depend on when the engine happens to deliver the arrival."""

    __slots__ = ("rate", "burst", "tokens", "last")

    def __init__(self, cfg: RateLimitConfig):
        self.rate = cfg.rate
        self.burst = float(cfg.burst)
        self.tokens = self.burst
        self.last = -math.inf

    def take(self, t: float) -> bool:
        """Spend one token for an arrival at ``t`` (non-decreasing); False: refused."""
        if self.last > -math.inf:
            self.tokens = min(self.burst, self.tokens + (t - self.last) * self.rate)
        self.last = t
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Timeouts:
    """Client timeouts of requests waiting unscheduled: per replica, a heap of
    ``(deadline_s, id, request)``. Entries of requests since scheduled are stale and
    dropped when they reach the top (a scheduled request is never abandoned)."""

    def __init__(self, engine: Engine, timeout_s: float):
        self.engine = engine
        self.timeout_s = timeout_s
        self.heaps: dict[int, list[tuple[float, int, Request]]] = {}

    def track(self, rep: Replica, r: Request, deadline_s: float) -> None:
        """Watch ``r``, just queued on ``rep``: its client gives up at ``deadline_s``
        (its send time plus ``timeout_s``)."""
        heapq.heappush(self.heaps.setdefault(rep.index, []), (deadline_s, r.id, r))

    def forget(self, rep: Replica) -> None:
        """Drop every clock on ``rep`` (a fault emptied its queue)."""
        self.heaps.pop(rep.index, None)

    def next_deadline(self, rep: Replica) -> float:
        """The earliest deadline (s) of a request still waiting unscheduled on ``rep``."""
        h = self.heaps.get(rep.index)
        while h and h[0][2].scheduled:
            heapq.heappop(h)
        return h[0][0] if h else math.inf

    def expire_all(self, t: float) -> None:
        """Apply every expiry with deadline <= ``t`` on every replica (before placing a
        request whose time is ``t``)."""
        for rep in self.engine.entry:
            if self.next_deadline(rep) <= t:
                self.expire(rep, t)

    def expire(self, rep: Replica, now: float) -> None:
        """Abandon the requests on ``rep`` still unscheduled at their deadline <= ``now``."""
        h = self.heaps.get(rep.index)
        if not h:
            return
        gone: list[Request] = []
        while h:
            d, _, r = h[0]
            if r.scheduled:
                heapq.heappop(h)
                continue
            if d > now:
                break
            heapq.heappop(h)
            gone.append(r)
        if not gone:
            return
        _remove(rep, {r.id for r in gone})
        eng = self.engine
        for r in gone:
            rep.outstanding -= r.prompt + r.output  # nothing of it was computed
            eng.status[r.id] = TIMED_OUT
            eng.reason[r.id] = "timeout"
            eng.ended(r.id, now)


def _remove(rep: Replica, ids: set[int]) -> None:
    """Take the requests ``ids`` out of ``rep``'s gate and ``rep.waiting``, keeping the
    order of the rest.

    Under FCFS the queue is the scheduled (preempted) requests, then the unscheduled ones
    in routing order; the expired are the oldest unscheduled, right after that prefix,
    so a short walk from the left usually finds them all; otherwise the queue is rebuilt.
    """
    w = rep.waiting
    left = len(ids)
    if rep.gate is not None and len(rep.gate):
        # Routed while the replica was busy and not yet read by its scheduler.
        left -= rep.gate.discard(ids)
    if not rep.priority:
        kept: list[Request] = []
        while w and left and (w[0].scheduled or w[0].id in ids):
            x = w.popleft()
            if x.id in ids:
                left -= 1
            else:
                kept.append(x)
        w.extendleft(reversed(kept))
    if left:
        rep.waiting = deque(x for x in w if x.id not in ids)

