"""Running decodes advanced together in O(1) per iteration, their per-request fields
brought up to date lazily.

Under every batching policy the running requests are, between iterations, steady
decodes (chunked: those past their last chunk, which lead the running list): one
pending token, the first token out, KV blocks exactly covering the cached tokens
(``blocks == ceil(computed / block_size)``; ``static`` and ``orca`` instead hold their
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
  members joined since (``fresh``) keep their own last token time.

Nothing here decides anything: policies still choose batches (sim/batching.py asks
:meth:`reserve` whether the set can decode without preemption; when it cannot, it
calls :meth:`flush` and decodes request by request). :meth:`plan_run` and
:meth:`apply_run` fuse runs of iterations (the rules are in sim/skip.py) without
touching members.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from sim.request import FINISHED, Request
from sim.shape import StepShape
from sim.skip import delay_to

if TYPE_CHECKING:
    from sim.replica import Replica


class SetRun(NamedTuple):
    """A planned run of K iterations of the set: per iteration its cost (s), end time
    (s), members decoding, blocks taken at its start and KV blocks in use."""

    dts: list[float]
    ends: list[float]
    seqs: list[int]
    need: list[int]
    used: list[int]
    delay: float  # the one timeout that lands exactly on ends[-1]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class DecodeSet:
    """The running steady decodes of one replica (see the module docstring).

    ``stepping`` is true between :meth:`reserve` (the policy decided the set decodes
    this iteration) and :meth:`end_step`.
    """

    __slots__ = ("bs", "reserved", "tick", "n", "ctx_base", "phase", "finish_at", "fresh",
                 "last_end", "stepping")

    def __init__(self, block_size: int, reserved: bool = False):
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
        self.stepping = False

    # -- membership ---------------------------------------------------------------------
    def joinable(self, r: Request) -> bool:
        """Whether ``r`` is a steady decode holding exactly the blocks its tokens fill
        (or, reserved, the blocks of its whole life)."""
        c = r.computed
        if not (r.prompt + r.generated - c == 1 and 0 < r.generated < r.output):
            return False
        if self.reserved:
            return r.blocks * self.bs >= r.prompt + r.output - 1
        return r.blocks == _ceil_div(c, self.bs)

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

    def _settle(self, r: Request, tick: int) -> None:
        """Bring a member's fields to ``tick`` and end its membership."""
        d = tick - r.sync
        if d:
            r.computed += d
            r.generated += d
            if not self.reserved:
                r.blocks = _ceil_div(r.computed, self.bs)
            r.last_token = self.last_end
        r.sync = -1

    def flush(self, running: list[Request]) -> None:
        """Bring every member's fields up to date and empty the set (before a decision
        that reads requests one by one: preemption, a crash)."""
        if self.n:
            t = self.tick
            for r in running:
                if r.sync >= 0:
                    self._settle(r, t)
        self.n = 0
        self.ctx_base = 0
        self.phase = [0] * self.bs
        self.finish_at = {}
        self.fresh = []
        self.stepping = False

    # -- one iteration ------------------------------------------------------------------
    def reserve(self, kv: Any, running: list[Request], prefix: bool = False) -> bool:
        """Decode every member this iteration if the members are all of ``running`` (or,
        with ``prefix``, its leading entries) and the blocks they need fit without
        preemption (evicting cached prefixes if need be, as request by request); take
        those blocks. False: the caller must flush and decode request by request."""
        n = self.n
        # Members join in running order and only non-members are admitted after them,
        # so they lead the list; checked at the seam, cheaply.
        if n != len(running) and (not prefix or n > len(running) or running[n].sync >= 0
                                  or (n and running[n - 1].sync < 0)):
            return False
        if n:
            need = self.phase[self.tick % self.bs]
            if need:
                if not kv.can_allocate(need):
                    return False
                kv.allocate(need)
            self.stepping = True
        return True

    def shape(self) -> StepShape:
        """The step shape of the members' decodes this iteration."""
        n = self.n
        ctx = self.ctx_base + n * self.tick
        return StepShape(n, n, ctx, 0, 0, 0, ctx + n)

    def end_step(self, rep: Replica, now: float) -> None:
        """The iteration ended at ``now`` (s): every member emitted a token; book gaps
        and finishes."""
        self.stepping = False
        n = self.n
        fresh = self.fresh
        itl = rep.itl
        if fresh:
            itl.extend([now - r.last_token for r in fresh])
            self.fresh = []
        if n > len(fresh):
            itl.add_repeated(now - self.last_end, n - len(fresh))
        rep.outstanding -= n
        self.last_end = now
        self.tick += 1
        done = self.finish_at.pop(self.tick, None)
        if done is not None:
            self._finish(rep, done, now)

    def _finish(self, rep: Replica, done: list[Request], now: float) -> None:
        engine = rep.engine
        bs = self.bs
        t = self.tick
        for r in done:
            c = r.computed
            self.ctx_base -= c - r.sync
            if not self.reserved:
                self.phase[(r.sync - c) % bs] -= 1
            self._settle(r, t)
            rep._drop_blocks(r)
            engine.finish[r.id] = now
            engine.status[r.id] = FINISHED
        self.n -= len(done)
        engine.finished_count += len(done)
        rep.remove_running(done)
        if engine.clients is not None:
            for r in done:
                engine.ended(r.id, now + engine.response_s)

    def log_entries(self, running: list[Request]) -> list[tuple[int, int, int]]:
        """(id, 1, computed) of each member decoding now, in running order."""
        t = self.tick
        return [(r.id, 1, r.computed + t - r.sync) for r in running if r.sync >= 0]

    # -- fused runs ---------------------------------------------------------------------
    def plan_run(self, rep: Replica, start: float, dt0: float, bound: float,
                 waiting: bool) -> SetRun | None:
        """The longest exact run (K >= 2) of set iterations starting with the one just
        reserved at ``start`` (cost ``dt0``), ending before ``bound``; it stops before an
        iteration that finishes a request while ``waiting`` (requests wait, or a finish
        sends a closed loop's next request), one whose blocks are not free, and when the
        set empties (sim/skip.py states why)."""
        if not start + 2.0 * dt0 < bound:
            return None
        tick = self.tick
        finish_at = self.finish_at
        if waiting and tick + 1 in finish_at:
            return None
        step_time = rep.cost.step_time
        bs = self.bs
        kv = rep.kv
        # A finisher frees its blocks but for the prefix-cache entries it references.
        per_hash = rep.prefix.per_hash if rep.prefix is not None else 0
        phase = self.phase
        copied = False
        n = self.n
        ctx_base = self.ctx_base
        used = kv.used
        free = kv.total - used
        end = start + dt0
        dts = [dt0]
        ends = [end]
        seqs = [n]
        needs = [0]
        useds = [used]
        j = 1
        while True:
            t = tick + j
            done = finish_at.get(t)
            if done is not None:
                if not copied:
                    phase = phase.copy()
                    copied = True
                for r in done:
                    c = r.computed
                    ctx_base -= c - r.sync
                    if self.reserved:
                        freed = r.blocks
                    else:
                        phase[(r.sync - c) % bs] -= 1
                        freed = _ceil_div(c + t - r.sync, bs) - r.cached * per_hash
                    used -= freed
                    free += freed
                n -= len(done)
            if n == 0 or (waiting and t + 1 in finish_at):
                break
            need = phase[t % bs]
            if need > free:
                break
            ctx = ctx_base + n * t
            dt = step_time(StepShape(n, n, ctx, 0, 0, 0, ctx + n))
            e = end + dt
            if not e < bound:
                break
            end = e
            used += need
            free -= need
            dts.append(dt)
            ends.append(end)
            seqs.append(n)
            needs.append(need)
            useds.append(used)
            j += 1
        k = len(ends)
        # The one event must land exactly where step-by-step events would.
        while k >= 2:
            delay = delay_to(start, ends[k - 1])
            if delay is not None:
                return SetRun(dts[:k], ends[:k], seqs[:k], needs[:k], useds[:k], delay)
            k -= 1
        return None

    def apply_run(self, rep: Replica, run: SetRun, start: float) -> None:
        """Book the K iterations of ``run`` as K separate iterations would have been."""
        stats = rep.stats
        log = rep.engine.step_log
        kv = rep.kv
        t0 = start
        for j in range(len(run.ends)):
            dt = run.dts[j]
            b_ = run.seqs[j]
            if j:
                kv.allocate(run.need[j])
            stats.book(dt, b_, b_, run.used[j])
            if log is not None:
                log.append((rep.index, t0, t0 + dt, tuple(self.log_entries(rep.running))))
            t0 = run.ends[j]
            self.end_step(rep, t0)
