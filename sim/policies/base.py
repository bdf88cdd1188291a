"""What every batching policy shares: the batch type, the policy protocol, and the
moves that touch KV accounting (decode growth with preemption, resuming requests
whose KV is already present).

A policy returns the whole iteration as a :class:`sim.core.batch.Batch`: each request
mapped to the tokens it computes (a whole prompt, a prefill chunk, or 1 for a decode),
plus, when the replica keeps its steady decodes as one aggregate and they all decode,
that aggregate (which its ``reserve`` puts in the batch). Policies ask ``state.kv``
(:class:`sim.core.kvmanager.KVCacheManager`) for blocks and never
change a count themselves; they move requests between ``state.waiting`` and
``state.running`` only through ``state.admit`` (after the manager gave the blocks),
``state.release`` (preemption) and ``state.requeue``, which keep the swap-space and
per-request records straight.

The contract between a policy and the replica that runs it is declared here:
:class:`ReplicaState` is everything a policy may read or call (the replica implements
it), :class:`Policy` is everything the replica needs from a policy, capabilities
included. A new policy is one module with one class and one line in
:data:`sim.policies.registry.POLICIES` (or :func:`sim.policies.registry.register` from
outside the package); docs/policies.md works through an example.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Protocol

from sim.core.batch import Batch, DecodeGroup
from sim.core.kvmanager import NO_HIT, KVCacheManager, PrefixHit
from sim.core.request import Request

__all__ = ["Batch", "DecodeGroup", "Policy", "ReplicaState", "decode_all", "grow",
           "prompt_over_budget", "resume", "whole_life_tokens"]

class ReplicaState(Protocol):
    """What a policy may read and call on the replica it schedules.

    ``waiting``: requests not running, in admission order (FCFS, or by priority class
    then arrival); ``running``: in admission order, newest last; ``kv``: the replica's
    KV-cache manager; ``block_size``: tokens per KV block; ``group``: the aggregate of
    steady decodes, or None when the replica keeps none (the policy's
    ``lazy_decodes`` is False, or the run turned it off); ``in_flight``: sequences of
    the replica's micro-batches still in its pipeline (sim/core/pipeline.py), which are
    not in ``running`` but count against the sequence limit (0 with one stage)."""

    waiting: deque[Request]
    running: list[Request]
    kv: KVCacheManager
    block_size: int
    in_flight: int

    @property
    def group(self) -> DecodeGroup | None:
        """The steady decodes kept as one aggregate, or None."""
        ...

    def admit(self, r: Request, hit: PrefixHit = NO_HIT) -> None:
        """Move the head of ``waiting`` (already popped) into ``running``, after the KV
        manager gave its blocks; ``hit`` is its prefix-cache hit."""
        ...

    def release(self, r: Request) -> None:
        """Preempt running request ``r`` (already removed from ``running``): free its
        blocks for recompute, or swap them out."""
        ...

    def requeue(self, victims: Iterable[Request]) -> None:
        """Put preempted requests back into ``waiting`` in admission order."""
        ...


class Policy(Protocol):
    """What the replica needs from a batching policy.

    Capabilities, declared by every policy as class attributes:
    ``lazy_decodes``: between iterations every running request is a steady decode (one
    token a step, its KV exactly its tokens), so the replica may keep them as one
    aggregate and advance them in O(1) (:class:`DecodeGroup`); ``reserves_kv``: the
    policy takes a request's whole KV (prompt plus output) at admission, so a steady
    decode never needs a new block."""

    lazy_decodes: bool
    reserves_kv: bool

    def schedule(self, state: ReplicaState) -> Batch:
        """The next iteration, whole (``seqs == 0`` when there is nothing to run)."""
        ...

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Why a request of these lengths (tokens) can never run here, or None."""
        ...


def prompt_over_budget(prompt: int, max_tokens: int) -> str | None:
    """Why a prompt of ``prompt`` tokens can never be prefilled in one iteration of at
    most ``max_tokens`` tokens, or None."""
    return "prompt_exceeds_max_num_batched_tokens" if prompt > max_tokens else None


def grow(state: ReplicaState, r: Request, num_new_tokens: int, victims: list[Request]) -> bool:
    """Give running request ``r`` the KV blocks for ``num_new_tokens`` more tokens,
    preempting the newest running requests (appended to ``victims``) while they do not
    fit. False when ``r`` itself is the newest and they still do not fit: nothing is
    taken, and the caller shrinks or preempts ``r``."""
    kv = state.kv
    running = state.running
    while kv.allocate_slots(r, num_new_tokens) is None:
        last = running[-1]
        if last is r or last.admitted < r.admitted:
            # No newer request left to preempt (a pipeline may hand an older one back
            # behind r): r must yield instead.
            return False
        victims.append(running.pop())
        state.release(victims[-1])
    return True


def decode_all(state: ReplicaState, batch: Batch, width: int = 1) -> Batch:
    """Add one decode of ``width`` tokens (1, or with speculative decoding the pending
    token and the drafted ones to verify) for every running request to ``batch``,
    preempting the newest running requests when the KV cache has no block to grow into.

    A replica that keeps its steady decodes as one aggregate (``state.group``) decodes
    them as that aggregate when they need no preemption: the batch includes the group
    instead of listing each member."""
    running = state.running
    group = state.group
    if group is not None:
        if group.reserve(running, batch):
            return batch
        group.flush(running)
    victims: list[Request] = []
    i = 0
    while i < len(running):
        r = running[i]
        if not grow(state, r, width, victims):
            # r is the newest: it yields its own blocks.
            running.pop() if running[-1] is r else running.remove(r)
            victims.append(r)
            state.release(r)
            break
        batch[r] = width
        i += 1
    if victims:
        # Oldest victim first, ahead of newer arrivals: FCFS order is kept.
        state.requeue(victims)
    return batch


def resume(state: ReplicaState, batch: Batch, max_seqs: int) -> Batch:
    """Admit waiting requests whose KV is already computed (swapped out, or sent by a
    prefill replica) as decodes, in queue order, while the KV cache (keeping the
    watermark free) and the sequence limit allow."""
    waiting = state.waiting
    kv = state.kv
    running = state.running
    while waiting and waiting[0].computed and len(running) + state.in_flight < max_seqs:
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
