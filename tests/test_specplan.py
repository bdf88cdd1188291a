"""Speculating requests' paths through the decode set worked out ahead in bulk
(sim/core/specplan.py): each planned row equals the path worked out for that request
alone, rows go only to the requests routed in the planned order, and a run that plans
equals the request-by-request run (tests/test_speculative.py checks that end to end)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.specplan import LOW, SHIFT, path, plan


def draws(seed: int, size: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """``size`` draws from 1 to ``q`` and their running sums from 0."""
    tokens = np.random.default_rng(seed).integers(1, q + 1, size).astype(np.int64)
    sums = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(tokens, out=sums[1:])
    return tokens, sums


def test_a_path_by_hand() -> None:
    # Draws 2, 1, 4, 3 from index 0; prompt 14 computed, 6 tokens owed, k + 1 = 4 slots,
    # blocks of 4. Verifies: 2 (ctx 14), 1 (16), 4 -> capped at 3 (17): three verifies,
    # the last bringing 1 token past what is owed. Blocks at each: ceil((ctx + 4) / 4)
    # = 5 (18 slots), 5 (20), 6 (21).
    tokens = np.array([2, 1, 4, 3], dtype=np.int64)
    sums = np.array([0, 2, 3, 7, 10], dtype=np.int64)
    packed, start, ticks, over, last, off, bs = path(tokens, sums, 0, 14, 6, 4, 4, 4)
    row = packed[start:start + ticks]
    assert (ticks, over, last, off, bs) == (3, 1, 6, 0, 4)
    assert (row & LOW).tolist() == [2, 1, 4]
    assert (row >> SHIFT).tolist() == [5, 5, 6]


def test_blocks_never_fall_below_those_held() -> None:
    # Holding 9 blocks of 4 (more than its first verify reaches): 9 at every verify.
    tokens = np.array([1, 1, 1], dtype=np.int64)
    sums = np.array([0, 1, 2, 3], dtype=np.int64)
    packed, start, ticks, *_ = path(tokens, sums, 0, 10, 3, 9, 2, 4)
    assert (packed[start:start + ticks] >> SHIFT).tolist() == [9, 9, 9]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), q=st.integers(2, 9), bs=st.sampled_from([1, 4, 16, 24]),
       first=st.integers(0, 50), n=st.integers(1, 40))
def test_planned_rows_equal_paths_worked_out_alone(seed: int, q: int, bs: int, first: int,
                                                   n: int) -> None:
    rng = np.random.default_rng(seed + 1)
    outputs = rng.integers(1, 60, n)
    prompts = rng.integers(1, 300, n)
    tokens, sums = draws(seed, 1200, q)
    ids = np.arange(100, 100 + n)
    pl = plan(tokens, sums, first, ids, prompts, outputs, q, bs)
    at = first
    for rid, prompt, output in zip(ids.tolist(), prompts.tolist(), outputs.tolist(),
                                   strict=True):
        owed = output - 1
        if at + owed > len(tokens):
            assert not pl.take(rid, at)[0]  # past the chunk: not planned
            break
        hit, row = pl.take(rid, at)
        assert hit
        if owed == 0:
            assert row is None
        else:
            assert row is not None
            alone = path(tokens, sums, at, prompt, owed, -(-prompt // bs), q, bs)
            packed, start, ticks, *rest = row
            assert ticks == alone[2] and rest == list(alone[3:])
            np.testing.assert_array_equal(packed[start:start + ticks], alone[0])
        # Its draws end where their sum first reaches what it owes; the next one's begin.
        end = at + ticks if owed else at
        assert end == pl.ends[pl.next - 1]
        assert owed == 0 or sums[end - 1] - sums[at] < owed <= sums[end] - sums[at]
        at = end


def test_rows_go_only_to_the_planned_order() -> None:
    # Draws from index 5: 2, 1, 4, 3, 1, 1 (by hand). Request 0 owes 3 tokens: draws 5
    # and 6 (2 + 1); request 1 owes 5: draws 7 and 8 (4 + 3, the last capped); request
    # 2 owes 1: draw 9.
    tokens = np.array([1] * 5 + [2, 1, 4, 3, 1, 1] + [1] * 9, dtype=np.int64)
    sums = np.concatenate([[0], np.cumsum(tokens)])
    pl = plan(tokens, sums, 5, np.arange(3), np.array([10, 10, 10]), np.array([4, 6, 2]), 4, 16)
    assert pl.ends == [7, 9, 10]
    assert not pl.take(1, 5)[0]  # request 0 comes first
    assert not pl.take(0, 6)[0]  # at draw 5, not 6
    assert pl.take(0, 5)[0] and pl.take(1, 7)[0] and pl.take(2, 9)[0]
    assert not pl.take(3, 10)[0]


@pytest.mark.parametrize("policy", ["continuous", "orca", "chunked"])
def test_a_run_plans_the_paths_of_requests_routed_in_order(
        policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_speculative import spec_scenario

    import sim.core.specset as specset
    from sim.core.engine import simulate
    from sim.core.speculation import Speculation

    made: list[Speculation] = []
    init = Speculation.__init__

    def keep(self: Speculation, *args: object) -> None:
        init(self, *args)  # type: ignore[arg-type]
        made.append(self)

    alone: list[int] = []  # joins that worked their path out alone

    def count(*args: object) -> object:
        alone.append(1)
        return path(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(specset, "path", count)
    Speculation.__init__ = keep  # type: ignore[method-assign]
    try:
        simulate(spec_scenario(policy, workload={
            "arrivals": {"process": "poisson", "rate": 20.0}, "num_requests": 300,
            "lengths": {"prompt": {"dist": "fixed", "value": 8},
                        "output": {"dist": "fixed", "value": 40}}}))
    finally:
        Speculation.__init__ = init  # type: ignore[method-assign]
    assert len(made) == 1 and made[0].planned == 300 and made[0].planning
    # Each request joined the decode set once, with its planned path; under orca too,
    # whose members hold their whole life's blocks (which the plan does not count) from
    # admission: the reserved set never reads a path's blocks.
    assert not alone
