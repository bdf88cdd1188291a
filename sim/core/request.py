"""A request in flight on a replica, and the status codes every request ends with."""

from __future__ import annotations

from typing import Any

# Final status of each request; every request ends with exactly one.
# TIMED_OUT: its client gave up waiting to be scheduled (``admission.timeout_s``);
# FAILED: lost on a failed replica and not retried (``faults``, docs/reliability.md).
# UNFINISHED: sent before ``horizon_s`` but not done by it (backlog); NOT_ARRIVED: due at
# or after ``horizon_s``, so never part of the run (counted, but in no rate or verdict).
PENDING, FINISHED, REJECTED, UNFINISHED, TIMED_OUT, FAILED, NOT_ARRIVED = 0, 1, 2, 3, 4, 5, 6
STATUS_NAMES = {PENDING: "pending", FINISHED: "finished", REJECTED: "rejected",
                UNFINISHED: "unfinished", TIMED_OUT: "timed_out", FAILED: "failed",
                NOT_ARRIVED: "not_arrived"}


class Request:
    """Progress of one request while a replica holds it (tokens, blocks, seconds).

    ``computed`` counts tokens whose KV is in the cache (or, while ``swapped`` > 0, in
    host memory: ``swapped`` blocks of it); ``generated`` counts output tokens produced.
    ``priority`` orders admission when the policy asks for it (lower runs first).
    ``hashes`` names the request's leading prompt blocks for prefix caching (or None);
    ``cached`` counts the leading ones it references in its replica's prefix cache.
    ``blocks``, ``cached`` and ``swapped`` are the replica's KV-cache manager's record
    (:class:`sim.core.kvmanager.KVCacheManager`) and only it writes them.
    While ``sync`` >= 0 the request is a member of its replica's
    :class:`sim.core.decodeset.DecodeSet` and ``computed``, ``generated``, ``blocks``,
    ``last_token`` and ``sent`` are as of that set's tick ``sync``. ``last_token`` is when
    the client last received tokens, ``sent`` how many it has (with chunked streaming,
    :mod:`sim.core.streaming`, fewer than ``generated``; otherwise unused).
    With speculative decoding, ``draws`` holds the tokens each of its verify iterations
    emits before capping (1 to k + 1, drawn when it was routed; with their running sums,
    :class:`sim.core.speculation.Speculation`) and ``verifies`` counts the ones it ran, so
    its n-th verify takes the n-th of its draws however it is reached, and ``verified``
    the tokens they emitted (its others came from prefills, or decodes the budget cut
    to one token); ``path`` is the path its first join would lay, when worked out ahead
    (:mod:`sim.core.specplan`).
    An iteration emits a token for this request when it brings
    ``computed`` up to ``prompt + generated``: the end of a (re)prefill, or a decode step.
    Static attributes live in the run's numpy arrays; this object is dropped on finish.
    """

    __slots__ = ("id", "arrival", "prompt", "output", "computed", "generated", "blocks",
                 "last_token", "scheduled", "priority", "swapped", "hashes", "cached", "sync",
                 "draws", "verifies", "verified", "admitted", "path", "sent")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int, priority: int = 0):
        self.id = rid
        self.arrival = arrival
        self.prompt = prompt
        self.output = output
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        self.last_token = 0.0
        self.scheduled = False
        self.priority = priority
        self.swapped = 0
        self.hashes: tuple[int, ...] | None = None
        self.cached = 0
        self.sync = -1  # tick it joined its replica's DecodeSet (sim/core/decodeset.py); -1: none
        self.draws: Any = None  # (chunk tokens, running sums, first index): speculation
        self.verifies = 0
        self.verified = 0  # output tokens its verifies emitted
        # Its replica's admission count when it last entered running: preemption picks the
        # newest by this, whatever the order a pipeline hands requests back in.
        self.admitted = 0
        self.path: Any = None  # its first path through a speculating decode set, if planned
        self.sent = 0  # output tokens streamed to the client (sim/core/streaming.py)

    @property
    def pending_tokens(self) -> int:
        """Tokens still to compute before the next token is emitted."""
        return self.prompt + self.generated - self.computed

    def __repr__(self) -> str:
        return (f"Request(id={self.id}, computed={self.computed}, "
                f"generated={self.generated}/{self.output}, blocks={self.blocks})")
