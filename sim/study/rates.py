"""The request rates a sweep or capacity search may run, and the lowest one a workload
can measure.

Every rate a study runs lies within [:data:`MIN_RATE`, :data:`MAX_RATE`] requests/s.
Above the top no modelled server keeps up, and the capacity search's doublings would
only run on towards overflow; below the bottom a thousand requests already spread over
the 1e9 s (31 years) the simulated clock resolves.

Within that range a workload sets its own floor (:func:`rate_floor`):

- bounded by ``duration_s``, a point needs at least one request in its window, so a
  rate of one request per ``duration_s``; below it the window is empty and the point
  would measure nothing;
- bounded by a request count (``num_requests``, or ``--max-requests`` for a
  steady-state point, which grows to it), those requests must arrive within half the
  clock's range: the other half leaves room for a Poisson draw's spread and for the
  service after the last arrival.

A rate given on the command line below its workload's floor is an error naming the
flag, the value and the floor (:func:`check_rate`); a point that still had no request
(a trace whose first arrival comes late in ``duration_s``, a Poisson draw with none in
it) is an error after it ran (:func:`empty_point_error`), never an empty row.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from sim.cliargs import ascii_float
from sim.configtools import MAX_TIME_S
from sim.errors import ServesimError

MIN_RATE = 1e-6  # requests/s: one every 11.6 days
MAX_RATE = 1e6  # requests/s
RATE_RANGE = f"rates run from {MIN_RATE:g} to {MAX_RATE:g} requests/s"


def rate_problem(rate: float) -> str | None:
    """Why ``rate`` (requests/s) is outside what any point runs, in words; None when it
    is inside."""
    if not math.isfinite(rate):
        return "must be a finite number of requests/s"
    if rate <= 0:
        return "must be greater than 0 requests/s"
    if rate < MIN_RATE:
        return (f"is below {MIN_RATE:g} requests/s, where 1,000 requests already spread "
                f"over the {MAX_TIME_S:.0e} s (31 years) the simulated clock resolves")
    if rate > MAX_RATE:
        return (f"is above {MAX_RATE:g} requests/s, far beyond what any modelled server "
                "serves")
    return None


def rate_arg(text: str) -> float:
    """An argparse ``type`` for a rate flag: a number of requests/s within the range."""
    try:
        v = ascii_float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number of "
                                         "requests/s") from None
    why = rate_problem(v)
    if why is not None:
        raise argparse.ArgumentTypeError(f"got {text}, {v:g} {why}; {RATE_RANGE}")
    return v


@dataclass(frozen=True)
class Floor:
    """The lowest rate (requests/s) a workload measures; ``why`` completes "at R
    requests/s, ..." for a rate below it (``{rate}`` and ``{span}``, the seconds its
    ``size`` requests take to arrive, filled in), ``fix`` says how to go lower."""

    rate: float
    why: str
    fix: str
    size: int = 0

    def reason(self, rate: float) -> str:
        """Why ``rate`` is below this floor, in a clause."""
        return self.why.format(rate=rate, span=self.size / rate)


def rate_floor(raw: dict[str, Any], grow_to: int | None = None) -> Floor:
    """The lowest rate the workload of scenario mapping ``raw`` measures (see the module
    docstring); ``grow_to``: the most requests a steady-state point grows to, None when
    points are measured once."""
    w = raw.get("workload") or {}
    w = w if isinstance(w, dict) else {}
    best = Floor(MIN_RATE, f"the rate {rate_problem(0.5 * MIN_RATE)}", RATE_RANGE)
    d, n = w.get("duration_s"), w.get("num_requests")
    if isinstance(d, int | float) and d > 0 and 1.0 / d > best.rate:
        best = Floor(round_up(1.0 / d), f"workload.duration_s {d:g} s holds {{rate:g}} x "
                     f"{d:g} < 1 request, so the point would simulate nothing",
                     "1 / duration_s; a longer duration_s lowers it")
    # A point bounded by duration_s alone, measured once, never outlasts duration_s.
    size, what = (n, "workload.num_requests") if isinstance(n, int) else (None, "")
    if grow_to is not None and (size is not None or d is not None) and grow_to > (size or 0):
        size, what = grow_to, "--max-requests, what a steady-state point may grow to"
    if size is not None and 2.0 * size / MAX_TIME_S > best.rate:
        best = Floor(round_up(2.0 * size / MAX_TIME_S),
                     f"{size:,} requests ({what}) arrive over {{span:.3g}} s, more than half "
                     f"the {MAX_TIME_S:.0e} s (31 years) the simulated clock resolves",
                     "fewer requests lower it", size)
    return best


def round_up(rate: float) -> float:
    """``rate`` to the 9 significant digits points are made with, rounded up: a floor
    rounded down (1/30 to 0.0333333333) would hold just under the one request it is for."""
    r = float(f"{rate:.9g}")
    return r if r >= rate else float(f"{r + 10.0 ** (math.floor(math.log10(r)) - 8):.9g}")


def check_rate(raw: dict[str, Any], rate: float, label: str, grow_to: int | None = None) -> None:
    """Refuse ``rate`` (requests/s, given as ``label``: a flag and its value) when it is
    below the lowest rate the workload measures (:func:`rate_floor`), naming why."""
    floor = rate_floor(raw, grow_to)
    if rate >= floor.rate:
        return
    raise ServesimError(f"{label}: at {rate:g} requests/s, {floor.reason(rate)}; this "
                        f"workload's rates start at {floor.rate:.3g} requests/s "
                        f"({floor.fix})")


def arrived(row: dict[str, Any]) -> float:
    """Requests that arrived in a point's run. A row cached before the count was kept
    has those finished, rejected or left unfinished, and an offered rate when two or
    more arrived (timed-out and failed requests have no column of their own)."""
    n = row.get("arrived")
    if n is not None:
        return float(n)
    seen = sum(float(row.get(k) or 0.0) for k in ("finished", "rejected", "unfinished"))
    return seen if seen or row.get("offered_rps") is None else 2.0


def empty_point_error(raw: dict[str, Any], rate: float, point: str) -> ServesimError:
    """The error for a point (``point``: its words) in which no request arrived, naming
    its rate and what bounded the window it had."""
    w = raw.get("workload") or {}
    w = w if isinstance(w, dict) else {}
    d, h = w.get("duration_s"), raw.get("horizon_s")
    if h is not None:
        why = f"every request was due after horizon_s {h:g} s"
    elif d is not None and w.get("trace") is not None:
        why = (f"the trace replayed at {rate:g} requests/s has no request before "
               f"workload.duration_s {d:g} s (its first arrival comes too late in it for "
               "this rate); a higher rate or a longer duration_s puts requests in it")
    elif d is not None:
        why = (f"no arrival fell within workload.duration_s {d:g} s at {rate:g} requests/s; "
               "a higher rate or a longer duration_s puts requests in it")
    else:
        why = "the workload sent no request"
    return ServesimError(f"{point}: no request arrived, so the point simulates nothing: "
                         f"{why}")
