"""Model architectures and GPU datasheet figures: the one table both sim/ and calibrate/ use.

Pure Python (no numpy, no simpy, no torch) so every part of servesim can import it.
Model figures are the public ``config.json`` values of each family; GPU figures are
vendor datasheet numbers (dense, no sparsity), in SI units: FLOP/s, bytes/s, except the
memory size, which is what the device reports to programs (bytes; see :class:`GPUSpec`).
:func:`shard` gives the per-GPU dimensions of a tensor-parallel shard, for the simulator's
KV capacity, cost and transfers and for calibration alike.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from sim.configtools import bounded
from sim.errors import ServesimError

Dtype = Literal["fp32", "fp16", "bf16", "fp8", "fp8-block", "mxfp4", "nvfp4", "int4"]
KVDtype = Literal["auto", "fp8"]
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8-block": 1}
# 4-bit weights, in bits per weight with their scales counted (a weight takes a fraction
# of a byte, so these dtypes are kept apart from DTYPE_BYTES, whose whole-byte figures
# every older profile and digest was computed with):
# - mxfp4 (OCP Microscaling FP4, gpt-oss's experts): 4-bit E2M1 values and one 8-bit
#   power-of-two scale per block of 32: 4 + 8/32 = 4.25 bits.
# - nvfp4 (NVIDIA FP4, ModelOpt and compressed-tensors checkpoints): E2M1 values, one
#   FP8 E4M3 scale per block of 16 and one fp32 scale per tensor: 4 + 8/16 = 4.5 bits
#   (the per-tensor scale is a few bytes a matrix and is not counted).
# - int4 (GPTQ/AWQ, vLLM's w4a16): 4-bit integers and one 16-bit scale per group of 128
#   input channels: 4 + 16/128 = 4.125 bits. AWQ's 4-bit zero points (4/128 more) and
#   smaller groups (group_size 32 or 64) are not counted: under 1% of the weights' bytes
#   for the first, up to 0.4 bits a weight for the second.
FOUR_BIT_WEIGHTS: dict[str, float] = {"mxfp4": 4.25, "nvfp4": 4.5, "int4": 4.125}
FP4_WEIGHTS = ("mxfp4", "nvfp4")
# Weight dtypes of quantised checkpoints: FP8 with one scale per tensor (or per output
# channel), and FP8 with one scale per 128 x 128 block (DeepSeek's and Qwen's FP8
# releases). Only the projections are quantised; embeddings, the LM head and norms keep
# 16 bits, and activations run in bf16 between the GEMMs.
FP8_WEIGHTS = ("fp8", "fp8-block")
# Dtypes of a Gated DeltaNet layer's recurrent state: fp32 as Qwen3.5's config sets it
# (mamba_ssm_dtype) and vLLM and SGLang keep it by default, or bf16 as a server may be
# told (vLLM's --mamba-ssm-cache-dtype, SGLang's --mamba-ssm-dtype).
StateDtype = Literal["fp32", "bf16"]
# Dtypes a checkpoint's routed experts may have apart from its other projections ("":
# the projections' own): gpt-oss keeps attention in bf16 and its experts in mxfp4.
ExpertDtype = Literal["", "bf16", "fp16", "fp8", "fp8-block", "mxfp4", "nvfp4", "int4"]


def weight_bytes_per(dtype: str) -> float:
    """Bytes one weight of ``dtype`` takes with its scales (a whole number of bytes for
    the 8-, 16- and 32-bit dtypes, a fraction for the 4-bit ones)."""
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    return FOUR_BIT_WEIGHTS[dtype] / 8


# Elements of a sparse-attention indexer key that share one fp32 scale in its FP8 cache.
INDEX_SCALE_BLOCK = 128
# The ModelSpec fields (and config.json keys) of DeepSeek sparse attention's indexer.
SPARSE_FIELDS = ("index_topk", "index_n_heads", "index_head_dim")


def packed_bytes(elements: int, per: float) -> int:
    """Bytes of ``elements`` weights at ``per`` bytes each, rounded up to a whole byte
    (exact for whole-byte dtypes; 4-bit ones pack two values a byte)."""
    return math.ceil(elements * per)


class _Projections:
    """Projection-weight counts (elements) of a model's layers, from the dimensions a
    :class:`ModelSpec` (whole model) and a :class:`Shard` (one GPU's share) both have:
    the same arithmetic serves both."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    experts: int
    shared_experts: int
    expert_intermediate: int
    dense_layers: int
    kv_lora_rank: int
    q_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    index_topk: int
    index_n_heads: int
    index_head_dim: int
    linear_layers: int
    linear_key_heads: int
    linear_value_heads: int
    linear_key_dim: int
    linear_value_dim: int
    linear_conv: int
    attn_output_gate: bool

    @property
    def attention_layers(self) -> int:
        """Layers with softmax attention and a KV cache: all but the linear-attention
        (Gated DeltaNet) ones."""
        return self.layers - self.linear_layers

    @property
    def linear_conv_dim(self) -> int:
        """Channels of a Gated DeltaNet layer's short convolution: its queries, keys and
        values (elements)."""
        return (2 * self.linear_key_heads * self.linear_key_dim
                + self.linear_value_heads * self.linear_value_dim)

    @property
    def linear_params_per_mixer(self) -> int:
        """Weights of one Gated DeltaNet layer's projections: in_proj_qkvz (hidden to
        queries, keys, values and the output gate z), in_proj_ba (hidden to each value
        head's write strength b and decay a), the depthwise convolution and out_proj;
        0 without such layers. Its per-head A_log, dt_bias and gated norm are a few
        thousand elements and not counted."""
        if not self.linear_layers:
            return 0
        keys = self.linear_key_heads * self.linear_key_dim
        values = self.linear_value_heads * self.linear_value_dim
        return (self.hidden * (2 * keys + 2 * values) + self.hidden * 2 * self.linear_value_heads
                + self.linear_conv_dim * self.linear_conv + values * self.hidden)

    @property
    def mixer_params(self) -> int:
        """Weights of every layer's token mixer: softmax attention's projections in the
        attention layers, Gated DeltaNet's in the linear ones (elements)."""
        return (self.attention_layers * self.attention_params_per_layer
                + self.linear_layers * self.linear_params_per_mixer)

    @property
    def mla(self) -> bool:
        """Whether attention is multi-head latent attention (``kv_lora_rank`` > 0)."""
        return self.kv_lora_rank > 0

    @property
    def latent_dim(self) -> int:
        """Elements one token's MLA latent holds in a layer's cache: the compressed KV
        (``kv_lora_rank``) and the shared rotary key (``qk_rope_head_dim``); 0 without MLA."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.mla else 0

    @property
    def sparse(self) -> bool:
        """Whether attention is DeepSeek sparse attention: MLA whose queries each attend
        to the ``index_topk`` cached tokens a lightweight indexer picks (``index_topk`` > 0)."""
        return self.index_topk > 0

    @property
    def indexer_params(self) -> int:
        """Weights of one layer's sparse-attention indexer (0 without one): wq_b (query
        latent to ``index_n_heads`` heads of ``index_head_dim``), wk (hidden to one key of
        ``index_head_dim``) and weights_proj (hidden to a weight per indexer head). SGLang
        and vLLM keep them whole on every GPU (replicated linears)."""
        if not self.sparse:
            return 0
        return (self.q_lora_rank * self.index_n_heads * self.index_head_dim
                + self.hidden * (self.index_head_dim + self.index_n_heads))

    @property
    def index_key_bytes(self) -> int:
        """Bytes one token's indexer key takes in one layer's cache (0 without sparse
        attention): ``index_head_dim`` FP8 elements and an fp32 scale per 128 of them,
        whatever the KV cache's dtype, as SGLang's and vLLM's indexer caches store it
        (132 B for DeepSeek-V3.2 and GLM-5)."""
        if not self.sparse:
            return 0
        return self.index_head_dim + 4 * -(-self.index_head_dim // INDEX_SCALE_BLOCK)

    @property
    def attention_params_per_layer(self) -> int:
        """Weights of one attention layer's projections: QKV and output; with MLA the
        query down/up projections (q_a, q_b; one q_proj when ``q_lora_rank`` is 0),
        kv_a_proj_with_mqa (hidden to latent + rotary key), kv_b_proj (latent to each
        head's no-rope key and value), the output projection, and with sparse attention
        its indexer (:attr:`indexer_params`). With MLA, q_a, kv_a and the indexer are
        whole on every GPU (vLLM and SGLang replicate them); the rest follow ``heads``."""
        if self.mla:
            qk = self.heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            q = (self.hidden * self.q_lora_rank + self.q_lora_rank * qk if self.q_lora_rank
                 else self.hidden * qk)
            kv_a = self.hidden * self.latent_dim
            kv_b = self.kv_lora_rank * self.heads * (self.qk_nope_head_dim + self.v_head_dim)
            return (q + kv_a + kv_b + self.heads * self.v_head_dim * self.hidden
                    + self.indexer_params)
        # A gated attention output (Qwen3-Next, Qwen3.5) widens q_proj to a query and a
        # gate per head.
        queries = self.heads * (2 if self.attn_output_gate else 1)
        qkv = self.hidden * (queries + 2 * self.kv_heads) * self.head_dim
        return qkv + self.heads * self.head_dim * self.hidden

    @property
    def qkv_params_per_layer(self) -> int:
        """Weights of one attention layer's query, key and value projections: all of
        :attr:`attention_params_per_layer` but the output projection (with MLA q_a, q_b,
        kv_a and kv_b)."""
        out = self.heads * (self.v_head_dim if self.mla else self.head_dim) * self.hidden
        return self.attention_params_per_layer - out

    @property
    def latent_norm_params(self) -> int:
        """Weights of one layer's norms on the MLA latents (q_a_layernorm when queries
        are compressed, kv_a_layernorm) and, with sparse attention, the indexer key's
        LayerNorm (a weight and a bias); 0 without MLA."""
        index = 2 * self.index_head_dim if self.sparse else 0
        return self.q_lora_rank + self.kv_lora_rank + index if self.mla else 0

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one dense layer's QKV, output and SwiGLU projections."""
        return self.attention_params_per_layer + 3 * self.hidden * self.intermediate

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (the rest are dense)."""
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def expert_params(self) -> int:
        """Weights of one expert's SwiGLU."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def expert_stack_params(self) -> int:
        """Weights of every MoE layer's routed and shared experts (part of
        :attr:`stack_params`; the part a separate expert dtype applies to)."""
        return self.moe_layers * (self.experts + self.shared_experts) * self.expert_params

    def stack_bytes(self, per: float, expert_per: float, qkv_per: float | None = None) -> int:
        """Bytes of :attr:`stack_params`: experts at ``expert_per`` bytes a weight, the
        attention layers' query, key and value projections at ``qkv_per`` (None:
        ``per``), the other projections at ``per``."""
        qkv_per = per if qkv_per is None else qkv_per
        if expert_per == per == qkv_per:
            return packed_bytes(self.stack_params, per)
        experts = self.expert_stack_params if expert_per != per else 0
        qkv = self.attention_layers * self.qkv_params_per_layer if qkv_per != per else 0
        return (packed_bytes(self.stack_params - experts - qkv, per)
                + (packed_bytes(experts, expert_per) if experts else 0)
                + (packed_bytes(qkv, qkv_per) if qkv else 0))

    @property
    def stack_params(self) -> int:
        """Projection weights of every layer: token mixers (attention or Gated DeltaNet),
        dense MLPs, and in each MoE layer
        every routed and shared expert (the router is not a projection)."""
        if not self.experts:
            return self.mixer_params + self.layers * 3 * self.hidden * self.intermediate
        return (self.mixer_params
                + self.dense_layers * 3 * self.hidden * self.intermediate
                + self.moe_layers * (self.experts + self.shared_experts) * self.expert_params)


