"""Numbers of docs/policies.md's speculative decoding section and docs/prefill-vs-decode.md
(f): Llama-3-8B on one H100, each verify priced by the shipped measured profile (vLLM
0.24.0 kernels), and the EAGLE head's drafting by the same profile cut to one layer.

Re-run from the repository root:  .venv/bin/python docs/scripts/speculative.py
It prints two tables: (1) one decode iteration of b sequences, plain against a verify
of k + 1 = 4 tokens each plus its drafting, and the output tokens per second each gives
at acceptance rates 0.3, 0.5, 0.7 and 0.9; (2) simulated runs of the Azure conversation
lengths under chunked prefill at rising load, without speculation and with an EAGLE head
(k = 3) at rates 0.3, 0.5 and 0.7.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config.scenario import from_dict  # noqa: E402
from sim.config.speculative import mean_for_rate  # noqa: E402
from sim.core.cluster import speculation  # noqa: E402
from sim.core.engine import build_cost, simulate  # noqa: E402
from sim.cost.shape import decode_shape, verify_shape  # noqa: E402
from sim.report.summary import summarize  # noqa: E402

K = 3
CONTEXT = 1024


def scenario(spec: dict[str, Any] | None, workload: dict[str, Any] | None = None) -> Any:
    """Llama-3-8B on one H100 (measured profile), chunked, speculating as ``spec``."""
    serving: dict[str, Any] = {"policy": "chunked"}
    if spec is not None:
        serving["speculative"] = spec
    return from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                      "cost": "measured", "serving": serving,
                      "workload": workload or {"arrivals": {"process": "poisson", "rate": 1},
                                               "lengths": {"empirical": "azure_2023_conv"},
                                               "num_requests": 1}})


def eagle(rate: float) -> dict[str, Any]:
    """An EAGLE head drafting K tokens, each accepted with probability ``rate``."""
    return {"method": "eagle", "num_tokens": K, "acceptance": {"rate": rate}}


def step_table(batches: list[int], rates: list[float]) -> list[dict[str, Any]]:
    """(1) One iteration of ``b`` sequences with CONTEXT tokens each: its price plain and
    as a verify (plus drafting), and output tokens/s at each acceptance rate."""
    sc = scenario(eagle(0.7))
    cost = build_cost(sc)
    sp = speculation(sc, sc.hardware.gpu_spec, 1, cost)
    assert sp is not None
    rows = []
    for b in batches:
        plain = cost.step_time(decode_shape(b, b * CONTEXT))
        verify = cost.step_time(verify_shape(b, K + 1, b * CONTEXT))
        draft = sp.drafter.step_time(b, b * CONTEXT)
        row: dict[str, Any] = {"batch": b, "plain_ms": plain * 1e3, "verify_ms": verify * 1e3,
                               "draft_ms": draft * 1e3, "plain_tok_s": b / plain}
        for a in rates:
            row[f"gain_{a}"] = mean_for_rate(a, K) * plain / (verify + draft)
        rows.append(row)
    return rows


def load_table(rates: list[float], n: int) -> list[dict[str, Any]]:
    """(2) Simulated runs at each arrival rate (req/s): TPOT, ITL and throughput without
    speculation and with EAGLE at acceptance 0.3, 0.5 and 0.7."""
    rows = []
    for rate in rates:
        wl = {"arrivals": {"process": "poisson", "rate": rate},
              "lengths": {"empirical": "azure_2023_conv"}, "num_requests": n, "seed": 0}
        for label, spec in (("off", None), ("a=0.3", eagle(0.3)), ("a=0.5", eagle(0.5)),
                            ("a=0.7", eagle(0.7))):
            s = summarize(simulate(scenario(spec, wl)))
            lat, tp = s["latency_s"], s["throughput"]
            rows.append({"rate": rate, "spec": label, "tpot_p50": lat["tpot"]["p50"] * 1e3,
                         "tpot_p99": lat["tpot"]["p99"] * 1e3,
                         "ttft_p99": lat["ttft"]["p99"] * 1e3,
                         "itl_p50": lat["itl"]["p50"] * 1e3,
                         "tok_s": tp["output_tokens_per_s"],
                         "batch": s["batch"]["mean_seqs"],
                         "tokens_per_verify": (s.get("speculative") or {}).get(
                             "mean_tokens_per_verify")})
    return rows


def main() -> None:
    rates_a = [0.3, 0.5, 0.7, 0.9]
    print(f"(1) one iteration, {CONTEXT} tokens of context each, EAGLE k={K}")
    print("| batch | plain step ms | verify step ms | drafting ms | plain tok/s | "
          + " | ".join(f"speed-up a={a}" for a in rates_a) + " |")
    for r in step_table([1, 8, 32, 64, 128, 256, 512], rates_a):
        print(f"| {r['batch']} | {r['plain_ms']:.2f} | {r['verify_ms']:.2f} | "
              f"{r['draft_ms']:.2f} | {r['plain_tok_s']:,.0f} | "
              + " | ".join(f"{r[f'gain_{a}']:.2f}x" for a in rates_a) + " |")
    print("\n(2) simulated, Azure conversation lengths, chunked, 1,500 requests a point")
    print("| rate req/s | speculation | TPOT p50 ms | TPOT p99 ms | TTFT p99 ms | ITL p50 ms "
          "| output tok/s | mean batch | tokens/verify |")
    for r in load_table([2.0, 8.0, 14.0, 18.0, 20.0, 22.0], 1500):
        tv = "-" if r["tokens_per_verify"] is None else f"{r['tokens_per_verify']:.3f}"
        print(f"| {r['rate']:g} | {r['spec']} | {r['tpot_p50']:.2f} | {r['tpot_p99']:.2f} | "
              f"{r['ttft_p99']:.0f} | {r['itl_p50']:.2f} | {r['tok_s']:,.0f} | "
              f"{r['batch']:.1f} | {tv} |", flush=True)


if __name__ == "__main__":
    main()
