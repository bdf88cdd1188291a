"""The profile file: the YAML ``calibrate`` writes and the simulator reads.

Schema ``servesim-profile/5``, documented in docs/cost-model.md: device, dtype, tp,
model, and per component its coefficients (seconds), optional measured knots
(``table_s`` at ``table_at`` counts) or a measured grid (``grid``), and its fit's
errors; ``wake`` and ``frontend`` optionally; ``source`` says where the prices came
from. :func:`load_profile` checks every key against :mod:`sim.cost.profile`'s component
forms and builds a :class:`sim.cost.profilecost.ProfileCost`;
a problem is one :class:`ServesimError` naming the file, the key and the rule.
Profiles under ``sim/data/profiles/`` ship with servesim and are named by stem.

Only yaml and pure ``sim`` modules are imported: no torch, no simpy.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from sim.configtools import build
from sim.cost.curves import Grid, Knots
from sim.cost.frontend import NO_FRONTEND
from sim.cost.gpus import GPUS
from sim.cost.profile import FORMS
from sim.cost.profilecost import ProfileCost
from sim.cost.profilekeys import (
    READS,
    check_form,
    need,
    read_coefs,
    read_experts,
    read_frontend,
    read_grid,
    read_knots,
    read_wake,
)
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.files import read_text, too_deep
from sim.yamlload import AliasExpansionError, StrictConstructor, read_yaml12, yaml_error

EXTRA = ("wake", "frontend", "experts")
# What a component may hold: its prices (coef, table_s at table_at, grid) and what they
# are (formula and per_layer, said for the reader; fit, how well they were measured).
COMPONENT_KEYS = frozenset({"formula", "per_layer", "coef", "fit", "table_s", "table_at",
                            "grid"})
PROFILE_DIR = Path(__file__).parents[1] / "data" / "profiles"


def shipped_profiles() -> list[str]:
    """Names (file stems) of the profiles that ship under ``sim/data/profiles/``."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml")) if PROFILE_DIR.is_dir() else []


def resolve(ref: str, base_dir: Path | None = None) -> Path:
    """The file ``ref`` names: a path (relative to ``base_dir``) or a shipped profile's name."""
    looks_like_path = ref.endswith((".yaml", ".yml")) or "/" in ref or "\\" in ref
    if looks_like_path:
        path = Path(ref).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.is_file():
            why = ("is a directory, not a file" if path.is_dir() else
                   "is not a regular file (a device or pipe)" if path.exists() else
                   "does not exist")
            raise ServesimError(f"profile file {str(path)!r} {why}", where="cost.profile")
        return path
    path = PROFILE_DIR / f"{ref}.yaml"
    if not path.is_file():
        # Hundreds ship: name the nearest few, and where the list is.
        near = difflib.get_close_matches(ref, shipped_profiles(), n=5, cutoff=0.5)
        hint = f"nearest: {', '.join(near)}; " if near else ""
        raise ServesimError(
            f"unknown profile {ref!r}; {hint}`servesim profile list` shows the "
            f"{len(shipped_profiles())} shipped (or give a path to a .yaml file)",
            where="cost.profile",
        )
    return path


_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _ProfileLoader(StrictConstructor, _FAST_LOADER):  # type: ignore[misc,valid-type]
    """The C parser (a shipped profile loads in about a millisecond), with a scenario's
    rules: a key given twice is an error naming its line, numbers read as YAML 1.2
    (``2e-5`` a number, ``040`` forty), aliases bounded (:mod:`sim.yamlload`)."""


read_yaml12(_ProfileLoader)

# A profile is a few kB; a file far larger is not one, and is not read whole to say so.
_KIND_READ_LIMIT = 1 << 20


def profile_kind(path: Path) -> str | None:
    """Which command wrote the servesim profile at ``path``: ``calibrate``, or its
    ``source.kind`` (``measured-kernels`` for ``servesim profile build``); None when the
    file is not a servesim profile (unreadable, not YAML, another schema)."""
    try:
        with path.open("rb") as f:
            data = f.read(_KIND_READ_LIMIT + 1)
        if len(data) > _KIND_READ_LIMIT:
            return None
        doc = yaml.load(data.decode("utf-8"), Loader=_ProfileLoader)  # noqa: S506
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(
            "servesim-profile/"):
        return None
    src = doc.get("source")
    if isinstance(src, dict) and isinstance(src.get("kind"), str):
        return str(src["kind"])
    return "calibrate" if "calibration" in doc else "unknown"


