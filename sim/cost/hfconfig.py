"""A :class:`sim.cost.specs.ModelSpec` from a HuggingFace ``config.json``, with no weights.

The simulator (``model: {hf_config: PATH}`` in a scenario) and the calibrator
(``--hf-config``) both read configs here, so a model is described by one table whichever
side reads it. Decoders of the Llama shape are modelled: attention (grouped query heads,
rotary positions) and per layer a SwiGLU MLP or a mixture of SwiGLU experts (mixtral,
qwen3_moe); DeepSeek-V2/V3 (deepseek_v2, deepseek_v3) add multi-head latent attention
and shared experts; other mixture-of-experts families are a clear error. A
``quantization_config`` with FP8 weights (``quant_method`` fp8, compressed-tensors float8
or ModelOpt FP8) sets the weights' dtype: ``fp8-block`` when its scales are per block,
``fp8`` otherwise; any other quantisation is an error naming it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.files import read_text

# HuggingFace model_type values whose layers are the dense Llama shape servesim models.
# qwen3 is dense Qwen3 (Qwen3ForCausalLM): no QKV bias, an explicit head_dim, attention
# wider than the residual stream (Qwen3-32B: 64 heads x 128 = 8192 > 5120). Its per-head
# q/k RMSNorms (2 x head_dim weights a layer) are left out: a few KB of a 65 GB model.
SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe",
                      "deepseek_v2", "deepseek_v3")
# Mixture-of-experts families: the config keys of (experts, experts per token, expert
# width); Mixtral's intermediate_size is its experts' width.
MOE_KEYS = {"mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
            "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "deepseek_v2": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "deepseek_v3": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size")}
# Families with multi-head latent attention: DeepSeek's config keys, read as they are named.
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3")
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# Families whose config omits attention_bias and whose QKV projections carry a bias.
_QKV_BIAS_BY_DEFAULT = ("qwen2",)
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")


def from_hf_config(path: Path) -> ModelSpec:
    """A :class:`ModelSpec` from the HuggingFace ``config.json`` at ``path`` (llama,
    mistral, qwen2, qwen3); anything else, or a mixture-of-experts config, is an error."""
    src = str(path)
    text = read_text(path, "HuggingFace config.json")
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServesimError(f"not valid JSON: {exc}", source=src) from None
    if not isinstance(cfg, dict):
        raise ServesimError("expected a JSON object", source=src)
    family = cfg.get("model_type")
    moe = [k for k in _MOE_KEYS if k in cfg]
    if family not in SUPPORTED_FAMILIES:
        why = " (its mixture-of-experts or attention layers are not modelled yet)" if moe \
            else ""
        raise ServesimError(
            f"unsupported model_type {family!r}{why}; supported: {', '.join(SUPPORTED_FAMILIES)}",
            source=src, where="model_type")
    if moe and family not in MOE_KEYS:
        raise ServesimError(f"mixture-of-experts layers in a {family} config are not "
                            f"modelled; MoE families: {', '.join(MOE_KEYS)}", source=src,
                            where=moe[0])

    def get(key: str, default: Any = None) -> Any:
        value = cfg.get(key, default)
        if value is None:
            raise ServesimError("required key is missing", source=src, where=key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ServesimError(f"got {value!r}, expected a number", source=src, where=key)
        return value

    def count(key: str, default: Any = None) -> int:
        value = get(key, default)
        if value != int(value):
            raise ServesimError(f"got {value!r}, expected a whole number", source=src,
                                where=key)
        return int(value)

    dtype = _weights_dtype(cfg.get("quantization_config"), src) or _TORCH_DTYPES.get(
        str(cfg.get("torch_dtype")), "bf16")
    moe_fields = _moe_fields(cfg, family, count, src)
    hidden = count("hidden_size")
    heads = count("num_attention_heads")
    mla = _mla_fields(cfg, family, count)
    # Qwen3 (and some Mistral configs) give head_dim; otherwise it is hidden / heads. With
    # latent attention it is the query/key head size, no-rope plus rotary part.
    head_dim = (mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"] if mla
                else count("head_dim") if cfg.get("head_dim")
                else (hidden // heads if heads else 0))
    try:
        return ModelSpec(
            layers=count("num_hidden_layers"),
            hidden=hidden,
            heads=heads,
            kv_heads=count("num_key_value_heads", heads),
            head_dim=head_dim,
            intermediate=count("intermediate_size"),
            vocab=count("vocab_size"),
            dtype=dtype,  # type: ignore[arg-type]
            max_context=count("max_position_embeddings", 8192),
            rope_theta=float(get("rope_theta", 10000.0)),
            qkv_bias=bool(cfg.get("attention_bias", family in _QKV_BIAS_BY_DEFAULT)),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            name=str(cfg.get("_name_or_path") or path.parent.name or family),
            **moe_fields,  # type: ignore[arg-type]
            **mla,  # type: ignore[arg-type]
        )
    except ServesimError as exc:
        raise exc.located(source=src) from None


def _moe_fields(cfg: dict[str, Any], family: Any, count: Any, src: str) -> dict[str, int]:
    """The mixture-of-experts fields of a :class:`ModelSpec` for a MoE ``family`` (empty
    for a dense one); layouts servesim does not model are errors naming the key."""
    if family not in MOE_KEYS:
        return {}
    n_key, k_key, width_key = MOE_KEYS[family]
    dense = 0
    if family == "qwen3_moe":
        step = cfg.get("decoder_sparse_step", 1)
        if step != 1:
            raise ServesimError(f"got {step!r}: only every layer a mixture of experts (1) is "
                                "modelled", source=src, where="decoder_sparse_step")
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or sorted(only) != list(range(len(only))):
            raise ServesimError(f"got {only!r}: dense layers are modelled only as the first "
                                "ones (0, 1, ...)", source=src, where="mlp_only_layers")
        dense = len(only)
    shared = 0
    if family in MLA_FAMILIES:
        freq = cfg.get("moe_layer_freq", 1)
        if freq != 1:
            raise ServesimError(f"got {freq!r}: only every layer after the first dense ones a "
                                "mixture of experts (1) is modelled", source=src,
                                where="moe_layer_freq")
        dense = count("first_k_dense_replace", 0)
        shared = count("n_shared_experts", 0)
    return {"experts": count(n_key), "experts_per_token": count(k_key),
            "expert_intermediate": count(width_key), "dense_layers": dense,
            "shared_experts": shared}


def _mla_fields(cfg: dict[str, Any], family: Any, count: Any) -> dict[str, int]:
    """The latent-attention fields of a DeepSeek-V2/V3 config (empty for other families);
    ``q_lora_rank`` null (DeepSeek-V2-Lite: one q_proj) is 0. ``num_nextn_predict_layers``
    (the multi-token-prediction layers) is not read: vLLM loads them only as a
    speculative drafter, so they are no part of the served model."""
    if family not in MLA_FAMILIES:
        return {}
    fields = {key: count(key) for key in MLA_KEYS if key != "q_lora_rank"}
    fields["q_lora_rank"] = count("q_lora_rank") if cfg.get("q_lora_rank") is not None else 0
    return fields


def _weights_dtype(quant: Any, src: str) -> str | None:
    """The weights' dtype a ``quantization_config`` gives (None when there is none); a
    quantisation servesim does not model is an error naming its method."""
    if quant is None:
        return None
    where = "quantization_config"
    if not isinstance(quant, dict):
        raise ServesimError(f"got {quant!r}, expected a mapping", source=src, where=where)
    method = quant.get("quant_method")
    if method == "fp8":
        return "fp8-block" if quant.get("weight_block_size") else "fp8"
    if method == "modelopt" and str(quant.get("quant_algo", "")).upper() == "FP8":
        return "fp8"
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        weights = [g.get("weights") for g in groups.values()
                   if isinstance(g, dict)] if isinstance(groups, dict) else []
        dicts = [w for w in weights if isinstance(w, dict)]
        if dicts and len(dicts) == len(weights) and all(
                w.get("type") == "float" and w.get("num_bits") == 8 for w in dicts):
            blocks = any(w.get("strategy") == "block" for w in dicts)
            return "fp8-block" if blocks else "fp8"
    what = f"{method!r}" + (f" ({quant.get('quant_algo')})" if "quant_algo" in quant else "")
    raise ServesimError(f"quantisation {what} is not modelled; servesim models FP8 weights "
                        "(quant_method fp8, compressed-tensors float8, modelopt FP8)",
                        source=src, where=f"{where}.quant_method")
