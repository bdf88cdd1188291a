"""A run's summary: every block of ``summary.json`` in one JSON-ready mapping (latency
metrics: :mod:`sim.report.metrics`; the set-up: :mod:`sim.report.setup`; serving
features: :mod:`sim.report.features`)."""

from __future__ import annotations

from typing import Any

from sim.core.engine import RunResult
from sim.core.request import FINISHED, NOT_ARRIVED, REJECTED, UNFINISHED
from sim.report.features import (
    fault_summary,
    over_budget,
    prefix_summary,
    spec_summary,
    swap_summary,
    tier_summary,
    unused_hashes,
)
from sim.report.metrics import (
    PERCENTILES,
    class_summaries,
    distribution,
    itl_distribution,
    meets_slo,
    per_request,
    stage_summaries,
    status_counts,
)
from sim.report.overload import saturation
from sim.report.setup import scenario_digest, setup_summary, simulated


def summarize(res: RunResult, percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, Any]:
    """The run's summary as plain JSON-ready values (seconds, tokens, requests); a mixed
    workload adds ``classes`` (:func:`class_summaries`), a closed loop ``workload`` and
    a priced frontend ``frontend`` (:func:`setup_summary`); ``simulated``
    (:func:`simulated`) says what was run. ``percentiles`` (0-100) are those of the
    run's ``latency_s`` block; per-class, per-stage and fault blocks keep p50/p90/p95/p99."""
    from sim import __version__

    lat = per_request(res)
    status = res.status
    finished = status == FINISHED
    n = len(status)
    # Requests due after the horizon are counted, but judged in no rate: the run's.
    arrived = int((status != NOT_ARRIVED).sum())
    first = float(res.requests.arrival_s[0]) if n else 0.0
    done_t = res.finish[finished]
    end = float(done_t.max()) if done_t.size else first
    if (status == UNFINISHED).any():
        end = max(end, res.end_s)
    if res.failed_s is not None:
        # The work spent on requests that failed counts in the busy time: the span must
        # reach their failure too, or busy shares pass 1 and outages fall outside it.
        end = max(end, res.failed_s)
    span = end - first
    reasons: dict[str, int] = {}
    for why in res.reason[status == REJECTED]:
        reasons[str(why)] = reasons.get(str(why), 0) + 1
    good = meets_slo(res, lat)
    out_tokens = int(res.requests.output_tokens[finished].sum())
    in_tokens = int(res.requests.prompt_tokens[finished].sum())
    stats = res.replica_stats
    iters = sum(s.iterations for s in stats)
    kv_total = sum(s.kv_total for s in stats)
    from sim.config.disagg import pools

    the_pools = pools(res.scenario)
    gpus = sum(p.replicas * p.gpus_per_replica for p in the_pools)
    replicas = sum(p.replicas for p in the_pools)
    ranks = sum(p.replicas * p.dp for p in the_pools)  # data-parallel ranks count apart

    def rate(x: float) -> float | None:
        return x / span if span > 0 else None

    sc = res.scenario
    summary: dict[str, Any] = {
        "scenario": sc.name,
        "servesim_version": __version__,
        "scenario_sha256": scenario_digest(sc),
        "seed": sc.workload.seed,
        "policy": sc.serving.policy,
        "cost_source": res.cost_source,
        "replicas": replicas,
        **({"data_parallel_ranks": ranks} if ranks > replicas else {}),
        "gpus": gpus,
        **setup_summary(res),
        "requests": {
            "total": n,
            **status_counts(status),
            "rejected_by_reason": dict(sorted(reasons.items())),
        },
        "workload_notes": [*res.requests.notes, *unused_hashes(res)],
        "span_s": span,
        "latency_s": {
            "ttft": distribution(lat["ttft"], percentiles),
            "tpot": distribution(lat["tpot"], percentiles),
            "itl": itl_distribution(res, percentiles),
            "e2e": distribution(lat["e2e"], percentiles),
            "queueing": distribution(lat["queueing"], percentiles),
        },
        "itl_relative_accuracy": res.itl.rel_accuracy,
        "throughput": {
            "requests_per_s": rate(float(finished.sum())),
            "output_tokens_per_s": rate(float(out_tokens)),
            # Per GPU of every pool: what a capacity plan compares across set-ups.
            "output_tokens_per_s_per_gpu": rate(out_tokens / gpus),
            "prompt_tokens_per_s": rate(float(in_tokens)),
            "goodput_requests_per_s": rate(float(good.sum())),
            "slo_attainment": float(good.sum() / arrived) if arrived else None,
            "slo": {"ttft_s": sc.slo.ttft_s, "tpot_s": sc.slo.tpot_s},
        },
        "batch": {
            "iterations": iters,
            "mean_seqs": sum(s.batch_seqs for s in stats) / iters if iters else None,
            "mean_tokens": sum(s.batch_tokens for s in stats) / iters if iters else None,
            **over_budget(stats, sc.serving.iteration_budget),
        },
        "kv": {
            "blocks_per_replica": [s.kv_total for s in stats],
            "block_size": sc.serving.block_size,
            "mean_utilization": (sum(s.kv_block_s for s in stats) / (kv_total * span)
                                 if span > 0 else None),
            "peak_utilization": max((s.kv_peak / s.kv_total for s in stats), default=0.0),
        },
        # Per pool: one GPU's memory terms (GiB) and each replica's KV blocks and tokens.
        **({"memory": res.memory} if res.memory else {}),
        "preemptions": int(res.preemptions.sum()),
        **swap_summary(res),
        **prefix_summary(res),
        **tier_summary(res),
        **spec_summary(res),
        "busy_fraction": (sum(s.busy_s for s in stats) / (len(stats) * span)
                          if span > 0 else None),
        "saturation": saturation(res),
        **fault_summary(res, lat, (first, end)),
        "simulated": simulated(res),
    }
    if res.requests.klass is not None:
        summary["classes"] = class_summaries(res, lat, good, span)
    if res.requests.stage_windows is not None:
        summary["stages"] = stage_summaries(res, lat, good)
    return summary
