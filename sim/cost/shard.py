"""One GPU's share of a model under tensor and expert parallelism: :func:`shard` (the one
sharding function, for the simulator's KV capacity, cost and transfers and for
calibration alike), :func:`expert_shard`, and the all-reduce a layer-wide query/key norm
adds under tensor parallelism (:func:`qk_norm_allreduces`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.cost.dtypes import DTYPE_BYTES
from sim.cost.projections import Projections
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# vLLM pads the vocabulary of its embedding and LM head to a multiple of this before
# splitting it over the tensor-parallel GPUs (VocabParallelEmbedding's padding size).
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Shard(Projections):
    """Per-GPU dimensions (elements) of one tensor-parallel shard of a model, as vLLM
    splits it (Megatron style): query heads, MLP width and the padded vocabulary divided
    by ``tp``; KV heads divided, or replicated when there are fewer than ``tp`` of them;
    hidden size, layer count and norms whole on every GPU."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    qkv_bias: bool
    rope_theta: float
    tp: int = 1
    layers: int = 1
    dtype_bytes: float = 2
    tie_embeddings: bool = False
    act_bytes: int = 2
    kv_bytes: int = 2
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0  # this GPU's share of each expert's width
    shared_experts: int = 0
    dense_layers: int = 0
    expert_dtype_bytes: float = 2
    qkv_dtype_bytes: float = 2  # the query, key and value projections' (per weight)
    sliding_window: int = 0
    sliding_layers: int = 0
    attention_sinks: bool = False
    # Expert parallelism: ``experts`` is then this GPU's E/ep whole routed experts and
    # ``expert_intermediate`` their whole width; shared experts stay tensor-parallel.
    ep: int = 1

    @property
    def shared_expert_params(self) -> int:
        """Weights of one shared expert on this GPU: a tensor-parallel slice (vLLM keeps
        shared experts tensor-parallel under expert parallelism as well)."""
        if self.ep == 1:
            return self.expert_params
        return 3 * self.hidden * (self.expert_intermediate // self.tp)

    @property
    def stack_params(self) -> int:
        """As :attr:`Projections.stack_params`, with shared experts sliced under expert
        parallelism (elements)."""
        whole = Projections.stack_params.fget(self)  # type: ignore[attr-defined]
        if self.ep == 1:
            return int(whole)
        shared = self.moe_layers * self.shared_experts
        return int(whole) - shared * (self.expert_params - self.shared_expert_params)
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    index_topk: int = 0  # sparse attention's indexer: whole on every GPU
    index_n_heads: int = 0
    index_head_dim: int = 0
    # Gated DeltaNet layers: this GPU's key and value heads (their heads split by tp).
    linear_layers: int = 0
    linear_key_heads: int = 0
    linear_value_heads: int = 0
    linear_key_dim: int = 0
    linear_value_dim: int = 0
    linear_conv: int = 0
    attn_output_gate: bool = False
    state_bytes: int = 4  # per element of the recurrent state

    @property
    def linear_state_bytes(self) -> int:
        """Bytes of one sequence's Gated DeltaNet state on this GPU, all linear layers:
        its value heads' matrices and its channels' convolution window."""
        return self.linear_layers * (
            self.linear_value_heads * self.linear_key_dim * self.linear_value_dim
            * self.state_bytes + self.linear_conv_dim * (self.linear_conv - 1) * self.act_bytes)

    @property
    def params(self) -> int:
        """All weights (elements) one GPU holds: its share of every projection, QKV bias,
        attention sinks (one per query head), embedding and LM head (vocab-parallel), plus
        the replicated RMSNorm weights (with MLA, the latents' too) and MoE routers."""
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        norms = 2 * self.hidden + self.latent_norm_params
        tables = (1 if self.tie_embeddings else 2) * self.vocab * self.hidden
        router = self.moe_layers * self.hidden * self.experts * self.ep  # whole on each
        sinks = self.layers * self.heads if self.attention_sinks else 0
        return (self.stack_params + self.layers * (bias + norms) + router + tables + self.hidden
                + sinks)

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights one GPU holds: projections at ``dtype_bytes`` (experts at
        ``expert_dtype_bytes``, query/key/value projections at ``qkv_dtype_bytes``), QKV
        bias, sinks, norms, routers, embedding and LM head at ``act_bytes``."""
        return self.weights_bytes(self.params, self.dtype_bytes, self.expert_dtype_bytes,
                                  self.qkv_dtype_bytes, self.act_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies on one GPU, all attention layers (L):
        2·L·kv_heads·d·b with this GPU's (possibly replicated) KV heads and b =
        ``kv_bytes``; with MLA the whole latent, L·(``kv_lora_rank`` +
        ``qk_rope_head_dim``)·b, on every GPU, with sparse attention's indexer key
        beside it (:attr:`index_key_bytes`)."""
        if self.mla:
            return self.layers * (self.latent_dim * self.kv_bytes + self.index_key_bytes)
        return 2 * self.attention_layers * self.kv_heads * self.head_dim * self.kv_bytes


def shard(spec: ModelSpec, tp: int, where: str = "tp", ep: int = 1,
          ep_where: str = "ep", dp: int = 1) -> Shard:
    """Split ``spec`` over ``tp`` GPUs by vLLM's rules; an impossible split is a
    :class:`ServesimError` at key ``where`` naming the dimension and ``tp``.

    Query heads and the MLP width must divide by ``tp``; so must each expert's width in a
    mixture of experts, whose experts vLLM splits like dense MLPs (every GPU holds a
    slice of every expert; expert parallelism is not modelled). KV heads are split when they
    divide by ``tp`` and replicated when ``tp`` divides by them (each GPU then keeps one
    head, so ``tp / kv_heads`` GPUs hold copies of the same head); any other ratio is an
    error. The vocabulary is padded up to a multiple of :data:`VOCAB_PADDING` and split.

    Latent attention (MLA) splits its query heads (q_b, kv_b and the output projection
    by head) and keeps the latent whole: vLLM's ``ModelConfig.get_num_kv_heads`` gives
    one KV head per GPU for an MLA model ("during decode it becomes MQA") of
    ``kv_lora_rank + qk_rope_head_dim`` elements, so every GPU caches every token's
    whole latent, whatever ``tp``; q_a and kv_a are replicated linears.
    ``ep`` > 1 is vLLM's ``--enable-expert-parallel`` (:func:`expert_shard`): each GPU
    holds E/ep routed experts whole instead of a slice of every one, ep being tp, or
    dp × tp under ``dp`` data-parallel attention ranks; errors name ``ep_where``."""
    if ep != 1 or dp != 1:
        return expert_shard(spec, tp, ep, where, ep_where, dp)
    if tp < 1:
        raise ServesimError(f"got {tp}, must be at least 1", where=where)
    if spec.heads % tp:
        raise ServesimError(f"the model's {spec.heads} query heads do not split over tp={tp} "
                            f"(tp must divide the heads)", where=where)
    if spec.intermediate % tp and (not spec.experts or spec.dense_layers):
        raise ServesimError(f"the model's MLP width intermediate={spec.intermediate} does not "
                            f"split over tp={tp}", where=where)
    if spec.experts and spec.expert_intermediate % tp:
        raise ServesimError(f"the model's expert width expert_intermediate="
                            f"{spec.expert_intermediate} does not split over tp={tp}",
                            where=where)
    if spec.kv_heads % tp == 0:
        kv = spec.kv_heads // tp
    elif tp % spec.kv_heads == 0:
        kv = 1  # replicated: each GPU keeps a copy of one KV head
    else:
        raise ServesimError(f"the model's {spec.kv_heads} KV heads neither split over nor "
                            f"replicate evenly across tp={tp}", where=where)
    if spec.linear_layers and spec.linear_key_heads % tp:
        raise ServesimError(f"the model's {spec.linear_key_heads} linear-attention key heads "
                            f"do not split over tp={tp} (tp must divide them)", where=where)
    padded = -(-spec.vocab // VOCAB_PADDING) * VOCAB_PADDING
    return Shard(hidden=spec.hidden, heads=spec.heads // tp, kv_heads=kv,
                 head_dim=spec.head_dim, intermediate=spec.intermediate // tp,
                 vocab=-(-padded // tp), qkv_bias=spec.qkv_bias, rope_theta=spec.rope_theta,
                 tp=tp, layers=spec.layers, dtype_bytes=spec.dtype_bytes,
                 tie_embeddings=spec.tie_embeddings, act_bytes=spec.act_bytes,
                 kv_bytes=spec.kv_dtype_bytes, experts=spec.experts,
                 experts_per_token=spec.experts_per_token,
                 expert_intermediate=spec.expert_intermediate // tp,
                 shared_experts=spec.shared_experts, dense_layers=spec.dense_layers,
                 expert_dtype_bytes=spec.expert_dtype_bytes,
                 qkv_dtype_bytes=spec.qkv_dtype_bytes,
                 sliding_window=spec.sliding_window, sliding_layers=spec.sliding_layers,
                 attention_sinks=spec.attention_sinks,
                 kv_lora_rank=spec.kv_lora_rank, q_lora_rank=spec.q_lora_rank,
                 qk_rope_head_dim=spec.qk_rope_head_dim,
                 qk_nope_head_dim=spec.qk_nope_head_dim, v_head_dim=spec.v_head_dim,
                 index_topk=spec.index_topk, index_n_heads=spec.index_n_heads,
                 index_head_dim=spec.index_head_dim, linear_layers=spec.linear_layers,
                 linear_key_heads=spec.linear_key_heads // tp,
                 linear_value_heads=spec.linear_value_heads // tp,
                 linear_key_dim=spec.linear_key_dim, linear_value_dim=spec.linear_value_dim,
                 linear_conv=spec.linear_conv, attn_output_gate=spec.attn_output_gate,
                 state_bytes=DTYPE_BYTES[spec.linear_state_dtype])


def expert_shard(spec: ModelSpec, tp: int, ep: int, where: str = "tp",
                 ep_where: str = "ep", dp: int = 1) -> Shard:
    """One GPU's share of ``spec`` under expert parallelism of degree ``ep``, as vLLM's
    ``--enable-expert-parallel`` places it: attention, dense layers and shared experts
    split over ``tp`` as without it; the routed experts not sliced but dealt out whole,
    E/ep to each GPU. vLLM's expert-parallel group is every GPU of a pipeline stage:
    tp × the ``dp`` data-parallel attention ranks (each rank tp GPUs with the whole
    attention, :mod:`sim.core.dpgroup`), so ``ep`` must equal dp × tp; it must also divide
    the experts (vLLM would give the first E mod ep GPUs one more; servesim keeps the
    split even). Errors name ``ep_where``."""
    if ep < 1:
        raise ServesimError(f"got {ep}, must be at least 1", where=ep_where)
    if not spec.experts:
        if dp != 1:
            raise ServesimError(f"got dp={dp}, but model {spec.name} is dense (experts is 0):"
                                " data-parallel attention ranks share a mixture of experts' "
                                "experts; for copies of a dense model use cluster.replicas",
                                where=ep_where)
        raise ServesimError(f"got {ep}, but model {spec.name} is dense (experts is 0): "
                            f"expert parallelism needs a mixture of experts; use ep 1",
                            where=ep_where)
    group = dp * tp
    if ep != group:
        ranks = (f"{dp} data-parallel attention ranks of tp={tp}" if dp > 1 else
                 f"tp={tp} (one data-parallel rank)")
        raise ServesimError(f"got {ep} with {ranks}: vLLM's expert-parallel group is the "
                            f"tp x data-parallel GPUs of a stage, so ep must be "
                            + (f"dp x tp ({group})" if dp > 1 else f"1 or tp ({tp})"),
                            where=ep_where)
    if spec.experts % ep:
        raise ServesimError(f"got {ep}: it does not divide the model's {spec.experts} "
                            f"experts (allowed: a divisor of {spec.experts} equal to "
                            f"{'dp x tp' if dp > 1 else 'tp'})", where=ep_where)
    # The routed experts need no width split; shared experts (and dense layers) still do.
    sliced = dataclasses.replace(spec, expert_intermediate=spec.expert_intermediate * tp
                                 if not spec.shared_experts else spec.expert_intermediate)
    d = shard(sliced, tp, where)
    return dataclasses.replace(d, experts=spec.experts // ep,
                               expert_intermediate=spec.expert_intermediate, ep=ep)


def ep_note(ep: int, imbalance: float = 1.0) -> str:
    """What a cost source adds about expert parallelism; empty without it."""
    if ep == 1:
        return ""
    skew = f", busiest GPU {imbalance:g}x the mean tokens" if imbalance != 1 else ""
    return f"; expert parallelism ep={ep}{skew}"


# Bytes a token that a layer-wide query/key norm (``layer_qk_norm``) all-reduces under
# tensor parallelism: its queries' and its keys' partial sums of squares, fp32 each.
QK_NORM_BYTES = 8


def qk_norm_allreduces(model: ModelSpec, tp: int) -> int:
    """All-reduces a layer adds for a layer-wide query/key norm at tensor parallelism
    ``tp``: 1 where ``model.layer_qk_norm`` and ``tp > 1`` (the norm waits for every GPU's
    sums of squares, of :data:`QK_NORM_BYTES` a token), else 0."""
    return int(model.layer_qk_norm and tp > 1)
