"""What every batching policy shares: the batch type, the policy protocol, and the
moves that touch KV accounting (decode growth with preemption, resuming requests
whose KV is already present).

A batch maps each request to the tokens it computes this iteration: a whole prompt,
a prefill chunk (fewer than the request's pending tokens), or 1 for a decode.
Policies ask ``state.kv`` (:class:`sim.core.kvmanager.KVCacheManager`) for blocks and never
change a count themselves; they move requests between ``state.waiting`` and
``state.running`` only through ``state.admit`` (after the manager gave the blocks),
``state.release`` (preemption) and ``state.requeue``, which keep the swap-space and
per-request records straight.

The state a policy reads (see :class:`sim.core.replica.Replica`): ``waiting`` (deque in
admission order: FCFS, or by priority class then arrival), ``running`` (list,
admission order), ``kv``, ``block_size``.
"""

from __future__ import annotations

from typing import Any, Protocol

from sim.core.request import Request

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


def grow(state: Any, r: Request, num_new_tokens: int, victims: list[Request]) -> bool:
    """Give running request ``r`` the KV blocks for ``num_new_tokens`` more tokens,
    preempting the newest running requests (appended to ``victims``) while they do not
    fit. False when ``r`` itself is the newest and they still do not fit: nothing is
    taken, and the caller shrinks or preempts ``r``."""
    kv = state.kv
    running = state.running
    while kv.allocate_slots(r, num_new_tokens) is None:
        if running[-1] is r:
            return False
        victims.append(running.pop())
        state.release(victims[-1])
    return True


def decode_all(state: Any, batch: Batch) -> Batch:
    """Add one decode token for every running request to ``batch``, preempting the
    newest running requests when the KV cache has no block to grow into.

    A replica that keeps its steady decodes in a :class:`sim.core.decodeset.DecodeSet`
    (``state.group``) decodes them implicitly when they need no preemption: the batch
    then lists only the other entries, and the set's members decode too."""
    running = state.running
    group = getattr(state, "group", None)
    if group is not None:
        if group.reserve(running):
            return batch
        group.flush(running)
    victims: list[Request] = []
    i = 0
    while i < len(running):
        r = running[i]
        if not grow(state, r, 1, victims):
            victims.append(running.pop())  # r is the newest: it yields its own blocks
            state.release(r)
            break
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
    running = state.running
    while waiting and waiting[0].computed and len(running) < max_seqs:
        r = waiting[0]
        if kv.allocate_slots(r, 1, keep_watermark=True) is None:
            break
        waiting.popleft()
        state.admit(r)
        batch[r] = r.prompt + r.generated - r.computed  # 1: its next decode
    return batch


def whole_life_tokens(r: Request) -> int:
    """Tokens whose KV a request holds over its whole life (prompt plus every output
    token but the last), which the reserving policies (static, orca) take at admission."""
    return r.prompt + r.output - 1
