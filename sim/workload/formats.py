"""Readers for the request-trace file formats that :mod:`sim.workload.traces` understands.

Each reader streams its file in chunks of ``CHUNK_ROWS`` lines and yields :class:`Chunk`
objects of numpy columns, so a file of millions of rows never holds more than one
chunk of Python strings at a time. Values are checked as they are read, while the
1-based line numbers are still at hand, and every error is a one-line
:class:`ServesimError` naming the file, the line and the value.

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

import csv
import gzip
import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import IO, Any

import numpy as np

from sim.errors import ServesimError
from sim.files import decode, sniff_head

CHUNK_ROWS = 1 << 16
"""Lines read per chunk: large enough that numpy conversion dominates, small enough
that the chunk's Python strings stay at a few MiB."""

SERVESIM_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens", "priority", "class",
                    "prefix_hash_ids")
LENGTH_NAMES = (("prompt_tokens", "output_tokens"), ("num_prefill_tokens", "num_decode_tokens"))
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Log Type")
# Tokens each of a Mooncake trace's hash_ids covers (its published block size).
MOONCAKE_BLOCK_TOKENS = 512


@dataclass
class Chunk:
    """One block of parsed rows. ``lines`` are 1-based file line numbers (int64).

    ``arrival`` is in seconds (float64): as written for ``servesim`` and ``burstgpt``,
    relative to the file's first timestamp for ``azure``, and ``timestamp / 1000`` for
    ``mooncake``; None for length-only files.
    """

    lines: np.ndarray
    arrival: np.ndarray | None
    prompt: np.ndarray
    output: np.ndarray
    priority: np.ndarray | None = None
    klass: np.ndarray | None = None
    hashes: list[np.ndarray] | None = None


def open_text(path: Path, src: str) -> IO[str]:
    """Open ``path`` as UTF-8 text, gzip transparently (known by its leading bytes, with
    or without ``.gz``); a missing, unreadable, empty, otherwise compressed, UTF-16 or
    binary file is a ServesimError. Bytes that are not UTF-8 further in raise
    ``UnicodeDecodeError`` while reading (:func:`sim.workload.traces.load_trace` names them)."""
    head = sniff_head(path, "trace", 4096)
    gz = head.startswith(b"\x1f\x8b")
    if not gz and head.strip():  # (an empty file: first_line says so, naming line 1)
        decode(head, src, "trace", partial=True)  # compressed, UTF-16 or binary: say so now
    try:
        if gz:
            return gzip.open(path, "rt", encoding="utf-8-sig", newline="")
        return open(path, encoding="utf-8-sig", newline="")
    except OSError as exc:
        raise ServesimError(f"cannot open trace file: {exc.strerror}", source=src) from None


def bad_utf8(path: Path, src: str) -> ServesimError:
    """The error for a trace whose text is not all UTF-8: the first such line, the byte
    and its offset in the line (found by reading the file again, as bytes)."""
    with gzip.open(path) if sniff_head(path, "trace", 2) == b"\x1f\x8b" else \
            open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return _err(src, n, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte "
                            f"{exc.start + 1} of the line; save the trace file as UTF-8")
    return ServesimError("not UTF-8 text; save the trace file as UTF-8", source=src)


def first_line(path: Path, src: str) -> tuple[int, str]:
    """Return ``(line number, text)`` of the first non-blank line; an empty file is an error."""
    with open_text(path, src) as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                return n, line.strip()
    raise ServesimError("the trace file is empty (no header, no rows)", source=src, where="line 1")


def _err(src: str, line: int, message: str) -> ServesimError:
    return ServesimError(message, source=src, where=f"line {line}")


def _first_bad(values: Sequence[Any], conv: Any) -> int:
    """Index of the first element that ``conv`` rejects (slow path, only after a failure)."""
    for i, v in enumerate(values):
        try:
            conv(v)
        except (ValueError, TypeError, OverflowError):
            return i
    return 0


def _in_int64(v: int) -> bool:
    """Whether the int ``v`` fits a signed 64-bit integer (hash ids are stored so)."""
    return -(2**63) <= v < 2**63


