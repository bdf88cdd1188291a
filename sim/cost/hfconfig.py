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
quantisation is an error naming it.
"""


from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from sim.configtools import DuplicateKeyError, is_number, unique_keys, whole_count
from sim.cost.dtypes import SPARSE_FIELDS
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
# Families whose token mixers are Gated DeltaNet layers between softmax-attention ones
# (layer_types linear_attention / full_attention, or every full_attention_interval-th
# layer full), with a gated attention output and, in the MoE ones, one shared expert.
GDN_FAMILIES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
GDN_KEYS = {"linear_key_heads": "linear_num_key_heads",
            "linear_value_heads": "linear_num_value_heads",
            "linear_key_dim": "linear_key_head_dim", "linear_value_dim": "linear_value_head_dim",
            "linear_conv": "linear_conv_kernel_dim"}
# Mixture-of-experts families: the config keys of (experts, experts per token, expert
# width); Mixtral's and gpt-oss's intermediate_size is their experts' width.
MOE_KEYS = {"mixtral": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
            "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "qwen3_next": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "qwen3_5_moe_text": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "gpt_oss": ("num_local_experts", "num_experts_per_tok", "intermediate_size"),
            "deepseek_v2": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "deepseek_v3": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "kimi_k2": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "deepseek_v32": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
            "glm_moe_dsa": ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"),
            # MiniMax-M2: every layer a mixture of experts of width intermediate_size
            # (as Mixtral's), grouped-query attention with per-layer q/k RMSNorms (left
            # out, as Qwen3's) and rotary embedding on part of each head; its
            # multi-token-prediction modules (use_mtp) are not read, as DeepSeek's.
            "minimax_m2": ("num_local_experts", "num_experts_per_tok", "intermediate_size")}
# Families whose sliding_window (when not null) applies to every layer that layer_types
# does not name otherwise: Mistral-7B v0.1 (4,096 on all 32 layers); Mixtral's is null.
_WINDOW_ON_ALL = ("mistral", "mixtral")
# Families whose configs carry sliding_window but apply it only with use_sliding_window,
# and then from layer max_window_layers on: not modelled.
_WINDOW_IF_ASKED = ("qwen2", "qwen3", "qwen3_moe", *GDN_FAMILIES)
# Families with multi-head latent attention: DeepSeek's config keys, read as they are named.
MLA_FAMILIES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa")
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
# Families whose latent attention is sparse (DeepSeek-V3.2, GLM-5): the indexer's keys
# are specs.SPARSE_FIELDS, named as the ModelSpec fields.
DSA_FAMILIES = ("deepseek_v32", "glm_moe_dsa")
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}
# Families whose config omits attention_bias and whose QKV projections carry a bias.
_QKV_BIAS_BY_DEFAULT = ("qwen2",)
_MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
# head_dim where a family's HF config class has a default of its own for an absent key:
# GptOssConfig's is 64 (hidden / heads would give 2880 / 64 = 45); null still means
# hidden / heads there, as HF reads it.
_HEAD_DIM_DEFAULTS = {"gpt_oss": 64}
_SPEC_FIELDS = frozenset(ModelSpec.__dataclass_fields__)


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
        cfg = json.loads(text, object_pairs_hook=unique_keys)
    except json.JSONDecodeError as exc:
        raise ServesimError(f"not valid JSON: {exc}", source=src) from None
    except RecursionError:
        raise too_deep(src, "HuggingFace config.json") from None
    except DuplicateKeyError as exc:
        raise ServesimError("given twice in one object (which value is meant?)", source=src,
                            where=str(exc)) from None
    if not isinstance(cfg, dict):
        raise ServesimError("expected a JSON object", source=src)
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
        value = cfg.get(key, default)
        if value is None:
            raise ServesimError("required key is missing", source=src, where=key)
        if not is_number(value):
            raise ServesimError(f"got {value!r}, expected a number", source=src, where=key)
        return value

    def count(key: str, default: Any = None, least: int = 0) -> int:
        # ModelSpec's own bound, so the file's key is named rather than model.FIELD.
        return whole_count(get(key, default), key, src, least)

    plain = _torch_dtype(cfg, src)
    dtype = weights_dtype(cfg.get("quantization_config"), src) or plain
    moe_fields: dict[str, Any] = _moe_fields(cfg, family, count, src)
    kept = unquantised_attention(cfg.get("quantization_config"), src)
    if moe_fields and kept == "all":
        # The 4-bit (or FP8) weights are the experts'; attention, router and tables stay
        # 16-bit.
        moe_fields["expert_dtype"] = dtype
        dtype = plain
    # The dtypes a checkpoint sets apart: its QKV projections' and its KV cache's.
    kept_apart: dict[str, Any] = ({"qkv_dtype": plain} if kept == "qkv" and plain != dtype
                                  else {})
    if checkpoint_fp8_kv(cfg.get("quantization_config")):
        kept_apart["kv_dtype"] = "fp8"
    layers = count("num_hidden_layers", least=1)
    attention = _attention_fields(cfg, family, layers, src)
    hidden = count("hidden_size", least=1)
    heads = count("num_attention_heads", least=1)
    mla = _mla_fields(cfg, family, count)
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
    width = moe_fields.get("expert_intermediate") if "intermediate_size" not in cfg else None
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
            kv_heads=count("num_key_value_heads", heads, least=1),
            head_dim=head_dim,
            intermediate=width or count("intermediate_size", least=1),
            vocab=count("vocab_size", least=1),
            dtype=dtype,  # type: ignore[arg-type]
            # No default: HF's own differ by family (Llama 2048, Qwen2 32768, Mistral 131072).
            max_context=derived_context(cfg, count("max_position_embeddings", least=1), src),
            rope_theta=theta,
            qkv_bias=_flag(cfg, "attention_bias", family in _QKV_BIAS_BY_DEFAULT, src),
            tie_embeddings=_flag(cfg, "tie_word_embeddings", False, src),
            name=str(cfg.get("_name_or_path") or path.parent.name or family),
            **moe_fields,
            **kept_apart,
            **attention,
            **mla,  # type: ignore[arg-type]
            **_gdn_fields(cfg, family, layers, count, src),
            **_rope_dim(cfg, head_dim, bool(mla), src),
            **_mtp_layers(cfg, count),
        )
    except ServesimError as exc:
        raise exc.located(source=src) from None


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


def _flag(cfg: dict[str, Any], key: str, default: bool, src: str) -> bool:
    """A true/false key of the config (``default`` when absent or null); a string such
    as "false", or a number, is an error rather than read by its truthiness."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ServesimError(f"got {value!r}, expected true or false", source=src, where=key)
    return value


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


