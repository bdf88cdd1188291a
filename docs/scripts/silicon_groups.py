"""The grouped error tables of docs/validation.md's FP8 and 4-bit sections.

Run from the repository root, after e.g.
`servesim validate --silicon --weights 4bit --out out/4bit`:
    .venv/bin/python docs/scripts/silicon_groups.py out/4bit/silicon.json
It prints one Markdown row per framework, run (version) and GPU: rows, median and p90
|error| of TTFT and TPOT, and the signed medians; then one row per framework.
``--weights fp8`` keeps the FP8 rows; rows of more than one model are grouped by model
too; ``--held-out`` keeps the rows no fit has seen; ``--dp`` keeps the rows served with
data-parallel attention (and groups them by model).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


def _row(label: str, recs: list[dict]) -> str:
    t = np.array([r["ttft_err"] for r in recs])
    p = np.array([r["tpot_err"] for r in recs])
    a, b = np.abs(t), np.abs(p)
    signed = f"{np.median(t):+.1%} / {np.median(p):+.1%}".replace("-", "−")
    return (f"| {label} | {len(recs)} | {np.median(a):.1%} ({np.percentile(a, 90):.1%}) | "
            f"{np.median(b):.1%} ({np.percentile(b, 90):.1%}) | {signed} |")


def main(path: Path, fp8: bool = False, held_out: bool = False, dp: bool = False) -> None:
    """Print the grouped tables of the records in ``path``: only FP8 rows, grouped by
    model too, with ``fp8``; only held-out rows with ``held_out``; only rows with
    data-parallel attention, grouped by model, with ``dp``."""
    recs = json.loads(path.read_text(encoding="utf-8"))["records"]
    if dp:
        recs = [r for r in recs if r.get("dp", 1) > 1]
    if fp8 and not dp:
        recs = [r for r in recs if r["dtype"] in ("fp8", "fp8-block")
                and not r.get("expert_dtype")]
    if held_out:
        recs = [r for r in recs if r["split"] == "test"]
    # Rows of several models (FP8 ones, 4-bit experts of gpt-oss and Kimi) are grouped by
    # model too.
    fp8 = fp8 or dp or len({r["model"] for r in recs}) > 1
    print(f"| framework (run) | {'model, weights | ' if fp8 else ''}GPU | rows | "
          "TTFT median (p90) | TPOT median (p90) | signed medians TTFT / TPOT |")
    print(f"|---|{'---|' if fp8 else ''}---|---:|---|---|---|")
    groups: dict[tuple[str, ...], list[dict]] = defaultdict(list)
    for r in recs:
        weights = f"{r['expert_dtype']} experts" if r.get("expert_dtype") else r["dtype"]
        if r.get("qkv_dtype"):
            weights += f" ({r['qkv_dtype']} QKV)"
        split = (f" (dp {r['dp']}, ep {r['ep']})" if r.get("dp", 1) > 1
                 else f" (ep {r['ep']})" if r.get("ep", 1) > 1 else "")
        model = (f"{r['model']}{split}"
                 f", {weights}{', fp8 KV' if r.get('kv_dtype') == 'fp8' else ''}",) \
            if fp8 else ()
        groups[(r["framework"], r["version"], *model, r["gpu"])].append(r)
    for key, rs in sorted(groups.items()):
        run = f"{NAMES[key[0]]} {key[1] or '(no version)'}"
        print(_row(f"{run} | " + " | ".join(key[2:]), rs))
    for fw in sorted({r["framework"] for r in recs}):
        print(_row(f"{fw}, all | {'all | ' if fp8 else ''}all",
                   [r for r in recs if r["framework"] == fw]))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(Path(args[0]) if args else Path("out/silicon/silicon.json"),
         fp8="--weights" in sys.argv and "fp8" in sys.argv, held_out="--held-out" in sys.argv,
         dp="--dp" in sys.argv)
