"""Model architectures: :class:`ModelSpec`, the one description both sim/ and calibrate/
use, with the fields profiles record.

Pure Python (no numpy, no simpy, no torch) so every part of servesim can import it.
Figures are the public ``config.json`` values of each family (presets:
:mod:`sim.cost.presets`); a tensor-parallel shard's per-GPU dimensions are
:func:`sim.cost.shard.shard`'s, the GPUs' figures :mod:`sim.cost.gpus`'.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from sim.configtools import bounded
from sim.cost.dtypes import (
    DTYPE_BYTES,
    SPARSE_FIELDS,
    Dtype,
    ExpertDtype,
    KVDtype,
    StateDtype,
    weight_bytes_per,
)
from sim.cost.projections import Projections
from sim.errors import ServesimError


@dataclass(frozen=True)
class ModelSpec(Projections):
    """A Llama-family decoder: dimensions in elements, ``max_context`` in tokens.

    ``dtype`` is the projections' weight dtype: bf16, fp16 or fp32 for a plain
    checkpoint, ``fp8`` or ``fp8-block`` (see :data:`FP8_WEIGHTS`) for an FP8 one, whose
    embeddings, LM head, norms and activations stay in bf16. ``kv_dtype`` is the KV
    cache's, named as vLLM's ``--kv-cache-dtype``: ``auto`` (the activations' dtype) or
    ``fp8`` (one byte an element).

    Mixture-of-experts: ``experts`` routed experts per MoE layer (0: a dense model), of
    which each token uses ``experts_per_token``, each a SwiGLU of width
    ``expert_intermediate``; ``shared_experts`` more of that width every token uses; the
    first ``dense_layers`` layers keep a dense SwiGLU of width ``intermediate``.

    4-bit weights: ``dtype`` (or ``expert_dtype``) ``mxfp4``, ``nvfp4`` or ``int4``
    (see :data:`sim.cost.dtypes.FOUR_BIT_WEIGHTS`); ``expert_dtype`` is the routed and
    shared experts' weight dtype where it differs from the other projections' ("" = ``dtype``).
    ``qkv_dtype`` likewise for the attention layers' query, key and value projections
    (with MLA q_a, q_b, kv_a and kv_b; the output projection stays at ``dtype``):
    NVIDIA's NVFP4 DeepSeek checkpoints leave those four in bf16 and quantise the rest.

    Sliding-window attention: ``sliding_layers`` of the ``layers`` attend only to the last
    ``sliding_window`` tokens (0, 0: none; gpt-oss alternates window-128 and full layers,
    Mistral-7B v0.1 windows all 32 at 4,096). ``attention_sinks``: each query head of
    every layer has one learned sink logit (gpt-oss), a parameter per head whose compute
    is one more term in each softmax (not priced: a few FLOPs a row).

    Multi-head latent attention (DeepSeek-V2/V3; ``kv_lora_rank`` > 0, names as in their
    config.json): each token's keys and values are compressed to a latent of
    ``kv_lora_rank`` elements plus one rotary key of ``qk_rope_head_dim`` shared by the
    heads, which is all the KV cache holds; ``kv_b_proj`` expands the latent to each
    head's no-rope key (``qk_nope_head_dim``) and value (``v_head_dim``). Queries are
    compressed to ``q_lora_rank`` first (0: one q_proj). ``head_dim`` must then be the
    query/key head size, ``qk_nope_head_dim`` + ``qk_rope_head_dim``.

    DeepSeek sparse attention (DeepSeek-V3.2, GLM-5; ``index_topk`` > 0, names as in
    their config.json): MLA whose every query attends only to the ``index_topk`` cached
    tokens an indexer scores highest. The indexer has ``index_n_heads`` heads of
    ``index_head_dim`` (queries from the query latent, one shared key a token) and caches
    each token's key beside its latent (:attr:`index_key_bytes`); it scores every cached
    token, so its cost still grows with the context while attention's stops at the top-k.

    ``layer_qk_norm``: queries and keys are RMS-normalised over all their heads together
    (MiniMax-M2's ``qk_norm_type: per_layer``), not per head, so under tensor parallelism
    each layer all-reduces every token's two partial sums of squares (8 bytes a token)
    before it can normalise.

    Gated DeltaNet (Qwen3-Next, Qwen3.5; names from their ``linear_*`` config keys):
    ``linear_layers`` of the ``layers`` mix tokens with a linear-attention recurrence
    instead of softmax attention, and keep no KV cache but a fixed state per sequence
    and layer: ``linear_value_heads`` matrices of ``linear_key_dim`` x
    ``linear_value_dim`` (in ``linear_state_dtype``, :data:`StateDtype`) and the last
    ``linear_conv`` - 1 inputs of its short convolution (activations' dtype).
    ``linear_key_heads`` heads of keys and queries are shared by groups of value heads.
    ``attn_output_gate``: the attention layers' q_proj also makes a sigmoid gate per head
    for their output.

    ``rope_dim``: the elements of each query and key head the rotary embedding turns,
    when only part of the head (Qwen3.5's ``partial_rotary_factor`` 0.25 of 256, 64;
    MiniMax-M2's ``rotary_dim`` 64 of 128); 0: the whole head. It sizes the rotary
    cos/sin table (:attr:`rotary_dim`), and nothing a step computes.

    ``mtp_layers``: the multi-token-prediction modules a server drafts with (the config's
    ``num_nextn_predict_layers`` or ``mtp_num_hidden_layers``; 0 where it names none):
    an ``mtp`` drafter loads them all and runs one a drafted token, and is refused with
    none (:mod:`sim.config.speculative`); it prices nothing of the model itself."""

    layers: int = bounded(ge=1)
    hidden: int = bounded(ge=1)
    heads: int = bounded(ge=1)
    kv_heads: int = bounded(ge=1)
    head_dim: int = bounded(ge=1)
    intermediate: int = bounded(ge=1)
    vocab: int = bounded(ge=1)
    dtype: Dtype = "bf16"
    kv_dtype: KVDtype = "auto"
    max_context: int = bounded(8192, ge=1)
    rope_theta: float = bounded(10000.0, gt=0)
    qkv_bias: bool = False
    tie_embeddings: bool = False
    name: str = "custom"
    experts: int = bounded(0, ge=0)
    experts_per_token: int = bounded(0, ge=0)
    expert_intermediate: int = bounded(0, ge=0)
    shared_experts: int = bounded(0, ge=0)
    dense_layers: int = bounded(0, ge=0)
    expert_dtype: ExpertDtype = ""
    sliding_window: int = bounded(0, ge=0)
    sliding_layers: int = bounded(0, ge=0)
    attention_sinks: bool = False
    kv_lora_rank: int = bounded(0, ge=0)
    q_lora_rank: int = bounded(0, ge=0)
    qk_rope_head_dim: int = bounded(0, ge=0)
    qk_nope_head_dim: int = bounded(0, ge=0)
    v_head_dim: int = bounded(0, ge=0)
    index_topk: int = bounded(0, ge=0)
    index_n_heads: int = bounded(0, ge=0)
    index_head_dim: int = bounded(0, ge=0)
    layer_qk_norm: bool = False
    linear_layers: int = bounded(0, ge=0)
    linear_key_heads: int = bounded(0, ge=0)
    linear_value_heads: int = bounded(0, ge=0)
    linear_key_dim: int = bounded(0, ge=0)
    linear_value_dim: int = bounded(0, ge=0)
    linear_conv: int = bounded(0, ge=0)
    attn_output_gate: bool = False
    linear_state_dtype: StateDtype = "fp32"
    qkv_dtype: ExpertDtype = ""
    mtp_layers: int = bounded(0, ge=0)
    rope_dim: int = bounded(0, ge=0)

    def __post_init__(self) -> None:
        self._check_newer()
        self._check_linear()
        if self.heads % self.kv_heads:
            raise ServesimError(
                f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}",
                where="kv_heads",
            )
        self._check_mla()
        if not self.experts:
            for key in ("experts_per_token", "expert_intermediate", "shared_experts",
                        "dense_layers"):
                if getattr(self, key):
                    raise ServesimError(f"got {getattr(self, key)} for a dense model "
                                        f"(experts is 0); set experts too", where=key)
            return
        if not 1 <= self.experts_per_token <= self.experts:
            raise ServesimError(f"got {self.experts_per_token}, must be 1 to experts "
                                f"({self.experts})", where="experts_per_token")
        if self.expert_intermediate < 1:
            raise ServesimError("required for a mixture-of-experts model (experts > 0), "
                                "at least 1", where="expert_intermediate")
        if self.dense_layers >= self.layers:
            raise ServesimError(f"got {self.dense_layers}, must be below layers "
                                f"({self.layers})", where="dense_layers")

    def _check_newer(self) -> None:
        """The sliding-window and expert-dtype fields agree with the rest."""
        if self.sliding_layers > self.layers:
            raise ServesimError(f"got {self.sliding_layers}, must be at most layers "
                                f"({self.layers})", where="sliding_layers")
        if bool(self.sliding_window) != bool(self.sliding_layers):
            unset, other = (("sliding_layers", "sliding_window") if self.sliding_window
                            else ("sliding_window", "sliding_layers"))
            raise ServesimError(f"got 0 while {other} is {getattr(self, other)}; set both "
                                "(the window in tokens and how many layers use it) or "
                                "neither", where=unset)
        if self.rope_dim > self.head_dim or (self.rope_dim and self.mla):
            raise ServesimError(f"got {self.rope_dim}, must be at most head_dim "
                                f"({self.head_dim}), and 0 with latent attention (whose "
                                "rotary part is qk_rope_head_dim)", where="rope_dim")
        if self.expert_dtype and not self.experts:
            raise ServesimError(f"got {self.expert_dtype!r} for a dense model (experts is "
                                f"0); set dtype instead", where="expert_dtype")

    def _check_linear(self) -> None:
        """Gated DeltaNet fields: all set together, with heads that group evenly, and
        not mixed with the other attention variants (not modelled together)."""
        keys = ("linear_key_heads", "linear_value_heads", "linear_key_dim",
                "linear_value_dim", "linear_conv")
        if not self.linear_layers:
            for key in keys:
                if getattr(self, key):
                    raise ServesimError(f"got {getattr(self, key)} without linear-attention "
                                        "layers (linear_layers is 0); set linear_layers too",
                                        where=key)
            return
        if self.linear_layers >= self.layers:
            raise ServesimError(f"got {self.linear_layers}, must be below layers "
                                f"({self.layers}): a model without softmax-attention layers "
                                "is not modelled", where="linear_layers")
        for key in keys:
            if getattr(self, key) < 1:
                raise ServesimError("required with linear-attention layers (linear_layers > "
                                    "0), at least 1", where=key)
        if self.linear_value_heads % self.linear_key_heads:
            raise ServesimError(f"linear_value_heads={self.linear_value_heads} is not a "
                                f"multiple of linear_key_heads={self.linear_key_heads}",
                                where="linear_value_heads")
        for key in ("sliding_layers", "kv_lora_rank"):
            if getattr(self, key):
                raise ServesimError(f"got {getattr(self, key)} with linear-attention layers: "
                                    "the two together are not modelled", where=key)

    @property
    def full_layers(self) -> int:
        """Layers whose attention sees the whole context (all but the sliding ones and
        the linear-attention ones)."""
        return self.layers - self.sliding_layers - self.linear_layers

    @property
    def linear_state_bytes(self) -> int:
        """Bytes of one sequence's Gated DeltaNet state over all its linear layers, whole
        model (0 without them): each layer's recurrent matrices at
        ``linear_state_dtype`` and convolution window at the activations' dtype."""
        return self.linear_layers * (
            self.linear_value_heads * self.linear_key_dim * self.linear_value_dim
            * DTYPE_BYTES[self.linear_state_dtype]
            + self.linear_conv_dim * (self.linear_conv - 1) * self.act_bytes)

    @property
    def expert_dtype_bytes(self) -> float:
        """Bytes per routed or shared expert weight, scales counted."""
        return weight_bytes_per(self.expert_dtype or self.dtype)

    @property
    def own_qkv_dtype(self) -> str:
        """``qkv_dtype`` where it differs from ``dtype``, else "" (naming the weights'
        own dtype changes nothing)."""
        return self.qkv_dtype if self.qkv_dtype != self.dtype else ""

    @property
    def qkv_dtype_bytes(self) -> float:
        """Bytes per weight of the attention layers' query, key and value projections,
        scales counted."""
        return weight_bytes_per(self.qkv_dtype or self.dtype)

    @property
    def sink_params(self) -> int:
        """Attention-sink logits of every layer, one per query head (elements)."""
        return self.layers * self.heads if self.attention_sinks else 0

    def _check_mla(self) -> None:
        """Latent-attention fields: all set together, ``head_dim`` their query size."""
        keys = ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        if not self.mla:
            for key in (*keys, *SPARSE_FIELDS):
                if getattr(self, key):
                    raise ServesimError(f"got {getattr(self, key)} without latent attention "
                                        f"(kv_lora_rank is 0); set kv_lora_rank too", where=key)
            return
        for key in keys[1:]:
            if getattr(self, key) < 1:
                raise ServesimError("required for latent attention (kv_lora_rank > 0), at "
                                    "least 1", where=key)
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.head_dim != qk:
            raise ServesimError(f"got {self.head_dim}, must be qk_nope_head_dim + "
                                f"qk_rope_head_dim ({qk}) with latent attention",
                                where="head_dim")
        self._check_sparse()

    def _check_sparse(self) -> None:
        """Sparse-attention fields: all set together, on MLA with a query latent (the
        indexer's queries are made from it)."""
        if not any(getattr(self, key) for key in SPARSE_FIELDS):
            return
        for key in SPARSE_FIELDS:
            if getattr(self, key) < 1:
                raise ServesimError("required for sparse attention (set index_topk, "
                                    "index_n_heads and index_head_dim together), at least 1; "
                                    f"got {getattr(self, key)}", where=key)
        if not self.q_lora_rank:
            raise ServesimError(f"got {self.index_topk}: sparse attention is modelled on "
                                "latent attention with a query latent (kv_lora_rank and "
                                "q_lora_rank > 0)", where="index_topk")

    @property
    def moe(self) -> bool:
        """Whether the model has mixture-of-experts layers."""
        return self.experts > 0

    @property
    def dtype_bytes(self) -> float:
        """Bytes per projection weight (the weights' dtype; a fraction for 4-bit ones)."""
        return weight_bytes_per(self.dtype)

    @property
    def act_dtype(self) -> str:
        """The activations' dtype: the weights' for fp32 and fp16 models, bf16 otherwise
        (FP8 checkpoints compute between GEMMs in bf16)."""
        return self.dtype if self.dtype in ("fp32", "fp16") else "bf16"

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element (also the embedding, LM head and norm weights)."""
        return DTYPE_BYTES[self.act_dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes per KV-cache element: one for an fp8 cache, else the activations'."""
        return 1 if self.kv_dtype == "fp8" else self.act_bytes

    @property
    def router_params(self) -> int:
        """Weights of every MoE layer's router, hidden x experts each (elements)."""
        return self.moe_layers * self.hidden * self.experts

    @property
    def active_params(self) -> int:
        """Weights one token uses (elements): as :attr:`params`, with only
        ``experts_per_token`` routed experts (and the shared ones) of each MoE layer."""
        idle = self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params
        return self.params - idle

    @property
    def embedding_params(self) -> int:
        """Weights of the token embedding (elements)."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All weights (elements): layers' projections and routers, embedding and, unless
        tied, the LM head; with MLA also the RMSNorms on its latents (q_a_layernorm,
        kv_a_layernorm). The other norms are left out here (a few MB);
        :class:`~sim.cost.shard.Shard` counts them all."""
        head = 0 if self.tie_embeddings else self.embedding_params
        return (self.stack_params + self.router_params + self.embedding_params + head
                + self.sink_params + self.layers * self.latent_norm_params)

    @property
    def rotary_dim(self) -> int:
        """Elements of each position's rotary cos/sin table row: the rotary part of a head
        (``rope_dim``, or the whole head size), or with MLA the rotary part of the key
        (``qk_rope_head_dim``)."""
        return self.qk_rope_head_dim if self.mla else self.rope_dim or self.head_dim

    @property
    def weight_bytes(self) -> int:
        """Bytes of all projection and embedding weights, whole model: projections at
        ``dtype``, embedding and LM head at the activations' dtype (per-GPU figures, with
        norms and tensor-parallel sharding, come from :func:`sim.cost.shard.shard`)."""
        return self.weights_bytes(self.params, self.dtype_bytes, self.expert_dtype_bytes,
                                  self.qkv_dtype_bytes, self.act_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies over all layers, whole model: 2·L·kv·d·b,
        b from ``kv_dtype``, L the attention layers (per GPU:
        :attr:`sim.cost.shard.Shard.kv_bytes_per_token`); with MLA one
        latent per layer, L·(``kv_lora_rank`` + ``qk_rope_head_dim``)·b, and with sparse
        attention the indexer's key beside it (:attr:`index_key_bytes`)."""
        if self.mla:
            return self.layers * (self.latent_dim * self.kv_dtype_bytes + self.index_key_bytes)
        return 2 * self.attention_layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes


# Fields added after profiles and scenario digests were first written: recorded and
# hashed only when they differ from a plain 16-bit dense model's (DENSE), so files and
# digests of such models stay what they were.
NEWER_FIELDS = ("kv_dtype", "experts", "experts_per_token", "expert_intermediate",
                "shared_experts", "dense_layers", "expert_dtype", "sliding_window",
                "sliding_layers", "attention_sinks", "kv_lora_rank", "q_lora_rank",
                "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "index_topk",
                "index_n_heads", "index_head_dim", "layer_qk_norm",
                "linear_layers", "linear_key_heads", "linear_value_heads", "linear_key_dim",
                "linear_value_dim", "linear_conv", "attn_output_gate", "linear_state_dtype",
                "qkv_dtype", "mtp_layers", "rope_dim")
DENSE = ModelSpec(layers=1, hidden=1, heads=1, kv_heads=1, head_dim=1, intermediate=1, vocab=1)


def recorded_fields(model: ModelSpec) -> dict[str, Any]:
    """``model``'s fields as profiles record and digests hash them: every field, those of
    :data:`NEWER_FIELDS` only when they differ from :data:`DENSE`'s."""
    fields = dataclasses.asdict(model)
    for key in NEWER_FIELDS:
        if fields[key] == getattr(DENSE, key):
            fields.pop(key)
    return fields
