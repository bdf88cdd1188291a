"""What a HuggingFace config's family adds to the dense Llama shape, read into
:class:`sim.cost.specs.ModelSpec` fields: mixtures of experts (experts, experts per token,
expert width, dense and shared layers), multi-head latent attention and its sparse form,
sliding windows and attention sinks, and Gated DeltaNet layers. Each reader returns the
fields for its family (nothing for another) and refuses a layout servesim does not
model with an error naming the key; :func:`sim.cost.hfconfig.from_hf_config` combines them.
"""

from __future__ import annotations

from typing import Any

from sim.cost.dtypes import SPARSE_FIELDS
from sim.errors import ServesimError

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
_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


def config_flag(cfg: dict[str, Any], key: str, default: bool, src: str) -> bool:
    """A true/false key of the config (``default`` when absent or null); a string such
    as "false", or a number, is an error rather than read by its truthiness."""
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ServesimError(f"got {value!r}, expected true or false", source=src, where=key)
    return value


def moe_fields(cfg: dict[str, Any], family: Any, count: Any, src: str) -> dict[str, int]:
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
        # One shared expert (with a sigmoid gate of hidden weights, not counted); the
        # routed width checked first, so a null one is named as itself.
        count(width_key, least=1)
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


def mla_fields(cfg: dict[str, Any], family: Any, count: Any) -> dict[str, int]:
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


def attention_fields(cfg: dict[str, Any], family: Any, layers: int,
                      src: str) -> dict[str, Any]:
    """Sliding-window and attention-sink fields of a :class:`ModelSpec` from ``cfg``:
    ``layer_types`` (sliding_attention / full_attention per layer) where it is given,
    else the window on every layer for the families that apply it so; gpt-oss has sinks;
    MiniMax-M2 normalises queries and keys over all heads (``layer_qk_norm``)."""
    window = cfg.get("sliding_window")
    if family in _WINDOW_IF_ASKED:
        if config_flag(cfg, "use_sliding_window", False, src):
            raise ServesimError("true: Qwen's sliding window (from layer max_window_layers "
                                "on) is not modelled", source=src, where="use_sliding_window")
        window = None
    extra: dict[str, Any] = {"attention_sinks": True} if family == "gpt_oss" else {}
    if family == "minimax_m2" and config_flag(cfg, "use_qk_norm", False, src):
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


def gdn_fields(cfg: dict[str, Any], family: Any, layers: int, count: Any,
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
            "attn_output_gate": config_flag(cfg, "attn_output_gate", True, src)}
