"""Readers for the request-trace file formats that :mod:`sim.workload.traces` understands.

Each reader streams its file in chunks of :data:`sim.workload.traceio.CHUNK_ROWS` lines
and yields :class:`~sim.workload.traceio.Chunk` objects of numpy columns, so a file of
millions of rows never holds more than one chunk of Python strings at a time. Values are
checked as they are read, while the 1-based line numbers are still at hand, and every
error is a one-line :class:`ServesimError` naming the file, the line and the value.

Formats (``name``: columns):

- ``servesim``: ``arrival_s,prompt_tokens,output_tokens`` plus optional ``priority``,
  ``class`` and ``prefix_hash_ids`` (integers separated by spaces or ``;``).
- ``azure``: Azure LLM inference traces 2023/2024, ``TIMESTAMP,ContextTokens,GeneratedTokens``.
- ``burstgpt``: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``.
- ``mooncake``: JSON lines ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``.
- ``lengths``: ``prompt_tokens,output_tokens`` (or vidur's
  ``num_prefill_tokens,num_decode_tokens``).
"""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from sim.configtools import MAX_TIME_S, DuplicateKeyError, load_json
from sim.errors import ServesimError
from sim.workload import traceio
from sim.workload.traceio import (
    Chunk,
    CsvFile,
    first_bad,
    floats,
    in_int64,
    labels,
    line_error,
    open_text,
    parse_hash_ids,
    seconds,
    whole,
)

SERVESIM_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "priority", "class",
                    "prefix_hash_ids")
LENGTH_NAMES = (("prompt_tokens", "output_tokens"), ("num_prefill_tokens", "num_decode_tokens"))
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Log Type")
# Tokens each of a Mooncake trace's hash_ids covers (its published block size).
MOONCAKE_BLOCK_TOKENS = 512
# The reader option load_trace sets to the KV block size (tokens), not a user's option.
KV_BLOCK_TOKENS = "kv_block_tokens"


def read_servesim(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                  ) -> Iterator[Chunk]:
    """servesim CSV: arrivals used as written (seconds >= 0), optional extra columns."""
    f = CsvFile(path, src)
    f.only(SERVESIM_COLUMNS)
    ia, ip, io_ = f.require(SERVESIM_COLUMNS[:3])
    ipr, icl, ihs = (f.index.get(c) for c in SERVESIM_COLUMNS[3:])
    per_hash = opts.get("prefix_block_tokens") or opts.get(KV_BLOCK_TOKENS)
    for lines, cols in f.chunks():
        chunk = Chunk(
            lines,
            seconds(cols[ia], lines, "arrival_s", src),
            whole(cols[ip], lines, "prompt_tokens", src),
            whole(cols[io_], lines, "output_tokens", src),
            None if ipr is None else whole(cols[ipr], lines, "priority", src, minimum=None),
            None if icl is None else labels(cols[icl], lines, "class", src),
            None if ihs is None else parse_hash_ids(cols[ihs], lines, src),
        )
        if chunk.hashes is not None and per_hash:
            _check_hash_room(chunk, per_hash, src, "prefix_block_tokens" not in opts)
        yield chunk


