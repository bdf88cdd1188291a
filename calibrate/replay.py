"""Replay a request trace for real: the calibration model, a real KV cache and a real
continuous-batching loop, in wall-clock time on the device.

The loop is the simulator's replica loop without SimPy. Each iteration: every request
whose arrival time has passed joins the waiting queue (the same rejection rules as
``sim.core.engine``), the *simulator's own* policy object (``sim.policies.registry``: ``continuous``
or ``chunked``) picks the batch against the same KV-cache manager
(``sim.core.kvmanager.KVCacheManager``, watermark included, preemption by recompute), the
model runs that batch, the simulator's own iteration step
(``sim.core.batch.advance``) moves its tokens on, and the iteration's end stamps first
tokens and finishes requests through the simulator's own finish path
(``sim.core.result.finish_requests``).
So real and simulated runs differ only in where step times come from: the device here,
the cost profile there.

Physical KV storage is one slot per running request (``max_num_seqs`` slots, each
holding the longest request), while admission follows the paged block count, as in
vLLM. Two clocks drive the loop: :class:`WallClock` (real time; an idle loop sleeps
until the next arrival) and :class:`VirtualClock` (time advances by each step's
returned duration), which with :class:`CostExecutor` reproduces the simulator
exactly; tests use that to prove the loop follows the policy.

The model on the device, as the loop's executor: :mod:`calibrate.executor`. Imports
torch (through the model), numpy and pure ``sim`` modules only, never SimPy: it runs on
a GPU machine that has no simulator dependencies. The command ``python -m calibrate.replay_cli``
(:mod:`calibrate.replay_cli`) writes one ``servesim-replay/1`` JSON file per load level.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from calibrate.model import spread_ids
from sim.core.batch import advance
from sim.core.kvmanager import NO_HIT, KVCacheManager, PrefixHit
from sim.core.request import Request
from sim.core.result import Outcomes, finish_requests
from sim.cost.shape import StepShape, shape_of
from sim.errors import ServesimError
from sim.policies.registry import make_policy

SCHEMA = "servesim-replay/1"
STEP_FIELDS = ("start_s", "end_s", "exec_s", "cpu_s", "host_s") + StepShape._fields
Entry = tuple[int, int, int]  # (slot, new_tokens, context_before)


class Executor(Protocol):
    """Runs one iteration: ``entries`` (slot, new, ctx) with ``tokens`` (one id per new token)."""

    def step(self, entries: list[Entry], tokens: list[int]) -> tuple[list[int], float]:
        """Next token id per entry and the step's duration in seconds."""
        ...


class WallClock:
    """Real time in seconds since construction (``perf_counter``)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def now(self) -> float:
        """Seconds since the replay started."""
        return time.perf_counter() - self.t0

    def wait_until(self, t: float) -> None:
        """Sleep until ``t``; the last millisecond is spun for precision."""
        while (left := t - self.now()) > 0:
            if left > 2e-3:
                time.sleep(left - 1e-3)

    def end_step(self, start: float, duration: float) -> float:
        """The iteration ends when the clock says, whatever the executor reported."""
        return self.now()


class VirtualClock:
    """Simulated time: a step ends ``duration`` seconds after it starts; waits jump."""

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        """Current virtual time (s)."""
        return self.t

    def wait_until(self, t: float) -> None:
        """Jump forward to ``t`` seconds."""
        self.t = max(self.t, t)

    def end_step(self, start: float, duration: float) -> float:
        """Advance to ``start + duration`` seconds."""
        self.t = start + duration
        return self.t


class CostExecutor:
    """A stand-in device whose step time is a cost model's (``step_time(StepShape)`` in s).

    Given the loop's ``clock``, a step that starts after the loop sat idle also pays
    the cost model's ``wake_time(idle seconds)`` where it has one, as sim's replicas do.
    """

    def __init__(self, cost: Any, clock: WallClock | VirtualClock | None = None):
        self.cost, self.clock = cost, clock
        self.wake = getattr(cost, "wake_time", None) if clock is not None else None
        self.last_end = 0.0

    def step(self, entries: list[Entry], tokens: list[int]) -> tuple[list[int], float]:
        """Zeros for ids; the cost model's seconds for the shape."""
        dt = float(self.cost.step_time(shape_of((n, c) for _, n, c in entries)))
        if self.wake is not None and self.clock is not None:
            start = self.clock.now()
            if start > self.last_end:
                dt += float(self.wake(start - self.last_end))
            self.last_end = start + dt
        return [0] * len(entries), dt


