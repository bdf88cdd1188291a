"""Paged KV-cache sizing: how many blocks a replica has.

:func:`memory_budget` sizes the cache as vLLM does, term by term, from the GPU's
reported memory, into a :class:`sim.cost.memorybudget.MemoryBudget`; how its pages map
to layers and states is :mod:`sim.cost.kvpages`'s, and who holds the blocks is
:class:`sim.core.kvmanager.KVCacheManager`'s business.
"""

from __future__ import annotations

import dataclasses

from sim.cost.gpus import GPUSpec
from sim.cost.kvpages import blocks_for, hybrid_groups
from sim.cost.memorybudget import GIB, MemoryBudget
from sim.cost.pipeline import stage_layers
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.cost.vllmmemory import DEFAULT_VERSION, MemoryRules, memory_rules

# --- KV capacity as vLLM sizes it -----------------------------------------------------
#
# vLLM (V1 engine, gpu_worker.determine_available_memory) loads the weights, runs one
# profiling forward pass at max_num_batched_tokens and a sampler pass at max_num_seqs,
# and gives the KV cache what is left of total × gpu_memory_utilization:
#   kv = total·u − weights − torch peak increase − non-torch increase − CUDA-graph estimate
# per GPU; blocks = kv // (per-GPU KV bytes per token × block_size). The constants below
# come from vLLM's own logs (docs/model.md lists them; tests/test_memory.py checks the
# formulas against them).

# Non-torch memory the instance adds while it profiles: CUDA kernels loaded on first use
# and library workspaces. 0.16 GiB on one H100 (vLLM PR 12126: "non_torch_memory takes
# 0.16GiB"). vLLM V1 measures it over a snapshot taken once the CUDA context exists, so
# the context itself stays in the 1 − utilization headroom.
NON_TORCH_BYTES = int(0.16 * GIB)

# What tensor parallelism adds to it. Since vLLM 0.11 (PR 25359) the NCCL communicators
# and the custom all-reduce's buffers are set up before the baseline snapshot, outside
# the budget (sim.cost.vllmmemory); what the profiling pass still adds is the channels
# NCCL connects on its first collectives. 0.41 GiB: the difference between the tp=2 and
# tp=1 "non-torch forward increase memory" of vLLM 0.11 logs on H100 (llm-d-benchmark's
# table of them, config_explorer/empirical-vllm-memory-results.md: 0.54 and 0.55 GiB for
# Qwen3-32B and Llama-3.3-70B-FP8 at tp 2, 0.13 and 0.14 at tp 1). It had been 1.79 GiB,
# from a vLLM 0.6 log (PR 10511) taken before that change. No public log gives the figure
# at tp 4 or 8; ring communicators keep two neighbours whatever the size, so the tp=2
# figure is used for every tp > 1.
NON_TORCH_TP_BYTES = int(0.41 * GIB)

# vLLM's estimate of the CUDA-graph pool (one graph per captured batch size), subtracted
# before sizing the KV cache since v0.21.0 by the V1 model runner (sim.cost.vllmmemory:
# Model Runner V2 estimates none up to 0.28; before 0.21 the graphs are captured
# afterwards, inside the 1 − utilization headroom). 0.73 GiB: "Estimated CUDA graph
# memory: 0.73 GiB total" for the default capture set (51 piecewise sizes up to 512, 35
# full ones up to 256) in vllm-project/vllm PR 39559's log; the pool is mostly per-graph
# overhead, so it barely depends on the model.
CUDA_GRAPH_BYTES = int(0.73 * GIB)
# The most of the KV room a hybrid model's recurrent states take when not every
# max_num_seqs sequence's fits: SGLang's default split, r / (1 + r) of it for
# --mamba-full-memory-ratio r = 0.9 (its model runner's handle_max_mamba_cache).
STATE_SHARE = 0.9 / 1.9


def weight_bytes(model: ModelSpec, tp: int, ep: int = 1, dp: int = 1) -> int:
    """Bytes vLLM's "Model loading took" counts on one GPU: the shard's weights
    (:attr:`sim.cost.shard.Shard.weight_bytes`) plus the rotary cos/sin table, max_context ×
    rotary_dim elements (the head size; with MLA the rotary key's) at the activations'
    dtype, which every GPU keeps whole. The table is why
    Llama-3.1-8B (131,072 positions) loads 14.99 GiB where Llama-3-8B (8,192) loads 14.96.
    ``ep``: expert parallelism, over ``dp`` data-parallel attention ranks
    (:func:`sim.cost.shard.expert_shard`)."""
    d = shard(model, tp, ep=ep, dp=dp)
    return d.weight_bytes + rotary_table_bytes(model)


