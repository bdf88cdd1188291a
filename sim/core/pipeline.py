"""A replica run as a pipeline of ``pp`` stages, with up to ``pp`` micro-batches in flight.

This follows vLLM V1's engine with pipeline parallelism (``EngineCore`` with a batch
queue of ``pp`` entries, ``step_with_batch_queue``): while the queue has room the
scheduler is asked for another batch at once, and that batch leaves out every request
already in a batch in flight, so a request's next token waits for its previous
micro-batch to leave the last stage. When nothing more can be scheduled, or the queue
is full, the engine blocks until the oldest batch comes out of the last stage; arrivals
meanwhile wait for that moment, as they do in vLLM. One scheduler, one KV cache:
``max_num_seqs`` bounds the running requests of all micro-batches together, the token
budget each micro-batch.

Timing: a micro-batch enters stage 0 when it is scheduled or when stage 0 is done with
the batch before it, whichever is later, and each later stage likewise; each stage's
time comes from :class:`sim.cost.pipeline.StageCost` (its share of the step plus the
send to the next stage). Fewer batches than stages leave stages idle: the bubbles.

While a batch is in flight its requests are out of ``running`` (the policy never sees
them) and count in ``in_flight``; when it comes out they rejoin ``running`` at its head,
ahead of requests that later batches left out (vLLM keeps its running list in admission
order: the two differ only in which running request a preemption or a full token budget
passes over first). Steady decodes that travel together stay one O(1) aggregate
(:class:`~sim.core.decodeset.DecodeSet`), as on a single-stage replica: the replica's
set goes into the pipeline with the batch that includes it and a fresh one takes its
place; when the batch comes out its set is the replica's again, and the few members
the fresh one gathered meanwhile are settled into plain requests (they rejoin when they
next decode).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

import simpy

from sim.core.batch import Batch, advance
from sim.core.decodeset import DecodeSet
from sim.core.quiet import limits
from sim.core.request import Request
from sim.cost.pipeline import StageCost

if TYPE_CHECKING:
    from sim.core.replica import Replica

# One micro-batch in the pipeline, as a plain tuple (one is built per micro-batch): when
# it leaves the last stage (s), its batch, the decode-set members in it, its busy seconds
# per stage on average, the KV blocks held when it entered, its sequences and tokens.
Flight = tuple[float, Batch, list[Request], float, int, int, int]


class Pipeline:
    """The pipeline process of ``rep``, whose cost model is a :class:`StageCost` of
    ``pp`` > 1 stages; ``lazy``: keep steady decodes as aggregates."""

    def __init__(self, rep: Replica, cost: StageCost, lazy: bool, reserves_kv: bool) -> None:
        self.rep = rep
        self.cost = cost
        self.pp = cost.pp
        self.free = [0.0] * self.pp  # when each stage is done with what it was given (s)
        self.reserves_kv = reserves_kv
        self.spare: list[DecodeSet] = []  # empty decode sets, for reuse
        self.flight: list[Flight] = []
        self.wake = cost.wake_time
        self.stage_times = cost.stage_times
        if lazy:
            rep.group = DecodeSet(rep.kv, reserves_kv, rep.stream_interval, rep.itl,
                                  rep.first_chunk)

    def run(self) -> Generator[Any, Any, None]:
        """Schedule while fewer than ``pp`` batches are in flight and the policy finds
        work; else wait for the oldest micro-batch to leave the last stage and deliver
        it (without an event of its own when nothing outside could tell: :meth:`_limits`).
        """
        rep = self.rep
        env = rep.env
        engine = rep.engine
        flight = self.flight
        idle_since: float | None = None
        now = env.now
        # SimPy's clock as it would read had every micro-batch had its own event (the
        # timeouts' sums, not ``now``): it runs ahead of env.now over early completions.
        clock = now
        limit, reach = self._limits()
        while True:
            if len(flight) < self.pp and self._schedule(now, idle_since):
                idle_since = None
                continue
            if flight:
                end = flight[0][0]
                if end < limit and clock + (end - now) <= reach and not rep.waiting:
                    clock += end - now
                    now = end
                    f = flight.pop(0)
                    if f[1] or not self._relay(f, now):  # _land, inline: the common case
                        self._complete(f, now)
                    continue
            if clock != env.now:
                # Catch SimPy's clock up before an event (exactly: reach, _limits).
                yield env.timeout(clock - env.now)
            if not flight:
                if idle_since is None:
                    idle_since = now
                try:
                    yield rep._go_idle()
                except simpy.Interrupt:
                    self.reset()  # a fault struck as an arrival woke it
                now = clock = env.now
                limit, reach = self._limits()
                continue
            try:
                yield env.timeout(end - now)
            except simpy.Interrupt:
                # A fault: crash() took every request; the stages stop where they are.
                self.reset()
                now = clock = env.now
                continue
            now = end
            clock = env.now
            if now >= engine.next_due:
                engine.dispatch(now)
            if rep.inbox:
                rep.pull()
            limit, reach = self._limits()
            self._land(flight.pop(0), now)

    def _limits(self) -> tuple[float, float]:
        """(limit, reach) in s: a micro-batch leaving the last stage before ``limit``,
        when SimPy's clock would read at most ``reach``, with no request waiting, is
        delivered without an event (:func:`sim.core.quiet.limits`)."""
        return limits(self.rep.engine)

    def _schedule(self, now: float, idle_since: float | None) -> bool:
        """Ask the policy for a batch and send it into the pipeline at ``now`` (s);
        False when it found nothing to run."""
        rep = self.rep
        if not rep.running and not rep.waiting:
            return False  # everything is in flight: the policy would find nothing
        batch = rep.schedule()
        if not batch.seqs:
            return False
        if batch.group is not None:
            # The home set travels with its members; a fresh one stays home.
            rep.group = self.spare.pop() if self.spare else DecodeSet(
                rep.kv, self.reserves_kv, rep.stream_interval, rep.itl, rep.first_chunk)
        self._submit(batch, now, idle_since)
        return True

    def _submit(self, batch: Batch, now: float, idle_since: float | None) -> None:
        """Price ``batch`` stage by stage from ``now`` (s) and take its requests out of
        ``running`` until it comes back."""
        rep = self.rep
        group = batch.group
        shape = group.shape() if group is not None and not batch else batch.shape()
        times = self.stage_times(shape)
        if idle_since is not None and self.wake is not None:
            times[0] += self.wake(now - idle_since)
        if rep.swap_s:
            times[0] += rep.swap_s  # vLLM swaps blocks in before the forward pass
            rep.swap_s = 0.0
        t, starts = self._enter(times, now)
        free = self.free
        log = rep.engine.step_log
        running = rep.running
        n = 0 if group is None else group.n
        seqs = n + len(batch)
        # Every listed entry is a running request: when the counts match, all went.
        everyone = len(running) == seqs
        # A decode set's members lead the running list (DecodeSet.reserve).
        members = running if everyone and not batch else running[:n] if n else []
        if log is not None:
            spans = tuple(zip(starts or (), free, strict=True))
            log.append((rep.index, now, t, tuple(batch.log_entries(members)), spans))
        rep.running = [] if everyone else [r for r in running[n:] if r not in batch]
        rep.in_flight += seqs
        self.flight.append((t, batch, members, sum(times) / self.pp, rep.kv.in_use,
                            seqs, shape.new_tokens))

    def _enter(self, times: list[float], now: float) -> tuple[float, list[float] | None]:
        """Send a micro-batch whose stages take ``times`` (s) into the pipeline at
        ``now`` (s): when it leaves the last stage, and (with a step log) when each stage
        starts it."""
        free = self.free
        if self.pp == 2 and self.rep.engine.step_log is None:
            # The loop below for two stages, unrolled (the common case).
            t0, t1 = times
            f0, f1 = free
            a = (f0 if now < f0 else now) + t0
            b = (f1 if a < f1 else a) + t1
            free[0] = a
            free[1] = b
            return b, None
        starts = free.copy() if self.rep.engine.step_log is not None else None
        t = now
        for k, dt in enumerate(times):
            if t < free[k]:
                t = free[k]
            elif starts is not None:
                starts[k] = t
            t += dt
            free[k] = t
        return t, starts

    def _land(self, f: Flight, now: float) -> None:
        """Micro-batch ``f`` left the last stage at ``now`` (s): :meth:`_complete` it,
        or, when :meth:`_relay` can, deliver it and send its set on at once."""
        if f[1] or not self._relay(f, now):
            self._complete(f, now)

    def _relay(self, f: Flight, now: float) -> bool:
        """:meth:`_complete` for ``f``, a micro-batch of the replica's decode set alone,
        when nothing else runs or waits and the set at home is empty; then, when its
        blocks fit, send the set on at once (the batch reused) without asking the policy:
        ``chunked`` would choose exactly that (its members, as many or fewer than when it
        last chose them, fit the token budget; nothing else is running or waiting).
        False: nothing done, the general path's turn. A shortage of blocks leaves the
        set home for the policy (``reserve`` changes nothing when it fails)."""
        rep = self.rep
        _, batch, members, busy, used, seqs, tokens = f
        group = batch.group
        if (group is None or rep.running or rep.waiting or rep.swap_s or rep.group is None
                or rep.group.n or rep.engine.timeouts is not None):
            return False
        rep.stats.book(busy, seqs, tokens, used)
        rep.in_flight -= seqs
        rep.running = members
        # Replica.deliver for a batch of the set alone: its tick, its finished members.
        done = group.end_step(rep.itl, now)
        rep.outstanding -= group.emitted
        if done is not None:
            rep.finish(done, now)
        n = group.n
        if not n or not group.reserve(rep.running, batch, prefix=True):
            self.spare.append(cast(DecodeSet, rep.group))
            rep.group = cast(DecodeSet, group)  # home again: the policy decides next
            return True
        shape = group.shape()
        times = self.stage_times(shape)
        t, starts = self._enter(times, now)
        log = rep.engine.step_log
        if log is not None:
            spans = tuple(zip(starts or (), self.free, strict=True))
            log.append((rep.index, now, t, tuple(batch.log_entries(rep.running)), spans))
        self.flight.append((t, batch, rep.running, sum(times) / self.pp, rep.kv.in_use,
                            n, shape.new_tokens))
        rep.running = []
        rep.in_flight += n
        return True

    def _complete(self, f: Flight, now: float) -> None:
        """Micro-batch ``f`` left the last stage at ``now`` (s): its requests rejoin
        ``running``, and the replica delivers its tokens."""
        rep = self.rep
        _, batch, members, busy, used, seqs, tokens = f
        rep.in_flight -= seqs
        # Only this module puts a decode set in flight: the replica's DecodeSet (a
        # pipeline never speculates: sim.config.combinations.check_pipeline).
        travelled = cast(DecodeSet | None, batch.group)
        home = cast(DecodeSet | None, rep.group)
        if travelled is not None and home is not None:
            # The batch's set comes home. Members the home set gathered meanwhile (new
            # decodes of batches without a set) become plain requests, settled while
            # they are the only members in ``running``; they join again when decoded.
            if home.n:
                home.flush(rep.running)
            self.spare.append(home)
            rep.group = travelled
        # Ahead of requests left out of later batches: a decode set's members then lead
        # the running list, as DecodeSet.reserve needs. (``members`` is this flight's
        # own list: it may become the running list itself.)
        if batch or rep.running:
            rep.running = members + list(batch) + rep.running
        else:
            rep.running = members
        rep.stats.book(busy, seqs, tokens, used)
        rep.deliver(batch, advance(batch), now)

    def crash(self) -> list[Request]:
        """A fault: the requests of every batch in flight (decode sets settled, as of the
        last tick each finished); the pipeline is then empty."""
        lost: list[Request] = []
        for _, batch, members, *_rest in self.flight:
            group = cast(DecodeSet | None, batch.group)
            if group is not None:
                group.flush(members)
                self.spare.append(group)
            lost += members
            lost += batch
        home = self.rep.group
        if home is not None:
            home.flush(self.rep.running)
        self.reset()
        return lost

    def reset(self) -> None:
        """Empty stages, nothing in flight (after a fault)."""
        self.flight.clear()  # in place: run() holds the list
        self.free = [0.0] * self.pp
        self.rep.in_flight = 0
