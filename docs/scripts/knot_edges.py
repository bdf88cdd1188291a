"""How a measured component is priced past its last knot, checked on held-out knots
(docs/measured-profiles.md, "Interpolation, and its measured error").

Re-run from the repository root:  .venv/bin/python docs/scripts/knot_edges.py
For every shipped profile (sim/data/profiles/*.yaml; no kernel tables needed) and each
component kept as knots whose formula reads the knots' count alone (the linear layers,
the all-reduce, the LM head), the top one or two knots are left out, the formula is
fitted on the rest as the profile builder fits it, and the top knot is predicted two
ways: by the formula alone (servesim's rule before 2026-12-07) and by the highest kept
knot times the formula's growth from its count (the rule since). Prints the median, p90
and largest |relative error| of each. About a minute.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import yaml

from sim.cost.profile import FORMS, SCALAR
from sim.cost.shape import StepShape
from sim.cost.tables.profilefmt import formula_fit, seqs_shape, tokens_shape

PROFILES = Path(__file__).resolve().parents[2] / "sim" / "data" / "profiles"
SHAPES: dict[str, Callable[[int], StepShape]] = {
    "linear": tokens_shape, "allreduce": tokens_shape, "lm_head": seqs_shape}


def predictions(name: str, xs: np.ndarray, ys: np.ndarray, drop: int) -> tuple[float, float]:
    """The top knot of ``xs``/``ys`` predicted with the top ``drop`` knots left out, by
    the formula alone and by the formula's growth from the highest kept knot."""
    shape_at = SHAPES[name]
    kept_x, kept_y = xs[:-drop], ys[:-drop]
    coef = formula_fit(name, kept_x, kept_y, shape_at)["coef"]

    def formula(x: float) -> float:
        return float(FORMS[name].evaluate(coef, shape_at(int(x)), SCALAR))

    alone, edge = formula(xs[-1]), formula(kept_x[-1])
    return alone, kept_y[-1] * alone / edge if edge > 0 else alone


def main() -> None:
    """Print each component's errors for one and two knots left out, by rule."""
    errs: dict[tuple[str, int, str], list[float]] = {}
    for path in sorted(PROFILES.glob("*.yaml")):
        comps = yaml.safe_load(path.read_text(encoding="utf-8"))["components"]
        for name in SHAPES:
            comp = comps.get(name) or {}
            if len(comp.get("table_at", ())) < 12:
                continue
            xs = np.asarray(comp["table_at"], dtype=float)
            ys = np.asarray(comp["table_s"], dtype=float)
            for drop in (1, 2):
                for rule, guess in zip(("formula", "anchored"),
                                       predictions(name, xs, ys, drop), strict=True):
                    errs.setdefault((name, drop, rule), []).append(abs(guess / ys[-1] - 1))
    print("| component | knots left out | rule | points | median | p90 | max |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for (name, drop, rule), e in errs.items():
        a = np.asarray(e) * 100
        print(f"| {name} | {drop} | {rule} | {a.size} | {np.median(a):.1f}% "
              f"| {np.percentile(a, 90):.1f}% | {a.max():.1f}% |")


if __name__ == "__main__":
    main()
