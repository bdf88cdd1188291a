"""What each CSV holds, in a JSON file beside it: its columns with their units, and the
resolved scenario that produced it.

A CSV stays plain (one header line, then rows: pandas, numpy and spreadsheets read it
as is); ``NAME.csv.meta.json`` next to it says what one row is, each column's unit and
meaning, and the ``simulated`` description (model, GPUs, tp, serving limits, cost
source, seed, overrides, file, digest, servesim version), plus what a study varied
(policies, replicas, tp, rates, seeds).

One unit convention holds in every CSV servesim writes: times and latencies in
**seconds**, in columns whose names end in ``_s`` (a confidence half-width of one in
``_ci_s``); request rates in requests per second (``_rps``), token rates in tokens per
second (``_tps``); tokens and requests as counts; fractions between 0 and 1.
:func:`csv_header` gives a study's internal column name its unit-carrying CSV name and
:func:`internal_name` takes it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.report.metrics import clean
from sim.report.slospec import METRICS, STATS

UNITS = ("times and latencies in seconds (columns ending _s; _ci_s: half-width of the "
         "95% confidence interval over seeds, in seconds); request rates in requests/s "
         "(_rps); token rates in tokens/s (_tps); tokens and requests are counts; "
         "fractions are between 0 and 1; an empty cell is a value that does not exist")

METRIC_WORDS = {"ttft": "time to first token", "tpot": "time per output token after the "
                "first", "itl": "inter-token latency", "e2e": "end-to-end latency",
                "queueing": "queueing delay before first scheduled"}
STAT_WORDS = {"p50": "median", "p90": "90th percentile", "p95": "95th percentile",
              "p99": "99th percentile", "mean": "mean", "max": "maximum"}
LATENCY = {f"{m}_{s}" for m in METRICS for s in STATS}
# Study columns whose internal name does not carry its unit, and the CSV name that does.
RENAMED = {"rate": "rate_rps", "max_rate_per_replica": "max_rate_per_replica_rps",
           "ci_low": "ci_low_rps", "ci_high": "ci_high_rps", "per_seed": "per_seed_rps"}
_BACK = {v: k for k, v in RENAMED.items()}

# (unit, meaning) of the columns whose name alone does not say enough.
COLUMNS: dict[str, tuple[str, str]] = {
    "id": ("", "request id, 0-based, in arrival order"),
    "arrival_s": ("s", "when the client sent the request, on the run's clock"),
    "prompt_tokens": ("tokens", "prompt length"),
    "output_tokens": ("tokens", "output length asked for"),
    "first_scheduled_s": ("s", "when a replica first scheduled the request"),
    "first_token_s": ("s", "when its first output token was produced"),
    "finish_s": ("s", "when its last output token was produced"),
    "ttft_s": ("s", "time to first token: first_token_s - arrival_s"),
    "tpot_s": ("s", "time per output token after the first: (finish_s - first_token_s) / "
               "(output_tokens - 1); empty below 2 output tokens"),
    "e2e_s": ("s", "end-to-end latency: finish_s - arrival_s"),
    "preemptions": ("count", "times the request was preempted"),
    "replica": ("", "index of the replica that served it (empty: none did)"),
    "status": ("", "finished, rejected, unfinished, timed_out, failed or not_arrived"),
    "reason": ("", "why it was rejected, timed out or failed"),
    "class": ("", "workload class (empty without classes)"),
    "policy": ("", "batching policy"),
    "replicas": ("count", "replicas in the cluster"),
    "tp": ("count", "tensor-parallel GPUs per replica"),
    "pp": ("count", "pipeline stages per replica (each of tp GPUs)"),
    "gpus": ("count", "GPUs the cluster uses (replicas x tp x pp over its pools)"),
    "seed": ("", "workload seed of this simulation"),
    "seeds": ("count", "simulations (seeds) averaged in the row"),
    "rate_rps": ("req/s", "request rate offered to the whole cluster"),
    "finished": ("count", "requests finished"),
    "rejected": ("count", "requests rejected"),
    "unfinished": ("count", "requests still in service when the run ended"),
    "timed_out": ("count", "requests whose clients gave up waiting (admission.timeout_s)"),
    "failed": ("count", "requests lost to a replica fault and not retried"),
    "throughput_rps": ("req/s", "requests finished per second of the run"),
    "output_tps": ("tok/s", "output tokens per second of the run"),
    "output_tps_per_gpu": ("tok/s", "output tokens per second of the run over its GPUs "
                                    "(every pool's)"),
    "goodput_rps": ("req/s", "requests finished within the scenario's per-request SLO, "
                    "per second"),
    "slo_attainment": ("fraction", "share of arrived requests within the per-request SLO"),
    "offered_rps": ("req/s", "rate offered as simulated: (arrivals - 1) / their span"),
    "throughput_ratio": ("fraction", "throughput_rps / offered_rps"),
    "queue_growth_s": ("s", "mean queueing delay of the last quarter of arrivals minus "
                       "that of the second"),
    "busy_fraction": ("fraction", "share of the run the replicas spent in iterations"),
    "kv_peak_utilization": ("fraction", "peak share of KV blocks in use"),
    "span_s": ("s", "first arrival to last finish (or the horizon)"),
    "saturated": ("0/1", "1 when the queue kept growing (load beyond capacity); in a "
                  "mean over seeds, the share of seeds saturated"),
    "pass": ("0/1", "1 when the point is unsaturated and meets every --slo target"),
    "requests_used": ("requests", "requests the point simulated once its precision rule "
                      "stopped it (steady-state measurement)"),
    "discarded_requests": ("requests", "warm-up and drain requests left out of its "
                           "statistics"),
    "rel_halfwidth": ("", "largest relative half-width of the 95% batch-means interval of "
                      "the statistics its SLOs name"),
    "passed": ("0/1", "1 when the configuration meets every --slo target at the target "
               "rate on every seed"),
    "max_rate_per_replica_rps": ("req/s", "highest rate one replica sustains within the "
                                 "SLOs, mean over seeds"),
    "ci_low_rps": ("req/s", "lower end of its 95% confidence interval over seeds"),
    "ci_high_rps": ("req/s", "upper end of its 95% confidence interval over seeds"),
    "per_seed_rps": ("req/s", "each seed's highest passing rate, space-separated"),
    "kv_tokens_per_replica": ("tokens", "tokens one replica's KV cache holds (its decode "
                              "pool's when prefill and decode are split), as its memory "
                              "sizes it (capacity.json's memory has every term); for a "
                              "sliding-window model, tokens of its full-attention layers, "
                              "each request's window pages coming out of the same blocks"),
    "gpu_hours_per_mtok": ("GPU-h", "GPU-hours per million output tokens"),
    "usd_per_mtok": ("$", "dollars per million output tokens at --gpu-cost-per-hour"),
}


def csv_header(name: str) -> str:
    """The CSV column name of a study's internal column: latency statistics gain ``_s``
    (``ttft_p99`` -> ``ttft_p99_s``, ``ttft_p99_ci`` -> ``ttft_p99_ci_s``) and rates
    ``_rps``; names that already carry their unit stay."""
    if name in LATENCY or (name.endswith("_ci") and name[:-3] in LATENCY):
        return f"{name}_s"
    return RENAMED.get(name, name)


def internal_name(header: str) -> str:
    """The inverse of :func:`csv_header`."""
    if header.endswith("_s") and (header[:-2] in LATENCY or (
            header.endswith("_ci_s") and header[:-5] in LATENCY)):
        return header[:-2]
    return _BACK.get(header, header)


def describe_column(name: str) -> dict[str, str]:
    """``{"name", "unit", "meaning"}`` of a CSV column (by its CSV name)."""
    if name in COLUMNS:
        unit, meaning = COLUMNS[name]
        return {"name": name, "unit": unit, "meaning": meaning}
    base = internal_name(name)
    ci = base.endswith("_ci")
    base = base[:-3] if ci else base
    if base in LATENCY:
        metric, stat = base.split("_")
        what = f"{STAT_WORDS[stat]} {METRIC_WORDS[metric]}"
    elif f"{csv_header(base)}" in COLUMNS:
        what = COLUMNS[csv_header(base)][1]
    else:
        what = ""
    unit = ("s" if name.endswith("_s") else "req/s" if "_rps" in name
            else "tok/s" if "_tps" in name else "")
    if ci:
        what = f"half-width of the 95% confidence interval over seeds of: {what}"
    return {"name": name, "unit": unit, "meaning": what}


def meta_path(csv_path: Path) -> Path:
    """Where the description of ``csv_path`` lies: ``NAME.csv.meta.json`` beside it."""
    return csv_path.with_name(f"{csv_path.name}.meta.json")


def meta_json(csv_path: Path, rows: str, columns: list[str], simulated: dict[str, Any],
              varied: dict[str, Any] | None = None) -> bytes:
    """The description of the CSV at ``csv_path`` (its CSV column names ``columns``; one
    row is ``rows``) as stable JSON."""
    blob: dict[str, Any] = {
        "file": csv_path.name,
        "rows": rows,
        "units": UNITS,
        "columns": [describe_column(c) for c in columns],
        "simulated": simulated,
    }
    if varied:
        blob["varied"] = varied
    return (json.dumps(clean(blob), indent=2, allow_nan=False) + "\n").encode()
