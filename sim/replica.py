"""One serving replica: a SimPy process running one batch iteration per event.

Each loop: the policy picks a batch, the cost model prices it, the process sleeps
that long, then (after the engine has delivered every arrival up to now) applies the
iteration: tokens computed, tokens emitted, requests finished and their blocks freed.

A replica has a ``role``: ``both`` (co-located prefill and decode), or ``prefill`` /
``decode`` in a disaggregated cluster (:mod:`sim.disagg`). A prefill replica hands each
request to ``handoff`` once its first token is out; a decode replica receives requests
with their prompt KV present through an inbox of timed deliveries.
"""

from __future__ import annotations

import contextlib
import heapq
from bisect import insort
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import simpy

from sim.decodeset import DecodeSet
from sim.histogram import LogHistogram
from sim.kvcache import BlockAllocator, blocks_for
from sim.prefix import PrefixCache
from sim.replicastats import ReplicaStats
from sim.request import FINISHED, Request
from sim.shape import StepShape, batch_shape

if TYPE_CHECKING:
    from sim.engine import Engine
    from sim.policies import Batch, Policy
    from sim.scenario import ServingConfig


def _order(r: Request) -> tuple[int, float, int]:
    """Admission order under priority scheduling: class, then arrival, then id."""
    return (r.priority, r.arrival, r.id)


