"""``chunked``: chunked prefill under a per-iteration token budget (Sarathi-Serve, OSDI'24;
vLLM v1's scheduler).

A chunk needs no special phase: a batch entry with fewer new tokens than the request's
pending tokens is a chunk; ``computed`` advances by it, and the token is emitted by the
iteration that brings ``computed`` up to ``prompt + generated``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.core.prefix import HEADS
from sim.core.request import Request
from sim.policies.base import Batch, ReplicaState, grow

if TYPE_CHECKING:
    from sim.config.serving import ServingConfig


class Chunked:
    """vLLM v1's scheduler: a budget of ``max_num_batched_tokens`` tokens per iteration
    (or a smaller ``token_budget``), shared by decodes and prompt chunks.

    Running requests go first, in admission order: each decode takes one token, a
    request part-way through its prefill takes the next chunk of what is left (because
    prefills are admitted last, running decodes always precede it, so decodes never wait
    behind a whole prompt). The rest of the budget admits waiting requests in queue
    order, each with as much of its prompt as fits; the last one admitted is usually cut
    and continues next iteration. ``long_prefill_token_threshold`` (when above 0) caps
    any one request's tokens in an iteration, so several long prompts advance side by
    side. Paged KV: a chunk allocates only the blocks its new tokens need, and a
    prompt's full blocks join the prefix cache as they are scheduled, so a request
    admitted later may hit blocks the step computes. When a running request cannot grow,
    the newest running requests are preempted (recompute, or swap) until it fits; when
    it is itself the newest, it is preempted, as v1 does (its chunk is not shrunk to the
    free blocks). Under priority scheduling the victims are the lowest-priority, latest-
    arriving running requests instead, wherever they stand, a victim scheduled earlier
    in the iteration giving its tokens back; when the request is its own victim no later
    running request is scheduled in that iteration (:func:`grow_by_priority`). No
    admission happens in an iteration that preempted (as vLLM v1), so a victim is not
    re-admitted into the space it just gave up; and from vLLM 0.19
    (``scheduler_reserve_full_isl``) a waiting request is admitted only when the blocks of
    its whole sequence so far fit.
    """

    # A request's running entry is a steady decode once its last chunk emitted, and
    # those lead the running list (later admissions follow them), unless a
    # long_prefill_token_threshold below the budget lets several prompts run part-way.
    lazy_decodes = True
    reserves_kv = False

    def __init__(self, cfg: ServingConfig):
        self.budget = cfg.chunk_budget
        self.max_seqs = cfg.max_num_seqs
        # 0 (no cap) is the same as a cap no chunk can reach.
        self.cap = cfg.long_prefill_token_threshold or cfg.chunk_budget
        if self.cap < self.budget:
            # Several prompts can be part-way at once, and one admitted earlier can still
            # be prefilling when a later one starts decoding: steady decodes no longer
            # lead the running list, so the replica decodes request by request.
            self.lazy_decodes = False
        # Tokens a steady decode computes: 1, or with speculative decoding k + 1 (its
        # pending token and the drafted ones), all counted against the budget as vLLM does.
        self.width = cfg.decode_width
        # Under priority scheduling a victim is chosen by class and arrival, not by
        # admission, so it may be a member of the decode aggregate: the aggregate runs
        # only in iterations that preempt nobody (_after).
        self.priority = cfg.priority
        # vLLM from 0.19 admits a request only when its whole sequence's blocks fit.
        self.whole = cfg.reserves_full_isl
        # A Gated DeltaNet model's prefix cache (vLLM's align mode): prompt chunks end on
        # the block grid (grid_chunk); 0 otherwise.
        self.grid = (cfg.block_size if cfg.prefix_caching and cfg.linear_state_pool == "kv_cache"
                     else 0)
        # An EAGLE or MTP head: a hit loses its last block (sim.core.prefix), so the last
        # cut comes a block earlier (grid_chunk's ``back``).
        spec = cfg.speculative
        self.back = self.grid if spec is not None and spec.method in HEADS else 0

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Any prompt can be chunked; only the KV capacity (checked by the replica) limits."""
        return None

    def schedule(self, state: ReplicaState) -> Batch:
        """Running requests' decodes and chunks first, then new prefill chunks."""
        batch = Batch()
        victims: list[Request] = []
        budget = self._running(state, batch, victims)
        if victims:
            state.requeue(victims)
            if not batch and batch.group is None and state.running:
                # The pass ended on a request that preempted itself before any running
                # request had tokens (priority); vLLM's next pass, an empty step later,
                # runs them in the blocks it freed.
                return self.schedule(state)
            return batch
        kv = state.kv
        if kv.shares:
            # vLLM v1 caches a prompt's full blocks as it schedules them, so a request
            # admitted below may hit blocks another computes in this very step.
            for r, n in batch.items():
                kv.cache_scheduled(r, r.computed + n)
        # Waiting requests in queue order, each with as much of its prompt as fits.
        waiting = state.waiting
        seqs = len(state.running) + state.in_flight
        while waiting and budget > 0 and seqs < self.max_seqs:
            r = waiting[0]
            hit = kv.computed_tokens(r)  # leading tokens in the prefix cache
            n = min(r.prompt + r.generated - r.computed - hit.tokens, budget, self.cap)
            if self.grid and not (n := grid_chunk(r, r.computed + hit.tokens, n, self.grid,
                                                  self.back)):
                break
            if kv.allocate_slots(r, n, hit, keep_watermark=True,
                                 full_sequence_must_fit=self.whole) is None:
                break
            waiting.popleft()
            state.admit(r, hit)
            if kv.shares:
                kv.cache_scheduled(r, r.computed + n)
            batch[r] = n
            budget -= n
            seqs += 1
        return batch

    def _running(self, state: ReplicaState, batch: Batch, victims: list[Request]) -> int:
        """Give the running requests their decodes and chunks in ``batch``, preempting
        into ``victims`` where one cannot grow; the token budget left."""
        running = state.running
        budget = self.budget
        i = 0
        group = state.group
        if group is not None:
            # Steady decodes lead the running list; when they all fit the budget and
            # their blocks are free, they decode as one aggregate (sim/core/decodeset.py).
            width = self.width
            left = budget - group.n * width
            if left >= 0 and group.reserve(running, batch, prefix=True, spare=self._after(
                    state, group.n, left) if self.priority else 0):
                i = group.n
                budget -= i * width
            else:
                group.flush(running)
        while i < len(running) and budget > 0:
            r = running[i]
            n = self._tokens(r, budget)
            if not n:  # its chunk cannot end on the block grid within the budget left
                i += 1
                continue
            if self.priority and not state.in_flight:
                back = grow_by_priority(state, r, n, victims, batch)
                if back is None:
                    break  # r was its own victim: vLLM schedules no later running request
                budget += back
                i = running.index(r)  # victims admitted before r left the list
            elif not grow(state, r, n, victims):
                if state.in_flight:
                    # Micro-batches in flight hold the blocks (vLLM would preempt the newer
                    # of them): r keeps its own and waits for them to come back.
                    break
                # r is the newest and still does not fit: it gives up its own blocks.
                # (Only a pipeline leaves requests after it: older ones handed back.)
                running.pop() if running[-1] is r else running.remove(r)
                victims.append(r)
                state.release(r)
                continue
            batch[r] = n
            budget -= n
            i += 1
        return budget

    def _after(self, state: ReplicaState, start: int, budget: int) -> int:
        """Blocks the running requests past the first ``start`` take this iteration,
        ``budget`` tokens left for them, if none is preempted (the running pass below
        without its allocations)."""
        need = 0
        for r in state.running[start:]:
            if budget <= 0:
                break
            n = self._tokens(r, budget)
            if n:
                need += max(state.kv.blocks_needed(r, n), 0)
                budget -= n
        return need

    def _tokens(self, r: Request, budget: int) -> int:
        """Tokens running request ``r`` computes this iteration, ``budget`` left: its
        steady decode's width, or the next chunk of what it has left (both within the
        budget and the per-request cap), a chunk ending on the block grid under a Gated
        DeltaNet model's prefix cache (:func:`grid_chunk`; 0: none in reach)."""
        n = r.prompt + r.generated - r.computed
        if n == 1 and r.generated:
            n = self.width  # a steady decode; a verify cut by the budget drafts fewer
        n = min(n, budget, self.cap)
        if self.grid and r.computed < max(r.prompt, r.prompt + r.generated - 1):
            return grid_chunk(r, r.computed, n, self.grid, self.back)
        return n


