"""vLLM's ``--speculative-config`` in a scenario's ``vllm`` section.

vLLM takes speculative decoding as one JSON object (``--speculative-config
'{"method": "eagle3", "model": "...", "num_speculative_tokens": 3}'``, or a mapping in a
``--config`` file). :func:`speculative_keys` turns it into ``serving.speculative``'s
``method`` and ``num_tokens``. vLLM's object has no acceptance rate (a server measures
it, it does not configure it), so the scenario gives ``serving.speculative.acceptance``
beside the flag, and for a draft model the servesim preset that stands for the
checkpoint (``serving.speculative.draft_model``).

vLLM's method names map onto servesim's four: ``eagle`` and ``eagle3`` (EAGLE heads),
every ``*mtp`` name (a model's own multi-token-prediction layers), ``ngram`` (prompt
lookup) and ``draft_model``. Methods servesim does not price (Medusa, MLP speculators,
suffix decoding) and settings it does not model (turning speculation off above a batch
size, a drafter on fewer GPUs than the target) are errors naming the key.
"""

from __future__ import annotations

import json
from typing import Any

from sim.configtools import DuplicateKeyError, load_json
from sim.errors import ServesimError

# vLLM's method -> servesim's (names ending in "mtp" are matched apart).
METHODS = {"eagle": "eagle", "eagle3": "eagle", "ngram": "ngram", "draft_model": "draft"}
# Keys of vLLM's object that change nothing servesim prices: where the drafter's weights
# come from, and n-gram lookup's window (its effect is the acceptance the scenario gives).
NO_EFFECT = frozenset(("model", "revision", "code_revision", "max_model_len",
                       "prompt_lookup_max", "prompt_lookup_min", "quantization",
                       "disable_padded_drafter_batch"))
# Keys accepted only at vLLM's default, which is what servesim models.
ONLY: dict[str, tuple[Any, ...]] = {"disable_by_batch_size": (None,),
                                    "speculative_token_tree": (None,)}


def json_object(value: Any, where: str, expected: str) -> dict[str, Any]:
    """A JSON-valued flag's object: a mapping as given, or the JSON text the command line
    takes; anything else is refused, naming ``where`` and the keys ``expected``."""
    if isinstance(value, str):
        try:
            value = load_json(value)
        except json.JSONDecodeError as e:
            raise ServesimError(f"not a JSON object ({e.msg} at character {e.pos}): "
                                f"{value!r}", where=where) from None
        except RecursionError:
            raise ServesimError("nested too deeply to read (about 1,000 levels), expected "
                                "one flat JSON object", where=where) from None
        except DuplicateKeyError as e:  # json alone would keep the last without a word
            raise ServesimError(f"key {str(e)!r} given twice in {value!r}",
                                where=where) from None
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a mapping (or its JSON text) with "
                            f"{expected}", where=where)
    return value


def _method(name: Any, where: str) -> str:
    """servesim's method for vLLM's ``name``."""
    if isinstance(name, str) and name in METHODS:
        return METHODS[name]
    if isinstance(name, str) and name.endswith("mtp"):
        return "mtp"
    known = ", ".join([*METHODS, "mtp (and every *_mtp name)"])
    raise ServesimError(f"got {name!r}; servesim models {known}", where=f"{where}.method")


def speculative_keys(value: Any, tp: Any, where: str) -> dict[str, Any]:
    """``serving.speculative``'s ``method`` and ``num_tokens`` from vLLM's
    ``--speculative-config`` ``value`` (a mapping or its JSON text), for a target on
    ``tp`` GPUs (as the flags or the scenario set it; None: not set, 1). ``where`` names
    the flag in errors."""
    spec = json_object(value, where, "method and num_speculative_tokens")
    if "method" not in spec:
        raise ServesimError("needs method (servesim does not guess it from the drafter's "
                            "name, as vLLM does)", where=where)
    if "num_speculative_tokens" not in spec:
        raise ServesimError("needs num_speculative_tokens", where=where)
    out = {"method": _method(spec["method"], where),
           "num_tokens": spec["num_speculative_tokens"]}
    for key, v in spec.items():
        at = f"{where}.{key}"
        if key in ("method", "num_speculative_tokens") or key in NO_EFFECT:
            continue
        if key == "draft_tensor_parallel_size":
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                kind = {str: "a string", float: "a float", bool: "a boolean"}.get(
                    type(v), type(v).__name__)
                raise ServesimError(f"got {v!r} ({kind}), expected an integer equal to the "
                                    f"target's tp ({tp or 1}), or null", where=at)
            if v is not None and v != (tp or 1):
                raise ServesimError(f"got {v!r}: servesim runs the drafter on the target's "
                                    f"{tp or 1} GPU(s), as vLLM v1 does by default", where=at)
        elif key in ONLY:
            if v not in ONLY[key]:
                raise ServesimError(f"got {v!r}: servesim models only null (vLLM's default) "
                                    "so far", where=at)
        else:
            known = sorted(["method", "num_speculative_tokens", "draft_tensor_parallel_size",
                            *NO_EFFECT, *ONLY])
            raise ServesimError(f"unknown or not modelled key {key!r}; understood: "
                                f"{', '.join(known)}", where=at)
    return out


def merge_speculative(serving: dict[str, Any], keys: dict[str, Any], where: str) -> None:
    """Put ``keys`` (from :func:`speculative_keys`) into ``serving.speculative``, which
    must give the acceptance and may give ``draft_model``, ``draft_layers`` and
    ``classes``, but not what the flag sets."""
    section = serving.get("speculative")
    if section is None:
        section = {}
    if not isinstance(section, dict):
        raise ServesimError("sets serving.speculative, which the scenario sets to "
                            f"{section!r}; give its acceptance as a mapping", where=where)
    for key in keys:
        if key in section:
            raise ServesimError(f"sets serving.speculative.{key}, which the scenario sets "
                                "too; give one of them", where=where)
    if "acceptance" not in section:
        raise ServesimError("vLLM's speculative config has no acceptance rate; give "
                            "serving.speculative.acceptance (rate, mean_length or "
                            "distribution) beside it", where=where)
    if keys["method"] == "draft" and "draft_model" not in section:
        raise ServesimError("method draft_model: name the servesim preset standing for the "
                            "drafter in serving.speculative.draft_model", where=where)
    serving["speculative"] = {**section, **keys}
