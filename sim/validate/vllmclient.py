"""The send times of vLLM's benchmark client (``vllm bench serve``), rebuilt from its seed.

A result file saves per-request send times only from vLLM 0.16 (``start_times``). Before
that they can still be recomputed: the client seeds numpy's legacy global generator with
its ``--seed`` (0 unless given, and not written to the result) before anything else, and
from vLLM 0.10.2 on, whatever the dataset but ``prefix_repetition``, draws nothing from it
before the gaps between requests. So the seed, ``request_rate``, ``burstiness`` and any
ramp-up give the very send times of the run, not another draw of the same process. What
that buys: the predicted server meets the bursts the real one met, so a comparison of
percentiles is not blurred by the arrivals (eight seeds of 1,000 Poisson requests at 22
req/s to Llama-3-8B on one H100 give a predicted TTFT p90 anywhere from 117 to 147 ms).

The client has had two schedules (:data:`STYLES`):

``precomputed`` (vLLM 0.10.0 on)
    One gamma gap per request, request 0's included, all drawn before the first send;
    their running sums are the send times, so request 0 goes after its own gap. At a
    constant rate they are then rescaled so that the last falls at n / rate exactly.
``paced`` (vLLM 0.9.2 and before)
    Request 0 at once, then a gap drawn after each send and slept: send i is the sum of
    the first i gaps; the n-th gap is slept after the last send, inside the run; no
    rescaling.

A gap at request rate r and burstiness b is gamma(shape b, scale 1 / (r b)): exponential
at b = 1, the constant 1 / r at b = inf (no draw). Under a ramp-up, request i's rate is
``start + (end - start) p`` (linear) or ``start (end / start) ** p`` (exponential) with
p = i / (n - 1), and nothing is rescaled; at ``request_rate`` inf without one, no gap is
drawn and every request goes at 0 s.

The result file does not say which schedule its client ran, but its ``duration`` does:
the run ended when its last request did, so the schedule whose sends plus the recorded
latencies end at the recorded duration is the one (:func:`rebuild`). That check tells the
schedules apart; it cannot tell seeds apart, as a rescaled schedule ends at n / rate
whatever the seed. A file that keeps its send times can: :func:`agreement` says whether
they are the schedule drawn from a seed.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

# The two send schedules vLLM's client has had, newest first (module docstring).
STYLES = ("precomputed", "paced")

# The releases each schedule belongs to, as the notes name them.
RELEASES = {"precomputed": "vLLM 0.10 and later", "paced": "vLLM 0.9 and before"}

# A schedule agrees with the run when its end is within this much of the recorded
# duration (s): the client's own lag between a request falling due and its clock
# starting, summed at worst over a cap's chain of requests, stays well under it, while
# the two schedules' ends differ by about sqrt(n) / rate.
AGREE_S = 0.25


@dataclass(frozen=True)
class Pacing:
    """How the client paced its requests: ``rate`` (req/s; inf: all at once, unless
    ramped), ``burstiness`` (the gamma shape; 1 = Poisson, inf = even gaps) and
    ``ramp`` (None, or the strategy ``"linear"``/``"exponential"`` with its start and
    end rates in req/s)."""

    rate: float
    burstiness: float = 1.0
    ramp: tuple[str, float, float] | None = None

    def rates(self, n: int) -> np.ndarray:
        """Each of ``n`` requests' rate (req/s), as the client computes it."""
        if self.ramp is None:
            return np.full(n, self.rate)
        kind, start, end = self.ramp
        p = np.arange(n) / max(n - 1, 1)
        if kind == "linear":
            return start + (end - start) * p
        return start * (end / start) ** p


def gaps(n: int, pacing: Pacing, seed: int) -> np.ndarray | None:
    """The client's ``n`` gaps (s), drawn as it draws them from numpy's legacy generator
    seeded with ``seed``; None when it draws none (every request at once)."""
    r = pacing.rates(n)
    if np.isinf(r).all():
        return None
    if math.isinf(pacing.burstiness):
        return 1.0 / r
    b = pacing.burstiness
    # The client's generator is numpy's module-level RandomState; a private one seeded
    # alike gives the same stream, one draw per request in order. (A burstiness near the
    # float limit makes the scale 0: gaps of 0, as the client's own would be.)
    with np.errstate(over="ignore"):
        scale = 1.0 / (r * b)
    return np.random.RandomState(seed).gamma(b, scale)


def schedule(n: int, pacing: Pacing, seed: int, style: str) -> tuple[np.ndarray, float]:
    """Send times (s from the run's start) of ``n`` requests under ``style`` (one of
    :data:`STYLES`), and when the client's own pacing ends (s): the last send, or for
    ``paced`` the end of the gap slept after it."""
    return _sends(gaps(n, pacing, seed), n, pacing, style)


def _sends(g: np.ndarray | None, n: int, pacing: Pacing, style: str
           ) -> tuple[np.ndarray, float]:
    """:func:`schedule` from the client's drawn gaps ``g`` (None: none drawn)."""
    if g is None:
        return np.zeros(n), 0.0
    # A rate near 0 can overflow the sums: the caller refuses such spans by name.
    with np.errstate(over="ignore", invalid="ignore"):
        if style == "paced":
            t = np.concatenate(([0.0], np.cumsum(g[:-1])))
            return t, float(t[-1] + g[-1])
        t = np.cumsum(g)
        if pacing.ramp is None and t[-1] != 0:
            # The client stretches its sums so the last send is at n / rate exactly.
            t = t * ((n / pacing.rate) / t[-1])
    return t, float(t[-1])


