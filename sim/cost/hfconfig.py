"""A :class:`sim.cost.specs.ModelSpec` from a HuggingFace ``config.json``, with no weights.

The simulator (``model: {hf_config: PATH}`` in a scenario) and the calibrator
(``--hf-config``) both read configs here, so a model is described by one table whichever
side reads it. Decoders of the Llama shape are modelled: attention (grouped query heads,
rotary positions; sliding windows from ``sliding_window`` and ``layer_types``; gpt-oss's
attention sinks) and per layer a SwiGLU MLP or a mixture of SwiGLU experts (mixtral,
qwen3_moe, gpt_oss, minimax_m2); DeepSeek-V2/V3 (deepseek_v2, deepseek_v3) add multi-head latent
attention and shared experts, DeepSeek-V3.2 and GLM-5 (deepseek_v32, glm_moe_dsa) its sparse
form; Qwen3-Next and Qwen3.5 (qwen3_next; qwen3_5 and qwen3_5_moe,
whose language model is their ``text_config``) add Gated DeltaNet layers, a gated
attention output and one shared expert; other mixture-of-experts families are a clear
error. A
``quantization_config`` sets the weights' dtype: FP8 (``quant_method`` fp8,
compressed-tensors float8 or ModelOpt FP8: ``fp8-block`` when its scales are per block,
``fp8`` otherwise) or 4-bit (mxfp4; ModelOpt NVFP4 and compressed-tensors 4-bit floats:
nvfp4; 4-bit awq, gptq and compressed-tensors integers: int4). One that leaves the
attention unconverted (gpt-oss's mxfp4) sets the experts' dtype only. Any other
quantisation is an error naming it. What each family adds to the Llama shape is read by
:mod:`sim.cost.hffamilies`.
"""


from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from sim.configtools import (
    DuplicateKeyError,
    is_number,
    load_json,
    refuse_half_character,
    whole_count,
)
from sim.cost.hffamilies import (
    GDN_KEYS,
    MOE_KEYS,
    attention_fields,
    config_flag,
    gdn_fields,
    mla_fields,
    moe_fields,
)
from sim.cost.hfoverrides import apply_overrides, check_levels
from sim.cost.hfquant import checkpoint_fp8_kv, unquantised_attention, weights_dtype
from sim.cost.rope import derived_context
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.files import read_text, too_deep

# HuggingFace model_type values whose layers are the dense Llama shape servesim models.
# qwen3 is dense Qwen3 (Qwen3ForCausalLM): no QKV bias, an explicit head_dim, attention
# wider than the residual stream (Qwen3-32B: 64 heads x 128 = 8192 > 5120). Its per-head
# q/k RMSNorms (2 x head_dim weights a layer) are left out: a few KB of a 65 GB model.
SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gpt_oss",
                      "deepseek_v2", "deepseek_v3", "kimi_k2", "minimax_m2", "qwen3_next",
                      "qwen3_5_text", "qwen3_5_moe_text", "deepseek_v32", "glm_moe_dsa")
# Multimodal wrappers whose language model is a supported family in ``text_config``
# (Kimi-K2.5: a DeepSeek-V3-shaped kimi_k2 decoder beside a vision tower, which is not
# modelled: text requests never run it).
WRAPPERS = ("kimi_k25", "qwen3_5", "qwen3_5_moe")
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# Families whose config omits attention_bias and whose QKV projections carry a bias.
_QKV_BIAS_BY_DEFAULT = ("qwen2",)
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# head_dim where a family's HF config class has a default of its own for an absent key:
# GptOssConfig's is 64 (hidden / heads would give 2880 / 64 = 45); null still means
# hidden / heads there, as HF reads it.
_HEAD_DIM_DEFAULTS = {"gpt_oss": 64}
_SPEC_FIELDS = frozenset(ModelSpec.__dataclass_fields__)


# The model spec's fields a config key sets under another name, for its errors.
FIELD_KEYS = {"dense_layers": "first_k_dense_replace", **GDN_KEYS}


def _in_wrapper(exc: ServesimError, src: str, cfg: dict[str, Any], inner: str,
                inherited: frozenset[str]) -> ServesimError:
    """``exc`` with its key named as the file spells it: under ``text_config.`` when the
    language model's config is a wrapper's (a Qwen3.5 config has no num_hidden_layers
    at its top level). Left as it is: another file's error, a key the wrapper's own
    level gave (its quantization_config), and a ModelSpec field that no config key
    spells (layers, hidden)."""
    where = exc.where or ""
    root = where.split(".")[0].split("[")[0]
    if (not inner or exc.source != src or not root or root in inherited
            or where.startswith(inner) or (root in _SPEC_FIELDS and root not in cfg)):
        return exc
    return ServesimError(exc.message, src, inner + where)


