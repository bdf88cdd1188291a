"""``--set dotted.key=value`` overrides, applied to a parsed scenario, and the scenario
file read with them (:func:`load_raw`), before validation."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from sim.config.gpu import DEFAULT_GPU
from sim.config.vllmflags import section_mapping
from sim.cost.gpus import GPUS
from sim.errors import ServesimError
from sim.files import read_text
from sim.yamlload import parse_yaml, yaml_error

# An inline GPU's fields (sim.config.gpu.InlineGPU), named where --set tries to change
# one figure of a table GPU.
INLINE_FIELDS = "name, flops, mem_bw, mem_gb (or mem_bytes), link_bw, host_bw, node_gpus"


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """A copy of ``raw`` with each ``dotted.key=value`` set (value parsed as YAML)."""
    out = copy.deepcopy(raw)
    done: list[tuple[tuple[str, ...], str]] = []  # the keys set so far, and by which --set
    for item in overrides:
        if "=" not in item:
            raise ServesimError(f"--set needs dotted.key=value, got {item!r}")
        key, text = item.split("=", 1)
        path = tuple(key.strip().split("."))
        for earlier, what in done:
            # A later --set of a whole section would silently drop an earlier one's key in
            # it (and a later key inside a value set whole is merely order-dependent).
            if earlier[:len(path)] == path:
                raise ServesimError(f"--set {item} replaces {'.'.join(path)}, which --set "
                                    f"{what} changed before it; set the keys one by one")
        done.append((path, item))
        _set(out, list(path), _value(text, key), key)
    return out


def override_sets(item: str, key: str) -> bool:
    """Whether the ``--set`` ``item`` (``dotted.key=value``) sets the dotted ``key``:
    the key itself, a key inside it, or a mapping above it that holds it
    (``serving={policy: static}`` sets ``serving.policy``)."""
    given, _, text = item.partition("=")
    given = given.strip()
    if given == key or given.startswith(key + "."):
        return True
    if not key.startswith(given + "."):
        return False
    try:
        node = parse_yaml(text)
    except yaml.YAMLError:
        return False  # applying the overrides names the value that does not parse
    for part in key[len(given) + 1:].split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _value(text: str, key: str) -> Any:
    """The value of ``--set KEY=TEXT``, ``TEXT`` parsed as YAML."""
    try:
        return parse_yaml(text)
    except yaml.YAMLError as exc:
        shown = text if len(text) <= 80 else text[:77] + "..."
        why = getattr(exc, "problem", None)
        raise ServesimError(f"cannot parse value {shown!r}" + (f": {why}" if why else ""),
                            where=key) from None


def _set(out: dict[str, Any], parts: list[str], val: Any, key: str) -> None:
    """Set ``val`` at the dotted path ``parts`` of the scenario mapping ``out``, making
    the mappings on the way where they are missing or not mappings."""
    node = out
    for i, p in enumerate(parts[:-1]):
        if not isinstance(node.get(p), dict):
            dotted = ".".join(parts[:i + 1])
            if isinstance(node.get(p), list):
                # It would be replaced by a mapping of the key set (faults.outages.0.at_s).
                raise ServesimError(f"{dotted} is a list, whose items --set does not reach "
                                    "one by one; give the whole list instead "
                                    f"(--set '{dotted}=[...]')", where=key)
            if parts[0] == "vllm" and i > 0 and isinstance(node.get(p), str):
                # A JSON-valued flag given as its text (as the command line takes it):
                # a key set inside it would replace the whole text with that key alone.
                raise ServesimError(f"{dotted} is given as text ({node[p][:60]!r}), whose "
                                    "keys --set does not reach one by one; give the whole "
                                    f"value instead (--set '{dotted}={{...}}')", where=key)
            name = node.get(p, DEFAULT_GPU if dotted == "hardware.gpu" else None)
            if p == "gpu" and i > 0 and isinstance(name, str) and name in GPUS:
                raise _table_gpu(dotted, name, p in node, key)
            # A preset name stays the model the keys are set on.
            node[p] = section_mapping(p, node.get(p)) if node is out else {}
        node = node[p]
    node[parts[-1]] = val


def _table_gpu(dotted: str, name: str, given: bool, key: str) -> ServesimError:
    """The error for ``--set hardware.gpu.FIGURE=...`` where ``hardware.gpu`` (the path
    ``dotted``) is ``name``, a GPU of the table (``given`` false: by default): the
    table's figures are not set one by one, and a mapping of the figure alone would
    be an inline GPU missing its other fields."""
    what = f"{name!r}" if given else f"unset, so {name!r}"
    return ServesimError(f"{dotted} is {what}, a GPU of the table, whose figures --set "
                         "does not change one by one; give an inline GPU whole instead "
                         f"(--set '{dotted}={{...}}' or in the file), with all its fields: "
                         f"{INLINE_FIELDS} (docs/scenarios.md#a-gpu-described-inline)",
                         where=key)


def load_raw(path: str | Path, overrides: list[str] | None = None) -> Any:
    """The scenario file at ``path`` parsed, ``--set`` overrides applied, not validated
    (a study reads where its axes are set before the scenario at them is checked)."""
    p = Path(path)
    text = read_text(p, "scenario")
    try:
        raw = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise yaml_error(exc, str(p)) from None
    if overrides:
        if not isinstance(raw, dict):
            raise ServesimError("expected a mapping at the top level", str(p))
        try:
            raw = apply_overrides(raw, overrides)
        except ServesimError as exc:
            raise exc.located(str(p)) from None
    return raw
