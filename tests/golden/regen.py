"""Rewrite the golden summaries after a deliberate change of simulated behaviour.

Run: .venv/bin/python tests/golden/regen.py — then review the diff before committing.
"""

from __future__ import annotations

from pathlib import Path

from sim.config import scenario
from sim.core.engine import simulate
from sim.report.metrics import summarize
from sim.report.outputs import summary_json

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = {"quickstart": ROOT / "scenarios" / "quickstart.yaml"}

if __name__ == "__main__":
    for name, path in GOLDEN.items():
        data = summary_json(summarize(simulate(scenario.load(path))))
        (Path(__file__).parent / f"{name}_summary.json").write_bytes(data)
        print(f"wrote {name}_summary.json")
