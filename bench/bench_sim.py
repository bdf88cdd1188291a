"""Simulator speed and memory on fixed, seeded scenarios.

Each case runs in a fresh child process so its peak RSS is its own. Workload: Azure
2023 conversation lengths (pairs drawn from the shipped trace), Poisson arrivals at
80% of the measured capacity, Llama-3-8B on one H100 (or the ``--models`` given: a
mixture of experts against a dense model), roofline or the shipped measured profile
(``--costs``). Capacity is
measured first by a saturated run (all requests arriving at once): its completion
rate is the most one replica sustains.

Usage: python bench/bench_sim.py [--sizes 10000,100000] [--repeats 3]
       [--policies continuous] [--replicas 1] [--costs roofline,measured]
       [--models llama-3-8b,qwen3-30b-a3b] [--speculative eagle:3:0.7]
       [--pp 1,2 [--own-capacity] [--alternate]]
``--pp``: pipeline stages per replica (``hardware.pp``); every pp runs the same requests
at 80% of the one-stage capacity (the same run with and without a pipeline), or with
``--own-capacity`` at 80% of each pp's own; ``--alternate`` runs the pp values in turn,
one run each per repeat, and adds each one's speed against the first pp's.
Prints a Markdown table: median wall seconds over the repeats, simulated requests per
wall-second, iterations (SimPy events of the replicas) per second and peak RSS.
``--speculative METHOD:K:RATE`` runs every case twice at the same arrival rate (80% of
the capacity without speculation): without speculative decoding, then with it (k drafted
tokens, per-position acceptance RATE; ``draft`` takes METHOD:K:RATE:PRESET), repeats
interleaved, and prints the ratio of their simulated requests per wall-second.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def base(policy: str, replicas: int, rate: float, n: int, seed: int = 0,
         cost: str = "roofline", model: str = "llama-3-8b",
         speculative: dict[str, Any] | None = None, pp: int = 1) -> dict[str, Any]:
    """The benchmark scenario as a raw mapping."""
    serving: dict[str, Any] = {"policy": policy}
    if speculative is not None:
        serving["speculative"] = speculative
    return {
        "name": f"bench-{policy}-{replicas}r-{n}",
        "model": model,
        "hardware": {"gpu": "h100-sxm", **({"pp": pp} if pp > 1 else {})},
        "cost": cost,
        "serving": serving,
        "cluster": {"replicas": replicas, "router": "round_robin"},
        "workload": {"arrivals": {"process": "poisson", "rate": rate},
                     "lengths": {"empirical": "azure_2023_conv"},
                     "num_requests": n, "seed": seed},
    }


def child(spec: str) -> None:
    """Run one case (JSON spec on argv) and print its measurements as JSON."""
    sys.path.insert(0, str(ROOT))
    args = json.loads(spec)
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    sc = from_dict(args["scenario"], "<bench>", ROOT)
    import simpy

    events = [0]
    step = simpy.Environment.step

    class Counting(simpy.Environment):
        def step(self) -> None:
            events[0] += 1
            step(self)

    import sim.core.engine as engine_mod

    engine_mod.simpy.Environment = Counting  # type: ignore[misc]
    t0 = time.perf_counter()
    res = simulate(sc)
    wall = time.perf_counter() - t0
    s = summarize(res)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB
    print(json.dumps({"wall_s": wall, "iterations": s["batch"]["iterations"],
                      "events": events[0],
                      "finished": s["requests"]["finished"], "total": s["requests"]["total"],
                      "throughput": s["throughput"]["requests_per_s"], "rss_mib": rss}))


def run_case(scenario: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps({"scenario": scenario})],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def capacity(policy: str, replicas: int, cost: str, model: str, pp: int = 1) -> float:
    """Requests/s one setup completes when saturated (5,000 requests arriving together)."""
    r = run_case(base(policy, replicas, rate=1e6, n=5000, cost=cost, model=model, pp=pp))
    return float(r["throughput"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="10000,100000")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--policies", default="continuous")
    p.add_argument("--replicas", default="1")
    p.add_argument("--costs", default="roofline",
                   help="cost models: roofline, measured (the shipped profile)")
    p.add_argument("--models", default="llama-3-8b", help="model presets, on one H100 each")
    p.add_argument("--speculative", default=None,
                   help="METHOD:K:RATE[:DRAFT]: each case without and with speculative decoding")
    p.add_argument("--pp", default="1", help="pipeline stages per replica, e.g. 1,2")
    p.add_argument("--own-capacity", action="store_true",
                   help="with --pp: each pp at 80%% of its own capacity, not pp=1's")
    p.add_argument("--alternate", action="store_true",
                   help="with --pp: run the pp values' repeats in turn, one run each, and "
                        "print each one's speed against the first pp's")
    p.add_argument("--child")
    a = p.parse_args()
    if a.child:
        child(a.child)
        return
    if a.speculative:
        print("| model | cost | policy | replicas | requests | rate (req/s) | speculative | "
              "wall s (median) | sim req/s | iterations/s | peak RSS MiB | req/s vs off |")
        print("|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    pps = [int(x) for x in a.pp.split(",")]
    pp_col = ("pp | ", "---:|") if pps != [1] else ("", "")
    if a.alternate and len(pps) > 1 and not a.speculative:
        print("| model | cost | policy | replicas | pp | requests | rate (req/s) | "
              "wall s (median) | sim req/s | iterations/s | events/s | peak RSS MiB | "
              f"speed vs pp={pps[0]} | wall s (each run) |")
        print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    elif not a.speculative:
        print(f"| model | cost | policy | replicas | {pp_col[0]}requests | rate (req/s) | "
              "wall s (median) | sim req/s | iterations/s | events/s | peak RSS MiB |")
        print(f"|---|---|---|---:|{pp_col[1]}---:|---:|---:|---:|---:|---:|---:|")
    for model in a.models.split(","):
        for policy in a.policies.split(","):
            for replicas in map(int, a.replicas.split(",")):
                for cost in a.costs.split(","):
                    if a.alternate and len(pps) > 1:
                        _pp_pairs(a, model, policy, replicas, cost, pps)
                        continue
                    for pp in pps:
                        _cases(a, model, policy, replicas, cost, pp, pps != [1])


def speculative_setting(text: str) -> dict[str, Any]:
    """``serving.speculative`` from METHOD:K:RATE[:DRAFT_PRESET]."""
    method, k, rate, *draft = text.split(":")
    out: dict[str, Any] = {"method": method, "num_tokens": int(k),
                           "acceptance": {"rate": float(rate)}}
    if draft:
        out["draft_model"] = draft[0]
    return out


def _spec_cases(a: argparse.Namespace, model: str, policy: str, replicas: int, cost: str,
                rate: float) -> None:
    """Each size without and with speculation at one rate, repeats interleaved (so load
    on the machine falls on both alike)."""
    spec = speculative_setting(a.speculative)
    for n in map(int, a.sizes.split(",")):
        variants = {"off": base(policy, replicas, rate, n, cost=cost, model=model),
                    a.speculative: base(policy, replicas, rate, n, cost=cost, model=model,
                                        speculative=spec)}
        runs: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
        for _ in range(a.repeats):
            for key, sc in variants.items():
                runs[key].append(run_case(sc))
        speed: dict[str, float] = {}
        for key, rs in runs.items():
            wall = statistics.median(r["wall_s"] for r in rs)
            speed[key] = n / wall
            print(f"| {model} | {cost} | {policy} | {replicas} | {n:,} | {rate:.2f} | {key} "
                  f"| {wall:.2f} | {n / wall:,.0f} | {rs[0]['iterations'] / wall:,.0f} "
                  f"| {max(r['rss_mib'] for r in rs):.0f} "
                  f"| {speed[key] / speed['off']:.1%} |", flush=True)


def _pp_pairs(a: argparse.Namespace, model: str, policy: str, replicas: int, cost: str,
              pps: list[int]) -> None:
    """Each size at every pp in ``pps``, one run of each in turn ``a.repeats`` times (so
    a change of load on the machine falls on all alike); the speed column is the median
    wall time of the first pp over this pp's."""
    rates = {pp: 0.8 * capacity(policy, replicas, cost, model, pp if a.own_capacity else 1)
             for pp in pps}
    for n in map(int, a.sizes.split(",")):
        cases = {pp: base(policy, replicas, rates[pp], n, cost=cost, model=model, pp=pp)
                 for pp in pps}
        runs: dict[int, list[dict[str, Any]]] = {pp: [] for pp in pps}
        for _ in range(a.repeats):
            for pp, sc in cases.items():
                runs[pp].append(run_case(sc))
        first = statistics.median(r["wall_s"] for r in runs[pps[0]])
        for pp, rs in runs.items():
            wall = statistics.median(r["wall_s"] for r in rs)
            it, ev = rs[0]["iterations"], rs[0]["events"]
            walls = ", ".join(f"{r['wall_s']:.2f}" for r in rs)
            print(f"| {model} | {cost} | {policy} | {replicas} | {pp} | {n:,} | {rates[pp]:.2f} "
                  f"| {wall:.2f} | {n / wall:,.0f} | {it / wall:,.0f} | {ev / wall:,.0f} "
                  f"| {max(r['rss_mib'] for r in rs):.0f} | {first / wall:.2f} | {walls} |",
                  flush=True)


def _cases(a: argparse.Namespace, model: str, policy: str, replicas: int, cost: str,
           pp: int = 1, show_pp: bool = False) -> None:
    rate = 0.8 * capacity(policy, replicas, cost, model, pp if a.own_capacity else 1)
    if a.speculative:
        _spec_cases(a, model, policy, replicas, cost, rate)
        return
    for n in map(int, a.sizes.split(",")):
        sc = base(policy, replicas, rate, n, cost=cost, model=model, pp=pp)
        runs = [run_case(sc) for _ in range(a.repeats)]
        wall = statistics.median(r["wall_s"] for r in runs)
        rss = max(r["rss_mib"] for r in runs)
        it, ev = runs[0]["iterations"], runs[0]["events"]
        pp_cell = f"{pp} | " if show_pp else ""
        print(f"| {model} | {cost} | {policy} | {replicas} | {pp_cell}{n:,} | {rate:.2f} "
              f"| {wall:.2f} | {n / wall:,.0f} | {it / wall:,.0f} | "
              f"{ev / wall:,.0f} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    main()
