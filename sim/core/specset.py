"""The decode set of a speculating replica: :class:`SpecDecodeSet`, whose members
verify k + 1 tokens an iteration and keep a random number of them (their draws,
:mod:`sim.core.speculation`), still in O(1) per iteration.

The set. A member's tokens per verify are known when it joins (its draws), so its whole
path through the set is too: the context before each of its verifies, the tokens each
emits, the KV blocks each needs (the verify's k + 1 slots, which vLLM allocates for the
drafted tokens; rejected ones leave their slots to the next verify) and the tick it
finishes. Joining adds the member's per-tick tokens and blocks, packed in one int64 a
tick, into a ring buffer indexed by tick: one numpy call for its whole path, worked out
when it was routed together with the next requests' (:mod:`sim.core.specplan`), or
when it joins if no plan covered it. An iteration then reads one slot: its blocks to
reserve, and afterwards the tokens by which the members' summed context grows. The step
shape follows from that sum (every member verifies k + 1 tokens after its context).
Leaving at its finish tick costs nothing more; a flush (preemption) empties the ring.
Under a policy that reserves a request's whole-life KV at admission (``orca``) the set
is ``reserved``: members hold every block their verifies write from the start, so the
per-tick block sums go unread and no member takes or settles a block.
Inter-token gaps: one per member per iteration, however many tokens it brought (as
vLLM's benchmark counts ITL per streamed chunk); with chunked streaming one per chunk,
worked out from the iterations' end times when a member leaves or is settled
(:mod:`sim.core.streaming`).
"""

from __future__ import annotations

import numpy as np

from sim.core.batch import Batch
from sim.core.histogram import LogHistogram
from sim.core.kvmanager import KVCacheManager
from sim.core.replicastats import ReplicaStats
from sim.core.request import Request
from sim.core.specplan import LOW, SHIFT, path
from sim.core.streaming import EndTimes, FirstTokens, verify_sends
from sim.cost.shape import StepShape

WINDOW = 1 << 12  # ticks the set's per-tick sums hold at first; they grow when needed


