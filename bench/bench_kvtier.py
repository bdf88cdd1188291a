"""What a host KV tier costs the simulator: scenarios/host-kv-tier.yaml (prefix-heavy,
hundreds of thousands of evictions) with the GPU's cache only, with the tier, and with
the tier written through (as vLLM's CPU offloading connector keeps it).

Usage: python bench/bench_kvtier.py [--requests 1500] [--repeats 3]
Prints a Markdown table: median wall seconds over the repeats (cases interleaved, so
load on the machine falls on both alike), simulated requests per wall-second, prefix
evictions, and the tier's wall time over the GPU-only run's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sim.config.scenario import load  # noqa: E402
from sim.core.engine import simulate  # noqa: E402

CASES = (("GPU only", ["serving.kv_offload=null"]), ("256 GiB host tier", []),
         ("256 GiB, written through", ["serving.kv_offload.write_policy=write_through",
                                       "serving.kv_offload.overlap=true"]))


def main() -> None:
    """Run the cases and print the table."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=1500)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    walls: dict[str, list[float]] = {name: [] for name, _ in CASES}
    evictions: dict[str, int] = {}
    for _ in range(args.repeats):
        for name, sets in CASES:
            sc = load(ROOT / "scenarios" / "host-kv-tier.yaml",
                      [*sets, f"workload.num_requests={args.requests}"])
            t0 = time.perf_counter()
            res = simulate(sc)
            walls[name].append(time.perf_counter() - t0)
            evictions[name] = sum(s.prefix_evictions for s in res.replica_stats)
    base = statistics.median(walls[CASES[0][0]])
    print("| case | requests | wall s (median) | sim req/s | prefix evictions | wall ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, _ in CASES:
        wall = statistics.median(walls[name])
        print(f"| {name} | {args.requests:,} | {wall:.2f} | {args.requests / wall:,.0f} | "
              f"{evictions[name]:,} | {wall / base:.2f} |")


if __name__ == "__main__":
    main()
