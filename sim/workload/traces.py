"""Request traces: find a trace file, load it in any supported format, get a :class:`Trace`.

A :class:`Trace` holds one numpy array per column (arrival seconds, prompt and output
tokens, optional priority, class and prefix-block hashes). :func:`load_trace` sniffs the
format from the first line when none is named, streams the file in chunks (see
:mod:`sim.workload.formats`), requires arrivals in time order (or sorts them stably when
asked), and counts every row it drops under its reason in ``Trace.dropped``.

Shipped traces live in ``sim/data/traces``; :func:`find_trace` resolves either a path
(relative to the scenario's folder) or a shipped trace's name such as ``azure_2023_conv``.

Arrival offsets: ``servesim`` files are used as written; ``azure``, ``burstgpt`` and
``mooncake`` are rebased so that the first row arrives at 0.0 s.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ServesimError
from sim.workload import formats as tf
from sim.workload import traceio

SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "traces"
MOONCAKE_BLOCK_TOKENS = tf.MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True)
class Trace:
    """A loaded request trace; all arrays have one entry per request, in arrival order.

    ``arrival_s`` is float64 seconds (None for length-only files); token counts are int64
    and >= 1; ``prefix_hashes[i]`` holds the int64 ids of request i's leading prefix blocks
    of ``prefix_block_tokens`` tokens each. ``dropped`` maps a reason to a row count;
    ``unused`` a field the rows carry that servesim does not read to the rows with it.
    """

    arrival_s: np.ndarray | None
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    priority: np.ndarray | None
    klass: np.ndarray | None
    prefix_hashes: tuple[np.ndarray, ...] | None
    prefix_block_tokens: int | None
    source: str
    fmt: str
    dropped: dict[str, int]
    unused: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompt_tokens)


Reader = Callable[[Path, str, dict[str, Any], Counter[str]], Iterator[traceio.Chunk]]


@dataclass(frozen=True)
class _Format:
    reader: Reader
    options: tuple[str, ...]
    rebase: bool  # shift arrivals so the first row is at 0.0 s


FORMATS: dict[str, _Format] = {
    "servesim": _Format(tf.read_servesim, ("prefix_block_tokens",), rebase=False),
    "azure": _Format(tf.read_azure, (), rebase=True),
    "burstgpt": _Format(tf.read_burstgpt, ("model", "log_type"), rebase=True),
    "mooncake": _Format(tf.read_mooncake, ("spread", "prefix_block_tokens"), rebase=True),
    "lengths": _Format(tf.read_lengths, (), rebase=False),
}
"""Format name -> reader, accepted ``options`` and whether arrivals are rebased."""


def shipped_traces() -> list[str]:
    """Names (file stems) of the traces shipped in ``sim/data/traces``, sorted."""
    return sorted(p.name.split(".")[0] for p in SHIPPED_DIR.glob("*.csv*"))


def find_trace(ref: str, base_dir: Path | None) -> Path:
    """Resolve ``ref``: a path (relative paths against ``base_dir``, the scenario's folder)
    that exists wins; otherwise the name of a shipped trace (with or without ``.csv``)."""
    p = Path(ref).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    if p.is_file():
        return p
    if p.is_dir():
        raise ServesimError(f"trace {ref!r} is a folder ({str(p)!r}); name a trace file in it")
    if p.exists():  # a device, a pipe or a socket: no rows to read back
        raise ServesimError(f"trace {ref!r} ({str(p)!r}) is not a regular file; name a trace "
                            "file")
    for cand in (SHIPPED_DIR / ref, SHIPPED_DIR / f"{ref}.csv"):
        if "/" not in ref and "\\" not in ref and cand.is_file():
            return cand
    raise ServesimError(
        f"trace {ref!r} not found: no file {str(p)!r} and no shipped trace of that name; "
        f"shipped traces: {', '.join(shipped_traces())}"
    )


def sniff_format(path: str | Path) -> str:
    """Tell the format from the first non-blank line (a JSON object, or a CSV header)."""
    src = str(path)
    line_no, text = traceio.first_line(Path(path), src)
    if text.startswith("{"):
        return "mooncake"
    # Read as the CSV reader reads the header (CsvFile), so a quoted header (pandas'
    # QUOTE_ALL, a spreadsheet's export) names the same columns.
    try:
        cols = {c.strip() for c in next(csv.reader([text]), [])}
    except csv.Error:
        cols = set()
    if "arrival_s" in cols:
        return "servesim"
    if {"TIMESTAMP", "ContextTokens"} <= cols:
        return "azure"
    if {"Timestamp", "Request tokens"} <= cols:
        return "burstgpt"
    if any(set(names) <= cols for names in tf.LENGTH_NAMES):
        return "lengths"
    raise ServesimError(
        f"cannot tell the trace format from {text[:80]!r}; give the format explicitly, "
        f"one of: {', '.join(FORMATS)}", source=src, where=f"line {line_no}")


def _check_options(fmt: str, options: dict[str, Any], rng: np.random.Generator | None,
                   src: str) -> None:
    allowed = FORMATS[fmt].options
    for key, value in options.items():
        if key not in allowed:
            # At the option's key: the value to drop is the caller's, not the file's.
            raise ServesimError(f"does not apply to {src}, a trace of format {fmt!r}; the "
                                f"options of that format: {', '.join(allowed) or 'none'}",
                                where=key)
        if key in ("model", "log_type") and not isinstance(value, str):
            raise ServesimError(f"option {key} = {value!r}; expected a string", source=src)
        if key == "spread" and not isinstance(value, bool):
            raise ServesimError(f"option spread = {value!r}; expected true or false", source=src)
        if key == "prefix_block_tokens" and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            raise ServesimError(f"option prefix_block_tokens = {value!r}; expected an "
                                "integer >= 1", source=src)
    if options.get("spread") and rng is None:
        raise ServesimError("option spread needs a seeded random generator (rng)", source=src)


def spread_buckets(arrival_s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Spread rows that share a timestamp uniformly over their bucket, keeping row order.

    A bucket runs from its timestamp to the next distinct one; the last bucket gets the
    mean distinct-timestamp gap (a single bucket has no gap and stays as it is). The
    draws are sorted within each bucket, so arrivals stay ascending and each row keeps
    its place. Input must be sorted; units are seconds.
    """
    starts, inverse = np.unique(arrival_s, return_inverse=True)
    if len(starts) < 2:
        return arrival_s.copy()
    gaps = np.diff(starts)
    widths = np.append(gaps, gaps.mean())
    raw = starts[inverse] + rng.random(len(arrival_s)) * widths[inverse]
    # Buckets are disjoint, ascending intervals, so a global sort is a per-bucket sort.
    return np.sort(raw)


def _assemble(chunks: list[traceio.Chunk], src: str, sort: bool, fmt: str) -> dict[str, Any]:
    """Concatenate chunks, checking time order across chunk borders unless sorting."""
    unit = " after the first row's TIMESTAMP" if fmt == "azure" else ""
    cols: dict[str, Any] = {}
    arr = [c.arrival for c in chunks]
    if all(a is not None for a in arr):
        prev = -np.inf
        for c in chunks:
            a = c.arrival
            assert a is not None
            if not sort:
                back = np.flatnonzero(np.diff(np.concatenate(([prev], a))) < 0)
                if len(back):
                    i = int(back[0])
                    before = prev if i == 0 else a[i - 1]
                    raise ServesimError(
                        f"arrival {float(a[i])!r} s{unit} is earlier than the previous row's "
                        f"{float(before)!r} s; "
                        "rows must be in time order, or sorted on loading (a scenario's "
                        "workload.trace.sort: true; --sort on servesim trace)",
                        source=src, where=f"line {int(c.lines[i])}")
            prev = a[-1]
        cols["arrival_s"] = np.concatenate(arr)  # type: ignore[arg-type]
    else:
        cols["arrival_s"] = None
    cols["prompt_tokens"] = np.concatenate([c.prompt for c in chunks])
    cols["output_tokens"] = np.concatenate([c.output for c in chunks])
    for key, attr in (("priority", "priority"), ("klass", "klass")):
        parts = [getattr(c, attr) for c in chunks]
        cols[key] = None if parts[0] is None else np.concatenate(parts)
    if any(c.hashes is not None for c in chunks):
        empty = np.zeros(0, dtype=np.int64)
        cols["prefix_hashes"] = tuple(
            h for c in chunks for h in (c.hashes if c.hashes is not None
                                        else [empty] * len(c.lines)))
    else:
        cols["prefix_hashes"] = None
    if sort and cols["arrival_s"] is not None:
        order = np.argsort(cols["arrival_s"], kind="stable")
        for key in ("arrival_s", "prompt_tokens", "output_tokens", "priority", "klass"):
            if cols[key] is not None:
                cols[key] = cols[key][order]
        if cols["prefix_hashes"] is not None:
            cols["prefix_hashes"] = tuple(cols["prefix_hashes"][i] for i in order)
    return cols


def load_trace(path: str | Path, fmt: str | None = None, *, sort: bool = False,
               rng: np.random.Generator | None = None, hash_block_tokens: int | None = None,
               **options: Any) -> Trace:
    """Load a request trace file (see the module docstring for formats and arrival rules).

    ``fmt`` None sniffs the format. ``sort`` stable-sorts rows by arrival instead of
    rejecting a file out of time order. ``options``: burstgpt ``model`` / ``log_type``
    filters; mooncake ``spread`` (needs ``rng``); servesim / mooncake
    ``prefix_block_tokens`` (default: Mooncake's 512; a servesim trace's None, the KV
    block size). ``hash_block_tokens``: the KV block size (tokens), which sizes a
    servesim trace's prefix_hash_ids blocks when ``prefix_block_tokens`` does not, so a
    row naming more blocks than its prompt fills is refused on its line (None: left to
    the engine, which has no line to name).
    """
    src = str(path)
    p = Path(path)
    dropped: Counter[str] = Counter()
    try:
        if fmt is None:
            fmt = sniff_format(p)
        elif fmt not in FORMATS:
            raise ServesimError(f"unknown trace format {fmt!r}; valid formats: "
                                f"{', '.join(FORMATS)}", source=src)
        _check_options(fmt, options, rng, src)
        spec = FORMATS[fmt]
        chunks = list(spec.reader(p, src, {**options, tf.KV_BLOCK_TOKENS: hash_block_tokens},
                                  dropped))
    except UnicodeDecodeError:
        raise traceio.bad_utf8(p, src) from None
    except (OSError, EOFError) as exc:  # a damaged gzip stream, a read error
        raise ServesimError(f"cannot read trace file: {exc}", source=src) from None
    # Readers count fields they leave unread as "unused:NAME" beside the drop reasons.
    unused = {k.removeprefix(tf.UNUSED): v for k, v in dropped.items()
              if v and k.startswith(tf.UNUSED)}
    dropped_out = {k: v for k, v in dropped.items() if v and not k.startswith(tf.UNUSED)}
    if not chunks:
        why = f" (dropped: {dropped_out})" if dropped_out else ""
        raise ServesimError(f"the trace has no rows{why}", source=src)
    cols = _assemble(chunks, src, sort, fmt)
    del chunks
    arrival = cols["arrival_s"]
    if arrival is not None:
        if options.get("spread"):
            assert rng is not None
            if not (arrival != arrival[0]).any():
                # One bucket has no next timestamp and no mean gap: nothing would move.
                raise ServesimError("spread: every row has the same timestamp, so there is "
                                    "no gap to spread the rows over; leave spread out",
                                    source=src)
            arrival = spread_buckets(arrival, rng)
        if spec.rebase:
            arrival = arrival - arrival[0]
    hashes = cols["prefix_hashes"]
    return Trace(
        arrival_s=arrival,
        prompt_tokens=cols["prompt_tokens"],
        output_tokens=cols["output_tokens"],
        priority=cols["priority"],
        klass=cols["klass"],
        prefix_hashes=hashes,
        # Mooncake hashed 512-token blocks; a servesim trace's own hashes default to the
        # KV block size (None here: the engine's block_size), as vLLM hashes its blocks.
        prefix_block_tokens=(options.get("prefix_block_tokens",
                                         MOONCAKE_BLOCK_TOKENS if fmt == "mooncake" else None)
                             if hashes is not None else None),
        source=src,
        fmt=fmt,
        dropped=dropped_out,
        unused=unused,
    )
