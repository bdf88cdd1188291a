"""Numbers of docs/policies.md, "Measured: the shipped Azure conversation trace": every
policy on scenarios/quickstart.yaml, the variants its footnotes name, the TPOT of three
policies as the trace's rate rises, and the figures the prose quotes; and of its
"Streaming in chunks": the quickstart and scenarios/speculative-eagle.yaml at several
stream intervals.

Re-run from the repository root:  .venv/bin/python docs/scripts/quickstart_compare.py
Each run is what ``servesim simulate scenarios/quickstart.yaml --set ...`` (or ``servesim
compare``) gives with the same settings: the shipped measured profile for Llama-3-8B on
one H100 (vLLM 0.24.0's kernel tables and vLLM's fitted priors). About a minute.
"""

from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config.flagaxes import policy_setting  # noqa: E402
from sim.config.overrides import load_raw  # noqa: E402
from sim.config.scenario import load  # noqa: E402
from sim.core.engine import simulate  # noqa: E402
from sim.report.summary import summarize  # noqa: E402

QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def run(*sets: str) -> dict[str, Any]:
    """The summary of the quickstart scenario with ``--set`` overrides ``sets``."""
    return summarize(simulate(load(QUICKSTART, list(sets))))


@lru_cache(maxsize=1)
def quickstart_raw() -> Any:
    """The quickstart scenario's mapping as read, once: every policy's settings derive
    from it."""
    return load_raw(QUICKSTART, [])


def policy(name: str, *sets: str) -> dict[str, Any]:
    """The summary under policy ``name`` as ``servesim compare`` runs it."""
    return run(*policy_setting(quickstart_raw(), name), *sets)


def ms(s: dict[str, Any], metric: str, q: str) -> float:
    """A latency percentile of summary ``s`` in ms."""
    return float(s["latency_s"][metric][q]) * 1e3


def lat(s: dict[str, Any], metric: str, q: str) -> str:
    """A table cell: ms (whole above 1 s), or s above 100 s."""
    v = ms(s, metric, q)
    return f"{v / 1e3:,.0f} s" if v >= 1e5 else f"{v:,.0f}" if v >= 1e3 else f"{v:,.1f}"


def row(label: str, s: dict[str, Any]) -> str:
    """One row of the policy table."""
    cells = [lat(s, m, q) for m, q in (("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"),
                                       ("tpot", "p99"), ("itl", "p99"), ("e2e", "p99"))]
    good = s["throughput"]["goodput_requests_per_s"]
    return (f"| {label} | {s['gpus']} | " + " | ".join(cells) +
            (f" | {good:.3f} |" if good < 0.1 else f" | {good:.1f} |"))


def streaming() -> None:
    """The stream-interval table and the speculative scenario's chunked gaps."""
    print("\n| N | TTFT p50 / p99 | TPOT p50 / p99 | ITL p50 | ITL p99 | ITL max |\n"
          "|---:|---|---|---:|---:|---:|")
    for n in (1, 5, 20):
        s = run(f"serving.stream_interval={n}")
        print(f"| {n} | {lat(s, 'ttft', 'p50')} / {lat(s, 'ttft', 'p99')} | "
              f"{lat(s, 'tpot', 'p50')} / {lat(s, 'tpot', 'p99')} | {lat(s, 'itl', 'p50')} | "
              f"{lat(s, 'itl', 'p99')} | {lat(s, 'itl', 'max')} |")
    eagle = ROOT / "scenarios" / "speculative-eagle.yaml"
    for n in (1, 5):
        s = summarize(simulate(load(eagle, [f"serving.stream_interval={n}"])))
        print(f"speculative-eagle.yaml, N = {n}: ITL p50 / p99 / max "
              f"{ms(s, 'itl', 'p50'):.1f} / {ms(s, 'itl', 'p99'):.1f} / "
              f"{ms(s, 'itl', 'max'):.1f} ms; TTFT p50 {ms(s, 'ttft', 'p50'):.1f}, "
              f"TPOT p50 {ms(s, 'tpot', 'p50'):.2f} ms")


def main() -> None:
    print("| policy | GPUs | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | ITL p99 | E2E p99 | "
          "goodput req/s |\n|---|---|---|---|---|---|---|---|---|")
    runs = {name: policy(name) for name in ("static", "continuous", "orca", "chunked",
                                            "disaggregated")}
    runs["sync"] = policy("chunked", "serving.async_scheduling=false")
    runs["2048"] = policy("chunked", "serving.token_budget=2048")
    runs["2 replicas"] = run("cluster.replicas=2")
    labels = {"chunked": "chunked (vLLM v1: budget 8192)", "sync": "chunked, synchronous³",
              "2048": "chunked, `token_budget` 2048²", "disaggregated": "disaggregated (1+1)",
              "2 replicas": "chunked, 2 replicas¹"}
    for key in ("static", "continuous", "orca", "chunked", "sync", "2048", "disaggregated",
                "2 replicas"):
        print(row(labels.get(key, key), runs[key]))
    print("\npreemptions:", {k: v["preemptions"] for k, v in runs.items()})

    static = policy("static", "serving.max_num_batched_tokens=65536",
                    "workload.duration_s=300")
    sat = static["saturation"]
    print(f"\nstatic, 65,536-token batches, 300 s: "
          f"{static['throughput']['requests_per_s']:.1f} of {sat['offered_rps']:.1f} req/s "
          f"served, TTFT p50 {ms(static, 'ttft', 'p50') / 1e3:.0f} s, "
          f"saturated {sat['saturated']}")
    small = policy("chunked", "serving.token_budget=512")
    print(f"chunked, budget 512: TPOT p99 {ms(small, 'tpot', 'p99'):.1f} ms, "
          f"TTFT p99 {ms(small, 'ttft', 'p99'):.1f} ms")

    print("\n| time_scale (req/s) | continuous | chunked | disaggregated |\n|---|---|---|---|")
    span = float(quickstart_raw()["workload"]["duration_s"])  # arrivals kept, s
    for scale in (1.0, 0.5, 0.35):
        at = {p: policy(p, f"workload.trace.time_scale={scale}")
              for p in ("continuous", "chunked", "disaggregated")}
        rate = at["chunked"]["requests"]["total"] / span
        print(f"| {scale} ({rate:.1f}) | " +
              " | ".join(f"{ms(at[p], 'tpot', 'p99'):.1f}" for p in at) + " |")
        if scale == 0.35:
            sync = policy("chunked", f"workload.trace.time_scale={scale}",
                          "serving.async_scheduling=false")
            for name, s in (*at.items(), ("chunked, synchronous", sync)):
                print(f"  {name}: TTFT p99 {ms(s, 'ttft', 'p99') / 1e3:.2f} s, TPOT p99 "
                      f"{ms(s, 'tpot', 'p99'):.1f} ms, preemptions {s['preemptions']}, "
                      f"saturated {s['saturation']['saturated']}")
    streaming()


if __name__ == "__main__":
    main()
