"""Batching policies by YAML name (:data:`POLICIES`), and ``continuous`` itself.

A policy is one small class with ``schedule(state) -> Batch`` (see :mod:`sim.policies.base`
for the batch, the state it reads and the shared moves). Each lives in its own module:

- ``static``: :class:`sim.policies.static.Static` (FasterTransformer request-level batching)
- ``continuous``: :class:`Continuous` below (vLLM v0 default)
- ``orca``: :class:`sim.policies.static.Orca` (Orca, OSDI'22: whole prefills mixed with decodes)
- ``chunked``: :class:`sim.policies.chunked.Chunked` (Sarathi-Serve, OSDI'24 / vLLM v1)
- ``disaggregated``: a cluster layout of prefill and decode pools (:mod:`sim.core.disagg`)

docs/policies.md describes each with its measured behaviour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.errors import ServesimError
from sim.policies.base import (
    Batch,
    Policy,
    ReplicaState,
    decode_all,
    prompt_over_budget,
    resume,
)
from sim.policies.chunked import Chunked
from sim.policies.static import Orca, Static

if TYPE_CHECKING:
    from sim.config.serving import ServingConfig

__all__ = ["POLICIES", "Batch", "Chunked", "Continuous", "Disaggregated", "Orca", "Policy",
           "Static", "decode_all", "make_policy", "register", "resume"]


class Continuous:
    """Iteration-level batching as vLLM v0 runs it by default.

    Prefill-first: while the head of the FCFS queue fits the token budget, the sequence
    limit and the KV cache (keeping the watermark free), it is admitted and the
    iteration is prefill-only. Otherwise every running request decodes one token; when
    one needs a new block and none is free, the newest running request is preempted
    (recompute: its blocks are freed and it re-prefills prompt plus generated tokens
    later, or with ``preemption: swap`` its KV goes to host memory and comes back as a
    decode), repeating until the block fits or the request itself is the newest.
    """

    # Between iterations every running request is a steady decode (a prefill here is a
    # whole prompt, and emits), so the replica may keep them in a DecodeSet.
    lazy_decodes = True
    reserves_kv = False

    def __init__(self, cfg: ServingConfig):
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.width = cfg.decode_width  # tokens a decode computes (speculation: k + 1)

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        """Prompts over the token budget can never be admitted as one prefill; nor can the
        re-prefill of prompt plus output a preemption may force. (vLLM refuses to start
        when max_num_batched_tokens < max_model_len for this reason.)"""
        why = prompt_over_budget(prompt, self.max_tokens)
        if why is not None:
            return why
        if prompt + output - 1 > self.max_tokens:
            return "recompute_exceeds_max_num_batched_tokens"
        return None

    def schedule(self, state: ReplicaState) -> Batch:
        """Admit prefills if any fit; else decode all running requests."""
        batch = Batch()
        waiting = state.waiting
        if waiting:
            if waiting[0].computed:
                # Its KV is present (swapped out, or sent by a prefill replica): like vLLM
                # v0 with a swapped queue, no prefills; resume it when no one is preempted.
                before = len(state.running)
                decode_all(state, batch, self.width)
                if len(state.running) == before:
                    resume(state, batch, self.max_seqs)
                return batch
            kv = state.kv
            tokens = self.max_tokens
            seqs = len(state.running) + state.in_flight
            while waiting and seqs < self.max_seqs:
                r = waiting[0]
                if r.computed:  # KV present: resumed in a decode iteration
                    break
                n = r.prompt + r.generated  # a preempted request recomputes its output too
                hit = kv.computed_tokens(r)  # leading tokens in the prefix cache
                todo = n - hit.tokens
                if todo > tokens or kv.allocate_slots(r, todo, hit,
                                                      keep_watermark=True) is None:
                    break
                waiting.popleft()
                state.admit(r, hit)
                batch[r] = todo
                tokens -= todo
                seqs += 1
            if batch:
                return batch
        return decode_all(state, batch, self.width)


class Disaggregated:
    """Registry entry for ``policy: disaggregated``. It is not an inner policy: the
    engine splits the cluster into the pools of ``scenario.disaggregated``."""

    def __init__(self, cfg: Any):
        raise ServesimError("disaggregated is a cluster layout, not a replica policy; "
                            "pool policies may be continuous or chunked",
                            where="serving.policy")




POLICIES: dict[str, type] = {
    "static": Static,
    "continuous": Continuous,
    "orca": Orca,
    "chunked": Chunked,
    "disaggregated": Disaggregated,
}


def register(name: str, policy: type) -> None:
    """Make ``policy`` (a class built from a ``ServingConfig`` that implements
    :class:`~sim.policies.base.Policy`) available as ``serving.policy: NAME``, for a
    policy written outside this package; one inside it is a line of :data:`POLICIES`."""
    if name in POLICIES:
        raise ServesimError(f"policy {name!r} is already registered "
                            f"({POLICIES[name].__qualname__})", where="serving.policy")
    for capability in ("lazy_decodes", "reserves_kv"):
        if not isinstance(getattr(policy, capability, None), bool):
            raise ServesimError(f"{policy.__qualname__} must declare {capability} "
                                "(True or False) as a class attribute", where="serving.policy")
    POLICIES[name] = policy


def make_policy(cfg: ServingConfig) -> Policy:
    """The policy named by ``cfg.policy`` (a name :class:`ServingConfig` checked)."""
    policy: Policy = POLICIES[cfg.policy](cfg)
    return policy
