"""Fit each component's coefficients to its measurements and report held-out errors.

Both routes to a profile fit here: ``calibrate`` (timings on the user's device) and
the public-table builder (:mod:`sim.cost.tables.profilebuild`). The formulas are
:data:`sim.cost.profile.FORMS`, the very functions the simulator evaluates. The fit
minimises *relative* error (what MAPE reports), with every coefficient ≥ 0 so each
keeps its physical meaning. Forms linear in their
coefficients are solved exactly (bounded linear least squares); the roofline-shaped
``max(weight_s, slope·x)`` forms are solved exactly for every split of the points
at the breakpoint, the best kept. Components with a measured table (linear,
LM head) keep their times at every small count as measured, and the formula is fitted
and tested on the larger counts only.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import lsq_linear

from sim.cost.profile import FORMS, ComponentForm
from sim.cost.shape import StepShape
from sim.errors import ServesimError

# Hold out one point in this many (every component keeps at least MIN_TEST out).
HOLDOUT_EVERY = 4
MIN_TEST = 2
# Breakpoints tried per breakpoint coefficient on the coarse pass (geometric, 1 to 1e9).
KNEE_CANDIDATES = 37
# Breakpoints in sequences never lie past this many (no batch holds more), so their
# coarse pass stops here, at the same spacing (then "none in range", as for all).
SEQ_KNEES = {"group_seqs", "sat_seqs"}
MAX_SEQS = 1e3


@dataclass(frozen=True)
class FitResult:
    """Coefficients (seconds) and relative errors of one component's fit."""

    component: str
    coef: dict[str, float]
    mape_train: float
    mape_test: float
    max_err_test: float
    n_train: int
    n_test: int
    table: tuple[float, ...] = ()   # seconds at counts 1..len(table), as measured
    # What the fit did with each input point, in input order: train, test, table, or
    # unused (a repeat of a tabled count).
    roles: tuple[str, ...] = ()
    # The counts ``table`` was measured at when they are not 1..len(table) (knots over a
    # whole sweep); () for those counts.
    table_at: tuple[float, ...] = ()


def stack(shapes: Sequence[StepShape]) -> StepShape:
    """One :class:`StepShape` of arrays from many scalar shapes (for vectorised evaluation)."""
    return StepShape(*(np.asarray(col, dtype=float) for col in zip(*shapes, strict=True)))


