"""The pieces of a profile file (``servesim-profile/5``) read one at a time: its schema
names, a required key of a given type (:func:`need`), and each component's parts checked
against :mod:`sim.cost.profile`'s forms: formula text (:func:`check_form`),
coefficients, measured knots and grids, the wake-up and frontend terms, and a
data-parallel profile's shared experts. :mod:`sim.cost.profilefile` reads the whole file
with them; every refusal is one :class:`ServesimError` naming the key and the rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sim.configtools import is_number
from sim.cost.curves import Grid, Knots
from sim.cost.frontend import FRONTEND_COEFS, FRONTEND_LIMITS, Frontend
from sim.cost.profile import FORMS, GRID_FORMULA, WAKE_COEFS, WAKE_FORMULA, ComponentForm
from sim.errors import ServesimError

SCHEMA = "servesim-profile/5"
# Schemas servesim reads: /4 is /5 without knots at chosen counts, grids and
# ``frontend``; /3 is /4 without ``wake``; /2 is /3 without measured tables.
READS = ("servesim-profile/2", "servesim-profile/3", "servesim-profile/4", SCHEMA)


def need(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """``data[key]``, which must be present and of type ``kind`` (a bool is not a number
    here); ``where`` is the key's path so far, for the error."""
    if key not in data:
        raise ServesimError("required key is missing", where=f"{where}{key}")
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ServesimError(f"got {value!r}, wrong type", where=f"{where}{key}")
    return value


def check_form(name: str, comp: Mapping[str, Any]) -> None:
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


def read_coefs(comp: Mapping[str, Any], names: Sequence[str], where: str,
           defaults: Mapping[str, float] | None = None, positive: Sequence[str] = ()
           ) -> dict[str, float]:
    """A component's ``coef`` mapping checked: exactly ``names`` (those in ``defaults``
    may be absent and take that value), each a finite number >= 0 (> 0 for ``positive``)."""
    raw = need(comp, "coef", dict, f"{where}.")
    extra = sorted(set(raw) - set(names))
    if extra:
        raise ServesimError(f"unknown coefficient; allowed: {', '.join(names)}",
                            where=f"{where}.coef.{extra[0]}")
    out = {}
    for key in names:
        if key not in raw and defaults and key in defaults:
            out[key] = float(defaults[key])
            continue
        v = need(raw, key, (int, float), f"{where}.coef.")
        strict = key in positive
        if not math.isfinite(v) or v < 0 or strict and v == 0:
            raise ServesimError(f"got {v!r}, must be a finite number {'> 0' if strict else '>= 0'}",
                                where=f"{where}.coef.{key}")
        out[key] = float(v)
    return out


# The schema each optional term first appeared in.
def read_experts(comp: Any) -> Knots:
    """``components.experts``: seconds of a data-parallel group's routed experts (all
    MoE layers, dispatch and combine) at counts of the group's new tokens."""
    where = "components.experts"
    if not isinstance(comp, dict) or "table_s" not in comp or "table_at" not in comp:
        raise ServesimError("expected a mapping with table_at (tokens) and table_s "
                            "(seconds)", where=where)
    ys = read_seconds(comp["table_s"], f"{where}.table_s", "seconds")
    return paired(read_counts(comp["table_at"], f"{where}.table_at", "token counts"), ys, where)


def paired(xs: tuple[float, ...], ys: tuple[float, ...], where: str) -> Knots:
    """Knots of times ``ys`` at counts ``xs`` (``where``'s ``table_at`` and ``table_s``):
    one time a count, the counts strictly increasing."""
    if len(xs) != len(ys):  # neither list is the wrong one by itself: name both
        raise ServesimError(f"table_s has {len(ys)} times for the {len(xs)} counts of "
                            "table_at; give one time per count", where=f"{where}.table_s")
    check_increasing(xs, f"{where}.table_at")
    try:
        return Knots(xs, ys)
    except ValueError as exc:
        raise ServesimError(str(exc), where=f"{where}.table_at") from None


def read_wake(comps: Mapping[str, Any]) -> dict[str, float]:
    comp = need(comps, "wake", dict, "components.")
    return read_coefs(comp, WAKE_COEFS, "components.wake", positive=("tau_s",))