def rotary_table_bytes(model: ModelSpec) -> int:
    """Bytes of the rotary cos/sin table one GPU keeps: ``max_context`` positions ×
    ``rotary_dim`` elements at the activations' dtype, whole on every GPU."""
    return model.max_context * model.rotary_dim * model.act_bytes


def stage_weight_bytes(model: ModelSpec, tp: int, pp: int, k: int, ep: int = 1) -> int:
    """Bytes of weights one GPU of pipeline stage ``k`` (of ``pp``) holds: its layers'
    share of :func:`weight_bytes`' shard (their projections, biases, norms and MoE
    routers; a MoE model's dense layers are its first), the embedding on the first
    stage, the final norm and LM head on the last (a tied model's too: the last stage
    keeps its own copy of the table), and the rotary table on every stage."""
    d = shard(model, tp, ep=ep)
    layers = stage_layers(model.layers, pp)
    start = sum(layers[:k])
    dense = max(0, min(model.dense_layers, start + layers[k]) - start)
    part = dataclasses.replace(d, layers=layers[k], dense_layers=dense)
    table = d.vocab * d.hidden
    whole = (1 if d.tie_embeddings else 2) * table + d.hidden  # tables and final norm
    last = k == pp - 1
    own = table * ((k == 0) + last) + d.hidden * last
    params = part.params - whole + own
    linear = part.stack_params
    rotary = rotary_table_bytes(model)
    return (part.stack_bytes(d.dtype_bytes, d.expert_dtype_bytes, d.qkv_dtype_bytes)
            + (params - linear) * d.act_bytes + rotary)


def activation_bytes(model: ModelSpec, tp: int, max_num_batched_tokens: int,
                     max_num_seqs: int, sampler: bool = True, ep: int = 1, dp: int = 1,
                     rules: MemoryRules | None = None) -> int:
    """Peak bytes of one GPU's profiling pass above the weights (torch's peak increase).

    With T = ``max_num_batched_tokens``, S = min(``max_num_seqs``, T), a the activation
    element size (2 bytes; 4 for fp32 models), h hidden, and per-GPU heads Hq, KV heads
    Hkv, head size d, MLP width I (all from :func:`sim.cost.shard.shard`; in a mixture
    of experts, the experts per token times the expert width, when that is wider):

    - layers: T·a·max(3h + 3I, 3h + 2(Hq + Hkv)d). In the MLP the residual, the normed
      input and the output (h each) are alive with the gate/up product (2I) and its
      activation (I); in attention, with QKV ((Hq + 2Hkv)d) and the attention output (Hq·d).
      Checked against vLLM issue 10517's Llama-3.1-8B logs (2.07 and 2.99 GiB at 20,000
      and 29,000 tokens, where the layers peak; the formula gives 2.06 and 2.99 GiB).
    - sampler: T·h·a (the last hidden states, still held) + S·V·b for logits of S
      sequences over the whole padded vocabulary V (gathered from every GPU), b the bytes
      a logit holds at the sampler's peak in the ``rules``' release
      (:meth:`sim.cost.vllmmemory.MemoryRules.sampler_bytes_per_logit`: 39 where top-k
      and top-p sort the logits, fitted to vLLM PR 10511's Llama-3-8B log on an H100, an
      activation peak of 1.26 GiB at 8192 tokens and 256 sequences).

    The peak is the larger of the two, because the layers' temporaries are freed before
    the sampler runs. ``sampler=False``: a pipeline stage before the last, which runs
    no sampler. Under expert parallelism (``ep`` > 1) the experts' width is the whole
    expert's: a GPU's fused MoE kernel keeps every token's k intermediates of its own,
    unsliced experts. With ``dp`` data-parallel attention ranks the experts see every
    rank's tokens, but vLLM runs them through the MoE layer in chunks of a few hundred
    tokens a rank (``VLLM_MOE_DP_CHUNK_SIZE``), so the peak stays one rank's.
    """
    if rules is None:
        rules = memory_rules(DEFAULT_VERSION, model)
    d = shard(model, tp, ep=ep, dp=dp)
    a = model.act_bytes
    h = d.hidden
    # A token in a mixture of experts runs k (+ shared) experts' intermediates at once.
    width = d.intermediate if not d.experts or d.dense_layers else 0
    if d.experts:
        width = max(width, (d.experts_per_token + d.shared_experts) * d.expert_intermediate)
    mlp = 3 * h + 3 * width
    attention = 3 * h + 2 * (d.heads + d.kv_heads) * d.head_dim
    layers = max_num_batched_tokens * a * max(mlp, attention)
    if not sampler:
        return layers
    seqs = min(max_num_seqs, max_num_batched_tokens)
    sampling = (max_num_batched_tokens * h * a
                + seqs * d.vocab * d.tp * rules.sampler_bytes_per_logit(tp))
    return int(max(layers, sampling))


