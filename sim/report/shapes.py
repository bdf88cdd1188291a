"""The shape of the result files ``servesim report`` reads back, checked before it reads them.

A result folder outlives the run that wrote it: it may be edited by hand, cut short, or
written by another tool. Read blindly, a list where a mapping belongs or a missing key
surfaces as a ``KeyError`` deep inside the report. :func:`check` walks a loaded JSON
value against a small spec (the keys the report reads and what each must hold) and
:func:`read_sweep_csv` does the same for ``sweep.csv``; each mismatch is one
:class:`~sim.errors.ServesimError` naming the file, the key (or line and column), the
value found and what the command's own file holds there. :func:`unreadable` words what
a spec cannot express (statistics that differ between metrics) the same way.

The specs list only what the report reads, so a folder written by servesim always
passes, and keys added by later versions are left alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sim.configtools import half_character, is_number
from sim.errors import ServesimError
from sim.files import decode
from sim.report.csvmeta import csv_header, internal_name


@dataclass(frozen=True)
class Leaf:
    """A JSON scalar (or any value), and the words for what it accepts."""

    words: str
    test: Callable[[Any], bool]


@dataclass(frozen=True)
class May:
    """A key the file may leave out (or, with ``null``, set to null); else ``spec``."""

    spec: Spec
    null: bool = True


@dataclass(frozen=True)
class Each:
    """A mapping whose every value is ``spec``; ``keys`` must be among them."""

    spec: Spec
    words: str
    keys: tuple[str, ...] = ()
    nonempty: bool = False


@dataclass(frozen=True)
class ListOf:
    """A list whose every item is ``spec``; ``words`` names the items."""

    spec: Spec
    words: str
    nonempty: bool = False


# A dict spec is a mapping with (at least) its keys; a value there may be a May.
Spec = Leaf | Each | ListOf | dict[str, Any]


ANY = Leaf("a value", lambda v: True)
NUMBER = Leaf("a number", is_number)
NUMBER_OR_NULL = Leaf("a number or null", lambda v: v is None or is_number(v))
TEXT = Leaf("a string", lambda v: isinstance(v, str))
# A count of requests: a report had printed "-3 sent".
COUNT_OR_NULL = Leaf("a whole number of 0 or more, or null", lambda v: v is None or (
    is_number(v) and math.isfinite(v) and v >= 0 and float(v).is_integer()))

STATS = Each(NUMBER_OR_NULL, "statistic names (p50, p99, mean) to seconds or null")
CLASS_STATS = Each(NUMBER_OR_NULL, "statistic names to seconds or null", ("p50", "p99"))
SLO_LIMITS = Each(NUMBER_OR_NULL, "metric names (ttft_s, tpot_s) to seconds or null")
POOL = {
    "gpu": ANY, "replicas": NUMBER, "tp": NUMBER, "router": ANY, "policy": ANY,
    "max_num_seqs": ANY, "max_num_batched_tokens": ANY, "token_budget": ANY,
    "block_size": ANY, "watermark": NUMBER, "long_prefill_token_threshold": May(ANY),
    "kv_blocks_per_replica": May(ListOf(NUMBER, "block counts"), null=False),
}
# The resolved scenario every command records (sim.report.setup.simulated).
SIMULATED = {
    "file": ANY,
    "model": {"name": ANY, "max_context": May(NUMBER_OR_NULL, null=False)},
    "pools": Each(POOL, "pool roles (both, prefill, decode) to their settings",
                  nonempty=True),
    "horizon_s": May(NUMBER_OR_NULL, null=False),
    "overrides": May(ListOf(TEXT, "--set overrides")),
    "notes": May(ListOf(TEXT, "settings not priced")),
}
CLASS = {
    "latency_s": {"ttft": CLASS_STATS, "tpot": CLASS_STATS},
    "requests": {"total": COUNT_OR_NULL, "finished": COUNT_OR_NULL},
    "throughput": {"goodput_requests_per_s": NUMBER_OR_NULL,
                   "slo_attainment": NUMBER_OR_NULL, "slo": SLO_LIMITS},
}
# One run's summary.json (also each policy's entry of compare.json).
SUMMARY = {
    "latency_s": Each(STATS, "metric names to their statistics",
                      ("ttft", "tpot", "itl", "e2e")),
    "requests": {"total": COUNT_OR_NULL, "finished": COUNT_OR_NULL,
                 "rejected": COUNT_OR_NULL,
                 **{k: May(COUNT_OR_NULL) for k in ("unfinished", "timed_out", "failed",
                                                    "not_arrived")}},
    "throughput": {"requests_per_s": NUMBER_OR_NULL, "output_tokens_per_s": NUMBER_OR_NULL,
                   "output_tokens_per_s_per_gpu": May(NUMBER_OR_NULL),
                   "prompt_tokens_per_s": May(NUMBER_OR_NULL),
                   "goodput_requests_per_s": NUMBER_OR_NULL,
                   "slo_attainment": NUMBER_OR_NULL, "slo": SLO_LIMITS},
    "batch": {"iterations": NUMBER_OR_NULL, "mean_seqs": NUMBER_OR_NULL,
              "mean_tokens": NUMBER_OR_NULL, "over_budget_iterations": May(NUMBER_OR_NULL),
              "token_budget": May(NUMBER_OR_NULL)},
    "kv": {"blocks_per_replica": ListOf(NUMBER_OR_NULL, "block counts", nonempty=True),
           "block_size": ANY, "mean_utilization": NUMBER_OR_NULL,
           "peak_utilization": NUMBER_OR_NULL},
    "preemptions": NUMBER_OR_NULL,
    "swap": May({"swapped": COUNT_OR_NULL, "recomputed": COUNT_OR_NULL}, null=False),
    "span_s": NUMBER_OR_NULL,
    "policy": ANY,
    "saturation": {"saturated": ANY, "offered_rps": May(NUMBER_OR_NULL, null=False),
                   "queue_growth_rps": May(NUMBER_OR_NULL, null=False)},
    "classes": May(Each(CLASS, "class names to their summaries"), null=False),
    "simulated": May(SIMULATED),
}
COMPARE = Each(SUMMARY, "policy names to run summaries", nonempty=True)
SLO_TARGETS = May(ListOf({"metric": TEXT, "stat": TEXT, "limit_s": NUMBER}, "SLO targets"),
                  null=False)
SWEEP = {
    "rates": ListOf(NUMBER, "rates in req/s", nonempty=True),
    "policies": ListOf(TEXT, "policy names"),
    "replicas": ListOf(ANY, "replica counts"),
    "tp": ListOf(ANY, "tp degrees"),
    "seeds": ListOf(ANY, "seeds"),
    "slo_targets": SLO_TARGETS,
    "plots": May(ListOf(TEXT, "PNG file names"), null=False),
    "simulated": May(SIMULATED),
}
_CANDIDATE = {"policy": ANY, "tp": ANY, "pp": May(NUMBER_OR_NULL, null=False)}
CAPACITY = {
    "seeds": ListOf(ANY, "seeds"),
    "tol": NUMBER,
    "slo_targets": SLO_TARGETS,
    "max_rate_per_replica": ListOf(
        {**_CANDIDATE, "max_rate_per_replica": NUMBER_OR_NULL, "ci_low": NUMBER_OR_NULL,
         "ci_high": NUMBER_OR_NULL, "seeds": ANY, "per_seed": ANY}, "candidates' searches"),
    "target_rate": May(NUMBER),
    "checked": ListOf(
        {**_CANDIDATE, "replicas": ANY, "gpus": ANY, "passed": ANY,
         **dict.fromkeys(("ttft_p99", "tpot_p99", "output_tps", "gpu_hours_per_mtok",
                          "usd_per_mtok"), NUMBER_OR_NULL), "saturated": May(ANY)},
        "configurations checked at the target"),
    "best": May({**_CANDIDATE, "replicas": ANY, "gpus": ANY,
                 "usd_per_mtok": May(NUMBER_OR_NULL, null=False)}),
    "redundancy": May(ANY),
    "best_with_redundancy": May({"replicas": ANY, "gpus": ANY}),
    "simulated": May(SIMULATED),
}
# What each command's main file is, in the error's words, and its spec.
SPECS: dict[str, tuple[str, Spec]] = {
    "simulate": ("a servesim simulate summary", SUMMARY),
    "compare": ("a servesim compare result", COMPARE),
    "sweep": ("a servesim sweep manifest", SWEEP),
    "capacity": ("a servesim capacity result", CAPACITY),
}
# sweep.csv columns the report reads (internal names); those it counts with
# (SWEEP_NEEDED, and pp when present) must hold finite numbers.
SWEEP_NEEDED = ("replicas", "tp", "rate", "seeds")
SWEEP_READ = ("policy", *SWEEP_NEEDED, "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99",
              "e2e_p99", "throughput_rps", "goodput_rps", "output_tps", "saturated")


class _Mismatch(Exception):
    def __init__(self, where: str, text: str):
        super().__init__(where)
        self.where, self.text = where, text


def _shown(v: Any) -> str:
    try:
        text = json.dumps(v, default=str)
    except RecursionError:  # nested deeper than json can write back: name the type
        return f"a deeply nested {'list' if isinstance(v, list) else 'mapping'}"
    return text if len(text) <= 40 else text[:37] + "..."


def _words(spec: Spec) -> str:
    if isinstance(spec, Leaf):
        return spec.words
    if isinstance(spec, Each):
        keys = f" (with {', '.join(spec.keys)})" if spec.keys else ""
        return f"a {'non-empty ' if spec.nonempty else ''}mapping of {spec.words}{keys}"
    if isinstance(spec, ListOf):
        return f"a {'non-empty ' if spec.nonempty else ''}list of {spec.words}"
    need = [k for k, s in spec.items() if not isinstance(s, May)]
    return f"a mapping with {', '.join(need)}" if need else "a mapping"


def _wrong(where: str, v: Any, spec: Spec) -> _Mismatch:
    return _Mismatch(where, f"is {_shown(v)}, expected {_words(spec)}")


def _missing(where: str, keys: list[str]) -> _Mismatch:
    return _Mismatch(where, f"missing key{'s' if len(keys) > 1 else ''} {', '.join(keys)}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _walk(v: Any, spec: Spec, where: str) -> None:
    if isinstance(spec, Leaf):
        if not spec.test(v):
            raise _wrong(where, v, spec)
        return
    if isinstance(spec, ListOf):
        if not isinstance(v, list) or (spec.nonempty and not v):
            raise _wrong(where, v, spec)
        for i, item in enumerate(v):
            _walk(item, spec.spec, f"{where}[{i}]")
        return
    if not isinstance(v, dict) or (isinstance(spec, Each) and spec.nonempty and not v):
        raise _wrong(where, v, spec)
    need = list(spec.keys) if isinstance(spec, Each) else [
        k for k, s in spec.items() if not isinstance(s, May)]
    # Every absent key at once: a file with half its keys gone says so in one line.
    if absent := [k for k in need if k not in v]:
        raise _missing(where, absent)
    if isinstance(spec, Each):
        for key, item in v.items():
            _walk(item, spec.spec, _join(where, str(key)))
        return
    for key, s in spec.items():
        if isinstance(s, May):
            if key not in v or (s.null and v[key] is None):
                continue
            s = s.spec
        _walk(v[key], s, _join(where, key))


def _not(what: str, text: str, kind: str) -> str:
    return f"not {what}: {text}; rerun `servesim {kind}`"


def check(blob: Any, kind: str, source: str) -> None:
    """Raise one error naming ``source``, the key, its value and what belongs there
    unless ``blob`` (the parsed main file of a ``kind`` folder) has the shape its
    report reads."""
    what, spec = SPECS[kind]
    try:
        _walk(blob, spec, "")
    except _Mismatch as m:
        raise ServesimError(_not(what, m.text, kind), source, m.where or None) from None


def unreadable(exc: Exception, kind: str, source: str) -> ServesimError:
    """The error for content :func:`check` passed that the report still cannot read (a
    key one metric has and another lacks): one line naming ``source`` and the cause."""
    cause = f"missing key {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
    return ServesimError(_not(SPECS[kind][0], f"unexpected content ({cause})", kind), source)


def _no_constant(name: str) -> float:
    """``json.loads``'s hook for NaN, Infinity and -Infinity, which servesim never
    writes (it writes null where a value is missing): a file holding one was made or
    edited elsewhere, and the report would print it as ``nan ms``."""
    raise ValueError(f"{name} is not a value servesim writes (a missing value is null)")


def load_json(text: str) -> Any:
    """``text`` parsed as JSON, refusing NaN and infinities and half a UTF-16
    surrogate pair (``ValueError``: servesim writes none of them)."""
    doc = json.loads(text, parse_constant=_no_constant)
    where = half_character(text, doc)
    if where is not None:
        raise ValueError(f"{where or 'the top level'}: a \\uD800-\\uDFFF escape is half of "
                         "a UTF-16 surrogate pair, not a character servesim writes")
    return doc


def _cell_ok(cell: str, required: bool) -> bool:
    """Whether a sweep.csv cell reads as the report needs: a finite number, or empty
    where the column may lack a value."""
    if cell == "":
        return not required
    try:
        v = float(cell)
    except ValueError:
        return False
    # sweep.csv leaves a missing value empty: nan or inf in a cell was written elsewhere.
    return math.isfinite(v)


def read_sweep_csv(path: Path, slo_columns: list[str]) -> str:
    """The text of ``path`` (a byte-order mark dropped), once checked to be a table
    :func:`sim.study.sweep.csv_rows` turns into the rows the report uses: present, with
    every column of :data:`SWEEP_READ` (and of ``slo_columns``), a cell per column on
    every line, numbers where the report does arithmetic, and at least one point; else
    one error naming ``path`` (and the line and column). The report parses this text
    rather than reading the file again, so what it uses is what was checked."""
    src = str(path)

    def bad(text: str, where: str | None = None) -> ServesimError:
        return ServesimError(_not("a servesim sweep table", text, "sweep"), src, where)

    if not path.is_file():
        raise ServesimError("missing: a sweep folder holds sweep.csv beside sweep.json; "
                            "rerun `servesim sweep`", src)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ServesimError(f"cannot read it: {exc.strerror}", src) from None
    if not data.strip():
        raise bad("empty, expected a header and one line per grid point")
    text = decode(data, src, "sweep.csv")
    lines = text.splitlines()
    head = [internal_name(c) for c in lines[0].split(",")]
    lacking = [csv_header(c) for c in (*SWEEP_READ, *slo_columns) if c not in head]
    if lacking:
        raise bad(f"missing column{'s' if len(lacking) > 1 else ''} {', '.join(lacking)}",
                  "line 1")
    if len(lines) < 2:
        raise bad("no grid point below the header")
    numeric = [c for c in head if c != "policy" and (c in SWEEP_READ or c in slo_columns
                                                    or c == "pp" or c.endswith("_ci"))]
    for n, line in enumerate(lines[1:], start=2):
        cells = line.split(",")
        if len(cells) != len(head):
            raise bad(f"{len(cells)} cells, expected {len(head)} (one per header column)",
                      f"line {n}")
        row = dict(zip(head, cells, strict=True))
        for c in numeric:
            required = c in SWEEP_NEEDED
            if not _cell_ok(row[c], required):
                want = "a finite number" + ("" if required else " or empty")
                raise bad(f"column {csv_header(c)} is {row[c]!r}, expected {want}",
                          f"line {n}")
    return text