@dataclass(frozen=True)
class ModelSpec(_Projections):
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
    (see :data:`FOUR_BIT_WEIGHTS`); ``expert_dtype`` is the routed and shared experts'
    weight dtype where it differs from the other projections' ("" = ``dtype``).
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
    for their output."""

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
        kv_a_layernorm). The other norms are left out here (a few MB); :class:`Shard`
        counts them all."""
        head = 0 if self.tie_embeddings else self.embedding_params
        return (self.stack_params + self.router_params + self.embedding_params + head
                + self.sink_params + self.layers * self.latent_norm_params)

    @property
    def rotary_dim(self) -> int:
        """Elements of each position's rotary cos/sin table row: the head size, or with MLA
        the rotary part of the key (``qk_rope_head_dim``)."""
        return self.qk_rope_head_dim if self.mla else self.head_dim

    @property
    def weight_bytes(self) -> int:
        """Bytes of all projection and embedding weights, whole model: projections at
        ``dtype``, embedding and LM head at the activations' dtype (per-GPU figures, with
        norms and tensor-parallel sharding, come from :func:`shard`)."""
        linear = self.stack_params
        return (self.stack_bytes(self.dtype_bytes, self.expert_dtype_bytes,
                                 self.qkv_dtype_bytes)
                + (self.params - linear) * self.act_bytes)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies over all layers, whole model: 2·L·kv·d·b,
        b from ``kv_dtype``, L the attention layers (per GPU:
        :attr:`Shard.kv_bytes_per_token`); with MLA one
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
                "qkv_dtype")
