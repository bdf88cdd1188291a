"""Reading a ``servesim-replay/1`` record (what ``python -m calibrate.replay_cli`` writes)
into checked arrays, refusing what the comparison cannot use.

A replay file travels between machines and is sometimes edited by hand, so every part
that ``servesim validate`` reads is checked here, once, and a fault is one error naming
the file, the key (and row) and the value, with what is allowed: a value of the wrong
type, a count that is not a whole number, a time that is not finite, a latency below
zero, a column of another length, a label that cannot name an output file.

No torch and no calibrate imports.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from sim.configtools import MAX_TIME_S, is_number
from sim.core.request import FINISHED, REJECTED, UNFINISHED
from sim.cost.shape import StepShape
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.workload.requests import Requests

REPLAY_SCHEMA = "servesim-replay/1"
REQUEST_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "first_scheduled_s",
                   "first_token_s", "finish_s", "preemptions", "status", "reason")
# Columns every recorded step has (seconds, then the step's shape); the optional ones
# are seconds too.
STEP_COLUMNS = ("start_s", "end_s", "exec_s") + StepShape._fields
OPTIONAL_STEP_COLUMNS = ("cpu_s", "host_s")
STATUSES = ("finished", "rejected", "unfinished")
_CODES = {"finished": FINISHED, "rejected": REJECTED, "unfinished": UNFINISHED}
# Token counts above this cannot be a real request (and overflow the arrays they go in).
MAX_TOKENS = 2**31 - 1
# A step's aggregates can pass that (a 64k-token prompt's causal pairs are 2**31): any
# count a float holds exactly.
MAX_STEP_COUNT = 2**53 - 1


@dataclasses.dataclass(frozen=True)
class ReplayRecord:
    """A checked replay record. ``requests`` and ``cols`` (first_sched, first_token,
    finish: seconds, NaN where not reached; preemptions; status codes of
    :mod:`sim.core.request`; reason) are per request; ``steps`` holds one array per
    step column (seconds or counts), empty when the record has no steps."""

    label: str
    level: str | None
    rate_rps: float | None
    load: float | None
    device: dict[str, Any]
    model: dict[str, Any]
    serving: dict[str, Any]
    notes: list[str]
    probe: dict[str, Any] | None
    requests: Requests
    cols: dict[str, np.ndarray]
    steps: dict[str, np.ndarray]


class _Fault(Exception):
    """One fault in a record: where (a dotted key) and what."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")


def _finite(x: Any) -> bool:
    """A JSON number that is a finite float (an integer too large for one is not)."""
    if not is_number(x):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def _whole(x: Any, low: int, high: int = MAX_TOKENS) -> bool:
    """A whole number from ``low`` to ``high`` (an integral float is one)."""
    return _finite(x) and x == int(x) and low <= x <= high


def _opt_number(rec: dict[str, Any], key: str, low: float, strict: bool) -> float | None:
    x = rec.get(key)
    if x is None:
        return None
    if not _finite(x) or x < low or (strict and x == low):
        raise _Fault(key, f"got {x!r}, expected null or a finite number "
                          f"{'>' if strict else '>='} {low:g}")
    return float(x)


def _mapping(rec: dict[str, Any], key: str, required: bool) -> dict[str, Any]:
    x = rec.get(key)
    if x is None and not required:
        return {}
    if not isinstance(x, dict):
        raise _Fault(key, f"got {_shown(x)}, expected an object"
                          + ("" if required else " or null"))
    return x


def _shown(x: Any) -> str:
    text = repr(x)
    return text if len(text) <= 60 else f"a JSON {type(x).__name__}"


def _label(rec: dict[str, Any]) -> str:
    x = rec.get("label", "level")
    # Bytes, not characters: 100 emoji are 400 bytes, past what a file name holds.
    bad = not isinstance(x, str) or not x or x in (".", "..") or len(
        x.encode("utf-8", "surrogatepass")) > 100 or any(c in "/\\" or ord(c) < 32 for c in x)
    if bad:
        raise _Fault("label", f"got {_shown(x)}, expected a name of 1 to 100 bytes (UTF-8) "
                              "without / or \\ or control characters (it names the "
                              "level's output files)")
    return x


def _times(where: str, xs: list[Any], nullable: bool) -> np.ndarray:
    """Seconds: finite numbers below :data:`MAX_TIME_S` in size (null for NaN where
    ``nullable``)."""
    out = np.empty(len(xs))
    for i, x in enumerate(xs):
        if x is None and nullable:
            out[i] = np.nan
        elif not _finite(x):
            raise _Fault(f"{where}[{i}]", f"got {_shown(x)}, expected a finite time (s)"
                                          + (" or null" if nullable else ""))
        elif abs(x) >= MAX_TIME_S:
            # The bound every other time servesim reads is held to: past it no run is real.
            raise _Fault(f"{where}[{i}]", f"got {_shown(x)}, expected a time below "
                                          f"{MAX_TIME_S:.0e} s (31 years)")
        else:
            out[i] = x
    return out


