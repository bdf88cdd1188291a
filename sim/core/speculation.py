"""Speculative decoding's randomness and drafting price on a replica: each request's
acceptance draws, and what drafting adds to an iteration.

Draws. When a request is routed it takes, from the run's one speculation generator (a
child of the workload seed, :func:`spec_seed_of`), the tokens each of its verifies will
emit: numbers from 1 to k + 1, as many as it takes for their sum to reach its
``output - 1`` tokens after the first (which comes from its prefill), and no more: at
acceptance 0.7 and k = 3 a verify emits 2.53 tokens on average, so a request takes
about 40% of the ``output - 1`` draws that would cover the worst case. Its n-th verify
takes draw n, capped by what its output still lacks, whichever way the verify is run:
request by request (:func:`sim.core.batch.verify`) or as a member of the decode set
(:mod:`sim.core.specset`). Draws are made in routing order, which both ways share, so
the two runs are equal (tests/test_speculative.py checks every timestamp, log entry and
KV count).

A verify the token budget cut short (fewer than k + 1 tokens) emits fewer tokens than
its draw, so such a request may run more verifies than it took draws: it then reads on
into the next request's draws. Each draw still follows the acceptance; the two requests
share those few. The draws a request could ever read (``output - 1`` from its first,
one a verify, each emitting at least one token) always lie in one chunk: a request that
would pass a chunk's end starts a fresh one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from sim.core.batch import Batch
from sim.core.request import Request
from sim.core.specplan import PLAN, Plan, plan
from sim.core.specset import SpecDecodeSet
from sim.cost.drafter import Drafter

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.config.speculative import SpeculativeConfig
    from sim.workload.requests import Requests

# Draws made at once (per acceptance), handed out in routing order: a few hundred
# requests' worth, small enough for the chunk to stay in cache.
CHUNK = 1 << 14


def spec_seed_of(scenario: Scenario) -> np.random.SeedSequence:
    """The acceptance draws' seed: the fifth child of the workload seed (the first four
    are the workload's, router's, faults' and frontend jitter's, unchanged by a fifth)."""
    return np.random.SeedSequence(scenario.workload.seed).spawn(5)[4]


def draws_end(sums: np.ndarray, first: int, owed: int) -> int:
    """One past the last draw a request whose draws start at ``first`` takes to emit
    ``owed`` tokens: the first index whose running sum (``sums``, from 0) reaches
    ``sums[first] + owed`` (``first`` itself when nothing is owed)."""
    if owed <= 0:
        return first
    return int(sums.searchsorted(sums.item(first) + owed))


class Speculation:
    """One run's speculative decoding: ``spec`` (the scenario's setting), the drafting
    price (``drafter``) and the generator every request's draws come from (``rng``).

    Draws are made CHUNK at a time per acceptance (numpy's per-call cost would otherwise
    be most of a request's), with their running sums from 0 (``sums[i]``: the tokens of
    draws before i); a request takes the next ones of its acceptance's chunk (see the
    module docstring) as ``r.draws = (tokens, sums, first index)``."""

    def __init__(self, spec: SpeculativeConfig, drafter: Drafter, rng: np.random.Generator):
        self.k = spec.num_tokens
        self.drafter = drafter
        self.free = drafter.free
        self.rng = rng
        k = self.k

        def cuts(probs: tuple[float, ...]) -> np.ndarray:
            # P(at most j + 1 tokens) for j < k; a draw past all of them emits k + 1.
            return np.cumsum(np.asarray(probs, dtype=float))[:-1]

        self.cuts = cuts(spec.acceptance.emit_probabilities(k))
        self.by_class = {name: cuts(a.emit_probabilities(k)) for name, a in spec.classes.items()}
        # Per acceptance (keyed by its cuts' identity): tokens, running sums, next free.
        self.chunks: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
        # Per acceptance: the plan of the next routed requests' first paths, and counts of
        # plans made and of requests that took a planned row.
        self.plans: dict[int, Plan] = {}
        self.planning = True
        self.plans_made = 0
        self.planned = 0

    def attach(self, r: Request, requests: Requests, block_size: int | None = None) -> None:
        """Give ``r`` (just routed) the tokens each of its verifies emits, and, on a
        replica of ``block_size``-token KV blocks, its first path through the decode set
        when a plan covers it (:mod:`sim.core.specplan`)."""
        cuts = self.cuts
        if self.by_class and requests.klass is not None:
            cuts = self.by_class.get(requests.class_names[requests.klass[r.id]], cuts)
        n = r.output - 1 if r.output > 1 else 0
        key = id(cuts)
        r.path = None
        chunk = self.chunks.get(key)
        if chunk is not None and block_size is not None and self.planning:
            pl = self.plans.get(key)
            if pl is not None:
                hit, r.path = pl.take(r.id, chunk[2])
                if hit:
                    r.draws = chunk
                    self.chunks[key] = (chunk[0], chunk[1], pl.ends[pl.next - 1])
                    self.planned += 1
                    return
        if chunk is None or chunk[2] + n > len(chunk[0]):
            chunk = self._chunk(cuts, max(CHUNK, n))
            self.plans.pop(key, None)  # its rows point into the chunk left behind
        tokens, sums, i = r.draws = chunk
        self.chunks[key] = (tokens, sums, draws_end(sums, i, n))
        if block_size is None or not self.planning or self.by_class or r.id >= len(requests):
            return
        # Requests turned away or routed out of id order leave plans unused: stop
        # planning when they do, as the request-by-request path is then cheaper.
        if self.plans_made >= 8 and self.planned < 16 * self.plans_made:
            self.planning = False
            return
        last = min(r.id + PLAN, len(requests))
        pl = self.plans[key] = plan(tokens, sums, i, np.arange(r.id, last),
                                    requests.prompt_tokens[r.id:last],
                                    requests.output_tokens[r.id:last], self.k + 1, block_size)
        self.plans_made += 1
        hit, r.path = pl.take(r.id, i)
        self.planned += hit

    def _chunk(self, cuts: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, int]:
        """``size`` fresh draws under ``cuts``, their running sums (from 0, one longer)
        and the index of the first unused one (0)."""
        u = self.rng.random(size)
        # 1 + the cuts at or below each draw (what searchsorted gives, faster for few),
        # kept in bytes (k + 1 <= 65): an eighth of the memory int64 would take.
        tokens = np.ones(size, dtype=np.int8)
        for c in cuts:
            tokens += u >= c
        sums = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(tokens, out=sums[1:])
        return tokens, sums, 0

    def draft_time(self, batch: Batch) -> float:
        """Seconds drafting takes for the iteration ``batch`` (before it ran): the
        drafter's price for its verifying sequences and their context, with their
        verify's extra state writes (:meth:`sim.cost.drafter.Drafter.step_time`,
        inlined: it runs every iteration)."""
        g = batch.group
        if isinstance(g, SpecDecodeSet):
            seqs, ctx = g.n, g.ctx
        else:
            seqs = ctx = 0
        if batch:
            for r, n in batch.items():
                if r.computed + n > r.prompt + r.generated:
                    seqs += 1
                    ctx += r.computed
        drafter = self.drafter
        if not seqs:
            return 0.0
        # The verify's Gated DeltaNet state writes beyond a decode's (0.0 without them).
        states = seqs * drafter.verify_state_s
        if drafter.model is None:
            return states
        line = drafter.lines.get(seqs)
        if line is None:
            if drafter.head is not None:  # priced step by step from the target's profile
                return drafter.head_time(seqs, ctx) + states
            line = drafter.line(seqs)
        return drafter.k * (line[0] + line[1] * (ctx + line[2])) + states