def _check_hash_room(chunk: Chunk, per_hash: int, src: str, kv_block: bool = False) -> None:
    """Refuse a row whose prefix_hash_ids name more blocks of ``per_hash`` tokens than its
    prompt fills: the ids past the prompt would be dropped without a word. Checked here,
    where the row's line is known, rather than on the built requests. ``kv_block``: the
    size is the KV block's (the trace gives none), which the error says, with the key
    that sets another."""
    assert chunk.hashes is not None
    for i, h in enumerate(chunk.hashes):
        room = -(-int(chunk.prompt[i]) // per_hash)
        if len(h) > room:
            raise line_error(src, int(chunk.lines[i]), f"prefix_hash_ids names {len(h)} "
                             f"blocks of {per_hash} tokens, more than its "
                             f"{int(chunk.prompt[i])}-token prompt fills ({room}); "
                             "prefix_hash_ids lists the prompt's leading blocks"
                             + (" (of serving.block_size tokens each unless "
                                "workload.trace.prefix_block_tokens says otherwise)"
                                if kv_block else ""))


def read_lengths(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                 ) -> Iterator[Chunk]:
    """Length-only CSV: no arrivals. vidur's column names are accepted as well."""
    f = CsvFile(path, src)
    names = next((n for n in LENGTH_NAMES if all(c in f.index for c in n)), LENGTH_NAMES[0])
    if names == LENGTH_NAMES[0]:
        # Our own schema: an unknown column is probably a typo, or arrivals misnamed
        # (without arrival_s the file is read as lengths alone).
        f.only(names, " (a file of lengths alone; a trace with arrival times gives them "
                      f"as arrival_s, in seconds: columns {', '.join(SERVESIM_COLUMNS)})")
    ip, io_ = f.require(names)
    for lines, cols in f.chunks():
        yield Chunk(lines, None, whole(cols[ip], lines, names[0], src),
                    whole(cols[io_], lines, names[1], src))


_TZ = re.compile(r"(Z|[+-]\d\d:?\d\d)$")
# Azure writes times in .NET's 100 ns ticks: 7 fractional digits in the 2023 traces, 6 in
# the 2024 ones. A longer fraction is refused rather than cut to nanoseconds unseen.
AZURE_FRACTION_DIGITS = 7
_AZURE_EXAMPLE = "'2023-11-16 18:17:03.9799600'"


@dataclass(frozen=True)
class _Zone:
    """How a file's first timestamp is written: with a UTC offset or not (its line, value)."""

    labelled: bool
    line: int
    value: str


def _offset_ns(m: re.Match[str], line: int, value: str, src: str) -> int:
    """A matched UTC offset (``Z``, ``+HH:MM``, ``-HHMM``) in nanoseconds, -12:00..+14:00."""
    if m.group(1) == "Z":
        return 0
    hhmm = m.group(1).replace(":", "")
    sign = -1 if hhmm[0] == "-" else 1
    minutes = int(hhmm[1:3]) * 60 + int(hhmm[3:5])
    if int(hhmm[3:5]) > 59 or minutes > (12 * 60 if sign < 0 else 14 * 60):
        raise line_error(src, line, f"TIMESTAMP = {value!r} has UTC offset {m.group(1)}; "
                         "offsets run from -12:00 to +14:00")
    return sign * minutes * 60 * 10**9


def _strip_offsets(vals: list[str], values: Sequence[str], lines: np.ndarray, src: str,
                   zone: _Zone | None) -> tuple[np.ndarray | None, _Zone]:
    """Remove each value's UTC offset from ``vals`` (in place). Returns the offsets in ns
    (None when the file's rows carry none) and the file's zone, set by its first row.

    Every row must be written as the first is: a time without an offset has no zone to be
    read in, and taking it as UTC beside offset rows moved it by hours without a word."""
    found = [_TZ.search(v) for v in vals]
    if zone is None:
        zone = _Zone(found[0] is not None, int(lines[0]), values[0])
    odd = next((i for i, m in enumerate(found) if (m is not None) != zone.labelled), None)
    if odd is not None:
        this, first = ("has a", "has none") if not zone.labelled else ("has no", "has one")
        raise line_error(src, int(lines[odd]), f"TIMESTAMP = {values[odd]!r} {this} UTC "
                         f"offset but line {zone.line} ({zone.value!r}) {first}; write "
                         "every row with an offset (Z or +HH:MM) or every row without")
    if not zone.labelled:
        return None, zone
    offsets = np.zeros(len(vals), dtype=np.int64)
    for i, m in enumerate(found):
        assert m is not None  # every row is labelled, checked above
        offsets[i] = _offset_ns(m, int(lines[i]), values[i], src)
        vals[i] = vals[i][: m.start()].rstrip()  # numpy reads a trailing space as a zone
    return offsets, zone


# The whole years datetime64[ns] holds (1677-09-21 to 2262-04-11), a day's UTC offset
# either way included.
AZURE_YEARS = (1678, 2261)
# A date and a time of day to the second; the ISO 8601 'T' is read as the space is.
_AZURE_SHAPE = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.(\d+))?")


def _check_shape(vals: Sequence[str], values: Sequence[str], lines: np.ndarray, src: str
                 ) -> None:
    """Refuse a value that is not a date with hours, minutes and seconds, or has too fine
    a fraction."""
    for i, v in enumerate(vals):
        # numpy reads a bare number as a year (1700000000 as the year 1,700,000,000).
        if v[4:5] != "-" or v[7:8] != "-":
            raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date-"
                             f"time like {_AZURE_EXAMPLE} (epoch numbers are not read)")
        m = _AZURE_SHAPE.fullmatch(v)
        if m is None:
            # numpy takes a date alone as midnight and HH:MM as second 0: a file cut to
            # days or minutes would replay as bursts without a word.
            raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date "
                             f"and time to the second like {_AZURE_EXAMPLE} (YYYY-MM-DD "
                             "HH:MM:SS, a fraction with digits after its dot)")
        if not AZURE_YEARS[0] <= int(v[:4]) <= AZURE_YEARS[1]:
            # Past these, int64 nanoseconds wrap around without an error from numpy, and
            # the wrapped time would be read as another arrival.
            raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is outside the "
                             f"years {AZURE_YEARS[0]} to {AZURE_YEARS[1]} that are read "
                             "(nanoseconds since 1970 in 64 bits)")
        if m.group(1) is not None and len(m.group(1)) > AZURE_FRACTION_DIGITS:
            raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} has "
                             f"{len(m.group(1))} fractional digits; at most "
                             f"{AZURE_FRACTION_DIGITS} are allowed (100 ns ticks, as Azure "
                             "writes times)")