DENSE = ModelSpec(layers=1, hidden=1, heads=1, kv_heads=1, head_dim=1, intermediate=1, vocab=1)


def recorded_fields(model: ModelSpec) -> dict[str, Any]:
    """``model``'s fields as profiles record and digests hash them: every field, those of
    :data:`NEWER_FIELDS` only when they differ from :data:`DENSE`'s."""
    fields = dataclasses.asdict(model)
    for key in NEWER_FIELDS:
        if fields[key] == getattr(DENSE, key):
            fields.pop(key)
    return fields

# Bytes a token that a layer-wide query/key norm (``layer_qk_norm``) all-reduces under
# tensor parallelism: its queries' and its keys' partial sums of squares, fp32 each.
QK_NORM_BYTES = 8


def qk_norm_allreduces(model: ModelSpec, tp: int) -> int:
    """All-reduces a layer adds for a layer-wide query/key norm at tensor parallelism
    ``tp``: 1 where ``model.layer_qk_norm`` and ``tp > 1`` (the norm waits for every GPU's
    sums of squares, of :data:`QK_NORM_BYTES` a token), else 0."""
    return int(model.layer_qk_norm and tp > 1)

# vLLM pads the vocabulary of its embedding and LM head to a multiple of this before
# splitting it over the tensor-parallel GPUs (VocabParallelEmbedding's padding size).
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Shard(_Projections):
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
        """As :attr:`_Projections.stack_params`, with shared experts sliced under expert
        parallelism (elements)."""
        whole = _Projections.stack_params.fget(self)  # type: ignore[attr-defined]
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
        linear = self.stack_params
        return (self.stack_bytes(self.dtype_bytes, self.expert_dtype_bytes,
                                 self.qkv_dtype_bytes)
                + (self.params - linear) * self.act_bytes)

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


def _llama(**kw: object) -> ModelSpec:
    return ModelSpec(**kw)  # type: ignore[arg-type]


MODELS: dict[str, ModelSpec] = {
    "llama-3-8b": _llama(name="llama-3-8b", layers=32, hidden=4096, heads=32, kv_heads=8,
                         head_dim=128, intermediate=14336, vocab=128256, max_context=8192,
                         rope_theta=500000.0),
    "llama-3-70b": _llama(name="llama-3-70b", layers=80, hidden=8192, heads=64, kv_heads=8,
                          head_dim=128, intermediate=28672, vocab=128256, max_context=8192,
                          rope_theta=500000.0),
    # Qwen3's attention is wider than its residual stream (64 heads x 128 > 5120).
    "qwen3-32b": _llama(name="qwen3-32b", layers=64, hidden=5120, heads=64, kv_heads=8,
                        head_dim=128, intermediate=25600, vocab=151936, max_context=40960,
                        rope_theta=1000000.0),
    "mistral-7b": _llama(name="mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8,
                         head_dim=128, intermediate=14336, vocab=32768, max_context=32768,
                         rope_theta=1000000.0),
    "qwen2.5-7b": _llama(name="qwen2.5-7b", layers=28, hidden=3584, heads=28, kv_heads=4,
                         head_dim=128, intermediate=18944, vocab=152064, max_context=32768,
                         rope_theta=1000000.0, qkv_bias=True),
    "qwen2.5-32b": _llama(name="qwen2.5-32b", layers=64, hidden=5120, heads=40, kv_heads=8,
                          head_dim=128, intermediate=27648, vocab=152064, max_context=32768,
                          rope_theta=1000000.0, qkv_bias=True),
    # Small enough to calibrate and replay on a 2-core CPU in seconds.
    "tiny": _llama(name="tiny", layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64,
                   intermediate=704, vocab=2048, dtype="fp32", max_context=4096),
}
# Llama 3.1 differs from Llama 3 only in its context length (rope scaling to 128k).
MODELS.update({f"llama-3.1-{size}": dataclasses.replace(
    MODELS[f"llama-3-{size}"], name=f"llama-3.1-{size}", max_context=131072)
    for size in ("8b", "70b")})
