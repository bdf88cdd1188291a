"""The fit summaries of docs/measured-profiles.md ("How the tables are interpolated"),
over every shipped profile.

Re-run from the repository root:  .venv/bin/python docs/scripts/profile_fits.py
It reads sim/data/profiles/*.yaml (no tables needed) and prints: over the profiles whose
projections have off-grid GEMM sizes, the median and worst of each profile's median
held-out interpolation error and the median of their p90s
(``components.linear.fit.interpolation``); and the median held-out MAPE of each
component's formula past its last knot (linear, LM head) and of the all-reduce's fit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

PROFILES = Path(__file__).resolve().parents[2] / "sim" / "data" / "profiles"


def main() -> None:
    """Print the two summaries."""
    medians: list[float] = []
    p90s: list[float] = []
    past: dict[str, list[float]] = {"linear": [], "lm_head": [], "allreduce": []}
    files = sorted(PROFILES.glob("*.yaml"))
    for path in files:
        comps = yaml.safe_load(path.read_text(encoding="utf-8"))["components"]
        interp = comps["linear"].get("fit", {}).get("interpolation") or {}
        if interp.get("points"):
            medians.append(interp["median"])
            p90s.append(interp["p90"])
        for name in ("linear", "lm_head"):
            fit = comps[name].get("fit", {}).get("formula_past_knots")
            if fit:
                past[name].append(fit["mape_test"])
        fit = comps["allreduce"].get("fit", {})
        if "mape_test" in fit:  # tp > 1 only
            past["allreduce"].append(fit["mape_test"])
    print(f"{len(files)} profiles; {len(medians)} with off-grid GEMM sizes: median of their "
          f"median interpolation errors {np.median(medians):.1%} (worst {max(medians):.1%}), "
          f"median of their p90s {np.median(p90s):.1%}")
    print("formula past the last knot, median held-out MAPE: "
          + ", ".join(f"{k} {np.median(v):.1%} ({len(v)} profiles)" for k, v in past.items()))


if __name__ == "__main__":
    main()
