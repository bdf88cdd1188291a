"""How a measured profile writes what it measured: numbers to six significant digits,
knot lists, a component's formula fitted past its last knot with its held-out error,
error statistics, and the one-count step shapes knots are priced at
(:mod:`sim.cost.tables.profileparts` and :mod:`sim.cost.tables.profilebuild` use them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.cost.profile import FORMS
from sim.cost.profilefit import fit_component
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.errors import ServesimError

FORMULA_FROM_TOKENS = 1024  # the formula past the knots is fitted on knots from here up


def sig6(x: float) -> float:
    """Six significant digits: what a profile keeps of a number."""
    return float(f"{x:.6g}")


def err_stats(errs: np.ndarray) -> dict[str, float | int]:
    """Median, p90 and maximum of relative errors ``errs`` (six digits), and their count."""
    e = np.asarray(errs, dtype=float)
    if not e.size:
        return {"points": 0}
    return {"median": sig6(float(np.median(e))), "p90": sig6(float(np.percentile(e, 90))),
            "max": sig6(float(e.max())), "points": int(e.size)}


def formula_fit(name: str, xs: np.ndarray, ys: np.ndarray, shape_at: Any) -> dict[str, Any]:
    """Fit ``name``'s formula to the knots at counts >= FORMULA_FROM_TOKENS (for prices
    past the last knot; at least the last 8); coefficients and held-out error."""
    # At least the last 8 knots: a coarse grid (A100's stops at 8,192) has few past 1,024.
    keep = (xs >= FORMULA_FROM_TOKENS) | (np.arange(len(xs)) >= len(xs) - 8)
    fit = fit_component(name, [shape_at(int(x)) for x in xs[keep]], list(ys[keep]))
    return {"coef": {k: sig6(v) for k, v in fit.coef.items()},
            "fit": {"mape_test": sig6(fit.mape_test), "max_err_test": sig6(fit.max_err_test),
                    "n_train": fit.n_train, "n_test": fit.n_test}}


def tokens_shape(n: int) -> StepShape:
    """The step shape of one prefill of ``n`` tokens with no context."""
    return shape_of([(n, 0)])


def seqs_shape(n: int) -> StepShape:
    """The step shape of ``n`` decodes with no context."""
    return decode_shape(n, 0)


def component_entry(name: str, coef: dict[str, float]) -> dict[str, Any]:
    """Component ``name``'s profile entry: its formula (``sim.cost.profile.FORMS``) with
    coefficients ``coef`` (seconds per unit) to six digits."""
    form = FORMS[name]
    return {"formula": form.formula, "per_layer": form.per_layer,
            "coef": {k: sig6(float(coef[k])) for k in form.coefs}}


def knot_lists(xs: np.ndarray, ys: np.ndarray) -> dict[str, list[float]]:
    """A measured curve's knots as a profile keeps them: counts ``xs`` and seconds ``ys``
    (refused when any is non-positive or not finite)."""
    if not np.all(np.isfinite(ys)) or np.any(ys <= 0):
        raise ServesimError("a measured curve came out non-positive or not finite")
    return {"table_at": [int(x) if float(x).is_integer() else sig6(x) for x in xs],
            "table_s": [sig6(float(y)) for y in ys]}