# Every top-level key a profile may hold (calibrate's and the table builder's).
TOP_KEYS = ("schema", "source", "created", "device", "dtype", "tp", "ep", "dp", "model",
            "components", "validation", "calibration", "measurements")


# The serving frameworks whose kernels a measured profile may be built from (its
# source.framework decides defaults such as async scheduling, so a misspelling matters),
# and each one's name as the profile's phrase writes it.
FRAMEWORK_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
FRAMEWORKS = tuple(FRAMEWORK_NAMES)


def _check_source(src: Any, device_name: str) -> None:
    """A profile's ``source`` block, where it has one: a mapping whose ``framework`` is
    one servesim knows and, for profiles built from kernel tables, whose GPU is in the
    GPU table and the one ``device.name`` gives."""
    if src is None:
        return  # calibrated profiles say where they ran under device and calibration
    if not isinstance(src, dict):
        raise ServesimError(f"got {src!r}, expected a mapping", where="source")
    kind = src.get("kind")
    if kind is not None and kind != "measured-kernels":
        # Any other kind had loaded as measured kernels, and its phrase been printed.
        raise ServesimError(f"got {kind!r}; allowed: measured-kernels (servesim profile "
                            "build; a calibrated profile has no source)", where="source.kind")
    fw = src.get("framework")
    if fw is not None and fw not in FRAMEWORKS:
        raise ServesimError(f"got {fw!r}; allowed: {', '.join(FRAMEWORKS)}",
                            where="source.framework")
    if src.get("kind") == "measured-kernels":
        _check_phrase(src)
        if device_name not in GPUS:
            raise ServesimError(f"got {device_name!r}, not a GPU of the table; allowed: "
                                f"{', '.join(sorted(GPUS))}", where="device.name")
        if src.get("gpu", device_name) != device_name:
            raise ServesimError(f"got {src.get('gpu')!r}, but device.name is "
                                f"{device_name!r}", where="source.gpu")


def _check_phrase(src: dict[str, Any]) -> None:
    """A measured profile's ``source.phrase``, which every summary prints as the cost's
    source, must name the framework and version whose defaults the run takes from
    ``source.framework`` and ``source.version`` (an edited profile could say vLLM while
    running TensorRT-LLM's eager prefill steps)."""
    fw, phrase, version = src.get("framework"), src.get("phrase"), src.get("version")
    if fw is None or not isinstance(phrase, str):
        return
    named = f"measured kernels: {FRAMEWORK_NAMES[fw]}"
    if version is not None:
        named += f" {version}"
    if not (phrase + " ").startswith(named + " "):
        raise ServesimError(f"got {phrase!r}, but source.framework {fw!r}"
                            + (f" and source.version {version!r}" if version is not None
                               else "") + f" make it begin {named!r}",
                            where="source.phrase")


