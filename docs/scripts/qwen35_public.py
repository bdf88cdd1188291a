"""Public vLLM runs of Qwen3.5-35B-A3B against servesim: the table of docs/validation.md,
"Qwen3.5 under vLLM: GPUStack's runs".

GPUStack's performance lab published three fixed-length profiles of Qwen3.5-35B-A3B
(bf16) on one H200 under vLLM 0.17.1 with `--max-model-len 32768` and no other server
flag that changes what servesim prices (github.com/gpustack/gpustack,
docs/performance-lab/qwen3.5-35b-a3b/h200.md, "Other Benchmark Cases", its baseline
runs). Their client is guidellm at a constant 1,000 requests/s with at most 512 in
flight (the page's "Maximum request concurrency"). Prompt lengths are the page's input
tokens over its requests (the configured lengths plus what the chat template added);
the page's output totals show every request produced its configured length.

The page's "Mean TPOT" is not a per-token time (it equals mean TTFT over the output
length), so TPOT here is derived from its own figures: (mean latency - mean TTFT) /
(output - 1), exact for a mean when every output has the same length.

Each profile is simulated with the shipped measured profile (vLLM 0.24.0's kernels) and
memory sized as vLLM 0.17.1 sizes it; prefix caching is left at vLLM's default for these
models (off). Nothing was fitted to these runs.

Usage: python docs/scripts/qwen35_public.py
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

# (profile, prompt tokens, output tokens, requests, measured: duration s, mean TTFT ms,
# median TTFT ms, mean latency s)
RUNS: list[tuple[Any, ...]] = [
    ("Throughput 1024/128", 1034, 128, 1000, 40.37, 5809.82, 5564.25, 19.96),
    ("Long Context 32000/100", 32010, 100, 100, 73.72, 31979.13, 31950.33, 47.26),
    ("Generation Heavy 1000/2000", 1010, 2000, 200, 57.74, 1915.55, 1956.25, 57.43),
]


def scenario(prompt: int, output: int, n: int) -> dict[str, Any]:
    """One profile as a scenario."""
    return {"name": "gpustack-qwen35", "model": "qwen3.5-35b-a3b", "cost": "measured",
            "hardware": {"gpu": "h200", "tp": 1},
            "serving": {"vllm_version": "0.17.1"},
            "vllm": {"max-model-len": 32768},
            "workload": {"concurrency": 512, "arrivals": {"process": "constant", "rate": 1000},
                         "num_requests": n,
                         "lengths": {"prompt": {"dist": "fixed", "value": prompt},
                                     "output": {"dist": "fixed", "value": output}}}}


def err(sim: float, measured: float) -> str:
    """The signed error of ``sim`` against ``measured``, in percent."""
    return f"{100 * (sim - measured) / measured:+.0f}%"


def main() -> None:
    print("| profile | duration s | TTFT mean ms | TTFT median ms | latency mean s "
          "| TPOT mean ms (derived) |")
    print("|---|---|---|---|---|---|")
    for label, prompt, output, n, dur, ttft, ttft_p50, lat in RUNS:
        s = summarize(simulate(from_dict(scenario(prompt, output, n))))
        lat_s = s["latency_s"]
        sim = (s["span_s"], lat_s["ttft"]["mean"] * 1e3, lat_s["ttft"]["p50"] * 1e3,
               lat_s["e2e"]["mean"], lat_s["tpot"]["mean"] * 1e3)
        tpot = (lat - ttft / 1e3) / (output - 1) * 1e3
        cells = [f"{m:.2f} / {v:.2f} ({err(v, m)})"
                 for m, v in zip((dur, ttft, ttft_p50, lat, tpot), sim, strict=True)]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
