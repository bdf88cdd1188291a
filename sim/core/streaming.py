"""Chunked streaming (vLLM's ``--stream-interval N``): which emitted tokens the server
sends to the client, and so the inter-token gaps a client measures.

vLLM's output processor sends a request's first token at once; after that it holds the
tokens back until at least N are unsent, then sends them together, and it sends what is
left when the request finishes. A client (vLLM's benchmark, genai-perf) records one
inter-token gap per chunk it receives, so ITL is a chunk's gap; TTFT, the finish time,
and with them TPOT and E2E, are the same as with N = 1. ``Request.sent`` is the output
tokens sent so far and ``Request.last_token`` the time of the last send (with N = 1,
every emission is a send).

SGLang builds before 0.5.10 (as their public runs show: docs/validation.md) stream a
request's output (``--stream-interval N``) whenever its count of output tokens is a
multiple of N, the first token not apart: its first chunk leaves with token N, N - 1
decode steps after the prefill (``serving.stream_first_token: false``); later ones send
the first token at once, as vLLM does. The client's TTFT is then that chunk's arrival,
and its TPOT the rest of the request over the other tokens: these functions take
``first`` (the engine, whose ``first_token`` holds the first-token times by request id;
read at each send, since a closed loop grows that array) and set a request's entry when
its first chunk goes out, with no gap before it.

A request decoded token by token in its replica's decode set
(:class:`sim.core.decodeset.DecodeSet`) emits one token per iteration; the set keeps
each iteration's end time (:class:`EndTimes`) and works out a member's sends when it
leaves or is settled (:func:`member_sends`), so an iteration costs one stored float. A
speculating set's members emit one to k + 1 tokens a verify, known from their draws
(:class:`sim.core.specset.SpecDecodeSet`); their sends follow the running sum of what
they emitted (:func:`verify_sends`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from sim.core.histogram import LogHistogram
from sim.core.request import Request


class FirstTokens(Protocol):
    """What holds the first-token times (s) by request id: the engine."""

    first_token: np.ndarray


class EndTimes:
    """End times (s) of a decode set's iterations, by tick, from the oldest tick a member
    may still need (``base``); dropped when the set empties."""

    __slots__ = ("base", "times", "limit")

    def __init__(self) -> None:
        self.base = 0
        self.times = array("d")
        self.limit = TRIM_AT  # stored times at which to look for ones to forget

    def reset(self, tick: int) -> None:
        """Forget every stored time; the next one stored is tick ``tick``'s."""
        self.base = tick
        self.times = array("d")
        self.limit = TRIM_AT

    def at(self, tick: int) -> float:
        """When the iteration of ``tick`` ended (s)."""
        return self.times[tick - self.base]

    def store(self, now: float, finish_at: dict[int, list[Request]]) -> None:
        """Store the end (s) of the iteration that just ran; past :data:`TRIM_AT` stored,
        forget those before the oldest tick a member (``finish_at``'s, by finish tick)
        joined at, which no member needs. The next look is when twice as many are kept,
        so a member that stays for very long costs amortised O(1) a tick."""
        times = self.times
        times.append(now)
        if len(times) >= self.limit:
            oldest = min(r.sync for members in finish_at.values() for r in members)
            if oldest > self.base:
                del times[:oldest - self.base]
                self.base = oldest
            self.limit = max(TRIM_AT, 2 * len(times))


TRIM_AT = 1 << 16  # stored times at which a decode set drops those no member needs


def send(r: Request, now: float, interval: int, gaps: list[float],
         first: FirstTokens | None = None) -> None:
    """``r`` emitted its latest tokens (``r.generated`` now counts them) at ``now`` (s):
    send them if its first token is among them (unless ``first`` is given: see the
    module doc), ``interval`` are unsent or it is done, appending the client's gap since
    the previous send to ``gaps``."""
    if r.generated == 1 and first is None:
        r.sent = 1
        r.last_token = now
    elif r.generated - r.sent >= interval or r.generated == r.output:
        if r.sent:
            gaps.append(now - r.last_token)
        elif first is not None:
            first.first_token[r.id] = now
        r.sent = r.generated
        r.last_token = now


