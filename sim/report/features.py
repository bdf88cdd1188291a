"""Summary blocks of a run's serving features: faults and their outages, the prefix
cache, the host KV tier and speculative decoding."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sim.core.engine import RunResult
from sim.core.replicastats import ReplicaStats
from sim.core.request import FAILED
from sim.report.metrics import distribution


def fault_summary(res: RunResult, lat: dict[str, np.ndarray],
                  window: tuple[float, float] | None = None) -> dict[str, Any]:
    """The ``faults`` section of the summary (present only when faults are configured):
    outages, downtime (s), requests lost (losses, counting each attempt), retried and
    failed, and TTFT/E2E distributions (s) of affected requests (placed again at least
    once) next to the unaffected ones: the latency impact of the faults. Outages and
    downtime are those within ``window`` (s, the run's span: first arrival to its end),
    when given: a planned outage after the last request finished took nothing down."""
    if not res.scenario.faults.active:
        return {}
    lo, hi = window if window is not None else (-math.inf, math.inf)
    # An outage that begins at the span's very end (failing the requests that end it)
    # took something down though none of its downtime is inside the span.
    overlap = [min(up, hi) - max(down, lo) for _, down, up in res.outages
               if down <= hi and up > lo]
    status = res.status
    retries = res.retries if res.retries is not None else np.zeros(len(status), np.int64)
    failed = status == FAILED
    hit = retries > 0
    # Planned outages set to begin after the run's end: none happened, which the count
    # of outages alone would not say.
    late = sum(o.at_s > hi for o in res.scenario.faults.outages)
    return {"faults": {
        "outages": len(overlap),
        **({"planned_after_run": late} if late else {}),
        "downtime_s": float(sum(max(x, 0.0) for x in overlap)),
        # Each loss either scheduled a retry or failed the request on the spot.
        "requests_lost": int(retries.sum()) + int((res.reason[failed] == "replica_failure").sum()),
        "requests_retried": int(hit.sum()),
        "requests_failed": int(failed.sum()),
        "latency_s": {
            group: {k: distribution(lat[k][mask]) for k in ("ttft", "e2e")}
            for group, mask in (("affected", hit), ("unaffected", ~hit))
        },
    }}


def prefix_summary(res: RunResult) -> dict[str, Any]:
    """Prefix-cache figures (tokens), present only when the scenario enables caching."""
    if not res.scenario.serving.caches_prefixes:
        return {}
    stats = res.replica_stats
    query = sum(s.prefix_query_tokens for s in stats)
    hit = sum(s.prefix_hit_tokens for s in stats)
    out: dict[str, Any] = {
        "prefill_tokens": query,
        "hit_tokens": hit,
        "hit_rate": hit / query if query else None,
        "evictions": sum(s.prefix_evictions for s in stats),
    }
    resumed = sum(s.resumed_query_tokens for s in stats)
    if resumed:
        # Requests admitted again after a preemption, apart from the hit rate as in vLLM.
        out["resumed_prefill_tokens"] = resumed
        out["resumed_hit_tokens"] = sum(s.resumed_hit_tokens for s in stats)
    if res.requests.prefix_hashes is None:
        out["note"] = NO_HASHES + (
            "; preempted requests found their own computed blocks again when they "
            "resumed (resumed_hit_tokens)" if resumed and out["resumed_hit_tokens"] else "")
    return {"prefix_cache": out}


def unused_hashes(res: RunResult) -> list[str]:
    """A note when the requests carry prefix hashes that nothing reads (caching off)."""
    if res.requests.prefix_hashes is None or res.scenario.serving.caches_prefixes:
        return []
    return ["the requests' prefix hashes are not used: prefix caching is off "
            "(serving.prefix_caching, vLLM's --enable-prefix-caching)"]


NO_HASHES = ("the requests carry no prefix hashes (a trace's hash_ids or prefix_hash_ids, "
             "or workload.shared_prefix), so every prompt is its own and nothing is shared")


def tier_summary(res: RunResult) -> dict[str, Any]:
    """``kv_tiers``, present only with a ``kv_offload`` host tier: each tier's size per
    replica (blocks, and GiB per GPU), the prompt tokens hit in it and their share of
    prefill tokens, the host tier's traffic (blocks and GiB per GPU stored to it and
    loaded from it, entries dropped) and the seconds iterations spent on it."""
    from sim.config.disagg import pools

    if all(p.serving.kv_offload is None for p in pools(res.scenario)):
        return {}
    stats = res.replica_stats
    query = sum(s.prefix_query_tokens for s in stats)
    host_hit = sum(s.host_hit_tokens for s in stats)
    gpu_hit = sum(s.prefix_hit_tokens for s in stats) - host_hit

    def gib(blocks: int, s: ReplicaStats) -> float:
        return blocks * s.block_bytes / 2**30

    return {"kv_tiers": {
        "gpu": {"blocks_per_replica": [s.kv_total for s in stats],
                "gib_per_gpu": [gib(s.kv_total, s) for s in stats],
                "hit_tokens": gpu_hit, "hit_rate": gpu_hit / query if query else None},
        "host": {"blocks_per_replica": [s.host_total for s in stats],
                 "gib_per_gpu": [gib(s.host_total, s) for s in stats],
                 "hit_tokens": host_hit, "hit_rate": host_hit / query if query else None,
                 "stored_blocks": sum(s.host_stored for s in stats),
                 "loaded_blocks": sum(s.host_loaded for s in stats),
                 # Per GPU, so one figure a replica (a sum would be the cluster's).
                 "stored_gib_per_gpu": [gib(s.host_stored, s) for s in stats],
                 "loaded_gib_per_gpu": [gib(s.host_loaded, s) for s in stats],
                 "dropped_entries": sum(s.host_dropped for s in stats)},
        "transfer_s": sum(s.host_io_s for s in stats),
    }}


def swap_summary(res: RunResult) -> dict[str, Any]:
    """``swap``, present only where a pool preempts by swap: the preemptions whose KV went
    to host memory and those recomputed instead, as the host had no room for it (or, by
    vLLM v0's rule, nothing of it was computed yet)."""
    from sim.config.disagg import pools

    if all(p.serving.preemption != "swap" for p in pools(res.scenario)):
        return {}
    stats = res.replica_stats
    swapped = sum(s.swapped_out for s in stats)
    return {"swap": {"swapped": swapped,
                     "recomputed": sum(s.preemptions for s in stats) - swapped}}


def spec_summary(res: RunResult) -> dict[str, Any]:
    """Speculative decoding (present only when the scenario sets it): the setting, the
    expected tokens per verify its acceptance gives, and the run's verifies (one per
    sequence and iteration) with the tokens they emitted and their mean, capped where a
    request's output ran out. When classes have their own acceptance, ``classes`` holds
    every workload class's (:func:`spec_classes`)."""
    spec = res.scenario.serving.speculative
    if spec is None:
        return {}
    from sim.config.speculative import drafter_model

    stats = res.replica_stats
    verifies = sum(s.spec_verifies for s in stats)
    tokens = sum(s.spec_tokens for s in stats)
    drafter = drafter_model(spec, res.scenario.model)
    # The run's own drafter says where its price came from (the roofline, or the
    # target's profile for a head); a result without it was priced by the roofline.
    source = res.draft_source.removeprefix("drafting: ")
    # n-gram lookup drafts for free; a Gated DeltaNet target's verify still writes more
    # states (the source's part after the drafting's).
    lookup = "none (n-gram lookup)" + source.removeprefix("n-gram drafting, free")
    return {"speculative": {
        **spec.describe(),
        "draft_cost": (lookup if drafter is None else source or
                       f"{spec.num_tokens} roofline decode steps of {drafter.name} a verify"),
        "verifies": verifies,
        "verify_tokens": tokens,
        "mean_tokens_per_verify": tokens / verifies if verifies else None,
        **spec_classes(res),
    }}


def spec_classes(res: RunResult) -> dict[str, Any]:
    """Each workload class's verifies against its own acceptance, when the scenario gives
    some class one (empty otherwise): per class its acceptance (``acceptance_from``:
    ``class`` for its own, ``scenario`` for the top-level one it falls back to), the
    tokens a verify of it is expected to emit, and the verifies of its finished requests
    with the tokens they emitted and their mean; beside them
    ``expected_tokens_per_verify_of_classes``, the classes' expectations weighted by
    those verifies, which is what the run's mean is to be set against."""
    spec = res.scenario.serving.speculative
    req = res.requests
    if (spec is None or not spec.classes or req.klass is None or res.verifies is None
            or res.verify_tokens is None):
        return {}
    k = spec.num_tokens
    out: dict[str, Any] = {}
    weighted = total = 0.0
    for c, name in enumerate(req.class_names):
        acc = spec.classes.get(name, spec.acceptance)
        mine = req.klass == c
        verifies = int(res.verifies[mine].sum())
        tokens = int(res.verify_tokens[mine].sum())
        expected = acc.mean_tokens(k)
        weighted += verifies * expected
        total += verifies
        out[name] = {**acc.describe(),
                     "acceptance_from": "class" if name in spec.classes else "scenario",
                     "expected_tokens_per_verify": expected, "verifies": verifies,
                     "verify_tokens": tokens,
                     "mean_tokens_per_verify": tokens / verifies if verifies else None}
    return {"classes": out,
            "expected_tokens_per_verify_of_classes": weighted / total if total else None}


def over_budget(stats: Any, budget: int) -> dict[str, Any]:
    """The iterations that computed more tokens than the policy's per-iteration budget
    (``budget``: chunked's token budget, orca's max_num_batched_tokens), present only when
    some did: every running sequence decodes, or verifies its k + 1 tokens, each
    iteration, where vLLM and TensorRT-LLM would leave the verifies past the budget out
    until a later one, so such a run's steps are larger than the server's."""
    n = sum(s.over_budget for s in stats)
    return {"over_budget_iterations": n, "token_budget": budget} if n else {}

