"""One serving replica: a SimPy process running one batch iteration per event (or, on
the only replica, without one where nothing else could tell: :mod:`sim.core.quiet`).

Each iteration is four steps, each a method that can be called alone:
:meth:`Replica.schedule` (the policy returns the whole iteration as a
:class:`~sim.core.batch.Batch`), :meth:`Replica.price` (the cost model's seconds for its
shape), :func:`sim.core.batch.advance` (the listed entries' tokens computed and
emitted, after the process slept that long and the engine delivered every arrival up
to now) and :meth:`Replica.deliver` (the decode set's tick, first-token times,
inter-token gaps, finished requests and their blocks freed, hand-offs, decode-set
joins).

A replica's ``role``: ``both`` (co-located), or ``prefill`` / ``decode`` in a disaggregated
cluster (:mod:`sim.core.disagg`): a prefill replica hands each request to ``handoff`` once
its first token is out; a decode replica receives them, KV present, through an inbox.

A replica of ``hardware.pp`` pipeline stages runs :mod:`sim.core.pipeline`'s process
instead of :meth:`Replica._run`, with up to pp micro-batches in flight; the ranks of a
data-parallel group (``grouped``) run none of their own: :mod:`sim.core.dpgroup` steps
them together.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import simpy

from sim.core.asyncgate import intake_gate
from sim.core.batch import Batch, Emission, advance
from sim.core.decodeset import DecodeSet
from sim.core.histogram import LogHistogram
from sim.core.kvmanager import NO_HIT, KVCacheManager, PrefixHit
from sim.core.pipeline import Pipeline
from sim.core.prefix import PrefixCache
from sim.core.quiet import limits
from sim.core.replicastats import ReplicaStats
from sim.core.request import Request
from sim.core.result import finish_requests
from sim.core.specset import SpecDecodeSet
from sim.core.speculation import Speculation
from sim.core.streaming import stamp
from sim.cost.pipeline import StageCost
from sim.cost.shape import StepShape

if TYPE_CHECKING:
    from sim.config.serving import ServingConfig
    from sim.core.engine import Engine
    from sim.policies.base import Policy


def _order(r: Request) -> tuple[int, float, int]:
    """Admission order under priority scheduling: class, then arrival, then id."""
    return (r.priority, r.arrival, r.id)


class Replica:
    """State the policies read (``waiting``, ``running``, ``kv``, ``block_size``) and the
    process that runs iterations on it.

    ``kv`` keeps every KV block count (the host tier included); ``swap_block_s`` is
    the host-link time (s) to move one block (per-GPU shard) between GPU and host, which
    matters when ``serving.preemption`` is ``swap`` or a ``kv_offload`` tier holds
    prefix entries. ``spec``: the run's speculative decoding (None: none), which draws
    each routed request's acceptance and prices drafting. ``async_sched``: a loop that
    schedules a step ahead (vLLM's async scheduling, SGLang's and TensorRT-LLM's overlap
    schedulers), under which a request reaching a busy replica joins the iteration after
    next (sim/core/asyncgate.py; entry replicas, as SGLang's recv interval).
    """

    def __init__(self, index: int, engine: Engine, policy: Policy, cost: Any,
                 kv: KVCacheManager, serving: ServingConfig | None = None, role: str = "both",
                 swap_block_s: float = 0.0, spec: Speculation | None = None,
                 grouped: bool = False, async_sched: bool = False):
        self.index, self.engine, self.env, self.policy = index, engine, engine.env, policy
        self.cost, self.kv, self.block_size, self.role = cost, kv, kv.block_size, role
        self.entry = role != "decode"  # receives arrivals from the router
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.outstanding = 0  # tokens: unprefilled prompts plus outputs not yet produced
        self.idle = True
        self.priority = serving is not None and serving.priority
        self.swap = serving is not None and serving.preemption == "swap"
        self.swap_block_s = swap_block_s
        tier = serving.kv_offload if serving is not None else None
        self.overlap = tier is not None and tier.overlap
        self.swap_s = 0.0  # PCIe seconds the next iteration spends swapping
        self.handoff: Callable[[Replica, Request, float], None] | None = None
        self.inbox: list[tuple[float, int, Request]] = []  # (lands_s, id, request)
        self._wakeup: Any = None
        self.stats = ReplicaStats(kv.total, role)
        self.itl = LogHistogram()
        # Policies whose running requests are all steady decodes between iterations keep
        # them in a DecodeSet: O(1) work per decode iteration instead of O(batch).
        lazy = engine.lazy_decodes and policy.lazy_decodes
        self.spec = spec  # and drafting's price of an iteration, bound once (None: none, free)
        self._draft: Callable[[Batch], float] | None = (
            None if spec is None or spec.free else spec.draft_time)
        # A verify needs KV slots for its k drafted tokens past the request's own.
        self.lookahead = 0 if spec is None else spec.k
        self.group: DecodeSet | SpecDecodeSet | None = None
        self.stream_interval = n = serving.stream_interval if serving is not None else 1
        self.first_chunk = (engine if n > 1 and serving is not None  # SGLang's streaming
                            and not serving.stream_first_token else None)
        if lazy:
            self.group = (DecodeSet(kv, policy.reserves_kv, n, self.itl, self.first_chunk)
                          if spec is None else SpecDecodeSet(kv, spec.k + 1, self.stats, n,
                                                             self.itl, self.first_chunk,
                                                             policy.reserves_kv))
        recv = serving.scheduler_recv_interval if serving is not None else 1
        self.gate = intake_gate(recv, async_sched) if self.entry else None
        # A profile's price for the first step after an idle spell (sim.cost.profile).
        self._wake_time: Callable[[float], float] | None = getattr(cost, "wake_time", None)
        # Sequences in pipeline micro-batches in flight: they count against max_num_seqs.
        self.in_flight = 0
        self._admissions = 0  # requests admitted so far (each one's Request.admitted)
        self.pipe = (Pipeline(self, cost, lazy, policy.reserves_kv)
                     if isinstance(cost, StageCost) else None)
        self.dp: Any = None  # its data-parallel group (sim.core.dpgroup), which wakes it
        self.process = None if grouped else self.env.process(
            self._run() if self.pipe is None else self.pipe.run())

    @property
    def prefix(self) -> PrefixCache | None:
        """The replica's prefix cache (None when caching is off); the router reads it."""
        return self.kv.prefix

    # -- what the router and policies call -------------------------------------------
    def enqueue(self, r: Request) -> None:
        """Accept a routed request into the waiting queue (or the gate's held list while an
        iteration runs: sim/core/recvgate.py, sim/core/asyncgate.py); wake it if idle."""
        if self.gate is not None and not self.idle and not self.gate.woken:
            self.gate.held.append(r)
        else:
            self.queue(r)
        self.outstanding += r.prompt + r.output
        if self.spec is not None:
            self.spec.attach(r, self.engine.requests, self.block_size)
        if self.idle:
            self._wake()

    def queue(self, r: Request) -> None:
        """Put ``r`` in the waiting queue: last, or by (priority, arrival) under priority."""
        if self.priority:
            insort(self.waiting, r, key=_order)
        else:
            self.waiting.append(r)

    @property
    def queued(self) -> int:
        """Requests waiting to be admitted, the gate's held ones included."""
        return len(self.waiting) + (len(self.gate) if self.gate is not None else 0)

    def _wake(self) -> None:
        if self.dp is not None:
            return self.dp.wake()
        self.idle = False
        if self.gate is not None:
            self.gate.woken = True
        if self.entry:
            self.engine.replica_busy()
        self._wakeup.succeed()

    def receive(self, r: Request, lands: float) -> None:
        """A request whose prefill ran elsewhere; its KV lands here at ``lands`` (s)."""
        self.outstanding += r.output - r.generated
        heapq.heappush(self.inbox, (lands, r.id, r))
        self.env.timeout(lands - self.env.now).callbacks.append(self._landed)

    def _landed(self, _event: Any) -> None:  # a timed delivery's callback
        self.pull()

    def pull(self) -> None:
        """Queue every delivery that has landed by now (whichever event comes first)."""
        now = self.env.now
        inbox = self.inbox
        while inbox and inbox[0][0] <= now:
            self.queue(heapq.heappop(inbox)[2])
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

    def admit(self, r: Request, hit: PrefixHit = NO_HIT) -> None:
        """Move ``r`` (popped from waiting, its blocks given by
        :meth:`~sim.core.kvmanager.KVCacheManager.allocate_slots` with ``hit``) into running,
        its first ``hit.tokens`` taken from the prefix cache. A swapped-out request's KV
        comes back over PCIe in the next iteration."""
        if self.kv.prefix is not None and not r.computed:
            r.computed = hit.tokens
            self.stats.count_prefix(r.prompt + r.generated, hit.tokens, hit.loaded,
                                    bool(self.engine.preemptions[r.id]))
        r.admitted = self._admissions
        self._admissions += 1
        self.running.append(r)
        if r.swapped:
            self.swap_s += self.kv.swap_in(r) * self.swap_block_s
        self.engine.scheduled(r, self.env.now)

    def release(self, r: Request) -> None:
        """Preempt ``r``: free its blocks. By recompute it forgets its computed tokens; by
        swap its KV moves to host memory (when the host has room, else recompute)."""
        if self.swap and r.computed and self.kv.swap_out(r):
            self.swap_s += r.swapped * self.swap_block_s
            self.stats.swapped_out += 1
        else:
            self.kv.preempt(r)  # with prefix caching, its computed blocks stay cached
            r.computed = 0
        self.engine.preempted(r)
        self.stats.preemptions += 1

    def fits_ever(self, prompt: int, output: int) -> str | None:
        """Why a request of these lengths can never finish on this replica, or None.
        A prefill replica holds only the prompt's KV and emits only the first token, so
        no request of its is preempted for the output it never decodes."""
        if self.role == "prefill":
            if not self.kv.can_ever_hold(prompt):
                return "exceeds_kv_capacity"
            return self.policy.reject_reason(prompt, 1, self)
        if not self.kv.can_ever_hold(prompt + output - 1 + self.lookahead):
            return "exceeds_kv_capacity"
        return self.policy.reject_reason(prompt, output, self)

    # -- one iteration, in four steps -------------------------------------------------
    def schedule(self) -> Batch:
        """The next iteration, whole, as the policy chooses it once waiting requests past
        their timeout have left (sim/policies/admission.py); ``seqs == 0``: nothing runs."""
        if self.gate is not None:
            return self.gate.schedule(self)
        timeouts = self.engine.timeouts
        if timeouts is not None:
            timeouts.expire(self, self.env.now)
        return self.policy.schedule(self)

    def price(self, shape: StepShape, idle_s: float | None, batch: Batch | None = None,
              shared_s: float = 0.0) -> float:
        """Seconds an iteration of ``shape`` takes: the cost model's step time, plus the
        profile's price for waking after ``idle_s`` seconds idle (None: it was busy;
        sim.cost.profile), plus the host-link time of the blocks moved for it: swapped,
        and prefix entries stored to or loaded from the host tier (vLLM swaps before the
        forward pass), plus, with speculative decoding, drafting for the verifies of
        ``batch`` (the iteration of ``shape``); with ``kv_offload.overlap`` the host-link
        time runs under the compute instead, and the iteration takes the longer of the
        two. ``shared_s``: device seconds the step spends beyond the cost model's (a data-
        parallel group's experts)."""
        dt = self.cost.step_time_plus(shape, shared_s) if shared_s else self.cost.step_time(shape)
        if self._draft is not None and batch is not None:
            dt += self._draft(batch)
        if idle_s is not None and self._wake_time is not None:
            dt += self._wake_time(idle_s)
        io = self.kv.pending_io
        if io:
            self.kv.pending_io = 0
            self.swap_s += io * self.swap_block_s
        if self.overlap:
            return max(dt, self.swap_s)
        return dt + self.swap_s if self.swap_s else dt

    def deliver(self, batch: Batch, em: Emission, now: float) -> None:
        """The iteration of ``batch``, whose listed entries
        :func:`~sim.core.batch.advance` turned into ``em``, ended at ``now`` (s): the
        decode set (if included) moves one tick on; first tokens and inter-token gaps are
        stamped, newly full prompt blocks registered with the prefix cache, requests that
        are done finished, finished prefills handed to the decode pool, and new steady
        decodes join the set."""
        if self.kv.prefix is not None and batch:
            # Before any request of the iteration frees its blocks, listed or in the decode
            # set, so a write-through host copies in one order either way.
            self.kv.cache_computed(batch)
        group = batch.group
        if group is not None:
            done = group.end_step(self.itl, now)
            self.outstanding -= group.emitted
            if done is not None:
                self.finish(done, now)
        if batch.verified:
            # Verifies emitted more than the one token each that stamp() counts.
            self.outstanding -= batch.accepted - batch.verified
            self.stats.spec_verifies += batch.verified
            self.stats.spec_tokens += batch.accepted
        emitted, finished = em
        if emitted:
            self.outstanding -= stamp(emitted, now, self.engine.first_token,
                                      self.stream_interval, self.first_chunk, self.itl)
            if finished:
                self.finish(finished, now)
            if self.handoff is not None:
                leaving = [r for r in emitted if r.generated == 1 and r.output > 1]
                if leaving:
                    self._hand_off(leaving, now)
        own = self.group
        if own is not None and batch:
            for r in batch:
                if r.sync < 0 and own.joinable(r):
                    own.join(r)

    # -- the process -----------------------------------------------------------------
    def _run(self) -> Any:
        """Schedule, price, sleep, advance and deliver, one iteration per event, or without
        one where nothing outside the replica could tell (:func:`sim.core.quiet.limits`)."""
        env, stats, engine = self.env, self.stats, self.engine
        log, dispatch = engine.step_log, engine.dispatch
        schedule, price, deliver = self.schedule, self.price, self.deliver
        idle_since: float | None = None
        now = env.now  # the clock, kept here: reading SimPy's is a Python call
        limit, reach = limits(engine)
        while True:
            batch = schedule()
            shape = batch.shape()
            if not shape.seqs:
                if now != env.now:
                    yield env.timeout(now - env.now)  # SimPy's clock caught up, exactly
                if idle_since is None:
                    idle_since = now
                try:
                    yield self._go_idle()
                except simpy.Interrupt:
                    # A fault struck just as an arrival woke it: crash() emptied it.
                    now = env.now
                    continue
                now = env.now
                limit, reach = limits(engine)
                continue
            dt = price(shape, None if idle_since is None else now - idle_since, batch)
            idle_since = None
            if self.swap_s:
                stats.host_io_s += self.swap_s
                self.swap_s = 0.0
            # SimPy's clock after the timeout: it adds the same two floats.
            end = now + dt
            used = self.kv.used if self.kv.prefix is None else self.kv.in_use
            stats.book(dt, shape.seqs, shape.new_tokens, used, end)
            if log is not None:
                log.append((self.index, now, end, tuple(batch.log_entries(self.running))))
            if end < limit and end <= reach and not self.waiting and not self.gate:
                deliver(batch, advance(batch), end)  # no event: nobody else could look
                now = end
                continue
            if now != env.now:
                yield env.timeout(now - env.now)
            try:
                yield env.timeout(dt)
            except simpy.Interrupt:
                # A fault (sim/core/faults.py): crash() emptied it; only the part that ran was busy.
                now = env.now
                stats.cut_short(end - now, used)
                continue
            if end >= engine.next_due:
                dispatch(end)
            if self.inbox:
                self.pull()
            limit, reach = limits(engine)
            deliver(batch, advance(batch), end)
            now = end

    def _go_idle(self) -> Any:
        """Mark the replica idle; the event an arrival or a KV transfer wakes it with."""
        if self.waiting or self.running:
            raise RuntimeError(f"replica {self.index}: policy scheduled nothing with "
                               f"{len(self.waiting)} waiting, {len(self.running)} running")
        self.idle = True
        self._wakeup = self.env.event()
        if self.entry:
            self.engine.replica_idle()
        return self._wakeup

    def finish(self, done: Sequence[Request], now: float) -> None:
        """Requests ``done`` emitted their last token at ``now`` (s): finish them
        (:func:`sim.core.result.finish_requests`) and drop them from ``running``."""
        finish_requests(done, now, self.kv, self.engine)
        # By identity: DecodeSet members' own counters are stale until they finish.
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
            self.kv.free(r)
            self.outstanding -= r.output - r.generated
            self.handoff(self, r, now)
