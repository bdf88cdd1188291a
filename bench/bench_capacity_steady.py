"""Are capacity answers stable? The documented capacity examples at their own size and
with ten times the requests, measured in steady state (the default).

Usage::

    .venv/bin/python bench/bench_capacity_steady.py [--workers 2] [--only NAME]

For each example it runs ``servesim capacity`` twice, fresh caches, once as the docs
give it and once with ``workload.num_requests`` ten times larger, and prints the GPUs
of the cheapest configuration, each candidate's maximum rate per replica with its
interval, the simulations run, the requests the points used and the wall time. The
answers (not the times) are what docs/capacity.md quotes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.cli import main as cli_main  # noqa: E402
from sim.study.sweep import read_csv  # noqa: E402

#: name -> (scenario, its documented num_requests, capacity flags)
EXAMPLES: dict[str, tuple[str, int, list[str]]] = {
    "llama8b": ("capacity-llama8b.yaml", 2000,
                ["--slo", "ttft_p99=0.5", "--slo", "tpot_p99=0.05", "--tp", "1,2",
                 "--seeds", "3", "--target-rate", "60", "--gpu-cost-per-hour", "2.5"]),
    "md1": ("capacity-md1.yaml", 4000,
            ["--slo", "ttft_mean=0.05", "--seeds", "5", "--target-rate", "100"]),
}


def run(name: str, scale: int, workers: int) -> str:
    """One capacity run of example ``name`` at ``scale`` x its requests: a result line."""
    scenario, n, flags = EXAMPLES[name]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cap"
        argv = ["capacity", str(ROOT / "scenarios" / scenario), *flags, "--out", str(out),
                "--workers", str(workers), "--no-plots", "--quiet",
                "--set", f"workload.num_requests={n * scale}"]
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            rc = cli_main(argv)
        wall = time.perf_counter() - t0
        if rc != 0:
            return f"{name:<8} x{scale:<3} failed (exit {rc})"
        blob = json.loads((out / "capacity.json").read_text())
        search = read_csv(out / "search.csv")
    best = blob["best"]
    gpus = "none" if best is None else f"{best['replicas']}x tp{best['tp']} = {best['gpus']}"
    rates = "; ".join(
        f"tp{m['tp']} {m['max_rate_per_replica']:.2f}"
        + (f" [{m['ci_low']:.2f}, {m['ci_high']:.2f}]" if m["ci_low"] is not None else "")
        for m in blob["max_rate_per_replica"])
    used = sorted(int(r["requests_used"]) for r in search if r.get("requests_used"))
    span = f"{used[0]}-{used[-1]} (median {used[len(used) // 2]})" if used else "-"
    return (f"{name:<8} x{scale:<3} GPUs {gpus:<14} max/replica {rates}; "
            f"{len(search)} simulations, requests per point {span}; {wall:.0f} s")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", choices=sorted(EXAMPLES), default=None)
    a = p.parse_args()
    for name in [a.only] if a.only else list(EXAMPLES):
        for scale in (1, 10):
            print(run(name, scale, a.workers), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