def parse_profile(data: Any, source: str) -> ProfileCost:
    """Check a parsed profile mapping against the schema and build its :class:`ProfileCost`."""
    try:
        if not isinstance(data, dict):
            raise ServesimError("a profile must be a YAML mapping")
        schema = data.get("schema")
        if schema not in READS:
            hint = ("; it was written by an older calibrate, run `servesim calibrate` again"
                    if schema == "servesim-profile/1" else "")
            raise ServesimError(f"unsupported schema {schema!r}; this servesim reads "
                                f"{' and '.join(map(repr, READS))}{hint}", where="schema")
        odd = sorted(set(data) - set(TOP_KEYS), key=str)
        if odd:  # a misspelt key would otherwise be read as absent without a word
            raise ServesimError(f"unknown key; allowed: {', '.join(TOP_KEYS)}",
                                where=str(odd[0]))
        model = build(ModelSpec, need(data, "model", dict, ""), "model")
        tp = need(data, "tp", int, "")
        if tp < 1:
            raise ServesimError(f"got {tp!r}, must be at least 1", where="tp")
        for key in ("ep", "dp"):  # expert parallelism, data-parallel ranks; absent: 1
            n = data.get(key, 1)
            if type(n) is not int or n < 1:
                raise ServesimError(f"got {n!r}, must be a whole number of at least 1",
                                    where=key)
        device = need(data, "device", dict, "")
        device_name = need(device, "name", str, "device.")
        dtype = need(data, "dtype", str, "")
        if dtype != model.dtype:
            raise ServesimError(f"got {dtype!r}, but the profile's model has dtype "
                                f"{model.dtype!r}; they must be the same", where="dtype")
        _check_source(data.get("source"), device_name)
        comps = need(data, "components", dict, "")
        if (data.get("dp", 1) > 1) != ("experts" in comps):
            raise ServesimError("a profile of data-parallel ranks (dp > 1) prices their shared "
                                "experts in components.experts, and only such a profile does",
                                where="components.experts" if "experts" in comps else "dp")
        unknown = sorted(set(comps) - set(FORMS) - set(EXTRA))
        if unknown:
            raise ServesimError(f"unknown component; allowed: {', '.join([*FORMS, *EXTRA])}",
                                where=f"components.{unknown[0]}")
        for extra in EXTRA:
            if extra in comps and READS.index(schema) < READS.index(_SINCE[extra]):
                raise ServesimError(f"the {extra} term needs schema {_SINCE[extra]!r} or later",
                                    where=f"components.{extra}")
        for name, comp in comps.items():
            odd = sorted(set(comp) - COMPONENT_KEYS) if isinstance(comp, dict) else []
            if odd:  # a misspelt table_s would price by the formula without a word
                raise ServesimError(f"unknown key; allowed: {', '.join(sorted(COMPONENT_KEYS))}",
                                    where=f"components.{name}.{odd[0]}")
            if isinstance(comp, dict):
                check_form(name, comp)
        wake = read_wake(comps) if "wake" in comps else None
        frontend = read_frontend(comps) if "frontend" in comps else NO_FRONTEND
        experts = read_experts(comps["experts"]) if "experts" in comps else None
        coefs: dict[str, dict[str, float]] = {}
        knots: dict[str, Knots] = {}
        grids: dict[str, Grid] = {}
        for name, form in FORMS.items():
            if name not in comps and set(form.defaults) == set(form.coefs):
                # Written before this component existed: its neutral values (zeros).
                coefs[name] = {k: float(v) for k, v in form.defaults.items()}
                continue
            comp = need(comps, name, dict, "components.")
            where = f"components.{name}"
            if "grid" in comp:
                grids[name] = read_grid(comp["grid"], form, schema, f"{where}.grid")
            if "table_s" in comp:
                knots[name] = read_knots(comp, form, schema, where)
            elif "table_at" in comp:
                raise ServesimError("table_at needs table_s beside it", where=f"{where}.table_at")
            if name in grids and "coef" not in comp:
                # A grid prices the component alone; its formula is not used.
                coefs[name] = dict.fromkeys(form.coefs, 0.0)
                continue
            coefs[name] = read_coefs(comp, form.coefs, where, form.defaults)
        meta = {k: v for k, v in data.items() if k not in ("model", "components")}
        meta["fit"] = {n: c.get("fit") for n, c in comps.items() if isinstance(c, dict)}
    except ServesimError as exc:
        raise exc.located(source=source) from None
    return ProfileCost(model, tp, device_name, dtype, coefs, meta, knots, wake, frontend, grids,
                       experts)


_SINCE = {"wake": "servesim-profile/4", "frontend": "servesim-profile/5",
          "experts": "servesim-profile/5"}


def load_profile(ref: str, base_dir: Path | None = None) -> ProfileCost:
    """Load the profile ``ref``: a path (relative ones resolved against ``base_dir``, the
    scenario's folder) or the name of a shipped profile. Errors are one-line
    :class:`ServesimError` naming the file and key. The raw-measurements CSV is not read.
    """
    path = resolve(ref, base_dir)
    text = read_text(path, "cost profile")
    try:
        data = yaml.load(text, Loader=_ProfileLoader)  # noqa: S506 - a SafeLoader subclass
    except AliasExpansionError as exc:
        raise yaml_error(exc, str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise ServesimError(f"not valid YAML: {getattr(exc, 'problem', exc)}",
                            source=str(path), where=where) from None
    except RecursionError:
        raise too_deep(str(path), "cost profile") from None
    return parse_profile(data, str(path))


@lru_cache(maxsize=64)
def profile_source(ref: str, base_dir: str | None) -> dict[str, Any] | None:
    """The ``source`` section of the profile ``ref`` (``base_dir`` as :func:`load_profile`
    takes it, as a string), read as the cost model reads the file; None where it has none
    (a calibrated profile: timed, not built from tables) or cannot be read (loading the
    cost model says what is wrong). Read once per process for the configuration's
    questions (whose kernels, which release); the result is shared: read, never change."""
    try:
        src = load_profile(ref, None if base_dir is None else Path(base_dir)).meta.get("source")
    except ServesimError:
        return None
    return src if isinstance(src, dict) else None
