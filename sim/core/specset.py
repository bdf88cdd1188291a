"""Speculative decoding on a replica: each request's acceptance draws, the drafting
price of an iteration, and :class:`SpecDecodeSet`, the decode set whose members verify
k + 1 tokens an iteration and keep a random number of them, still in O(1) per iteration.

Draws. When a request is routed it draws, from the run's one speculation generator (a
child of the workload seed, :func:`spec_seed_of`), the tokens each of its verifies will
emit: ``output - 1`` numbers from 1 to k + 1 (its first token comes from its prefill;
every verify emits at least one, so no request runs more verifies). Its n-th verify
takes draw n, capped by what its output still lacks, whichever way the verify is run:
request by request (:func:`sim.core.batch.verify`) or as a member of the set below.
Draws are made in routing order, which both ways share, so the two runs are equal
(tests/test_speculative.py checks every timestamp, log entry and KV count).

The set. A member's tokens per verify are known when it joins (its draws), so its whole
path through the set is too: the context before each of its verifies, the tokens each
emits, the KV blocks each needs (the verify's k + 1 slots, which vLLM allocates for the
drafted tokens; rejected ones leave their slots to the next verify) and the tick it
finishes. Joining adds the member's per-tick tokens and blocks into two ring buffers
indexed by tick, with numpy (one call for its whole path); an iteration then reads one
slot of each: its blocks to reserve, and afterwards the tokens by which the members'
summed context grows. The step shape follows from that sum (every member verifies k + 1
tokens after its context). Leaving at its finish tick costs nothing more; a flush
(preemption) empties the rings. Inter-token gaps: one per member per iteration, however
many tokens it brought (as vLLM's benchmark counts ITL per streamed chunk).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.core.batch import Batch
from sim.core.histogram import LogHistogram
from sim.core.kvmanager import KVCacheManager
from sim.core.replicastats import ReplicaStats
from sim.core.request import Request
from sim.cost.drafter import Drafter
from sim.cost.shape import StepShape

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.config.speculative import SpeculativeConfig
    from sim.workload.requests import Requests

CHUNK = 1 << 16  # draws made at once (per acceptance), handed out in routing order
WINDOW = 1 << 12  # ticks the set's per-tick sums hold at first; they grow when needed


def spec_seed_of(scenario: Scenario) -> np.random.SeedSequence:
    """The acceptance draws' seed: the fifth child of the workload seed (the first four
    are the workload's, router's, faults' and frontend jitter's, unchanged by a fifth)."""
    return np.random.SeedSequence(scenario.workload.seed).spawn(5)[4]


class Speculation:
    """One run's speculative decoding: ``spec`` (the scenario's setting), the drafting
    price (``drafter``) and the generator every request's draws come from (``rng``).

    Draws are made CHUNK at a time per acceptance (numpy's per-call cost would otherwise
    be most of a request's), with their running sums; a request takes the next
    ``output - 1`` of its acceptance's chunk (a fresh chunk when too few are left) as
    ``r.draws = (chunk tokens, chunk running sums, its first index)``: no copy."""

    def __init__(self, spec: SpeculativeConfig, drafter: Drafter, rng: np.random.Generator):
        self.k = spec.num_tokens
        self.drafter = drafter
        self.free = drafter.model is None
        self.rng = rng
        k = self.k

        def cuts(probs: tuple[float, ...]) -> np.ndarray:
            # P(at most j + 1 tokens) for j < k; a draw past all of them emits k + 1.
            return np.cumsum(np.asarray(probs, dtype=float))[:-1]

        self.cuts = cuts(spec.acceptance.emit_probabilities(k))
        self.by_class = {name: cuts(a.emit_probabilities(k)) for name, a in spec.classes.items()}
        # Per acceptance (keyed by its cuts' identity): tokens, running sums, next free.
        self.chunks: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}

    def attach(self, r: Request, requests: Requests) -> None:
        """Give ``r`` (just routed) the tokens each of its verifies emits."""
        cuts = self.cuts
        if self.by_class and requests.klass is not None:
            cuts = self.by_class.get(requests.class_names[requests.klass[r.id]], cuts)
        n = max(r.output - 1, 0)
        chunk = self.chunks.get(id(cuts))
        if chunk is None or chunk[2] + n > len(chunk[0]):
            u = self.rng.random(max(CHUNK, n))
            # 1 + the cuts at or below each draw (what searchsorted gives, faster for few).
            tokens = np.ones(len(u), dtype=np.int64)
            for c in cuts:
                tokens += u >= c
            chunk = (tokens, np.cumsum(tokens), 0)
        tokens, sums, i = chunk
        self.chunks[id(cuts)] = (tokens, sums, i + n)
        r.draws = (tokens, sums, i)

    def draft_time(self, batch: Batch) -> float:
        """Seconds drafting takes for the iteration ``batch`` (before it ran): the
        drafter's price for its verifying sequences and their context."""
        if self.free:
            return 0.0
        g = batch.group
        seqs, ctx = (g.n, g.ctx) if isinstance(g, SpecDecodeSet) else (0, 0)
        for r, n in batch.items():
            if r.computed + n > r.prompt + r.generated:
                seqs += 1
                ctx += r.computed
        return self.drafter.step_time(seqs, ctx)


class SpecDecodeSet:
    """The running steady decodes of a speculating replica, each verifying ``q`` = k + 1
    tokens an iteration (see the module docstring); implements
    :class:`sim.core.batch.DecodeGroup`. ``stats`` counts verifies and their tokens.

    ``gain[T - origin]`` and ``held[T - origin]`` are the tokens the members' verifies at
    tick T emit and the blocks the members hold once those verifies have their slots,
    for ticks from ``origin`` up to ``horizon`` (the last tick a member verifies, plus
    one). The blocks tick T needs are ``held`` at T less ``held`` at T − 1 (kept as
    ``prev_held``), corrected by ``fix[T]``: the blocks members leaving at T held (no
    longer counted at T) less those members joining at T held already."""

    __slots__ = ("kv", "bs", "q", "stats", "tick", "n", "ctx", "gain", "held", "prev_held",
                 "fix", "origin", "horizon", "paths", "finish_at", "fresh", "last_end",
                 "emitted")

    def __init__(self, kv: KVCacheManager, q: int, stats: ReplicaStats) -> None:
        self.kv = kv
        self.bs = kv.block_size
        self.q = q
        self.stats = stats
        self.tick = 0
        self.n = 0
        self.ctx = 0  # members' computed tokens, summed, as of this tick
        self.gain = np.zeros(WINDOW, dtype=np.int64)
        self.held = np.zeros(WINDOW, dtype=np.int64)
        self.prev_held = 0
        self.fix: dict[int, int] = {}
        self.origin = 0
        self.horizon = 0
        # Per member: (sum of its draws before its first verify here, its verifies here
        # less one, tokens it still owed when it joined).
        self.paths: dict[int, tuple[int, int, int]] = {}
        self.finish_at: dict[int, list[Request]] = {}
        self.fresh: list[Request] = []
        self.last_end = 0.0
        self.emitted = 0

    # -- membership ---------------------------------------------------------------------
    def joinable(self, r: Request) -> bool:
        """Whether ``r`` is a steady decode (one pending token, its first token out, more
        to come) with draws."""
        return (r.prompt + r.generated - r.computed == 1 and 0 < r.generated < r.output
                and r.draws is not None)

    def join(self, r: Request) -> None:
        """Make ``r`` (a steady decode, fields exact now) a member from this tick on: add
        its whole path into the per-tick sums."""
        t = self.tick
        r.sync = t
        tokens, sums, a = r.draws
        v = a + r.verifies  # its next draw's index in the chunk
        c0, b0, q, bs = r.computed, r.blocks, self.q, self.bs
        left = r.output - r.generated
        off = int(sums[v - 1]) if v else 0
        rest = sums[v:]
        # Its last verify here is the one whose tokens reach what it owes (capped there).
        m = int(rest.searchsorted(off + left))
        end = t + m + 1
        self._fit(end)
        i = t - self.origin
        seg = self.gain[i:end - self.origin]
        seg += tokens[v:v + m + 1]
        over = int(rest[m]) - off - left
        if over:
            self.gain[i + m] -= over
        # Blocks held at each of its verifies: those its k + 1 slots past its context
        # reach, never fewer than before (rejected drafts' slots stay with it).
        first = max(b0, -(-(c0 + q) // bs))
        self.held[i] += first
        last = first
        if m:
            held = rest[:m] + (c0 + q + bs - 1 - off)
            if bs & (bs - 1):
                held //= bs
            else:
                held >>= bs.bit_length() - 1  # a power of two: the same, and cheaper
            if held[0] < first:
                np.maximum(held, first, out=held)
            seg = self.held[i + 1:end - self.origin]
            seg += held
            last = int(held[-1])
        fix = self.fix
        fix[t] = fix.get(t, 0) - b0
        fix[end] = fix.get(end, 0) + last
        self.paths[r.id] = (off, m, left)
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
        if end > self.horizon:
            self.horizon = end
        size = len(self.gain)
        if self.horizon - self.origin <= size:
            return
        live = self.horizon - self.tick
        while live > size // 2:
            size *= 2
        lo, hi = self.tick - self.origin, self.horizon - self.origin
        for name in ("gain", "held"):
            old = getattr(self, name)
            moved = np.zeros(size, dtype=np.int64)
            kept = min(hi, len(old)) - lo  # none when the set sat empty past its window
            if kept > 0:
                moved[:kept] = old[lo:lo + kept]
            setattr(self, name, moved)
        self.origin = self.tick

    def computed_at(self, r: Request, d: int) -> int:
        """A member's computed tokens after ``d`` of its verifies here."""
        if d == 0:
            return r.computed
        off, m, left = self.paths[r.id]
        if d > m:
            return r.computed + left
        _, sums, a = r.draws
        return r.computed + int(sums[a + r.verifies + d - 1]) - off

    def _settle(self, r: Request, tick: int) -> None:
        """Bring a member's fields to ``tick`` and end its membership."""
        d = tick - r.sync
        if d:
            c = self.computed_at(r, d)
            blocks_at = self.computed_at(r, d - 1) + self.q
            r.generated += c - r.computed
            r.computed = c
            r.verifies += d
            self.kv.settle(r, max(blocks_at, r.blocks * self.bs))
            r.last_token = self.last_end
        del self.paths[r.id]
        r.sync = -1

    def flush(self, running: list[Request]) -> None:
        """Bring every member's fields up to date and empty the set (and its sums)."""
        if self.n:
            t = self.tick
            for r in running:
                if r.sync >= 0:
                    self._settle(r, t)
            self.gain.fill(0)
            self.held.fill(0)
        self.prev_held = 0
        self.fix = {}
        self.n = 0
        self.ctx = 0
        self.origin = self.horizon = self.tick
        self.finish_at = {}
        self.fresh = []

    # -- one iteration ------------------------------------------------------------------
    def reserve(self, running: list[Request], batch: Batch, prefix: bool = False) -> bool:
        """As :meth:`sim.core.decodeset.DecodeSet.reserve`: include every member's verify
        in ``batch`` if the members lead ``running`` and their blocks fit."""
        n = self.n
        if n != len(running) and (not prefix or n > len(running) or running[n].sync >= 0
                                  or (n and running[n - 1].sync < 0)):
            return False
        if n:
            t = self.tick
            need = int(self.held[t - self.origin]) - self.prev_held + self.fix.pop(t, 0)
            if need and not self.kv.allocate_blocks(need):
                return False
            batch.group = self
        return True

    def shape(self) -> StepShape:
        """The step shape of the members' verifies: k + 1 new tokens after each one's
        context (the entries :func:`sim.cost.shape.shape_of` would count)."""
        n, q, ctx = self.n, self.q, self.ctx
        new = n * q
        return StepShape(n, new, ctx, n, new, q * ctx + n * (q * (q + 1) // 2), 0)

    def end_step(self, itl: LogHistogram, now: float) -> list[Request] | None:
        """The iteration that included the set ended at ``now`` (s): every member emitted
        its verify's tokens (one gap each to ``itl``), and the set moves one tick on.
        Returns the members that emitted their last token, settled and out of the set."""
        n = self.n
        fresh = self.fresh
        if fresh:
            itl.extend([now - r.last_token for r in fresh])
            self.fresh = []
        if n > len(fresh):
            itl.add_repeated(now - self.last_end, n - len(fresh))
        self.last_end = now
        # Past ticks' slots are left as they are: nothing reads them again, and sliding
        # the window (or a flush) drops them.
        i = self.tick - self.origin
        g = int(self.gain[i])
        self.prev_held = int(self.held[i])
        self.ctx += g
        self.emitted = g
        stats = self.stats
        stats.spec_verifies += n
        stats.spec_tokens += g
        self.tick += 1
        done = self.finish_at.pop(self.tick, None)
        if done is not None:
            for r in done:
                self.ctx -= r.computed + self.paths[r.id][2]
                self._settle(r, self.tick)
            self.n -= len(done)
        return done

    def log_entries(self, running: list[Request]) -> list[tuple[int, int, int]]:
        """(id, k + 1, computed) of each member verifying now, in running order."""
        t, q = self.tick, self.q
        return [(r.id, q, self.computed_at(r, t - r.sync)) for r in running if r.sync >= 0]
