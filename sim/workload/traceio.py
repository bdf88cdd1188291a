"""Reading a trace file in chunks: opening it (plain or gzip, UTF-8), its lines in
chunks of numpy columns (:class:`Chunk`, :class:`CsvFile`), and the typed cell
converters, each refusing a bad value in one line that names the file, the line and
the value. The formats built on them are :mod:`sim.workload.formats`'."""

from __future__ import annotations

import csv
import gzip
import re
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
                return line_error(src, n, f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte "
                            f"{exc.start + 1} of the line; save the trace file as UTF-8")
    return ServesimError("not UTF-8 text; save the trace file as UTF-8", source=src)


def first_line(path: Path, src: str) -> tuple[int, str]:
    """Return ``(line number, text)`` of the first non-blank line; an empty file is an error."""
    with open_text(path, src) as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                return n, line.strip()
    raise ServesimError("the trace file is empty (no header, no rows)", source=src, where="line 1")


def line_error(src: str, line: int, message: str) -> ServesimError:
    return ServesimError(message, source=src, where=f"line {line}")


def first_bad(values: Sequence[Any], conv: Any) -> int:
    """Index of the first element that ``conv`` rejects (slow path, only after a failure)."""
    for i, v in enumerate(values):
        try:
            conv(v)
        except (ValueError, TypeError, OverflowError):
            return i
    return 0


def in_int64(v: int) -> bool:
    """Whether the int ``v`` fits a signed 64-bit integer (hash ids are stored so)."""
    return -(2**63) <= v < 2**63


def plain_digits(text: str) -> bool:
    """Whether ``text`` is free of what Python's number readers take but no trace or CSV
    writer writes: digit grouping (``1_0`` reads as 10) and another script's digits
    (Arabic-Indic, full-width). Either is more likely a corrupted cell than a number
    meant. Cells may be joined and checked at once: neither can form across a join."""
    return "_" not in text and text.isascii()


def _text_of(values: Sequence[Any]) -> str:
    """The text cells of ``values`` joined (one pass in C, not a Python loop per cell;
    a JSON reader's values may hold numbers among them, which are left out)."""
    try:
        return "".join(values)
    except TypeError:
        return "".join(v for v in values if isinstance(v, str))


def _int64(text: Any) -> int:
    """``text`` as an int that a signed 64-bit integer holds (ValueError otherwise, also
    for text that is not :func:`plain_digits`: 1_0 would be the same block as 10)."""
    if not plain_digits(str(text)):
        raise ValueError(f"{text!r} is not written in ASCII digits alone")
    v = int(text)
    if not in_int64(v):
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
        i = first_bad(values, float)
        raise line_error(src, int(lines[i]), f"{name} = {values[i]!r} is not a number") from None
    # float() takes Python's digit grouping and any script's digits: plain_digits.
    if not plain_digits(_text_of(values)):
        odd = next(i for i, v in enumerate(values)
                   if isinstance(v, str) and not plain_digits(v))
        raise line_error(src, int(lines[odd]), f"{name} = {values[odd]!r} is not a number "
                         "written in ASCII digits alone (0-9, no _ between them)")
    return x


def whole(values: Sequence[Any], lines: np.ndarray, name: str, src: str,
          minimum: int | None = 1) -> np.ndarray:
    """Convert ``values`` to int64; each must be a finite whole number >= ``minimum``."""
    try:
        x = floats(values, lines, name, src)
    except ServesimError:
        # The rows before the first non-number: a bad one among them comes first.
        i = first_bad(values, float)
        whole(values[:i], lines[:i], name, src, minimum)
        raise
    # Whole-valued floats such as "12.0" are accepted; anything else is named. Read as
    # float64, 2**53 + 1 rounds to 2**53: a count is kept below it, where each is exact.
    rule = ("a whole number" + (f" >= {minimum}" if minimum is not None else "")
            + " and below 2**53")
    bad = ~np.isfinite(x) | (x != np.floor(x)) | (np.abs(x) >= 2.0**53)
    if minimum is not None:
        bad |= x < minimum
    if bad.any():
        i = int(np.argmax(bad))
        raise line_error(src, int(lines[i]), f"{name} = {values[i]!r}; must be {rule}")
    return x.astype(np.int64)


