"""Drawing a generated workload: arrival times from an arrival process (bounded by a
request count or a span, or stage by stage at each stage's rate) and token lengths from
a length distribution or an empirical file. Every draw comes from the one Generator
passed in, so a seed fixes the requests.

The configurations are :mod:`sim.workload.requests`'; :mod:`sim.workload.build` and
:mod:`sim.workload.mix` put the draws together into a run's requests.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sim.errors import ServesimError
from sim.workload.requests import ArrivalsConfig, LengthsConfig, WorkloadConfig
from sim.workload.stages import StageConfig, windows

# No run holds more requests than this (about 200 GiB of per-request arrays): a process
# expected to send more is a runaway rate or duration, refused even under --force.
MAX_ARRIVALS = 2**31 - 1


# Gaps drawn at once while filling a span: the expected count plus a fifth, or this many
# when that is more. Such a long span is drawn piece by piece and, when the run's
# num_requests caps it, no further than the cap (a shorter span is drawn as it always
# was, so its seed gives the same requests).
SPAN_CHUNK = 1 << 20


def arrival_times(cfg: ArrivalsConfig, n_max: int | None, horizon: float | None,
                   rng: np.random.Generator, limit: int | None = None) -> np.ndarray:
    """Arrival times in seconds: first at start_s, then gaps from the process; at most
    ``n_max`` of them, those before ``horizon`` (s). Filling a span of more than
    :data:`SPAN_CHUNK` expected arrivals up to ``horizon`` (``n_max`` None) stops once
    ``limit`` arrivals are in it: the earliest ``limit`` are exact, later ones missing."""
    rate = cfg.rate
    assert rate is not None  # checked at load (sim/workload/stages.py)

    def gaps(k: int) -> np.ndarray:
        if cfg.process == "poisson":
            return rng.exponential(1.0 / rate, size=k)
        if cfg.process == "gamma":
            shape = 1.0 / cfg.cv**2  # type: ignore[operator]
            return rng.gamma(shape, 1.0 / (rate * shape), size=k)
        return np.full(k, 1.0 / rate)

    if n_max is not None:
        t = cfg.start_s + np.concatenate(([0.0], np.cumsum(gaps(n_max - 1))))
        return t[t < horizon] if horizon is not None else t
    assert horizon is not None
    if limit is None and not rate * (horizon - cfg.start_s) <= MAX_ARRIVALS:
        raise ServesimError(f"rate {rate:g} req/s from {cfg.start_s:g} to {horizon:g} s would "
                            f"send about {rate * (horizon - cfg.start_s):.3g} requests, more "
                            f"than any run holds ({MAX_ARRIVALS:,}); lower the rate or the "
                            "duration")
    expected = rate * (horizon - cfg.start_s) * 1.2
    long_span = expected >= SPAN_CHUNK
    chunk = SPAN_CHUNK if long_span else max(16, int(expected))
    if not long_span:
        limit = None
    chunks, t0, have = [], cfg.start_s, 0
    first = True
    while t0 < horizon and (limit is None or have < limit):
        g = gaps(chunk)
        if first:
            g[0], first = 0.0, False
        t = t0 + np.cumsum(g)
        kept = t[t < horizon]
        chunks.append(kept)
        have += len(kept)
        t0 = float(t[-1])
    return np.concatenate(chunks) if chunks else np.empty(0)


def workload_arrivals(cfg: WorkloadConfig, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of ``cfg.arrivals``: one process bounded by ``num_requests`` and
    ``duration_s``, or, with ``stages``, the process run afresh in each stage at its rate
    (then capped at ``num_requests``)."""
    a = cfg.arrivals
    assert a is not None
    if cfg.stages is None:
        try:
            return arrival_times(a, cfg.num_requests, cfg.duration_s, rng)
        except ServesimError as exc:
            raise exc.located(prefix="workload.arrivals.rate") from None
    return staged_arrivals(a, cfg.stages, cfg.num_requests, rng)


