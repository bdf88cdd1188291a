"""Numbers of docs/models.md, "Data-parallel attention": one node of GPUs laid out as
tensor parallelism, expert parallelism inside tp, or data-parallel attention ranks.

Re-run from the repository root:  .venv/bin/python docs/scripts/dp_attention.py
It prints one markdown table per model: each layout's KV capacity and, under a
closed loop of clients (vLLM v1's scheduler, async scheduling, the shipped measured
profiles of vLLM 0.24.0), its mean TTFT, mean TPOT and output tokens a second.
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

# (model, GPU, GPUs, clients, layouts as (label, hardware keys)); every layout has a
# shipped profile (sim/cost/measured.py: SHIPPED_EP, SHIPPED_DP).
SETUPS = (
    ("qwen3-30b-a3b", "h100-sxm", 4, (16, 64, 256), (
        ("tp 4", {"tp": 4}),
        ("dp 4, ep 4", {"tp": 1, "dp": 4, "ep": 4}))),
    ("qwen3-235b-a22b", "h200", 8, (16, 64, 256), (
        ("tp 8", {"tp": 8}),
        ("tp 8, ep 8", {"tp": 8, "ep": 8}),
        ("dp 8, ep 8", {"tp": 1, "dp": 8, "ep": 8}))),
    ("deepseek-v3", "h200", 8, (16, 64, 256), (
        ("tp 8", {"tp": 8}),
        ("dp 8, ep 8", {"tp": 1, "dp": 8, "ep": 8}))),
)
PROMPT, OUTPUT = 2048, 512


def run(model: str, gpu: str, hardware: dict[str, int], clients: int) -> dict[str, Any]:
    """The summary of ``clients`` closed-loop clients, each sending 8 requests."""
    raw = {"model": model, "cost": "measured", "hardware": {"gpu": gpu, **hardware},
           "vllm": {},
           "workload": {"concurrency": clients, "num_requests": 8 * clients, "seed": 1,
                        "lengths": {"prompt": {"dist": "fixed", "value": PROMPT},
                                    "output": {"dist": "fixed", "value": OUTPUT}}}}
    return summarize(simulate(from_dict(raw, "<dp_attention.py>")))


def main() -> None:
    for model, gpu, gpus, loads, layouts in SETUPS:
        print(f"\n{model} on {gpus} {gpu}, {PROMPT}-token prompts, {OUTPUT} outputs:\n")
        print("| layout | KV tokens (all GPUs) | clients | TTFT mean ms | TPOT mean ms "
              "| output tok/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, hw in layouts:
            for n in loads:
                s = run(model, gpu, hw, n)
                kv = s["memory"]["both"]
                ranks = s.get("data_parallel_ranks", s["replicas"])
                lat = s["latency_s"]
                print(f"| {label} | {kv['kv_tokens'] * ranks:,} | {n} "
                      f"| {lat['ttft']['mean'] * 1e3:.1f} | {lat['tpot']['mean'] * 1e3:.2f} "
                      f"| {s['throughput']['output_tokens_per_s']:,.0f} |")


if __name__ == "__main__":
    main()