def run_end(due: np.ndarray, e2e: np.ndarray, cap: int | None, pacing_end: float) -> float:
    """When a run whose requests fell due at ``due`` (s) and took ``e2e`` (s, 0 for a
    failed one) would have ended: each request sent when due and, under a ``cap`` on
    requests in flight, when a slot was free (first come, first served); the run ends
    with its last request, or with the client's pacing if that is later."""
    if not cap:
        return max(float(np.max(due + e2e)), pacing_end)
    free = [0.0] * cap
    end = pacing_end
    for d, e in zip(due.tolist(), e2e.tolist(), strict=True):
        sent = max(d, heapq.heappop(free))
        heapq.heappush(free, sent + e)
        end = max(end, sent + e)
    return end


def rebuild(n: int, pacing: Pacing, seed: int, e2e: np.ndarray, cap: int | None,
            duration: float | None) -> tuple[np.ndarray, str]:
    """The send times (s, the first at 0) of a result's ``n`` requests, and a sentence
    saying how they were rebuilt. ``e2e`` (s; NaN for a failed request, whose time the
    file does not keep) and the recorded ``duration`` (s, None when absent) choose the
    schedule: the one whose end is nearer the duration, ``precomputed`` without one."""
    g = gaps(n, pacing, seed)
    if g is None:
        return np.zeros(n), "request_rate inf: every request sent at 0 s"
    lost = int(np.isnan(e2e).sum())
    took = np.nan_to_num(e2e, nan=0.0)
    cands = {s: _sends(g, n, pacing, s) for s in STYLES}
    ends = {s: run_end(t, took, cap, stop) for s, (t, stop) in cands.items()}
    if duration is None:
        style = STYLES[0]
        check = "the file has no duration to check the schedule against"
    else:
        style = min(STYLES, key=lambda s: (abs(duration - ends[s]), STYLES.index(s)))
        off = duration - ends[style]
        check = (f"at their recorded latencies the requests end {_ms(off)} the recorded "
                 "duration")
        if off > AGREE_S and lost:
            # A failed request's time is not kept: it may have been the last to end.
            check += (f" (the run's {lost} failed request{'s' if lost > 1 else ''} may "
                      "have ended later: the file keeps no time for them)")
        elif abs(off) > AGREE_S:
            check += (f", and neither schedule ends within {AGREE_S * 1e3:.0f} ms of it: "
                      "the run had another seed, a dataset that draws from numpy's "
                      "generator, or a client that fell behind, so the predicted side "
                      "sees another draw of the same process")
    t = cands[style][0]
    return t - t[0], (f"arrivals rebuilt as vLLM's client draws them with --seed {seed} "
                      f"({_kind(pacing)}, the schedule of {RELEASES[style]}; vLLM saved "
                      f"no per-request send times): {check}")


# Saved send times match a rebuilt schedule when their median lag behind it is within
# this (s): the client's own delay between a request falling due and its clock starting.
MATCH_S = 0.01


def agreement(saved: np.ndarray, pacing: Pacing, seed: int) -> str | None:
    """How a result's saved send times (s, any origin, in request order; sent as they
    fell due, no cap holding them) compare with vLLM 0.10's schedule rebuilt from
    ``seed``: a phrase, or None where nothing was drawn (every request due at once)."""
    g = gaps(len(saved), pacing, seed)
    if g is None:
        return None
    t, _ = _sends(g, len(saved), pacing, "precomputed")
    lag = saved - t
    lag -= lag.min()  # the run's own origin: the request sent soonest after falling due
    if not np.isfinite(lag).all():
        return None  # a rate so low its sums overflow: nothing to compare
    med, worst = float(np.median(lag)), float(lag.max())
    if med <= MATCH_S:
        return (f"they are vLLM's schedule from --seed {seed} ({_span(med)} late at the "
                f"median, {_span(worst)} at most)")
    return (f"they are not vLLM's schedule from --seed {seed} ({_span(med)} apart at the "
            "median): the run had another seed, which the rebuild of a file without "
            "start_times would need")


def _kind(p: Pacing) -> str:
    """The process in words: "Poisson at 4 req/s", "Poisson, ramped linearly from 1 to 8
    req/s"..."""
    if p.ramp is not None:
        what = ("evenly spaced" if math.isinf(p.burstiness) else "Poisson"
                if p.burstiness == 1.0 else f"gamma (burstiness {p.burstiness:g})")
        how = {"linear": "linearly", "exponential": "exponentially"}[p.ramp[0]]
        return f"{what}, ramped {how} from {p.ramp[1]:g} to {p.ramp[2]:g} req/s"
    if math.isinf(p.burstiness):
        return f"evenly spaced at {p.rate:g} req/s"
    if p.burstiness == 1.0:
        return f"Poisson at {p.rate:g} req/s"
    return f"gamma (burstiness {p.burstiness:g}) at {p.rate:g} req/s"


def _span(x: float) -> str:
    """``|x|`` seconds as "12.3 ms" or "5.40 s"."""
    return f"{abs(x) * 1e3:.1f} ms" if abs(x) < 1 else f"{abs(x):.3g} s"


def _ms(off: float) -> str:
    """``off`` seconds as "12.3 ms before", "4.0 ms after", "5.40 s before"."""
    return f"{_span(off)} {'before' if off >= 0 else 'after'}"
