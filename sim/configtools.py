"""Build frozen dataclasses from parsed YAML, checking every key, type and bound.

Each config section is a frozen dataclass. Its fields' annotations give the types
(``int``, ``float``, ``str``, ``bool``, ``Literal[...]``, ``X | None``, nested
dataclasses, ``tuple[X, ...]``, ``dict[str, X]``) and ``field(metadata=...)`` may give
bounds: ``gt``, ``ge``, ``lt``, ``le``. Cross-field rules live in ``__post_init__`` and
raise :class:`ServesimError` with ``where`` set to the offending key; :func:`build`
prefixes it with the section's dotted path. Unknown keys are errors; so are keys given
twice (:func:`sim.yamlload.parse_yaml`). Nothing here touches the filesystem.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import types
import typing
from typing import Any, Literal, TypeGuard, TypeVar, Union, get_args, get_origin

from sim.errors import ServesimError
from sim.yamlload import HALF_CHARACTER, MAX_DIGITS, long_number

# The scenario YAML loader lives in sim.yamlload; its parse_yaml was long imported from here.
from sim.yamlload import parse_yaml as parse_yaml

T = TypeVar("T")
MAX_INT = 2**53  # the largest integer a scenario may give (exact as a float too)


# Simulated times are held below this (s, 31 years): float64 seconds keep
# sub-microsecond resolution there (spacing 1.2e-7 s), past it a 10 ms step rounds away.
MAX_TIME_S = 1e9


# The largest bare number (no unit) an SLO target of each metric takes, in seconds: a
# minute of TTFT, a second a token. Past it ``ttft_s: 500`` is far more often
# milliseconds meant than seconds (sim.report.slospec holds --slo to the same).
SLO_BARE_MAX_S = {"ttft": 60.0, "queueing": 60.0, "tpot": 1.0, "itl": 1.0, "e2e": 3600.0}


def check_slo_seconds(slo: Any) -> None:
    """In an SLO section's ``__post_init__``: its ``ttft_s`` and ``tpot_s`` (seconds, or
    None) within :data:`SLO_BARE_MAX_S`, else an error naming the key with a unit hint."""
    for key in ("ttft_s", "tpot_s"):
        value, most = getattr(slo, key), SLO_BARE_MAX_S[key[:-2]]
        if value is not None and value > most:
            # Every digit given: rounded, a value just past the bound read as the bound.
            # The hint only where the value read as milliseconds is a target it takes.
            hint = (f", so write {value / 1000:.15g} for {value:.15g} ms"
                    if value / 1000 <= most else "")
            raise ServesimError(f"got {value:.15g}, more than a {key[:-2]} target takes "
                                f"({most:g} s): SLO targets are in seconds{hint}", where=key)


# A \uD800-\uDFFF escape in JSON text (its unpaired half is yamlload.HALF_CHARACTER).
_HALF_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def half_character(text: str, doc: Any) -> str | None:
    """Where ``doc``, ``text`` parsed as JSON, holds half of a UTF-16 surrogate pair (a
    ``\\uD800``-``\\uDFFF`` escape without its partner), as a key path (``a.b[2]``; ``""``
    for the top level), or None. No UTF-8 output (a printed table, a report, a plot) can
    write one, so a reader refuses it rather than fail at the end of a run. A paired
    escape (an emoji, as ``json.dumps`` writes one) reads as one character and passes;
    text without such escapes is not walked."""
    if _HALF_ESCAPE.search(text) is None:
        return None
    return _half_in(doc, "")


def _half_in(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        return path if HALF_CHARACTER.search(value) else None
    items = (value.items() if isinstance(value, dict)
             else enumerate(value) if isinstance(value, list) else ())
    for key, item in items:
        at = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else key
        if isinstance(key, str) and HALF_CHARACTER.search(key):
            return at
        found = _half_in(item, at)
        if found is not None:
            return found
    return None


def refuse_half_character(text: str, doc: Any, source: str) -> None:
    """Raise a one-line :class:`ServesimError` naming ``source`` and the key when
    ``doc`` (``text`` parsed as JSON) holds half a character (:func:`half_character`)."""
    where = half_character(text, doc)
    if where is not None:
        raise ServesimError("a \\uD800-\\uDFFF escape here is half of a UTF-16 surrogate "
                            "pair, not a character; write the character itself or its "
                            "pair of escapes", source, where or None)


class DuplicateKeyError(ValueError):
    """A JSON object names a key twice (the key is the message)."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' ``object_pairs_hook``: an object's mapping, refusing a key given
    twice (json alone keeps the last) with :class:`DuplicateKeyError`."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(key)
        out[key] = value
    return out


def _whole(text: str) -> int:
    """``json.loads``' ``parse_int``: the number, or :class:`LongNumber` past
    :data:`MAX_DIGITS` digits (Python refuses past 4,300 with an error naming no place)."""
    digits = len(text.lstrip("-"))
    if digits > MAX_DIGITS:
        raise LongNumber(digits)
    return int(text)