def _int64(text: Any) -> int:
    """``text`` as an int that a signed 64-bit integer holds (ValueError otherwise)."""
    v = int(text)
    if not _in_int64(v):
        raise ValueError(f"{v} is out of the int64 range")
    return v


def floats(values: Sequence[Any], lines: np.ndarray, name: str, src: str) -> np.ndarray:
    """Convert ``values`` to float64, naming the first non-number's line and value."""
    try:
        x = np.array(values, dtype=np.float64)
    except (ValueError, TypeError):
        x = None
    if x is None or x.ndim != 1:
        # A JSON list where a number belongs can make a 2-D array instead of an error.
        i = _first_bad(values, float)
        raise _err(src, int(lines[i]), f"{name} = {values[i]!r} is not a number") from None
    return x


def whole(values: Sequence[Any], lines: np.ndarray, name: str, src: str,
          minimum: int | None = 1) -> np.ndarray:
    """Convert ``values`` to int64; each must be a finite whole number >= ``minimum``."""
    try:
        x = floats(values, lines, name, src)
    except ServesimError:
        # The rows before the first non-number: a bad one among them comes first.
        i = _first_bad(values, float)
        whole(values[:i], lines[:i], name, src, minimum)
        raise
    # Whole-valued floats such as "12.0" are accepted; anything else is named.
    rule = ("a whole number" + (f" >= {minimum}" if minimum is not None else "")
            + " and at most 2**53")
    bad = ~np.isfinite(x) | (x != np.floor(x)) | (np.abs(x) > 2.0**53)
    if minimum is not None:
        bad |= x < minimum
    if bad.any():
        i = int(np.argmax(bad))
        raise _err(src, int(lines[i]), f"{name} = {values[i]!r}; must be {rule}")
    return x.astype(np.int64)


