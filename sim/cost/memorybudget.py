"""One GPU's memory, term by term, and the KV blocks the rest holds.

:class:`MemoryBudget` records what :func:`sim.cost.memory.memory_budget` computed (the
device's reported memory, the utilisation, the weights, the profiling peak, non-torch
memory, the CUDA-graph estimate, linear-attention states set aside) and answers what
follows from them: the KV bytes and blocks, whether the model fits (an error giving every
term when it does not), whether a user's block count fits, and the summary a run reports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.cost.kvpages import window_share
from sim.errors import ServesimError

GIB = 2**30


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
    # layers' KV (their groups, as vLLM pads them: sim.cost.kvpages.hybrid_groups), and
    # each request also holds its window's blocks of the sliding layers from the same
    # pool, at most ``window_blocks`` (sim.core.kvmanager.KVCacheManager); 0 for any
    # other model.
    window_blocks: int = 0
    # The sliding layers' groups over the full layers' (a block of the pool holds one
    # group; the manager's blocks hold all full groups): a window costs this share.
    window_groups: tuple[int, int] = (1, 1)
    ep: int = 1  # expert parallelism: routed experts dealt out whole, E/ep a GPU
    # Data-parallel attention ranks sharing those experts (each rank's blocks are its own).
    dp: int = 1
    # Gated DeltaNet layers' states, set aside before the blocks are counted for
    # ``state_seqs`` sequences, the most that may run at once (see
    # sim.cost.memory.linear_state_seqs).
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
    # A speculative drafter's weights within ``weights`` and its name in words (a draft
    # model's preset, or the method's heads): named when the model does not fit.
    draft_weights: int = 0
    drafter: str = ""

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
        up to blocks of the full groups' pages (:func:`sim.cost.memory.kv_pool_states`)."""
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
            f", less weights {g(self.weights)}"
            + (f" ({g(self.draft_weights)} of them the drafter's, {self.drafter})"
               if self.draft_weights else "")
            + f", activation {g(self.activation)}, non-torch "
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

    def override(self, blocks: int, key: str, running: int = 0,
                 given_bytes: int | None = None) -> str | None:
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
        # A size given in bytes (--kv-cache-memory-bytes) is spoken of in bytes.
        said = (f"{given_bytes:,} bytes, {given_bytes / GIB:.2f} GiB per GPU" if given_bytes
                else f"{blocks} blocks of {self.block_bytes} bytes, {need / GIB:.2f} GiB per GPU")
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
                + (f"{max(0, int(free // self.block_bytes)) * self.block_bytes:,} bytes"
                   if given_bytes else f"{max(0, int(free // self.block_bytes))} blocks")
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
