"""Numbers and plots of docs/prefill-vs-decode.md: Llama-3-8B on one H100, priced by the
shipped measured profile (vLLM 0.24.0 kernels).

Re-run from the repository root:  .venv/bin/python docs/scripts/prefill_vs_decode.py
It prints each experiment's table and writes docs/img/pvd_*.png. The functions take
their sizes as arguments so tests/test_prefill_vs_decode.py can assert every claim's
direction on smaller runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config.scenario import from_dict  # noqa: E402
from sim.core.engine import build_cost, simulate  # noqa: E402
from sim.cost.shape import decode_shape  # noqa: E402
from sim.report.metrics import per_request  # noqa: E402
from sim.report.summary import summarize  # noqa: E402

IMG = ROOT / "docs" / "img"


def scenario(policy: str = "continuous", workload: dict[str, Any] | None = None,
             **serving: Any) -> Any:
    """Llama-3-8B on one H100 (the shipped measured profile), given policy and workload."""
    return from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                      "cost": "measured", "serving": {"policy": policy, **serving},
                      "workload": workload})


def fixed(rate: float, prompt: int, output: int, n: int, process: str = "poisson") -> dict:
    """A workload of ``n`` requests of fixed lengths at ``rate`` req/s."""
    return {"arrivals": {"process": process, "rate": rate},
            "lengths": {"prompt": {"dist": "fixed", "value": prompt},
                        "output": {"dist": "fixed", "value": output}},
            "num_requests": n, "seed": 1}


def azure(duration_s: float, time_scale: float = 0.5) -> dict:
    """The shipped Azure 2023 conversation trace, as scenarios/quickstart.yaml uses it."""
    return {"trace": {"path": "azure_2023_conv", "time_scale": time_scale},
            "duration_s": duration_s, "seed": 0}


def p(summary: dict, metric: str, q: str = "p50") -> float:
    """A latency percentile of a summary, in milliseconds."""
    return summary["latency_s"][metric][q] * 1e3


def ttft_vs_prompt(prompts: list[int], output: int = 128, n: int = 10) -> list[dict]:
    """(a) One request at a time (no queueing): TTFT and TPOT against prompt length."""
    out = []
    for prompt in prompts:
        s = summarize(simulate(scenario(workload=fixed(0.2, prompt, output, n, "constant"))))
        out.append({"prompt": prompt, "ttft_ms": p(s, "ttft"), "tpot_ms": p(s, "tpot")})
    return out


def e2e_vs_output(outputs: list[int], prompt: int = 512, n: int = 5) -> dict:
    """(b) E2E against output length, one request at a time; slope by least squares."""
    rows = []
    for output in outputs:
        s = summarize(simulate(scenario(workload=fixed(0.02, prompt, output, n, "constant"))))
        rows.append({"output": output, "e2e_ms": p(s, "e2e"), "tpot_ms": p(s, "tpot")})
    x = np.array([r["output"] for r in rows], dtype=float)
    y = np.array([r["e2e_ms"] for r in rows])
    slope, intercept = np.polyfit(x, y, 1)
    return {"rows": rows, "slope_ms": float(slope), "intercept_ms": float(intercept),
            "tpot_ms": float(np.mean([r["tpot_ms"] for r in rows]))}


def decode_batch(batches: list[int], context: int = 1024) -> list[dict]:
    """(c) Decode step time and output throughput against batch size (cost model)."""
    cost = build_cost(scenario(workload=fixed(1, 1, 1, 1)))
    out = []
    for b in batches:
        t = cost.step_time(decode_shape(b, b * context))
        out.append({"batch": b, "step_ms": t * 1e3, "tokens_per_s": b / t})
    return out


def static_vs_continuous(duration_s: float, time_scales: list[float]) -> list[dict]:
    """(d) Static against continuous batching on the same Azure trace and loads."""
    out = []
    for ts in time_scales:
        row: dict[str, Any] = {"time_scale": ts}
        for policy in ("static", "continuous"):
            res = simulate(scenario(policy, azure(duration_s, ts)))
            s = summarize(res)
            row["rate"] = len(res.requests) / duration_s
            row[policy] = {"ttft_p50_ms": p(s, "ttft"), "ttft_p99_ms": p(s, "ttft", "p99"),
                           "tpot_p50_ms": p(s, "tpot"),
                           "tok_s": s["throughput"]["output_tokens_per_s"]}
        out.append(row)
    return out


# (e)'s configurations: label -> (policy, serving keys). Every one runs 256 sequences at
# most, so only the batching differs; "chunked" keeps vLLM v1's default budget.
INTERFERENCE = {
    "continuous": ("continuous", {}),
    "chunked": ("chunked", {"max_num_seqs": 256}),
    "chunked-2048": ("chunked", {"max_num_seqs": 256, "max_num_batched_tokens": 2048}),
    "disaggregated": ("disaggregated", {}),
}


def interference(prompts: list[int], rate: float = 6.0, n: int = 400,
                 policies: tuple[str, ...] = tuple(INTERFERENCE)) -> list[dict]:
    """(e) TPOT and ITL of 128-token answers as the prompt length (prefill load) rises,
    for the configurations of :data:`INTERFERENCE` named in ``policies``."""
    out = []
    for policy in policies:
        name, serving = INTERFERENCE[policy]
        for prompt in prompts:
            res = simulate(scenario(name, fixed(rate, prompt, 128, n), **serving))
            s = summarize(res)
            out.append({"policy": policy, "prompt": prompt,
                        "ttft_p50_ms": p(s, "ttft"), "tpot_p50_ms": p(s, "tpot"),
                        "tpot_p99_ms": p(s, "tpot", "p99"), "itl_p99_ms": p(s, "itl", "p99"),
                        "tpot": per_request(res)["tpot"]})
    return out


# -- plots and the printed tables ------------------------------------------------------
def _save(fig: Any, name: str) -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(IMG / name, dpi=100, metadata={"Software": None})


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = ttft_vs_prompt([128, 256, 512, 1024, 2048, 4096, 7936])
    print("(a) prompt  TTFT ms  TPOT ms")
    for r in a:
        print(f"{r['prompt']:>10}  {r['ttft_ms']:7.1f}  {r['tpot_ms']:7.2f}")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.plot([r["prompt"] for r in a], [r["ttft_ms"] for r in a], "o-", label="TTFT")
    ax.plot([r["prompt"] for r in a], [r["tpot_ms"] for r in a], "s-", label="TPOT")
    ax.set_xlabel("prompt tokens (output 128)")
    ax.set_ylabel("ms")
    ax.set_title("(a) prompt length drives TTFT, not TPOT")
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, "pvd_ttft_prompt.png")

    b = e2e_vs_output([16, 64, 128, 256, 512, 1024])
    print(f"(b) E2E slope {b['slope_ms']:.2f} ms/token, TPOT {b['tpot_ms']:.2f} ms, "
          f"intercept {b['intercept_ms']:.1f} ms")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [r["output"] for r in b["rows"]]
    ax.plot(xs, [r["e2e_ms"] for r in b["rows"]], "o", label="E2E (simulated)")
    ax.plot(xs, [b["intercept_ms"] + b["slope_ms"] * x for x in xs], "-",
            label=f"fit: slope {b['slope_ms']:.2f} ms/token")
    ax.set_xlabel("output tokens (prompt 512)")
    ax.set_ylabel("E2E ms")
    ax.set_title(f"(b) E2E grows by TPOT ({b['tpot_ms']:.2f} ms) per token")
    ax.legend()
    ax.grid(alpha=0.3)
    _save(fig, "pvd_e2e_output.png")

    batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    c = decode_batch(batches)
    print("(c) batch  step ms  tokens/s")
    for r in c:
        print(f"{r['batch']:>9}  {r['step_ms']:7.2f}  {r['tokens_per_s']:8.0f}")
    fig, ax1 = plt.subplots(figsize=(6, 3.6))
    ax1.plot(batches, [r["tokens_per_s"] for r in c], "o-", color="C0")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("decode batch size (context 1024 each)")
    ax1.set_ylabel("output tokens/s", color="C0")
    ax2 = ax1.twinx()
    ax2.plot(batches, [r["step_ms"] for r in c], "s--", color="C1")
    ax2.set_ylabel("step ms", color="C1")
    ax1.set_title("(c) decode: throughput rises with batch, then flattens")
    ax1.grid(alpha=0.3)
    _save(fig, "pvd_decode_batch.png")

    d = static_vs_continuous(300, [2.0, 1.0, 0.5])
    print("(d) rate req/s  static TTFT p50/p99  continuous TTFT p50/p99  tok/s s/c")
    for r in d:
        st, co = r["static"], r["continuous"]
        print(f"{r['rate']:14.2f}  {st['ttft_p50_ms']:9.0f}/{st['ttft_p99_ms']:9.0f}  "
              f"{co['ttft_p50_ms']:9.1f}/{co['ttft_p99_ms']:9.1f}  "
              f"{st['tok_s']:.0f}/{co['tok_s']:.0f}")
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for policy in ("static", "continuous"):
        ax.plot([r["rate"] for r in d], [r[policy]["ttft_p50_ms"] for r in d], "o-",
                label=f"{policy} p50")
        ax.plot([r["rate"] for r in d], [r[policy]["ttft_p99_ms"] for r in d], "s--",
                label=f"{policy} p99")
    ax.set_yscale("log")
    ax.set_xlabel("request rate (Azure conversation trace, req/s)")
    ax.set_ylabel("TTFT ms (log)")
    ax.set_title("(d) static vs continuous batching")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    _save(fig, "pvd_static_continuous.png")

    prompts = [256, 1024, 2048, 3072, 4096]
    e = interference(prompts)
    print("(e) policy  prompt  TTFT p50  TPOT p50  TPOT p99  ITL p99 (ms)")
    for r in e:
        print(f"{r['policy']:>14} {r['prompt']:>6}  {r['ttft_p50_ms']:8.1f}  "
              f"{r['tpot_p50_ms']:8.2f}  {r['tpot_p99_ms']:8.2f}  {r['itl_p99_ms']:7.1f}")
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for policy in INTERFERENCE:
        rows = [r for r in e if r["policy"] == policy]
        axes[0].plot(prompts, [r["tpot_p99_ms"] for r in rows], "o-", label=policy)
        axes[1].plot(prompts, [r["itl_p99_ms"] for r in rows], "o-", label=policy)
    for ax, t in zip(axes, ("p99 TPOT", "p99 inter-token latency"), strict=True):
        ax.set_xlabel("prompt tokens (6 req/s, output 128)")
        ax.set_ylabel("ms")
        ax.set_yscale("log")
        ax.set_title(f"(e) {t} as prefill load rises")
        ax.legend()
        ax.grid(alpha=0.3, which="both")
    _save(fig, "pvd_interference.png")


if __name__ == "__main__":
    main()
