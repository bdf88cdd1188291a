"""``chunked``: chunked prefill under a per-iteration token budget (Sarathi-Serve, OSDI'24;
vLLM v1's scheduler).

A chunk needs no special phase: a batch entry with fewer new tokens than the request's
pending tokens is a chunk; ``computed`` advances by it, and the token is emitted by the
iteration that brings ``computed`` up to ``prompt + generated``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.core.request import Request
from sim.policies.base import Batch, ReplicaState, grow

if TYPE_CHECKING:
    from sim.config.scenario import ServingConfig


class Chunked:
    """Stall-free batching with a budget of ``token_budget`` tokens per iteration (default
    2048, or ``max_num_batched_tokens`` when smaller).

    Running requests go first, in admission order: each decode takes one token, a
    request part-way through its prefill takes the next chunk of what is left (because
    prefills are admitted last, running decodes always precede it, so decodes never
    wait behind a whole prompt). The rest of the budget admits waiting requests in
    queue order, each with as much of its prompt as fits; the last one admitted is
    usually cut and continues next iteration. Paged KV: a chunk allocates only the
    blocks its new tokens need. When a running request cannot grow, the newest running
    request not yet in this batch is preempted (recompute, or swap), else the chunk
    shrinks to the free blocks, else the request itself is preempted. No admission
    happens in an iteration that preempted (as vLLM v1), so a victim is not re-admitted
    into the space it just gave up.
    """

    # A request's running entry is a steady decode once its last chunk emitted, and
    # those lead the running list (later admissions follow them).
    lazy_decodes = True
    reserves_kv = False

    def __init__(self, cfg: ServingConfig):
        self.budget = cfg.chunk_budget
        self.max_seqs = cfg.max_num_seqs

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Any prompt can be chunked; only the KV capacity (checked by the replica) limits."""
        return None

    def schedule(self, state: ReplicaState) -> Batch:
        """Running requests' decodes and chunks first, then new prefill chunks."""
        batch = Batch()
        running = state.running
        kv = state.kv
        budget = self.budget
        victims: list[Request] = []
        i = 0
        group = state.group
        if group is not None:
            # Steady decodes lead the running list; when they all fit the budget and
            # their blocks are free, they decode as one aggregate (sim/core/decodeset.py).
            if group.n <= budget and group.reserve(running, batch, prefix=True):
                i = group.n
                budget -= i
            else:
                group.flush(running)
        while i < len(running) and budget > 0:
            r = running[i]
            c = r.computed
            n = r.prompt + r.generated - c
            if n > budget:
                n = budget
            if not grow(state, r, n, victims):
                # r is the newest: shrink its chunk to its own free slots plus free blocks.
                n = (r.blocks + kv.num_free) * state.block_size - c
                if n < 1:
                    victims.append(running.pop())
                    state.release(r)
                    break
                kv.allocate_slots(r, n)
            batch[r] = n
            budget -= n
            i += 1
        if victims:
            state.requeue(victims)
            return batch
        waiting = state.waiting
        seqs = len(running) + state.in_flight
        while waiting and budget > 0 and seqs < self.max_seqs:
            r = waiting[0]
            hit = kv.computed_tokens(r)  # leading tokens in the prefix cache
            n = r.prompt + r.generated - r.computed - hit.tokens
            if n > budget:
                n = budget
            if kv.allocate_slots(r, n, hit, keep_watermark=True) is None:
                break
            waiting.popleft()
            state.admit(r, hit)
            batch[r] = n
            budget -= n
            seqs += 1
        return batch
