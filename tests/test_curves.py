"""sim.cost.curves: knots and grids price exactly at their points, linearly between, and the
scalar and array paths agree."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cost.curves import Grid, Knots


def test_knots_hit_their_points_and_join_them_with_lines() -> None:
    k = Knots((1, 16, 17, 32), (1e-5, 2e-5, 4e-5, 5e-5))
    assert k.at(1) == 1e-5 and k.at(16) == 2e-5 and k.at(17) == 4e-5 and k.at(32) == 5e-5
    # Between one past a tile edge (17) and the next edge (32): a straight line.
    assert k.at(24.5) == pytest.approx(4e-5 + 1e-5 * 7.5 / 15, rel=1e-12)
    assert k.at(8.5) == pytest.approx(1e-5 + 1e-5 * 7.5 / 15, rel=1e-12)
    assert k.at(0.5) is None and k.at(33) is None
    got = k.over(np.array([1, 8.5, 16, 17, 24.5, 32, 33, 0]), -1.0)
    want = [1e-5, k.at(8.5), 2e-5, 4e-5, k.at(24.5), 5e-5, -1.0, -1.0]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_counts_knots_are_the_old_measured_tables() -> None:
    table = (3e-4, 5e-4, 7e-4, 4e-4)
    k = Knots.counts(table)
    assert k.xs == (1.0, 2.0, 3.0, 4.0)
    # Whole counts read the table exactly, as calibrate's tables always were.
    assert [k.at(n) for n in (1, 2, 3, 4)] == list(table)
    assert k.at(5) is None


def test_knots_reject_unordered_counts() -> None:
    with pytest.raises(ValueError, match="increasing"):
        Knots((1, 3, 2), (1.0, 2.0, 3.0))
    with pytest.raises(ValueError, match="3 knot counts"):
        Knots((1, 2, 3), (1.0, 2.0))


GRID = Grid((1, 2, 4), (2, 8, 32), ((1.0, 2.0, 5.0), (1.5, 3.0, 8.0), (2.0, 5.0, 14.0)))


def test_grid_is_bilinear_inside_and_proportional_past_its_edges() -> None:
    assert GRID.at(2, 8) == 3.0 and GRID.at(1, 2) == 1.0 and GRID.at(4, 32) == 14.0
    # Half way between rows 1 and 2 at column 8: (2 + 3) / 2; and between columns.
    assert GRID.at(1.5, 8) == pytest.approx(2.5)
    assert GRID.at(2, 20) == pytest.approx(3.0 + (8.0 - 3.0) * 12 / 24)
    # Twice the largest batch at the longest context reads twice the KV.
    assert GRID.at(8, 32) == pytest.approx(28.0)
    assert GRID.at(4, 64) == pytest.approx(28.0)
    assert GRID.at(8, 64) == pytest.approx(56.0)
    # Below the first column: held at it.
    assert GRID.at(2, 1) == 1.5


@settings(max_examples=200, deadline=None)
@given(st.floats(0.5, 20), st.floats(0.5, 100))
def test_grid_scalar_and_array_paths_agree(r: float, c: float) -> None:
    assert GRID.over(np.array([r]), np.array([c]))[0] == pytest.approx(GRID.at(r, c), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 40))
def test_knots_scalar_and_array_paths_agree(x: float) -> None:
    k = Knots((1, 2, 3, 16, 17, 32), (1.0, 1.5, 1.7, 3.0, 4.5, 6.0))
    one = k.at(x)
    arr = k.over(np.array([x]), np.nan)[0]
    if one is None:
        assert np.isnan(arr)
    else:
        assert arr == pytest.approx(one, rel=1e-12)
