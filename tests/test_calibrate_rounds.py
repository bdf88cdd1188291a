"""Whole steps timed in interleaved rounds (calibrate/rounds.py), against a stand-in bench."""

from __future__ import annotations

import time

import torch

from calibrate.grids import WHOLE_STEP, Point
from calibrate.records import Measurement
from calibrate.rounds import RoundsConfig, time_in_rounds
from calibrate.timing import Timer, TimingConfig


class Recorder:
    """A bench whose steps only log their name; step ``fail`` raises from round ``fail_round``."""

    def __init__(self, fail: str = "", fail_round: int = 1, oom: bool = False,
                 reserve_fails: bool = False):
        self.timer = Timer(torch.device("cpu"), TimingConfig())
        self.reserve_fails = reserve_fails
        self.calls: list[str] = []
        self.reserved: list[Point] = []
        self.fail, self.fail_round, self.oom = fail, fail_round, oom

    def reserve(self, points: list[Point]) -> None:
        if self.reserve_fails:
            raise torch.OutOfMemoryError("no room for the full model")
        self.reserved = list(points)

    def prepare(self, point: Point):
        def fn() -> None:
            self.calls.append(point.label)
            if point.label == self.fail and self.calls.count(point.label) > 3 * self.fail_round:
                raise (torch.OutOfMemoryError("injected") if self.oom else RuntimeError("boom"))
        return fn

    def failure(self, point: Point, exc: Exception) -> Measurement:
        return Measurement(point, "oom" if self.oom else "error", note=str(exc))


def pts(*labels: str) -> list[Point]:
    return [Point(WHOLE_STEP, ((1, 10),), label) for label in labels]


def test_rounds_interleave_shapes_and_give_each_the_same_samples() -> None:
    bench = Recorder()
    points = pts("a", "b")
    cfg = RoundsConfig(rounds=3, slice_s=1.0, warmup=1, max_per_round=2)
    out, stopped, _ = time_in_rounds(points, bench, time.perf_counter() + 60, cfg)  # type: ignore[arg-type]
    assert not stopped and bench.reserved == points
    # Round one: one warm-up, the first sample, one more; later rounds: a warm-up and two.
    assert bench.calls == ["a"] * 3 + ["b"] * 3 + (["a"] * 3 + ["b"] * 3) * 2
    assert [m.status for m in out] == ["ok", "ok"]
    for m in out:
        assert m.timing is not None and len(m.timing.samples) == 6
        assert m.note.startswith("3 rounds x 2; mean ")
        assert m.timing.mean_s == sum(m.timing.samples) / 6


def test_a_step_that_fails_is_recorded_once_and_left_out_of_later_rounds() -> None:
    bench = Recorder(fail="b", fail_round=1)
    cfg = RoundsConfig(rounds=3, slice_s=1.0, warmup=1, max_per_round=2)
    out, _, _ = time_in_rounds(pts("a", "b", "c"), bench, time.perf_counter() + 60, cfg)  # type: ignore[arg-type]
    assert [m.status for m in out] == ["ok", "error", "ok"]
    assert out[1].timing is None and out[1].note == "boom"
    assert bench.calls.count("b") == 4  # three in round one, the failing call in round two
    assert all(m.timing is not None and len(m.timing.samples) == 6 for m in (out[0], out[2]))


def test_a_spent_budget_times_nothing_and_says_so() -> None:
    bench = Recorder()
    out, stopped, _ = time_in_rounds(pts("a"), bench, time.perf_counter() - 1,  # type: ignore[arg-type]
                                  RoundsConfig())
    assert stopped and out == [] and bench.calls == []


def test_an_expensive_step_takes_one_sample_a_round_without_warm_up() -> None:
    bench = Recorder()
    cfg = RoundsConfig(rounds=4, slice_s=1e-9, warmup=2, max_per_round=40)
    out, _, _ = time_in_rounds(pts("big"), bench, time.perf_counter() + 60, cfg)  # type: ignore[arg-type]
    # Two warm-up calls before the first sample, then one call per round.
    assert bench.calls == ["big"] * (2 + 1 + 3)
    assert out[0].timing is not None and len(out[0].timing.samples) == 4
    assert out[0].note.startswith("4 rounds x 1; ")