def member_sends(r: Request, ends: EndTimes, tick: int, interval: int,
                 gaps: list[float], first: FirstTokens | None = None) -> None:
    """Send what a decode-set member emitted, one token an iteration, from tick
    ``r.sync`` up to (not including) ``tick``; ``r.generated`` still counts its tokens as
    of ``r.sync``. Appends each chunk's gap to ``gaps`` and leaves ``r.sent`` and
    ``r.last_token`` as of ``tick`` (the caller then brings ``r.generated`` there); a
    first chunk sets ``first`` (see :func:`send`)."""
    emitted = tick - r.sync
    if emitted <= 0:
        return
    g0 = r.generated
    last = g0 + emitted  # tokens generated after the last of these iterations
    # Token j (j > g0) came out of the iteration of tick r.sync + j - g0 - 1; the chunks
    # end at tokens sent + N, sent + 2N, ... and at the last one when the request is done.
    k = r.sent + interval
    prev = r.last_token
    while k <= last:
        t = ends.at(r.sync + k - g0 - 1)
        _gap(r, k - interval, t, prev, gaps, first)
        prev = t
        k += interval
    _finish(r, ends, tick, last, k - interval, prev, gaps, first)


def _gap(r: Request, sent: int, t: float, prev: float, gaps: list[float],
         first: FirstTokens | None) -> None:
    """A chunk of ``r`` leaves at ``t`` (s) after ``sent`` tokens went at ``prev``: a gap,
    or for its first chunk its first-token time (``first``)."""
    if sent:
        gaps.append(t - prev)
    elif first is not None:
        first.first_token[r.id] = t


def _finish(r: Request, ends: EndTimes, tick: int, last: int, sent: int, prev: float,
            gaps: list[float], first: FirstTokens | None = None) -> None:
    """Leave ``r`` with ``sent`` tokens sent, the last at ``prev`` (s); when its
    ``last`` token (emitted in the iteration before ``tick``) is its output's end, the
    unsent rest goes out with it."""
    if last == r.output and last > sent:
        t = ends.at(tick - 1)
        _gap(r, sent, t, prev, gaps, first)
        prev = t
        sent = last
    r.sent = sent
    r.last_token = prev


def verify_sends(r: Request, ends: EndTimes, tick: int, cum: np.ndarray, interval: int,
                 gaps: list[float], first: FirstTokens | None = None) -> None:
    """As :func:`member_sends` for a member of a speculating decode set, whose verifies
    emit one to k + 1 tokens: ``cum[i]`` is the tokens it emitted in its first i + 1
    iterations here (from tick ``r.sync``, up to ``tick``). A chunk goes out after the
    verify that brings N unsent tokens, all of them unsent then; the last verify of a
    finished request sends whatever is left."""
    if not len(cum):
        return
    g0 = r.generated
    prev = r.last_token
    sent = r.sent
    target = sent + interval - g0  # tokens (from g0) that complete the next chunk
    i = int(cum.searchsorted(target))
    while i < len(cum):
        t = ends.at(r.sync + i)
        _gap(r, sent, t, prev, gaps, first)
        prev = t
        sent = g0 + int(cum[i])
        i = int(cum.searchsorted(sent - g0 + interval))
    _finish(r, ends, tick, g0 + int(cum[-1]), sent, prev, gaps, first)


def stamp(emitted: Sequence[Request], now: float, first_token: np.ndarray, interval: int,
          first: FirstTokens | None, itl: LogHistogram) -> int:
    """Record the tokens ``emitted`` (a replica's listed entries, in batch order) at
    ``now`` (s): first-token times into ``first_token`` (by request id; with ``first``,
    its first chunk's send sets them instead), inter-token gaps into ``itl``, one a send
    (``interval``: tokens a chunk). Returns the tokens the replica no longer owes for
    them: one each, and the prompt of each first token."""
    gaps: list[float] = []
    owed = len(emitted)
    for r in emitted:
        if r.generated == 1:
            if first is None:
                first_token[r.id] = now
            owed += r.prompt
        if interval > 1:
            send(r, now, interval, gaps, first)  # a gap a chunk
        else:
            if r.generated != 1:
                gaps.append(now - r.last_token)
            r.last_token = now
    if gaps:
        itl.extend(gaps)
    return owed
