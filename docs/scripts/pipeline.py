"""Numbers of docs/policies.md, "Pipeline parallelism": the same GPUs as tensor- or
pipeline-parallel replicas.

Re-run from the repository root:  .venv/bin/python docs/scripts/pipeline.py
Every price comes from the shipped measured profiles (vLLM 0.24.0 kernel tables on
H100-SXM) for the replica's tp; a pipeline prices each stage from them
(sim/cost/pipeline.py). Policy chunked (vLLM V1), its default limits and vLLM's default
async scheduling, which pipeline stages run without; rows marked synchronous turn it off
for a like-for-like comparison.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config.scenario import from_dict  # noqa: E402
from sim.core.engine import simulate  # noqa: E402
from sim.report.summary import summarize  # noqa: E402


def scenario(model: str, tp: int, pp: int, replicas: int, workload: dict[str, Any],
             sync: bool = False) -> Any:
    """``replicas`` of ``tp × pp`` H100s serving ``model``, chunked, measured prices;
    ``sync``: without async scheduling, as pipeline stages run (default: vLLM's own)."""
    serving: dict[str, Any] = {"policy": "chunked"}
    if sync:
        serving["async_scheduling"] = False
    return from_dict({"model": model, "hardware": {"gpu": "h100-sxm", "tp": tp, "pp": pp},
                      "cost": "measured", "serving": serving,
                      "cluster": {"replicas": replicas}, "workload": workload,
                      "slo": {"ttft_s": 0.5, "tpot_s": 0.05}}, "<docs>", ROOT)


def row(label: str, sc: Any) -> str:
    """One table row: GPUs, KV tokens per replica, latencies (ms), throughput."""
    s = summarize(simulate(sc))
    kv = s["simulated"]["pools"]["both"]["kv_blocks_per_replica"][0] * 16
    lat = s["latency_s"]

    def ms(metric: str, q: str) -> str:
        return f"{lat[metric][q] * 1e3:,.1f}"

    return (f"| {label} | {s['gpus']} | {kv:,} | {ms('ttft', 'p50')} | {ms('ttft', 'p99')} | "
            f"{ms('tpot', 'p50')} | {ms('tpot', 'p99')} | "
            f"{s['throughput']['output_tokens_per_s']:,.0f} | "
            f"{s['throughput']['goodput_requests_per_s']:.2f} |")


def main() -> None:
    head = ("| layout | GPUs | KV tokens per replica | TTFT p50 | TTFT p99 | TPOT p50 | "
            "TPOT p99 | output tok/s | goodput req/s |\n|---|---:|---:|---:|---:|---:|---:|"
            "---:|---:|")
    trace = {"trace": {"path": "azure_2023_conv", "time_scale": 0.5}, "duration_s": 300,
             "seed": 0}
    print("Llama-3-70B, 8 H100s, Azure conversation trace at twice its rate (300 s):\n")
    print(head)
    for tp, pp in ((8, 1), (4, 2), (2, 4)):
        print(row(f"tp {tp} x pp {pp}", scenario("llama-3-70b", tp, pp, 1, trace)))
    print(row("tp 8 x pp 1, synchronous", scenario("llama-3-70b", 8, 1, 1, trace, sync=True)))
    burst = {"arrivals": {"process": "poisson", "rate": 1e6},
             "lengths": {"prompt": {"dist": "fixed", "value": 512},
                         "output": {"dist": "fixed", "value": 256}},
             "num_requests": 2000, "seed": 0}
    print("\nSaturated: 2,000 requests (prompt 512, output 256) at once:\n")
    print(head)
    for label, model, tp, pp, reps in (("Llama-3-70B tp 8 x pp 1", "llama-3-70b", 8, 1, 1),
                                        ("Llama-3-70B tp 4 x pp 2", "llama-3-70b", 4, 2, 1),
                                        ("Llama-3-70B tp 4, 2 replicas", "llama-3-70b", 4, 1, 2),
                                        ("Llama-3-8B tp 1 x pp 1", "llama-3-8b", 1, 1, 1),
                                        ("Llama-3-8B tp 1 x pp 2", "llama-3-8b", 1, 2, 1),
                                        ("Llama-3-8B tp 2 x pp 1", "llama-3-8b", 2, 1, 1)):
        print(row(label, scenario(model, tp, pp, reps, burst)))
    for label, model, tp in (("Llama-3-70B tp 8 x pp 1, synchronous", "llama-3-70b", 8),
                             ("Llama-3-8B tp 2 x pp 1, synchronous", "llama-3-8b", 2)):
        print(row(label, scenario(model, tp, 1, 1, burst, sync=True)))


if __name__ == "__main__":
    main()
