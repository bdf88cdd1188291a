"""Model architectures to calibrate: a sim/ preset or a HuggingFace ``config.json``.

Both routes yield the same :class:`sim.specs.ModelSpec`, so the simulator and the
calibrator describe a model with one table. :func:`shard` gives the per-GPU
dimensions of one tensor-parallel shard (Megatron-style: heads, KV heads, MLP width
and vocabulary split across GPUs; hidden size kept whole).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.errors import ServesimError
from sim.specs import ModelSpec, model_preset

# HuggingFace model_type values whose layers are the dense Llama shape servesim models.
SUPPORTED_FAMILIES = ("llama", "mistral", "qwen2")
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def from_hf_config(path: Path) -> ModelSpec:
    """A :class:`ModelSpec` from a HuggingFace ``config.json`` (llama, mistral, qwen2)."""
    src = str(path)
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ServesimError(f"cannot read: {exc.strerror}", source=src) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ServesimError(f"not valid JSON: {exc}", source=src) from None
    if not isinstance(cfg, dict):
        raise ServesimError("expected a JSON object", source=src)
    family = cfg.get("model_type")
    if family not in SUPPORTED_FAMILIES:
        why = " (mixture-of-experts is not modelled yet)" if _is_moe(cfg) else ""
        raise ServesimError(
            f"unsupported model_type {family!r}{why}; supported: {', '.join(SUPPORTED_FAMILIES)}",
            source=src, where="model_type")
    if _is_moe(cfg):
        raise ServesimError("mixture-of-experts layers are not modelled yet", source=src,
                            where="num_local_experts")

    def get(key: str, default: Any = None) -> Any:
        value = cfg.get(key, default)
        if value is None:
            raise ServesimError("required key is missing", source=src, where=key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ServesimError(f"got {value!r}, expected a number", source=src, where=key)
        return value

    hidden = int(get("hidden_size"))
    heads = int(get("num_attention_heads"))
    head_dim = cfg.get("head_dim") or (hidden // heads if heads else 0)
    try:
        return ModelSpec(
            layers=int(get("num_hidden_layers")),
            hidden=hidden,
            heads=heads,
            kv_heads=int(get("num_key_value_heads", heads)),
            head_dim=int(head_dim),
            intermediate=int(get("intermediate_size")),
            vocab=int(get("vocab_size")),
            dtype=_TORCH_DTYPES.get(str(cfg.get("torch_dtype")), "bf16"),  # type: ignore[arg-type]
            max_context=int(get("max_position_embeddings", 8192)),
            rope_theta=float(get("rope_theta", 10000.0)),
            # Qwen2 puts a bias on the Q, K and V projections; llama/mistral do not.
            qkv_bias=bool(cfg.get("attention_bias", family == "qwen2")),
            tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            name=str(cfg.get("_name_or_path") or path.parent.name or family),
        )
    except ServesimError as exc:
        raise exc.located(source=src) from None


def _is_moe(cfg: dict[str, Any]) -> bool:
    return any(k in cfg for k in ("num_local_experts", "num_experts", "n_routed_experts"))


def resolve_model(preset: str | None, hf_config: Path | None) -> ModelSpec:
    """The model named by ``--model`` or described by ``--hf-config`` (which wins)."""
    if hf_config is not None:
        return from_hf_config(hf_config)
    if preset is None:
        raise ServesimError("give --model PRESET or --hf-config FILE")
    return model_preset(preset)


@dataclass(frozen=True)
class Shard:
    """Per-GPU dimensions (elements) of one tensor-parallel shard of a model."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    qkv_bias: bool
    rope_theta: float


def shard(spec: ModelSpec, tp: int) -> Shard:
    """Split ``spec`` over ``tp`` GPUs; KV heads are replicated when tp exceeds them."""
    if tp < 1:
        raise ServesimError(f"got {tp}, must be at least 1", where="--tp")
    if spec.heads % tp:
        raise ServesimError(f"heads={spec.heads} do not split over tp={tp}", where="--tp")
    if spec.intermediate % tp:
        raise ServesimError(f"intermediate={spec.intermediate} does not split over tp={tp}",
                            where="--tp")
    if spec.kv_heads % tp == 0:
        kv = spec.kv_heads // tp
    elif tp % spec.kv_heads == 0:
        kv = 1  # each GPU keeps a copy of one KV head
    else:
        raise ServesimError(f"kv_heads={spec.kv_heads} do not split over tp={tp}", where="--tp")
    return Shard(hidden=spec.hidden, heads=spec.heads // tp, kv_heads=kv, head_dim=spec.head_dim,
                 intermediate=spec.intermediate // tp, vocab=-(-spec.vocab // tp),
                 qkv_bias=spec.qkv_bias, rope_theta=spec.rope_theta)
