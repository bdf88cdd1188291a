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

import dataclasses
import hashlib
import json
import math
from typing import Any

import numpy as np

from sim.config.scenario import Scenario
from sim.configtools import comma_items
from sim.core.engine import RunResult
from sim.core.replicastats import ReplicaStats
from sim.core.request import FAILED, FINISHED, NOT_ARRIVED, REJECTED, TIMED_OUT, UNFINISHED
from sim.cost.dtypes import SPARSE_FIELDS
from sim.cost.frontend import FRONTEND_COEFS, NO_FRONTEND
from sim.cost.specs import recorded_fields
from sim.errors import ServesimError
from sim.report.overload import saturation

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
        vals = [float(x) for x in comma_items(text, flag, allowed)]
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


def _itl_distribution(res: RunResult, percentiles: tuple[float, ...] = PERCENTILES,
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


def scenario_digest(scenario: Any) -> str:
    """SHA-256 (hex) of the validated scenario's settings, file locations excluded: two
    runs with equal digests simulated the same configuration (trace files' contents are
    not hashed)."""
    fields = dataclasses.asdict(scenario)
    fields.pop("base_dir", None)
    fields.pop("source", None)
    fields.pop("overrides", None)  # the input, not the settings: already applied above
    # A setting since removed (it never changed results), hashed at its old default so
    # digests of earlier runs stay valid.
    fields["event_skipping"] = True
    # Sections added later are hashed only when set, so older digests stay valid.
    from sim.config.faults import FaultsConfig
    from sim.policies.admission import AdmissionConfig

    for key, default in (("admission", AdmissionConfig()), ("faults", FaultsConfig())):
        if fields.get(key) == dataclasses.asdict(default):
            fields.pop(key)
    if fields["serving"].get("speculative", 0) is None:
        fields["serving"].pop("speculative")
    fields["model"] = recorded_fields(scenario.model)  # later fields: hashed only when set
    for section, key in (("workload", "concurrency"), ("workload", "think_time_s"),
                         ("workload", "stages"), ("serving", "kv_offload"),
                         ("serving", "async_scheduling"), ("hardware", "host_memory_gb")):
        if fields[section].get(key) is None:
            fields[section].pop(key, None)
    # Keys added later, hashed only when they differ from their old, implicit value.
    for section, key, unset in (("serving", "long_prefill_token_threshold", 0),
                                ("serving", "max_num_partial_prefills", 1),
                                ("serving", "batch_wait_timeout_iters", 0),
                                ("serving", "batch_wait_max_tokens_ratio", 0.0),
                                ("serving", "scheduler_recv_interval", 1),
                                ("serving", "stream_interval", 1),
                                ("serving", "stream_first_token", True),
                                ("hardware", "pp", 1), ("hardware", "ep", 1),
                                ("hardware", "ep_imbalance", 1.0), ("hardware", "dp", 1)):
        if fields[section].get(key) == unset:
            fields[section].pop(key)
    for role in ("prefill", "decode"):
        pool = fields["disaggregated"][role]
        if pool.get("watermark") is None:
            pool.pop("watermark", None)  # a pool key added later: hashed only when set
    trace = fields["workload"].get("trace")
    if isinstance(trace, dict) and trace.get("start_row") == 0:
        trace.pop("start_row")  # replaying from the first row, as before the key existed
    if isinstance(trace, dict) and trace.get("prefix_block_tokens") is None:
        trace.pop("prefix_block_tokens", None)  # the format's own, as before the key
    for params in fields["cost"].values():
        if isinstance(params, dict) and params.get("frontend") == dataclasses.asdict(
                NO_FRONTEND):
            params.pop("frontend")
    blob = json.dumps(fields, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


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
    return {"faults": {
        "outages": len(overlap),
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


def _prefix_summary(res: RunResult) -> dict[str, Any]:
    """Prefix-cache figures (tokens), present only when the scenario enables caching."""
    if not res.scenario.serving.prefix_caching:
        return {}
    stats = res.replica_stats
    query = sum(s.prefix_query_tokens for s in stats)
    hit = sum(s.prefix_hit_tokens for s in stats)
    return {"prefix_cache": {
        "prefill_tokens": query,
        "hit_tokens": hit,
        "hit_rate": hit / query if query else None,
        "evictions": sum(s.prefix_evictions for s in stats),
    }}


def _tier_summary(res: RunResult) -> dict[str, Any]:
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
                 "stored_gib_per_gpu": sum(gib(s.host_stored, s) for s in stats),
                 "loaded_gib_per_gpu": sum(gib(s.host_loaded, s) for s in stats),
                 "dropped_entries": sum(s.host_dropped for s in stats)},
        "transfer_s": sum(s.host_io_s for s in stats),
    }}


def _spec_summary(res: RunResult) -> dict[str, Any]:
    """Speculative decoding (present only when the scenario sets it): the setting, the
    expected tokens per verify its acceptance gives, and the run's verifies (one per
    sequence and iteration) with the tokens they emitted and their mean, capped where a
    request's output ran out."""
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
    return {"speculative": {
        **spec.describe(),
        "draft_cost": ("none (n-gram lookup)" if drafter is None else source or
                       f"{spec.num_tokens} roofline decode steps of {drafter.name} a verify"),
        "verifies": verifies,
        "verify_tokens": tokens,
        "mean_tokens_per_verify": tokens / verifies if verifies else None,
    }}


def _setup_summary(res: RunResult) -> dict[str, Any]:
    """``workload`` for a closed loop (clients, think time in s, requests sent and not
    sent) and ``frontend`` (seconds) when the cost model prices one; empty otherwise."""
    out: dict[str, Any] = {}
    c = res.clients
    if c is not None:
        out["workload"] = {"kind": "closed_loop", "concurrency": c.concurrency,
                           "think_time_s": c.think_time_s, "requests_sent": c.sent,
                           "requests_not_sent": c.not_sent}
    if res.frontend.active:
        out["frontend"] = {k: getattr(res.frontend, k) for k in FRONTEND_COEFS}
    return out


# A mixture of experts adds these (a dense model's summary has none of them).
MOE_KEYS = ("experts", "experts_per_token", "expert_intermediate", "shared_experts",
            "dense_layers")
# Latent attention (DeepSeek-V2/V3) adds these.
MLA_KEYS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
MODEL_KEYS = ("name", "dtype", "kv_dtype", "layers", "hidden", "heads", "kv_heads", "head_dim",
              "intermediate", "vocab", "max_context")


def package_version() -> str:
    """servesim's installed version (package metadata), or ``unknown`` when not installed."""
    from importlib import metadata

    try:
        return metadata.version("servesim")
    except metadata.PackageNotFoundError:
        return "unknown"


def simulated(res: RunResult) -> dict[str, Any]:
    """The ``simulated`` section of the summary: what was run, resolved — the scenario
    file as given, its digest and ``--set`` overrides, the model's dimensions and
    dtypes, each pool's GPU, tp, replicas and serving limits (with its KV blocks per
    replica), where the prices come from, the workload seed and servesim's version.
    Nothing in it depends on the machine or the time of the run."""
    blocks = [s.kv_total for s in res.replica_stats]
    return describe_scenario(res.scenario, res.cost_source, blocks)


def describe_scenario(sc: Scenario, cost_source: str,
                      kv_blocks: list[int] | None = None) -> dict[str, Any]:
    """What :func:`simulated` says of a validated scenario ``sc`` before (or without) a
    run: ``kv_blocks`` (each replica's KV blocks, in pool order) is known only after
    one, and its per-pool entry is left out when None."""
    from sim.config.disagg import pools

    per_pool: dict[str, Any] = {}
    start = 0
    for pool in pools(sc):
        sv = pool.serving
        per_pool[pool.role] = {
            "gpu": pool.gpu, "tp": pool.tp, **({"pp": pool.pp} if pool.pp > 1 else {}),
            **({"ep": pool.ep} if pool.ep > 1 else {}),
            **({"dp": pool.dp} if pool.dp > 1 else {}),
            "replicas": pool.replicas, "router": pool.router,
            "policy": sv.policy, "max_num_seqs": sv.max_num_seqs,
            "max_num_batched_tokens": sv.max_num_batched_tokens,
            "token_budget": sv.chunk_budget if sv.policy == "chunked" else sv.token_budget,
            "long_prefill_token_threshold": sv.long_prefill_token_threshold,
            "block_size": sv.block_size, "watermark": sv.kv_watermark,
            **({"stream_interval": sv.stream_interval} if sv.stream_interval > 1 else {}),
            **_serving_features(sv),
        }
        if kv_blocks is not None:
            # A data-parallel replica's ranks each keep their own blocks: one entry a rank.
            ranks = pool.replicas * pool.dp
            per_pool[pool.role]["kv_blocks_per_replica"] = kv_blocks[start:start + ranks]
        start += pool.replicas * pool.dp
    return {
        "file": sc.source,
        "sha256": scenario_digest(sc),
        "overrides": list(sc.overrides),
        "servesim_version": package_version(),
        "model": {k: getattr(sc.model, k) for k in MODEL_KEYS + (MOE_KEYS if sc.model.experts
                                                                  else ())
                  + (MLA_KEYS if sc.model.mla else ())
                  + (SPARSE_FIELDS if sc.model.sparse else ())},
        "policy": sc.serving.policy,
        "pools": per_pool,
        "cost_source": cost_source,
        "seed": sc.workload.seed,
        "horizon_s": sc.horizon_s,
        # Sections that change what is simulated, present only when set.
        **({"admission": admission} if (admission := _set_fields(sc.admission)) else {}),
        **({"faults": clean(_plain(sc.faults))} if sc.faults.active else {}),
    }


def _set_fields(cfg: Any) -> dict[str, Any]:
    """A config dataclass's fields that differ from its defaults (JSON-ready)."""
    default = type(cfg)()
    return {f.name: clean(_plain(getattr(cfg, f.name))) for f in dataclasses.fields(cfg)
            if getattr(cfg, f.name) != getattr(default, f.name)}


def _plain(value: Any) -> Any:
    """Dataclasses and tuples as plain mappings and lists, for JSON."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _serving_features(sv: Any) -> dict[str, Any]:
    """The serving features a pool runs with beyond plain batching, only those set:
    speculative decoding, prefix caching, swap preemption, priority admission, a host
    KV tier, SGLang's receive interval."""
    out: dict[str, Any] = {}
    if sv.speculative is not None:
        spec = {k: v for k, v in _plain(sv.speculative).items()
                if v is not None and v != {}}
        spec["acceptance"] = {k: v for k, v in spec["acceptance"].items() if v is not None}
        out["speculative"] = spec
    if sv.prefix_caching:
        out["prefix_caching"] = True
    if sv.preemption != "recompute":
        out["preemption"] = sv.preemption
    if sv.priority:
        out["priority"] = True
    if sv.kv_offload is not None:
        out["kv_offload"] = _plain(sv.kv_offload)
    if sv.scheduler_recv_interval > 1:
        out["scheduler_recv_interval"] = sv.scheduler_recv_interval
    return out


def summarize(res: RunResult, percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, Any]:
    """The run's summary as plain JSON-ready values (seconds, tokens, requests); a mixed
    workload adds ``classes`` (:func:`class_summaries`), a closed loop ``workload`` and
    a priced frontend ``frontend`` (:func:`_setup_summary`); ``simulated``
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
        **_setup_summary(res),
        "requests": {
            "total": n,
            **status_counts(status),
            "rejected_by_reason": dict(sorted(reasons.items())),
        },
        "workload_notes": list(res.requests.notes),
        "span_s": span,
        "latency_s": {
            "ttft": distribution(lat["ttft"], percentiles),
            "tpot": distribution(lat["tpot"], percentiles),
            "itl": _itl_distribution(res, percentiles),
            "e2e": distribution(lat["e2e"], percentiles),
            "queueing": distribution(lat["queueing"], percentiles),
        },
        "itl_relative_accuracy": res.itl.rel_accuracy,
        "throughput": {
            "requests_per_s": rate(float(finished.sum())),
            "output_tokens_per_s": rate(float(out_tokens)),
            "goodput_requests_per_s": rate(float(good.sum())),
            "slo_attainment": float(good.sum() / arrived) if arrived else None,
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
        # Per pool: one GPU's memory terms (GiB) and each replica's KV blocks and tokens.
        **({"memory": res.memory} if res.memory else {}),
        "preemptions": int(res.preemptions.sum()),
        **_prefix_summary(res),
        **_tier_summary(res),
        **_spec_summary(res),
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


def clean(value: Any) -> Any:
    """``value`` with NaN and infinities replaced by None, recursively (for strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value
