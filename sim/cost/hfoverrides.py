"""vLLM's ``--hf-overrides``: changes made to a model's ``config.json`` before it is read.

vLLM loads the checkpoint's config and then sets each top-level key of the overrides
mapping on it, the new value replacing the old one whole (``rope_scaling`` and
``quantization_config`` included), with one exception: a key naming a nested config
(a multimodal wrapper's ``text_config``) has the given keys merged into it, and within
it a mapping merges into a mapping key by key. Whatever the overrides change is then
read as the checkpoint's own: the context vLLM derives (``max_position_embeddings``
stretched by ``rope_scaling``), the shape, the quantisation. servesim applies them the
same way to the config's mapping (:func:`apply_overrides`) before
:func:`sim.cost.hfconfig.from_hf_config` reads it.

A preset whose public ``config.json`` servesim does not ship (the dense Llama, Qwen2.5,
Qwen3 and Mistral ones; ``sim/data/models`` holds the others) has no mapping to change:
it takes the keys that set the context vLLM derives and those that price nothing
(:func:`preset_overrides`), and a key that would change anything else is refused,
naming the route that works (the changed config as ``model.hf_config``).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from sim.configtools import is_number, whole_count
from sim.cost.rope import derived_context
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# Mapping-valued keys a transformers config keeps as plain dicts, which an override
# therefore replaces whole rather than merges into.
_PLAIN_MAPPINGS = ("quantization_config", "compression_config")
# What a preset without a shipped config.json takes: keys setting the derived context,
# and keys servesim's prices do not read (rope_theta sets the torch model's rotary base).
CONTEXT_KEYS = ("max_position_embeddings", "rope_scaling", "rope_parameters")
UNPRICED_KEYS = ("architectures", "rope_theta")


def shipped_config(preset: str) -> Path | None:
    """The public ``config.json`` servesim ships for preset ``preset``, None if none."""
    path = Path(__file__).resolve().parents[1] / "data" / "models" / preset / "config.json"
    return path if path.is_file() else None


def apply_overrides(cfg: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of config mapping ``cfg`` with ``overrides`` applied as vLLM applies
    ``--hf-overrides``: top-level keys replaced, nested configs (``*_config`` mappings
    other than quantisation's) merged into recursively."""
    out = dict(cfg)
    for key, value in overrides.items():
        current = out.get(key)
        if (key.endswith("_config") and key not in _PLAIN_MAPPINGS
                and isinstance(current, dict) and isinstance(value, dict)):
            out[key] = _merged(current, value)
        else:
            out[key] = value
    return out


# The keys of a wrapper config's own level servesim reads (its language model's are in
# text_config): overriding any other there would change nothing it prices.
WRAPPER_LEVEL_KEYS = ("text_config", "quantization_config", "compression_config",
                      "model_type", "architectures")


def check_levels(overrides: dict[str, Any], wrapper: str | None, src: str) -> None:
    """Refuse an override at a level the model is not read from: a top-level key of a
    multimodal wrapper (``wrapper``, its model_type; None for a plain config) other than
    :data:`WRAPPER_LEVEL_KEYS`, whose language model takes its keys from text_config, and
    ``text_config`` on a plain config, which has none. Either would leave the run as it
    was without a word. Errors name the key in ``src``."""
    for key in overrides:
        if wrapper is not None and key not in WRAPPER_LEVEL_KEYS:
            raise ServesimError(f"a {wrapper} config takes its language model's keys from "
                                "text_config, so this top-level key would change nothing: "
                                f"give it as text_config.{key}", source=src, where=key)
        if wrapper is None and key == "text_config":
            raise ServesimError("this config keeps its keys at the top level, with no "
                                "text_config to merge into: give them there", source=src,
                                where=key)


def _merged(target: dict[str, Any], updates: dict[str, Any]) -> dict[str, Any]:
    """``target`` with ``updates`` merged in, mapping into mapping, key by key."""
    out = dict(target)
    for key, value in updates.items():
        current = out.get(key)
        out[key] = (_merged(current, value) if isinstance(current, dict)
                    and isinstance(value, dict) else value)
    return out


def check_overrides(value: Any, where: str) -> dict[str, Any]:
    """``value`` as an overrides mapping: a mapping with string keys (JSON text is parsed
    by the caller); anything else is an error at ``where``."""
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a mapping of config.json keys to "
                            "their new values (as vLLM's --hf-overrides takes)", where=where)
    for key in value:
        if not isinstance(key, str) or not key:
            raise ServesimError(f"got key {key!r}, expected a config.json key name",
                                where=where)
    return value


def preset_overrides(model: ModelSpec, overrides: dict[str, Any], where: str) -> ModelSpec:
    """Preset ``model`` (one without a shipped config.json) with ``overrides`` applied:
    its context as vLLM derives it from the overridden ``max_position_embeddings`` and
    RoPE scaling, and its ``rope_theta``; any other key is an error at ``where``."""
    other = [k for k in overrides if k not in (*CONTEXT_KEYS, *UNPRICED_KEYS)]
    if other:
        raise ServesimError(
            f"{other[0]!r} would change preset {model.name}'s config beyond its context, "
            "and servesim does not ship that preset's config.json to change: give the "
            "changed config.json as model.hf_config (overrides of "
            f"{', '.join((*CONTEXT_KEYS, *UNPRICED_KEYS))} are read on any preset)",
            where=f"{where}.{other[0]}")
    # The presets' configs scale nothing vLLM stretches (none, or Llama 3's own), so
    # their context is their max_position_embeddings.
    cfg = {"max_position_embeddings": model.max_context,
           **{k: v for k, v in overrides.items() if k in CONTEXT_KEYS}}
    trained = whole_count(cfg["max_position_embeddings"], f"{where}.max_position_embeddings",
                          least=1)
    try:
        changes: dict[str, Any] = {"max_context": derived_context(cfg, trained, "")}
    except ServesimError as exc:
        raise ServesimError(exc.message, where=f"{where}.{exc.where}") from None
    theta = overrides.get("rope_theta")
    if theta is not None:
        if not is_number(theta) or not 0 < theta < math.inf:
            raise ServesimError(f"got {theta!r}, must be a finite number above 0",
                                where=f"{where}.rope_theta")
        changes["rope_theta"] = float(theta)
    return dataclasses.replace(model, **changes)
