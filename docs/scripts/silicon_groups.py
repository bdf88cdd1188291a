"""The grouped error tables of docs/validation.md's FP8 and 4-bit sections.

Run from the repository root, after e.g.
`servesim validate --silicon --weights 4bit --out out/4bit`:
    .venv/bin/python docs/scripts/silicon_groups.py out/4bit/silicon.json
It prints one Markdown row per framework, run (version) and GPU: rows, median and p90
|error| of TTFT and TPOT, and the signed medians; then one row per framework.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def _row(label: str, recs: list[dict]) -> str:
    t = np.array([r["ttft_err"] for r in recs])
    p = np.array([r["tpot_err"] for r in recs])
    a, b = np.abs(t), np.abs(p)
    signed = f"{np.median(t):+.1%} / {np.median(p):+.1%}".replace("-", "−")
    return (f"| {label} | {len(recs)} | {np.median(a):.1%} ({np.percentile(a, 90):.1%}) | "
            f"{np.median(b):.1%} ({np.percentile(b, 90):.1%}) | {signed} |")


def main(path: Path) -> None:
    """Print the grouped tables of the records in ``path``."""
    recs = json.loads(path.read_text(encoding="utf-8"))["records"]
    print("| framework (run) | GPU | rows | TTFT median (p90) | TPOT median (p90) | "
          "signed medians TTFT / TPOT |")
    print("|---|---|---:|---|---|---|")
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for r in recs:
        groups[(r["framework"], r["version"] or "unversioned", r["gpu"])].append(r)
    for (fw, version, gpu), rs in sorted(groups.items()):
        print(_row(f"{fw} {version} | {gpu}", rs))
    for fw in sorted({r["framework"] for r in recs}):
        print(_row(f"{fw}, all | all", [r for r in recs if r["framework"] == fw]))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out/silicon/silicon.json"))
