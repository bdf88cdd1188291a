"""calibrate.host: the serving loop's host work, timed on the reference loop."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from calibrate.executor import ModelExecutor
from calibrate.host import (
    MIN_SLOTS,
    STEPS_PER_SIZE,
    HostTimes,
    fitting_slots,
    time_host,
    time_loop_terms,
    workload,
)
from calibrate.model import build_decoder
from sim.cost.presets import MODELS
from sim.cost.shard import shard


def test_workload_shrinks_the_batch_by_one_every_few_steps() -> None:
    arrival, prompt, output = workload(8, 1000, np.random.default_rng(3))
    k = STEPS_PER_SIZE
    assert np.all(arrival == 0)
    assert sorted(output.tolist()) == [2 + k * i for i in range(8)]
    assert prompt.min() >= 8 and prompt.max() < 64
    # Same seed, same requests; a tight cache caps outputs instead of overflowing it.
    again = workload(8, 1000, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(again, (arrival, prompt, output),
                                                      strict=True))
    _, p, o = workload(8, 80, np.random.default_rng(3))
    assert int((p + o).max()) <= 80


def test_loop_intervals_follow_the_batch_sizes_hand_worked() -> None:
    """8 slots: one prefill step admits all, then decode step j holds the requests with
    output >= j + 1. With outputs 2, 10, ..., 58 that is 8 sequences once, then 7 down
    to 1 eight times each; the interval before each step after the first is recorded."""
    torch.manual_seed(0)
    with torch.inference_mode():
        model = build_decoder(shard(MODELS["tiny"], 1), 2, 256, "fp32", torch.device("cpu"))
        ex = ModelExecutor(model, model.caches(8, 256), torch.device("cpu"))
        times = time_host(ex, 4096, seed=0)
    k = STEPS_PER_SIZE
    assert list(times.seqs) == [8] + [b for b in range(7, 0, -1) for _ in range(k)]
    # Every interval is recorded and positive (how long they are is the machine's).
    assert all(0 < t < float("inf") for t in times.host_s)
    points = times.measurements()
    # Size 8 was seen once, too few for a point; every other size is a point of k samples.
    assert [len(m.point.entries) for m in points] == list(range(1, 8))
    assert all(m.timing is not None and len(m.timing.samples) == k for m in points)
    assert {m.point.component for m in points} == {"host"}


def test_measurements_keep_each_sizes_intervals_in_order() -> None:
    t = HostTimes((2, 1, 2, 2, 1, 3), (1e-5, 2e-5, 3e-5, 4e-5, 5e-5, 6e-5))
    points = t.measurements()
    assert [p.point.label for p in points] == ["loop seqs=2"]  # sizes 1, 3: too few
    assert points[0].timing is not None
    assert points[0].timing.samples == (1e-5, 3e-5, 4e-5)


def test_fitting_slots_hand_worked() -> None:
    """16 slots, a decode of 1 sequence 11 ms and of 16 sequences (one run) 26 ms: 1 ms
    more per sequence. With 8 sequences on every other slot at 18 ms, the straight
    line's own price, a run costs nothing more, and S slots' 8 steps per size cost
    8 (11 S + S (S - 1) / 2) ms: 1.24 s at S = 10, 1.408 s at 11. 70% of a 1.9 s
    window (1.33 s) holds 10 slots."""
    assert STEPS_PER_SIZE == 8
    assert fitting_slots(16, 0.011, 0.026, 0.018, 1.9) == 10
    assert fitting_slots(16, 0.011, 0.026, 0.018, 1.24 / 0.7 + 1e-9) == 10
    assert fitting_slots(16, 0.011, 0.026, 0.018, 1.24 / 0.7 - 1e-6) == 9
    # A window that holds every slot runs them all; none too short runs fewer than 4.
    assert fitting_slots(16, 0.011, 0.026, 0.018, 100.0) == 16
    assert fitting_slots(16, 0.011, 0.026, 0.018, 1e-6) == MIN_SLOTS == 4
    assert fitting_slots(3, 0.011, 0.026, 0.011, 1e-6) == 3


def test_scattered_slots_price_their_runs_hand_worked() -> None:
    """The same line, but 8 scattered sequences take 32 ms: 14 ms over the line's 18 for
    7 runs past the first, 2 ms a run. b sequences among S slots make b (S - b + 1) / S
    runs on average, which summed over b = 1..S is (S + 1)(S + 2) / 6, so S slots cost
    8 (11 S + S (S - 1) / 2 + 2 ((S + 1)(S + 2) / 6 - S)) ms: 0.552 s at 5, 0.7013 s at
    6, 0.864 s at 7. 70% of 1.1 s (0.77 s) holds 6 slots. A window whose 70% is
    0.784 s holds 7 contiguous slots (8 (77 + 21) ms) but still 6 scattered ones."""
    assert fitting_slots(16, 0.011, 0.026, 0.032, 1.1) == 6
    assert fitting_slots(16, 0.011, 0.026, 0.032, 0.7013 / 0.7 - 1e-4) == 5
    assert fitting_slots(16, 0.011, 0.026, 0.018, 0.784 / 0.7 + 1e-6) == 7
    assert fitting_slots(16, 0.011, 0.026, 0.032, 0.784 / 0.7 + 1e-6) == 6


class StandIn:
    """An executor whose step of b sequences reports 10 ms + 1 ms per sequence (and
    takes no time): the host loop's sizing sees fixed device times."""

    def __init__(self, slots: int, capacity: int = 1000) -> None:
        self.slots, self.capacity = slots, capacity
        self.model = SimpleNamespace(d=SimpleNamespace(vocab=32))
        self.calls: list[int] = []

    def step(self, entries: list[tuple[int, int, int]], tokens: list[int]
             ) -> tuple[list[int], float]:
        self.calls.append(len(entries))
        return [1] * len(entries), 0.010 + 0.001 * len(entries)


