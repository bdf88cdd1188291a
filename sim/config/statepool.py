"""Where a hybrid model's Gated DeltaNet states live (``serving.linear_state_pool``), and
the KV block size that follows under vLLM.

A linear-attention layer keeps a fixed-size state a running request (its recurrent
matrices and convolution window), whatever the request's length. Two servers keep them
two ways:

- vLLM pages them from the one pool its KV blocks come from: a request holds a page a
  group of linear layers (1 + k of them under speculative decoding of k tokens) beside
  its attention blocks, and nothing is set aside beforehand. Every page being one size,
  vLLM raises the attention block size until one attention layer's page holds one
  linear layer's state (:func:`sim.cost.memory.state_block_size`): 784 tokens for
  Qwen3.5-27B, where an attention model's block is 16.
- SGLang keeps them in a pool of their own, sized for the most requests that may run
  beside the KV pool (TensorRT-LLM's state manager likewise), and the block size stays.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sim.cost.memory import state_block_size
from sim.cost.shard import shard
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.config.scenario import Scenario

# Frameworks whose measured kernels imply a state pool of its own.
RESERVING = ("sglang", "trtllm")


def resolve_state_pool(scenario: Scenario) -> Scenario:
    """``scenario`` with ``serving.linear_state_pool`` decided (unset: ``reserved`` under
    SGLang's or TensorRT-LLM's measured kernels, else vLLM's ``kv_cache``) and, for
    ``kv_cache``, ``serving.block_size`` raised as vLLM raises it, with a note saying
    so. A model without linear-attention layers is returned as it is; the key given for
    one is an error naming it."""
    model, sv = scenario.model, scenario.serving
    if not model.linear_layers:
        if sv.linear_state_pool is not None:
            raise ServesimError(f"got {sv.linear_state_pool!r}, but model {model.name} has no "
                                "linear-attention (Gated DeltaNet) layers, whose states the "
                                "key places; leave it out", where="serving.linear_state_pool")
        return scenario
    kind = sv.linear_state_pool
    if kind is None:
        measured = scenario.cost.measured
        kind = ("reserved" if measured is not None and measured.framework in RESERVING
                else "kv_cache")
    serving = dataclasses.replace(sv, linear_state_pool=kind)
    notes: tuple[str, ...] = ()
    if kind == "kv_cache":
        tp = scenario.hardware.tp
        try:
            d = shard(model, tp)
        except ServesimError as exc:
            raise exc.located(prefix="hardware") from None
        size = state_block_size(model, tp, sv.block_size)
        if size != sv.block_size:
            serving = dataclasses.replace(serving, block_size=size)
            notes = (f"serving.block_size: {sv.block_size} -> {size} tokens, as vLLM raises "
                     f"it for model {model.name}: a page of one attention layer's KV must "
                     f"hold one Gated DeltaNet layer's state "
                     f"({d.linear_state_bytes // d.linear_layers:,} bytes on each GPU), "
                     "whose pages a running request takes from the same pool "
                     "(serving.linear_state_pool: kv_cache)",)
    return dataclasses.replace(scenario, serving=serving, notes=scenario.notes + notes)
