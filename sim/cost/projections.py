"""Projection-weight counts of a model's layers: the arithmetic a whole model
(:class:`sim.cost.specs.ModelSpec`) and one GPU's shard of it
(:class:`sim.cost.shard.Shard`) share.
"""

from __future__ import annotations

from sim.cost.dtypes import INDEX_SCALE_BLOCK, packed_bytes


class Projections:
    """Projection-weight counts (elements) of a model's layers, from the dimensions a
    :class:`~sim.cost.specs.ModelSpec` (whole model) and a
    :class:`~sim.cost.shard.Shard` (one GPU's share) both have: the same arithmetic
    serves both."""

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

    def weights_bytes(self, params: int, per: float, expert_per: float, qkv_per: float,
                      act: int) -> int:
        """Bytes of ``params`` weights whose projections (:attr:`stack_params`) are priced
        by :meth:`stack_bytes` and the rest (biases, sinks, norms, routers, embedding and
        LM head) at ``act`` bytes each."""
        return self.stack_bytes(per, expert_per, qkv_per) + (params - self.stack_params) * act

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
