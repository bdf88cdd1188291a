"""docs/validation.md's check of InferenceX's unlabelled MTP runs: the TensorRT-LLM DeepSeek
rows `validate --silicon` keeps out (`Row.unlabelled_mtp`) simulated as their MTP recipes
launch them, at a range of per-position acceptance rates, against the same rows simulated
without speculation.

Re-run from the repository root (about 10 minutes):
    .venv/bin/python docs/scripts/mtp_rows.py
It prints, for each acceptance rate, the rows and the median |error| (p90) and signed
median of TTFT and TPOT, over all rows and by GPU. The acceptance is not fitted to
anything: the sample does not record it, and the table shows which rates the runs are
consistent with.

The recipes (InferenceX's dsr1_fp8_h200_trt_mtp.sh, dsr1_fp8_b200_trt_mtp.sh,
dsr1_fp4_b200_trt_mtp.sh), without data-parallel attention (the rows that ran with it stay
out here, as in `validate --silicon`): three draft tokens; --max_batch_size the clients;
--max_num_tokens (4 x clients + ISL + 64) rounded up to 64; no batch waiting; the KV
memory fraction and stream interval of the plain recipes (0.75 on H200, 0.8 on B200; 10);
the MoE kernel CUTLASS on H200, DeepGEMM for FP8 on B200, TensorRT-LLM's generated
kernels for FP4 on B200.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sim.cost.priors import framework_priors  # noqa: E402
from sim.validate.silicon import Case, classify  # noqa: E402
from sim.validate.siliconfit import _cost  # noqa: E402
from sim.validate.siliconpredict import predict_raw  # noqa: E402
from sim.validate.siliconrecipes import scenario_raw  # noqa: E402
from sim.validate.siliconrows import Row, default_path, read_rows  # noqa: E402

RATES = (0.0, 0.5, 0.6, 0.7, 0.8)  # 0: no speculation
DRAFTS = 3


def mtp_case(row: Row) -> Case | None:
    """The case of ``row`` as its MTP recipe ran it, or None for one with data-parallel
    attention."""
    plain = classify(row, mtp_as_plain=True)
    if not isinstance(plain, Case) or plain.dp > 1:
        return None
    moe = "auto" if plain.gpu == "h200" or plain.dtype != "nvfp4" else "trtllm-gen"
    return dataclasses.replace(plain, moe_backend=moe)


def scenario(case: Case, rate: float) -> dict[str, Any]:
    """The scenario mapping of ``case`` under its MTP recipe at acceptance ``rate``."""
    raw = scenario_raw(case)
    serving = raw["serving"]
    for key in ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio"):
        serving.pop(key, None)
    if rate:
        r = case.row
        c = r.concurrency
        serving.update(max_num_seqs=c,
                       max_num_batched_tokens=-(-((DRAFTS + 1) * c + r.isl + 64) // 64) * 64,
                       speculative={"method": "mtp", "num_tokens": DRAFTS,
                                    "acceptance": {"rate": rate}})
    return raw


def main() -> None:
    """Print the table."""
    priors = framework_priors("trtllm")
    seen: set[tuple[Any, ...]] = set()
    cases = []
    for row in read_rows(default_path()):
        if not row.unlabelled_mtp:
            continue
        case = mtp_case(row)
        if case is None:
            continue
        key = (case.gpu, case.dtype, row.isl, row.osl, row.concurrency, case.tp, case.ep)
        if key not in seen:  # the exports repeat runs
            seen.add(key)
            cases.append(case)
    errors: dict[float, list[tuple[str, float, float]]] = {a: [] for a in RATES}
    for case in cases:
        cost = _cost(case, priors)
        r = case.row
        for a in RATES:
            ttft, tpot, _ = predict_raw(scenario(case, a), cost)
            errors[a].append((case.gpu, ttft / r.ttft_ms - 1, tpot / r.tpot_ms - 1))
    print(f"{len(cases)} distinct setups of InferenceX's unlabelled MTP runs "
          f"(no data-parallel attention)")
    print("| acceptance a | GPU | rows | TTFT median (p90) | TPOT median (p90) | "
          "signed medians TTFT / TPOT |")
    print("|---|---|---:|---|---|---|")
    for a in RATES:
        for gpu in ("all", "h200", "b200"):
            rows = [e for e in errors[a] if gpu in ("all", e[0])]
            t = np.array([e[1] for e in rows])
            p = np.array([e[2] for e in rows])
            label = "none" if not a else f"{a} ({(1 - a ** (DRAFTS + 1)) / (1 - a):.2f})"
            print(f"| {label} | {gpu} | {len(rows)} | {np.median(abs(t)):.1%} "
                  f"({np.percentile(abs(t), 90):.1%}) | {np.median(abs(p)):.1%} "
                  f"({np.percentile(abs(p), 90):.1%}) | {np.median(t):+.1%} / "
                  f"{np.median(p):+.1%} |".replace("-", "−"))


if __name__ == "__main__":
    main()