def memory_budget(model: ModelSpec, gpu: GPUSpec, tp: int, memory_utilization: float,
                  block_size: int, max_num_batched_tokens: int, max_num_seqs: int,
                  pp: int = 1, ep: int = 1, dp: int = 1,
                  rules: MemoryRules | None = None, hybrid: bool = True,
                  shared_states: bool = False, graphs: bool = True) -> MemoryBudget:
    """Every term of one GPU's memory and the replica's KV blocks (see
    :class:`~sim.cost.memorybudget.MemoryBudget` and the constants above); call
    :meth:`MemoryBudget.fitted` to require one block.
    With ``pp`` > 1 stages, the budget of the stage with the fewest KV blocks (vLLM
    sizes every stage's cache to the smallest: :func:`stage_budget`). ``ep`` > 1:
    expert parallelism (:func:`sim.cost.shard.expert_shard`), over ``dp`` data-parallel
    attention ranks (each holding the whole attention and its own KV blocks, which
    ``blocks`` then counts: one rank's). ``rules``: the vLLM release whose profile sets
    the activation and CUDA-graph terms (:mod:`sim.cost.vllmmemory`; default
    :data:`~sim.cost.vllmmemory.DEFAULT_VERSION`'s). ``hybrid=False``: vLLM's
    hybrid KV-cache manager turned off, so sliding-window layers keep every token's KV
    in every block. ``shared_states``: a model's Gated DeltaNet states are pages of the
    KV pool, as vLLM keeps them (:func:`kv_pool_states`; ``block_size`` then already
    vLLM's raised one, :func:`sim.cost.kvpages.state_block_size`), else set aside
    beforehand for the most sequences that may run (:func:`reserve_states`, SGLang's and
    TensorRT-LLM's way).
    ``graphs=False``: the server captures no CUDA graph (vLLM's ``--enforce-eager``), so
    no graph estimate is set aside."""
    if rules is None:
        rules = memory_rules(DEFAULT_VERSION, model)
    if pp > 1:
        stages = [stage_budget(model, gpu, tp, memory_utilization, block_size,
                               max_num_batched_tokens, max_num_seqs, pp, k, ep, rules, graphs)
                  for k in range(pp)]
        return min(stages, key=lambda b: (b.blocks, b.kv))
    d = shard(model, tp, ep=ep, dp=dp)
    budget = MemoryBudget(
        model=model.name, gpu=gpu.name, tp=tp, total=gpu.mem_bytes,
        utilization=memory_utilization, weights=weight_bytes(model, tp, ep, dp),
        activation=activation_bytes(model, tp, max_num_batched_tokens, max_num_seqs, ep=ep,
                                    dp=dp, rules=rules),
        # A GPU among others keeps communicators (tensor-parallel, or experts' dispatch).
        non_torch=NON_TORCH_BYTES + (NON_TORCH_TP_BYTES if tp * dp > 1 else 0),
        cuda_graph=CUDA_GRAPH_BYTES if rules.graph_estimate and graphs else 0,
        block_size=block_size,
        block_bytes=d.kv_bytes_per_token * block_size, ep=ep, dp=dp, rules=rules.phrase,
        rotary=rotary_table_bytes(model), rotary_positions=model.max_context)
    if model.linear_layers:
        if shared_states:
            return kv_pool_states(budget, model, rules.group_ratio)
        return reserve_states(budget, d.linear_state_bytes, max_num_seqs)
    if not (hybrid and model.sliding_layers and model.full_layers):
        return budget
    size, full, sliding = hybrid_groups(model.full_layers, model.sliding_layers,
                                        rules.group_ratio)
    layer = d.kv_bytes_per_token // d.layers
    return dataclasses.replace(
        budget, block_bytes=layer * full * size * block_size,
        window_blocks=blocks_for(model.sliding_window, block_size) + 1,
        window_groups=(sliding, full))


