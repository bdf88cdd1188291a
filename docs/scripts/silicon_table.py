"""The per-row table of docs/validation.md's section on public end-to-end runs.

Run from the repository root, after `servesim validate --silicon --out out/silicon`:
    .venv/bin/python docs/scripts/silicon_table.py out/silicon/silicon.json
It prints one Markdown row per simulated row of silicon_sample.csv, grouped by
framework, then model, GPU, tp, lengths and concurrency.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: Path) -> None:
    """Print the table of the records in ``path`` (the JSON `validate --silicon` writes)."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    print("| line | framework (run) | model | GPU | tp | ISL/OSL | clients | set | TTFT ms "
          "measured | predicted | error | TPOT ms measured | predicted | error |")
    print("|---:|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|")
    key = ("framework", "model", "gpu", "tp", "isl", "osl", "concurrency", "line")
    def num(x: float | None, fmt: str) -> str:
        return "-" if x is None else format(x, fmt)  # null: the row finished no request

    for r in sorted(doc["records"], key=lambda r: tuple(r[k] for k in key)):
        print(f"| {r['line']} | {r['framework']} {r['version']} | {r['model']} | {r['gpu']} "
              f"| {r['tp']} | {r['isl']}/{r['osl']} | {r['concurrency']} | {r['split']} "
              f"| {num(r['ttft_ms'], '.1f')} | {num(r['ttft_pred_ms'], '.1f')} "
              f"| {num(r['ttft_err'], '+.1%')} | {num(r['tpot_ms'], '.2f')} "
              f"| {num(r['tpot_pred_ms'], '.2f')} | {num(r['tpot_err'], '+.1%')} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("out/silicon/silicon.json"))
