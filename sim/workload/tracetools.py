"""Pure transformations of a :class:`~sim.workload.traces.Trace`, and the YAML section that
applies them.

Each function returns ``(new_trace, Change)``; the input trace is never modified. A
:class:`Change` says in one line what happened and how many rows it affected, so a
scenario run can report it (nothing is altered silently).

:class:`TraceTransforms` is the ``workload.trace`` part of a scenario. Its steps always
run in this fixed order, whatever order the YAML keys are written in:

1. ``window_s: [start, end]`` - keep arrivals in ``[start, end)``, rebased to ``start``;
2. ``sample_fraction`` or ``sample_n`` - keep a seeded random subset, in order;
3. ``repeat`` - concatenate copies, each shifted by the span plus one mean gap;
4. ``time_scale`` or ``target_rate_rps`` - stretch or squeeze the arrival times;
5. ``max_context`` - cap prompt + output tokens (:func:`truncate_to_context`).

Window before sample so that a window means the same stretch of the source whatever the
sample size; repeat before rescaling so the rate target applies to the final trace;
length capping last because it does not depend on time.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.configtools import bounded
from sim.errors import ServesimError
from sim.workload.traces import Trace

# The most rows a repeated trace may have: sim.workload.draw's MAX_ARRIVALS, the most
# requests any run holds.
MAX_ROWS = 2**31 - 1


@dataclass(frozen=True)
class Change:
    """What one transformation did: ``op`` name, a one-line ``text``, rows it affected."""

    op: str
    text: str
    rows_affected: int

    def __str__(self) -> str:
        return self.text


def _take(trace: Trace, idx: np.ndarray) -> dict[str, Any]:
    """Per-row fields of ``trace`` restricted to ``idx`` (an int index array)."""
    def opt(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[idx]

    return {
        "arrival_s": opt(trace.arrival_s),
        "prompt_tokens": trace.prompt_tokens[idx],
        "output_tokens": trace.output_tokens[idx],
        "priority": opt(trace.priority),
        "klass": opt(trace.klass),
        "prefix_hashes": None if trace.prefix_hashes is None
        else tuple(trace.prefix_hashes[i] for i in idx),
    }


def _arrivals(trace: Trace, op: str, min_rows: int = 1) -> np.ndarray:
    if trace.arrival_s is None:
        raise ServesimError(f"{op} needs arrival times, but this trace has only lengths",
                            source=trace.source)
    if len(trace) < min_rows:
        raise ServesimError(f"{op} needs at least {min_rows} rows, the trace has {len(trace)}",
                            source=trace.source)
    return trace.arrival_s


def mean_rate(arrival_s: np.ndarray) -> float:
    """Requests per second as rows / (last - first arrival); nan for a zero span."""
    span = float(arrival_s[-1] - arrival_s[0]) if len(arrival_s) else 0.0
    return len(arrival_s) / span if span > 0 else float("nan")


def readable(x: float, places: int) -> str:
    """``x`` with ``places`` decimals, or to 4 significant digits with an exponent
    where decimals would print hundreds of digits (a rate of 3e300 req/s) or only zeros."""
    if x != 0 and math.isfinite(x) and not 1e-3 <= abs(x) < 1e9:
        return f"{x:.4g}"
    return f"{x:.{places}f}"


def time_scale(trace: Trace, factor: float) -> tuple[Trace, Change]:
    """Multiply every arrival time (seconds) by ``factor`` > 0; > 1 slows the trace down."""
    a = _arrivals(trace, "time_scale")
    if not factor > 0 or not np.isfinite(factor):
        raise ServesimError(f"time_scale = {factor!r}; must be a number > 0")
    with np.errstate(over="ignore", under="ignore"):
        new = a * factor
    # Past a float's range every time is inf (and the gaps NaN); below it distinct times
    # collapse to one instant, an infinite rate: either way nothing a run could replay.
    if not np.isfinite(new).all():
        raise ServesimError(f"x{factor:g} takes the arrival times past a float's range "
                            f"(the trace's run to {readable(float(a[-1]), 1)} s); give a "
                            "factor that keeps them finite")
    if a[-1] > a[0] and not np.isfinite(mean_rate(new)):
        raise ServesimError(f"x{factor:g} squeezes the trace's {readable(float(a[-1] - a[0]), 1)}"
                            " s of arrivals into one instant (an infinite rate); give a larger "
                            "factor")
    text = (f"time_scale x{factor:g}: span {readable(a[-1] - a[0], 1)} s -> "
            f"{readable(new[-1] - new[0], 1)} s, ")
    rate = mean_rate(a)
    if np.isfinite(rate):
        text += f"mean rate {readable(rate, 3)} -> {readable(mean_rate(new), 3)} req/s"
    else:  # one row, or rows at one instant: no rate, only the instant moves
        text += (f"every arrival at one time, {readable(a[0], 1)} s -> "
                 f"{readable(new[0], 1)} s (no mean rate)")
    return dataclasses.replace(trace, arrival_s=new), Change("time_scale", text, len(trace))


def target_rate(trace: Trace, rate_rps: float) -> tuple[Trace, Change]:
    """Rescale arrivals so that rows / (last - first arrival) equals ``rate_rps`` req/s."""
    a = _arrivals(trace, "target_rate", min_rows=2)
    if not rate_rps > 0 or not np.isfinite(rate_rps):
        raise ServesimError(f"target_rate = {rate_rps!r}; must be a number of req/s > 0")
    now = mean_rate(a)
    if not np.isfinite(now):
        raise ServesimError("target_rate: every arrival is at the same time, so the trace "
                            "has no rate to rescale", source=trace.source)
    new, ch = time_scale(trace, now / rate_rps)
    return new, Change("target_rate", f"target_rate {rate_rps:g} req/s: {ch.text}", len(trace))


def rate_window(arrival_s: np.ndarray, rate_rps: float, duration_s: float | None = None,
                max_rows: int | None = None) -> tuple[np.ndarray, Change]:
    """The arrival times (s) of the window a run replays at ``rate_rps`` req/s: the rate
    applies to the requests simulated, not to the whole trace.

    The window holds the trace's first K requests: all of them, at most ``max_rows``, and
    at most ``rate_rps`` x the time from the first arrival to ``duration_s`` (so all
    arrive before it). Their span, from the first request to the one after the last (or
    one mean gap after the last, when the trace ends there), is scaled to K / rate_rps
    seconds; the first arrival stays where it is. So the window offers K requests in
    K / rate_rps s, and (K - 1) / (last - first arrival) is rate_rps up to the
    deviation of one gap from the mean (exactly, when the window is the whole trace).
    """
    a = np.asarray(arrival_s, dtype=np.float64)
    n = len(a)
    if not rate_rps > 0 or not np.isfinite(rate_rps):
        raise ServesimError(f"target_rate = {rate_rps!r}; must be a number of req/s > 0")
    if n == 1:
        # Every rate would replay the same lone request (as target_rate refuses too).
        raise ServesimError("target_rate: the trace has one row, and one request has no "
                            "rate to rescale; give a trace of at least 2 rows")
    k = n if max_rows is None else min(n, max_rows)
    if duration_s is not None and k:
        room = duration_s - float(a[0])
        fit = int(math.floor(rate_rps * room)) if room > 0 else 0
        while fit > 0 and fit / rate_rps > room:  # floating-point guard: all before the end
            fit -= 1
        k = min(k, fit)
    if k == 0:
        return a[:0].copy(), Change("target_rate", f"target_rate {rate_rps:g} req/s: no "
                                    "request arrives before duration_s", n)
    t0 = float(a[0])
    end = float(a[k]) if k < n else (float(a[-1]) + (float(a[-1]) - t0) / (n - 1) if n > 1
                                     else t0)
    if k > 1 and not end > t0:
        raise ServesimError("target_rate: the requests replayed all arrive at the same "
                            "time, so they have no rate to rescale")
    length = k / rate_rps
    factor = length / (end - t0) if end > t0 else 1.0
    # Clipped below the window's end: a tie with the next request must not leave it. (A
    # rate so low that the times overflow is refused once the arrivals are built.)
    with np.errstate(over="ignore", invalid="ignore"):
        new = np.minimum(t0 + (a[:k] - t0) * factor, np.nextafter(t0 + length, -np.inf))
    new[0] = t0
    text = (f"target_rate {rate_rps:g} req/s: the first {k} of {n} requests, gaps "
            f"x{factor:.4g}, arrive over {length:.1f} s")
    if k == n and duration_s is not None and t0 + length < duration_s:
        text += f" (the whole trace: it ends before duration_s {duration_s:g} s)"
    return new, Change("target_rate", text, k)


def window(trace: Trace, start_s: float, end_s: float) -> tuple[Trace, Change]:
    """Keep rows arriving in ``[start_s, end_s)`` seconds, rebased so ``start_s`` becomes 0."""
    a = _arrivals(trace, "window")
    if not start_s < end_s:
        raise ServesimError(f"window [{start_s:g}, {end_s:g}) is empty; start must be < end")
    lo, hi = np.searchsorted(a, [start_s, end_s], side="left")
    if hi <= lo:
        raise ServesimError(f"window [{start_s:g}, {end_s:g}) s holds no rows; the trace "
                            f"spans {a[0]:g} to {a[-1]:g} s", source=trace.source)
    cols = _take(trace, np.arange(lo, hi))
    cols["arrival_s"] = a[lo:hi] - start_s
    text = f"window [{start_s:g}, {end_s:g}) s: kept {hi - lo} of {len(trace)} rows"
    return dataclasses.replace(trace, **cols), Change("window", text, len(trace) - int(hi - lo))


def skip_rows(trace: Trace, start_row: int) -> tuple[Trace, Change]:
    """Drop the first ``start_row`` rows; the rest keep their gaps, shifted so the first
    row kept arrives when the trace's first row did (a trace of lengths only just loses
    the rows). Replications of a sweep point start at different rows this way."""
    n = len(trace)
    if start_row >= n:
        raise ServesimError(f"got {start_row}, but {trace.source} has {n} rows (after its "
                            "transformations); it must be below that", where="start_row")
    cols = _take(trace, np.arange(start_row, n))
    a = trace.arrival_s
    if a is not None:
        cols["arrival_s"] = a[start_row:] - (a[start_row] - a[0])
    text = f"start_row {start_row}: replay from row {start_row}, {n - start_row} of {n} rows"
    return dataclasses.replace(trace, **cols), Change("start_row", text, start_row)


def sample(trace: Trace, fraction: float | None = None, n: int | None = None, *,
           rng: np.random.Generator) -> tuple[Trace, Change]:
    """Keep a random subset of exactly ``n`` rows (or ``round(fraction * rows)``), in order."""
    if (fraction is None) == (n is None):
        raise ServesimError("sample needs exactly one of fraction or n")
    rows = len(trace)
    if fraction is not None:
        if not 0 < fraction <= 1:
            raise ServesimError(f"sample fraction = {fraction!r}; must be in (0, 1]")
        n = round(fraction * rows)
    assert n is not None
    if not 1 <= n <= rows:
        raise ServesimError(f"sample of {n} rows is impossible from a trace of {rows} rows; "
                            "must be between 1 and the row count", source=trace.source)
    idx = np.sort(rng.choice(rows, size=n, replace=False))
    cols = _take(trace, idx)
    text = f"sample: kept {n} of {rows} rows (seeded, order kept)"
    return dataclasses.replace(trace, **cols), Change("sample", text, rows - n)


def repeat(trace: Trace, n: int) -> tuple[Trace, Change]:
    """Concatenate ``n`` copies; copy k arrives ``k * (span + mean gap)`` seconds later.

    The extra mean gap keeps copy k+1's first row from landing on copy k's last row.
    Prefix hashes are copied as they are: a repeated request shares its prefix again.
    Length-only traces are simply tiled.
    """
    if not isinstance(n, int) or n < 1:
        raise ServesimError(f"repeat = {n!r}; must be an integer >= 1")
    rows = len(trace)
    if rows * n > MAX_ROWS:  # every copy is built before num_requests keeps the first rows
        raise ServesimError(f"got {n:,}: {rows:,} rows x {n:,} = {rows * n:,} rows, more "
                            f"than any run holds ({MAX_ROWS:,}); every copy is built before "
                            "num_requests applies, so give only the copies the run needs",
                            where="repeat")
    rows = len(trace)
    idx = np.tile(np.arange(rows), n)
    cols = _take(trace, idx)
    text = f"repeat x{n}: {rows} -> {rows * n} rows"
    if trace.arrival_s is not None:
        a = _arrivals(trace, "repeat", min_rows=1 if n == 1 else 2)
        span = float(a[-1] - a[0])
        if n > 1 and not span > 0:
            raise ServesimError(f"got {n}: every arrival of {trace.source} is at the same "
                                f"time ({readable(float(a[0]), 1)} s), so a copy's shift (the "
                                "trace's span plus a mean gap) is 0 and the copies would "
                                "all arrive at that instant; give the rows distinct times",
                                where="repeat")
        shift = span + span / (rows - 1) if rows > 1 else 0.0
        cols["arrival_s"] = (a[None, :] + shift * np.arange(n)[:, None]).ravel()
        text += f", each copy shifted {shift:.1f} s"
    return dataclasses.replace(trace, **cols), Change("repeat", text, rows * (n - 1))


def truncate_to_context(trace: Trace, max_context: int, block_tokens: int | None = None
                        ) -> tuple[Trace, Change]:
    """Cap each request at ``prompt + output <= max_context`` tokens.

    Rule: the prompt is cut first, to ``max_context - output``; when the output alone
    needs ``>= max_context``, it is cut to ``max_context - 1`` and the prompt to 1 token.
    A row's prefix hashes are cut to the blocks its shortened prompt still fills, blocks
    of the trace's ``prefix_block_tokens`` or else ``block_tokens`` (the KV block size).
    ``Change.rows_affected`` is the number of rows cut.
    """
    if not isinstance(max_context, int) or max_context < 2:
        raise ServesimError(f"max_context = {max_context!r}; must be an integer >= 2")
    p, o = trace.prompt_tokens, trace.output_tokens
    over = p + o > max_context
    long_out = o >= max_context
    new_o = np.where(long_out, max_context - 1, o)
    new_p = np.where(long_out, 1, np.where(over, max_context - o, p))
    count = int(over.sum())
    text = (f"max_context {max_context}: cut {count} of {len(trace)} rows "
            f"({int(long_out.sum())} of them had output alone >= max_context)")
    hashes = trace.prefix_hashes
    per_block = trace.prefix_block_tokens or block_tokens
    if hashes is not None and per_block is not None:
        # Ids past the shortened prompt name blocks the request no longer sends.
        room = -(-new_p // per_block)
        trimmed = int(sum(len(h) > r for h, r in zip(hashes, room, strict=True)))
        hashes = tuple(h[:r] for h, r in zip(hashes, room, strict=True))
        text += f", {trimmed} rows' prefix hashes cut to the blocks the shorter prompt fills"
    new = dataclasses.replace(trace, prompt_tokens=new_p.astype(np.int64),
                              output_tokens=new_o.astype(np.int64), prefix_hashes=hashes)
    return new, Change("truncate_to_context", text, count)


@dataclass(frozen=True)
class TraceTransforms:
    """The ``workload.trace`` transformations, applied in the order documented above."""

    window_s: tuple[float, ...] | None = None
    sample_fraction: float | None = bounded(None, gt=0, le=1)
    sample_n: int | None = bounded(None, ge=1)
    repeat: int = bounded(1, ge=1)
    time_scale: float | None = bounded(None, gt=0)
    target_rate_rps: float | None = bounded(None, gt=0)
    max_context: int | None = bounded(None, ge=2)
    # Tokens per prefix-hash block when the trace does not say (the KV block size).
    hash_block_tokens: int | None = bounded(None, ge=1)

    def __post_init__(self) -> None:
        if self.window_s is not None and (
            len(self.window_s) != 2 or not 0 <= self.window_s[0] < self.window_s[1]
        ):
            # A negative start would rebase the first arrivals to later than they came.
            raise ServesimError(f"got {list(self.window_s)!r}, expected [start_s, end_s] with "
                                "0 <= start < end (seconds)", where="window_s")
        if self.sample_fraction is not None and self.sample_n is not None:
            raise ServesimError("give sample_fraction or sample_n, not both", where="sample_n")
        if self.time_scale is not None and self.target_rate_rps is not None:
            raise ServesimError("give time_scale or target_rate_rps, not both",
                                where="target_rate_rps")

    def needs_rng(self) -> bool:
        """True when a seeded generator is needed (sampling)."""
        return self.sample_fraction is not None or self.sample_n is not None


def apply_transforms(trace: Trace, spec: TraceTransforms, rng: np.random.Generator | None = None
                     ) -> tuple[Trace, list[Change]]:
    """Apply ``spec`` to ``trace`` in the fixed order; return the result and its changes."""
    changes: list[Change] = []
    t = trace
    if spec.window_s is not None:
        t, ch = _at("window_s", window, t, spec.window_s[0], spec.window_s[1])
        changes.append(ch)
    if spec.needs_rng():
        if rng is None:
            raise ServesimError("sampling a trace needs a seeded random generator")
        key = "sample_n" if spec.sample_n is not None else "sample_fraction"
        t, ch = _at(key, sample, t, spec.sample_fraction, spec.sample_n, rng=rng)
        changes.append(ch)
    if spec.repeat > 1:
        t, ch = _at("repeat", repeat, t, spec.repeat)
        changes.append(ch)
    if spec.time_scale is not None:
        t, ch = _at("time_scale", time_scale, t, spec.time_scale)
        changes.append(ch)
    if spec.target_rate_rps is not None:
        t, ch = _at("target_rate", target_rate, t, spec.target_rate_rps)
        changes.append(ch)
    if spec.max_context is not None:
        t, ch = _at("truncate", truncate_to_context, t, spec.max_context,
                    spec.hash_block_tokens)
        changes.append(ch)
    return t, changes


def _at(key: str, step: Callable[..., tuple[Trace, Change]], *args: Any,
        **kwargs: Any) -> tuple[Trace, Change]:
    """``step(*args, **kwargs)``, its error named at the scenario's ``key`` (the caller
    adds the section) with the trace in its words: the value to change is the key's, not
    a line of the trace file."""
    try:
        return step(*args, **kwargs)
    except ServesimError as exc:
        said = f" ({exc.source})" if exc.source and exc.source not in exc.message else ""
        raise ServesimError(exc.message + said, where=exc.where or key) from None
