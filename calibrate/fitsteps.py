"""Fits a calibration makes beyond one component's formula (:mod:`calibrate.run`): a
mixture of experts' mean layer and its linear stack as knots, and the in-situ term fitted
on whole steps with two-fold cross-validation.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from calibrate.grids import DENSE_LINEAR
from calibrate.records import Measurement
from sim.cost.curves import Knots
from sim.cost.profile import FORMS, SCALAR
from sim.cost.profilecost import ProfileCost
from sim.cost.profilefit import FitResult, fit_in_situ, relative_errors
from sim.cost.specs import ModelSpec


def layer_mean(model: ModelSpec, good: list[Measurement], ops: list[Measurement]
                ) -> tuple[list[Measurement], list[float]]:
    """The linear stack's points and their seconds as the mean layer of ``model``.

    A dense model's and a mixture of experts without dense layers' are their medians. A
    mixture with ``dense_layers`` has each point's expert-layer time and the dense
    layer's at the same count (:data:`DENSE_LINEAR`) averaged over the layers, as the
    profile builder averages its tables' layers; a count whose dense point is missing
    (an early stop, a failure) is left out."""
    if not (model.experts and model.dense_layers):
        return good, [m.timing.median_s for m in good if m.timing]
    dense = {m.point.entries: m.timing.median_s for m in ops
             if m.point.component == DENSE_LINEAR and m.status == "ok" and m.timing}
    share = model.dense_layers / model.layers
    kept = [m for m in good if m.timing and m.point.entries in dense]
    return kept, [(1 - share) * m.timing.median_s + share * dense[m.point.entries]
                  for m in kept if m.timing]


def sweep_knots(fit: FitResult, good: list[Measurement], ys: list[float]) -> FitResult:
    """A mixture of experts' linear stack as the public-table profiles price it: knots at
    every measured count, the formula past the last.

    Each expert the step's tokens touch runs (and reads its weights) once, and the
    touched experts grow with the tokens until all are, so the time rises steeply,
    bends, then grows with the FLOPs: no one ``max(weight, slope)`` line follows that
    bend. The knots are the table and training points (the formula's held-out points
    are not knots), joined linearly, and the held-out error reported is the knots'
    own at those held-out points."""
    form = FORMS["linear"]
    roles = fit.roles
    knots = sorted((m.shape.new_tokens, y) for m, y, r in zip(good, ys, roles, strict=True)
                   if r in ("table", "train"))
    curve = Knots(tuple(x for x, _ in knots), tuple(y for _, y in knots))
    held = [(m.shape, y) for m, y, r in zip(good, ys, roles, strict=True) if r == "test"]
    pred = [curve.at(s.new_tokens) for s, _ in held]
    errs = relative_errors(np.array([form.evaluate(fit.coef, s, SCALAR) if p is None else p
                                     for (s, _), p in zip(held, pred, strict=True)]),
                           np.array([y for _, y in held]))
    nan = float("nan")
    return dataclasses.replace(fit, mape_train=0.0,
                               mape_test=float(errs.mean()) if len(errs) else nan,
                               max_err_test=float(errs.max()) if len(errs) else nan,
                               table=curve.ys, table_at=curve.xs)


def knots_note(fit: FitResult, formula: FitResult) -> str:
    """What the profile says of a mixture of experts' linear knots (``fit``), beside
    the held-out error its formula alone (``formula``) would have had."""
    return (f"linear (mixture of experts): priced by {len(fit.table)} measured knots at "
            f"{fit.table_at[0]:g}-{fit.table_at[-1]:g} tokens, its formula past them; its "
            f"held-out error is the knots' at {fit.n_test} points left out of them "
            f"(mean {fit.mape_test:.1%}, worst {fit.max_err_test:.1%}; the formula alone "
            f"past the table: mean {formula.mape_test:.1%}, worst {formula.max_err_test:.1%})")


def fit_steps_in_situ(cost: ProfileCost, layers: int, done: list[Measurement]
                 ) -> tuple[FitResult, np.ndarray, np.ndarray]:
    """Fit ``in_situ`` on the whole steps; (its fit, out-of-fold errors with and without).

    Two-fold cross-validation: steps are split alternately in order of size (folds
    ``cv-a`` and ``cv-b``, both spanning the range), each fold is predicted by the term
    fitted on the other, and those out-of-fold errors are what the profile reports. The
    coefficients kept are then fitted on every step: a handful of small steps whose
    times move by 10-20% with what ran before them leave an 8-coefficient fit on half
    of them noticeably noisier. Each step records its out-of-fold prediction. The
    all-reduce term is left out (one GPU cannot run it), and so is the host work
    between steps (a whole step is timed alone, not in a serving loop).
    """
    check = cost.with_layers(layers)
    y = np.array([m.timing.mean_s for m in done if m.timing])
    base = np.array([sum(float(v) for k, v in check.breakdown(m.shape).items()
                         if k not in ("allreduce", "in_situ", "host")) for m in done])
    order = np.argsort(y, kind="stable")
    fold_b = np.zeros(len(done), dtype=bool)
    fold_b[order[1::2]] = True
    shapes = [m.shape for m in done]
    form = FORMS["in_situ"]
    pred = base.copy()
    train_errs = []
    for held in (fold_b, ~fold_b):
        coef, fitted = fit_in_situ([s for s, h in zip(shapes, held, strict=True) if not h],
                                   y[~held], base[~held], layers)
        extra = np.array([float(form.evaluate(coef, s)) * layers for s in shapes])
        pred[held] = base[held] + extra[held]
        train_errs.append(relative_errors(base[~held] + fitted, y[~held]))
    coef, _ = fit_in_situ(shapes, y, base, layers)
    cost.coefs["in_situ"] = coef
    for m, p, b in zip(done, pred, fold_b, strict=True):
        m.split = "cv-b" if b else "cv-a"
        m.predicted_s = float(p)
    errs = relative_errors(pred, y)
    fit = FitResult("in_situ", coef, float(np.concatenate(train_errs).mean()),
                    float(errs.mean()), float(errs.max()), len(done), len(done))
    return fit, errs, relative_errors(base, y)