def _timestamps_ns(values: Sequence[str], lines: np.ndarray, src: str, zone: _Zone | None
                   ) -> tuple[np.ndarray, _Zone]:
    """Parse ``YYYY-MM-DD HH:MM:SS.fffffff`` (at most 7 fractional digits; a UTC offset on
    every row or on none) to int64 nanoseconds since the epoch, naming any bad value.
    ``zone`` is what the file's earlier chunks set (None for the first chunk)."""
    vals = [v.strip() for v in values]
    # numpy drops offsets with a warning, so they are removed and applied here.
    offsets, zone = _strip_offsets(vals, values, lines, src, zone)
    _check_shape(vals, values, lines, src)
    try:
        with warnings.catch_warnings():  # a zone left in is refused below, not warned of
            warnings.simplefilter("ignore", UserWarning)
            ns = np.array(vals, dtype="datetime64[ns]")
    except ValueError:
        i = first_bad(vals, lambda s: np.datetime64(s, "ns"))
        raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date-time "
                         f"like {_AZURE_EXAMPLE}") from None
    nat = np.isnat(ns)
    if nat.any():
        i = int(np.argmax(nat))
        raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date-time")
    out = ns.astype(np.int64)
    return (out if offsets is None else out - offsets), zone


def _check_span(ns: np.ndarray, first: int, values: Sequence[str], lines: np.ndarray,
                src: str) -> None:
    """Refuse a time MAX_TIME_S seconds or more from the first row's: past 292 years the
    int64 difference wraps without an error, and no arrival that far off is read."""
    span_s = (ns.astype(np.float64) - float(first)) / 1e9
    bad = np.flatnonzero(~(np.abs(span_s) < MAX_TIME_S))
    if bad.size:
        i = int(bad[0])
        raise line_error(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is {span_s[i]:.4g} s "
                         f"from the first row's; arrivals are read up to {MAX_TIME_S:.0e} s "
                         "(31 years)")


def read_azure(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
               ) -> Iterator[Chunk]:
    """Azure LLM inference trace: arrival = TIMESTAMP - first row's TIMESTAMP, in seconds."""
    f = CsvFile(path, src)
    it, ip, io_ = f.require(AZURE_COLUMNS)
    first: int | None = None
    zone: _Zone | None = None
    for lines, cols in f.chunks():
        ns, zone = _timestamps_ns(cols[it], lines, src, zone)
        if first is None:
            first = int(ns[0])
        _check_span(ns, first, cols[it], lines, src)
        # Subtracting in int64 keeps nanosecond precision over week-long files.
        yield Chunk(lines, (ns - first).astype(np.float64) / 1e9,
                    whole(cols[ip], lines, "ContextTokens", src),
                    whole(cols[io_], lines, "GeneratedTokens", src))


def read_burstgpt(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                  ) -> Iterator[Chunk]:
    """BurstGPT: optional ``model`` / ``log_type`` filters; failed rows (0 response tokens)
    are dropped and counted. Every dropped row is counted under its first reason."""
    f = CsvFile(path, src)
    it, im, ip, io_, il = f.require(BURSTGPT_COLUMNS)
    model, log_type = opts.get("model"), opts.get("log_type")
    seen: dict[str, set[str]] = {"model": set(), "log_type": set()}
    for lines, cols in f.chunks():
        keep = np.ones(len(lines), dtype=bool)
        for key, want, col in (("model", model, im), ("log_type", log_type, il)):
            if want is None:
                continue
            vals = np.array([v.strip() for v in cols[col]], dtype=np.str_)
            seen[key].update(np.unique(vals).tolist())
            match = vals == want
            dropped[f"{key} is not {want!r}"] += int((keep & ~match).sum())
            keep &= match
        # Failed requests carry 0 response tokens (and usually 0 request tokens too).
        resp = floats(cols[io_], lines, "Response tokens", src)
        failed = keep & (resp == 0)
        dropped["failed (0 response tokens)"] += int(failed.sum())
        keep &= ~failed
        idx = np.flatnonzero(keep)
        if len(idx) == 0:
            continue
        sub = lines[idx]
        if len(idx) == len(lines):  # nothing dropped: skip the per-row copy
            ts, req, rsp = (list(cols[c]) for c in (it, ip, io_))
        else:
            ts, req, rsp = ([cols[c][i] for i in idx] for c in (it, ip, io_))
        yield Chunk(sub, seconds(ts, sub, "Timestamp", src),
                    whole(req, sub, "Request tokens", src),
                    whole(rsp, sub, "Response tokens", src))
    for key, want in (("model", model), ("log_type", log_type)):
        if want is not None and want not in seen[key]:
            # Quoted (a control character stays escaped) and, past a few, counted.
            has = [repr(v) for v in sorted(seen[key])]
            shown = ", ".join(has[:LISTED]) + (f" and {len(has) - LISTED:,} more"
                                               if len(has) > LISTED else "")
            raise ServesimError(f"{key} {want!r} matches no row; the file has: "
                                f"{shown or 'no rows'}", source=src)


