"""Where a hybrid model's Gated DeltaNet states live (``serving.linear_state_pool``), and
the KV block size that follows under vLLM.

A linear-attention layer keeps a fixed-size state a running request (its recurrent
matrices and convolution window), whatever the request's length. Two servers keep them
two ways:

- vLLM pages them from the one pool its KV blocks come from: a request holds a page a
  group of linear layers (1 + k of them under speculative decoding of k tokens) beside
  its attention blocks, and nothing is set aside beforehand. Every page being one size,
  vLLM raises the attention block size until one attention layer's page holds one
  linear layer's state (:func:`sim.cost.kvpages.state_block_size`): 784 tokens for
  Qwen3.5-27B, where an attention model's block is 16.
- SGLang keeps them in a pool of their own, sized for the most requests that may run
  beside the KV pool (TensorRT-LLM's state manager likewise), and the block size stays.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sim.config.gpu import GPUChoice, gpu_label, is_inline
from sim.cost.kvpages import layer_state_bytes, state_block_size
from sim.cost.shard import shard
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.config.serving import ServingConfig

# Frameworks whose measured kernels imply a state pool of its own.
RESERVING = ("sglang", "trtllm")
# Blackwell data-centre GPUs (compute capability 10.x), where vLLM aligns a hybrid
# model's raised block to 32 tokens, not 16, for attention heads of 256 under FlashInfer
# (its default there: FlashInfer does not run head size 256 with 16-token pages,
# flashinfer-ai/flashinfer#1993).
SM100 = ("b200", "b300", "gb200", "gb300")


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
            shard(model, tp)
        except ServesimError as exc:
            raise exc.located(prefix="hardware") from None
        spec = sv.speculative
        drafted = 0 if spec is None else spec.num_tokens
        align = sv.block_size
        if model.head_dim == 256 and is_table_gpu(scenario.hardware.gpu, SM100):
            align = max(align, 32)
        size = state_block_size(model, tp, align, drafted)
        if size != sv.block_size:
            try:
                serving = dataclasses.replace(serving, block_size=size)
            except ServesimError as exc:  # a token budget under the raised block
                raise ServesimError(f"{exc.message} (the block vLLM raises so a page holds "
                                    f"a Gated DeltaNet state of model {model.name})",
                                    where=f"serving.{exc.where}") from None
            state = layer_state_bytes(model, tp, drafted)
            notes = (f"serving.block_size: {sv.block_size} -> {size} tokens, as vLLM raises "
                     f"it for model {model.name}: a page of one attention layer's KV must "
                     f"hold one Gated DeltaNet layer's state ({state:,} bytes on each GPU), "
                     "whose pages a running request takes from the same pool "
                     "(serving.linear_state_pool: kv_cache)",)
    serving, said = _caching(serving, model.name)
    return dataclasses.replace(scenario, serving=serving, notes=scenario.notes + notes + said)


def _caching(sv: ServingConfig, model: str) -> tuple[ServingConfig, tuple[str, ...]]:
    """``sv`` with prefix caching decided for a model with linear-attention layers: as
    vLLM's align mode keeps it (states kept where a step ends on the block grid, prompt
    chunks cut there: sim.policies.chunked.grid_chunk), under policy chunked with the
    states paged from the KV pool and recompute preemption.
    Unset: off, with a note, as vLLM leaves it for these models unless asked (a
    maintainer's word in vllm-project/vllm#38988, 2026-05: "we disable it by default now";
    its PR #46778 calls it opt-in). True where it is not modelled, or with a
    long_prefill_token_threshold under one block (no chunk could end on the grid), an
    error naming the key."""
    why = ("policy chunked (vLLM v1's scheduler, which its align mode needs)"
           if sv.policy != "chunked" else
           "serving.linear_state_pool kv_cache (SGLang's state cache is not modelled)"
           if sv.linear_state_pool != "kv_cache" else
           "recompute preemption" if sv.preemption != "recompute" else "")
    said: tuple[str, ...] = ()
    if sv.prefix_caching is None:
        # vLLM leaves it off for hybrid models unless asked (its own default).
        try:  # (a host tier is refused with these layers after: check_linear_attention)
            sv = dataclasses.replace(sv, prefix_caching=False)
        except ServesimError as exc:
            raise exc.located(prefix="serving") from None
        said = (f"prefix caching is off: vLLM leaves it off for a model with linear-attention "
                f"layers ({model}) unless --enable-prefix-caching asks for it "
                "(serving.prefix_caching: true, "
                + ("modelled as its align mode)" if not why else f"which servesim models "
                   f"with {why})"),)
    if sv.prefix_caching and why:
        raise ServesimError(f"prefix caching for model {model}'s linear-attention layers is "
                            f"modelled as vLLM's align mode keeps it, with {why}",
                            where="serving.prefix_caching")
    cap = sv.long_prefill_token_threshold
    if sv.prefix_caching and 0 < cap < sv.block_size:
        # (The step's budget is held to a block already: ServingConfig.)
        raise ServesimError(f"got {cap} under prefix caching of model {model}: vLLM's align "
                            f"mode ends a prompt's chunks on its {sv.block_size}-token "
                            "blocks, so no chunk capped below one could ever run; give at "
                            f"least {sv.block_size} (or 0), or turn prefix caching off",
                            where="serving.long_prefill_token_threshold")
    return sv, said


def is_table_gpu(choice: GPUChoice, names: tuple[str, ...]) -> bool:
    """Whether the scenario's GPU is one of the table GPUs ``names`` (an inline GPU never
    is: its compute capability is not described)."""
    return not is_inline(choice) and gpu_label(choice) in names
