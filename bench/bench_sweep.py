"""Benchmark sweeps: wall time of a 20-point sweep of 10,000-request simulations.

Usage::

    .venv/bin/python bench/bench_sweep.py [--workers 1,2] [--requests 10000] [--rates 1:20:1]

Scenario: scenarios/capacity-llama8b.yaml (Llama-3-8B, one H100, measured profile, Poisson
arrivals, Azure 2023 conversation lengths), one seed, plots included. For each worker
count the sweep runs into a fresh temporary folder (nothing cached), then once more into
the same folder to time a fully cached resume. Prints one table row per worker count:
points, simulated requests, wall seconds, simulated requests per wall-second, resume
seconds, and whether the CSV is byte-identical to the first worker count's.
The bar: 20 points of 10,000 requests in under 60 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.study.studyargs import parse_ints, parse_rates  # noqa: E402
from sim.study.sweep import SweepSpec, run_sweep  # noqa: E402
from sim.study.sweeppoint import read_raw  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", default="1,2", help="comma list of worker counts")
    p.add_argument("--requests", type=int, default=10_000, help="requests per simulation")
    p.add_argument("--rates", default="1:20:1", help="rates (req/s), START:STOP:STEP")
    p.add_argument("--scenario", default=str(ROOT / "scenarios" / "capacity-llama8b.yaml"))
    a = p.parse_args()
    scen = Path(a.scenario)
    raw = read_raw(scen, [f"workload.num_requests={a.requests}"])
    rates = parse_rates(a.rates)
    print(f"scenario {scen.name}: {len(rates)} points x {a.requests} requests, 1 seed")
    print(f"{'workers':>8}{'points':>8}{'requests':>10}{'wall s':>9}{'req/s wall':>12}"
          f"{'resume s':>10}  same CSV")
    first: bytes | None = None
    for w in parse_ints(a.workers, "--workers"):
        spec = SweepSpec(raw, str(scen), scen.parent.resolve(), rates, ["continuous"], [1], [1],
                         [0])
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            t0 = time.perf_counter()
            res = run_sweep(spec, out, workers=w)
            wall = time.perf_counter() - t0
            t0 = time.perf_counter()
            again = run_sweep(spec, out, workers=w)
            resume = time.perf_counter() - t0
            assert again.stats.computed == 0
            csv = (out / "sweep.csv").read_bytes()
        first = csv if first is None else first
        n = int(sum(r["finished"] + r["unfinished"] + r["rejected"] for r in res.points))
        print(f"{w:>8}{len(res.points):>8}{n:>10}{wall:>9.1f}{n / wall:>12.0f}{resume:>10.2f}"
              f"  {'yes' if csv == first else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
