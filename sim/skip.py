"""Exact event skipping: a run of decode-only iterations advanced in one SimPy event.

While a replica's batch is every running request decoding one token and nothing
arrives, each iteration is the same batch with every context one token longer, minus
the requests that have finished: its step time is known in advance.
:func:`plan_decode_run` finds how many such iterations follow (K >= 2) and their end
times; the replica then sleeps once until the last end and :func:`apply_decode_run`
books all K iterations, finishes included.

Exactness: step times come from the same cost model, evaluated on arrays with the same
floating-point operations as the scalar path; end times are summed one by one in the
same order SimPy would add them, inter-token gaps are differences of those times, and
blocks are freed and taken boundary by boundary in step-by-step order, so every
timestamp, log entry and histogram count equals the step-by-step run's to the bit. The
run stops before:

- the first iteration ending at or after the next undelivered arrival, fault, client
  timeout or the horizon (any of them may change the next decision);
- the first iteration that would need more KV blocks than are free (preemption or
  eviction);
- while requests wait: the first iteration that would finish a request (the room it
  frees might admit one). With nobody waiting a finish only shrinks the batch.

A policy opts in with ``steady = True``, asserting that after a decode-only batch of
all its running requests it would choose the same batch again (less finished requests)
as long as none of the above happens (admission blocked by the sequence limit, the
token budget or the KV watermark stays blocked while free blocks only shrink).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.request import FINISHED, Request
from sim.shape import StepShape

if TYPE_CHECKING:
    from sim.replica import Replica


class DecodeRun(NamedTuple):
    """A planned run of K decode iterations: costs, end times (seconds), batch sizes and
    KV blocks per iteration."""

    requests: list[Request]
    dts: list[float]  # cost-model seconds of iterations 0..K-1
    ends: list[float]  # end time of iterations 0..K-1
    seqs: list[int]  # requests decoding in iterations 0..K-1
    delta: list[int]  # blocks taken at the boundary before iteration j (delta[0] = 0)
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


def plan_decode_run(rep: Replica, start: float, dt0: float, bound: float) -> DecodeRun | None:
    """The longest exact run (K >= 2) starting with the iteration just scheduled at
    ``start`` (cost ``dt0``) over all of ``rep.running``, ending before ``bound``."""
    # Cheap refusal first: a second iteration as long as the first must also fit before
    # the bound (contexts only grow, so later iterations are no shorter). Declining to
    # fuse is always exact; it only costs speed.
    if not start + 2.0 * dt0 < bound:
        return None
    reqs = rep.running
    b_ = len(reqs)
    rem = []  # iterations each request still decodes; its last one emits its last token
    ctx0 = 0
    for r in reqs:
        # A decode: one token pending, and not the first (a 1-token prompt or final
        # 1-token chunk emits a first token, which is booked differently).
        if r.prompt + r.generated - r.computed != 1 or not r.generated:
            return None
        rem.append(r.output - r.generated)
        ctx0 += r.computed
    # With nobody waiting, a finish only shrinks the batch: nothing can take the room it
    # frees. With requests waiting, it might admit one, so the run stops before it.
    kmax = min(rem) - 1 if rep.waiting else max(rem)
    if kmax < 2:
        return None
    if dt0 > 0 and bound < math.inf:
        kmax = min(kmax, int((bound - start) / dt0) + 1)
    # Batch size and context of iterations 1..kmax-1: request i takes part in
    # iteration j while j < rem_i.
    rem_a = np.asarray(rem, dtype=np.int64)
    order = np.argsort(rem_a, kind="stable")
    by_rem = rem_a[order]
    ctx_cum = np.cumsum(np.fromiter((reqs[i].computed for i in order.tolist()), np.int64, b_))
    j = np.arange(1, kmax, dtype=np.int64)
    gone = np.searchsorted(by_rem, j, side="right")  # finished before iteration j
    seqs_a = b_ - gone
    ctx = ctx0 - np.where(gone > 0, ctx_cum[np.maximum(gone - 1, 0)], 0) + j * seqs_a
    more = rep.cost.step_time(StepShape(seqs_a, seqs_a, ctx, 0, 0, 0, ctx + seqs_a))
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
    seqs = [b_, *seqs_a[: k - 1].tolist()]
    # KV: request i, holding b blocks for c cached tokens, takes one more block at each
    # iteration j >= 1 it runs with c + j == b*bs, b*bs + bs, ...; a request whose last
    # iteration is j frees its own blocks at the boundary after it. At each boundary the
    # frees come first, then the next iteration's blocks; stop before the iteration that
    # would need more than are free (it would preempt or evict).
    bs = rep.block_size
    per_hash = rep.prefix.per_hash if rep.prefix is not None else 0
    delta = [0] * k
    frees = [0] * (k + 1)
    for r, m in zip(reqs, rem, strict=True):
        # The iteration-0 allocation left r.blocks * bs >= computed + 1: first >= 1.
        first = r.blocks * bs - r.computed
        last = m if m < k else k
        taken = 0
        while first < last:
            delta[first] += 1
            taken += 1
            first += bs
        if m <= k:
            frees[m] += r.blocks + taken - r.cached * per_hash
    used0 = rep.kv.used
    free0 = rep.kv.num_free
    used = [used0]
    net = 0
    for jj in range(1, k):
        net += delta[jj] - frees[jj]
        if net > free0:
            k = jj
            break
        used.append(used0 + net)
    # The one event must land exactly where step-by-step events would; a run whose end
    # is unreachable by rounding is shortened (or not fused at all).
    while k >= 2:
        delay = _delay_to(start, ends[k - 1])
        if delay is not None:
            return DecodeRun(list(reqs), dts[:k], ends[:k], seqs[:k], delta[:k], used[:k],
                             delay)
        k -= 1
    return None


def apply_decode_run(rep: Replica, run: DecodeRun, start: float) -> None:
    """Book the K iterations of ``run`` on ``rep`` as K separate steps would have."""
    stats = rep.stats
    engine = rep.engine
    reqs = run.requests
    ends = run.ends
    k = len(ends)
    rem = [r.output - r.generated for r in reqs]
    log = engine.step_log
    t0 = start
    for j in range(k):
        dt = run.dts[j]
        b_ = run.seqs[j]
        stats.book(dt, b_, b_, run.used[j])
        if log is not None:
            log.append((rep.index, t0, t0 + dt, tuple(
                (r.id, 1, r.computed + j) for r, m in zip(reqs, rem, strict=True) if m > j)))
        t0 = ends[j]
    # Inter-token gaps, in the order step-by-step iterations append them: each request's
    # first gap, then per iteration one (equal) gap for every request in it.
    gaps = [ends[0] - r.last_token for r in reqs]
    for j in range(1, k):
        gaps.extend([ends[j] - ends[j - 1]] * run.seqs[j])
    rep.itl.extend(gaps)
    bs = rep.block_size
    finishers: list[list[Request]] = [[] for _ in range(k)]
    for r, m in zip(reqs, rem, strict=True):
        its = m if m < k else k
        c = r.computed
        nb = (c + its - 1) // bs + 1 - r.blocks  # blocks taken by its last iteration
        if nb > 0:
            r.blocks += nb
        r.computed = c + its
        r.generated += its
        r.last_token = ends[its - 1]
        if m <= k:
            finishers[m - 1].append(r)
    # Boundary by boundary: the previous iteration's finishers free their blocks, then
    # the next iteration takes its new ones (the order the plan checked).
    kv = rep.kv
    done = 0
    for j in range(k):
        if j:
            kv.allocate(run.delta[j])
        for r in finishers[j]:
            rep._drop_blocks(r)
            engine.finish[r.id] = ends[j]
            engine.status[r.id] = FINISHED
            done += 1
    rep.outstanding -= sum(run.seqs)
    if done:
        rep.running = [r for r in rep.running if r.generated < r.output]
        engine.finished_count += done
