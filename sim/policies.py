"""Batching policies: each decides one iteration's batch from a replica's state.

A policy is one small class with ``schedule(state) -> Batch`` where a batch maps each
request to the tokens it computes this iteration: a whole prompt, a prefill chunk,
or 1 for a decode. Policies move requests between ``state.waiting`` and
``state.running`` only through ``state.admit`` and ``state.preempt``, which keep the
KV accounting and per-request records straight. They are registered by their YAML
name in :data:`POLICIES`.

The state a policy reads (see :class:`sim.replica.Replica`): ``waiting`` (deque,
FCFS), ``running`` (list, admission order), ``kv`` (:class:`BlockAllocator`),
``block_size``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from sim.kvcache import blocks_for
from sim.request import Request

if TYPE_CHECKING:
    from sim.scenario import ServingConfig

Batch = dict[Request, int]


class Policy(Protocol):
    """What the replica needs from a batching policy."""

    def schedule(self, state: Any) -> Batch:
        """The next iteration's batch (empty when there is nothing to run)."""
        ...

    def reject_reason(self, prompt: int, output: int, state: Any) -> str | None:
        """Why a request of these lengths (tokens) can never run here, or None."""
        ...


class Continuous:
    """Iteration-level batching as vLLM v0 runs it by default.

    Prefill-first: while the head of the FCFS queue fits the token budget, the sequence
    limit and the KV cache (keeping the watermark free), it is admitted and the
    iteration is prefill-only. Otherwise every running request decodes one token; when
    one needs a new block and none is free, the newest running request is preempted
    (recompute: its blocks are freed and it re-prefills prompt plus generated tokens
    later), repeating until the block fits or the request itself is the newest.
    """

    def __init__(self, cfg: ServingConfig):
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens

    def reject_reason(self, prompt: int, output: int, state: Any) -> str | None:
        """Prompts over the token budget can never be admitted as one prefill."""
        if prompt > self.max_tokens:
            return "prompt_exceeds_max_num_batched_tokens"
        return None

    def schedule(self, state: Any) -> Batch:
        """Admit prefills if any fit; else decode all running requests."""
        batch: Batch = {}
        kv = state.kv
        bs = state.block_size
        waiting = state.waiting
        if waiting:
            tokens = self.max_tokens
            seqs = len(state.running)
            while waiting and seqs < self.max_seqs:
                r = waiting[0]
                n = r.prompt + r.generated  # a preempted request recomputes its output too
                if n > tokens:
                    break
                need = blocks_for(n, bs)
                if not kv.can_allocate(need, keep_watermark=True):
                    break
                waiting.popleft()
                state.admit(r, need)
                batch[r] = n
                tokens -= n
                seqs += 1
            if batch:
                return batch
        return decode_all(state, batch)


def decode_all(state: Any, batch: Batch) -> Batch:
    """Add one decode token for every running request to ``batch``, preempting the
    newest running requests (recompute) when the KV cache has no block to grow into."""
    running = state.running
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
        state.waiting.extendleft(victims)
    return batch


POLICIES: dict[str, type] = {
    "continuous": Continuous,
}


def make_policy(cfg: ServingConfig) -> Policy:
    """The policy named by ``cfg.policy``."""
    return POLICIES[cfg.policy](cfg)
