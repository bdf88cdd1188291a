"""Running decodes advanced together in O(1) per iteration, their per-request fields
brought up to date lazily.

Under every batching policy the running requests are, between iterations, steady
decodes (chunked: those past their last chunk, which lead the running list): one
pending token, the first token out, KV blocks exactly covering the cached tokens
(``blocks == ceil(computed / block_size)``, plus a sliding window's, which stays put:
:meth:`sim.core.kvmanager.KVCacheManager.spans`; ``static`` and ``orca`` instead hold their
whole life's blocks from admission: the set's ``reserved`` mode, where no member takes
a block). A decode iteration of all of them moves every request one token on. Doing
that request by request costs O(batch) Python work per iteration; here it costs a few
integer updates:

- ``tick`` counts the set's iterations. A member's ``computed``, ``generated`` and
  ``blocks`` are exact as of tick ``r.sync`` (the tick it joined); at tick T its
  computed is ``r.computed + T - r.sync``.
- The batch's cached context is ``ctx_base + n * tick`` (``ctx_base`` sums
  ``computed - sync`` over members), so the step shape is O(1).
- A member needs a new block in the iteration at tick T iff its computed is a
  multiple of the block size then: ``T ≡ sync - computed (mod block_size)``. Members
  are counted by that residue in ``phase``; the iteration's blocks are
  ``phase[T % block_size]``.
- Members finish at tick ``sync + output - generated``; ``finish_at`` maps that tick to
  them.
- Inter-token gaps: every member in the previous iteration emitted at ``last_end``;
  members joined since (``fresh``) keep their own last token time. With chunked
  streaming (``interval`` > 1, :mod:`sim.core.streaming`) the set stores each
  iteration's end time instead and a member's gaps are worked out when it leaves or is
  settled.

Nothing here decides anything: policies choose batches (sim/policies/base.py asks
:meth:`reserve` whether the set can decode without preemption, and includes it in the
batch; when it cannot, it calls
:meth:`flush` and decodes request by request). The replica moves the set on when the
iteration ends (:meth:`end_step`).
"""

from __future__ import annotations

from sim.core.batch import Batch
from sim.core.histogram import LogHistogram
from sim.core.kvmanager import KVCacheManager
from sim.core.request import Request
from sim.core.streaming import EndTimes, FirstTokens, member_sends
from sim.cost.shape import StepShape