def seconds(values: Sequence[Any], lines: np.ndarray, name: str, src: str) -> np.ndarray:
    """Convert ``values`` to float64 seconds; each must be finite and >= 0."""
    try:
        x = floats(values, lines, name, src)
    except ServesimError:
        i = _first_bad(values, float)
        seconds(values[:i], lines[:i], name, src)  # an earlier bad time comes first
        raise
    bad = ~np.isfinite(x) | (x < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise _err(src, int(lines[i]), f"{name} = {values[i]!r}; must be a finite time >= 0")
    return x


class CsvFile:
    """A CSV trace read in chunks: the header, column lookup, and rows as column tuples."""

    def __init__(self, path: Path, src: str):
        self.path, self.src = path, src
        self.header_line, text = first_line(path, src)
        self.header = [h.strip() for h in next(csv.reader([text]))]
        twice = sorted({h for h in self.header if self.header.count(h) > 1})
        if twice:  # which of the two would the rows' values come from?
            raise _err(src, self.header_line, f"column(s) {', '.join(twice)} given twice in "
                                              f"the header {text.strip()!r}")
        self.index = {h: i for i, h in enumerate(self.header)}

    def require(self, names: Sequence[str]) -> list[int]:
        """Column indices of ``names``; a missing one is an error naming the header."""
        missing = [n for n in names if n not in self.index]
        if missing:
            raise _err(self.src, self.header_line,
                       f"missing column(s) {', '.join(missing)}; header is "
                       f"{','.join(self.header)!r}, required: {', '.join(names)}")
        return [self.index[n] for n in names]

    def only(self, allowed: Sequence[str]) -> None:
        """Reject header columns not in ``allowed`` (catches typos such as ``arival_s``)."""
        extra = [h for h in self.header if h not in allowed]
        if extra:
            raise _err(self.src, self.header_line,
                       f"unknown column {extra[0]!r}; allowed: {', '.join(allowed)}")

    def chunks(self) -> Iterator[tuple[np.ndarray, list[tuple[str, ...]]]]:
        """Yield ``(line numbers, columns)`` per chunk; blank lines are skipped."""
        width = len(self.header)
        with open_text(self.path, self.src) as fh:
            for _ in range(self.header_line):
                next(fh)
            start = self.header_line + 1
            while True:
                try:
                    lines = list(islice(fh, CHUNK_ROWS))
                except UnicodeDecodeError:
                    raise bad_utf8(self.path, self.src) from None
                if not lines:
                    return
                reader = csv.reader(lines)
                try:
                    rows = list(reader)
                except csv.Error as exc:  # e.g. a field past the csv module's size limit
                    raise _err(self.src, start + reader.line_num - 1,
                               f"not readable as CSV: {exc}") from None
                if len(rows) != len(lines):
                    raise _err(self.src, start, "a quoted field spans lines; not supported")
                keep: list[int] = []
                for i, row in enumerate(rows):
                    if len(row) == width:
                        keep.append(i)
                    elif any(f.strip() for f in row):
                        raise _err(self.src, start + i,
                                   f"{len(row)} fields, expected {width} as in the header "
                                   f"(row {','.join(row)!r})")
                if keep:
                    if len(keep) != len(rows):
                        rows = [rows[i] for i in keep]
                    yield start + np.asarray(keep, dtype=np.int64), list(zip(*rows, strict=True))
                start += len(lines)


def labels(values: Sequence[str], lines: np.ndarray, name: str, src: str) -> np.ndarray:
    """Non-empty names (stripped), naming the first empty cell's line."""
    out = [v.strip() for v in values]
    if not all(out):
        i = out.index("")
        raise _err(src, int(lines[i]), f"{name} is empty; every row names its {name}")
    return np.array(out, dtype=np.str_)


def parse_hash_ids(values: Sequence[str], lines: np.ndarray, src: str) -> list[np.ndarray]:
    """Parse ``prefix_hash_ids`` cells (ints separated by spaces or ``;``) into int64 arrays."""
    parts = [v.replace(";", " ").split() for v in values]
    flat = [p for ps in parts for p in ps]
    try:
        ids = np.array(flat, dtype=np.int64)
    except (ValueError, OverflowError):
        for i, ps in enumerate(parts):
            for p in ps:
                try:
                    _int64(p)
                except ValueError:
                    raise _err(src, int(lines[i]),
                               f"prefix_hash_ids has {p!r}; expected integers from -2**63 "
                               "to 2**63 - 1, separated by spaces or ';'") from None
        raise
    bounds = np.cumsum([len(ps) for ps in parts])[:-1]
    return list(np.split(ids, bounds))


def read_servesim(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                  ) -> Iterator[Chunk]:
    """servesim CSV: arrivals used as written (seconds >= 0), optional extra columns."""
    f = CsvFile(path, src)
    f.only(SERVESIM_COLUMNS)
    ia, ip, io_ = f.require(SERVESIM_COLUMNS[:3])
    ipr, icl, ihs = (f.index.get(c) for c in SERVESIM_COLUMNS[3:])
    for lines, cols in f.chunks():
        yield Chunk(
            lines,
            seconds(cols[ia], lines, "arrival_s", src),
            whole(cols[ip], lines, "prompt_tokens", src),
            whole(cols[io_], lines, "output_tokens", src),
            None if ipr is None else whole(cols[ipr], lines, "priority", src, minimum=None),
            None if icl is None else labels(cols[icl], lines, "class", src),
            None if ihs is None else parse_hash_ids(cols[ihs], lines, src),
        )


def read_lengths(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                 ) -> Iterator[Chunk]:
    """Length-only CSV: no arrivals. vidur's column names are accepted as well."""
    f = CsvFile(path, src)
    names = next((n for n in LENGTH_NAMES if all(c in f.index for c in n)), LENGTH_NAMES[0])
    if names == LENGTH_NAMES[0]:
        f.only(names)  # our own schema: an unknown column is probably a typo
    ip, io_ = f.require(names)
    for lines, cols in f.chunks():
        yield Chunk(lines, None, whole(cols[ip], lines, names[0], src),
                    whole(cols[io_], lines, names[1], src))


_TZ = re.compile(r"(Z|[+-]\d\d:?\d\d)$")


def _timestamps_ns(values: Sequence[str], lines: np.ndarray, src: str) -> np.ndarray:
    """Parse ``YYYY-MM-DD HH:MM:SS.fffffff`` (any number of fractional digits, optional
    UTC offset) to int64 nanoseconds since the epoch, naming any unparsable value."""
    vals = [v.strip() for v in values]
    offsets = None
    if any(_TZ.search(v) for v in vals):
        # numpy drops offsets with a warning, so they are removed and applied here.
        offsets = np.zeros(len(vals), dtype=np.int64)
        for i, v in enumerate(vals):
            m = _TZ.search(v)
            if m and m.group(1) != "Z":
                hhmm = m.group(1).replace(":", "")
                sign = -1 if hhmm[0] == "-" else 1
                if int(hhmm[1:3]) > 14 or int(hhmm[3:5]) > 59:  # UTC-12:00 to UTC+14:00
                    raise _err(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} has UTC "
                               f"offset {m.group(1)}; offsets run from -12:00 to +14:00")
                offsets[i] = sign * (int(hhmm[1:3]) * 3600 + int(hhmm[3:5]) * 60) * 10**9
            if m:
                vals[i] = v[: m.start()]
    # numpy reads a bare number as a year (1700000000 as the year 1,700,000,000), so a
    # value must begin as a date does: YYYY-MM-DD.
    for i, v in enumerate(vals):
        if v[4:5] != "-" or v[7:8] != "-":
            raise _err(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date-time "
                       "like '2023-11-16 18:17:03.9799600' (epoch numbers are not read)")
    try:
        ns = np.array(vals, dtype="datetime64[ns]")
    except ValueError:
        i = _first_bad(vals, lambda s: np.datetime64(s, "ns"))
        raise _err(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date-time like "
                   "'2023-11-16 18:17:03.9799600'") from None
    nat = np.isnat(ns)
    if nat.any():
        i = int(np.argmax(nat))
        raise _err(src, int(lines[i]), f"TIMESTAMP = {values[i]!r} is not a date-time")
    out = ns.astype(np.int64)
    return out if offsets is None else out - offsets