def read_frontend(comps: Mapping[str, Any]) -> Frontend:
    comp = need(comps, "frontend", dict, "components.")
    coefs = read_coefs(comp, FRONTEND_COEFS, "components.frontend")
    for key, most in FRONTEND_LIMITS.items():
        if coefs[key] > most:
            raise ServesimError(f"got {coefs[key]!r}, must be at most {most:g}",
                                where=f"components.frontend.coef.{key}")
    return Frontend(**coefs)


def check_increasing(xs: tuple[float, ...], where: str) -> None:
    """Refuse the first entry of the axis at ``where`` (knot counts, grid rows or columns)
    that is not above the one before it, naming its index and both values: a swapped or
    repeated knot would leave the curve undefined between them."""
    key = where.rsplit(".", 1)[-1]
    for i in range(1, len(xs)):
        if xs[i] <= xs[i - 1]:
            raise ServesimError(f"got {xs[i]:g}, not above {key}[{i - 1}] = {xs[i - 1]:g}; "
                                f"{key} must be strictly increasing", where=f"{where}[{i}]")


def read_seconds(raw: Any, where: str, what: str) -> tuple[float, ...]:
    """A non-empty list of finite numbers > 0."""
    if not isinstance(raw, list) or not raw:
        raise ServesimError(f"got {raw!r}; expected a non-empty list of {what}", where=where)
    for i, v in enumerate(raw):
        if not is_number(v) or not math.isfinite(v) or v <= 0:
            raise ServesimError(f"got {v!r}, must be a finite number > 0", where=f"{where}[{i}]")
    return tuple(float(v) for v in raw)


def read_counts(raw: Any, where: str, what: str) -> tuple[float, ...]:
    """A non-empty list of whole numbers >= 1 (knots' token or sequence counts: a
    fraction of a token is no batch any step runs)."""
    xs = read_seconds(raw, where, what)
    for i, v in enumerate(xs):
        if v != int(v):
            raise ServesimError(f"got {raw[i]!r}, must be a whole number >= 1 ({what})",
                                where=f"{where}[{i}]")
    return xs


def read_knots(comp: Mapping[str, Any], form: ComponentForm, schema: str, where: str) -> Knots:
    if schema == READS[0]:
        raise ServesimError(f"measured tables need schema {READS[1]!r} or later",
                            where=f"{where}.table_s")
    if not form.table:
        raise ServesimError("this component has no measured table; components with one: "
                            + ", ".join(n for n, f in FORMS.items() if f.table),
                            where=f"{where}.table_s")
    ys = read_seconds(comp["table_s"], f"{where}.table_s", f"seconds at {form.table} = 1, 2, ...")
    if "table_at" not in comp:
        return Knots.counts(ys)
    if READS.index(schema) < READS.index(SCHEMA):
        raise ServesimError(f"table_at needs schema {SCHEMA!r}", where=f"{where}.table_at")
    return paired(read_counts(comp["table_at"], f"{where}.table_at", f"{form.table} counts"),
                   ys, where)


def read_grid(raw: Any, form: ComponentForm, schema: str, where: str) -> Grid:
    if READS.index(schema) < READS.index(SCHEMA):
        raise ServesimError(f"measured grids need schema {SCHEMA!r}", where=where)
    if not form.grid:
        raise ServesimError("this component has no measured grid; components with one: "
                            + ", ".join(n for n, f in FORMS.items() if f.grid), where=where)
    if not isinstance(raw, dict) or set(raw) != {"seqs", "kv_per_seq", "s"}:
        raise ServesimError(f"got {raw!r}; expected a mapping of seqs, kv_per_seq and s",
                            where=where)
    rows = read_counts(raw["seqs"], f"{where}.seqs", "decode entries")
    cols = read_counts(raw["kv_per_seq"], f"{where}.kv_per_seq", "KV tokens per entry")
    check_increasing(rows, f"{where}.seqs")
    check_increasing(cols, f"{where}.kv_per_seq")
    if not isinstance(raw["s"], list):
        raise ServesimError("expected a list of rows of seconds", where=f"{where}.s")
    values = [read_seconds(row, f"{where}.s[{i}]", "seconds") for i, row in enumerate(raw["s"])]
    try:
        return Grid(rows, cols, tuple(values))
    except ValueError as exc:
        raise ServesimError(str(exc), where=where) from None
