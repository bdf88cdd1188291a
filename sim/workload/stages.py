"""Load that changes over time: ``workload.stages``, a list of ``{rate, duration_s}``
run one after the other (a step from 2.5 to 6 req/s, a burst and its recovery, a daily
profile in hourly steps).

Generated arrivals run their process (``workload.arrivals.process``) at rate 1 in
operational time, mapped to the clock through the stages' cumulative rate
(:func:`sim.workload.draw.staged_arrivals`): a Poisson stream is Poisson at each stage's
rate, with no arrival forced at a stage's start, a constant stream keeps its phase across
a step, and a gamma stream keeps its burstiness. (Until 2026-12-05 each stage ran the
process afresh with an arrival at its start: a profile in short steps offered one
request a stage more than asked.) A trace replays
in stages too: stage k takes the trace's next ``round(rate × duration_s)`` requests in
order and scales their arrival gaps to fill the stage exactly, so the rate asked is the
rate offered while the trace's own burstiness within the stage is kept.

The first stage starts at ``workload.arrivals.start_s`` (generated) or at the trace's
first arrival. :func:`windows` gives each stage's [start, end) in seconds; the run's
summary reports every stage by it (:func:`sim.report.metrics.stage_summaries`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.configtools import bounded
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.workload.requests import WorkloadConfig


# The shortest stage (s).
MIN_STAGE_S = 1e-3


@dataclass(frozen=True)
class StageConfig:
    """One stage: ``rate`` requests per second for ``duration_s`` seconds."""

    rate: float = bounded(gt=0)
    # A stage shorter than a millisecond holds a request or none: its offered rate would
    # be that request over a sliver of time, no load a server sees.
    duration_s: float = bounded(ge=MIN_STAGE_S)


def windows(stages: Sequence[StageConfig], start_s: float) -> tuple[tuple[float, float], ...]:
    """Each stage's [start, end) in seconds, the first starting at ``start_s``."""
    out = []
    t = start_s
    for s in stages:
        out.append((t, t + s.duration_s))
        t += s.duration_s
    return tuple(out)


def cap_note(cap: int | None, t: np.ndarray,
             spans: Sequence[tuple[float, float]]) -> str | None:
    """The note for generated staged arrivals ``t`` (s) that ``num_requests`` (``cap``)
    ended before the last stage's end (``spans``: each stage's [start, end) s): the time
    and stage the cap is reached in, and the stages that then send no request. None
    where the cap was not reached."""
    if cap is None or len(t) < cap or not len(t):
        return None
    last = float(t[-1])
    k = min(int(np.searchsorted([hi for _, hi in spans], last, side="right")),
            len(spans) - 1)
    lo, hi = spans[k]
    said = (f"workload.num_requests ({cap:,}) is reached at {last:.4g} s, in stage {k + 1} "
            f"of {len(spans)} ({lo:g} to {hi:g} s)")
    rest = len(spans) - k - 1
    if rest == 0:
        return f"{said}: no request arrives in the rest of it"
    later = f"stage {k + 2} sends" if rest == 1 else f"stages {k + 2} to {len(spans)} send"
    return (f"{said}: {later} no request; raise num_requests (or leave it out) to run "
            "every stage")


def stage_counts(stages: Sequence[StageConfig]) -> list[int]:
    """Requests a trace replays in each stage: rate × duration, rounded."""
    return [int(round(s.rate * s.duration_s)) for s in stages]


def check_stages(cfg: WorkloadConfig) -> None:
    """Cross-field rules of ``workload.stages`` and of arrival rates (keys relative to
    ``workload``): a rate comes from ``arrivals.rate`` or from the stages, never both."""
    stages = cfg.stages
    if stages is None:
        if cfg.arrivals is not None and cfg.arrivals.rate is None:
            raise ServesimError("required: the arrival rate in requests per second (or give "
                                "workload.stages, a rate per stage)", where="arrivals.rate")
        for name, c in (cfg.classes or {}).items():
            if c.arrivals is not None and c.arrivals.rate is None:
                raise ServesimError("required: the class's arrival rate in requests per "
                                    "second", where=f"classes.{name}.arrivals.rate")
        return
    if not stages:
        raise ServesimError("got an empty list; give at least one {rate, duration_s}",
                            where="stages")
    if cfg.concurrency is not None:
        raise ServesimError("closed-loop clients send each request when a client is free, "
                            "paced at most by one arrival process (workload.arrivals), not "
                            "by stages; remove stages (or concurrency)", where="stages")
    if cfg.duration_s is not None:
        raise ServesimError("the stages set the duration (the sum of their duration_s); "
                            "remove duration_s", where="duration_s")
    if cfg.arrivals is not None and cfg.arrivals.rate is not None:
        raise ServesimError("workload.stages gives each stage's rate; remove arrivals.rate",
                            where="arrivals.rate")
    for name, c in (cfg.classes or {}).items():
        if c.arrivals is not None:
            raise ServesimError("stages apply to workload.arrivals shared by weight (or a "
                                "trace); a class with its own arrival process is not staged: "
                                "give it a weight", where=f"classes.{name}.arrivals")
    tc = cfg.trace
    if tc is not None:
        for key, neutral in (("time_scale", 1.0), ("target_rate", None)):
            if getattr(tc, key) != neutral:
                raise ServesimError(f"the stages set the trace's rate in each stage; remove "
                                    f"{key}", where=f"trace.{key}")


def stage_trace_times(t: np.ndarray, stages: Sequence[StageConfig],
                      wins: Sequence[tuple[float, float]], source: str) -> np.ndarray:
    """Arrival times (s) of a trace replayed in ``stages``: stage k takes the next
    ``round(rate × duration_s)`` of the trace's arrival times ``t`` (ascending) and maps
    the span from its first request to the one after its last onto its window
    ``wins[k]`` (:func:`windows`), so its gaps keep their proportions. The result has
    one time per replayed request."""
    counts = stage_counts(stages)
    need = sum(counts)
    if need > len(t):
        raise ServesimError(f"the stages replay {need} requests (rate × duration_s per "
                            f"stage) but the trace has {len(t)}: shorten the stages or lower "
                            "their rates", source, "workload.stages")
    out = np.empty(need)
    i = 0
    for n, ((lo, hi), k) in enumerate(zip(wins, counts, strict=True)):
        if k == 0:
            continue
        seg = t[i:i + k]
        # The span ends at the next request's arrival, or one mean gap after the last.
        end = t[i + k] if i + k < len(t) else seg[-1] + (seg[-1] - seg[0]) / max(k - 1, 1)
        span = end - seg[0]
        if span > 0:
            # Clipped below the end: a tie with the next request must not leave the stage.
            out[i:i + k] = np.minimum(lo + (seg - seg[0]) * ((hi - lo) / span),
                                      np.nextafter(hi, lo))
        elif k == 1:
            out[i] = lo
        else:
            # Their gaps have no proportions to keep: spreading them would invent arrivals.
            raise ServesimError(f"stage {n + 1} replays {k} requests that all arrive at "
                                f"{seg[0]:g} s in the trace (the next one too), so they have "
                                "no rate to replay at; give the trace its arrival times",
                                source, "workload.stages")
        i += k
    return out
