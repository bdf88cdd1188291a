"""The composed MLA attention block against the tables' whole-module timings
(docs/measured-profiles.md).

Re-run from the repository root:  .venv/bin/python docs/scripts/mla_modules.py
TensorRT-LLM's tables time DeepSeek-V3's attention block twice: kernel by kernel (what
`servesim profile build` composes: sim/cost/tables/mlaattn.py) and as a whole module
(``mla_context_module_perf``, ``mla_generation_module_perf``), which the builder never
reads. So the modules are a held-out check of the composition: at every (batch, length)
point both measured at tp 8 (16 heads a GPU) with block-scaled FP8 projections, the
composed block (attention as the profile prices it, plus the three projections from the
GEMM table) against the module's time. It prints the signed median and the median and
p90 of |error| per GPU and KV-cache dtype.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.shard import shard  # noqa: E402
from sim.cost.tables.layergemms import attention_gemms  # noqa: E402
from sim.cost.tables.mlaattn import module_errors  # noqa: E402


def main() -> None:
    rank = shard(MODELS["deepseek-v3"], 8)
    print("| GPU | KV cache | decode points | decode: signed median, median (p90) \\|error\\| | "
          "prefill points | prefill: signed median, median (p90) \\|error\\| |")
    print("|---|---|---:|---|---:|---|")
    for gpu in ("h200", "b200"):
        for kv in ("bfloat16", "fp8"):
            dec, pre = module_errors(gpu, "trtllm", "1.3.0rc20", MODELS["deepseek-v3"], rank,
                                     kv, attention_gemms(rank))
            cells = []
            for e in (dec, pre):
                a = np.abs(e)
                cells += [str(len(e)), f"{np.median(e):+.1%}, {np.median(a):.1%} "
                                       f"({np.percentile(a, 90):.1%})".replace("-", "−")]
            print(f"| {gpu} | {kv} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
