"""Latency and throughput metrics of a run (definitions follow vLLM's benchmark and DistServe).

TTFT = first token − arrival; TPOT = (finish − first token) / (output − 1) for requests
with at least 2 output tokens; ITL = gaps between consecutive tokens of a request;
E2E = finish − arrival; queueing delay = first scheduled − arrival. Rates divide by the
run's span: first arrival to the last finish (or the horizon when one cut the run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any

import numpy as np

from sim.engine import RunResult
from sim.request import FINISHED, REJECTED, UNFINISHED

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
        "queueing": res.first_sched - arr,
    }


def distribution(values: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p95/p99, mean and max of the finite values (None when there are none)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {**{f"p{p}": None for p in PERCENTILES}, "mean": None, "max": None}
    qs = np.percentile(v, PERCENTILES)
    return {**{f"p{p}": float(q) for p, q in zip(PERCENTILES, qs, strict=True)},
            "mean": float(v.mean()), "max": float(v.max())}


def _itl_distribution(res: RunResult) -> dict[str, float | None]:
    h = res.itl
    if h.total == 0:
        return {**{f"p{p}": None for p in PERCENTILES}, "mean": None, "max": None}
    return {**{f"p{p}": h.quantile(p / 100) for p in PERCENTILES}, "mean": h.mean,
            "max": h.max}


def meets_slo(res: RunResult, lat: dict[str, np.ndarray]) -> np.ndarray:
    """Boolean per request: finished and within every SLO the scenario sets."""
    ok = res.status == FINISHED
    slo = res.scenario.slo
    if slo.ttft_s is not None:
        ok &= lat["ttft"] <= slo.ttft_s
    if slo.tpot_s is not None:
        ok &= ~(lat["tpot"] > slo.tpot_s)  # requests of one token have no TPOT to miss
    return ok


def scenario_digest(scenario: Any) -> str:
    """SHA-256 (hex) of the validated scenario's settings, file locations excluded: two
    runs with equal digests simulated the same configuration (trace files' contents are
    not hashed)."""
    fields = dataclasses.asdict(scenario)
    fields.pop("base_dir", None)
    fields.pop("source", None)
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def summarize(res: RunResult) -> dict[str, Any]:
    """The run's summary as plain JSON-ready values (seconds, tokens, requests)."""
    from sim import __version__

    lat = per_request(res)
    status = res.status
    finished = status == FINISHED
    n = len(status)
    first = float(res.requests.arrival_s[0]) if n else 0.0
    done_t = res.finish[finished]
    end = float(done_t.max()) if done_t.size else first
    if (status == UNFINISHED).any():
        end = max(end, res.end_s)
    span = end - first
    reasons: dict[str, int] = {}
    for why in res.reason[status == REJECTED]:
        reasons[str(why)] = reasons.get(str(why), 0) + 1
    good = meets_slo(res, lat)
    out_tokens = int(res.requests.output_tokens[finished].sum())
    stats = res.replica_stats
    iters = sum(s.iterations for s in stats)
    kv_total = sum(s.kv_total for s in stats)
    from sim.disagg import pools

    gpus = sum(p.replicas * p.tp for p in pools(res.scenario))

    def rate(x: float) -> float | None:
        return x / span if span > 0 else None

    sc = res.scenario
    return {
        "scenario": sc.name,
        "servesim_version": __version__,
        "scenario_sha256": scenario_digest(sc),
        "seed": sc.workload.seed,
        "policy": sc.serving.policy,
        "replicas": len(stats),
        "gpus": gpus,
        "requests": {
            "total": n,
            "finished": int(finished.sum()),
            "rejected": int((status == REJECTED).sum()),
            "unfinished": int((status == UNFINISHED).sum()),
            "rejected_by_reason": dict(sorted(reasons.items())),
        },
        "workload_notes": list(res.requests.notes),
        "span_s": span,
        "latency_s": {
            "ttft": distribution(lat["ttft"]),
            "tpot": distribution(lat["tpot"]),
            "itl": _itl_distribution(res),
            "e2e": distribution(lat["e2e"]),
            "queueing": distribution(lat["queueing"]),
        },
        "itl_relative_accuracy": res.itl.rel_accuracy,
        "throughput": {
            "requests_per_s": rate(float(finished.sum())),
            "output_tokens_per_s": rate(float(out_tokens)),
            "goodput_requests_per_s": rate(float(good.sum())),
            "slo_attainment": float(good.sum() / n) if n else None,
            "slo": {"ttft_s": sc.slo.ttft_s, "tpot_s": sc.slo.tpot_s},
        },
        "batch": {
            "iterations": iters,
            "mean_seqs": sum(s.batch_seqs for s in stats) / iters if iters else None,
            "mean_tokens": sum(s.batch_tokens for s in stats) / iters if iters else None,
        },
        "kv": {
            "blocks_per_replica": [s.kv_total for s in stats],
            "block_size": sc.serving.block_size,
            "mean_utilization": (sum(s.kv_block_s for s in stats) / (kv_total * span)
                                 if span > 0 else None),
            "peak_utilization": max((s.kv_peak / s.kv_total for s in stats), default=0.0),
        },
        "preemptions": int(res.preemptions.sum()),
        "busy_fraction": (sum(s.busy_s for s in stats) / (len(stats) * span)
                          if span > 0 else None),
    }


def clean(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, recursively (for strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value