def _moe_fields(cfg: dict[str, Any], family: Any, count: Any, src: str) -> dict[str, int]:
    """The mixture-of-experts fields of a :class:`ModelSpec` for a MoE ``family`` (empty
    for a dense one); layouts servesim does not model are errors naming the key."""
    if family not in MOE_KEYS:
        return {}
    n_key, k_key, width_key = MOE_KEYS[family]
    dense = 0
    if family in ("qwen3_moe", "qwen3_next", "qwen3_5_moe_text"):
        step = cfg.get("decoder_sparse_step", 1)
        if step != 1:
            raise ServesimError(f"got {step!r}: only every layer a mixture of experts (1) is "
                                "modelled", source=src, where="decoder_sparse_step")
        only = cfg.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in only) \
                or sorted(only) != list(range(len(only))):
            raise ServesimError(f"got {only!r}: dense layers are modelled only as the first "
                                "ones (0, 1, ...)", source=src, where="mlp_only_layers")
        dense = len(only)
    shared = 0
    if family in GDN_FAMILIES and cfg.get("shared_expert_intermediate_size"):
        # One shared expert (with a sigmoid gate of hidden weights, not counted).
        if cfg["shared_expert_intermediate_size"] != cfg.get(width_key):
            raise ServesimError(f"got {cfg['shared_expert_intermediate_size']!r}: a shared "
                                f"expert is modelled at the routed experts' width "
                                f"({width_key} = {cfg.get(width_key)!r})", source=src,
                                where="shared_expert_intermediate_size")
        shared = 1
    if family == "minimax_m2" and cfg.get("shared_intermediate_size", 0):
        raise ServesimError(f"got {cfg['shared_intermediate_size']!r}: MiniMax shared experts "
                            "are not modelled (0)", source=src, where="shared_intermediate_size")
    if family in MLA_FAMILIES:
        freq = cfg.get("moe_layer_freq", 1)
        if freq != 1 or isinstance(freq, bool):
            raise ServesimError(f"got {freq!r}: only every layer after the first dense ones a "
                                "mixture of experts (1) is modelled", source=src,
                                where="moe_layer_freq")
        dense = count("first_k_dense_replace", 0)
        shared = count("n_shared_experts", 0)
    # A MoE family's config has experts (a zero would make the spec dense, and its
    # errors would name servesim's fields rather than these keys).
    experts = count(n_key, least=1)
    per_token = count(k_key, least=1)
    if per_token > experts:
        raise ServesimError(f"got {per_token}, at most {n_key} ({experts})", source=src,
                            where=k_key)
    return {"experts": experts, "experts_per_token": per_token,
            "expert_intermediate": count(width_key, least=1), "dense_layers": dense,
            "shared_experts": shared}


def _mla_fields(cfg: dict[str, Any], family: Any, count: Any) -> dict[str, int]:
    """The latent-attention fields of a DeepSeek-V2/V3 config (empty for other families),
    with the sparse-attention indexer's of a DeepSeek-V3.2 or GLM-5 one;
    ``q_lora_rank`` null (DeepSeek-V2-Lite: one q_proj) is 0. ``num_nextn_predict_layers``
    (the multi-token-prediction layers) is not read: vLLM loads them only as a
    speculative drafter, so they are no part of the served model."""
    if family not in MLA_FAMILIES:
        return {}
    fields = {key: count(key) for key in MLA_KEYS if key != "q_lora_rank"}
    fields["q_lora_rank"] = count("q_lora_rank") if cfg.get("q_lora_rank") is not None else 0
    if family in DSA_FAMILIES:
        fields.update({key: count(key, least=1) for key in SPARSE_FIELDS})
    return fields