def linear_state_seqs(state_bytes: int, max_num_seqs: int, room: float) -> int:
    """Sequences whose Gated DeltaNet states one GPU sets aside room for, out of the
    ``room`` left for the KV cache: ``max_num_seqs``, or, when their states would take
    more than :data:`STATE_SHARE` of it, as many as that share holds, and at least 1: a
    GPU whose room holds less than one state and one KV block does not fit the model,
    and :meth:`MemoryBudget.fitted` says so with every term.

    A sequence's state (``state_bytes`` on one GPU: :attr:`sim.cost.shard.Shard.
    linear_state_bytes`) is fixed in size and held while it runs. SGLang keeps the states
    in a pool of their own beside the KV pool; vLLM V1 gives each running request one
    page a group of linear layers from the pool its KV blocks come from. servesim sets
    the states of the most sequences that may run aside beforehand and caps the running
    sequences at that count, so the KV manager's blocks hold the attention layers' KV
    only: exact where that many run, conservative for vLLM where fewer do."""
    if room <= 0:
        return 1
    return max(1, min(max_num_seqs, int(room * STATE_SHARE // state_bytes)))


def reserve_states(budget: MemoryBudget, state_bytes: int, max_num_seqs: int,
                   copies: int = 1) -> MemoryBudget:
    """``budget`` with the Gated DeltaNet states of the sequences that may run set aside
    (:func:`linear_state_seqs`) from the room its other terms leave (any states it set
    aside before given back first): ``copies`` states of ``state_bytes`` bytes (one
    GPU's, one state) a sequence.

    ``copies`` is 1 + k under speculative decoding of k tokens: vLLM gives each running
    request of a hybrid model 1 + k pages of linear-attention state then (its mamba
    spec's speculative blocks), since a verify writes the state after each of its k + 1
    positions so that a rejection can go back to the last accepted one."""
    per_seq = copies * state_bytes
    seqs = linear_state_seqs(per_seq, max_num_seqs, budget.kv + budget.linear_state)
    return dataclasses.replace(budget, linear_state=seqs * per_seq, state_seqs=seqs,
                               state_copies=copies)


def kv_pool_states(budget: MemoryBudget, model: ModelSpec, ratio: float) -> MemoryBudget:
    """``budget`` with the Gated DeltaNet states taken from the KV pool as vLLM's hybrid
    KV-cache manager takes them: layers grouped as for sliding windows
    (:func:`sim.cost.kvpages.hybrid_groups`; Qwen3.5's 3:1 pattern makes one
    full-attention group and three linear ones), one pool of equal pages, a running
    request holding a block a ``block_size`` tokens in the full groups and one page a
    linear group for each state it keeps (:attr:`MemoryBudget.state_blocks`). Nothing is
    set aside, and no cap on the running requests follows: the pool bounds them."""
    size, full, linear = hybrid_groups(model.full_layers, model.linear_layers, ratio)
    d = shard(model, budget.tp, ep=budget.ep, dp=budget.dp)
    layer = d.kv_bytes_per_token // d.attention_layers
    return dataclasses.replace(budget, block_bytes=layer * full * size * budget.block_size,
                               state_groups=(linear, full))


def stage_budget(model: ModelSpec, gpu: GPUSpec, tp: int, memory_utilization: float,
                 block_size: int, max_num_batched_tokens: int, max_num_seqs: int, pp: int,
                 k: int, ep: int = 1, rules: MemoryRules | None = None,
                 graphs: bool = True) -> MemoryBudget:
    """One GPU of pipeline stage ``k``: its own weights (:func:`stage_weight_bytes`), the
    layers' profiling peak (the sampler's only on the last stage), the non-torch memory
    with its communicators (NCCL's for the stage-to-stage sends as for tensor
    parallelism: no public log measures them apart) and KV blocks of its layers only."""
    if rules is None:
        rules = memory_rules(DEFAULT_VERSION, model)
    d = shard(model, tp, ep=ep)
    layers = stage_layers(model.layers, pp)[k]
    return MemoryBudget(
        model=model.name, gpu=gpu.name, tp=tp, total=gpu.mem_bytes,
        utilization=memory_utilization, weights=stage_weight_bytes(model, tp, pp, k, ep),
        activation=activation_bytes(model, tp, max_num_batched_tokens, max_num_seqs,
                                    sampler=k == pp - 1, ep=ep, rules=rules),
        non_torch=NON_TORCH_BYTES + NON_TORCH_TP_BYTES,
        cuda_graph=CUDA_GRAPH_BYTES if rules.graph_estimate and graphs else 0,
        block_size=block_size,
        block_bytes=d.kv_bytes_per_token // d.layers * layers * block_size, pp=pp, stage=k,
        ep=ep, rules=rules.phrase, rotary=rotary_table_bytes(model),
        rotary_positions=model.max_context)


def kv_capacity_blocks(model: ModelSpec, gpu: GPUSpec, tp: int, memory_utilization: float,
                       block_size: int, max_num_batched_tokens: int = 8192,
                       max_num_seqs: int = 256) -> int:
    """KV blocks one replica of ``tp`` GPUs holds; a model that does not fit is an error
    giving every term (:func:`memory_budget`)."""
    return memory_budget(model, gpu, tp, memory_utilization, block_size,
                         max_num_batched_tokens, max_num_seqs).fitted().blocks