def read_azure(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
               ) -> Iterator[Chunk]:
    """Azure LLM inference trace: arrival = TIMESTAMP - first row's TIMESTAMP, in seconds."""
    f = CsvFile(path, src)
    it, ip, io_ = f.require(AZURE_COLUMNS)
    first: int | None = None
    for lines, cols in f.chunks():
        ns = _timestamps_ns(cols[it], lines, src)
        if first is None:
            first = int(ns[0])
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
            raise ServesimError(f"{key} {want!r} matches no row; the file has: "
                                f"{', '.join(sorted(seen[key])) or 'no rows'}", source=src)


def read_mooncake(path: Path, src: str, opts: dict[str, Any], dropped: Counter[str]
                  ) -> Iterator[Chunk]:
    """Mooncake JSON lines: timestamp in ms, lengths in tokens, optional ``hash_ids``."""
    keys = ("timestamp", "input_length", "output_length")
    with open_text(path, src) as fh:
        n = 0
        while True:
            block = list(islice(fh, CHUNK_ROWS))
            if not block:
                return
            recs: list[dict[str, Any]] = []
            nums: list[int] = []
            for i, text in enumerate(block, start=n + 1):
                if not text.strip():
                    continue
                try:
                    rec = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise _err(src, i, f"not a JSON object ({exc.msg}): {text.strip()[:60]!r}"
                               ) from None
                if not isinstance(rec, dict) or any(k not in rec for k in keys):
                    raise _err(src, i, f"expected an object with keys {', '.join(keys)} "
                               f"(and optional hash_ids), got {text.strip()[:60]!r}")
                for k in keys:
                    if isinstance(rec[k], bool):  # json's true would read as 1
                        raise _err(src, i, f"{k} = {rec[k]!r} is not a number")
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
                        isinstance(x, int) and not isinstance(x, bool) and _in_int64(x)
                        for x in h
                    ):
                        raise _err(src, ln, f"hash_ids = {str(h)[:60]!r}; expected a list of "
                                   "integers from -2**63 to 2**63 - 1")
                    if len(h) > -(-p // per_hash):  # more blocks than the prompt fills
                        raise _err(src, ln, f"hash_ids names {len(h)} blocks of {per_hash} "
                                   f"tokens for an input_length of {p}: at most "
                                   f"{-(-p // per_hash)}")
                    hashes.append(np.array(h, dtype=np.int64))
            yield Chunk(lines, ts, prompts,
                        whole([r["output_length"] for r in recs], lines, "output_length", src),
                        hashes=hashes)
