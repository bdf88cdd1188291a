"""sim.cost.profilefit: known coefficients are recovered from noisy synthetic timings."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost.profile import FORMS
from sim.cost.profilefit import allreduce_coefs, fit_component, fit_in_situ, split, table_points
from sim.cost.shape import StepShape, shape_of
from sim.errors import ServesimError


def synthetic(name: str, coef: dict[str, float], shapes: list[StepShape], noise: float,
              seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    clean = [float(FORMS[name].evaluate(coef, s)) for s in shapes]
    return [t * (1 + rng.normal(0, noise)) for t in clean]


def test_split_holds_out_interior_points() -> None:
    test = split(15)
    assert test.sum() >= 3 and not test[0] and not test[-1]
    assert split(5).sum() == 2 and split(3).sum() == 0


def test_roofline_linear_recovered() -> None:
    # Weight-bound below ~200 tokens, FLOP-bound above: the knee must be found.
    truth = {"const_s": 1e-4, "weight_s": 4e-4, "per_token_s": 2e-6}
    shapes = [shape_of([(n, 0)]) for n in (1, 2, 4, 8, 16, 32, 64, 96, 128, 192, 256, 384,
                                            512, 768, 1024, 2048, 4096)]
    fit = fit_component("linear", shapes, synthetic("linear", truth, shapes, 0.01))
    # The slopes are well determined; const_s and weight_s trade off only through the
    # knee, so const_s gets a looser bound.
    assert fit.coef["weight_s"] == pytest.approx(4e-4, rel=0.1)
    assert fit.coef["per_token_s"] == pytest.approx(2e-6, rel=0.1)
    assert fit.coef["const_s"] == pytest.approx(1e-4, rel=0.3)
    assert fit.mape_test < 0.03 and fit.n_test >= 3


def test_lm_head_recovered() -> None:
    truth = {"const_s": 1e-5, "weight_s": 3e-4, "per_seq_s": 3e-6}
    shapes = [shape_of([(1, 0)] * s) for s in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)]
    fit = fit_component("lm_head", shapes, synthetic("lm_head", truth, shapes, 0.02, seed=1))
    assert fit.coef["weight_s"] == pytest.approx(3e-4, rel=0.1)
    assert fit.coef["per_seq_s"] == pytest.approx(3e-6, rel=0.15)


def test_small_counts_become_a_table_and_the_formula_fits_the_rest() -> None:
    # A kernel that handles rows in blocks of four: 3 rows cost more than 4 (as measured
    # on the CPU); past the table a roofline that no small count disturbs.
    truth = {"const_s": 1e-4, "weight_s": 4e-4, "per_token_s": 2e-6}
    small = [3.0e-4, 4.4e-4, 5.9e-4, 5.0e-4, 6.2e-4, 6.4e-4, 7.6e-4, 6.6e-4]
    big = [shape_of([(n, 0)]) for n in (12, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)]
    shapes = [shape_of([(n, 0)]) for n in range(1, 9)] + big
    y = small + synthetic("linear", truth, big, 0.01)
    fit = fit_component("linear", shapes, y, table_max=8)
    assert fit.table == tuple(small)
    assert fit.n_train + fit.n_test == len(big)
    assert fit.roles[:8] == ("table",) * 8
    assert fit.roles.count("test") == fit.n_test and fit.roles.count("train") == fit.n_train
    assert fit.coef["per_token_s"] == pytest.approx(2e-6, rel=0.1)
    assert fit.mape_test < 0.03
    # Without table_max every point is the formula's.
    plain = fit_component("linear", shapes, y)
    assert plain.table == () and plain.n_train + plain.n_test == len(shapes)


def test_table_stops_at_the_first_count_not_measured() -> None:
    # Counts 1, 2, 4, 5 (3 failed): the table holds 1-2 and 4, 5 go to the formula.
    shapes = [shape_of([(1, 0)] * s) for s in (5, 1, 2, 4, 1)]
    assert table_points("lm_head", shapes, 8) == [1, 2]
    assert table_points("lm_head", shapes, 1) == [1]
    assert table_points("lm_head", shapes, 0) == []
    assert table_points("decode_attention", shapes, 8) == []  # no table for this component
    more = [shape_of([(1, 0)] * s) for s in (16, 32, 64, 128, 256, 512)]
    fit = fit_component("lm_head", shapes + more, [1e-4] * 5 + [1e-3] * 6, table_max=8)
    assert fit.table == (1e-4, 1e-4) and fit.n_train + fit.n_test == 8
    # The second point at count 1 repeats a tabled count: neither table nor formula.
    assert fit.roles[1:3] == ("table", "table") and fit.roles[4] == "unused"
    assert set(fit.roles[:1] + fit.roles[3:4] + fit.roles[5:]) <= {"train", "test"}
    with pytest.raises(ServesimError, match="past its table of 2 counts"):
        fit_component("lm_head", shapes, [1e-4] * 5, table_max=8)


def test_linear_in_coefficient_forms_recovered() -> None:
    # A tiled causal kernel: the whole square up to 256-token chunks, the triangle past.
    truth = {"const_s": 0.0, "per_seq_s": 1e-5, "per_token_s": 2e-7, "per_context_token_s": 5e-8,
             "per_self_pair_s": 2e-10, "per_block_pair_s": 2e-10, "block_tokens": 256.0,
             "per_context_pair_s": 1e-10}
    shapes = [shape_of([(n, c)] * k) for n in (16, 64, 256, 1024, 3000) for c in (0, 512, 2048)
              for k in (1, 3)]
    fit = fit_component("prefill_attention", shapes,
                        synthetic("prefill_attention", truth, shapes, 0.01, seed=2))
    for key in ("per_seq_s", "per_token_s", "per_context_token_s", "per_context_pair_s"):
        assert fit.coef[key] == pytest.approx(truth[key], rel=0.2), key
    assert fit.coef["block_tokens"] == pytest.approx(256, rel=0.3)
    for n in (128, 512, 2048, 4000):
        s = shape_of([(n, 0)])
        assert float(FORMS["prefill_attention"].evaluate(fit.coef, s)) == pytest.approx(
            float(FORMS["prefill_attention"].evaluate(truth, s)), rel=0.05), n


def test_breakpoints_recovered() -> None:
    # Decode attention: launches stop growing past 8 groups; KV reads cost more past 20k.
    truth = {"const_s": 1e-5, "per_seq_s": 1e-6, "per_group_s": 1e-5, "group_seqs": 8.0,
             "per_kv_token_s": 1e-8, "per_spill_token_s": 2e-8, "spill_kv": 20000.0}
    shapes = [shape_of([(1, c)] * b) for b in (1, 2, 4, 8, 16, 32, 64, 128)
              for c in (30, 100, 300, 1000, 3000)]
    fit = fit_component("decode_attention", shapes,
                        synthetic("decode_attention", truth, shapes, 0.01, seed=3))
    assert fit.coef["group_seqs"] == pytest.approx(8, rel=0.25)
    assert fit.coef["spill_kv"] == pytest.approx(20000, rel=0.25)
    for key in ("per_group_s", "per_kv_token_s", "per_spill_token_s"):
        assert fit.coef[key] == pytest.approx(truth[key], rel=0.2), key
    assert fit.mape_test < 0.03


def test_no_breakpoint_in_range_means_no_spill() -> None:
    truth = {"const_s": 1e-5, "per_seq_s": 2e-6, "per_group_s": 0.0, "group_seqs": 1e9,
             "per_kv_token_s": 1e-8, "per_spill_token_s": 0.0, "spill_kv": 1e9}
    shapes = [shape_of([(1, c)] * b) for b in (1, 4, 16, 64) for c in (100, 1000, 4000)]
    fit = fit_component("decode_attention", shapes,
                        synthetic("decode_attention", truth, shapes, 0.005, seed=4))
    s = shape_of([(1, 4000)] * 64)
    pred = float(FORMS["decode_attention"].evaluate(fit.coef, s))
    assert pred == pytest.approx(float(FORMS["decode_attention"].evaluate(truth, s)), rel=0.05)
    assert fit.coef["per_kv_token_s"] == pytest.approx(1e-8, rel=0.1)


def test_in_situ_takes_up_what_the_operators_miss() -> None:
    # Eviction grows with the KV read until 20k tokens, then stays.
    # Steps of several decode entries pay 1e-5 more than those of one; a prefill pays
    # 1e-4 plus 2e-10 per causal query-key pair.
    truth = {"const_s": 2e-5, "multi_s": 1e-5, "per_seq_s": 0.0, "sat_seqs": 1e9,
             "per_kv_token_s": 5e-9, "evict_kv": 20000.0, "per_prefill_s": 1e-4,
             "per_prefill_pair_s": 2e-10}
    shapes = [shape_of([(1, c)] * b) for b in (1, 2, 8, 32, 64) for c in (100, 300, 1000, 3000)]
    shapes += [shape_of([(n, 0)]) for n in (64, 256, 1000, 2000, 4000)]
    base = np.array([1e-3 * (1 + i) for i in range(len(shapes))])
    extra = np.array([float(FORMS["in_situ"].evaluate(truth, s)) * 4 for s in shapes])
    coef, got = fit_in_situ(shapes, list(base + extra), list(base), layers=4)
    np.testing.assert_allclose(got, extra, rtol=0.02, atol=1e-7)
    assert coef["const_s"] == pytest.approx(2e-5, rel=0.05)
    assert coef["multi_s"] == pytest.approx(1e-5, rel=0.1)
    assert coef["evict_kv"] == pytest.approx(20000, rel=0.2)
    assert coef["per_prefill_s"] == pytest.approx(1e-4, rel=0.05)
    assert coef["per_prefill_pair_s"] == pytest.approx(2e-10, rel=0.05)
    # Operators that already explain every step leave nothing to correct.
    coef, got = fit_in_situ(shapes, list(base), list(base), layers=4)
    assert np.all(got == 0)
    assert all(v == 0 for k, v in coef.items() if k not in ("evict_kv", "sat_seqs"))


def test_coefficients_stay_non_negative_and_errors_are_reported() -> None:
    # Timings that fall with size would need a negative slope; the fit must refuse it.
    shapes = [shape_of([(1, 0)] * s) for s in range(1, 11)]
    fit = fit_component("step", shapes, [1e-3 / s for s in range(1, 11)])
    assert all(v >= 0 for v in fit.coef.values())
    assert fit.mape_test > 0.1  # and the poor fit shows in the held-out error


def test_too_few_points_is_a_clear_error() -> None:
    shapes = [shape_of([(n, 0)]) for n in (1, 2, 3)]
    with pytest.raises(ServesimError, match="components.linear: only 3 measured points"):
        fit_component("linear", shapes, [1e-3, 2e-3, 3e-3])


def test_allreduce_from_interconnect_figures() -> None:
    assert allreduce_coefs(32, 4096, 2, 1, 450e9, 8e-6) == {"per_step_s": 0.0, "per_token_s": 0.0}
    c = allreduce_coefs(32, 4096, 2, 4, 450e9, 8e-6)
    assert c["per_step_s"] == pytest.approx(64 * 8e-6)
    assert c["per_token_s"] == pytest.approx(64 * 1.5 * 4096 * 2 / 450e9)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("quick", [True, False])
def test_every_grid_leaves_each_operator_enough_points_to_fit(device: str, quick: bool) -> None:
    """A GPU calibration cannot be run here, so its grids are checked on paper: every
    count 1..table_max is timed, and each component keeps enough points past its table."""
    from calibrate.grids import OPERATORS, grid_for, operator_points
    from sim.cost.presets import MODELS
    from sim.cost.profilefit import table_points as tabled

    g = grid_for(device, quick)
    model = MODELS["llama-3-8b" if device == "cuda" else "tiny"]
    points = operator_points(model, g)
    for name in OPERATORS:
        shapes = [shape_of(p.entries) for p in points if p.component == name]
        tab = tabled(name, shapes, g.table_max)
        count = FORMS[name].table if FORMS[name].counts_table else ""
        if count:
            assert len(tab) == g.table_max > 0, name
            shapes = [s for s in shapes if float(getattr(s, count)) > len(tab)]
        assert len(shapes) >= len(FORMS[name].coefs) + 1 + 2, (name, len(shapes))


@pytest.mark.parametrize("name", ["linear", "lm_head"])
def test_roofline_form_is_solved_exactly(name: str) -> None:
    """Noiseless points of const + max(weight, slope·x) with the breakpoint between two
    measured counts (x* = 100 between 64 and 128) give back the three coefficients."""
    slope = "per_token_s" if name == "linear" else "per_seq_s"
    truth = {"const_s": 2e-5, "weight_s": 3e-4, slope: 3e-6}
    counts = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    shapes = [shape_of([(n, 0)]) if name == "linear" else shape_of([(1, 0)] * n)
              for n in counts]
    fit = fit_component(name, shapes, synthetic(name, truth, shapes, 0.0))
    for key, value in truth.items():
        assert fit.coef[key] == pytest.approx(value, rel=1e-9), key
    assert fit.mape_test < 1e-12


def test_a_coefficient_at_its_bound_is_exactly_zero() -> None:
    # y is a constant 2: the per-u coefficient belongs at its bound. The bounded solver
    # stops it a hair above zero (3e-16 of the step here), by an amount that varies with
    # the CPU's BLAS kernels; it must come out 0.0, so that a profile rebuilt on another
    # machine is the same file.
    from sim.cost.profilefit import _solve

    u = np.linspace(1.0, 50.0, 40)
    x, cost = _solve(np.stack([np.ones_like(u), u], axis=1), np.full_like(u, 2.0))
    assert x[1] == 0.0
    assert x[0] == pytest.approx(2.0, rel=1e-9) and cost < 1e-20
