"""Exact event skipping: a run of decode-only iterations advanced in one SimPy event.

While a replica's batch is every running request decoding one token and nothing
arrives, each iteration is the same batch with every context one token longer, minus
the requests that have finished: its step time is known in advance. The replica's
:class:`sim.decodeset.DecodeSet` plans how many such iterations follow (K >= 2) and
their end times (:meth:`~sim.decodeset.DecodeSet.plan_run`); the replica sleeps once
until the last end and books all K iterations, finishes included
(:meth:`~sim.decodeset.DecodeSet.apply_run`).

Exactness: step times come from the same cost model with the same floating-point
operations as a single step; end times are summed one by one in the order SimPy would
add them (and the one timeout is chosen by :func:`delay_to` to land exactly on the
last), inter-token gaps are differences of those times, and blocks are freed and
taken boundary by boundary in step-by-step order, so every timestamp, log entry and
histogram count equals the step-by-step run's to the bit. The run stops before:

- the first iteration ending at or after the next undelivered arrival, fault, client
  timeout or the horizon (any of them may change the next decision);
- the first iteration that would need more KV blocks than are free (preemption or
  eviction);
- while requests wait: the first iteration that would finish a request (the room it
  frees might admit one). With nobody waiting a finish only shrinks the batch.

A policy opts in with ``steady = True``, asserting that after a decode-only batch of
all its running requests it would choose the same batch again (less finished requests)
as long as none of the above happens (admission blocked by the sequence limit, the
token budget or the KV watermark stays blocked while free blocks only shrink). Runs
are fused only for replicas that keep a DecodeSet; ``event_skipping: false`` (or an
engine without DecodeSets) steps one iteration per event, with identical results.
"""

from __future__ import annotations

import math


def delay_to(now: float, target: float) -> float | None:
    """A delay d (s) with now + d == target exactly (as SimPy computes event times), or
    None when rounding makes the target unreachable from ``now`` (possible when d > now)."""
    d = target - now
    for _ in range(4):
        s = now + d
        if s == target:
            return d
        d = math.nextafter(d, math.inf if s < target else -math.inf)
    return None