def test_whole_steps_are_recorded_as_eager_wall_clock_runs() -> None:
    """The CSV's graph column: whole steps never replay a CUDA graph (the replay's loop
    does not)."""
    cfg = RoundsConfig(rounds=2, slice_s=1.0, warmup=1, max_per_round=2)
    out, _, _ = time_in_rounds(pts("a"), Recorder(), time.perf_counter() + 60, cfg)  # type: ignore[arg-type]
    assert out[0].timing is not None and out[0].timing.graph is False


def test_no_room_for_the_full_model_records_every_step_and_times_none() -> None:
    bench = Recorder(oom=True, reserve_fails=True)
    out, stopped, _ = time_in_rounds(pts("a", "b"), bench, time.perf_counter() + 60,  # type: ignore[arg-type]
                                  RoundsConfig())
    assert not stopped and bench.calls == []
    assert [(m.status, m.note) for m in out] == [("oom", "no room for the full model")] * 2


def test_work_between_runs_once_after_the_first_round() -> None:
    """calibrate.run times host work and waking there: after every step has a first
    measurement, before the rounds that fill the rest of the budget."""
    bench = Recorder()
    cfg = RoundsConfig(rounds=3, slice_s=1.0, warmup=1, max_per_round=2)
    out, _, _ = time_in_rounds(pts("a", "b"), bench, time.perf_counter() + 60, cfg,  # type: ignore[arg-type]
                            between=lambda: bench.calls.append("|"))
    assert bench.calls == ["a"] * 3 + ["b"] * 3 + ["|"] + (["a"] * 3 + ["b"] * 3) * 2
    assert all(m.timing is not None and len(m.timing.samples) == 6 for m in out)
    # Work in between that spends the budget leaves the first round's samples.
    bench = Recorder()
    stop = time.perf_counter() + 0.5

    def spend() -> None:
        bench.calls.append("|")
        time.sleep(max(0.0, stop - time.perf_counter()) + 0.01)
    out, stopped, _ = time_in_rounds(pts("a"), bench, stop, cfg, between=spend)  # type: ignore[arg-type]
    assert not stopped and bench.calls == ["a"] * 3 + ["|"]
    assert out[0].timing is not None and len(out[0].timing.samples) == 2


class Interrupting(Recorder):
    """A bench whose step ``at`` raises KeyboardInterrupt (a hard time limit's SIGINT) on
    its ``nth`` call."""

    def __init__(self, at: str, nth: int) -> None:
        super().__init__()
        self.at, self.nth = at, nth

    def prepare(self, point: Point):
        inner = super().prepare(point)

        def fn() -> None:
            inner()
            if point.label == self.at and self.calls.count(self.at) == self.nth:
                raise KeyboardInterrupt
        return fn


def test_an_interrupt_ends_the_rounds_with_what_they_timed() -> None:
    cfg = RoundsConfig(rounds=4, slice_s=0.0, warmup=2, max_per_round=1)
    # In the first round, at b's first call (its warm-up): a was timed, b and c never.
    got = time_in_rounds(pts("a", "b", "c"), Interrupting("b", 1), time.perf_counter() + 60,
                         cfg)  # type: ignore[arg-type]
    assert got.interrupted and got.stopped
    assert [m.point.label for m in got.measurements] == ["a"]
    assert got.measurements[0].timing is not None
    assert len(got.measurements[0].timing.samples) == 1
    # In the third round, at b's fifth call (warm-ups 1-2, round samples 3-5): every
    # point has its first two rounds, a its third too; the first round was whole.
    got = time_in_rounds(pts("a", "b"), Interrupting("b", 5), time.perf_counter() + 60,
                         cfg)  # type: ignore[arg-type]
    assert got.interrupted and not got.stopped
    assert [len(m.timing.samples) for m in got.measurements if m.timing] == [3, 2]
    # Inside the work between the rounds: the first round is kept whole.
    bench = Recorder()

    def interrupt() -> None:
        raise KeyboardInterrupt
    got = time_in_rounds(pts("a", "b"), bench, time.perf_counter() + 60, cfg,
                         between=interrupt)  # type: ignore[arg-type]
    assert got.interrupted and not got.stopped
    assert [len(m.timing.samples) for m in got.measurements if m.timing] == [1, 1]