class Replica:
    """State the policies read (``waiting``, ``running``, ``kv``, ``block_size``) and the
    process that runs iterations on it.

    ``swap_block_s`` is the PCIe time to move one block (per-GPU shard) between GPU and
    host, ``swap_blocks`` the host space in blocks; both matter only when
    ``serving.preemption`` is ``swap``.
    """

    def __init__(self, index: int, engine: Engine, policy: Policy, cost: Any,
                 kv: BlockAllocator, serving: ServingConfig | None = None, role: str = "both",
                 swap_block_s: float = 0.0, swap_blocks: int = 0):
        self.index = index
        self.engine = engine
        self.env = engine.env
        self.policy = policy
        self.cost = cost
        self.kv = kv
        self.block_size = kv.block_size
        self.role = role
        self.entry = role != "decode"  # receives arrivals from the router
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.outstanding = 0  # tokens: unprefilled prompts plus outputs not yet produced
        self.idle = True
        self.priority = serving is not None and serving.priority
        self.swap = serving is not None and serving.preemption == "swap"
        self.swap_block_s = swap_block_s
        self.swap_free = swap_blocks  # host blocks left for swapped-out KV
        self.swap_s = 0.0  # PCIe seconds the next iteration spends swapping
        self.handoff: Callable[[Replica, Request, float], None] | None = None
        self.inbox: list[tuple[float, int, Request]] = []  # (lands_s, id, request)
        self._wakeup: Any = None
        self.stats = ReplicaStats(kv.total, role)
        self.prefix: PrefixCache | None = None  # set by the engine when caching is on
        self.itl = LogHistogram()
        # Policies whose running requests are all steady decodes between iterations keep
        # them in a DecodeSet: O(1) work per decode iteration instead of O(batch).
        lazy = engine.lazy_decodes and getattr(policy, "lazy_decodes", False)
        self.group = (DecodeSet(self.block_size, getattr(policy, "reserves_kv", False))
                      if lazy else None)
        self.process = self.env.process(self._run())

    # -- what the router and policies call -------------------------------------------
    def enqueue(self, r: Request) -> None:
        """Accept a routed request into the waiting queue; wake the process if idle."""
        if self.priority:
            insort(self.waiting, r, key=_order)
        else:
            self.waiting.append(r)
        self.outstanding += r.prompt + r.output
        if self.idle:
            self._wake()

    def _wake(self) -> None:
        self.idle = False
        if self.entry:
            self.engine._idle -= 1
        self._wakeup.succeed()

    def receive(self, r: Request, lands: float) -> None:
        """A request whose prefill ran elsewhere; its KV lands here at ``lands`` (s)."""
        self.outstanding += r.output - r.generated
        heapq.heappush(self.inbox, (lands, r.id, r))
        self.env.timeout(lands - self.env.now).callbacks.append(self._landed)

    def _landed(self, _event: Any) -> None:
        self.pull()

    def pull(self) -> None:
        """Queue every delivery that has landed by now (whichever event comes first)."""
        now = self.env.now
        inbox = self.inbox
        while inbox and inbox[0][0] <= now:
            r = heapq.heappop(inbox)[2]
            if self.priority:
                insort(self.waiting, r, key=_order)
            else:
                self.waiting.append(r)
            if self.idle:
                self._wake()

    def requeue(self, victims: Iterable[Request]) -> None:
        """Put preempted requests (newest first) back in the waiting queue: at its front
        under FCFS, so the oldest victim runs first; in order under priority."""
        if self.priority:
            for r in victims:
                insort(self.waiting, r, key=_order)
        else:
            self.waiting.extendleft(victims)

    def prefix_hit(self, r: Request) -> tuple[int, int]:
        """(tokens of ``r``'s next prefill already in this replica's prefix cache, cached
        blocks that would stop being evictable if it took them); (0, 0) without caching."""
        pc = self.prefix
        if pc is None or r.hashes is None or r.computed:
            return 0, 0
        k, unref = pc.match(r.hashes, r.prompt + r.generated)
        return k * pc.hash_tokens, unref

    def admit(self, r: Request, blocks: int, cached_tokens: int = 0) -> None:
        """Move ``r`` (already popped from waiting) into running with ``blocks`` more blocks,
        its first ``cached_tokens`` taken from the prefix cache (see :meth:`prefix_hit`).
        A swapped-out request's KV comes back over PCIe in the next iteration."""
        pc = self.prefix
        if pc is not None and not r.computed:
            self.stats.prefix_query_tokens += r.prompt + r.generated
            if cached_tokens:
                assert r.hashes is not None
                k = cached_tokens // pc.hash_tokens
                pc.acquire(r.hashes[:k])  # before allocating, so they are not evicted
                r.cached = k
                r.blocks += k * pc.per_hash
                r.computed = cached_tokens
                self.stats.prefix_hit_tokens += cached_tokens
        self.kv.allocate(blocks)
        r.blocks += blocks
        self.running.append(r)
        if r.swapped:
            self.swap_s += r.swapped * self.swap_block_s
            self.swap_free += r.swapped
            r.swapped = 0
        if not r.scheduled:
            r.scheduled = True
            self.engine.first_sched[r.id] = self.env.now

    def release(self, r: Request) -> None:
        """Preempt ``r``: free its blocks. By recompute it forgets its computed tokens; by
        swap its KV moves to host memory (when the host has room, else recompute)."""
        n = r.blocks
        self._drop_blocks(r)
        if self.swap and r.computed and n <= self.swap_free:
            r.swapped = n
            self.swap_free -= n
            self.swap_s += n * self.swap_block_s
        else:
            r.computed = 0
        self.engine.preemptions[r.id] += 1
        self.stats.preemptions += 1

    preempt = release

    def _drop_blocks(self, r: Request) -> None:
        """Free ``r``'s own blocks and its references to cached prefix entries."""
        if r.cached:
            pc = self.prefix
            assert pc is not None and r.hashes is not None
            self.kv.free(r.blocks - r.cached * pc.per_hash)
            pc.release(r.hashes[:r.cached])
            r.cached = 0
        else:
            self.kv.free(r.blocks)
        r.blocks = 0

    def _publish(self, r: Request) -> None:
        """After ``r``'s prefill: its full prompt blocks join the prefix cache (or, when
        another request cached the same content meanwhile, share that and free its own)."""
        pc = self.prefix
        assert pc is not None and r.hashes is not None
        full = min(len(r.hashes), r.prompt // pc.hash_tokens)
        for k in range(r.cached, full):
            if not pc.publish(r.hashes[k]):
                self.kv.free(pc.per_hash)
        r.cached = max(r.cached, full)

    def crash(self) -> list[Request]:
        """A fault: drop every request held here (waiting, running, landing), with their
        KV, cached prefixes and swapped blocks; interrupt an iteration in progress.
        Returns the lost requests in id order."""
        if self.group is not None:
            self.group.flush(self.running)
        lost = [*self.running, *self.waiting, *(x[2] for x in self.inbox)]
        self.running = []
        self.waiting = deque()
        self.inbox = []
        for r in lost:
            self.swap_free += r.swapped
        if self.prefix is not None:
            self.prefix.refs.clear()
            self.prefix.lru.clear()
        self.kv.free(self.kv.used)
        self.outstanding = 0
        self.swap_s = 0.0
        if not self.idle:
            self.process.interrupt("fault")
        return sorted(lost, key=lambda r: r.id)

    def fits_ever(self, prompt: int, output: int) -> str | None:
        """Why a request of these lengths can never finish on this replica, or None.
        A prefill replica holds only the prompt's KV."""
        tokens = prompt if self.role == "prefill" else prompt + output - 1
        if blocks_for(tokens, self.block_size) > self.kv.total - self.kv.watermark:
            return "exceeds_kv_capacity"
        return self.policy.reject_reason(prompt, output, self)

    # -- the process -----------------------------------------------------------------
    def _run(self) -> Any:
        env = self.env
        engine = self.engine
        stats = self.stats
        schedule = self.policy.schedule
        step_time = self.cost.step_time
        # A profile's price for the first step after an idle spell (sim.profile, wake).
        wake_time = getattr(self.cost, "wake_time", None)
        idle_since: float | None = None
        log = engine.step_log
        group = self.group
        while True:
            if engine.timeouts is not None:
                # Client timeouts due by now leave the queue before this decision
                # (sim/admission.py: lazily, yet as an eager timer would).
                engine.timeouts.expire(self, env.now)
            batch = schedule(self)
            stepping = group is not None and group.stepping
            if not batch and not stepping:
                if self.waiting or self.running:
                    raise RuntimeError(f"replica {self.index}: policy scheduled nothing with "
                                       f"{len(self.waiting)} waiting, {len(self.running)} running")
                self.idle = True
                if idle_since is None:
                    idle_since = env.now
                self._wakeup = env.event()
                if self.entry:
                    engine.replica_idle()
                # A fault may strike just as an arrival woke it: crash() emptied it.
                with contextlib.suppress(simpy.Interrupt):
                    yield self._wakeup
                continue
            if stepping:
                assert group is not None
                shape = group.shape()
                if batch:
                    shape = StepShape(*(a + b for a, b in zip(shape, batch_shape(batch),
                                                              strict=True)))
            else:
                shape = batch_shape(batch)
            dt = step_time(shape)
            if idle_since is not None:
                if wake_time is not None:
                    dt += wake_time(env.now - idle_since)
                idle_since = None
            if self.swap_s:
                # vLLM runs this iteration's swap-outs and swap-ins before its forward pass.
                dt += self.swap_s
                self.swap_s = 0.0
            start = env.now
            used = self.kv.used
            stats.book(dt, shape.seqs, shape.new_tokens, used)
            if log is not None:
                entries = [(r.id, n, r.computed) for r, n in batch.items()]
                if stepping:
                    assert group is not None
                    entries = group.log_entries(self.running) + entries
                log.append((self.index, start, start + dt, tuple(entries)))
            try:
                yield env.timeout(dt)
            except simpy.Interrupt:
                # A fault (sim/faults.py) struck mid-iteration: crash() emptied the replica;
                # only the part of the iteration that ran was busy.
                cut = start + dt - env.now
                stats.busy_s -= cut
                stats.kv_block_s -= used * cut
                continue
            engine.dispatch()
            if self.inbox:
                self.pull()
            if stepping:
                assert group is not None
                group.end_step(self, env.now)
            self._complete(batch, env.now)

    def _complete(self, batch: Batch, now: float) -> None:
        engine = self.engine
        gaps: list[float] = []
        finished: list[Request] = []
        emitted = 0
        leaving: list[Request] | None = None
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
                    if self.handoff is not None and g < r.output:
                        leaving = [r] if leaving is None else [*leaving, r]
                else:
                    gaps.append(now - r.last_token)
                r.last_token = now
                if r.hashes is not None and self.prefix is not None:
                    self._publish(r)
                if g == r.output:
                    self._drop_blocks(r)
                    engine.finish[r.id] = now
                    engine.status[r.id] = FINISHED
                    finished.append(r)
        if gaps:
            self.itl.extend(gaps)
        self.outstanding -= emitted
        if finished:
            # By identity: DecodeSet members' own counters are stale until they finish.
            self.remove_running(finished)
            engine.finished_count += len(finished)
            if engine.clients is not None:
                for r in finished:
                    engine.ended(r.id, now + engine.response_s)
        if leaving is not None:
            self._hand_off(leaving, now)
        group = self.group
        if group is not None:
            for r in batch:
                if r.sync < 0 and group.joinable(r):
                    group.join(r)

    def remove_running(self, done: list[Request]) -> None:
        """Drop finished requests ``done`` from ``running``, keeping its order."""
        if len(done) < 8:
            for r in done:
                self.running.remove(r)
        else:
            gone = set(done)
            self.running = [r for r in self.running if r not in gone]

    def _hand_off(self, leaving: list[Request], now: float) -> None:
        """Send requests whose prefill just finished to the decode pool."""
        assert self.handoff is not None
        # On a prefill replica only requests still prefilling stay.
        self.running = [r for r in self.running if r.generated == 0]
        for r in leaving:
            self.kv.free(r.blocks)
            r.blocks = 0
            self.outstanding -= r.output - r.generated
            self.handoff(self, r, now)
