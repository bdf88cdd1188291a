"""DeepSeek-V3/R1's public end-to-end rows, priced by the measured MLA profile and by the
roofline (docs/models.md).

Re-run from the repository root:  .venv/bin/python docs/scripts/mla_silicon.py
It takes every row of AIConfigurator's silicon_sample.csv that `servesim validate
--silicon` simulates for DeepSeek-V3 or DeepSeek-R1 (FP8 weights, aggregated, SGLang or
TensorRT-LLM; the scheduler, memory and KV-cache settings of each run's recipe:
sim/validate/silicon.py) and simulates each twice: with the profile built from the
installed kernel tables for its framework, GPU, tp and expert split (what `validate
--silicon` uses) and with the default roofline. Nothing is fitted to these rows. It
prints the median |error| and the signed median of mean TTFT and TPOT per framework,
GPU and expert split.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.eager import default_graphs, floored  # noqa: E402
from sim.cost.gpus import GPUS  # noqa: E402
from sim.cost.priors import framework_priors  # noqa: E402
from sim.cost.roofline import RooflineCost, RooflineParams  # noqa: E402
from sim.validate.silicon import Case, classify, tables_cover  # noqa: E402
from sim.validate.siliconfit import _cost, weights, with_lengths  # noqa: E402
from sim.validate.siliconpredict import predict  # noqa: E402
from sim.validate.siliconrows import default_path, read_rows  # noqa: E402


def _cell(errs: np.ndarray) -> str:
    return f"{np.median(np.abs(errs)):.1%} ({np.median(errs):+.1%})".replace("-", "−")


def main() -> None:
    cases: list[Case] = []
    for r in read_rows(default_path()):
        if "deepseek-ai/" not in r.model_path:
            continue
        got = classify(r)
        got = tables_cover(got) if isinstance(got, Case) else got
        # FP8 weights only: the NVFP4 checkpoints' rows have their own table
        # (docs/validation.md).
        if isinstance(got, Case) and weights(got) == "fp8":
            cases.append(got)
    results: dict[tuple[str, str, int, int], list[list[float]]] = {}
    for fw in sorted({c.framework for c in cases}):
        priors = framework_priors(fw)
        for c in with_lengths([c for c in cases if c.framework == fw],
                              priors.aic_client_lengths):
            r = c.row
            # The roofline stands for the same server: its eager steps too.
            roof = floored(RooflineCost(c.spec, GPUS[c.gpu], r.tp, RooflineParams(), ep=c.ep),
                           default_graphs(c.framework, r.version, c.spec, GPUS[c.gpu], r.tp),
                           c.spec)
            errs = []
            for cost in (_cost(c, priors), roof):
                ttft, tpot, _ = predict(c, cost)
                errs += [ttft / r.ttft_ms - 1, tpot / r.tpot_ms - 1]
            results.setdefault((fw, c.gpu, r.tp, c.ep), []).append(errs)
    print("| framework | GPU (tp 8 unless said) | rows | measured TTFT | measured TPOT | "
          "roofline TTFT | roofline TPOT |")
    print("|---|---|---:|---|---|---|---|")
    every = []
    for (fw, gpu, tp, ep), errs in sorted(results.items()):
        e = np.array(errs)
        every.append(e)
        where = gpu + (f", tp {tp}" if tp != 8 else "") + (f", ep {ep}" if ep > 1 else "")
        print(f"| {fw} | {where} | {len(e)} | " + " | ".join(_cell(e[:, i]) for i in range(4))
              + " |")
    e = np.concatenate(every)
    print(f"| all | all | {len(e)} | " + " | ".join(_cell(e[:, i]) for i in range(4)) + " |")


if __name__ == "__main__":
    main()