def grow_by_priority(state: ReplicaState, r: Request, n: int, victims: list[Request],
                     batch: Batch) -> int | None:
    """Give running request ``r`` the KV blocks for ``n`` more tokens as vLLM v1's
    priority policy does: while they do not fit, preempt the running request of the
    lowest priority (the largest class) and latest arrival (at equal arrival times,
    which a server's clock does not give, the larger id), appended to ``victims``; a
    victim already given tokens this iteration loses its entry in ``batch``. The tokens
    so given back (for the caller's budget), or None when ``r`` itself was the victim."""
    running = state.running
    back = 0
    while state.kv.allocate_slots(r, n) is None:
        victim = max(running, key=_rank)
        running.remove(victim)
        back += batch.pop(victim, 0)
        victims.append(victim)
        state.release(victim)
        if victim is r:
            return None
    return back


def _rank(r: Request) -> tuple[int, float, int]:
    """A running request's rank as a preemption victim: class, arrival (s), id."""
    return (r.priority, r.arrival, r.id)


def grid_chunk(r: Request, start: int, n: int, size: int, back: int = 0) -> int:
    """The most of ``n`` prompt tokens from ``start`` that ``r`` may compute in a step
    under vLLM's align mode, which keeps a Gated DeltaNet model's states only where a
    step ends on a multiple of the block ``size``: before the last such multiple of its
    tokens (``back`` tokens before it under an EAGLE or MTP head, whose hits drop their
    last block), a chunk ends on one (0 when none is in reach) and stops at that last
    one; past it, what is left goes in one chunk."""
    end = r.prompt + r.generated
    last = max(end - end % size - back, 0)
    if start >= last:
        return n
    stop = min(start + n, last)
    return max(0, stop - stop % size - start)
