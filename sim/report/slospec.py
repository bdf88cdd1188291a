"""SLO targets on a run's summary statistics, as given on the command line.

A target reads ``METRIC_STAT=SECONDS``: ``ttft_p99=0.5`` asks for a 99th-percentile TTFT
of at most 0.5 s, ``ttft_mean=0.2`` for a mean TTFT of at most 0.2 s. Metrics are the
latencies :func:`sim.report.summary.summarize` reports (ttft, tpot, itl, e2e, queueing) and
statistics are its p50/p90/p95/p99, mean and max. A value may carry an ``ms`` or ``s``
suffix (``500ms``); a bare number is seconds, up to :data:`BARE_MAX_S` of its metric
(a minute of TTFT, a second a token): past that the unit must be written (``500s``),
since ``ttft_p99=500`` is far more often milliseconds meant than seconds.

These are *aggregate* targets, checked against one point's statistic; the scenario's
own ``slo:`` block stays a *per-request* target that defines goodput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.cliargs import ascii_float
from sim.configtools import SLO_BARE_MAX_S
from sim.errors import ServesimError

METRICS = ("ttft", "tpot", "itl", "e2e", "queueing")
STATS = ("p50", "p90", "p95", "p99", "mean", "max")
# The largest bare number (no unit) a target of each metric takes, in seconds (the
# scenario's slo keys are held to the same).
BARE_MAX_S = SLO_BARE_MAX_S


@dataclass(frozen=True)
class SLO:
    """One target: ``column`` (e.g. ``ttft_p99``) of a point must be <= ``limit_s`` seconds."""

    metric: str
    stat: str
    limit_s: float

    @property
    def column(self) -> str:
        """The sweep-CSV column this target reads."""
        return f"{self.metric}_{self.stat}"

    def met(self, value: float | None) -> bool:
        """Whether ``value`` (seconds; None or NaN when undefined) meets the target.

        An undefined statistic fails: a point where no request produced the metric
        gives no evidence that the target holds.
        """
        return value is not None and math.isfinite(value) and value <= self.limit_s

    def __str__(self) -> str:
        return f"{self.column}<={self.limit_s:g}s"


def parse_seconds(text: str, flag: str, item: str) -> float:
    """``text`` as seconds (accepting ``ms``/``s`` suffixes); errors name ``flag`` and ``item``."""
    t = text.strip().lower()
    scale = 1.0
    if t.endswith("ms"):
        t, scale = t[:-2], 1e-3
    elif t.endswith("s"):
        t = t[:-1]
    try:
        v = ascii_float(t) * scale  # not float(): it reads full-width and Arabic digits
    except ValueError:
        raise ServesimError(f"{flag} {item}: {text!r} is not a number of seconds "
                            "(e.g. 0.5 or 500ms)") from None
    if not math.isfinite(v) or v <= 0:
        raise ServesimError(f"{flag} {item}: the limit must be a positive number of seconds")
    return v


def parse_slo(item: str, flag: str = "--slo") -> SLO:
    """Parse one ``METRIC_STAT=SECONDS`` target; a bad one is a one-line error."""
    allowed = f"METRIC_STAT=SECONDS with METRIC in {', '.join(METRICS)} and STAT in " \
              f"{', '.join(STATS)}"
    if "=" not in item:
        raise ServesimError(f"{flag} {item}: expected {allowed}")
    name, value = item.split("=", 1)
    metric, _, stat = name.strip().rpartition("_")
    if metric not in METRICS or stat not in STATS:
        raise ServesimError(f"{flag} {item}: unknown target {name.strip()!r}; expected {allowed}")
    limit = parse_seconds(value, flag, item)
    bare = value.strip().lower().rstrip("0123456789._e+-") == ""
    if bare and limit > BARE_MAX_S[metric]:
        raise ServesimError(f"{flag} {item}: {limit:g} s is more than a bare {metric} target "
                            f"takes ({BARE_MAX_S[metric]:g} s); write {value.strip()}ms for "
                            f"milliseconds, or {value.strip()}s if seconds are meant")
    return SLO(metric, stat, limit)


def parse_slos(items: list[str], flag: str = "--slo") -> list[SLO]:
    """Parse several targets; the same column twice is an error (which one would hold?)."""
    out: list[SLO] = []
    for item in items:
        slo = parse_slo(item, flag)
        if any(s.column == slo.column for s in out):
            raise ServesimError(f"{flag} {item}: {slo.column} is given twice")
        out.append(slo)
    return out


def all_met(slos: list[SLO], row: dict[str, float | None]) -> bool:
    """Whether one point (a row of metric columns in seconds) meets every target."""
    return all(s.met(row.get(s.column)) for s in slos)


def unmet(slos: list[SLO], row: dict[str, float | None]) -> list[str]:
    """The targets one point misses, each with its value: "ttft_p99 1.08 s over 1 s", or
    "ttft_p99 undefined (target 1 s)" where no request gave the statistic."""
    out = []
    for s in slos:
        v = row.get(s.column)
        if s.met(v):
            continue
        if v is None or not math.isfinite(v):
            out.append(f"{s.column} undefined (target {s.limit_s:g} s)")
        else:
            out.append(f"{s.column} {v:.3g} s over {s.limit_s:g} s")
    return out
