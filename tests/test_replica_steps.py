"""A replica's iteration, one step at a time (sim/core/replica.py, sim/core/batch.py):
schedule returns the whole iteration, price is the cost model's seconds for its shape,
advance moves tokens without a clock, deliver stamps times and finishes requests.

Each step is called alone on a replica whose process never runs. Cost: 10 ms per step
+ 1 ms per new token (linear), block size 4, as in tests/test_engine_handworked.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import tiny_scenario

from sim.core.batch import Batch, advance
from sim.core.engine import Engine, build_cost
from sim.core.replica import Replica
from sim.core.request import FINISHED, PENDING, Request
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.workload.requests import Requests


def replica(lazy: bool = True, **serving: Any) -> Replica:
    """Replica 0 of an engine built for three requests that are never dispatched."""
    sc = tiny_scenario(serving=serving)
    req = Requests(np.full(3, 100.0), np.full(3, 8, dtype=np.int64), np.full(3, 3, dtype=np.int64))
    engine = Engine(sc, req, build_cost(sc), np.random.default_rng(0), lazy_decodes=lazy)
    return engine.replicas[0]


def queue(rep: Replica, *lengths: tuple[int, int]) -> list[Request]:
    """Put requests of (prompt, output) tokens in the waiting queue, ids from 0."""
    reqs = [Request(i, 0.0, p, o) for i, (p, o) in enumerate(lengths)]
    rep.waiting.extend(reqs)
    rep.outstanding += sum(p + o for p, o in lengths)
    return reqs


def run_one(rep: Replica, now: float) -> Batch:
    """Schedule, advance and deliver one iteration ending at ``now`` (s)."""
    batch = rep.schedule()
    rep.deliver(batch, advance(batch), now)
    return batch


@pytest.mark.parametrize("lazy", [True, False])
def test_schedule_returns_the_whole_iteration_with_or_without_the_decode_set(lazy: bool) -> None:
    # A (8 tokens, 3 out) and B (4 tokens, 3 out) prefill together, then both decode.
    rep = replica(lazy)
    a, b = queue(rep, (8, 3), (4, 3))
    first = run_one(rep, 0.022)
    assert dict(first) == {a: 8, b: 4} and first.group is None
    decode = rep.schedule()
    # The same iteration either way: two one-token decodes at contexts 8 and 4.
    assert decode.seqs == 2
    assert decode.shape() == decode_shape(2, 12)
    assert decode.log_entries(rep.running) == [(0, 1, 8), (1, 1, 4)]
    if lazy:  # the decode set computes it in O(1): no entry is listed
        assert dict(decode) == {} and decode.group is rep.group
    else:
        assert dict(decode) == {a: 1, b: 1} and decode.group is None


def test_an_empty_schedule_runs_nothing() -> None:
    rep = replica()
    batch = rep.schedule()
    assert batch.seqs == 0 and batch.shape().seqs == 0 and batch.log_entries([]) == []


def test_price_is_the_step_time_plus_wake_and_swap() -> None:
    rep = replica()
    shape = StepShape(3, 10, 40, 1, 8, 36, 42)
    assert rep.price(shape, None) == pytest.approx(0.010 + 0.010)

    class WakingCost:
        def step_time(self, s: StepShape) -> float:
            return 0.001 * s.seqs

        def wake_time(self, idle_s: float) -> float:
            return min(idle_s, 0.5) * 0.01

    waking = Replica(1, rep.engine, rep.policy, WakingCost(), rep.kv)
    assert waking.price(shape, None) == pytest.approx(0.003)
    assert waking.price(shape, 2.0) == pytest.approx(0.003 + 0.005)
    waking.swap_s = 0.004  # PCIe seconds of the blocks swapped for this iteration
    assert waking.price(shape, 0.1) == pytest.approx(0.003 + 0.001 + 0.004)
    assert waking.swap_s == 0.004  # pricing reads it; the process clears it


def test_advance_moves_tokens_and_touches_no_block_or_clock() -> None:
    # A: a 5-token chunk of its 8-token prompt (no token out); B: its whole 4-token
    # prompt (first token); C: its last decode (8 cached, 2 of 3 out: finishes).
    a, b, c = Request(0, 0.0, 8, 3), Request(1, 0.0, 4, 3), Request(2, 0.0, 7, 3)
    c.computed, c.generated, c.last_token = 8, 2, 0.25
    batch = Batch()
    batch[a], batch[b], batch[c] = 5, 4, 1
    emitted, finished = advance(batch)
    assert (a.computed, a.generated) == (5, 0)
    assert (b.computed, b.generated) == (4, 1)
    assert (c.computed, c.generated) == (9, 3)
    assert emitted == [b, c] and finished == [c]
    assert c.last_token == 0.25 and c.blocks == 0


def test_deliver_stamps_times_finishes_and_joins_the_decode_set() -> None:
    rep = replica()
    a, b = queue(rep, (8, 2), (4, 3))
    run_one(rep, 0.022)  # both prefill: first tokens at 22 ms
    assert rep.engine.first_token[:2].tolist() == [0.022, 0.022]
    assert rep.group is not None and rep.group.n == 2  # steady decodes joined
    assert rep.outstanding == (8 + 2 + 4 + 3) - (8 + 4) - 2
    assert rep.kv.used == 3  # A's 8 tokens fill 2 blocks, B's 4 one
    batch = rep.schedule()
    assert rep.kv.used == 5  # each one's next token opens a block
    em = advance(batch)
    assert em == ((), ())  # nothing listed: the set's members move when delivered
    assert (a.generated, a.last_token) == (1, 0.022)
    rep.deliver(batch, em, 0.034)
    assert rep.engine.finish[0] == 0.034 and rep.engine.status[0] == FINISHED
    assert rep.engine.status[1] == PENDING and np.isnan(rep.engine.finish[1])
    assert rep.running == [b] and a.last_token == 0.034
    assert rep.kv.used == 2  # A's 3 blocks came back
    rep.itl.flush()
    assert (rep.itl.total, rep.itl.max) == (2, pytest.approx(0.012))
    assert rep.outstanding == 1  # B's last token


def test_a_mixed_iteration_counts_the_decode_set_and_the_chunks() -> None:
    # chunked, budget 8: A (8 tokens, 4 out) prefills whole and becomes a steady decode;
    # next iteration A decodes as the set's member while B's 12-token prompt takes the
    # other 7 tokens of the budget as a chunk.
    rep = replica(policy="chunked", token_budget=8)
    assert rep.group is not None
    a, b = queue(rep, (8, 4))[0], Request(1, 0.0, 12, 2)
    run_one(rep, 0.018)
    rep.waiting.append(b)
    batch = rep.schedule()
    assert dict(batch) == {b: 7} and batch.group is rep.group and batch.seqs == 2
    assert batch.shape() == shape_of([(1, 8), (7, 0)])
    assert batch.log_entries(rep.running) == [(0, 1, 8), (1, 7, 0)]
    assert rep.price(batch.shape(), None) == pytest.approx(0.010 + 0.008)
    rep.deliver(batch, advance(batch), 0.036)
    assert (a.generated, b.computed, b.generated) == (1, 7, 0)  # A's fields are lazy
    rep.group.flush(rep.running)  # ... until the set writes them back
    assert (a.computed, a.generated, a.last_token) == (9, 2, 0.036)
