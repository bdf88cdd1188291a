"""Latency and throughput metrics of a run (definitions follow vLLM's benchmark and DistServe).

TTFT = first token − arrival; TPOT = (finish − first token) / (output − 1) for requests
with at least 2 output tokens; ITL = gaps between consecutive tokens of a request;
E2E = finish − arrival; queueing delay = first scheduled − the engine's arrival (the
client's send plus the frontend's request delay, when one is priced). Rates divide by the
run's span: first arrival to the last finish (or the horizon when one cut the run).
A mixed workload's requests meet their own class's SLO, and get a per-class summary; a
staged workload (``workload.stages``) gets a per-stage summary.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sim.cliargs import ascii_float, comma_items
from sim.core.engine import RunResult
from sim.core.request import FAILED, FINISHED, NOT_ARRIVED, REJECTED, TIMED_OUT, UNFINISHED
from sim.errors import ServesimError
from sim.files import shown

PERCENTILES = (50, 90, 95, 99)


def per_request(res: RunResult) -> dict[str, np.ndarray]:
    """Derived per-request latencies in seconds (NaN where undefined)."""
    arr = res.requests.arrival_s
    out = res.requests.output_tokens
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out >= 2, (res.finish - res.first_token) / (out - 1), np.nan)
    return {
        "ttft": res.first_token - arr,
        "tpot": tpot,
        "e2e": res.finish - arr,
        # Waiting at the engine: from when it saw the request (after the frontend).
        "queueing": res.first_sched - (arr if res.seen_s is None else res.seen_s),
    }


def parse_percentiles(text: str, flag: str = "--percentiles") -> tuple[float, ...]:
    """``50,90,99,99.9``: percentiles (each above 0 and at most 100, none twice), in
    ascending order; a bad list is an error naming ``flag``, the value and what is allowed."""
    allowed = "a comma list of percentiles above 0 and at most 100, e.g. 50,90,99,99.9"
    try:
        vals = [ascii_float(x) for x in comma_items(text, flag, allowed)]
    except ValueError:
        raise ServesimError(f"{flag} {text}: expected {allowed}") from None
    if not vals or any(not (math.isfinite(v) and 0 < v <= 100) for v in vals):
        raise ServesimError(f"{flag} {text}: expected {allowed}")
    keys = [stat_key(v) for v in vals]
    twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if twice is not None:
        same = [f"{v!r}" for v, k in zip(vals, keys, strict=True) if k == twice]
        why = ("is given twice" if len(set(same)) == 1 else
               f"is given as {' and '.join(same)}, which round to the same label (10 "
               "significant digits)")
        raise ServesimError(f"{flag} {text}: percentile {twice[1:]} {why}; expected {allowed}")
    blurred = next((v for v, k in zip(vals, keys, strict=True) if float(k[1:]) != v), None)
    if blurred is not None:
        # Its column and summary.json key would name another percentile (p100 for
        # 99.9999999999999).
        raise ServesimError(f"{flag} {text}: percentile {blurred!r} has more than 10 "
                            f"significant digits and would be labelled {stat_key(blurred)}; "
                            f"expected {allowed}")
    return tuple(sorted(vals))


def stat_key(p: float) -> str:
    """The summary key of percentile ``p`` (0-100): ``p50``, ``p99.9`` (ten significant
    digits: ``:g``'s six had labelled 99.99999 ``p100``)."""
    return f"p{p:.10g}"


def distribution(values: np.ndarray, percentiles: tuple[float, ...] = PERCENTILES,
                 ) -> dict[str, float | None]:
    """The ``percentiles`` (p50/p90/p95/p99 by default), mean and max of the finite
    values, in their unit (None when there are none)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {**{stat_key(p): None for p in percentiles}, "mean": None, "max": None}
    qs = np.percentile(v, percentiles)
    return {**{stat_key(p): float(q) for p, q in zip(percentiles, qs, strict=True)},
            "mean": float(v.mean()), "max": float(v.max())}


def itl_distribution(res: RunResult, percentiles: tuple[float, ...] = PERCENTILES,
                      ) -> dict[str, float | None]:
    h = res.itl
    if h.total == 0:
        return {**{stat_key(p): None for p in percentiles}, "mean": None, "max": None}
    return {**{stat_key(p): h.quantile(p / 100) for p in percentiles}, "mean": h.mean,
            "max": h.max}


def status_counts(status: np.ndarray, mask: np.ndarray | None = None) -> dict[str, int]:
    """Requests (of those in ``mask``; all by default) finished, rejected, unfinished,
    timed out, failed and not arrived by the horizon, in that order."""
    sel = status if mask is None else status[mask]
    return {name: int((sel == code).sum()) for name, code in (
        ("finished", FINISHED), ("rejected", REJECTED), ("unfinished", UNFINISHED),
        ("timed_out", TIMED_OUT), ("failed", FAILED), ("not_arrived", NOT_ARRIVED))}


def class_targets(res: RunResult) -> list[tuple[float | None, float | None]]:
    """(TTFT, TPOT) targets in seconds of each class of a mixed workload, in class order
    (None: no target); empty for a workload without classes."""
    from sim.workload.mix import class_slos

    sc = res.scenario
    return class_slos(sc.workload, res.requests.class_names, sc.slo.ttft_s, sc.slo.tpot_s)


def meets_slo(res: RunResult, lat: dict[str, np.ndarray]) -> np.ndarray:
    """Boolean per request: finished and within every SLO that applies to it: its class's
    targets in a mixed workload, the scenario's ``slo`` otherwise."""
    ok = res.status == FINISHED
    klass = res.requests.klass
    if klass is not None:
        targets = class_targets(res)
        ttft = np.array([np.inf if a is None else a for a, _ in targets], dtype=float)
        tpot = np.array([np.inf if b is None else b for _, b in targets], dtype=float)
        # requests of one token have no TPOT to miss (NaN > x is False)
        return ok & (lat["ttft"] <= ttft[klass]) & ~(lat["tpot"] > tpot[klass])
    slo = res.scenario.slo
    if slo.ttft_s is not None:
        ok &= lat["ttft"] <= slo.ttft_s
    if slo.tpot_s is not None:
        ok &= ~(lat["tpot"] > slo.tpot_s)  # requests of one token have no TPOT to miss
    return ok


def class_summaries(res: RunResult, lat: dict[str, np.ndarray], good: np.ndarray,
                    span: float) -> dict[str, Any]:
    """Per-class counts, latencies (s), mean lengths (tokens), rates (per s, over the whole
    run's ``span`` so classes add up to the total) and SLO attainment, by class name; mean
    lengths and attainment are of the requests that arrived (before any horizon).
    ITL is not split by class: replicas keep one ITL histogram for all requests."""
    rq = res.requests
    if rq.klass is None:
        return {}
    status = res.status
    arrived = status != NOT_ARRIVED
    out: dict[str, Any] = {}

    def rate(x: float) -> float | None:
        return x / span if span > 0 else None

    for i, (name, (ttft_s, tpot_s)) in enumerate(
            zip(rq.class_names, class_targets(res), strict=True)):
        m = rq.klass == i
        came = m & arrived
        n = int(came.sum())
        fin = m & (status == FINISHED)
        n_good = int(good[m].sum())
        out[name] = {
            "requests": {"total": int(m.sum()), **status_counts(status, m)},
            "tokens": {
                "prompt_mean": float(rq.prompt_tokens[came].mean()) if n else None,
                "output_mean": float(rq.output_tokens[came].mean()) if n else None,
            },
            "latency_s": {k: distribution(lat[k][m]) for k in ("ttft", "tpot", "e2e",
                                                                "queueing")},
            "throughput": {
                "requests_per_s": rate(float(fin.sum())),
                "output_tokens_per_s": rate(float(rq.output_tokens[fin].sum())),
                "goodput_requests_per_s": rate(float(n_good)),
                "slo_attainment": n_good / n if n else None,
                "slo": {"ttft_s": ttft_s, "tpot_s": tpot_s},
            },
        }
    return out


def stage_summaries(res: RunResult, lat: dict[str, np.ndarray],
                    good: np.ndarray) -> list[dict[str, Any]]:
    """One entry per stage of ``workload.stages``: its window (s), the rate asked and the
    rate offered (requests that arrived in it, per second of it; a ``horizon_s`` inside
    the window ends it there), requests finished in the window per second (whichever
    stage they came from), the counts, latencies (s)
    and SLO attainment of the requests that arrived in it, and ``drain_s``: how long
    after the stage ended its last request got its first token (0 when none waited past
    the end; None when one never did before the run ended)."""
    rq = res.requests
    wins = rq.stage_windows
    if wins is None:
        return []
    stages = res.scenario.workload.stages or ()
    arr, status = rq.arrival_s, res.status
    horizon = res.scenario.horizon_s
    out: list[dict[str, Any]] = []
    for k, ((lo, hi), st) in enumerate(zip(wins, stages, strict=True), start=1):
        inside = (arr >= lo) & (arr < hi)
        m = inside & (status != NOT_ARRIVED)
        n = int(m.sum())
        d = (hi if horizon is None else min(hi, horizon)) - lo
        done = int(((res.finish >= lo) & (res.finish < hi)).sum())
        served = m & (status != REJECTED) & (status != TIMED_OUT) & (status != FAILED)
        ft = res.first_token[served]
        drain = (None if np.isnan(ft).any() else
                 max(0.0, float(ft.max()) - hi) if ft.size else 0.0)
        out.append({
            "stage": k, "start_s": lo, "end_s": hi, "rate_rps": st.rate,
            "offered_rps": n / d if d > 0 else None,
            "finished_rps": done / d if d > 0 else None,
            "requests": {"arrived": n, **status_counts(status, inside)},
            "latency_s": {key: distribution(lat[key][m])
                          for key in ("ttft", "tpot", "e2e", "queueing")},
            "slo_attainment": float(good[m].sum() / n) if n else None,
            "drain_s": drain,
        })
    return out


def clean(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, recursively (for strict JSON),
    and a file name's bytes that are not UTF-8 written as ``\\xNN`` escapes
    (:func:`sim.files.shown`), in keys and values: no output holds half a character."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return value if value.isascii() else shown(value)
    if isinstance(value, dict):
        return {clean(k) if isinstance(k, str) else k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value
