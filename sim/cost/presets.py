"""Model presets: each family's public ``config.json`` dimensions, by name."""

from __future__ import annotations

import dataclasses

from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


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
# 14B) is left out of the weights: vLLM loads it only as a speculative drafter (method
# mtp, mtp_layers 1). DeepSeek-R1 is the same
# shape (its config.json differs only in transformers_version).
MODELS["deepseek-v3"] = _llama(
    name="deepseek-v3", layers=61, hidden=7168, heads=128, kv_heads=128, head_dim=192,
    intermediate=18432, vocab=129280, dtype="fp8-block", max_context=163840,
    rope_theta=10000.0, experts=256, experts_per_token=8, expert_intermediate=2048,
    shared_experts=1, dense_layers=3, kv_lora_rank=512, q_lora_rank=1536,
    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, mtp_layers=1)
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
# FP8 here). Its multi-token-prediction layer is left out of the weights and drafts
# under method mtp, as DeepSeek-V3's.
MODELS["glm-5"] = _llama(
    name="glm-5", layers=78, hidden=6144, heads=64, kv_heads=64, head_dim=256,
    intermediate=12288, vocab=154880, dtype="fp8-block", max_context=202752,
    rope_theta=1000000.0, experts=256, experts_per_token=8, expert_intermediate=2048,
    shared_experts=1, dense_layers=3, kv_lora_rank=512, q_lora_rank=2048,
    qk_rope_head_dim=64, qk_nope_head_dim=192, v_head_dim=256, index_topk=2048,
    index_n_heads=32, index_head_dim=128, mtp_layers=1)
# Kimi-K2.5 (sim/data/models/kimi-k2.5/config.json, its text_config): DeepSeek-V3's
# layout at 64 heads and 384 routed experts, one dense layer first. Released with its
# routed experts quantised to 4-bit integers (compressed-tensors, groups of 32) and
# attention, shared expert, dense MLP and LM head in bf16, so the preset's expert_dtype
# is int4 (priced at 4.125 bits a weight, groups of 128: 4.5 with Kimi's groups of 32,
# 7% more expert bytes) and its shared expert counted with the routed ones (int4; bf16
# in the release: 2.6B weights). The vision tower is not modelled; the release ships no
# multi-token-prediction module (num_nextn_predict_layers 0).
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
# modules (use_mtp, num_mtp_modules) are left out, and method mtp is refused for it
# (mtp_layers 0): vLLM's MTP drafters (its MTP model types: DeepSeek's, GLM's, Qwen3-Next's
# and Qwen3.5's, MiMo's, ...) have no MiniMax-M2 one. The rotary embedding turns 64 of
# each head's 128 elements (rotary_dim).
MODELS["minimax-m2.5"] = _llama(
    name="minimax-m2.5", layers=62, hidden=3072, heads=48, kv_heads=8, head_dim=128,
    intermediate=1536, vocab=200064, dtype="fp8-block", max_context=196608,
    rope_theta=5000000.0, experts=256, experts_per_token=8, expert_intermediate=1536,
    layer_qk_norm=True, rope_dim=64)
# Qwen3.5 (sim/data/models/qwen3.5-*/config.json, their text_config): every fourth layer
# softmax attention (head size 256, a sigmoid gate on its output, 2 to 4 KV heads), the
# other three Gated DeltaNet (16 key heads and 32 to 64 value heads of 128, a 4-wide
# convolution, an fp32 state). The MoE releases route to 8 or 10 of 256 or 512 experts
# plus one shared expert of the same width in every layer. Left out as for DeepSeek-V3:
# the multi-token-prediction layer (mtp_num_hidden_layers 1; it drafts under method mtp)
# and the vision tower. The
# rotary embedding turns a quarter of each head (partial_rotary_factor 0.25): 64.
_QWEN35 = dict(head_dim=256, vocab=248320, max_context=262144, rope_theta=10000000.0,
               linear_key_heads=16, linear_key_dim=128, linear_value_dim=128, linear_conv=4,
               attn_output_gate=True, rope_dim=64, mtp_layers=1)
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


def model_preset(name: str) -> ModelSpec:
    """The preset called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ServesimError(
            f"unknown model preset {name!r}; valid: {', '.join(sorted(MODELS))}"
        ) from None
