"""Data-parallel attention: ranks that share a mixture of experts and step together.

vLLM serves a large mixture of experts with ``--data-parallel-size N
--enable-expert-parallel`` (SGLang with ``--enable-dp-attention``): N ranks, each of
``tp`` GPUs holding the whole attention, its own scheduler, waiting queue, batch and KV
cache, while the routed experts are dealt out over all N × tp GPUs. In every MoE layer a
rank's tokens go to the GPUs that hold their experts and come back, so no rank can run a
layer ahead of the others: the ranks run their forward passes in lockstep, and a rank
with nothing to do runs an empty (dummy) pass for as long as any other rank has work.

:class:`DPGroup` runs that lockstep for the :class:`~sim.core.replica.Replica` objects of
one group (``grouped`` replicas, which run no process of their own): each iteration
every rank schedules its own batch (:meth:`Replica.schedule`), the iteration lasts as
long as the slowest rank's own work plus the experts' over all ranks' new tokens
(``cost.experts_time``, priced once for the group, as the device runs it once), and then
every rank that had a batch advances and delivers it. A rank whose batch was empty waits
for the iteration's end before it can take a request that arrived meanwhile, as vLLM's
idle rank does between dummy passes. The group idles only when every rank is empty, and
any rank's arrival wakes it.

The router sees each rank as a replica of its own (vLLM's front end balances requests
over the ranks), and per-replica statistics count each rank apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sim.core.batch import advance

if TYPE_CHECKING:
    from sim.core.engine import Engine
    from sim.core.replica import Replica


class DPGroup:
    """The lockstep process of ``ranks`` (grouped replicas of one data-parallel group),
    priced by ``cost``: a cost model with ``experts_time(tokens)`` (seconds of the
    shared experts for the group's new tokens) whose ``step_time`` is one rank's own
    work: :class:`sim.cost.roofline.RooflineCost` with ``dp`` > 1, a
    :class:`sim.cost.profilecost.ProfileCost` built for the ranks (``components.experts``),
    or either under async scheduling's :class:`sim.cost.overlap.HostOverlap`."""

    def __init__(self, engine: Engine, ranks: Sequence[Replica], cost: Any):
        self.engine = engine
        self.env = engine.env
        self.ranks = list(ranks)
        self._experts = cost.experts_time
        self.idle = True
        self._wakeup: Any = None
        for r in self.ranks:
            r.dp = self
        self.process = self.env.process(self._run())

    def wake(self) -> None:
        """A rank got work while the group was idle: every rank is busy from now on (so
        arrivals to the others queue for the next iteration instead of waking it again)."""
        if not self.idle:
            return
        self.idle = False
        for r in self.ranks:
            r.idle = False
            if r.gate is not None:
                r.gate.woken = True
            if r.entry:
                self.engine.replica_busy()
        self._wakeup.succeed()

    def _go_idle(self) -> Any:
        """Mark every rank idle; the event an arrival to any of them wakes the group with."""
        for r in self.ranks:
            if r.waiting or r.running:
                raise RuntimeError(f"replica {r.index}: policy scheduled nothing with "
                                   f"{len(r.waiting)} waiting, {len(r.running)} running")
        self.idle = True
        self._wakeup = self.env.event()
        for r in self.ranks:
            r.idle = True
            if r.entry:
                self.engine.replica_idle()
        return self._wakeup

    def _run(self) -> Any:
        """Schedule every rank, price the slowest with the shared experts, sleep, then
        advance and deliver every rank that ran, one iteration per event."""
        env, engine, ranks = self.env, self.engine, self.ranks
        log = engine.step_log
        idle_since: float | None = None
        now = env.now
        while True:
            batches = [r.schedule() for r in ranks]
            shapes = [b.shape() for b in batches]
            ran = [i for i, s in enumerate(shapes) if s.seqs]
            if not ran:
                if idle_since is None:
                    idle_since = now
                yield self._go_idle()
                now = env.now
                continue
            idle_s = None if idle_since is None else now - idle_since
            idle_since = None
            experts = self._experts(sum(shapes[i].new_tokens for i in ran))
            dt = max(ranks[i].price(shapes[i], idle_s, batches[i], experts) for i in ran)
            end = now + dt
            for i in ran:
                r, shape = ranks[i], shapes[i]
                if r.swap_s:
                    r.stats.host_io_s += r.swap_s
                    r.swap_s = 0.0
                r.stats.book(dt, shape.seqs, shape.new_tokens, r.kv.in_use, end)
                if log is not None:
                    log.append((r.index, now, end, tuple(batches[i].log_entries(r.running))))
            yield env.timeout(dt)
            if end >= engine.next_due:
                engine.dispatch(end)
            for i in ran:
                r = ranks[i]
                if r.inbox:
                    r.pull()
                r.deliver(batches[i], advance(batches[i]), end)
            now = end