def _attention_fields(cfg: dict[str, Any], family: Any, layers: int,
                      src: str) -> dict[str, Any]:
    """Sliding-window and attention-sink fields of a :class:`ModelSpec` from ``cfg``:
    ``layer_types`` (sliding_attention / full_attention per layer) where it is given,
    else the window on every layer for the families that apply it so; gpt-oss has sinks;
    MiniMax-M2 normalises queries and keys over all heads (``layer_qk_norm``)."""
    window = cfg.get("sliding_window")
    if family in _WINDOW_IF_ASKED:
        if _flag(cfg, "use_sliding_window", False, src):
            raise ServesimError("true: Qwen's sliding window (from layer max_window_layers "
                                "on) is not modelled", source=src, where="use_sliding_window")
        window = None
    extra: dict[str, Any] = {"attention_sinks": True} if family == "gpt_oss" else {}
    if family == "minimax_m2" and _flag(cfg, "use_qk_norm", False, src):
        norm = cfg.get("qk_norm_type", "per_layer")
        if norm not in ("per_layer", "per_head"):
            raise ServesimError(f"got {norm!r}; modelled: per_layer (over all heads: an "
                                "all-reduce a layer under tp), per_head", source=src,
                                where="qk_norm_type")
        if norm == "per_layer":
            extra["layer_qk_norm"] = True
    types = cfg.get("layer_types")
    if family in GDN_FAMILIES:
        return extra  # linear_attention / full_attention: _gdn_fields
    if types is not None:
        sliding = _layer_types(types, layers, ("sliding_attention", "full_attention"),
                               src).count("sliding_attention")
    else:
        sliding = layers if family in _WINDOW_ON_ALL or family == "gpt_oss" else 0
    if sliding and window is None and types is not None and family not in _WINDOW_IF_ASKED:
        # Named sliding layers with no window: full attention would price them wrongly.
        raise ServesimError(f"layer_types names {sliding} sliding_attention layers but "
                            "sliding_window is null; give the window (tokens)", source=src,
                            where="sliding_window")
    if not sliding or window is None:
        return extra
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ServesimError(f"got {window!r}, expected a whole number of tokens (at least 1) "
                            "or null", source=src, where="sliding_window")
    return {"sliding_window": window, "sliding_layers": sliding, **extra}


def _layer_types(types: Any, layers: int, kinds: tuple[str, ...], src: str) -> list[str]:
    """``layer_types`` as given, or an error unless it names one of ``kinds`` for each of
    the ``layers`` layers."""
    if not isinstance(types, list) or len(types) != layers or any(
            t not in kinds for t in types):
        raise ServesimError(f"expected a list of {layers} entries (num_hidden_layers), "
                            f"each one of {', '.join(kinds)}", source=src, where="layer_types")
    return types


def _gdn_fields(cfg: dict[str, Any], family: Any, layers: int, count: Any,
                src: str) -> dict[str, Any]:
    """The Gated DeltaNet fields of a :data:`GDN_FAMILIES` config (empty for the others):
    how many layers are linear attention (``layer_types``, or all but every
    ``full_attention_interval``-th), their heads, head sizes and convolution width, and
    the attention layers' output gate. The recurrent state must be fp32
    or bf16 (``mamba_ssm_dtype``)."""
    if family not in GDN_FAMILIES:
        return {}
    types = cfg.get("layer_types")
    if types is not None:
        linear = _layer_types(types, layers, ("linear_attention", "full_attention"),
                              src).count("linear_attention")
        key, value = "layer_types", f"{linear} linear_attention and {layers - linear} " \
            "full_attention layers"
    else:
        every = count("full_attention_interval", least=1)
        linear = layers - layers // every
        key, value = "full_attention_interval", f"{every!r} ({linear} of the {layers} " \
            "layers linear_attention)"
    if not 0 < linear < layers:
        # Both kinds are what a Gated DeltaNet family's layers are modelled as; one kind
        # alone is another architecture.
        raise ServesimError(f"got {value}: a {family} model is modelled with both kinds, at "
                            "least one linear_attention (Gated DeltaNet) layer and one "
                            "full_attention layer", source=src, where=key)
    state = cfg.get("mamba_ssm_dtype", "float32")
    if not isinstance(state, str) or state not in _STATE_DTYPES:
        raise ServesimError(f"got {state!r}; modelled: {', '.join(_STATE_DTYPES)}",
                            source=src, where="mamba_ssm_dtype")
    fields: dict[str, Any] = {key: count(name, least=1) for key, name in GDN_KEYS.items()}
    return {"linear_layers": linear, **fields, "linear_state_dtype": _STATE_DTYPES[state],
            "attn_output_gate": _flag(cfg, "attn_output_gate", True, src)}