# Values of a BurstGPT column an error lists before it counts the rest.
LISTED = 20
# Where a reader counts a field it leaves unread (a key of its ``dropped`` counter).
UNUSED = "unused:"
# Fields AIPerf's mooncake_trace rows may carry besides the four servesim reads (its
# multi-turn sessions and payloads): read past, and counted, not refused as misspelt.
MOONCAKE_OTHER = ("session_id", "delay", "text_input", "input_text", "messages", "tools",
                  "extra")


def read_mooncake(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                  ) -> Iterator[Chunk]:
    """Mooncake JSON lines: timestamp in ms, lengths in tokens, optional ``hash_ids``."""
    keys = ("timestamp", "input_length", "output_length")
    with open_text(path, src) as fh:
        n = 0
        while True:
            block = list(islice(fh, traceio.CHUNK_ROWS))
            if not block:
                return
            recs: list[dict[str, Any]] = []
            nums: list[int] = []
            for i, text in enumerate(block, start=n + 1):
                if not text.strip():
                    continue
                try:
                    rec = load_json(text)
                except DuplicateKeyError as exc:
                    raise line_error(src, i, f"names {exc} twice") from None
                except json.JSONDecodeError as exc:
                    raise line_error(src, i, f"not a JSON object ({exc.msg}): {text.strip()[:60]!r}"
                               ) from None
                except RecursionError:
                    raise line_error(src, i, "nested too deeply to read (about 1,000 levels); "
                                     "a row is one flat JSON object") from None
                if not isinstance(rec, dict) or any(k not in rec for k in keys):
                    raise line_error(src, i, f"expected an object with keys {', '.join(keys)} "
                               f"(and optional hash_ids), got {text.strip()[:60]!r}")
                odd = sorted(set(rec) - {*keys, "hash_ids", *MOONCAKE_OTHER})
                if odd:  # a misspelt hash_ids would read as no prefix sharing at all
                    raise line_error(src, i, f"unknown key {odd[0]!r}; allowed: "
                                     f"{', '.join(keys)}, hash_ids (and, not read, "
                                     f"{', '.join(MOONCAKE_OTHER)})")
                for k in MOONCAKE_OTHER:
                    if k in rec:
                        dropped[UNUSED + k] += 1
                for k in keys:
                    # json's true would read as 1, and "5" as 5: neither is a number.
                    if isinstance(rec[k], bool) or not isinstance(rec[k], (int, float)):
                        raise line_error(src, i, f"{k} = {rec[k]!r} is not a number")
                recs.append(rec)
                nums.append(i)
            n += len(block)
            if not recs:
                continue
            lines = np.asarray(nums, dtype=np.int64)
            ts = seconds([r["timestamp"] for r in recs], lines, "timestamp", src) / 1000.0
            prompts = whole([r["input_length"] for r in recs], lines, "input_length", src)
            per_hash = int(opts.get("prefix_block_tokens", MOONCAKE_BLOCK_TOKENS))
            hashes = None
            if any("hash_ids" in r for r in recs):
                hashes = []
                for r, ln, p in zip(recs, nums, prompts.tolist(), strict=True):
                    h = r.get("hash_ids", [])
                    if not isinstance(h, list) or not all(
                        isinstance(x, int) and not isinstance(x, bool) and in_int64(x)
                        for x in h
                    ):
                        raise line_error(src, ln, f"hash_ids = {str(h)[:60]!r}; expected a list of "
                                   "integers from -2**63 to 2**63 - 1")
                    if len(h) > -(-p // per_hash):  # more blocks than the prompt fills
                        raise line_error(src, ln, f"hash_ids names {len(h)} blocks of {per_hash} "
                                   f"tokens for an input_length of {p}: at most "
                                   f"{-(-p // per_hash)}")
                    hashes.append(np.array(h, dtype=np.int64))
            yield Chunk(lines, ts, prompts,
                        whole([r["output_length"] for r in recs], lines, "output_length", src),
                        hashes=hashes)
