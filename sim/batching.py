"""What every batching policy shares: the batch type, the policy protocol, and the
moves that touch KV accounting (decode growth with preemption, resuming requests
whose KV is already present).

A batch maps each request to the tokens it computes this iteration: a whole prompt,
a prefill chunk (fewer than the request's pending tokens), or 1 for a decode.
Policies move requests between ``state.waiting`` and ``state.running`` only through
``state.admit``, ``state.release`` (preemption) and ``state.requeue``, which keep the
KV, swap-space and per-request records straight.

The state a policy reads (see :class:`sim.replica.Replica`): ``waiting`` (deque in
admission order: FCFS, or by priority class then arrival), ``running`` (list,
admission order), ``kv`` (:class:`sim.kvcache.BlockAllocator`), ``block_size``.
"""

from __future__ import annotations

from typing import Any, Protocol

from sim.kvcache import blocks_for
from sim.request import Request

Batch = dict[Request, int]


class Policy(Protocol):
    """What the replica needs from a batching policy."""

    def schedule(self, state: Any) -> Batch:
        """The next iteration's batch (empty when there is nothing to run)."""
        ...

    def reject_reason(self, prompt: int, output: int, state: Any) -> str | None:
        """Why a request of these lengths (tokens) can never run here, or None."""
        ...


def prompt_over_budget(prompt: int, max_tokens: int) -> str | None:
    """Why a prompt of ``prompt`` tokens can never be prefilled in one iteration of at
    most ``max_tokens`` tokens, or None."""
    return "prompt_exceeds_max_num_batched_tokens" if prompt > max_tokens else None


def decode_all(state: Any, batch: Batch) -> Batch:
    """Add one decode token for every running request to ``batch``, preempting the
    newest running requests when the KV cache has no block to grow into.

    A replica that keeps its steady decodes in a :class:`sim.decodeset.DecodeSet`
    (``state.group``) decodes them implicitly when they need no preemption: the batch
    then lists only the other entries, and the set's members decode too."""
    running = state.running
    group = getattr(state, "group", None)
    if group is not None:
        if group.reserve(state.kv, running):
            return batch
        group.flush(running)
    kv = state.kv
    bs = state.block_size
    victims: list[Request] = []
    i = 0
    while i < len(running):
        r = running[i]
        need = r.computed // bs + 1 - r.blocks
        if need > 0:
            while not kv.can_allocate(need) and running[-1] is not r:
                victims.append(running.pop())
                state.release(victims[-1])
            if not kv.can_allocate(need):
                victims.append(running.pop())  # r is the newest: it yields its own blocks
                state.release(r)
                break
            kv.allocate(need)
            r.blocks += need
        batch[r] = 1
        i += 1
    if victims:
        # Oldest victim first, ahead of newer arrivals: FCFS order is kept.
        state.requeue(victims)
    return batch


def resume(state: Any, batch: Batch, max_seqs: int) -> Batch:
    """Admit waiting requests whose KV is already computed (swapped out, or sent by a
    prefill replica) as decodes, in queue order, while the KV cache (keeping the
    watermark free) and the sequence limit allow."""
    waiting = state.waiting
    kv = state.kv
    bs = state.block_size
    running = state.running
    while waiting and waiting[0].computed and len(running) < max_seqs:
        r = waiting[0]
        need = blocks_for(r.computed + 1, bs) - r.blocks
        if not kv.can_allocate(need, keep_watermark=True):
            break
        waiting.popleft()
        state.admit(r, need)
        batch[r] = r.prompt + r.generated - r.computed  # 1: its next decode
    return batch


def reserve_blocks(r: Request, block_size: int) -> int:
    """Blocks for a request's whole life (prompt plus every output token's KV but the
    last), which the reserving policies (static, orca) take at admission."""
    return blocks_for(r.prompt + r.output - 1, block_size)
