"""calibrate.host: the serving loop's host work, timed on the reference loop."""

from __future__ import annotations

import numpy as np
import torch

from calibrate.executor import ModelExecutor
from calibrate.host import STEPS_PER_SIZE, HostTimes, time_host, workload
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
