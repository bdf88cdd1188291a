"""Policies that reserve a request's whole KV at admission: ``static`` and ``orca``.

Both take ``prompt + output - 1`` tokens' worth of blocks when a request is admitted,
as FasterTransformer and Orca (which predates paged attention) do, so neither ever
preempts; the price is a KV cache that holds fewer requests than paging would allow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.policies.base import (
    Batch,
    ReplicaState,
    decode_all,
    prompt_over_budget,
    whole_life_tokens,
)

if TYPE_CHECKING:
    from sim.config.scenario import ServingConfig


def admit_whole_prompts(state: ReplicaState, batch: Batch, tokens: int, max_seqs: int) -> Batch:
    """Add waiting requests to ``batch`` in queue order, each with its whole prompt and
    its whole-life KV reserved, while the batch holds fewer than ``max_seqs`` sequences,
    the prompts fit ``tokens`` (new tokens left this iteration) and the KV cache keeps
    its watermark free."""
    waiting = state.waiting
    kv = state.kv
    # Every running request decodes in these policies, so the running list counts the
    # batch's sequences (its decodes may be implicit: sim/core/decodeset.py).
    while waiting and len(state.running) < max_seqs:
        r = waiting[0]
        if r.prompt > tokens or kv.allocate_slots(
                r, r.prompt, lookahead_tokens=whole_life_tokens(r) - r.prompt,
                keep_watermark=True) is None:
            break
        waiting.popleft()
        state.admit(r)
        batch[r] = r.prompt
        tokens -= r.prompt
    return batch


class Static:
    """Request-level batching (FasterTransformer; a plain HuggingFace ``generate`` loop).

    When nothing runs, up to ``static_batch_size`` (capped by ``max_num_seqs``) waiting
    requests, taken in queue order while their prompts fit ``max_num_batched_tokens``
    and their reserved KV fits the cache, form a batch and prefill together in one
    iteration. The batch then decodes until its longest request finishes: a finished
    request's slot idles (it costs nothing: the cost model sees only live sequences)
    and newcomers wait for the whole batch to drain. Padding of shorter prompts is not
    modelled.
    """

    lazy_decodes = True  # running requests are steady decodes between iterations
    reserves_kv = True

    def __init__(self, cfg: ServingConfig):
        self.size = min(cfg.static_batch_size or cfg.max_num_seqs, cfg.max_num_seqs)
        self.max_tokens = cfg.max_num_batched_tokens

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Prompts over the token budget can never be prefilled."""
        return prompt_over_budget(prompt, self.max_tokens)

    def schedule(self, state: ReplicaState) -> Batch:
        """Decode the current batch; when it has drained, form the next one."""
        if state.running:
            return decode_all(state, Batch())  # blocks were reserved at admission: none taken
        return admit_whole_prompts(state, Batch(), self.max_tokens, self.size)


class Orca:
    """Iteration-level scheduling with mixed batches (Orca, OSDI'22).

    Every iteration, each running request decodes one token and, in the same
    iteration, waiting requests are admitted in queue order with their whole prompt
    while the sequence limit, the token budget (decodes count one token each) and the
    KV cache (whole-life reservation, keeping the watermark free) allow. So a long
    prompt's prefill lengthens the iteration every running decode waits on: the
    prefill/decode interference chunked prefill removes.
    """

    lazy_decodes = True  # running requests are steady decodes between iterations
    reserves_kv = True

    def __init__(self, cfg: ServingConfig):
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Prompts over the token budget can never be prefilled."""
        return prompt_over_budget(prompt, self.max_tokens)

    def schedule(self, state: ReplicaState) -> Batch:
        """Decode every running request and add the whole prefills that fit."""
        batch = decode_all(state, Batch())  # blocks were reserved at admission: none taken
        return admit_whole_prompts(state, batch, self.max_tokens - len(state.running),
                                   self.max_seqs)
