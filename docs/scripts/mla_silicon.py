"""DeepSeek-V3/R1's public end-to-end rows priced by the roofline (docs/models.md).

Re-run from the repository root:  .venv/bin/python docs/scripts/mla_silicon.py
It simulates every row of AIConfigurator's silicon_sample.csv that serves DeepSeek-V3
or DeepSeek-R1 with FP8 weights, aggregated (not disaggregated), on 8 GPUs, with the
experts split by tensor parallelism (no expert or attention-data parallelism), as
`servesim validate --silicon` simulates a row, but priced by the default roofline:
no measured MLA profile exists yet, and none of these rows is vLLM's. Nothing is
fitted to them. It prints each row and the median |error| of mean TTFT and TPOT per
framework and GPU.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.models import RooflineCost, RooflineParams  # noqa: E402
from sim.cost.specs import GPUS  # noqa: E402
from sim.validate.silicon import SYSTEM_GPUS, Case, Row, default_path, predict, read_rows  # noqa: E402

PRESETS = {"deepseek-ai/DeepSeek-V3": "deepseek-v3", "deepseek-ai/DeepSeek-R1": "deepseek-r1"}


def wanted(r: Row) -> bool:
    """An aggregated FP8 row on 8 GPUs of a known kind, experts split by tp only."""
    return (r.model_path in PRESETS and r.mode == "agg" and r.precision == "fp8"
            and r.system in SYSTEM_GPUS and r.pp == 1 and r.attention_dp <= 1 and r.tp == 8
            and r.moe_tp in (0, r.tp) and r.moe_ep in (0, 1)
            and r.backend in ("vllm", "sglang", "trtllm"))


def main() -> None:
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in read_rows(default_path()):
        if not wanted(r):
            continue
        # The release is block-scaled FP8 whatever a row's label says.
        case = Case(r, PRESETS[r.model_path], SYSTEM_GPUS[r.system], r.backend,
                    dtype="fp8-block")
        cost = RooflineCost(case.spec, GPUS[case.gpu], r.tp, RooflineParams())
        ttft, tpot, note = predict(case, cost)
        print(f"{r.backend} {r.system} isl {r.isl} osl {r.osl} clients {r.concurrency}: TTFT "
              f"{r.ttft_ms:.0f} -> {ttft:.0f} ms, TPOT {r.tpot_ms:.2f} -> {tpot:.2f} ms {note}")
        results.setdefault((r.backend, r.system), []).append(
            (ttft / r.ttft_ms - 1, tpot / r.tpot_ms - 1))
    print("\n| framework | GPU | rows | TTFT median abs err | TPOT median abs err | TPOT median |")
    print("|---|---|---:|---:|---:|---:|")
    for (fw, system), errs in sorted(results.items()):
        e = np.array(errs)
        print(f"| {fw} | {system} | {len(e)} | {np.median(np.abs(e[:, 0])):.1%} | "
              f"{np.median(np.abs(e[:, 1])):.1%} | {np.median(e[:, 1]):+.1%} |")


if __name__ == "__main__":
    main()
