"""Where a study's axes land in a raw scenario that may carry pasted vLLM flags: the
dotted key a sweep, capacity search or comparison sets to vary tp, pp, replicas or the
policy, so that a flag set naming them is varied through its own flags rather than
refused as setting the same thing twice (:mod:`sim.config.vllmflags`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from sim.config.serving import POLICY_KEYS, ServingConfig
from sim.config.vllmnames import flag_name, plain_name
from sim.errors import ServesimError

# What a study varies, where a scenario sets it: (section, key, the vLLM flag that sets it).
AXES = {"tp": ("hardware", "tp", "tensor_parallel_size"),
        "pp": ("hardware", "pp", "pipeline_parallel_size"),
        "replicas": ("cluster", "replicas", "data_parallel_size")}


def axis_key(raw: Any, axis: str) -> str:
    """The dotted key a study sets to vary ``axis`` (``tp``, ``pp`` or ``replicas``) of
    the raw scenario ``raw``: the ``vllm`` section's flag where the section gives it
    (as written: ``vllm.tp``), or where the section reads a config file that may and the
    scenario's own key is unset (the section's flag wins over the file's); else the
    scenario's own key (``hardware.tp``). Setting the scenario's key beside the flag
    would be refused as given twice."""
    sect, key, flag = AXES[axis]
    flags = raw.get("vllm") if isinstance(raw, dict) else None
    if not isinstance(flags, dict):
        return f"{sect}.{key}"
    names = {flag_name(f): f for f in flags}
    if axis == "replicas" and flags.get(names.get("enable_expert_parallel", "")) is True:
        return f"{sect}.{key}"  # data-parallel ranks are then hardware.dp, not replicas
    if flag in names:
        return f"vllm.{names[flag]}"
    own = raw.get(sect)
    if "config" in names and not (isinstance(own, dict) and key in own):
        return f"vllm.{flag}"
    return f"{sect}.{key}"


def policy_setting(raw: Any, policy: str) -> list[str]:
    """The ``--set`` overrides that run the raw scenario ``raw`` under ``policy``: its
    ``serving.policy``, or, where a pasted ``enable-chunked-prefill`` flag chooses the
    policy, that flag (true for ``chunked``, false for ``continuous``: the two it can
    choose; another policy is an error naming the flag); then each serving key of another
    policy's own that ``raw`` sets, back at its default (a chunk size given for chunked
    stays with chunked, where the other policies would refuse it)."""
    flags = raw.get("vllm") if isinstance(raw, dict) else None
    flag = next((f for f in flags if plain_name(f) == "enable_chunked_prefill"),
                None) if isinstance(flags, dict) else None
    if flag is None:
        sets = [f"serving.policy={policy}"]
    elif policy not in ("chunked", "continuous"):
        raise ServesimError(f"chooses the policy (chunked or continuous), so {policy} cannot "
                            "run with it; leave the flag out to compare other policies",
                            where=f"vllm.{flag}")
    else:
        on = (policy == "chunked") == (flag_name(flag) == "enable_chunked_prefill")
        sets = [f"vllm.{flag}={str(on).lower()}"]
    return sets + others_keys(raw, policy)


def others_keys(raw: Any, policy: str) -> list[str]:
    """``serving.KEY=DEFAULT`` for each key of :data:`POLICY_KEYS` that the raw scenario
    ``raw`` sets and ``policy`` does not read."""
    serving = raw.get("serving") if isinstance(raw, dict) else None
    if not isinstance(serving, dict):
        return []
    defaults = {f.name: f.default for f in dataclasses.fields(ServingConfig)}
    return [f"serving.{key}={json.dumps(defaults[key])}" for key, owner in POLICY_KEYS.items()
            if owner != policy and serving.get(key) not in (None, defaults[key])]


# The keys :func:`policy_setting` may set beside the policy: a study lets them replace a
# --set of the same key in the runs of the other policies.
POLICY_OWN_KEYS = frozenset(f"serving.{key}" for key in POLICY_KEYS)
