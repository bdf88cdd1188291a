"""Rewrite the golden summaries after a deliberate change of simulated behaviour.

Run: .venv/bin/python tests/golden/regen.py — then review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

from sim.config import scenario
from sim.core.engine import simulate
from sim.report.outputs import summary_json
from sim.report.summary import summarize

ROOT = Path(__file__).resolve().parents[2]
# Relative to the repository root, so that summary.json's simulated.file is the same in
# every checkout.
GOLDEN = {"quickstart": Path("scenarios") / "quickstart.yaml"}

if __name__ == "__main__":
    os.chdir(ROOT)
    for name, path in GOLDEN.items():
        data = summary_json(summarize(simulate(scenario.load(path))))
        (ROOT / "tests" / "golden" / f"{name}_summary.json").write_bytes(data)
        print(f"wrote {name}_summary.json")
