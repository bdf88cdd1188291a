"""Policies that reserve a request's whole KV at admission: ``static`` and ``orca``.

Both take ``prompt + output - 1`` tokens' worth of blocks when a request is admitted,
as FasterTransformer and Orca (which predates paged attention) do, so neither ever
preempts; the price is a KV cache that holds fewer requests than paging would allow.
Under ``orca`` with speculative decoding the reservation also covers the k slots of the
drafted tokens a request's last verify writes past its last kept token.
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
    from sim.config.serving import ServingConfig


def admit_whole_prompts(state: ReplicaState, batch: Batch, tokens: int, max_seqs: int,
                        lookahead: int = 0) -> Batch:
    """Add waiting requests to ``batch`` in queue order, each with its whole prompt and
    its whole-life KV plus ``lookahead`` tokens' slots (speculation's k drafted tokens,
    else 0) reserved, while the batch holds fewer than ``max_seqs`` sequences, the
    prompts fit ``tokens`` (new tokens left this iteration) and the KV cache keeps its
    watermark free."""
    waiting = state.waiting
    kv = state.kv
    # Every running request decodes in these policies, so the running list counts the
    # batch's sequences (its decodes may be implicit: sim/core/decodeset.py).
    while waiting and len(state.running) < max_seqs:
        r = waiting[0]
        if r.prompt > tokens or kv.allocate_slots(
                r, r.prompt, lookahead_tokens=whole_life_tokens(r) - r.prompt + lookahead,
                keep_watermark=True) is None:
            break
        waiting.popleft()
        state.admit(r)
        batch[r] = r.prompt
        tokens -= r.prompt
    return batch


def whole_prompts_fitting(state: ReplicaState, tokens: int, max_seqs: int,
                          lookahead: int = 0) -> int:
    """Prompt tokens :func:`admit_whole_prompts` would admit now with the same
    ``lookahead``: the same checks in the same order (sequence limit, token budget,
    whole-life KV plus lookahead keeping the watermark free), nothing changed."""
    kv = state.kv
    room = kv.available - kv.watermark
    seqs = len(state.running)
    total = 0
    for r in state.waiting:
        need = kv.blocks_needed(r, whole_life_tokens(r) + lookahead)
        if seqs >= max_seqs or r.prompt > tokens or need > room:
            break
        room -= need
        tokens -= r.prompt
        total += r.prompt
        seqs += 1
    return total


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

    TensorRT-LLM's batch waiting (``batch_wait_timeout_iters``,
    ``batch_wait_max_tokens_ratio``): when an iteration would mix new prompts with
    decodes, the prompts are held back, and the iteration only decodes, until either
    the iterations held since the last admission reach ``batch_wait_timeout_iters`` or
    the prompts plus one token a decode reach ``batch_wait_max_tokens_ratio`` of
    ``max_num_batched_tokens`` (TensorRT-LLM's ``PyExecutor._waiting_requests``). So
    prompts gather into fewer, larger prefills at the price of their first tokens. With
    nothing decoding, prompts never wait.

    With speculative decoding (k drafted tokens) each running request verifies k + 1
    tokens an iteration and counts all of them against the token budget and the batch
    waiting's ratio (TensorRT-LLM counts a generation request's draft tokens in
    ``max_num_tokens``), and admission reserves k slots past the whole life for the
    drafted tokens of the request's last verify.
    """

    lazy_decodes = True  # running requests are steady decodes between iterations
    reserves_kv = True

    def __init__(self, cfg: ServingConfig):
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.width = cfg.decode_width  # tokens a decode computes (speculation: k + 1)
        self.lookahead = self.width - 1  # k: the last verify's drafted slots
        self.wait_iters = cfg.batch_wait_timeout_iters
        self.wait_tokens = cfg.batch_wait_max_tokens_ratio * cfg.max_num_batched_tokens
        self.waits = bool(cfg.batch_wait_timeout_iters or cfg.batch_wait_max_tokens_ratio)
        self.held = 0  # iterations prompts were held back since the last admission

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Prompts over the token budget can never be prefilled."""
        return prompt_over_budget(prompt, self.max_tokens)

    def schedule(self, state: ReplicaState) -> Batch:
        """Decode every running request and add the whole prefills that fit (unless
        batch waiting holds them back this iteration)."""
        # Blocks were reserved at admission: none taken.
        batch = decode_all(state, Batch(), self.width)
        budget = self.max_tokens - len(state.running) * self.width
        if self.waits and state.running and state.waiting and self._hold(state, budget):
            return batch
        return admit_whole_prompts(state, batch, budget, self.max_seqs, self.lookahead)

    def _hold(self, state: ReplicaState, budget: int) -> bool:
        """Whether batch waiting holds back the prompts that would join this iteration
        (``budget``: the tokens the decodes leave)."""
        prompts = whole_prompts_fitting(state, budget, self.max_seqs, self.lookahead)
        if not prompts:
            return False
        decodes = self.max_tokens - budget  # k + 1 tokens a decode
        if self.held >= self.wait_iters or prompts + decodes >= self.wait_tokens:
            self.held = 0
            return False
        self.held += 1
        return True
