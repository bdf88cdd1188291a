"""The measured table of docs/scenarios.md's host KV tier: scenarios/host-kv-tier.yaml with
no tier, tiers of two sizes, a tier whose transfers overlap the compute, and tiers
written through as vLLM's own CPU offloading connector and LMCache keep them (the latter
also with the GPU's own prefix cache off).

Re-run from the repository root:  .venv/bin/python docs/scripts/kvtier.py
It prints one Markdown row per case (simulated figures; nothing here is timed).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config.scenario import load  # noqa: E402
from sim.core.engine import simulate  # noqa: E402
from sim.report.summary import summarize  # noqa: E402

NATIVE = ["serving.kv_offload.write_policy=write_through", "serving.kv_offload.overlap=true"]
LMCACHE = ["serving.kv_offload.write_policy=write_through",
           "serving.kv_offload.store_outputs=false"]
CASES = (
    ("GPU only", ["serving.kv_offload=null"]),
    ("64 GiB tier", ["serving.kv_offload.cpu_gb=64"]),
    ("256 GiB tier", []),
    ("256 GiB tier, overlapped", ["serving.kv_offload.overlap=true"]),
    # As the vllm section's flags map them (sim/config/vllmconnector.py): vLLM's own
    # connector copies every full block and loads while the others run (overlapped);
    # LMCache copies prompts alone and loads before the step.
    ("64 GiB, vLLM's connector", ["serving.kv_offload.cpu_gb=64", *NATIVE]),
    ("256 GiB, vLLM's connector", NATIVE),
    ("256 GiB, LMCache", LMCACHE),
    ("256 GiB, LMCache, GPU cache off", [*LMCACHE, "serving.prefix_caching=false"]),
)


def main() -> None:
    """Print the table."""
    print("| case | GPU hit rate | host hit rate | TTFT p50 / p90 / p99 (ms) | TPOT p50 (ms) "
          "| host GiB loaded / stored per GPU | transfer s |")
    print("|---|---:|---:|---|---:|---|---:|")
    for name, sets in CASES:
        s = summarize(simulate(load(ROOT / "scenarios" / "host-kv-tier.yaml", sets)))
        ttft = s["latency_s"]["ttft"]
        tiers = s.get("kv_tiers")
        if tiers is None:
            gpu_rate, host = s["prefix_cache"]["hit_rate"], "–"
            traffic, transfer = "–", "–"
        else:
            gpu_rate, h = tiers["gpu"]["hit_rate"], tiers["host"]
            host = f"{h['hit_rate']:.1%}"
            # One replica: its GPU's figures.
            traffic = f"{h['loaded_gib_per_gpu'][0]:.0f} / {h['stored_gib_per_gpu'][0]:.0f}"
            transfer = f"{tiers['transfer_s']:.1f}"
        print(f"| {name} | {gpu_rate:.1%} | {host} | {ttft['p50'] * 1e3:.1f} / "
              f"{ttft['p90'] * 1e3:.1f} / {ttft['p99'] * 1e3:.1f} | "
              f"{s['latency_s']['tpot']['p50'] * 1e3:.2f} | {traffic} | {transfer} |")


if __name__ == "__main__":
    main()