def _read(path: Path, overrides: dict[str, Any] | None = None
          ) -> tuple[dict[str, Any], str, str, str, frozenset[str]]:
    """The language model's config in the ``config.json`` at ``path`` (``overrides``
    applied first, as vLLM's ``--hf-overrides``; unwrapped from a multimodal wrapper, its
    quantisation config kept), the path as errors name it, its ``model_type``,
    checked to be a family (and, with experts, a MoE family) servesim models, and where
    its keys sit in the file ("text_config." in a wrapper, else "") and the keys read
    from beside a wrapper's text_config."""
    src = str(path) if overrides is None else f"{path} with hf_overrides"
    text = read_text(path, "HuggingFace config.json")
    try:
        cfg = load_json(text)
    except json.JSONDecodeError as exc:
        raise ServesimError(f"not valid JSON: {exc}", source=src) from None
    except RecursionError:
        raise too_deep(src, "HuggingFace config.json") from None
    except DuplicateKeyError as exc:
        raise ServesimError("given twice in one object (which value is meant?)", source=src,
                            where=str(exc)) from None
    if not isinstance(cfg, dict):
        raise ServesimError("expected a JSON object", source=src)
    refuse_half_character(text, cfg, src)
    if overrides is not None:
        cfg = apply_overrides(cfg, overrides)
        wrapper = cfg.get("model_type")
        check_levels(overrides, wrapper if wrapper in WRAPPERS else None, src)
    cfg = _compression_as_quantization(cfg)
    if cfg.get("model_type") in WRAPPERS and not isinstance(cfg.get("text_config"), dict):
        raise ServesimError(f"got {cfg.get('text_config')!r}: model_type "
                            f"{cfg.get('model_type')!r} wraps its language model's config "
                            "in text_config, a mapping", source=src, where="text_config")
    inner = ""  # where the language model's keys are, as errors name them
    inherited: frozenset[str] = frozenset()
    if cfg.get("model_type") in WRAPPERS:
        # A quantised release keeps its quantization_config beside the wrapper's configs.
        quant = cfg.get("quantization_config")
        cfg = _compression_as_quantization(dict(cfg["text_config"]))
        inner = "text_config."
        if quant is not None and cfg.get("quantization_config") not in (None, quant):
            raise ServesimError("a quantization_config at the top level and another in "
                                "text_config: which one the checkpoint's weights use is not "
                                "said; give one", source=src,
                                where="text_config.quantization_config")
        if quant is not None and "quantization_config" not in cfg:
            cfg["quantization_config"] = quant
            inherited = frozenset({"quantization_config"})
    family = cfg.get("model_type")
    moe = [k for k in _MOE_KEYS if k in cfg]
    if family not in SUPPORTED_FAMILIES:
        why = " (its mixture-of-experts or attention layers are not modelled yet)" if moe \
            else ""
        raise ServesimError(
            f"unsupported model_type {family!r}{why}; supported: {', '.join(SUPPORTED_FAMILIES)}",
            source=src, where=f"{inner}model_type")
    if moe and family not in MOE_KEYS:
        raise ServesimError(f"mixture-of-experts layers in a {family} config are not "
                            f"modelled; MoE families: {', '.join(MOE_KEYS)}", source=src,
                            where=f"{inner}{moe[0]}")
    return cfg, src, family, inner, inherited


