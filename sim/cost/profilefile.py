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
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sim.configtools import build, is_number
from sim.cost.curves import Grid, Knots
from sim.cost.frontend import FRONTEND_COEFS, FRONTEND_LIMITS, NO_FRONTEND, Frontend
from sim.cost.gpus import GPUS
from sim.cost.profile import FORMS, GRID_FORMULA, WAKE_COEFS, WAKE_FORMULA, ComponentForm
from sim.cost.profilecost import ProfileCost
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.files import read_text, too_deep
from sim.yamlload import AliasExpansionError, StrictConstructor, read_yaml12, yaml_error

SCHEMA = "servesim-profile/5"
# Schemas this module reads: /4 is /5 without knots at chosen counts, grids and
# ``frontend``; /3 is /4 without ``wake``; /2 is /3 without measured tables.
READS = ("servesim-profile/2", "servesim-profile/3", "servesim-profile/4", SCHEMA)
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


def _need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in data:
        raise ServesimError("required key is missing", where=f"{where}{key}")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ServesimError(f"got {value!r}, wrong type", where=f"{where}{key}")
    return value


# The serving frameworks whose kernels a measured profile may be built from (its
# source.framework decides defaults such as async scheduling, so a misspelling matters).
FRAMEWORKS = ("vllm", "sglang", "trtllm")


def _check_source(src: Any, device_name: str) -> None:
    """A profile's ``source`` block, where it has one: a mapping whose ``framework`` is
    one servesim knows and, for profiles built from kernel tables, whose GPU is in the
    GPU table and the one ``device.name`` gives."""
    if src is None:
        return  # calibrated profiles say where they ran under device and calibration
    if not isinstance(src, dict):
        raise ServesimError(f"got {src!r}, expected a mapping", where="source")
    fw = src.get("framework")
    if fw is not None and fw not in FRAMEWORKS:
        raise ServesimError(f"got {fw!r}; allowed: {', '.join(FRAMEWORKS)}",
                            where="source.framework")
    if src.get("kind") == "measured-kernels":
        if device_name not in GPUS:
            raise ServesimError(f"got {device_name!r}, not a GPU of the table; allowed: "
                                f"{', '.join(sorted(GPUS))}", where="device.name")
        if src.get("gpu", device_name) != device_name:
            raise ServesimError(f"got {src.get('gpu')!r}, but device.name is "
                                f"{device_name!r}", where="source.gpu")


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
        model = build(ModelSpec, _need(data, "model", dict, ""), "model")
        tp = _need(data, "tp", int, "")
        if tp < 1:
            raise ServesimError(f"got {tp!r}, must be at least 1", where="tp")
        for key in ("ep", "dp"):  # expert parallelism, data-parallel ranks; absent: 1
            n = data.get(key, 1)
            if type(n) is not int or n < 1:
                raise ServesimError(f"got {n!r}, must be a whole number of at least 1",
                                    where=key)
        device = _need(data, "device", dict, "")
        device_name = _need(device, "name", str, "device.")
        dtype = _need(data, "dtype", str, "")
        if dtype != model.dtype:
            raise ServesimError(f"got {dtype!r}, but the profile's model has dtype "
                                f"{model.dtype!r}; they must be the same", where="dtype")
        _check_source(data.get("source"), device_name)
        comps = _need(data, "components", dict, "")
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
                _check_form(name, comp)
        wake = _wake(comps) if "wake" in comps else None
        frontend = _frontend(comps) if "frontend" in comps else NO_FRONTEND
        experts = _experts(comps["experts"]) if "experts" in comps else None
        coefs: dict[str, dict[str, float]] = {}
        knots: dict[str, Knots] = {}
        grids: dict[str, Grid] = {}
        for name, form in FORMS.items():
            if name not in comps and set(form.defaults) == set(form.coefs):
                # Written before this component existed: its neutral values (zeros).
                coefs[name] = {k: float(v) for k, v in form.defaults.items()}
                continue
            comp = _need(comps, name, dict, "components.")
            where = f"components.{name}"
            if "grid" in comp:
                grids[name] = _grid(comp["grid"], form, schema, f"{where}.grid")
            if "table_s" in comp:
                knots[name] = _knots(comp, form, schema, where)
            elif "table_at" in comp:
                raise ServesimError("table_at needs table_s beside it", where=f"{where}.table_at")
            if name in grids and "coef" not in comp:
                # A grid prices the component alone; its formula is not used.
                coefs[name] = dict.fromkeys(form.coefs, 0.0)
                continue
            coefs[name] = _coefs(comp, form.coefs, where, form.defaults)
        meta = {k: v for k, v in data.items() if k not in ("model", "components")}
        meta["fit"] = {n: c.get("fit") for n, c in comps.items() if isinstance(c, dict)}
    except ServesimError as exc:
        raise exc.located(source=source) from None
    return ProfileCost(model, tp, device_name, dtype, coefs, meta, knots, wake, frontend, grids,
                       experts)


