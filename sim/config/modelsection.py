"""The scenario's ``model`` section: a preset, a HuggingFace config.json, vLLM-style
overrides of that config, and the model's own keys over either.

A longer ``max_context`` than the model's own positions is refused, as vLLM refuses a
``--max-model-len`` past the checkpoint's derived length.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from sim.configtools import build
from sim.cost.hfoverrides import check_overrides, preset_overrides, shipped_config
from sim.cost.presets import MODELS, model_preset
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# The keys naming where a model comes from, beside ModelSpec's own fields.
SOURCE_KEYS = ("preset", "hf_config", "hf_overrides")


def model_section(value: Any, base_dir: Path | None) -> ModelSpec:
    """The scenario's ``model``: a preset name, or a mapping of a ``preset`` or an
    ``hf_config`` path (relative to ``base_dir``) with ``hf_overrides`` applied to its
    config and the model's own keys over it, or those keys alone. Errors name
    ``model.KEY``."""
    if isinstance(value, str):
        try:
            return model_preset(value)
        except ServesimError as exc:
            raise exc.located(prefix="model") from None
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a preset name or a mapping", where="model")
    spec = dict(value)
    preset = spec.pop("preset", None)
    hf_config = spec.pop("hf_config", None)
    overrides = spec.pop("hf_overrides", None)
    if preset is not None and hf_config is not None:
        raise ServesimError("give preset or hf_config, not both", where="model.hf_config")
    base: ModelSpec | None = None
    if preset is not None:
        if not isinstance(preset, str) or preset not in MODELS:
            raise ServesimError(f"unknown model preset {preset!r}; valid: "
                                f"{', '.join(sorted(MODELS))}", where="model.preset")
        base = MODELS[preset]
    if hf_config is not None:
        if not isinstance(hf_config, str) or not hf_config.strip():
            # An empty path would resolve to the scenario's own folder ("is a directory").
            raise ServesimError(f"got {hf_config!r}, expected a path to a config.json",
                                where="model.hf_config")
        path = Path(hf_config)
        base = _from_config(path if base_dir is None else base_dir / path, overrides,
                            "model.hf_config")
    elif overrides is not None:
        base = _preset_overridden(preset, overrides)
    fields = ModelSpec.__dataclass_fields__
    unknown = [k for k in spec if k not in fields]
    if unknown:
        raise ServesimError(f"unknown key {unknown[0]!r}; allowed: "
                            f"{', '.join(sorted([*fields, *SOURCE_KEYS]))}",
                            where=f"model.{unknown[0]}")
    if base is None:
        return build(ModelSpec, spec, "model")
    model = build(ModelSpec, {**{k: getattr(base, k) for k in fields}, **spec}, "model")
    dims = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab")
    if model.max_context > base.max_context and all(
            getattr(model, d) == getattr(base, d) for d in dims):
        # vLLM refuses a --max-model-len past the positions the checkpoint was trained
        # for (its derived max_model_len) unless told to allow it at the user's risk.
        # (A model reshaped beyond its preset's dimensions is a custom one: its own.)
        where = "preset " + str(preset) if preset is not None else str(hf_config)
        longer = sorted(name for name, m in MODELS.items()
                        if m.max_context >= model.max_context
                        and all(getattr(m, d) == getattr(base, d) for d in dims))
        raise ServesimError(
            f"{model.max_context:,} tokens is more than the {base.max_context:,} positions of "
            f"the model ({where}); vLLM refuses such a max-model-len (unless "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 is set, at the risk of wrong outputs): give at "
            f"most {base.max_context:,}, "
            + (f"the preset {longer[0]} (the same shape, {MODELS[longer[0]].max_context:,} "
               "positions), " if longer else "")
            + "RoPE scaling that stretches it (model.hf_overrides, as vLLM's "
            "--hf-overrides), or a long-context variant's config.json as model.hf_config",
            where="model.max_context")
    return model


def _from_config(path: Path, overrides: Any, where: str) -> ModelSpec:
    """The model of the config.json at ``path`` with ``overrides`` (vLLM's
    ``--hf-overrides``, or None) applied; its errors are named at ``where`` (the key
    giving the file), or at ``model.hf_overrides`` when the overrides were applied."""
    from sim.cost.hfconfig import from_hf_config

    if overrides is not None:
        overrides = check_overrides(overrides, "model.hf_overrides")
        where = "model.hf_overrides"
    try:
        return from_hf_config(path, overrides)
    except ServesimError as exc:
        raise ServesimError(f"{exc}", where=where) from None


def _preset_overridden(preset: Any, overrides: Any) -> ModelSpec:
    """Preset ``preset`` with config overrides: applied to its shipped config.json where
    servesim has one (keeping the preset's name), else to what the preset records of its
    context (:func:`sim.cost.hfoverrides.preset_overrides`)."""
    if preset is None:
        raise ServesimError("changes a model's config.json: give it with model.preset or "
                            "model.hf_config, not with the model's keys alone",
                            where="model.hf_overrides")
    overrides = check_overrides(overrides, "model.hf_overrides")
    path = shipped_config(preset)
    if path is None:
        return preset_overrides(MODELS[preset], overrides, "model.hf_overrides")
    model = _from_config(path, overrides, "model.hf_overrides")
    return dataclasses.replace(model, name=MODELS[preset].name)