def _compression_as_quantization(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its ``compression_config`` (compressed-tensors' older name) read as
    ``quantization_config`` where that is absent, as vLLM falls back to it."""
    if cfg.get("quantization_config") is None and cfg.get("compression_config") is not None:
        return {**cfg, "quantization_config": cfg["compression_config"]}
    return cfg


def from_hf_config(path: Path, overrides: dict[str, Any] | None = None) -> ModelSpec:
    """A :class:`ModelSpec` from the HuggingFace ``config.json`` at ``path`` (one of
    :data:`SUPPORTED_FAMILIES`), with vLLM-style ``overrides`` applied to it first
    (:mod:`sim.cost.hfoverrides`); anything else, or a mixture-of-experts config of
    another family, is an error."""
    cfg, src, family, inner, inherited = _read(path, overrides)
    try:
        return _model_spec(path, cfg, src, family)
    except ServesimError as exc:
        raise _in_wrapper(exc, src, cfg, inner, inherited) from None


def _model_spec(path: Path, cfg: dict[str, Any], src: str, family: str) -> ModelSpec:
    """The :class:`ModelSpec` of a language model's config ``cfg`` of ``family`` (keys
    named in errors as ``cfg`` spells them, at ``src``)."""

    def get(key: str, default: Any = None) -> Any:
        value = cfg.get(key)
        if value is None and default is not None:
            # HuggingFace's configs read null as unset (num_key_value_heads: null is
            # num_attention_heads), so null takes the default an absent key does.
            return default
        if value is None:
            raise ServesimError("required key is missing" if key not in cfg else
                                "got null for a required number", source=src, where=key)
        if not is_number(value):
            raise ServesimError(f"got {value!r}, expected a number", source=src, where=key)
        return value

    def count(key: str, default: Any = None, least: int = 0) -> int:
        # ModelSpec's own bound, so the file's key is named rather than model.FIELD.
        return whole_count(get(key, default), key, src, least)

    plain = _torch_dtype(cfg, src)
    dtype = weights_dtype(cfg.get("quantization_config"), src) or plain
    moe: dict[str, Any] = moe_fields(cfg, family, count, src)
    kept = unquantised_attention(cfg.get("quantization_config"), src)
    if moe and kept == "all":
        # The 4-bit (or FP8) weights are the experts'; attention, router and tables stay
        # 16-bit.
        moe["expert_dtype"] = dtype
        dtype = plain
    # The dtypes a checkpoint sets apart: its QKV projections' and its KV cache's.
    kept_apart: dict[str, Any] = ({"qkv_dtype": plain} if kept == "qkv" and plain != dtype
                                  else {})
    if checkpoint_fp8_kv(cfg.get("quantization_config"), src):
        kept_apart["kv_dtype"] = "fp8"
    layers = count("num_hidden_layers", least=1)
    attention = attention_fields(cfg, family, layers, src)
    hidden = count("hidden_size", least=1)
    heads = count("num_attention_heads", least=1)
    mla = mla_fields(cfg, family, count)
    # Qwen3 (and some Mistral configs) give head_dim; otherwise (null, or absent from a
    # family without a default of its own) it is hidden / heads. With latent attention it
    # is the query/key head size, no-rope plus rotary part.
    if "head_dim" not in cfg and family in _HEAD_DIM_DEFAULTS:
        cfg = {**cfg, "head_dim": _HEAD_DIM_DEFAULTS[family]}
    head_dim = (mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"] if mla
                else count("head_dim", least=1) if cfg.get("head_dim") is not None
                else hidden // heads)
    if head_dim < 1:
        raise ServesimError(f"got {hidden} for {heads} heads (num_attention_heads) and no "
                            "head_dim: a head would have no width", source=src,
                            where="hidden_size")
    # Qwen3.5's and Qwen3-Next's MoE configs give no dense width (every layer is MoE).
    width = moe.get("expert_intermediate") if "intermediate_size" not in cfg else None
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope and "rope_theta" not in cfg:
        cfg = {**cfg, "rope_theta": rope["rope_theta"]}
    theta = float(get("rope_theta", 10000.0))
    if not 0 < theta < math.inf:
        raise ServesimError(f"got {theta!r}, must be a finite number above 0", source=src,
                            where="rope_theta")
    try:
        return ModelSpec(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=_kv_heads(count("num_key_value_heads", heads, least=1), heads, src),
            head_dim=head_dim,
            intermediate=width or count("intermediate_size", least=1),
            vocab=count("vocab_size", least=1),
            dtype=dtype,  # type: ignore[arg-type]
            # No default: HF's own differ by family (Llama 2048, Qwen2 32768, Mistral 131072).
            max_context=derived_context(cfg, count("max_position_embeddings", least=1), src),
            rope_theta=theta,
            qkv_bias=config_flag(cfg, "attention_bias", family in _QKV_BIAS_BY_DEFAULT, src),
            tie_embeddings=config_flag(cfg, "tie_word_embeddings", False, src),
            name=str(cfg.get("_name_or_path") or path.parent.name or family),
            **moe,
            **kept_apart,
            **attention,
            **mla,  # type: ignore[arg-type]
            **gdn_fields(cfg, family, layers, count, src),
            **_rope_dim(cfg, head_dim, bool(mla), src),
            **_mtp_layers(cfg, count),
        )
    except ServesimError as exc:
        # A model spec's field is named by the config key it came from.
        key = FIELD_KEYS.get(exc.where or "")
        if key is None:
            raise exc.located(source=src) from None
        message = re.sub(r"\b(" + "|".join(FIELD_KEYS) + r")\b",
                         lambda m: FIELD_KEYS[m.group(1)], exc.message)
        raise ServesimError(message, src, key) from None


def _kv_heads(kv: int, heads: int, src: str) -> int:
    """``num_key_value_heads``, once it divides ``num_attention_heads`` (each KV head
    serves an equal group of query heads, as vLLM's attention requires): named by the
    file's keys rather than the model spec's fields."""
    if heads % kv:
        raise ServesimError(f"got {kv}: num_attention_heads {heads} is not a multiple of it "
                            "(each KV head serves an equal group of query heads)",
                            source=src, where="num_key_value_heads")
    return kv


def _rope_dim(cfg: dict[str, Any], head_dim: int, mla: bool, src: str) -> dict[str, Any]:
    """``rope_dim`` where the rotary embedding turns part of each head: a
    ``partial_rotary_factor`` (beside the other keys, or in ``rope_parameters`` where
    transformers v5 puts it) of the head size, as vLLM's int(head_dim x factor), or
    MiniMax-M2's ``rotary_dim``; empty for the whole head, and under latent attention
    (whose rotary part is qk_rope_head_dim)."""
    rope = cfg.get("rope_parameters")
    given = {key: value for key, value in (
        ("partial_rotary_factor", cfg.get("partial_rotary_factor")),
        ("rope_parameters.partial_rotary_factor",
         rope.get("partial_rotary_factor") if isinstance(rope, dict) else None))
        if value is not None}
    if len(set(map(repr, given.values()))) > 1:
        raise ServesimError(f"got {given['rope_parameters.partial_rotary_factor']!r} beside "
                            f"partial_rotary_factor {given['partial_rotary_factor']!r}: which "
                            "one the model uses is not said; give one",
                            source=src, where="rope_parameters.partial_rotary_factor")
    dim = head_dim
    for key, factor in given.items():
        if not is_number(factor) or not 0 < factor <= 1:
            raise ServesimError(f"got {factor!r}, expected a number above 0 and at most 1 "
                                "(the share of each head the rotary embedding turns)",
                                source=src, where=key)
        dim = int(head_dim * factor)
    if cfg.get("rotary_dim") is not None:
        dim = whole_count(cfg["rotary_dim"], "rotary_dim", src, 1)
        if dim > head_dim:
            raise ServesimError(f"got {dim}, must be at most the head size ({head_dim})",
                                source=src, where="rotary_dim")
    if mla or dim >= head_dim:
        return {}
    if dim < 1:
        raise ServesimError(f"got {next(iter(given.values()))!r}: under one element of a "
                            f"{head_dim}-wide head", source=src, where=next(iter(given)))
    return {"rope_dim": dim}


def _mtp_layers(cfg: dict[str, Any], count: Any) -> dict[str, Any]:
    """``mtp_layers``: the multi-token-prediction modules a config says its checkpoint
    ships, ``num_nextn_predict_layers`` (DeepSeek-V3, GLM, MiMo) or
    ``mtp_num_hidden_layers`` (Qwen3-Next, Qwen3.5); empty (none) where neither is given.
    MiniMax-M2's ``num_mtp_modules`` is not read: no vLLM MTP drafter loads them."""
    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers"):
        if cfg.get(key) is not None:
            return {"mtp_layers": count(key)}
    return {}


def _torch_dtype(cfg: dict[str, Any], src: str) -> str:
    """The unquantised weights' dtype (``torch_dtype``, or ``dtype`` as newer configs name
    it; bf16 when neither is given); another value is an error, not a silent bf16."""
    key = "torch_dtype" if cfg.get("torch_dtype") is not None else "dtype"
    value = cfg.get(key)
    if value is None:
        return "bf16"
    if not isinstance(value, str) or value not in _TORCH_DTYPES:
        raise ServesimError(f"got {value!r}; read: {', '.join(_TORCH_DTYPES)} (quantised "
                            "weights are read from quantization_config)", source=src,
                            where=key)
    return _TORCH_DTYPES[value]