class LongNumber(ValueError):
    """A JSON text holds a whole number of ``digits`` digits, more than
    :data:`MAX_DIGITS`."""

    def __init__(self, digits: int):
        super().__init__(digits)
        self.digits = digits


def load_json(text: str, unique: bool = True) -> Any:
    """``text`` parsed as JSON, refusing (with :class:`DuplicateKeyError`, unless not
    ``unique``) a key given twice, and a whole number of more than :data:`MAX_DIGITS`
    digits as a ``json.JSONDecodeError`` at that number's place, so every reader reports
    it as it reports other bad JSON."""
    try:
        return json.loads(text, object_pairs_hook=unique_keys if unique else None,
                          parse_int=_whole)
    except LongNumber as exc:
        digits = exc.digits
        pos = next((m.start() for m in re.finditer(r"[0-9]+", text)
                    if m.end() - m.start() == digits), 0)
        raise json.JSONDecodeError(long_number(digits), text, pos) from None


def is_number(x: object) -> TypeGuard[int | float]:
    """Whether ``x`` is an int or a float (NaN and infinities included) but not a bool:
    YAML and JSON true/false load as bool, which Python counts as an int, and no count,
    time or rate is ever one."""
    return isinstance(x, int | float) and not isinstance(x, bool)

_HINTS: dict[type, dict[str, Any]] = {}


def whole_count(value: Any, where: str, source: str | None = None, least: int = 0) -> int:
    """``value`` (a number a file gave) as a count: a whole number from ``least`` to below
    2**53, the bound of servesim's integer fields (from it no count of layers, widths or
    positions is real, and floats lose units); anything else is an error at ``where``."""
    if (not is_number(value) or not math.isfinite(value) or value != int(value)
            or not least <= value < 2**53):
        raise ServesimError(f"got {value!r}, expected a whole number of at least {least} "
                            "and below 2**53", source=source, where=where)
    return int(value)


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _alternatives(tp: Any) -> list[str]:
    """What a value of type ``tp`` may be, one phrase a choice (``true``, ``false``,
    ``null``, ``a finite number``...)."""
    origin = get_origin(tp)
    if origin is Literal:
        return [repr(a) for a in get_args(tp)]
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        return [*(x for a in args if a is not type(None) for x in _alternatives(a)),
                *(["null"] if type(None) in args else [])]
    if origin is tuple:
        return [f"a list of {_plural(get_args(tp)[0])}"]
    if origin is dict:
        return [f"a mapping of {_plural(get_args(tp)[1])}"]
    if dataclasses.is_dataclass(tp):
        return ["a mapping"]
    if tp is bool:
        return ["true", "false"]
    # inf and nan are numbers to Python; "finite" says why .inf is refused.
    return [{int: "an integer", float: "a finite number", str: "a string"}.get(tp, str(tp))]


def _plural(tp: Any) -> str:
    """The items of a list or mapping of ``tp``: "finite numbers", not "a number"."""
    words = {int: "integers", float: "finite numbers", str: "strings", bool: "true or false"}
    return "mappings" if dataclasses.is_dataclass(tp) else words.get(tp) or _describe(tp)


def _describe(tp: Any) -> str:
    """What a value of type ``tp`` may be, in words: "true, false or null"."""
    alts = _alternatives(tp)
    if get_origin(tp) is Literal:
        return "one of " + ", ".join(alts)
    text = alts[0] if len(alts) == 1 else ", ".join(alts[:-1]) + " or " + alts[-1]
    literal = any(get_origin(a) is Literal for a in get_args(tp))
    return f"one of {text}" if literal else text


def printable(value: Any, where: str) -> str:
    """``value`` as a string of printable characters (a name that titles printed output,
    reports and plots: a control character would reach the terminal raw), or a located
    :class:`ServesimError`."""
    text = convert(str, value, where)
    if not text.isprintable():
        raise ServesimError(f"got {text!r}: it titles printed output, reports and plots; "
                            "use printable characters (no control, line-break or format "
                            "characters)", where=where)
    return text