def _check_form(name: str, comp: Mapping[str, Any]) -> None:
    """A component's ``formula`` and ``per_layer``, when given, as servesim prices it: they
    describe code, so an edited one would be accepted and ignored. A component written
    before a coefficient with a default existed (it lacks one) may carry its older
    formula text, which is not checked."""
    where = f"components.{name}"
    if name in FORMS:
        form = FORMS[name]
        texts = (form.formula, GRID_FORMULA) if form.grid else (form.formula,)
        layered: bool | None = form.per_layer
        raw = comp.get("coef")
        older = isinstance(raw, dict) and any(k not in raw for k in form.defaults)
    elif name == "wake":
        texts, layered, older = (WAKE_FORMULA,), False, False
    else:  # frontend and experts: their description is not read
        return
    if "per_layer" in comp and comp["per_layer"] is not layered:
        raise ServesimError(f"got {comp['per_layer']!r}; servesim prices {name} "
                            f"{'per layer' if layered else 'once a step'}, so it must be "
                            f"{str(layered).lower()} (or left out)", where=f"{where}.per_layer")
    formula = comp.get("formula")
    if "formula" in comp and not older and formula not in texts:
        raise ServesimError(f"got {formula!r}; servesim prices {name} by its own formula, "
                            f"which a profile cannot change: give "
                            f"{' or '.join(map(repr, texts))} (or leave it out)",
                            where=f"{where}.formula")


def _coefs(comp: Mapping[str, Any], names: Sequence[str], where: str,
           defaults: Mapping[str, float] | None = None, positive: Sequence[str] = ()
           ) -> dict[str, float]:
    """A component's ``coef`` mapping checked: exactly ``names`` (those in ``defaults``
    may be absent and take that value), each a finite number >= 0 (> 0 for ``positive``)."""
    raw = _need(comp, "coef", dict, f"{where}.")
    extra = sorted(set(raw) - set(names))
    if extra:
        raise ServesimError(f"unknown coefficient; allowed: {', '.join(names)}",
                            where=f"{where}.coef.{extra[0]}")
    out = {}
    for key in names:
        if key not in raw and defaults and key in defaults:
            out[key] = float(defaults[key])
            continue
        v = _need(raw, key, (int, float), f"{where}.coef.")
        strict = key in positive
        if not math.isfinite(v) or v < 0 or strict and v == 0:
            raise ServesimError(f"got {v!r}, must be a finite number {'> 0' if strict else '>= 0'}",
                                where=f"{where}.coef.{key}")
        out[key] = float(v)
    return out


# The schema each optional term first appeared in.
_SINCE = {"wake": "servesim-profile/4", "frontend": "servesim-profile/5",
          "experts": "servesim-profile/5"}


def _experts(comp: Any) -> Knots:
    """``components.experts``: seconds of a data-parallel group's routed experts (all
    MoE layers, dispatch and combine) at counts of the group's new tokens."""
    where = "components.experts"
    if not isinstance(comp, dict) or "table_s" not in comp or "table_at" not in comp:
        raise ServesimError("expected a mapping with table_at (tokens) and table_s "
                            "(seconds)", where=where)
    ys = _seconds(comp["table_s"], f"{where}.table_s", "seconds")
    return _paired(_seconds(comp["table_at"], f"{where}.table_at", "token counts"), ys, where)


def _paired(xs: tuple[float, ...], ys: tuple[float, ...], where: str) -> Knots:
    """Knots of times ``ys`` at counts ``xs`` (``where``'s ``table_at`` and ``table_s``):
    one time a count, the counts strictly increasing."""
    if len(xs) != len(ys):  # neither list is the wrong one by itself: name both
        raise ServesimError(f"table_s has {len(ys)} times for the {len(xs)} counts of "
                            "table_at; give one time per count", where=f"{where}.table_s")
    _increasing(xs, f"{where}.table_at")
    try:
        return Knots(xs, ys)
    except ValueError as exc:
        raise ServesimError(str(exc), where=f"{where}.table_at") from None