def seconds(values: Sequence[Any], lines: np.ndarray, name: str, src: str) -> np.ndarray:
    """Convert ``values`` to float64 seconds; each must be finite and >= 0."""
    try:
        x = floats(values, lines, name, src)
    except ServesimError:
        i = first_bad(values, float)
        seconds(values[:i], lines[:i], name, src)  # an earlier bad time comes first
        raise
    bad = ~np.isfinite(x) | (x < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise line_error(src, int(lines[i]), f"{name} = {values[i]!r}; must be a finite time >= 0")
    return x


class CsvFile:
    """A CSV trace read in chunks: the header, column lookup, and rows as column tuples."""

    def __init__(self, path: Path, src: str):
        self.path, self.src = path, src
        self.header_line, text = first_line(path, src)
        self.header = [h.strip() for h in next(csv.reader([text]))]
        twice = sorted({h for h in self.header if self.header.count(h) > 1})
        if twice:  # which of the two would the rows' values come from?
            raise line_error(src, self.header_line, f"column(s) {', '.join(twice)} given twice in "
                                              f"the header {text.strip()!r}")
        self.index = {h: i for i, h in enumerate(self.header)}

    def require(self, names: Sequence[str]) -> list[int]:
        """Column indices of ``names``; a missing one is an error naming the header."""
        missing = [n for n in names if n not in self.index]
        if missing:
            raise line_error(self.src, self.header_line,
                       f"missing column(s) {', '.join(missing)}; header is "
                       f"{','.join(self.header)!r}, required: {', '.join(names)}")
        return [self.index[n] for n in names]

    def only(self, allowed: Sequence[str], hint: str = "") -> None:
        """Reject header columns not in ``allowed`` (catches typos such as ``arival_s``);
        ``hint`` ends the message."""
        extra = [h for h in self.header if h not in allowed]
        if extra:
            raise line_error(self.src, self.header_line,
                       f"unknown column {extra[0]!r}; allowed: {', '.join(allowed)}{hint}")

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
                    self._open_quote(lines, start)
                    raise line_error(self.src, start + reader.line_num - 1,
                               f"not readable as CSV: {exc}") from None
                if len(rows) != len(lines):
                    self._open_quote(lines, start)
                    raise line_error(self.src, start, "a quoted field spans lines; not supported")
                keep: list[int] = []
                for i, row in enumerate(rows):
                    if len(row) == width:
                        keep.append(i)
                    elif any(f.strip() for f in row):
                        self._open_quote(lines[i:i + 1], start + i)  # the file's last line
                        raise line_error(self.src, start + i,
                                   f"{len(row)} fields, expected {width} as in the header "
                                   f"(row {','.join(row)!r})")
                if keep:
                    if len(keep) != len(rows):
                        rows = [rows[i] for i in keep]
                    yield start + np.asarray(keep, dtype=np.int64), list(zip(*rows, strict=True))
                start += len(lines)

    def _open_quote(self, lines: list[str], start: int) -> None:
        """Refuse the first of ``lines`` (file line ``start`` onwards) whose quoted field
        does not close on it. The csv module reads on past such a quote, swallowing the
        lines after it, so the row it fails on (or the chunk's first line) is not where
        the fault is."""
        for i, line in enumerate(lines):
            if line.count('"') % 2 == 0:
                continue  # balanced quotes ("" inside a field included)
            try:
                next(csv.reader([line], strict=True), None)
            except csv.Error:
                text = line.rstrip("\r\n")
                shown = text if len(text) <= 80 else text[:77] + "..."
                raise line_error(self.src, start + i, f"a quoted field opens on this line and "
                                 f"does not close ({shown!r}); quoted fields spanning lines "
                                 "are not supported") from None


def labels(values: Sequence[str], lines: np.ndarray, name: str, src: str) -> np.ndarray:
    """Non-empty names (stripped), naming the first empty cell's line."""
    out = [v.strip() for v in values]
    if not all(out):
        i = out.index("")
        raise line_error(src, int(lines[i]), f"{name} is empty; every row names its {name}")
    return np.array(out, dtype=np.str_)


# A ';'-separated list with nothing (or only spaces) between two separators or at an end.
_EMPTY_ITEM = re.compile(r"(?:^|;)\s*(?:;|$)")


def parse_hash_ids(values: Sequence[str], lines: np.ndarray, src: str) -> list[np.ndarray]:
    """Parse ``prefix_hash_ids`` cells (ints separated by spaces or ``;``) into int64 arrays."""
    for i, v in enumerate(values):
        if ";" in v and _EMPTY_ITEM.search(v):
            # An id lost between separators would shift every later block's hash.
            raise line_error(src, int(lines[i]), f"prefix_hash_ids has an empty item in "
                             f"{v!r}; expected integers separated by spaces or ';', none "
                             "empty")
    parts = [v.replace(";", " ").split() for v in values]
    flat = [p for ps in parts for p in ps]
    try:
        if not plain_digits("".join(flat)):  # numpy would read them as numbers
            raise ValueError("not ASCII digits alone")
        ids = np.array(flat, dtype=np.int64)
    except (ValueError, OverflowError):
        for i, ps in enumerate(parts):
            for p in ps:
                try:
                    _int64(p)
                except ValueError:
                    raise line_error(src, int(lines[i]),
                               f"prefix_hash_ids has {p!r}; expected integers from -2**63 "
                               "to 2**63 - 1, separated by spaces or ';'") from None
        raise
    bounds = np.cumsum([len(ps) for ps in parts])[:-1]
    return list(np.split(ids, bounds))