def convert(tp: Any, value: Any, where: str) -> Any:
    """Convert a parsed YAML ``value`` to type ``tp`` or raise a located :class:`ServesimError`."""
    origin = get_origin(tp)
    bad = ServesimError(f"got {value!r}, expected {_describe(tp)}", where=where)
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return convert(arg, value, where)
            except ServesimError as exc:
                errors.append(exc)
        # A nested error (deeper key) is more useful than the generic type complaint, and
        # so is the only candidate's own check of the value it was given (a bound), but
        # not its own type complaint, which would leave out that null is allowed too.
        deeper = [e for e in errors if e.where != where]
        others = [a for a in args if a is not type(None)]
        own = len(errors) == 1 and errors[0].message != (
            f"got {value!r}, expected {_describe(others[0])}")
        raise deeper[0] if deeper else errors[0] if own else bad
    if origin is Literal:
        if value in get_args(tp) and not isinstance(value, bool):
            return value
        raise bad
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise bad
        (item,) = get_args(tp)[:1]
        return tuple(convert(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        val_tp = get_args(tp)[1]
        for k in value:
            if not isinstance(k, str):
                # YAML reads an unquoted null, true or 1e3 key as None, True or 1000.0:
                # str() would rename it behind the writer's back.
                spelt = "null" if k is None else str(k).lower() if isinstance(k, bool) else k
                kind = ("no value" if k is None else "a boolean" if isinstance(k, bool)
                        else "a number" if is_number(k) else f"a {type(k).__name__}")
                raise ServesimError(f"got the key {spelt}, which YAML reads as {kind}, "
                                    "expected a name (a string): quote the key as you mean "
                                    "it", where=f"{where}.{spelt}")
        return {k: convert(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise bad
        return build(typing.cast(type, tp), value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        # A float is taken only when it is a whole number. Past 2**53 a count is no real
        # setting, and it would overflow the int64 arrays it lands in.
        if not is_number(value) or (
                isinstance(value, float) and not (math.isfinite(value) and value.is_integer())):
            raise bad
        if abs(value) >= MAX_INT:
            raise ServesimError(f"got {value!r}, expected an integer below 2**53 in size",
                                where=where)
        return int(value)
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            f = float(value)
            if math.isfinite(f):
                return f
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            # YAML reads an unquoted 0.24 as a number (and 0.10 as 0.1): text was meant.
            raise ServesimError(f"got {value!r}, a number, expected a string: quote the "
                                "value as you mean it (YAML reads unquoted 0.10 as the "
                                "number 0.1)", where=where)
        raise bad
    if tp is Any:
        return value
    raise TypeError(f"configtools cannot convert to {tp!r}")  # a programming error


def _check_bounds(f: dataclasses.Field[Any], value: Any, where: str) -> None:
    if value is None or not isinstance(value, int | float):
        return
    meta = f.metadata
    for key, ok, text in (
        ("gt", lambda v, b: v > b, "greater than"),
        ("ge", lambda v, b: v >= b, "at least"),
        ("lt", lambda v, b: v < b, "less than"),
        ("le", lambda v, b: v <= b, "at most"),
    ):
        if key in meta and not ok(value, meta[key]):
            b = meta[key]
            raise ServesimError(f"got {value!r}, must be {text} "
                                f"{f'{b:g}' if isinstance(b, float) else b}", where=where)


def build(cls: type[T], data: dict[str, Any], where: str = "") -> T:
    """Build dataclass ``cls`` from mapping ``data``; ``where`` is the dotted key of ``data``."""
    if not isinstance(data, dict):
        raise ServesimError(f"got {data!r}, expected a mapping", where=where or None)
    fields = {f.name: f for f in dataclasses.fields(typing.cast(Any, cls)) if f.init}
    hints = _hints(cls)

    def key(name: str) -> str:
        return f"{where}.{name}" if where else name

    unknown = sorted(set(map(str, data)) - set(fields))
    if unknown:
        raise ServesimError(
            f"unknown key {unknown[0]!r}; allowed: {', '.join(sorted(fields))}",
            where=key(unknown[0]),
        )
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ServesimError("required key is missing", where=key(name))
            continue
        value = convert(hints[name], data[name], key(name))
        _check_bounds(f, value, key(name))
        kwargs[name] = value
    try:
        return cls(**kwargs)
    except ServesimError as exc:
        raise exc.located(prefix=where or None) from None


def bounded(default: Any = dataclasses.MISSING, **bounds: float) -> Any:
    """A dataclass field with numeric bounds (``gt``, ``ge``, ``lt``, ``le``) for :func:`build`."""
    return dataclasses.field(default=default, metadata=bounds)


def resolve_alias(obj: Any, name: str, alias: str) -> None:
    """In a frozen dataclass's ``__post_init__``: move field ``alias`` (another accepted
    name of ``name``, both defaulting to None) into ``name`` and clear it; giving both is
    an error naming the alias."""
    value = getattr(obj, alias)
    if value is None:
        return
    if getattr(obj, name) is not None:
        raise ServesimError(f"{alias} is another name for {name}; give only one of them",
                            where=alias)
    object.__setattr__(obj, name, value)
    object.__setattr__(obj, alias, None)


def rename_alias(section: Any, name: str, alias: str) -> Any:
    """A copy of the parsed mapping ``section`` with key ``alias`` renamed ``name``; both
    present is an error naming the alias (for fields whose default is not None)."""
    if not isinstance(section, dict) or alias not in section:
        return section
    if name in section:
        raise ServesimError(f"{alias} is another name for {name}; give only one of them",
                            where=alias)
    return {(name if k == alias else k): v for k, v in section.items()}