def _counts(where: str, xs: list[Any], low: int, high: int = MAX_TOKENS) -> np.ndarray:
    """Whole numbers from ``low`` to ``high`` (an integral float is one)."""
    out = np.empty(len(xs), dtype=np.int64)
    for i, x in enumerate(xs):
        if not _whole(x, low, high):
            raise _Fault(f"{where}[{i}]", f"got {_shown(x)}, expected a whole number from "
                                          f"{low} to {high}")
        out[i] = int(x)
    return out


def _columns(table: Any, part: str, names: tuple[str, ...],
             optional: tuple[str, ...] = ()) -> int:
    """Rows of ``table`` after checking it is an object of lists, each of ``names`` (and
    any of ``optional`` present) one length."""
    if not isinstance(table, dict):
        raise _Fault(part, f"got {_shown(table)}, expected an object of columns")
    for k in names:
        if k not in table:
            raise _Fault(f"{part}.{k}", "missing")
    present = [k for k in (*names, *optional) if k in table]
    for k in present:
        if not isinstance(table[k], list):
            raise _Fault(f"{part}.{k}", f"got {_shown(table[k])}, expected a list")
    n = len(table[names[0]])
    for k in present:
        if len(table[k]) != n:
            raise _Fault(f"{part}.{k}", f"has {len(table[k])} rows, {part}.{names[0]} {n}")
    return n


def _requests(rq: Any) -> tuple[Requests, dict[str, np.ndarray]]:
    n = _columns(rq, "requests", REQUEST_COLUMNS)
    if n == 0:
        raise _Fault("requests", "holds no request")
    arrival = _times("requests.arrival_s", rq["arrival_s"], nullable=False)
    bad = np.flatnonzero((arrival < 0) | np.r_[False, arrival[1:] < arrival[:-1]])
    if bad.size:
        i = int(bad[0])
        raise _Fault(f"requests.arrival_s[{i}]", f"got {arrival[i]}, expected a time >= 0 "
                                                 "and not before the row above (arrival order)")
    requests = Requests(arrival, _counts("requests.prompt_tokens", rq["prompt_tokens"], 1),
                        _counts("requests.output_tokens", rq["output_tokens"], 1))
    for i, s in enumerate(rq["status"]):
        if s not in STATUSES:
            raise _Fault(f"requests.status[{i}]", f"got {_shown(s)}, expected one of "
                                                  f"{', '.join(STATUSES)}")
    status = np.array([_CODES[s] for s in rq["status"]], dtype=np.int8)
    reason = []
    for i, r in enumerate(rq["reason"]):
        if r is not None and not isinstance(r, str):
            raise _Fault(f"requests.reason[{i}]", f"got {_shown(r)}, expected text or null")
        reason.append(r or "")
    cols = {"first_sched": _times("requests.first_scheduled_s", rq["first_scheduled_s"], True),
            "first_token": _times("requests.first_token_s", rq["first_token_s"], True),
            "finish": _times("requests.finish_s", rq["finish_s"], True),
            "preemptions": _counts("requests.preemptions", rq["preemptions"], 0),
            "status": status, "reason": np.array(reason, dtype=object)}
    _latencies(arrival, cols)
    return requests, cols


def _latencies(arrival: np.ndarray, cols: dict[str, np.ndarray]) -> None:
    """A finished request has its first token and finish, in order after its arrival;
    any request's recorded times are in that order too, its first scheduling among them
    (after its arrival, not after its first token)."""
    first, finish, done = cols["first_token"], cols["finish"], cols["status"] == FINISHED
    sched = cols["first_sched"]
    # A rejected request never ran; an unfinished one has no finish.
    for key, col, st in (("first_scheduled_s", sched, "rejected"), ("first_token_s", first,
                         "rejected"), ("finish_s", finish, "rejected"),
                         ("finish_s", finish, "unfinished")):
        odd = np.flatnonzero((cols["status"] == _CODES[st]) & ~np.isnan(col))
        if odd.size:
            raise _Fault(f"requests.{key}[{int(odd[0])}]",
                         f"got {col[odd[0]]} for a request {st}, expected null")
    for key, col in (("first_token_s", first), ("finish_s", finish)):
        miss = np.flatnonzero(done & np.isnan(col))
        if miss.size:
            raise _Fault(f"requests.{key}[{int(miss[0])}]",
                         "null for a finished request, expected its time (s)")
    for key, col, before, what in (("first_token_s", first, arrival, "its arrival_s"),
                                   ("finish_s", finish, first, "its first_token_s")):
        with np.errstate(invalid="ignore"):
            bad = np.flatnonzero(col < before)
        if bad.size:
            i = int(bad[0])
            raise _Fault(f"requests.{key}[{i}]", f"got {col[i]}, before {what} "
                                                 f"{before[i]} (a negative latency)")
    with np.errstate(invalid="ignore"):
        early, late = np.flatnonzero(sched < arrival), np.flatnonzero(sched > first)
    for bad, rule, bound in ((early, "before its arrival_s", arrival),
                             (late, "after its first_token_s", first)):
        if bad.size:
            i = int(bad[0])
            raise _Fault(f"requests.first_scheduled_s[{i}]",
                         f"got {sched[i]}, {rule} {bound[i]}; expected a time from the "
                         "request's arrival to its first token")


