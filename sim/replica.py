"""One serving replica: a SimPy process running one batch iteration per event.

Each loop: the policy picks a batch, the cost model prices it, the process sleeps
that long, then (after the engine has delivered every arrival up to now) applies the
iteration: tokens computed, tokens emitted, requests finished and their blocks freed.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from sim.histogram import LogHistogram
from sim.kvcache import BlockAllocator, blocks_for
from sim.request import FINISHED, Request
from sim.shape import StepShape

if TYPE_CHECKING:
    from sim.engine import Engine
    from sim.policies import Batch, Policy


class ReplicaStats:
    """Per-replica totals over the run (counts, seconds, block-seconds)."""

    __slots__ = ("iterations", "busy_s", "batch_seqs", "batch_tokens", "kv_block_s", "kv_peak",
                 "preemptions")

    def __init__(self) -> None:
        self.iterations = 0
        self.busy_s = 0.0
        self.batch_seqs = 0
        self.batch_tokens = 0
        self.kv_block_s = 0.0
        self.kv_peak = 0
        self.preemptions = 0


def batch_shape(batch: Batch) -> StepShape:
    """The :class:`StepShape` of a batch (see :func:`sim.shape.shape_of`)."""
    new = ctx = p_seqs = p_tok = pairs = d_kv = 0
    for r, n in batch.items():
        c = r.computed
        new += n
        ctx += c
        if n > 1:
            p_seqs += 1
            p_tok += n
            pairs += n * c + n * (n + 1) // 2
        else:
            d_kv += c + 1
    return StepShape(len(batch), new, ctx, p_seqs, p_tok, pairs, d_kv)


class Replica:
    """State the policies read (``waiting``, ``running``, ``kv``, ``block_size``) and the
    process that runs iterations on it."""

    def __init__(self, index: int, engine: Engine, policy: Policy, cost: Any,
                 kv: BlockAllocator):
        self.index = index
        self.engine = engine
        self.env = engine.env
        self.policy = policy
        self.cost = cost
        self.kv = kv
        self.block_size = kv.block_size
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.outstanding = 0  # tokens: unprefilled prompts plus outputs not yet produced
        self.idle = True
        self._wakeup: Any = None
        self.stats = ReplicaStats()
        self.itl = LogHistogram()
        self.process = self.env.process(self._run())

    # -- what the router and policies call -------------------------------------------
    def enqueue(self, r: Request) -> None:
        """Accept a routed request into the waiting queue; wake the process if idle."""
        self.waiting.append(r)
        self.outstanding += r.prompt + r.output
        if self.idle:
            self.idle = False
            self._wakeup.succeed()

    def admit(self, r: Request, blocks: int) -> None:
        """Move ``r`` (already popped from waiting) into running with ``blocks`` more blocks."""
        self.kv.allocate(blocks)
        r.blocks += blocks
        self.running.append(r)
        if not r.scheduled:
            r.scheduled = True
            self.engine.first_sched[r.id] = self.env.now

    def release(self, r: Request) -> None:
        """Preempt ``r`` by recompute: free its blocks and forget its computed tokens."""
        self.kv.free(r.blocks)
        r.blocks = 0
        r.computed = 0
        self.engine.preemptions[r.id] += 1
        self.stats.preemptions += 1

    def fits_ever(self, prompt: int, output: int) -> str | None:
        """Why a request of these lengths can never finish on this replica, or None."""
        if blocks_for(prompt + output - 1, self.block_size) > self.kv.total - self.kv.watermark:
            return "exceeds_kv_capacity"
        return self.policy.reject_reason(prompt, output, self)

    # -- the process -----------------------------------------------------------------
    def _run(self) -> Any:
        env = self.env
        engine = self.engine
        stats = self.stats
        schedule = self.policy.schedule
        step_time = self.cost.step_time
        log = engine.step_log
        while True:
            batch = schedule(self)
            if not batch:
                if self.waiting or self.running:
                    raise RuntimeError(f"replica {self.index}: policy scheduled nothing with "
                                       f"{len(self.waiting)} waiting, {len(self.running)} running")
                self.idle = True
                self._wakeup = env.event()
                engine.replica_idle()
                yield self._wakeup
                continue
            shape = batch_shape(batch)
            dt = step_time(shape)
            start = env.now
            stats.iterations += 1
            stats.busy_s += dt
            stats.batch_seqs += shape.seqs
            stats.batch_tokens += shape.new_tokens
            used = self.kv.used
            stats.kv_block_s += used * dt
            if used > stats.kv_peak:
                stats.kv_peak = used
            if log is not None:
                log.append((self.index, start, start + dt,
                            tuple((r.id, n, r.computed) for r, n in batch.items())))
            yield env.timeout(dt)
            engine.dispatch()
            self._complete(batch, env.now)

    def _complete(self, batch: Batch, now: float) -> None:
        engine = self.engine
        itl = self.itl
        done = 0
        emitted = 0
        for r, n in batch.items():
            c = r.computed + n
            r.computed = c
            if c == r.prompt + r.generated:
                g = r.generated + 1
                r.generated = g
                emitted += 1
                if g == 1:
                    engine.first_token[r.id] = now
                    self.outstanding -= r.prompt
                else:
                    itl.add(now - r.last_token)
                r.last_token = now
                if g == r.output:
                    self.kv.free(r.blocks)
                    r.blocks = 0
                    engine.finish[r.id] = now
                    engine.status[r.id] = FINISHED
                    done += 1
        self.outstanding -= emitted
        if done:
            self.running = [r for r in self.running if r.generated < r.output]
            engine.finished_count += done