class SpecDecodeSet:
    """The running steady decodes of a speculating replica, each verifying ``q`` = k + 1
    tokens an iteration (see the module docstring); implements
    :class:`sim.core.batch.DecodeGroup`. ``stats`` counts verifies and their tokens.

    ``sums[T - origin]`` packs (:data:`sim.core.specplan.SHIFT`) the tokens the members'
    verifies at tick T emit and the blocks the members hold once those verifies have
    their slots, for ticks from ``origin`` up to ``horizon`` (the last tick a member
    verifies, plus one); ``trim[T]``: tokens capped verifies at T do not emit. The
    blocks tick T needs are those held at T less those held at T − 1 (kept as
    ``prev_held``), corrected by ``fix[T]``: the blocks members leaving at T held (no
    longer counted at T) less those members joining at T held already. ``reserved``:
    members hold their whole life's blocks and their last verify's k drafted slots from
    admission (as :class:`sim.core.decodeset.DecodeSet`'s reserved mode): none taken."""

    __slots__ = ("kv", "bs", "q", "stats", "reserved", "tick", "n", "ctx", "sums",
                 "prev_held", "now", "fix", "trim", "origin", "horizon", "paths", "finish_at",
                 "fresh", "last_end", "emitted", "interval", "ends", "itl", "first")

    def __init__(self, kv: KVCacheManager, q: int, stats: ReplicaStats, interval: int = 1,
                 itl: LogHistogram | None = None, first: FirstTokens | None = None,
                 reserved: bool = False) -> None:
        self.kv = kv
        self.bs = kv.block_size
        self.q = q
        self.stats = stats
        # Policies that reserve whole-life KV at admission (orca): members never take a
        # block while verifying, and free what they reserved when they finish.
        self.reserved = reserved
        self.tick = 0
        self.n = 0
        self.ctx = 0  # members' computed tokens, summed, as of this tick
        self.sums = np.zeros(WINDOW, dtype=np.int64)
        self.prev_held = 0
        self.now = 0  # this tick's packed sums, as reserve read them
        self.fix: dict[int, int] = {}
        self.trim: dict[int, int] = {}
        self.origin = 0
        self.horizon = 0
        # Per member: (draws' sum before its first verify here, its verifies here less
        # one, tokens it still owed when it joined, blocks it holds at its last verify).
        self.paths: dict[int, tuple[int, int, int, int]] = {}
        self.finish_at: dict[int, list[Request]] = {}
        self.fresh: list[Request] = []
        self.last_end = 0.0
        self.emitted = 0
        # Chunked streaming (as sim.core.decodeset.DecodeSet keeps it).
        self.interval = interval
        self.ends: EndTimes | None = EndTimes() if interval > 1 else None
        self.first = first  # first chunks set first-token times (sim/core/streaming.py)
        self.itl = itl

    # -- membership ---------------------------------------------------------------------
    def joinable(self, r: Request) -> bool:
        """Whether ``r`` is a steady decode (one pending token, its first token out, more
        to come) with draws; reserved, one holding the blocks of its whole life and of its
        last verify's k drafted tokens."""
        if not (r.prompt + r.generated - r.computed == 1 and 0 < r.generated < r.output
                and r.draws is not None):
            return False
        # prompt + output - 1 + k tokens: the slots its last verify may write.
        return (not self.reserved or (r.blocks - self.kv.window_of(r)) * self.bs
                >= r.prompt + r.output + self.q - 2)

    def join(self, r: Request) -> None:
        """Make ``r`` (a steady decode, fields exact now) a member from this tick on: add
        its whole path into the per-tick sums (the one planned for it when it was routed,
        if it still applies: one numpy call)."""
        t = self.tick
        r.sync = t
        # The path counts the blocks of its tokens; a sliding window's stay put.
        c0, q, bs = r.computed, self.q, self.bs
        b0 = r.blocks - self.kv.window_of(r)
        left = r.output - r.generated
        p = r.path
        if p is not None:
            r.path = None
            # Planned for its first join: its prompt computed, its first token out, no
            # blocks past those its first verify reaches (reserved: its blocks go unread),
            # this replica's block size.
            if (p[6] != bs or r.verifies or r.generated != 1 or c0 != r.prompt
                    or (b0 > (c0 + q + bs - 1) // bs and not self.reserved)):
                p = None
        if p is None:
            tokens, sums, a = r.draws
            p = path(tokens, sums, a + r.verifies, c0, left, b0, q, bs)
        packed, start, ticks, over, last, off, _ = p
        end = t + ticks
        if end > self.horizon:
            self._fit(end)
        i = t - self.origin
        # In place on a view: ``sums[a:b] += x`` would also write the view back onto itself.
        ring = self.sums[i:i + ticks]
        ring += packed[start:start + ticks]
        if over:
            # Its last verify is capped at what it owes: taken off when that tick ends.
            trim = self.trim
            trim[end - 1] = trim.get(end - 1, 0) + over
        if not self.reserved:
            fix = self.fix
            fix[t] = fix.get(t, 0) - b0
            fix[end] = fix.get(end, 0) + last
        self.paths[r.id] = (off, ticks - 1, left, last)
        self.n += 1
        self.ctx += c0
        lst = self.finish_at.get(end)
        if lst is None:
            self.finish_at[end] = [r]
        else:
            lst.append(r)
        self.fresh.append(r)

    def _fit(self, end: int) -> None:
        """Make the per-tick sums reach tick ``end``: slide them to start at this tick,
        doubling them when the live span needs it."""
        self.horizon = end
        size = len(self.sums)
        if end - self.origin <= size:
            return
        live = end - self.tick
        while live > size // 2:
            size *= 2
        lo, hi = self.tick - self.origin, end - self.origin
        old = self.sums
        self.sums = np.zeros(size, dtype=np.int64)
        kept = min(hi, len(old)) - lo  # none when the set sat empty past its window
        if kept > 0:
            self.sums[:kept] = old[lo:lo + kept]
        self.origin = self.tick

    def computed_at(self, r: Request, d: int) -> int:
        """A member's computed tokens after ``d`` of its verifies here."""
        if d == 0:
            return r.computed
        off, m, left, _ = self.paths[r.id]
        if d > m:
            return r.computed + left
        _, sums, a = r.draws
        return r.computed + sums.item(a + r.verifies + d) - off

    def _cum(self, r: Request, d: int) -> np.ndarray:
        """Tokens a member emitted in its first 1, 2, ..., ``d`` verifies here."""
        off, _, left, _ = self.paths[r.id]
        _, sums, a = r.draws
        v = a + r.verifies
        return np.minimum(sums[v + 1:v + d + 1] - off, left)

    def _settle(self, r: Request, tick: int, gaps: list[float] | None = None) -> None:
        """Bring a member's fields to ``tick`` and end its membership (with chunked
        streaming, its chunks' gaps go to ``gaps``)."""
        d = tick - r.sync
        if d:
            if self.ends is not None and gaps is not None:
                verify_sends(r, self.ends, tick, self._cum(r, d), self.interval, gaps,
                             self.first)
            c = self.computed_at(r, d)
            if not self.reserved:  # reserved: it keeps the blocks it was admitted with
                blocks_at = self.computed_at(r, d - 1) + self.q
                self.kv.settle(r, max(blocks_at, (r.blocks - self.kv.window_of(r)) * self.bs))
            r.generated += c - r.computed
            r.verified += c - r.computed
            r.computed = c
            r.verifies += d
            if self.ends is None:
                r.last_token = self.last_end
        del self.paths[r.id]
        r.sync = -1

    def flush(self, running: list[Request]) -> None:
        """Bring every member's fields up to date and empty the set (and its sums)."""
        if self.n:
            t = self.tick
            gaps: list[float] | None = [] if self.ends is not None else None
            for r in running:
                if r.sync >= 0:
                    self._settle(r, t, gaps)
            if gaps and self.itl is not None:
                self.itl.extend(gaps)
        if self.n or self.origin != self.tick:
            # The sums restart at this tick: an empty set's past ticks would be read as
            # coming ones (the set's members all gone, its origin may lag its tick).
            self.sums.fill(0)
        if self.ends is not None:
            self.ends.reset(self.tick)
        self.prev_held = 0
        self.fix = {}
        self.trim = {}
        self.n = 0
        self.ctx = 0
        self.origin = self.horizon = self.tick
        self.finish_at = {}
        self.fresh = []

    # -- one iteration ------------------------------------------------------------------
    def reserve(self, running: list[Request], batch: Batch, prefix: bool = False,
                spare: int = 0) -> bool:
        """As :meth:`sim.core.decodeset.DecodeSet.reserve`: include every member's verify
        in ``batch`` if the members lead ``running`` and their blocks fit, ``spare`` more
        besides."""
        n = self.n
        if n != len(running) and (not prefix or n > len(running) or running[n].sync >= 0
                                  or (n and running[n - 1].sync < 0)):
            return False
        if n:
            t = self.tick
            packed = self.sums.item(t - self.origin)
            if not self.reserved:
                need = (packed >> SHIFT) - self.prev_held + self.fix.get(t, 0)
                if spare and not self.kv.can_allocate(need + spare):
                    return False
                self.fix.pop(t, None)
                if need and not self.kv.allocate_blocks(need):
                    return False
            elif spare and not self.kv.can_allocate(spare):
                return False
            # Nothing writes this tick's sums before the iteration ends (joins come after).
            self.now = packed
            batch.group = self
        return True

    def shape(self) -> StepShape:
        """The step shape of the members' verifies: k + 1 new tokens after each one's
        context, each a decode entry (as :func:`sim.cost.shape.batch_shape` counts a
        verify listed in the batch)."""
        n, ctx = self.n, self.ctx
        # Built as a plain tuple: the named tuple's own constructor is a Python call.
        return tuple.__new__(StepShape, (n, n * self.q, ctx, 0, 0, 0, ctx + n))

    def end_step(self, itl: LogHistogram, now: float) -> list[Request] | None:
        """The iteration that included the set ended at ``now`` (s): every member emitted
        its verify's tokens (one gap each to ``itl``), and the set moves one tick on.
        Returns the members that emitted their last token, settled and out of the set."""
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
        # Past ticks' slots are left as they are: nothing reads them again, and sliding
        # the window (or a flush) drops them.
        t = self.tick
        packed = self.now
        g = packed & LOW
        if self.trim:
            g -= self.trim.pop(t, 0)
        self.prev_held = packed >> SHIFT
        self.emitted = g
        stats = self.stats
        stats.spec_verifies += n
        stats.spec_tokens += g
        self.tick = t = t + 1
        done = self.finish_at.pop(t, None)
        if done is None:
            self.ctx += g
            return None
        self._leave(done, now, itl)
        self.ctx += g
        return done

    def _leave(self, done: list[Request], now: float, itl: LogHistogram) -> None:
        """Settle members that emitted their last token at ``now`` (s), each at the end
        of the path laid when it joined, and take them out of the set."""
        paths = self.paths
        kv, bs = self.kv, self.bs
        settle = not self.reserved  # reserved: blocks stay as reserved until freed
        gone = 0
        ends = self.ends
        gaps: list[float] = []
        for r in done:
            if ends is not None:
                verify_sends(r, ends, self.tick, self._cum(r, self.tick - r.sync),
                             self.interval, gaps, self.first)
            _, m, left, last = paths.pop(r.id)
            c = r.computed + left
            gone += c
            r.generated += left
            r.verified += left
            r.computed = c
            r.verifies += m + 1
            if settle:
                kv.settle(r, last * bs)
            if ends is None:
                r.last_token = now
            r.sync = -1
        self.ctx -= gone
        self.n -= len(done)
        if gaps:
            itl.extend(gaps)
        if ends is not None and not self.n:
            ends.reset(self.tick)  # no member needs an older end time

    def log_entries(self, running: list[Request]) -> list[tuple[int, int, int]]:
        """(id, k + 1, computed) of each member verifying now, in running order."""
        t, q = self.tick, self.q
        return [(r.id, q, self.computed_at(r, t - r.sync)) for r in running if r.sync >= 0]