def _steps(st: Any) -> dict[str, np.ndarray]:
    # {} or empty columns is a record without steps; a column of scalars (0 included)
    # is a fault that _columns names, not "no steps".
    if st is None or (isinstance(st, dict) and all(isinstance(v, list) and not v
                                                   for v in st.values())):
        return {k: np.empty(0) for k in STEP_COLUMNS}
    n = _columns(st, "steps", STEP_COLUMNS, OPTIONAL_STEP_COLUMNS)
    out = {k: _times(f"steps.{k}", st[k], nullable=False)
           for k in ("start_s", "end_s", "exec_s", *OPTIONAL_STEP_COLUMNS) if k in st}
    for k in StepShape._fields:
        out[k] = _counts(f"steps.{k}", st[k], 0, MAX_STEP_COUNT).astype(float)
    if n == 0:
        return out
    checks = (("start_s", out["start_s"] < 0, "a time >= 0 (s)"),
              ("end_s", out["end_s"] < out["start_s"], "a time not before its start_s"),
              ("exec_s", out["exec_s"] <= 0, "seconds > 0 (the executor's time for it)"),
              *((k, out[k] < 0, "seconds >= 0") for k in OPTIONAL_STEP_COLUMNS if k in out),
              ("seqs", out["seqs"] < 1, "a whole number >= 1"))
    for k, bad, want in checks:
        if bad.any():
            i = int(np.argmax(bad))
            raise _Fault(f"steps.{k}[{i}]", f"got {out[k][i]:g}, expected {want}")
    _within_steps(out)
    _step_shapes(out)
    return out


def _step_shapes(out: dict[str, np.ndarray]) -> None:
    """Each step's counts agree with each other (:class:`StepShape`; each rule's words
    below), and the steps follow one another in time."""
    seqs, new, ctx, pseqs, ptok, pairs, kv = (out[k] for k in StepShape._fields)
    decodes = seqs - pseqs
    for key, bad, want in (("prefill_seqs", pseqs > seqs, "at most its seqs"),
            ("prefill_tokens", (ptok > new) | (ptok < 2 * pseqs),
             "at most its new_tokens, and at least 2 a prefill entry"),
            ("new_tokens", new - ptok < decodes, "at least one a decode entry beside its "
             "prefill_tokens"),
            ("decode_kv", (kv < decodes) | (kv > ctx + decodes),
             "from 1 to its context + 1 a decode entry (context_tokens)"),
            ("prefill_pairs", (pairs < ptok) | (pairs > ptok * ctx + ptok * (ptok + 1) / 2),
             "from 1 a prefill token to each against its context and itself")):
        if bad.any():
            i = int(np.argmax(bad))
            raise _Fault(f"steps.{key}[{i}]", f"got {out[key][i]:g}, expected {want}")
    back = np.flatnonzero(out["start_s"][1:] < out["end_s"][:-1] - STEP_SLACK_S)
    if back.size:
        i = int(back[0]) + 1
        raise _Fault(f"steps.start_s[{i}]", f"got {out['start_s'][i]:g}, before the previous "
                     f"step's end_s {out['end_s'][i - 1]:g}; steps run one after another")


# How far (s) a step's executor or CPU time may pass its wall time, which another clock
# measured: timer granularity and a virtual clock's rounding, never a real overrun.
STEP_SLACK_S = 1e-3


def _within_steps(out: dict[str, np.ndarray]) -> None:
    """Each step's exec_s (and cpu_s) falls within the step, end_s - start_s: a longer
    one is a hand edit or mixed units, and would price the step above its own wall."""
    wall = out["end_s"] - out["start_s"]
    for k in ("exec_s", "cpu_s"):
        if k not in out:
            continue
        bad = np.flatnonzero(out[k] > wall + STEP_SLACK_S)
        if bad.size:
            i = int(bad[0])
            raise _Fault(f"steps.{k}[{i}]", f"got {out[k][i]:g}, longer than its step "
                                            f"(end_s - start_s = {wall[i]:g} s); expected "
                                            f"at most that, give or take {STEP_SLACK_S:g} s")