# Mixtures of experts (config.json of each release). Mixtral's intermediate_size is its
# experts' width; Qwen3's MoE releases have no dense layer (decoder_sparse_step 1, no
# mlp_only_layers), so their dense width is never used.
MODELS.update({
    "mixtral-8x7b": _llama(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8,
                           head_dim=128, intermediate=14336, vocab=32000, max_context=32768,
                           rope_theta=1000000.0, experts=8, experts_per_token=2,
                           expert_intermediate=14336),
    "qwen3-30b-a3b": _llama(name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32,
                            kv_heads=4, head_dim=128, intermediate=6144, vocab=151936,
                            max_context=40960, rope_theta=1000000.0, experts=128,
                            experts_per_token=8, expert_intermediate=768),
    "qwen3-235b-a22b": _llama(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64,
                              kv_heads=4, head_dim=128, intermediate=12288, vocab=151936,
                              max_context=40960, rope_theta=1000000.0, experts=128,
                              experts_per_token=8, expert_intermediate=1536),
})
# The tiny model's mixture-of-experts twin, for calibrating and replaying a MoE layer on
# a 2-core CPU: 8 experts, 2 a token, each half tiny's MLP width, so a token computes
# what a tiny token does while a layer holds four times its MLP weights (no public
# release; a test shape like tiny).
MODELS["tiny-moe"] = dataclasses.replace(MODELS["tiny"], name="tiny-moe", experts=8,
                                         experts_per_token=2, expert_intermediate=352)
# Qwen's own FP8 release of Qwen3-235B-A22B: 128 x 128 block scales.
MODELS["qwen3-235b-a22b-fp8"] = dataclasses.replace(
    MODELS["qwen3-235b-a22b"], name="qwen3-235b-a22b-fp8", dtype="fp8-block")
# Llama 3.3 70B has Llama 3.1 70B's shape; its FP8 release quantises the projections'
# weights (per-tensor scales) and keeps the KV cache in bf16 unless the server says fp8.
MODELS["llama-3.3-70b-fp8"] = dataclasses.replace(MODELS["llama-3.1-70b"],
                                                  name="llama-3.3-70b-fp8", dtype="fp8")
# OpenAI's gpt-oss (config.json of openai/gpt-oss-20b and -120b, shipped under
# sim/data/models/): every layer a mixture of SwiGLU experts of width 2880 (its
# intermediate_size, as Mixtral's), attention with QKV biases and one learned sink per
# head, layer_types alternating a 128-token sliding window and full attention (window
# first). As released, the experts are mxfp4 and attention, router, embedding and LM
# head bf16 (quantization_config.modules_to_not_convert). Not counted: the biases of the
# output projection and of the experts (gate_up and down), and the router's: 0.04% of
# the weights (39.8M of 116.8B in the 120b).
_GPT_OSS = dict(hidden=2880, heads=64, kv_heads=8, head_dim=64, intermediate=2880,
                vocab=201088, max_context=131072, rope_theta=150000.0, qkv_bias=True,
                experts_per_token=4, expert_intermediate=2880, expert_dtype="mxfp4",
                sliding_window=128, attention_sinks=True)
MODELS.update({
    "gpt-oss-20b": _llama(name="gpt-oss-20b", layers=24, experts=32, sliding_layers=12,
                          **_GPT_OSS),
    "gpt-oss-120b": _llama(name="gpt-oss-120b", layers=36, experts=128, sliding_layers=18,
                           **_GPT_OSS),
})