def split(n: int) -> np.ndarray:
    """Boolean held-out mask for ``n`` points (sorted by size by the caller).

    Interior points are held out, never the smallest or largest, so the test checks
    interpolation inside the measured range rather than extrapolation.
    """
    test = np.zeros(n, dtype=bool)
    if n < 4:
        return test
    test[2:n - 1:HOLDOUT_EVERY] = True
    if test.sum() < MIN_TEST:
        test[n // 2] = test[n // 2 - 1] = True
    return test


def relative_errors(pred: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|pred − y| / y, elementwise."""
    return np.abs(np.asarray(pred, dtype=float) - y) / y


def _predict(form: ComponentForm, x: np.ndarray, s: StepShape) -> np.ndarray:
    out = form.evaluate(dict(zip(form.coefs, x, strict=True)), s)
    return np.broadcast_to(np.asarray(out, dtype=float), s.seqs.shape)


def _columns(form: ComponentForm, s: StepShape, fixed: dict[str, float]) -> np.ndarray:
    """The form at unit value of each free coefficient (``fixed`` ones held), one column each."""
    free = [k for k in form.coefs if k not in fixed]
    cols = []
    for k in free:
        c = {**{j: 0.0 for j in form.coefs}, **fixed, k: 1.0}
        out = form.evaluate(c, s)
        cols.append(np.broadcast_to(np.asarray(out, dtype=float), s.seqs.shape))
    return np.stack(cols, axis=1)


def _solve(a: np.ndarray, y: np.ndarray, offset: np.ndarray | float = 0.0
           ) -> tuple[np.ndarray, float]:
    """Non-negative x minimising Σ((offset + a·x)/y − 1)²: (x, that sum). Empty columns get 0."""
    scale = np.abs(a).max(axis=0)
    used = scale > 0
    x = np.zeros(a.shape[1])
    if used.any():
        # Candidate breakpoints can make columns collinear; scipy then warns on the way
        # to a valid answer, and a non-finite one is simply not kept.
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            res = lsq_linear((a[:, used] / scale[used]) / y[:, None], 1.0 - offset / y,
                             bounds=(0, np.inf))
        # At the bound the solver stops a hair above zero, by an amount that depends on
        # the CPU's BLAS kernels: a coefficient worth under 1e-9 of every time it fits is
        # zero, so a rebuild writes the same file on any machine.
        sol = np.where(res.x < 1e-9, 0.0, res.x)
        x[used] = sol / scale[used]
    cost = float(np.sum(((offset + a @ x) / y - 1.0) ** 2))
    return x, cost if np.all(np.isfinite(x)) and np.isfinite(cost) else np.inf


def _fit_linear(form: ComponentForm, s: StepShape, y: np.ndarray,
                offset: np.ndarray | float = 0.0, times: float = 1.0) -> np.ndarray:
    """Coefficients of a form linear in them, fitting ``offset + times·form`` to ``y``."""
    if not form.knees:
        return _solve(_columns(form, s, {}) * times, y, offset)[0]

    # Breakpoint coefficients (counts): solve exactly at each candidate set, keep the best.
    # A coarse geometric grid over any plausible count first (and "none in range",
    # infinity), then a finer one around the best, one breakpoint at a time.
    def cost_at(knees: dict[str, float]) -> tuple[float, np.ndarray]:
        x, c = _solve(_columns(form, s, knees) * times, y, offset)
        return c, x

    coarse = [*np.geomspace(1.0, 1e9, KNEE_CANDIDATES), np.inf]
    seqs = [k for k in coarse if k <= MAX_SEQS * (1 + 1e-9)] + [np.inf]
    best: dict[str, float] = {}
    best_cost, best_x = np.inf, np.zeros(0)
    for combo in itertools.product(*(seqs if k in SEQ_KNEES else coarse for k in form.knees)):
        knees = dict(zip(form.knees, (float(k) for k in combo), strict=True))
        c, x = cost_at(knees)
        if c < best_cost * (1 - 1e-9):
            best, best_cost, best_x = knees, c, x
    step = (1e9 ** (1 / (KNEE_CANDIDATES - 1)))
    for name in form.knees:
        if not np.isfinite(best[name]):
            continue
        for k in np.geomspace(best[name] / step, best[name] * step, 13):
            knees = {**best, name: float(k)}
            c, x = cost_at(knees)
            if c < best_cost * (1 - 1e-9):
                best, best_cost, best_x = knees, c, x
    free = iter(best_x)
    # "No breakpoint in range" is written as a finite count past any plausible one.
    return np.array([min(best[k], 1e9) if k in best else next(free) for k in form.coefs])


def _fit_roofline(form: ComponentForm, s: StepShape, y: np.ndarray) -> np.ndarray:
    # Coefficients are (const_s, weight_s, slope) with x = new_tokens or seqs, and the
    # breakpoint b = weight_s / slope splits the points into a flat part (x ≤ b) and a
    # sloped one. For each split of the sorted points the form is linear in
    # (const, weight, slope): solved exactly, kept if its b falls inside the split. The
    # optimum either lies inside some split or at a measured x, so each measured x (and 0)
    # is also tried as b, with (const, slope) solved exactly. Exact, and the same answer
    # on every numpy and scipy, where a local optimiser's answer on this non-convex
    # problem moved between library versions.
    x = np.asarray(s.new_tokens if form.name == "linear" else s.seqs, dtype=float)
    xs = np.unique(x)
    ones = np.ones_like(x)
    best, best_cost = np.zeros(3), np.inf

    def keep(coef: np.ndarray, cost: float) -> None:
        nonlocal best, best_cost
        if cost < best_cost * (1 - 1e-12):
            best, best_cost = coef, cost
    for b in np.concatenate([[0.0], xs]):
        pair, cost = _nonneg_ls(np.stack([ones, np.maximum(x, b)], axis=1) / y[:, None])
        keep(np.array([pair[0], pair[1] * b, pair[1]]), cost)
    for k in range(1, len(xs)):
        left = x <= xs[k - 1]
        coef, cost = _nonneg_ls(np.stack([ones, left, np.where(left, 0.0, x)], axis=1)
                                / y[:, None])
        if coef[2] > 0 and xs[k - 1] <= coef[1] / coef[2] <= xs[k]:
            keep(coef, cost)
    return best


def _nonneg_ls(a: np.ndarray) -> tuple[np.ndarray, float]:
    """Non-negative c minimising Σ(a·c − 1)² over the rows of ``a`` (a few columns):
    every subset of columns is solved unconstrained, the best whose solution is ≥ 0 kept
    (the optimum is the unconstrained solution on its own support)."""
    ones = np.ones(len(a))
    best, best_cost = np.zeros(a.shape[1]), float(len(a))
    for n in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), n):
            sub = a[:, cols]
            if not np.any(sub):
                continue
            sol = np.linalg.lstsq(sub, ones, rcond=None)[0]
            if np.all(sol >= 0):
                c = np.zeros(a.shape[1])
                c[list(cols)] = sol
                cost = float(np.sum((a @ c - ones) ** 2))
                if cost < best_cost * (1 - 1e-12):
                    best, best_cost = c, cost
    return best, best_cost


def table_points(name: str, shapes: Sequence[StepShape], table_max: int) -> list[int]:
    """Indices of the points that form ``name``'s measured table: one per count 1, 2, ...
    up to ``table_max`` or the first count not measured, whichever comes first."""
    form = FORMS[name]
    if not form.table or not form.counts_table or table_max < 1:
        return []
    first: dict[float, int] = {}
    for i, sh in enumerate(shapes):
        first.setdefault(float(getattr(sh, form.table)), i)
    out: list[int] = []
    while len(out) < table_max and float(len(out) + 1) in first:
        out.append(first[float(len(out) + 1)])
    return out


def fit_component(name: str, shapes: Sequence[StepShape], y: Sequence[float],
                  table_max: int = 0) -> FitResult:
    """Fit component ``name`` to ``shapes`` timed at ``y`` seconds.

    Points are ordered by size, the held-out ones chosen by :func:`split`, and the
    coefficients fitted on the rest only, so ``mape_test`` is an honest estimate. With
    ``table_max`` and a component that has a table, the points at counts 1, 2, ...
    (:func:`table_points`) become the table and the formula is fitted on the others.
    """
    form = FORMS[name]
    tab = table_points(name, shapes, table_max)
    table = tuple(float(y[i]) for i in tab)
    roles = ["table" if i in tab else "unused" for i in range(len(y))]
    rest = list(range(len(y)))
    if tab:
        rest = [i for i in rest if float(getattr(shapes[i], form.table)) > len(tab)]
        shapes, y = [shapes[i] for i in rest], [y[i] for i in rest]
    need = len(form.coefs) + 1
    if len(y) < need + MIN_TEST:
        beyond = f" past its table of {len(tab)} counts" if tab else ""
        raise ServesimError(f"only {len(y)} measured points{beyond}, need {need + MIN_TEST} "
                            "to fit and test; raise --budget-s or check the skipped points",
                            where=f"components.{name}")
    ys = np.asarray(y, dtype=float)
    # Order by total work (sum of the shape's counts) so held-out points interleave sizes.
    order = np.argsort([sum(float(v) for v in sh) for sh in shapes], kind="stable")
    all_s = stack([shapes[i] for i in order])
    ys = ys[order]
    test = split(len(ys))
    for rank, i in enumerate(order):
        roles[rest[int(i)]] = "test" if test[rank] else "train"
    train_s = StepShape(*(col[~test] for col in all_s))
    test_s = StepShape(*(col[test] for col in all_s))
    fitter = _fit_linear if form.linear else _fit_roofline
    coef = fitter(form, train_s, ys[~test])
    err_train = relative_errors(_predict(form, coef, train_s), ys[~test])
    err_test = relative_errors(_predict(form, coef, test_s), ys[test])
    nan = float("nan")
    return FitResult(name, {k: float(v) for k, v in zip(form.coefs, coef, strict=True)},
                     float(err_train.mean()), float(err_test.mean()) if test.any() else nan,
                     float(err_test.max()) if test.any() else nan,
                     int((~test).sum()), int(test.sum()), table, tuple(roles))


def allreduce_coefs(layers: int, hidden: int, dtype_bytes: int, tp: int,
                    link_bw: float, link_latency_s: float) -> dict[str, float]:
    """Two ring all-reduces per layer from interconnect figures (one GPU cannot measure them).

    Each moves 2·(tp−1)/tp of the step's activations, new_tokens·hidden·dtype_bytes
    bytes, over a link of ``link_bw`` bytes/s, after a fixed ``link_latency_s``.
    """
    if tp == 1:
        return {"per_step_s": 0.0, "per_token_s": 0.0}
    return {"per_step_s": 2 * layers * link_latency_s,
            "per_token_s": 2 * layers * 2 * (tp - 1) / tp * hidden * dtype_bytes / link_bw}


def fit_in_situ(shapes: Sequence[StepShape], y: Sequence[float] | np.ndarray,
                base: Sequence[float] | np.ndarray, layers: int
                ) -> tuple[dict[str, float], np.ndarray]:
    """Fit the ``in_situ`` component to whole steps: (coefficients, its seconds per step).

    ``y`` are the timed steps and ``base`` what the operator components predict for
    them; the correction (per layer, times ``layers``) takes up the rest, minimising
    relative error with coefficients ≥ 0, so a device with no in-situ effect gets zeros.
    """
    form = FORMS["in_situ"]
    s = stack(shapes)
    ys, bs = np.asarray(y, dtype=float), np.asarray(base, dtype=float)
    x = _fit_linear(form, s, ys, offset=bs, times=float(layers))
    coef = {k: float(v) for k, v in zip(form.coefs, x, strict=True)}
    return coef, _predict(form, x, s) * layers