def _probe(x: Any) -> dict[str, Any] | None:
    """The optional probe: ``entries`` {label: [[new tokens, context tokens], ...]},
    ``before_s`` and ``after_s`` {label: seconds > 0}, the same labels in each."""
    if x is None:
        return None
    if not isinstance(x, dict):
        raise _Fault("probe", f"got {_shown(x)}, expected an object or null")
    entries = x.get("entries")
    if not isinstance(entries, dict):
        raise _Fault("probe.entries", f"got {_shown(entries)}, expected an object")
    for label, rows in entries.items():
        ok = isinstance(rows, list) and rows and all(
            isinstance(r, list) and len(r) == 2 and _whole(r[0], 1) and _whole(r[1], 0)
            for r in rows)
        if not ok:
            raise _Fault(f"probe.entries.{label}", f"got {_shown(rows)}, expected a list of "
                                                   "[new tokens >= 1, context tokens >= 0]")
    for side in ("before_s", "after_s"):
        times = x.get(side)
        if not isinstance(times, dict):
            raise _Fault(f"probe.{side}", f"got {_shown(times)}, expected an object")
        for label in entries:
            t: Any = times.get(label)
            if not _finite(t) or t <= 0:
                raise _Fault(f"probe.{side}.{label}", f"got {_shown(t)}, expected seconds > 0")
    return x


def read_record(record: Any, source: str) -> ReplayRecord:
    """Check a parsed replay file and return its contents; any fault is one
    :class:`ServesimError` naming ``source`` and the key."""
    if not isinstance(record, dict):
        raise ServesimError(f"not a replay file (a JSON {type(record).__name__}, expected "
                            "an object)", source=source)
    if record.get("schema") != REPLAY_SCHEMA:
        raise ServesimError(f"not a replay file (schema {_shown(record.get('schema'))}, "
                            f"expected {REPLAY_SCHEMA!r})", source=source)
    try:
        label = _label(record)
        level = record.get("level")
        if level is not None and not isinstance(level, str):
            raise _Fault("level", f"got {_shown(level)}, expected text or null")
        notes = record.get("notes") or []
        if not isinstance(notes, list) or not all(isinstance(s, str) for s in notes):
            raise _Fault("notes", f"got {_shown(notes)}, expected a list of text")
        device = _mapping(record, "device", required=False)
        if not isinstance(device.get("type", ""), str):
            raise _Fault("device.type", f"got {_shown(device['type'])}, expected text "
                                        "(cpu or cuda)")
        model = _mapping(record, "model", required=True)
        if not isinstance(model.get("name"), str):
            raise _Fault("model.name", f"got {_shown(model.get('name'))}, expected text")
        odd = sorted(set(model) - {f.name for f in dataclasses.fields(ModelSpec)})
        if odd:  # as serving's keys are: a misspelt dimension would go unchecked
            raise _Fault(f"model.{odd[0]}", "not a field of a model description")
        requests, cols = _requests(record.get("requests"))
        return ReplayRecord(
            label=label, level=level, rate_rps=_opt_number(record, "rate_rps", 0.0, True),
            load=_opt_number(record, "load", 0.0, False), device=device, model=model,
            serving=_mapping(record, "serving", required=True), notes=list(notes),
            probe=_probe(record.get("probe")), requests=requests, cols=cols,
            steps=_steps(record.get("steps")))
    except _Fault as exc:
        raise ServesimError(str(exc), source=source) from None


def read_replay(record: Any, source: str) -> tuple[Requests, dict[str, np.ndarray],
                                                   dict[str, np.ndarray]]:
    """(requests, measured per-request columns, step columns) of a replay record
    (:func:`read_record`)."""
    rec = read_record(record, source)
    return rec.requests, rec.cols, rec.steps


def model_mismatch(profile: Any, model: dict[str, Any], side: str = "replay") -> str | None:
    """Why a profile (:class:`sim.cost.profilecost.ProfileCost`) cannot price a run of ``model``
    (ModelSpec fields: a record's, or those of a replay about to run), or None when it
    can: every dimension but the dtype must agree. ``side`` names the run in the text."""
    theirs = {k: v for k, v in dataclasses.asdict(profile.model).items() if k != "dtype"}
    differ = [k for k in theirs if model.get(k) != theirs[k]]
    if not differ:
        return None
    shown = "; ".join(f"{k} {theirs[k]!r} in the profile, {model.get(k)!r} in the {side}"
                      for k in differ[:3])
    return (f"it was measured for model {profile.model.name!r}, the {side}'s model is "
            f"{model.get('name')!r}, which differs in " + shown
            + (f" (and {len(differ) - 3} more)" if len(differ) > 3 else ""))
