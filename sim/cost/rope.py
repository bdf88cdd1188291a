"""The context vLLM derives from a model's config: its trained positions
(``max_position_embeddings``) stretched by the RoPE scaling the config names.

Read here for a config.json (:mod:`sim.cost.hfconfig`) and for the overrides a preset
without one takes (:mod:`sim.cost.hfoverrides`), so both derive it by one rule.
"""

from __future__ import annotations

from typing import Any

from sim.configtools import whole_count
from sim.errors import ServesimError

# RoPE types whose effect on the context is known (HF's rope types; "su" is LongRoPE's
# old name). vLLM refuses a type it does not know, so servesim does too.
ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "longrope", "su", "llama3")


def derived_context(cfg: dict[str, Any], trained: int, src: str) -> int:
    """The longest context (tokens) vLLM derives from a config: ``trained`` positions
    (max_position_embeddings) stretched by a RoPE scaling factor, except for the
    schemes whose configs already give the stretched length (Llama 3's, LongRoPE);
    YaRN scales its ``original_max_position_embeddings``."""
    found = [(key, _rope(cfg, key, src)) for key in ("rope_scaling", "rope_parameters")]
    if found[0][1] is not None and found[1][1] is not None and found[0][1] != found[1][1]:
        # transformers v4's and v5's names for one setting: which one a server reads
        # depends on its transformers release.
        raise ServesimError("given beside a different rope_parameters (transformers' older "
                            "and newer names for the same setting): give one",
                            source=src, where="rope_scaling")
    key, rope = next(((k, r) for k, r in found if r is not None), ("", None))
    if rope is None:
        return trained
    kind = rope.get("rope_type", rope.get("type"))
    factor = rope.get("factor")
    if factor is not None and (isinstance(factor, bool) or not isinstance(factor, int | float)
                               or not 0 < factor < 2**20):
        # Checked whatever the type: Llama 3's scaling reads it for its frequencies too.
        raise ServesimError(f"got {factor!r}, expected a number above 0 and below 2**20",
                            source=src, where=f"{key}.factor")
    if kind in ("su", "longrope", "llama3") or (kind == "default" and factor is None):
        return trained
    if factor is None:
        # transformers' rope validation and vLLM's max-length derivation both need the
        # factor of these types; reading none as 1 would leave the context unstretched.
        raise ServesimError(f"absent or null; a {kind} rope type needs a factor, a number "
                            "of at least 1 and below 2**20", source=src, where=f"{key}.factor")
    if factor < 1:
        # A stretch that shrinks: transformers warns that such a factor must be at least
        # 1, and vLLM would cut the context by it (1e-9 left one token).
        raise ServesimError(f"got {factor!r}: a {kind} factor stretches the trained context "
                            "and must be at least 1", source=src, where=f"{key}.factor")
    base = rope.get("original_max_position_embeddings") if kind == "yarn" else None
    if base is None:
        base = trained
    base = whole_count(base, f"{key}.original_max_position_embeddings", src, least=1)
    return max(1, int(base * factor))


def _rope(cfg: dict[str, Any], key: str, src: str) -> dict[str, Any] | None:
    """The RoPE mapping under ``key`` (rope_scaling, or rope_parameters as transformers
    v5 writes it), None when absent or null. Anything else must be a mapping naming a
    known ``rope_type`` (or its old name ``type``): a string, number, list, true or {}
    would otherwise leave the context unstretched without a word, and vLLM refuses a
    mapping without a type or with one it does not know."""
    rope = cfg.get(key)
    if rope is None:
        return None
    if not isinstance(rope, dict) or not ("rope_type" in rope or "type" in rope):
        raise ServesimError(f"got {rope!r}, expected a mapping that names its rope_type "
                            "(e.g. {'rope_type': 'yarn', 'factor': 4.0, "
                            "'original_max_position_embeddings': 32768}) or null",
                            source=src, where=key)
    name = "rope_type" if "rope_type" in rope else "type"
    if rope[name] not in ROPE_TYPES:
        raise ServesimError(f"got {rope[name]!r}; known rope types: {', '.join(ROPE_TYPES)}",
                            source=src, where=f"{key}.{name}")
    return rope