def _wake(comps: Mapping[str, Any]) -> dict[str, float]:
    comp = _need(comps, "wake", dict, "components.")
    return _coefs(comp, WAKE_COEFS, "components.wake", positive=("tau_s",))


def _frontend(comps: Mapping[str, Any]) -> Frontend:
    comp = _need(comps, "frontend", dict, "components.")
    coefs = _coefs(comp, FRONTEND_COEFS, "components.frontend")
    for key, most in FRONTEND_LIMITS.items():
        if coefs[key] > most:
            raise ServesimError(f"got {coefs[key]!r}, must be at most {most:g}",
                                where=f"components.frontend.coef.{key}")
    return Frontend(**coefs)


def _increasing(xs: tuple[float, ...], where: str) -> None:
    """Refuse the first entry of the axis at ``where`` (knot counts, grid rows or columns)
    that is not above the one before it, naming its index and both values: a swapped or
    repeated knot would leave the curve undefined between them."""
    key = where.rsplit(".", 1)[-1]
    for i in range(1, len(xs)):
        if xs[i] <= xs[i - 1]:
            raise ServesimError(f"got {xs[i]:g}, not above {key}[{i - 1}] = {xs[i - 1]:g}; "
                                f"{key} must be strictly increasing", where=f"{where}[{i}]")


def _seconds(raw: Any, where: str, what: str) -> tuple[float, ...]:
    """A non-empty list of finite numbers > 0."""
    if not isinstance(raw, list) or not raw:
        raise ServesimError(f"got {raw!r}; expected a non-empty list of {what}", where=where)
    for i, v in enumerate(raw):
        if not is_number(v) or not math.isfinite(v) or v <= 0:
            raise ServesimError(f"got {v!r}, must be a finite number > 0", where=f"{where}[{i}]")
    return tuple(float(v) for v in raw)


def _knots(comp: Mapping[str, Any], form: ComponentForm, schema: str, where: str) -> Knots:
    if schema == READS[0]:
        raise ServesimError(f"measured tables need schema {READS[1]!r} or later",
                            where=f"{where}.table_s")
    if not form.table:
        raise ServesimError("this component has no measured table; components with one: "
                            + ", ".join(n for n, f in FORMS.items() if f.table),
                            where=f"{where}.table_s")
    ys = _seconds(comp["table_s"], f"{where}.table_s", f"seconds at {form.table} = 1, 2, ...")
    if "table_at" not in comp:
        return Knots.counts(ys)
    if READS.index(schema) < READS.index(SCHEMA):
        raise ServesimError(f"table_at needs schema {SCHEMA!r}", where=f"{where}.table_at")
    return _paired(_seconds(comp["table_at"], f"{where}.table_at", f"{form.table} counts"),
                   ys, where)


def _grid(raw: Any, form: ComponentForm, schema: str, where: str) -> Grid:
    if READS.index(schema) < READS.index(SCHEMA):
        raise ServesimError(f"measured grids need schema {SCHEMA!r}", where=where)
    if not form.grid:
        raise ServesimError("this component has no measured grid; components with one: "
                            + ", ".join(n for n, f in FORMS.items() if f.grid), where=where)
    if not isinstance(raw, dict) or set(raw) != {"seqs", "kv_per_seq", "s"}:
        raise ServesimError(f"got {raw!r}; expected a mapping of seqs, kv_per_seq and s",
                            where=where)
    rows = _seconds(raw["seqs"], f"{where}.seqs", "decode entries")
    cols = _seconds(raw["kv_per_seq"], f"{where}.kv_per_seq", "KV tokens per entry")
    _increasing(rows, f"{where}.seqs")
    _increasing(cols, f"{where}.kv_per_seq")
    if not isinstance(raw["s"], list):
        raise ServesimError("expected a list of rows of seconds", where=f"{where}.s")
    values = [_seconds(row, f"{where}.s[{i}]", "seconds") for i, row in enumerate(raw["s"])]
    try:
        return Grid(rows, cols, tuple(values))
    except ValueError as exc:
        raise ServesimError(str(exc), where=where) from None


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
