"""Paged KV-cache sizing: how many blocks a replica has.

:func:`memory_budget` sizes the cache as vLLM does, term by term, from the GPU's
reported memory. Who holds the blocks is :class:`sim.core.kvmanager.KVCacheManager`'s
business.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.cost.gpus import GPUSpec
from sim.cost.pipeline import stage_layers
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.cost.vllmmemory import DEFAULT_VERSION, MemoryRules, memory_rules
from sim.errors import ServesimError


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``tokens`` tokens (ceil division)."""
    return -(-tokens // block_size)


# --- KV capacity as vLLM sizes it -----------------------------------------------------
#
# vLLM (V1 engine, gpu_worker.determine_available_memory) loads the weights, runs one
# profiling forward pass at max_num_batched_tokens and a sampler pass at max_num_seqs,
# and gives the KV cache what is left of total × gpu_memory_utilization:
#   kv = total·u − weights − torch peak increase − non-torch increase − CUDA-graph estimate
# per GPU; blocks = kv // (per-GPU KV bytes per token × block_size). The constants below
# come from vLLM's own logs (docs/model.md lists them; tests/test_memory.py checks the
# formulas against them).

GIB = 2**30

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


@dataclass(frozen=True)
class MemoryBudget:
    """One GPU of a replica, as vLLM divides its memory (bytes unless stated).

    ``kv`` = ``total``·``utilization`` − ``weights`` − ``activation`` − ``non_torch`` −
    ``cuda_graph`` (negative when the model does not fit); ``blocks`` = ``kv`` //
    ``block_bytes`` (0 when it does not), ``block_bytes`` a block's per-GPU KV bytes.
    """

    model: str
    gpu: str
    tp: int
    total: int
    utilization: float
    weights: int
    activation: int
    non_torch: int
    cuda_graph: int
    block_size: int
    block_bytes: int
    # Pipeline parallelism: the replica's stages, and which stage's GPU this is (the
    # one with the fewest KV blocks, which sets the replica's count).
    pp: int = 1
    stage: int = 0
    # A model with full and sliding-window layers (gpt-oss): the blocks hold the full
    # layers' KV (their groups, as vLLM pads them: hybrid_groups), and each request also
    # holds its window's blocks of the sliding layers from the same pool, at most
    # ``window_blocks`` (sim.core.kvmanager.KVCacheManager); 0 for any other model.
    window_blocks: int = 0
    # The sliding layers' groups over the full layers' (a block of the pool holds one
    # group; the manager's blocks hold all full groups): a window costs this share.
    window_groups: tuple[int, int] = (1, 1)
    ep: int = 1  # expert parallelism: routed experts dealt out whole, E/ep a GPU
    # Data-parallel attention ranks sharing those experts (each rank's blocks are its own).
    dp: int = 1
    # Gated DeltaNet layers' states, set aside before the blocks are counted for
    # ``state_seqs`` sequences, the most that may run at once (see linear_state_seqs).
    linear_state: int = 0
    state_seqs: int = 0
    # States a sequence holds: 1, or 1 + k under speculative decoding of k tokens, where
    # a verify keeps the state after each of its k + 1 positions (reserve_states).
    state_copies: int = 1
    # vLLM's pool instead (kv_pool_states): the states are pages of the KV blocks' pool,
    # (groups of linear layers, full-attention groups), a block holding every full group.
    state_groups: tuple[int, int] = (0, 1)
    # Whose profile set the activation and CUDA-graph terms, in words (sim.cost.vllmmemory).
    rules: str = ""
    # The rotary cos/sin table's bytes within ``weights`` and its positions: every GPU
    # keeps it whole (rotary_table_bytes), so more GPUs do not shrink it.
    rotary: int = 0
    rotary_positions: int = 0

    @property
    def budget(self) -> float:
        """Bytes vLLM may use on the GPU: ``total × utilization``."""
        return self.total * self.utilization

    @property
    def kv(self) -> float:
        """Bytes left for the KV cache on one GPU (negative when the model does not fit)."""
        kv = self.budget - self.weights - self.activation - self.non_torch - self.cuda_graph
        return kv - self.linear_state

    @property
    def blocks(self) -> int:
        """KV blocks the replica holds (every GPU holds its shard of every block)."""
        return int(self.kv // self.block_bytes) if self.kv > 0 else 0

    @property
    def kv_tokens(self) -> int:
        """Tokens those blocks hold."""
        return self.blocks * self.block_size

    @property
    def state_blocks(self) -> int:
        """Blocks one running request's Gated DeltaNet states take from the KV pool under
        vLLM's rules (0 when they are set aside beforehand, or without such layers): a
        page a group of linear layers for each of its ``state_copies`` states, rounded
        up to blocks of the full groups' pages (:func:`kv_pool_states`)."""
        linear, full = self.state_groups
        return -(-linear * self.state_copies // full)

    @property
    def groups_per_block(self) -> int:
        """Blocks of vLLM's pool (one page of each layer of one group) in one of the
        manager's blocks, which hold every full-attention group: a count vLLM gives in
        its blocks (--num-gpu-blocks-override) divides by this. 1 for a model whose
        layers all attend in full."""
        return self.window_groups[1] * self.state_groups[1]

    @property
    def snapshot_blocks(self) -> int:
        """Blocks one kept state snapshot takes under vLLM's rules (a page a group of
        linear layers; 0 without such layers or with the states set aside): what a
        prefix cache keeps where a step ends on the block grid."""
        linear, full = self.state_groups
        return -(-linear // full)

    @property
    def window_request_blocks(self) -> int:
        """The most blocks one request's sliding-window layers hold (0 without them)."""
        return window_share(self.window_blocks, self.window_groups, self.window_blocks)

    def fitted(self) -> MemoryBudget:
        """This budget, or a :class:`ServesimError` with every term if not one block fits."""
        if self.blocks >= 1:
            return self

        def g(x: float) -> str:
            return f"{x / GIB:.2f}"

        where = f"tp={self.tp}" if self.pp == 1 else (
            f"tp={self.tp} and pp={self.pp} (stage {self.stage})")
        if self.dp > 1:
            where += f", dp={self.dp}"
        if self.ep > 1:
            where += f" and ep={self.ep}"
        raise ServesimError(
            f"model {self.model} does not fit on {self.gpu} with {where}: per GPU "
            f"{g(self.total)} GiB x memory_utilization {self.utilization} = {g(self.budget)} GiB"
            f", less weights {g(self.weights)}, activation {g(self.activation)}, non-torch "
            f"{g(self.non_torch)}, CUDA graphs {g(self.cuda_graph)} GiB, "
            + (f"linear-attention states {g(self.linear_state)} GiB, " if self.linear_state
               else "")
            + f"leaves "
            f"{g(self.kv)} GiB, under one KV block ({self.block_bytes} bytes); "
            + (self._rotary_advice() or (
               f"the weights alone take more than the {g(self.budget)} GiB: raise tp (or pp, "
               "ep) or memory_utilization, or choose a larger GPU"
               if self.weights + self.non_torch >= self.budget else
               "raise tp or memory_utilization, lower serving.max_num_seqs or "
               "max_num_batched_tokens (the activation and CUDA-graph terms grow with "
               "them), or choose a larger GPU")),
            where="hardware")

    def _rotary_advice(self) -> str:
        """What to change when the rotary table is what does not fit (one block would
        fit without it): its positions and size, and a shorter context; else ""."""
        if not self.rotary or dataclasses.replace(
                self, weights=self.weights - self.rotary).blocks < 1:
            return ""
        return (f"of the weights, the rotary cos/sin table of {self.rotary_positions:,} "
                f"positions takes {self.rotary / GIB:.2f} GiB, which every GPU keeps whole "
                "(more GPUs do not shrink it): give a shorter context (model.max_context, "
                "or a smaller max_position_embeddings or RoPE factor in hf_overrides)")

    def override(self, blocks: int, key: str, running: int = 0) -> str | None:
        """Check vLLM's --num-gpu-blocks-override: ``blocks`` blocks (of ``block_bytes``
        bytes a GPU), which vLLM allocates whatever its budget, beside the Gated DeltaNet
        states of the ``running`` sequences that may run (a model with such layers: each
        holds ``state_copies`` states the whole time it runs). More than the GPU's memory
        less the weights and those states cannot be allocated by any server: a
        :class:`ServesimError` naming ``key`` with the numbers. More than the GPU holds
        after servesim's estimates of the other terms too (activation, non-torch, CUDA
        graphs, at utilization 1), or only more than ``memory_utilization`` leaves: the
        note returned (the estimates are vLLM's, and a framework sizing its own cache, as
        the ``--silicon`` rows do, subtracts its own); else None."""
        per_seq = self.linear_state // self.state_seqs if self.state_seqs else 0
        held = dataclasses.replace(self, linear_state=per_seq * running) if per_seq else self
        need = blocks * self.block_bytes
        if need <= held.kv:
            return None
        said = f"{blocks} blocks of {self.block_bytes} bytes, {need / GIB:.2f} GiB per GPU"
        states = held.linear_state
        free = self.total - self.weights - states
        if need > free:
            beside = (f" and the linear-attention states of {running} sequences "
                      f"(serving.max_num_seqs) at {per_seq / GIB:.3f} GiB each, "
                      f"{states / GIB:.2f} GiB" if states else "")
            raise ServesimError(
                f"got {said}, more than the {max(0.0, free) / GIB:.2f} GiB {self.gpu} has "
                f"beside the weights{beside} ({self.total / GIB:.2f} GiB less "
                f"{self.weights / GIB:.2f}" + (f" and {states / GIB:.2f}" if states else "")
                + "), so no server could allocate them; give at most "
                f"{max(0, int(free // self.block_bytes))} blocks"
                + (", or lower serving.max_num_seqs" if states else "")
                + ", or leave it out to size the cache from memory", where=key)
        device = dataclasses.replace(held, utilization=1.0)
        if need > device.kv:
            return (f"{key}: {said}, more than the {max(0.0, device.kv) / GIB:.2f} GiB "
                    f"{self.gpu} has for the KV cache after weights {self.weights / GIB:.2f}, "
                    f"activation {self.activation / GIB:.2f}, non-torch "
                    f"{self.non_torch / GIB:.2f} and CUDA graphs {self.cuda_graph / GIB:.2f} "
                    + (f"and linear-attention states {states / GIB:.2f} " if states else "")
                    + "GiB (vLLM's terms as servesim estimates them): vLLM would likely fail "
                    "to allocate them at start-up; the run simulates them all")
        return (f"{key}: {said}, more than the {max(0.0, held.kv) / GIB:.2f} GiB "
                f"memory_utilization {self.utilization:g} leaves ({held.blocks} blocks); they "
                "fit the GPU's memory, so vLLM allocates them and the run simulates them all")

    def summary(self, blocks: int | None = None) -> dict[str, Any]:
        """The terms in GiB, and the replica's KV blocks and tokens (``blocks`` when a
        ``num_gpu_blocks`` override sets them; then ``kv_gib`` is what those blocks take)."""
        n = self.blocks if blocks is None else blocks
        kv = self.kv if blocks is None else n * self.block_bytes
        stage = {} if self.pp == 1 else {"pp": self.pp, "stage": self.stage}
        # Recurrent states are set aside before the blocks; sliding windows come out of
        # them, a request's at most this many blocks.
        reserved = ({"window_blocks_per_request": self.window_request_blocks}
                    if self.window_blocks else
                    {"linear_state_gib": self.linear_state / GIB,
                     "linear_state_seqs": self.state_seqs,
                     **({"linear_state_copies": self.state_copies}
                        if self.state_copies > 1 else {})} if self.state_seqs else
                    {"linear_state_blocks_per_request": self.state_blocks,
                     **({"linear_state_copies": self.state_copies}
                        if self.state_copies > 1 else {})} if self.state_groups[0] else {})
        if self.ep > 1:
            stage = {"ep": self.ep, **stage}
        if self.dp > 1:
            stage = {"dp": self.dp, **stage}
        return {**stage, "total_gib": self.total / GIB, "utilization": self.utilization,
                "weights_gib": self.weights / GIB, "activation_gib": self.activation / GIB,
                "non_torch_gib": self.non_torch / GIB, "cuda_graph_gib": self.cuda_graph / GIB,
                **reserved,
                "kv_gib": kv / GIB, "kv_blocks": n, "kv_tokens": n * self.block_size,
                "kv_blocks_from": "memory" if blocks is None else "num_gpu_blocks",
                **({"sized": self.rules} if self.rules and blocks is None else {})}


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
    """Every term of one GPU's memory and the replica's KV blocks (see :class:`MemoryBudget`
    and the constants above); call :meth:`MemoryBudget.fitted` to require one block.
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
    vLLM's raised one, :func:`state_block_size`), else set aside beforehand for the most
    sequences that may run (:func:`reserve_states`, SGLang's and TensorRT-LLM's way).
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


def window_share(window_blocks: int, window_groups: tuple[int, int], blocks: int) -> int:
    """Blocks (of the full-attention groups' pages) the sliding-window layers of a request
    whose full layers span ``blocks`` blocks hold: a page a sliding group for each block
    up to the window's ``window_blocks``, ``window_groups`` = (sliding groups, full
    groups) pages to a block, rounded up (:func:`hybrid_groups`)."""
    sliding, full = window_groups
    return -(-sliding * min(window_blocks, blocks) // full)


def hybrid_groups(full_layers: int, sliding_layers: int,
                  ratio: float = 1.5) -> tuple[int, int, int]:
    """(layers a group, full groups, sliding groups) of a model with both kinds of
    attention layer, as vLLM V1's hybrid KV-cache manager groups them.

    Every group holds the same number of layers, so one pool of equal pages serves
    them all; a page holds one group's KV of ``block_size`` tokens. The group size is
    the smaller layer count (the "1" of an n:1 pattern), or the larger when the two
    counts are less than ``ratio`` apart (:attr:`sim.cost.vllmmemory.MemoryRules.
    group_ratio`: 1.5 from vLLM 0.18, 1.25 from 0.12, never in 0.11), the last group of
    a kind padded with empty layers (kv_cache_utils, _get_kv_cache_groups_uniform_page_
    size). gpt-oss (18 + 18 layers, or 12 + 12): one group of each kind.

    A request's tokens then take, from the one pool, a page a block of tokens in each
    full group and, in each sliding group, only the pages its window covers: at most
    ceil(W / block_size) + 1, as SlidingWindowManager frees those that fall behind."""
    size = min(full_layers, sliding_layers)
    most = max(full_layers, sliding_layers)
    if most < ratio * size:
        size = most
    return size, -(-full_layers // size), -(-sliding_layers // size)


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


def state_block_size(model: ModelSpec, tp: int, align: int, spec_tokens: int = 0) -> int:
    """Tokens of a KV block of a model with Gated DeltaNet layers on ``tp`` GPUs under
    vLLM: the fewest, a multiple of ``align`` (the attention kernel's block multiple, 16,
    or a larger --block-size), whose page of one attention layer (block × the layer's KV
    bytes a token on one GPU) holds one linear layer's state (its recurrent matrices,
    fp32 unless the checkpoint says otherwise, and its convolution window). vLLM raises
    the block size so to give every layer one page size (its platform's hybrid block
    alignment; Qwen3.5-27B: 784 tokens at any tp, its state 3,207,168 bytes against
    4,096 a token on one GPU), and pads the state's page to the attention page. Under
    speculative decoding of ``spec_tokens`` tokens the convolution window keeps that many
    inputs more (vLLM's Gated DeltaNet state shape takes them), so the page may grow: 800
    tokens for Qwen3.5-27B drafting 2."""
    d = shard(model, tp)
    token = d.kv_bytes_per_token // d.attention_layers
    return align * -(-layer_state_bytes(model, tp, spec_tokens) // (align * token))


def layer_state_bytes(model: ModelSpec, tp: int, spec_tokens: int = 0) -> int:
    """One Gated DeltaNet layer's state of one sequence on one of ``tp`` GPUs (bytes), as
    vLLM shapes it: the recurrent matrices and the convolution window, which keeps
    ``spec_tokens`` more inputs under speculative decoding."""
    d = shard(model, tp)
    return d.linear_state_bytes // d.linear_layers + d.linear_conv_dim * spec_tokens * d.act_bytes


def kv_pool_states(budget: MemoryBudget, model: ModelSpec, ratio: float) -> MemoryBudget:
    """``budget`` with the Gated DeltaNet states taken from the KV pool as vLLM's hybrid
    KV-cache manager takes them: layers grouped as for sliding windows
    (:func:`hybrid_groups`; Qwen3.5's 3:1 pattern makes one full-attention group and
    three linear ones), one pool of equal pages, a running request holding a block a
    ``block_size`` tokens in the full groups and one page a linear group for each
    state it keeps (:attr:`MemoryBudget.state_blocks`). Nothing is set aside, and no
    cap on the running requests follows: the pool bounds them."""
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
