"""What async scheduling's overlap costs the simulator per step.

The shapes of every step of a quickstart run (Llama-3-8B on one H100, the shipped
measured profile, 900 s of the Azure conversation trace) are priced again and again by
the profile alone and by the profile under :class:`sim.cost.overlap.HostOverlap`,
alternating, and the median time per step of each is printed with their ratio. Only
the pricing is timed: the rest of an iteration (scheduling, KV accounting, events)
is the same with and without the overlap.

Usage: python bench/bench_overlap.py [--repeats 7] [--duration 900]
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
from sim.cost.models import build_cost  # noqa: E402
from sim.cost.overlap import HostOverlap  # noqa: E402
from sim.cost.shape import shape_of  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--duration", type=float, default=900.0)
    a = ap.parse_args()
    sc = load(ROOT / "scenarios" / "quickstart.yaml", [f"workload.duration_s={a.duration}"])
    res = simulate(sc, log_steps=True)
    # Step log entries: (replica, start, end, ((id, new tokens, context before), ...)).
    shapes = [shape_of([(n, c) for _, n, c in s[3]]) for s in res.step_log]
    wrapped = build_cost(sc)
    assert isinstance(wrapped, HostOverlap)
    timings: dict[str, list[float]] = {"profile": [], "overlapped": []}
    for _ in range(a.repeats):
        for name, price in (("profile", wrapped.cost.step_time), ("overlapped",
                                                                  wrapped.step_time)):
            t0 = time.perf_counter()
            for s in shapes:
                price(s)
            timings[name].append((time.perf_counter() - t0) / len(shapes))
    base, over = (statistics.median(timings[k]) for k in ("profile", "overlapped"))
    print(f"{len(shapes)} steps, {a.repeats} repeats; median µs per step: profile "
          f"{base * 1e6:.2f}, overlapped {over * 1e6:.2f}; ratio {over / base:.3f}")


if __name__ == "__main__":
    main()