def staged_arrivals(a: ArrivalsConfig, stages: Sequence[StageConfig], cap: int | None,
                    rng: np.random.Generator) -> np.ndarray:
    """Arrival times (s) of the process ``a`` whose rate steps from stage to stage: the
    process is drawn at rate 1 in operational time (its first arrival at 0, as an
    unstaged run's is at ``start_s``), and operational time u maps to the clock through
    the stages' cumulative rate, so stage k's stretch of u, rate_k × duration_k long,
    fills its window. A Poisson stream is then Poisson at each stage's rate, with no
    arrival forced at a stage's start (a profile in short steps offers the rate asked,
    as one long stage does); a constant stream keeps its spacing at 1/rate_k; a gamma
    stream keeps its cv. At most ``cap`` arrivals (None: all the stages hold)."""
    bounds = np.cumsum([0.0, *(s.rate * s.duration_s for s in stages)])
    spans = windows(stages, a.start_s)
    for i, load in enumerate(bounds[1:] - bounds[:-1]):
        if cap is None and not load <= MAX_ARRIVALS:
            lo, hi = spans[i]
            raise ServesimError(f"rate {stages[i].rate:g} req/s from {lo:g} to {hi:g} s would "
                                f"send about {load:.3g} requests, more than any run holds "
                                f"({MAX_ARRIVALS:,}); lower the rate or the duration",
                                where=f"workload.stages[{i}].rate")
    total = float(bounds[-1])
    if cap is None and not total <= MAX_ARRIVALS:
        raise ServesimError(f"the stages would send about {total:.3g} requests in all, more "
                            f"than any run holds ({MAX_ARRIVALS:,}); shorten them or set "
                            "num_requests", where="workload.stages")
    unit = dataclasses.replace(a, rate=1.0, start_s=0.0)
    u = arrival_times(unit, None, total, rng, limit=cap)
    if cap is not None:
        u = u[:cap]
    # Stage of each point, and its clock time within that stage's window.
    k = np.searchsorted(bounds, u, side="right") - 1
    starts = np.array([lo for lo, _ in spans])
    rates = np.array([s.rate for s in stages])
    t = starts[k] + (u - bounds[k]) / rates[k]
    return np.maximum.accumulate(t)  # rounding at a boundary never runs time backwards


def located(exc: ServesimError, source: str, key: str) -> ServesimError:
    """``exc`` placed at ``key`` of the scenario file ``source``."""
    # An error inside a trace file already names that file and line: keep it as it is.
    return exc if exc.source else exc.located(source, key)


def sample_lengths(lc: LengthsConfig, n: int, rng: np.random.Generator,
                   base_dir: Path | None, source: str, key: str,
                   notes: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) token counts (int64 arrays) drawn as ``lc`` says; ``key`` is
    the dotted key of ``lc``, named by errors in an empirical file. What an empirical
    file holds beyond its lengths (classes, priorities, prefix hashes: a draw of lengths
    leaves them behind) is said in ``notes``."""
    from sim.workload import traces

    if lc.empirical is not None:
        try:
            tr = traces.load_trace(traces.find_trace(lc.empirical, base_dir))
        except ServesimError as exc:
            raise located(exc, source, f"{key}.empirical") from None
        unused = [what for what, col in (("classes", tr.klass), ("priorities", tr.priority),
                                         ("prefix hashes", tr.prefix_hashes))
                  if col is not None]
        said = (f"{key}.empirical: {tr.source}'s {', '.join(unused)} are not used (lengths "
                "are drawn from it); replay it as workload.trace to keep them")
        if unused and notes is not None and said not in notes:
            notes.append(said)
        idx = rng.integers(0, len(tr.prompt_tokens), size=n)
        return (np.asarray(tr.prompt_tokens, dtype=np.int64)[idx],
                np.asarray(tr.output_tokens, dtype=np.int64)[idx])
    assert lc.prompt is not None and lc.output is not None
    return lc.prompt.sample(n, rng), lc.output.sample(n, rng)
