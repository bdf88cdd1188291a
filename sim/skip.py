"""Exact event skipping: a run of decode-only iterations advanced in one SimPy event.

While a replica's batch is every running request decoding one token, and nothing
arrives, finishes or runs out of KV blocks, each iteration is the same batch with every
context one token longer: its step time is known in advance. :func:`plan_decode_run`
finds how many such iterations follow (K >= 2) and their end times; the replica then
sleeps once until the last end and :func:`apply_decode_run` books all K iterations.

Exactness: step times come from the same cost model, evaluated on arrays with the same
floating-point operations as the scalar path; end times are summed one by one in the
same order SimPy would add them, and inter-token gaps are differences of those times,
so every timestamp and histogram entry equals the step-by-step run's to the bit. The
run stops before:

- the first iteration that would finish a request (finishing changes the batch);
- the first iteration ending at or after the next undelivered arrival, or at or after
  the horizon (an arrival may be routed here and change the next decision);
- the first iteration that would need more KV blocks than are free (preemption).

A policy opts in with ``steady = True``, asserting that after a decode-only batch of
all its running requests it would choose the same batch again as long as none of the
above happens (admission blocked by the sequence limit, the token budget or the KV
watermark stays blocked while free blocks only shrink).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.request import Request
from sim.shape import StepShape

if TYPE_CHECKING:
    from sim.replica import Replica


class DecodeRun(NamedTuple):
    """A planned run of K decode iterations: their costs and end times (seconds)."""

    requests: list[Request]
    dts: list[float]  # cost-model seconds of iterations 0..K-1
    ends: list[float]  # end time of iterations 0..K-1
    used: list[int]  # KV blocks in use during iterations 0..K-1
    delay: float  # the one timeout that lands exactly on ends[-1]


def _delay_to(now: float, target: float) -> float | None:
    """A delay d with now + d == target exactly (as SimPy computes event times), or None
    when rounding makes the target unreachable from ``now`` (possible when d > now)."""
    d = target - now
    for _ in range(4):
        s = now + d
        if s == target:
            return d
        d = math.nextafter(d, math.inf if s < target else -math.inf)
    return None


def _new_blocks(c: int, b: int, j: int, bs: int) -> int:
    """Blocks a request with ``c`` cached tokens and ``b`` blocks takes by iteration j."""
    return max(0, (c + j) // bs + 1 - b)


def plan_decode_run(rep: Replica, start: float, dt0: float, bound: float) -> DecodeRun | None:
    """The longest exact run (K >= 2) starting with the iteration just scheduled at
    ``start`` (cost ``dt0``) over all of ``rep.running``, ending before ``bound``."""
    # Cheap refusal first: a second iteration as long as the first must also fit before
    # the bound (contexts only grow, so later iterations are no shorter). Declining to
    # fuse is always exact; it only costs speed.
    if not start + 2.0 * dt0 < bound:
        return None
    reqs = rep.running
    left = 1 << 62
    ctx0 = 0
    for r in reqs:
        # A decode: one token pending, and not the first (a 1-token prompt or final
        # 1-token chunk emits a first token, which is booked differently).
        if r.prompt + r.generated - r.computed != 1 or not r.generated:
            return None
        if r.output - r.generated < left:
            left = r.output - r.generated
        ctx0 += r.computed
    kmax = left - 1  # iteration kmax would finish someone
    if kmax < 2:
        return None
    # Later iterations are no shorter than the first: at most this many fit the bound.
    if dt0 > 0 and bound < math.inf:
        kmax = min(kmax, int((bound - start) / dt0) + 1)
    b_ = len(reqs)
    ctx = ctx0 + b_ * np.arange(1, kmax, dtype=np.int64)  # context before iterations 1..
    more = rep.cost.step_time(StepShape(b_, b_, ctx, 0, 0, 0, ctx + b_))
    dts = [dt0]
    end = start + dt0
    ends = [end]
    for dt in np.atleast_1d(more).tolist():
        end = end + dt
        if not end < bound:
            break
        dts.append(dt)
        ends.append(end)
    k = len(ends)
    if k < 2:
        return None
    # KV: request i, holding b blocks for c cached tokens, takes one more block at each
    # iteration j >= 1 with c + j == b*bs, b*bs + bs, ...; stop before the iteration
    # whose cumulative need exceeds the free blocks (it would preempt).
    bs = rep.block_size
    delta = [0] * k
    for r in reqs:
        for j in range(max(1, r.blocks * bs - r.computed), k, bs):
            delta[j] += 1
    used0 = rep.kv.used
    free = rep.kv.num_free
    used = [used0]
    taken = 0
    for j in range(1, k):
        taken += delta[j]
        if taken > free:
            k = j
            break
        used.append(used0 + taken)
    if k < 2:
        return None
    # The one event must land exactly where step-by-step events would; a run whose end
    # is unreachable by rounding is shortened (or not fused at all).
    while k >= 2:
        delay = _delay_to(start, ends[k - 1])
        if delay is not None:
            return DecodeRun(list(reqs), dts[:k], ends[:k], used[:k], delay)
        k -= 1
    return None


def apply_decode_run(rep: Replica, run: DecodeRun, start: float) -> None:
    """Book the K iterations of ``run`` on ``rep`` as K separate steps would have."""
    stats = rep.stats
    reqs = run.requests
    k = len(run.ends)
    b_ = len(reqs)
    log = rep.engine.step_log
    t0 = start
    for j in range(k):
        dt = run.dts[j]
        stats.iterations += 1
        stats.busy_s += dt
        stats.batch_seqs += b_
        stats.batch_tokens += b_
        used = run.used[j]
        stats.kv_block_s += used * dt
        if used > stats.kv_peak:
            stats.kv_peak = used
        if log is not None:
            log.append((rep.index, t0, t0 + dt, tuple((r.id, 1, r.computed + j) for r in reqs)))
        t0 = run.ends[j]
    # Inter-token gaps: each request's first gap, then one per iteration for all of them,
    # as differences of end times (what step-by-step events subtract).
    ends = run.ends
    first_end = ends[0]
    gaps = [first_end - r.last_token for r in reqs]
    for j in range(1, k):
        gaps.extend([ends[j] - ends[j - 1]] * b_)
    rep.itl.extend(gaps)
    last = ends[-1]
    bs = rep.block_size
    taken = 0
    for r in reqs:
        nb = _new_blocks(r.computed, r.blocks, k - 1, bs)
        taken += nb
        r.blocks += nb
        r.computed += k
        r.generated += k
        r.last_token = last
    rep.kv.allocate(taken)
    rep.outstanding -= b_ * k
