"""Peak memory of `servesim simulate` against requests and replicas: the figures behind
the estimate a run makes before it starts (sim/core/budget.py).

Each case runs the whole command (load, simulate, requests.csv and summary.json; no
plots) in a fresh child process and reads its peak RSS (``ru_maxrss``). The request cases
are the worst case for memory: one replica offered ten times what it serves, so nearly
every request waits in the queue at once. The replica cases send a few requests to many
replicas. A least-squares line through each set gives bytes per request and per replica.

    .venv/bin/python bench/bench_memory.py [--sizes 25000,100000,400000]
        [--replicas 1,1000,4000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]


def scenario(n: int, replicas: int) -> dict:
    """Llama-3-8B on H100 with the roofline; ``n`` requests at 150 req/s (about ten times
    one replica's capacity) over ``replicas`` replicas."""
    return {
        "name": "bench-memory", "model": "llama-3-8b", "cost": "roofline",
        "serving": {"policy": "continuous"}, "cluster": {"replicas": replicas},
        "workload": {"arrivals": {"process": "poisson", "rate": 150.0},
                     "lengths": {"empirical": "azure_2023_conv"},
                     "num_requests": n, "seed": 0},
    }


def peak(raw: dict, tmp: Path) -> tuple[float, float]:
    """(peak RSS in bytes, wall seconds) of one simulate run in a child process."""
    f = tmp / "s.yaml"
    f.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "simulate", str(f), "--out",
                             str(tmp / "o"), "--no-plots", "--quiet", "--force",
                             "--allow-rejections"], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"case failed: {raw['workload']['num_requests']} requests")
    return usage.ru_maxrss * 1024.0, wall


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line."""
    slope, icept = np.polyfit(np.asarray(xs), np.asarray(ys), 1)
    return float(icept), float(slope)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="25000,100000,400000")
    ap.add_argument("--replicas", default="1,1000,4000")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    reps = [int(x) for x in a.replicas.split(",")]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("| case | requests | replicas | peak RSS MiB | wall s | sim req/s |")
        print("|---|---:|---:|---:|---:|---:|")
        rss = []
        for n in sizes:
            b, w = peak(scenario(n, 1), tmp)
            rss.append(b)
            print(f"| overload | {n:,} | 1 | {b / 2**20:.0f} | {w:.2f} | {n / w:,.0f} |")
        rrss = []
        for r in reps:
            b, w = peak(scenario(100, r), tmp)
            rrss.append(b)
            print(f"| replicas | 100 | {r:,} | {b / 2**20:.0f} | {w:.2f} | |")
    i0, per_req = fit([float(n) for n in sizes], rss)
    i1, per_rep = fit([float(r) for r in reps], rrss)
    print(f"\nfit: {i0 / 2**20:.1f} MiB + {per_req:.0f} B per request; "
          f"{i1 / 2**20:.1f} MiB + {per_rep:.0f} B per replica")


if __name__ == "__main__":
    main()