def test_a_host_window_runs_the_loop_on_the_slots_that_fit() -> None:
    """16 slots, steps of 11, 26 and 18 ms at 1, 16 and 8 sequences (the stand-in's
    steps do not depend on where the slots lie): a 1.9 s window holds 10 slots
    (:func:`fitting_slots`), so the loop is the 10-slot loop: after the prefill of
    all ten (whose interval is not recorded), 10 sequences once, then 9 down to 1 eight
    times each."""
    ex = StandIn(16)
    times = time_host(ex, 4096, seed=0, window_s=1.9)  # type: ignore[arg-type]
    k = STEPS_PER_SIZE
    # The three timed decodes (one, every slot, every other slot), each after a warm one.
    assert ex.calls[:6] == [1, 1, 16, 16, 8, 8]
    assert (times.slots, times.of_slots, times.cut) == (10, 16, False)
    assert list(times.seqs) == [10] + [b for b in range(9, 0, -1) for _ in range(k)]
    # Without a window the loop runs on every slot, untimed beforehand.
    whole = time_host(StandIn(16), 4096, seed=0)  # type: ignore[arg-type]
    assert (whole.slots, whole.of_slots) == (16, 16)
    assert list(whole.seqs) == [16] + [b for b in range(15, 0, -1) for _ in range(k)]


def test_loop_terms_say_when_the_window_shrank_the_loop() -> None:
    """Two thirds of a 2.85 s window (1.9 s) go to the host loop: 10 of 16 slots, and
    the note says so; with no window there is no note."""
    terms = time_loop_terms(StandIn(16), 4096, True, 0, window_s=2.85)  # type: ignore[arg-type]
    assert terms.note == ("host work timed on a loop of 10 of 16 slots "
                          "(3 s for host work and waking)")
    assert [m.point.label for m in terms.measurements if m.point.component == "host"] == \
        [f"loop seqs={b}" for b in range(1, 10)]
    assert time_loop_terms(StandIn(4), 4096, True, 0).note is None  # type: ignore[arg-type]