class DecodeSet:
    """The running steady decodes of one replica (see the module docstring); implements
    :class:`sim.core.batch.DecodeGroup`."""

    __slots__ = ("kv", "bs", "reserved", "tick", "n", "ctx_base", "phase", "finish_at", "fresh",
                 "last_end", "emitted", "interval", "ends", "itl", "first")

    def __init__(self, kv: KVCacheManager, reserved: bool = False, interval: int = 1,
                 itl: LogHistogram | None = None, first: FirstTokens | None = None) -> None:
        # Members' blocks are taken in bulk from kv and assigned to each when it settles.
        self.kv = kv
        block_size = kv.block_size
        self.bs = block_size
        # Policies that reserve a request's whole-life KV at admission (static, orca):
        # members never take a block while decoding, and free what they reserved.
        self.reserved = reserved
        self.tick = 0
        self.n = 0
        self.ctx_base = 0
        self.phase = [0] * block_size
        self.finish_at: dict[int, list[Request]] = {}
        self.fresh: list[Request] = []
        self.last_end = 0.0
        self.emitted = 0
        # Chunked streaming: tokens a chunk, the iterations' end times, and where members'
        # gaps go when they are worked out outside end_step (a flush).
        self.interval = interval
        self.ends: EndTimes | None = EndTimes() if interval > 1 else None
        self.itl = itl
        # First chunks that set a request's first-token time (sim/core/streaming.py).
        self.first = first

    # -- membership ---------------------------------------------------------------------
    def joinable(self, r: Request) -> bool:
        """Whether ``r`` is a steady decode holding exactly the blocks its tokens fill
        (or, reserved, the blocks of its whole life)."""
        c = r.computed
        if not (r.prompt + r.generated - c == 1 and 0 < r.generated < r.output):
            return False
        if self.reserved:
            return r.blocks * self.bs >= r.prompt + r.output - 1
        return r.blocks == self.kv.spans(r, c)

    def join(self, r: Request) -> None:
        """Make ``r`` (a steady decode, fields exact now) a member from this tick on."""
        t = self.tick
        r.sync = t
        c = r.computed
        self.n += 1
        self.ctx_base += c - t
        if not self.reserved:
            self.phase[(t - c) % self.bs] += 1
        f = t + r.output - r.generated
        lst = self.finish_at.get(f)
        if lst is None:
            self.finish_at[f] = [r]
        else:
            lst.append(r)
        self.fresh.append(r)

    def _settle(self, r: Request, tick: int, gaps: list[float] | None = None) -> None:
        """Bring a member's fields to ``tick`` and end its membership (with chunked
        streaming, its chunks' gaps go to ``gaps``)."""
        d = tick - r.sync
        if d:
            if self.ends is not None and gaps is not None:
                member_sends(r, self.ends, tick, self.interval, gaps, self.first)
            else:
                r.last_token = self.last_end
            r.computed += d
            r.generated += d
            if not self.reserved:
                self.kv.settle(r, r.computed)
        r.sync = -1

    def flush(self, running: list[Request]) -> None:
        """Bring every member's fields up to date and empty the set (before a decision
        that reads requests one by one: preemption, a crash)."""
        if self.n:
            t = self.tick
            gaps: list[float] | None = [] if self.ends is not None else None
            for r in running:
                if r.sync >= 0:
                    self._settle(r, t, gaps)
            if gaps and self.itl is not None:
                self.itl.extend(gaps)
        if self.ends is not None:
            self.ends.reset(self.tick)
        self.n = 0
        self.ctx_base = 0
        self.phase = [0] * self.bs
        self.finish_at = {}
        self.fresh = []

    # -- one iteration ------------------------------------------------------------------
    def reserve(self, running: list[Request], batch: Batch, prefix: bool = False,
                spare: int = 0) -> bool:
        """Decode every member this iteration if the members are all of ``running`` (or,
        with ``prefix``, its leading entries) and the blocks they need fit without
        preemption (evicting cached prefixes if need be, as request by request), ``spare``
        more blocks besides: take those blocks and include the set in ``batch`` (when it
        has members). False: the caller must flush and decode request by request."""
        n = self.n
        # Members join in running order and only non-members are admitted after them,
        # so they lead the list; checked at the seam, cheaply.
        if n != len(running) and (not prefix or n > len(running) or running[n].sync >= 0
                                  or (n and running[n - 1].sync < 0)):
            return False
        if n:
            need = self.phase[self.tick % self.bs]
            if spare and not self.kv.can_allocate(need + spare):
                return False
            if need and not self.kv.allocate_blocks(need):
                return False
            batch.group = self
        return True

    def shape(self) -> StepShape:
        """The step shape of the members' decodes this iteration."""
        n = self.n
        ctx = self.ctx_base + n * self.tick
        # Built as a plain tuple: the named tuple's own constructor is a Python call.
        return tuple.__new__(StepShape, (n, n, ctx, 0, 0, 0, ctx + n))

    def end_step(self, itl: LogHistogram, now: float) -> list[Request] | None:
        """The iteration that included the set ended at ``now`` (s): every member
        computed and emitted its next token (gaps go to ``itl``), and the set moves one
        tick on. Returns the members that emitted their last token, settled and out of
        the set, for the caller to finish; None when none did."""
        n = self.n
        fresh = self.fresh
        ends = self.ends
        if ends is None:
            itl.add_gaps(fresh, self.last_end, now, n)
        else:
            ends.store(now, self.finish_at)
        if fresh:
            self.fresh = []
        self.last_end = now
        self.emitted = n
        self.tick += 1
        done = self.finish_at.pop(self.tick, None)
        if done is not None:
            self._leave(done, itl)
        return done

    def _leave(self, done: list[Request], itl: LogHistogram) -> None:
        """Settle finishing members and take them out of the set's sums."""
        bs = self.bs
        t = self.tick
        gaps: list[float] | None = [] if self.ends is not None else None
        for r in done:
            c = r.computed
            self.ctx_base -= c - r.sync
            if not self.reserved:
                self.phase[(r.sync - c) % bs] -= 1
            self._settle(r, t, gaps)
        self.n -= len(done)
        if gaps:
            itl.extend(gaps)
        if not self.n and self.ends is not None:
            self.ends.reset(t)  # no member needs an older end time

    def log_entries(self, running: list[Request]) -> list[tuple[int, int, int]]:
        """(id, 1, computed) of each member decoding now, in running order."""
        t = self.tick
        return [(r.id, 1, r.computed + t - r.sync) for r in running if r.sync >= 0]