# DeepSeek-V3 (sim/data/models/deepseek-v3/config.json): latent attention, 128 heads,
# first_k_dense_replace 3 dense layers of width 18432, then 256 routed experts (top 8) and
# one shared expert of width 2048. The release's weights are FP8 with 128 x 128 block
# scales (quantization_config), so the preset's dtype is what it ships: fp8-block.
# Its multi-token-prediction layer (num_nextn_predict_layers 1, the checkpoint's other
# 14B) is left out: vLLM loads it only as a speculative drafter. DeepSeek-R1 is the same
# shape (its config.json differs only in transformers_version).
MODELS["deepseek-v3"] = _llama(
    name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=192,
    intermediate=18432, vocab=129280, dtype="fp8-block", max_context=163840,
    rope_theta=10000.0, experts=256, experts_per_token=8, expert_intermediate=2048,
    shared_experts=1, dense_layers=3, kv_lora_rank=512, q_lora_rank=1536,
    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
MODELS["deepseek-r1"] = dataclasses.replace(MODELS["deepseek-v3"], name="deepseek-r1")
# DeepSeek-V3.2 (sim/data/models/deepseek-v3.2/config.json): DeepSeek-V3's shape and
# FP8 release with DeepSeek sparse attention, an indexer of 64 heads of 128 choosing the
# 2,048 cached tokens each query attends to.
MODELS["deepseek-v3.2"] = dataclasses.replace(
    MODELS["deepseek-v3"], name="deepseek-v3.2", index_topk=2048, index_n_heads=64,
    index_head_dim=128)
# GLM-5 (sim/data/models/glm-5/config.json, Z.ai's FP8 release): DeepSeek-V3's layout
# (latent attention, three dense layers first, 256 routed experts of width 2048 and a
# shared one) at 78 layers, 64 heads of 192 + 64 (values 256) and a 2,048-wide query
# latent, with DeepSeek sparse attention: each query attends to the 2,048 cached tokens
# its indexer (32 heads of 128) ranks first. The FP8 release quantises the projections
# in 128 x 128 blocks but the indexer's weights_proj (kept bf16: 15M weights, priced at
# FP8 here). Its multi-token-prediction layer is left out, as DeepSeek-V3's.
MODELS["glm-5"] = _llama(
    name="glm-5", layers=78, hidden=6144, heads=64, kv_heads=64, head_dim=256,
    intermediate=12288, vocab=154880, dtype="fp8-block", max_context=202752,
    rope_theta=1000000.0, experts=256, experts_per_token=8, expert_intermediate=2048,
    shared_experts=1, dense_layers=3, kv_lora_rank=512, q_lora_rank=2048,
    qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256, index_topk=2048,
    index_n_heads=32, index_head_dim=128)
# Kimi-K2.5 (sim/data/models/kimi-k2.5/config.json, its text_config): DeepSeek-V3's
# layout at 64 heads and 384 routed experts, one dense layer first. Released with its
# routed experts quantised to 4-bit integers (compressed-tensors, groups of 32) and
# attention, shared expert, dense MLP and LM head in bf16, so the preset's expert_dtype
# is int4 (priced at 4.125 bits a weight, groups of 128: 4.5 with Kimi's groups of 32,
# 7% more expert bytes) and its shared expert counted with the routed ones (int4; bf16
# in the release: 2.6B weights). The vision tower is not modelled.
MODELS["kimi-k2.5"] = _llama(
    name="kimi-k2.5", layers=61, hidden=7168, heads=64, kv_heads=64, head_dim=192,
    intermediate=18432, vocab=163840, max_context=262144, rope_theta=50000.0, experts=384,
    experts_per_token=8, expert_intermediate=2048, shared_experts=1, dense_layers=1,
    expert_dtype="int4", kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64,
    qk_nope_head_dim=128, v_head_dim=128)
# MiniMax-M2.5 (sim/data/models/minimax-m2.5/config.json): grouped-query attention (48
# heads of 128, 8 KV heads), every layer 256 SwiGLU experts of width 1536, 8 a token, no
# shared expert; queries and keys normalised over all heads at once (use_qk_norm,
# qk_norm_type per_layer). Released with FP8 weights in 128 x 128 blocks (router and LM head kept
# 16-bit), so the preset is fp8-block as shipped. Its three multi-token-prediction
# modules (use_mtp) are left out, as DeepSeek-V3's.
MODELS["minimax-m2.5"] = _llama(
    name="minimax-m2.5", layers=62, hidden=3072, heads=48, kv_heads=8, head_dim=128,
    intermediate=1536, vocab=200064, dtype="fp8-block", max_context=196608,
    rope_theta=5000000.0, experts=256, experts_per_token=8, expert_intermediate=1536,
    layer_qk_norm=True)
# Qwen3.5 (sim/data/models/qwen3.5-*/config.json, their text_config): every fourth layer
# softmax attention (head size 256, a sigmoid gate on its output, 2 to 4 KV heads), the
# other three Gated DeltaNet (16 key heads and 32 to 64 value heads of 128, a 4-wide
# convolution, an fp32 state). The MoE releases route to 8 or 10 of 256 or 512 experts
# plus one shared expert of the same width in every layer. Left out as for DeepSeek-V3:
# the multi-token-prediction layer (mtp_num_hidden_layers 1) and the vision tower.
_QWEN35 = dict(head_dim=256, vocab=248320, max_context=262144, rope_theta=10000000.0,
               linear_key_heads=16, linear_key_dim=128, linear_value_dim=128, linear_conv=4,
               attn_output_gate=True)
MODELS.update({
    "qwen3.5-27b": _llama(name="qwen3.5-27b", layers=64, linear_layers=48, hidden=5120,
                          heads=24, kv_heads=4, intermediate=17408, linear_value_heads=48,
                          **_QWEN35),
    "qwen3.5-35b-a3b": _llama(name="qwen3.5-35b-a3b", layers=40, linear_layers=30,
                              hidden=2048, heads=16, kv_heads=2, intermediate=512,
                              linear_value_heads=32, experts=256, experts_per_token=8,
                              expert_intermediate=512, shared_experts=1, **_QWEN35),
    "qwen3.5-122b-a10b": _llama(name="qwen3.5-122b-a10b", layers=48, linear_layers=36,
                                hidden=3072, heads=32, kv_heads=2, intermediate=1024,
                                linear_value_heads=64, experts=256, experts_per_token=8,
                                expert_intermediate=1024, shared_experts=1, **_QWEN35),
    "qwen3.5-397b-a17b": _llama(name="qwen3.5-397b-a17b", layers=60, linear_layers=45,
                                hidden=4096, heads=32, kv_heads=2, intermediate=1024,
                                linear_value_heads=64, experts=512, experts_per_token=10,
                                expert_intermediate=1024, shared_experts=1, **_QWEN35),
})
# Qwen's FP8 release of Qwen3.5-397B-A17B: 128 x 128 block scales, as Qwen3's.
MODELS["qwen3.5-397b-a17b-fp8"] = dataclasses.replace(
    MODELS["qwen3.5-397b-a17b"], name="qwen3.5-397b-a17b-fp8", dtype="fp8-block")


@dataclass(frozen=True)
class GPUSpec:
    """Figures of one accelerator, in SI units.

    ``flops`` is dense bf16/fp16 FLOP/s and ``mem_bw`` HBM bytes/s (datasheets).
    ``mem_bytes`` is the memory the device *reports* to programs, in bytes: CUDA's
    ``cudaMemGetInfo`` total, which PyTorch returns as ``torch.cuda.mem_get_info()[1]`` and
    ``get_device_properties().total_memory`` and which vLLM multiplies by
    ``gpu_memory_utilization``. It is less than the marketing figure (80 GB) and less than
    nvidia-smi's "Total" column, which also counts what the driver keeps for itself.
    ``fp8_flops`` is dense FP8 FLOP/s, 0 on a GPU without FP8 tensor cores (A100: FP8
    weights there run weight-only, dequantised to bf16 for each GEMM, as vLLM's Marlin
    kernels do). ``fp4_flops`` is dense FP4 FLOP/s (NVFP4 on Blackwell), 0 on a GPU
    without FP4 tensor cores (FP4 weights run weight-only there, see
    :func:`dtype_weight_only`).
    ``link_bw`` is per-GPU, per-direction bytes/s of the fast link inside a node (NVLink,
    Infinity Fabric, or PCIe where there is none) and ``link_latency_s`` the fixed cost of
    one all-reduce over it; ``node_gpus`` GPUs share that link. ``net_bw`` and
    ``net_latency_s`` are the same for the network between nodes (per GPU: each GPU has
    its own NIC or a share of one). ``host_bw`` is per-direction bytes/s to host memory
    (PCIe), used for swapping.
    """

    name: str
    flops: float
    mem_bw: float
    mem_bytes: int
    link_bw: float
    link_latency_s: float
    host_bw: float
    node_gpus: int
    net_bw: float
    net_latency_s: float
    fp8_flops: float = 0.0
    fp4_flops: float = 0.0

    def tp_link(self, tp: int) -> tuple[float, float]:
        """(bytes/s, seconds) of the slowest link a ring of ``tp`` GPUs crosses: the node's
        fast link while the ring fits in one node, the inter-node network beyond."""
        if tp <= self.node_gpus:
            return self.link_bw, self.link_latency_s
        return self.net_bw, self.net_latency_s


_MIB = 2**20

# mem_bytes, as the device reports it (see GPUSpec). Sources, newest driver we found:
# - a100-80gb: 85,100,068,864 B (81,158 MiB), CUDA deviceQuery on A100-SXM4-80GB, driver
#   12.5 (github.com/thamada/nvidia-smi, gls/A100SXMx4_deviceQuery.py); nvidia-smi: 81920MiB.
# - h100-sxm: 85,045,477,376 B (81,106 MiB), deviceQuery on H100 80GB HBM3, driver 12.7
#   (same repository, nvsim/H100SXMx8_deviceQuery.py); nvidia-smi: 81559MiB. vLLM's own
#   log on an H100 says "total_gpu_memory 79.22GiB" (vllm-project/vllm PR 10511): the
#   driver's share moves by a few tens of MiB between driver versions.
# - h200: 143,156 MiB, torch.cuda.get_device_properties() "total_memory=143156MB" (torch
#   prints MiB as "MB") in a public vLLM-on-Modal script; nvidia-smi: 143771MiB.
# - l40s: 47,803,596,800 B (45,589 MiB), deviceQuery, driver 12.4 (thamada/nvidia-smi,
#   nvsim/L40S_deviceQuery.py), the same as torch's "total_memory=45589MB"; nvidia-smi: 46068MiB.
# - b200: 182,642 MiB, torch "total_memory=182642MB" (same script as the H200; another
#   public run shows 182631MB); nvidia-smi: 183359MiB.
# - mi300x: 196,592 MiB, HIP "Total Global Memory (MB) 196592" (thamada/nvidia-smi,
#   package/MI300X_deviceQuery.py), the same as torch's "total_memory=196592MB" on ROCm.
# - h100-pcie: 81,008 MiB, torch "total_memory=81008MB" printed by
#   get_device_properties() on an "NVIDIA H100 PCIe" (torch 2.0.1, in a public script's
#   comments); nvidia-smi: 81559MiB.
# - h100-nvl: 99,861,594,112 B (95,235 MiB), deviceQuery on two "NVIDIA H100 NVL", driver
#   12.4 (thamada/nvidia-smi, gls/H100NVLx2_deviceQuery.py).
# - h20: 97,285 MiB, torch "total_memory=97285MB" on an "NVIDIA H20" (78 SMs), quoted in
#   the comments of several public Triton attention kernels.
# - gb200: no public torch or deviceQuery print found. nvidia-smi shows 189471MiB on
#   GB200 NVL72 trays (several public logs, driver 580); derived with the B200's gap
#   between nvidia-smi and torch (183,359 - 182,642 = 717 MiB, the same Blackwell driver):
#   189,471 - 717 = 188,754 MiB.
# - b300: nvidia-smi shows 275040MiB on an "NVIDIA B300 SXM6 AC" (driver 580; a public
#   B300 characterisation's spec card, and the memory AIConfigurator's b300_sxm.yaml
#   records); no torch print found, so derived as the GB200's: 275,040 - 717 = 274,323 MiB.
# - gb300: nvidia-smi shows 284208MiB (AIConfigurator's gb300.yaml, the tables' own system
#   file: the full part, no memory controller fused off); derived as the GB200's:
#   284,208 - 717 = 283,491 MiB.
# - mi325x: no public print found; derived as the MI300X's: 256 GiB of HBM3E less the
#   16 MiB the MI300X reports under its 192 GiB (196,608 - 196,592): 262,128 MiB.
# - l4: 23,570,219,008 B (22,478 MiB), deviceQuery on an "NVIDIA L4", driver 12.4
#   (thamada/nvidia-smi, gls/L4_deviceQuery.py); nvidia-smi: 23034MiB.
# - a10g: 22,587 MiB, torch "total_memory=22587MB" on an "NVIDIA A10G" (80 SMs) in a
#   public issue's environment print; nvidia-smi: 23028MiB on the A10.
#
# flops, fp8_flops and fp4_flops are dense (without sparsity; datasheets halve their
# sparse headline figures): H100 SXM and H200 1,979 TFLOP/s FP8, L40S 733, B200 4,500
# FP8 and 9,000 FP4 (HGX B200: 72 / 144 PFLOPS FP8 / FP4 with sparsity for 8 GPUs),
# MI300X 2,615; A100 has no FP8 tensor cores.
# - h100-pcie (H100 datasheet, PCIe column: 1,513 BF16 and 3,026 FP8 with sparsity):
#   756.5 TFLOP/s BF16, 1,513 FP8, HBM2e 2.0 TB/s.
# - h100-nvl (H100 NVL column: 1,671 BF16 and 3,341 FP8 with sparsity): 835.5 BF16,
#   1,670.5 FP8, HBM3 3.9 TB/s, 94 GB.
# - h20 (HGX H20 product brief): 148 BF16, 296 FP8, HBM3 4.0 TB/s, 96 GB, NVLink
#   900 GB/s.
# - gb200 (GB200 NVL72 datasheet, per rack of 72 GPUs, with sparsity: 360 PF BF16, 720 PF
#   FP8, 1,440 PF FP4; HBM3E 576 TB/s): per GPU dense 2,500 BF16, 5,000 FP8, 10,000 FP4,
#   8 TB/s. NVLink 5: 1.8 TB/s per GPU both ways (900 GB/s each), all 72 GPUs of the rack
#   in one NVLink domain. Host link: NVLink-C2C to its Grace, 900 GB/s both ways.
# - b300 (HGX B300 / Blackwell Ultra datasheet: 36 PF BF16 and 72 PF FP8 with sparsity per
#   8 GPUs, FP4 14 PF dense per GPU; 288 GB HBM3E, 62 TB/s per 8 GPUs): per GPU dense 2,250
#   BF16, 4,500 FP8, 14,000 FP4, 7.75 TB/s. NVLink 5 as the B200's.
# - gb300 (GB300 NVL72 / Blackwell Ultra datasheet, per GPU, dense): 2,500 BF16, 5,000 FP8,
#   15,000 FP4, 8 TB/s (576 TB/s for the rack's 72); links as the GB200's.
# - mi325x (AMD Instinct MI325X datasheet): 1,307.4 BF16, 2,614.9 FP8 (dense), HBM3E
#   6 TB/s, 256 GB; Infinity Fabric as the MI300X's (896 GB/s peer to peer); no FP4.
# - l4 (L4 datasheet): 121 BF16 and 242.5 FP8 (242 / 485 with sparsity), GDDR6 300 GB/s,
#   24 GB, PCIe Gen4 x16 (64 GB/s both ways), no NVLink.
# - a10g: NVIDIA publishes no A10G datasheet; 600 GB/s GDDR6 and 24 GB as the A10's, and
#   70 TFLOP/s BF16 tensor (the A10's is 125) from Baseten's A10 vs A10G comparison.
#   No FP8 tensor cores (Ampere): FP8 weights run weight-only there.
#
# node_gpus: 8 per HGX/DGX (SXM) board or MI300X platform; 8 per typical L40S PCIe server,
# where the "fast" link is PCIe 4.0 x16 (no NVLink). net_bw: one 400 Gb/s InfiniBand NDR
# or RoCE NIC per GPU (50e9 B/s) on H100, H200, B200 and MI300X systems; one 200 Gb/s HDR
# NIC per GPU on DGX A100 (25e9 B/s); about 100 Gb/s per GPU (12.5e9 B/s) on an L40S
# server with a 200 Gb/s NIC per two GPUs. 20 µs per all-reduce step across the network.
# - h100-pcie: 8 per PCIe server, PCIe Gen5 x16 (64 GB/s each way) between GPUs; the
#   network as the L40S server's (no reference system).
# - h100-nvl: NVLink bridges join the cards in pairs only (600 GB/s both ways, 300 each),
#   so node_gpus is the pair; a ring over more GPUs crosses PCIe and is priced at the
#   network's figure, as the L40S server's (no reference system).
# - h20: 8 per HGX H20 board, NVLink 450 GB/s each way, a 400 Gb/s NIC per GPU.
# - gb200: the NVL72 rack's 72 GPUs share NVLink 5 (900 GB/s each way); a 400 Gb/s
#   ConnectX-7 NIC per GPU (4 per 4-GPU compute tray). host_bw is NVLink-C2C (450 GB/s
#   each way), which a host KV tier in Grace memory uses instead of PCIe.
# - mi325x: 8 per platform, as the MI300X.
# - b300: 8 per HGX B300 board, a ConnectX-8 800 Gb/s NIC per GPU (100e9 B/s). The GPU's
#   own PCIe link is Gen 6, but DGX B300's Xeon 6776P hosts are Gen 5, which is what a
#   public B300 characterisation measured: host_bw as the B200's.
# - gb300: one NVL72 NVLink domain as the GB200's, NVLink-C2C to its Grace, a ConnectX-8
#   800 Gb/s NIC per GPU (100e9 B/s).
# - l4: 8 per Google Cloud g2-standard-96 (PCIe Gen4, 100 Gb/s for the machine:
#   12.5e9 / 8 per GPU).
# - a10g: 8 per AWS g5.48xlarge (PCIe Gen4, 100 Gb/s for the instance: 12.5e9 / 8 per
#   GPU).
GPUS: dict[str, GPUSpec] = {
    "a100-80gb": GPUSpec("a100-80gb", 312e12, 2.039e12, 85_100_068_864, 300e9, 8e-6, 32e9,
                         8, 25e9, 20e-6),
    "h100-sxm": GPUSpec("h100-sxm", 989e12, 3.35e12, 85_045_477_376, 450e9, 8e-6, 64e9,
                        8, 50e9, 20e-6, 1979e12),
    "h200": GPUSpec("h200", 989e12, 4.8e12, 143_156 * _MIB, 450e9, 8e-6, 64e9, 8, 50e9, 20e-6,
                    1979e12),
    "l40s": GPUSpec("l40s", 362e12, 0.864e12, 47_803_596_800, 32e9, 20e-6, 32e9,
                    8, 12.5e9, 20e-6, 733e12),
    "b200": GPUSpec("b200", 2250e12, 8.0e12, 182_642 * _MIB, 900e9, 6e-6, 64e9, 8, 50e9, 20e-6,
                    4500e12, fp4_flops=9000e12),
    "mi300x": GPUSpec("mi300x", 1307e12, 5.3e12, 196_592 * _MIB, 448e9, 10e-6, 64e9,
                      8, 50e9, 20e-6, 2615e12),
    "h100-pcie": GPUSpec("h100-pcie", 756.5e12, 2.0e12, 81_008 * _MIB, 64e9, 20e-6, 64e9,
                         8, 12.5e9, 20e-6, 1513e12),
    "h100-nvl": GPUSpec("h100-nvl", 835.5e12, 3.9e12, 99_861_594_112, 300e9, 8e-6, 64e9,
                        2, 12.5e9, 20e-6, 1670.5e12),
    "h20": GPUSpec("h20", 148e12, 4.0e12, 97_285 * _MIB, 450e9, 8e-6, 64e9, 8, 50e9, 20e-6,
                   296e12),
    "gb200": GPUSpec("gb200", 2500e12, 8.0e12, 188_754 * _MIB, 900e9, 6e-6, 450e9,
                     72, 50e9, 20e-6, 5000e12, fp4_flops=10000e12),
    "b300": GPUSpec("b300", 2250e12, 7.75e12, 274_323 * _MIB, 900e9, 6e-6, 64e9, 8, 100e9,
                    20e-6, 4500e12, fp4_flops=14000e12),
    "gb300": GPUSpec("gb300", 2500e12, 8.0e12, 283_491 * _MIB, 900e9, 6e-6, 450e9,
                     72, 100e9, 20e-6, 5000e12, fp4_flops=15000e12),
    "mi325x": GPUSpec("mi325x", 1307.4e12, 6.0e12, 262_128 * _MIB, 448e9, 10e-6, 64e9,
                      8, 50e9, 20e-6, 2614.9e12),
    "l4": GPUSpec("l4", 121e12, 0.3e12, 23_570_219_008, 32e9, 20e-6, 32e9, 8, 1.5625e9, 20e-6,
                  242.5e12),
    "a10g": GPUSpec("a10g", 70e12, 0.6e12, 22_587 * _MIB, 32e9, 20e-6, 32e9, 8, 1.5625e9,
                    20e-6),
}


# Host (CPU) memory installed in one node of node_gpus GPUs, GiB: the default ceiling of a
# host KV tier (serving.kv_offload.cpu_gb x GPUs on the node; hardware.host_memory_gb
# overrides it). A DIMM "TB" is a binary one (32 x 64 GB DIMMs = 2048 GiB).
# - a100-80gb, h100-sxm, h200, b200: 2 TB of system memory in NVIDIA's DGX A100 (640 GB),
#   DGX H100, DGX H200 and DGX B200 user guides (B200: 32 DIMMs, upgradable to 4 TB).
# - b300: 2 TB assumed, as the DGX B200 (8-GPU HGX B300 servers carry 2 to 4 TB).
# - gb300: as the GB200 NVL72 rack, a Grace per two GPUs (17,280 GiB for 72); assumed the
#   same 480 GB a Grace.
# - mi300x: no vendor reference system; 2 TB assumed, as the 8-GPU HGX-class servers above.
# - l40s: no reference system either; 1 TB assumed for a typical 8-GPU PCIe server.
# - h100-pcie: 1 TB assumed, as the L40S server; h100-nvl: a quarter of that per NVLink
#   pair (its node), 256 GiB. h20, mi325x: 2 TB assumed, as the HGX-class servers above.
# - gb200: 480 GB of LPDDR5X per Grace CPU (GB200 NVL72 datasheet), one Grace per two
#   GPUs: 36 x 480 = 17,280 GiB per 72-GPU rack (a GPU's own Grace holds 240 GiB of it).
# - l4: 384 GB on a g2-standard-96; a10g: 768 GiB on a g5.48xlarge (cloud machine pages).
# The operating system and the serving process need some of it; set host_memory_gb to
# what a tier may really take.
NODE_HOST_MEMORY_GIB: dict[str, float] = {
    "a100-80gb": 2048.0, "h100-sxm": 2048.0, "h200": 2048.0, "b200": 2048.0,
    "mi300x": 2048.0, "l40s": 1024.0, "h100-pcie": 1024.0, "h100-nvl": 256.0, "h20": 2048.0,
    "gb200": 17280.0, "mi325x": 2048.0, "l4": 384.0, "a10g": 768.0, "b300": 2048.0,
    "gb300": 17280.0,
}


def weight_only(model: ModelSpec, gpu: GPUSpec) -> bool:
    """Whether ``model``'s FP8 weights run weight-only on ``gpu``: dequantised to bf16 for
    each GEMM, at bf16 FLOP/s, because the GPU has no FP8 tensor cores; or its 4-bit
    weights (projections' or experts'), by :func:`dtype_weight_only`."""
    if model.dtype in FP8_WEIGHTS and not gpu.fp8_flops:
        return True
    return any(dtype_weight_only(d, gpu) for d in (model.dtype, model.expert_dtype,
                                                   model.qkv_dtype)
               if d in FOUR_BIT_WEIGHTS)


def dtype_weight_only(dtype: str, gpu: GPUSpec) -> bool:
    """Whether GEMMs on weights of ``dtype`` run weight-only on ``gpu`` (the packed weights
    read, dequantised and multiplied at bf16 FLOP/s).

    int4 always does (vLLM's GPTQ/AWQ Marlin kernels are w4a16). So does mxfp4: vLLM runs
    gpt-oss's mxfp4 experts with bf16 activations on every GPU, a Triton kernel on Hopper
    and FlashInfer's TRT-LLM "mxfp4_bf16" kernel on Blackwell (the kernel sources of
    AIConfigurator's vLLM 0.24.0 MoE tables on H200 and B200), not on FP4 tensor cores.
    nvfp4 (W4A4) runs on FP4 tensor cores where the GPU has them and weight-only through
    Marlin elsewhere (``is_fp4_marlin_supported``: compute capability 8.0, every NVIDIA
    GPU here); FP8 weight-only where the GPU has no FP8 tensor cores."""
    if dtype in ("int4", "mxfp4"):
        return True
    if dtype == "nvfp4":
        return not gpu.fp4_flops
    return dtype in FP8_WEIGHTS and not gpu.fp8_flops



def check_dtype(model: ModelSpec, gpu: GPUSpec) -> None:
    """Refuse a weight dtype vLLM cannot run on ``gpu`` at all: NVFP4 on the AMD MI300X.
    vLLM runs NVFP4 checkpoints (ModelOpt, compressed-tensors) on NVIDIA GPUs only, natively
    on Blackwell and through Marlin from compute capability 8.0; its ROCm platform lists
    neither quantisation among those it supports (MXFP4, GPTQ and AWQ it does list)."""
    for key in ("dtype", "expert_dtype", "qkv_dtype"):
        if getattr(model, key) == "nvfp4" and gpu.name.startswith("mi"):
            raise ServesimError(
                f"got 'nvfp4': {gpu.name} has no FP4 tensor cores and vLLM's weight-only FP4 "
                "(Marlin) kernels are CUDA-only; use mxfp4, int4 or fp8 weights there, or an "
                "NVIDIA GPU", where=f"model.{key}")



def model_preset(name: str) -> ModelSpec:
    """The preset called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ServesimError(
            f"unknown model preset {name!r}; valid: {', '.join(sorted(MODELS))}"
        ) from None


def gpu(name: str) -> GPUSpec:
    """The GPU called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return GPUS[name]
    except KeyError:
        raise ServesimError(f"unknown gpu {name!r}; valid: {', '.join(sorted(GPUS))}") from None