class _State:
    """What the policies read and call (:class:`sim.policies.base.ReplicaState`; the
    simpy-free half of ``sim.core.replica.Replica``). It keeps no aggregate of steady
    decodes: every decode is a batch entry."""

    group = None
    in_flight = 0  # one stage: no micro-batch is ever in flight while scheduling

    def __init__(self, kv: KVCacheManager, outcomes: Outcomes):
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.kv = kv
        self.block_size = kv.block_size
        self.now = 0.0
        self.outcomes = outcomes

    def admit(self, r: Request, hit: PrefixHit = NO_HIT) -> None:
        """Move ``r`` (popped from waiting, its blocks given by the KV manager) into
        running. The replay keeps no prefix cache, so ``hit`` is always empty."""
        self.running.append(r)
        self.outcomes.scheduled(r, self.now)

    def release(self, r: Request) -> None:
        """Preempt ``r`` by recompute: free its blocks and forget its computed tokens."""
        self.kv.free(r)
        r.computed = 0
        self.outcomes.preempted(r)

    preempt = release

    def requeue(self, victims: Iterable[Request]) -> None:
        """Preempted requests (newest first) go back to the queue's front, oldest first."""
        self.waiting.extendleft(victims)


@dataclass
class ReplayResult:
    """Per-request times (seconds from the replay's start; NaN if it never happened),
    statuses (``finished``, ``rejected``, or ``unfinished`` when the replay was
    interrupted first) and one row per iteration (:data:`STEP_FIELDS`)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    first_sched: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    preemptions: np.ndarray
    status: list[str]
    reason: list[str]
    steps: list[tuple[float, ...]] = field(default_factory=list)
    wall_s: float = 0.0
    interrupted: bool = False  # stopped (SIGINT, or run_loop's stop_at) before the last finish

    def cut(self) -> None:
        """Mark the loop stopped early: requests admitted or due but never finished are
        ``unfinished``; what was served is kept."""
        self.interrupted = True
        self.status = ["unfinished" if st == "finished" and not np.isfinite(f) else st
                       for st, f in zip(self.status, self.finish, strict=True)]


def run_loop(arrival_s: np.ndarray, prompt: np.ndarray, output: np.ndarray, serving: Any,
             max_context: int, executor: Executor, clock: WallClock | VirtualClock,
             vocab: int = 2, interruptible: bool = False, stop_at: float | None = None
             ) -> ReplayResult:
    """Serve the requests (arrivals in seconds, ascending; token counts) under ``serving``
    (a ``sim.config.serving.ServingConfig``: policy, limits, ``num_gpu_blocks`` required).
    ``interruptible``: a SIGINT ends the loop with what it served (``interrupted``),
    instead of propagating; for a replay, whose partial record is worth keeping, not
    for calibration's uses of the loop, which must stop when asked. ``stop_at``
    (``time.perf_counter`` seconds): no step starts after it, and the loop ends as an
    interrupted one does (calibration's host-work loop keeps to its share of the budget)."""
    if serving.policy not in ("continuous", "chunked"):
        raise ServesimError(f"replay runs continuous or chunked, not {serving.policy!r}",
                            where="policy")
    if serving.preemption != "recompute" or serving.priority:
        raise ServesimError("replay supports FCFS with preemption by recompute only")
    if serving.num_gpu_blocks is None:
        raise ServesimError("replay needs serving.num_gpu_blocks", where="num_gpu_blocks")
    n = len(arrival_s)
    blocks = serving.num_gpu_blocks
    kv = KVCacheManager(blocks, serving.block_size, int(serving.watermark * blocks))
    policy = make_policy(serving)
    out = Outcomes(n)
    res = ReplayResult(np.asarray(arrival_s, float), np.asarray(prompt), np.asarray(output),
                       out.first_sched, out.first_token, out.finish, out.preemptions,
                       ["finished"] * n, [""] * n)
    state = _State(kv, out)
    free_slots = list(range(serving.max_num_seqs - 1, -1, -1))
    slot: dict[int, int] = {}
    last_id: dict[int, int] = {}
    arrivals = res.arrival_s.tolist()
    nxt = 0
    t_start = time.perf_counter()
    # The loop's own work since the previous step returned (or since an idle wait
    # ended), timed on the wall clock whatever ``clock`` is: sim prices it as ``host``.
    host_t0 = t_start
    # A SIGINT (the timeout around a replay on a lent machine) ends the loop between or
    # inside steps: what was served is kept and the rest is marked unfinished.
    try:
        while True:
            if stop_at is not None and time.perf_counter() >= stop_at:
                res.cut()
                break
            now = clock.now()
            while nxt < n and arrivals[nxt] <= now:
                why = _reject_reason(int(prompt[nxt]), int(output[nxt]), max_context, kv,
                                     policy, state)
                if why:
                    res.status[nxt], res.reason[nxt] = "rejected", why
                else:
                    state.waiting.append(Request(nxt, arrivals[nxt], int(prompt[nxt]),
                                                 int(output[nxt])))
                nxt += 1
            state.now = now
            batch = policy.schedule(state)
            if not batch:
                if state.waiting or state.running:
                    raise RuntimeError("the policy scheduled nothing with work pending")
                if nxt >= n:
                    break
                clock.wait_until(arrivals[nxt])
                host_t0 = time.perf_counter()
                continue
            # Physical slots follow the block accounting: preempted requests gave theirs up.
            for rid in [i for i in slot if i not in {r.id for r in state.running}]:
                free_slots.append(slot.pop(rid))
            entries: list[Entry] = []
            tokens: list[int] = []
            for r, k in batch.items():
                if r.id not in slot:
                    slot[r.id] = free_slots.pop()
                entries.append((slot[r.id], k, r.computed))
                # A decode feeds the last sampled id; a prompt (or its recompute) ids
                # spread over the vocabulary, so experts route its tokens apart.
                tokens.extend([last_id[r.id]] if k == 1 and r.id in last_id else
                              spread_ids(k, vocab, r.id + r.computed))
            cpu0 = time.thread_time()
            host = time.perf_counter() - host_t0
            ids, dt = executor.step(entries, tokens)
            host_t0 = time.perf_counter()
            end = clock.end_step(now, dt)
            # This thread's CPU seconds in the step: on a CPU device, well under exec_s means
            # other processes took the core and the measured times are inflated.
            cpu = time.thread_time() - cpu0
            res.steps.append((now, end, dt, cpu, host, *shape_of((k, c) for _, k, c in entries)))
            for r, tok in zip(batch, ids, strict=True):
                last_id[r.id] = tok
            # The simulator's own iteration steps: tokens advance as in sim's replicas.
            emitted, finished = advance(batch)
            for r in emitted:
                if r.generated == 1:
                    res.first_token[r.id] = end
            if finished:
                finish_requests(finished, end, kv, out)
                for r in finished:
                    free_slots.append(slot.pop(r.id))
                state.running = [r for r in state.running if r.generated < r.output]
    except KeyboardInterrupt:
        if not interruptible:
            raise
        res.cut()
    res.wall_s = time.perf_counter() - t_start
    return res


def _reject_reason(prompt: int, output: int, max_context: int, kv: KVCacheManager,
                   policy: Any, state: _State) -> str | None:
    """The simulator's rules (``Engine._route``, ``Replica.fits_ever``) for one arrival."""
    if prompt + output > max_context:
        return "exceeds_context"
    if not kv.can_ever_hold(prompt + output - 1):
        return "exceeds_kv_capacity"
    why: str | None = policy.reject_reason(prompt, output, state)
    return why


