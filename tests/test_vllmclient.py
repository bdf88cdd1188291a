"""vLLM's benchmark client's send times, rebuilt from its seed (sim/validate/vllmclient.py):
the draws pinned to numpy's legacy stream, both schedules worked by hand, an independent
step-by-step transcription of what the client does, ramp-ups, and the choice of schedule
by the run's recorded duration."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ServesimError
from sim.validate import vllm_results
from sim.validate.vllmclient import AGREE_S, Pacing, gaps, rebuild, run_end, schedule

FIXTURE = Path(__file__).parent / "fixtures" / "vllm" / "bench_detailed.json"

# numpy's legacy generator seeded with 0 (what `np.random.seed(0)` gives the module-level
# functions vLLM's client calls): its first three exponential gaps of mean 0.5 s. Written
# out so that a change of generator, or of draw order, fails here.
SEED0_RATE2 = [0.397937254081555, 0.6279653814829189, 0.4616115729020344]


def test_gaps_are_numpys_legacy_stream_one_draw_a_request() -> None:
    assert gaps(3, Pacing(2.0), 0).tolist() == SEED0_RATE2
    # Burstiness b: gamma(b, 1 / (rate b)); b = inf: the constant 1 / rate, no draw.
    g = gaps(4, Pacing(2.0, 0.5), 7)
    ref = np.random.RandomState(7)
    assert g.tolist() == [ref.gamma(0.5, 1.0) for _ in range(4)]
    assert gaps(3, Pacing(4.0, math.inf), 0).tolist() == [0.25, 0.25, 0.25]
    assert gaps(3, Pacing(math.inf), 0) is None


def test_both_schedules_by_hand() -> None:
    g0, g1, g2 = SEED0_RATE2
    s = g0 + g1 + g2
    # vLLM 0.10 on: running sums of all three gaps, stretched so the last is n / rate.
    t, end = schedule(3, Pacing(2.0), 0, "precomputed")
    np.testing.assert_allclose(t, [g0 * 1.5 / s, (g0 + g1) * 1.5 / s, 1.5], rtol=1e-15)
    assert t[-1] == 1.5 and end == 1.5
    # vLLM 0.9 and before: request 0 at once, send i after i gaps, the third gap slept
    # after the last send.
    t, end = schedule(3, Pacing(2.0), 0, "paced")
    assert t.tolist() == [0.0, g0, g0 + g1]
    assert end == pytest.approx(s, rel=1e-15)
    # Every request at once: no draws at all.
    t, end = schedule(3, Pacing(math.inf), 0, "precomputed")
    assert t.tolist() == [0.0, 0.0, 0.0] and end == 0.0


def client_sends(n: int, rate: float, shape: float, seed: int) -> list[float]:
    """What vLLM 0.10+'s client does, written out one request at a time: a gap per
    request from the seeded legacy generator, summed in order, then each sum scaled by
    (n / rate) / (the last sum)."""
    rs = np.random.RandomState(seed)
    delays = []
    for _ in range(n):
        delays.append(float(rs.gamma(shape, 1.0 / (rate * shape))))
    for i in range(1, n):
        delays[i] += delays[i - 1]
    factor = (n / rate) / delays[-1]
    return [d * factor for d in delays]


@pytest.mark.parametrize(("n", "rate", "shape", "seed"),
                         [(50, 3.0, 1.0, 0), (200, 12.5, 0.7, 0), (7, 0.4, 2.5, 11)])
def test_precomputed_schedule_equals_the_clients_own_steps(n: int, rate: float, shape: float,
                                                           seed: int) -> None:
    t, _ = schedule(n, Pacing(rate, shape), seed, "precomputed")
    assert t.tolist() == client_sends(n, rate, shape, seed)


def test_ramp_up_rates_and_no_stretch() -> None:
    # Linear 1 -> 3 req/s over 3 requests: rates 1, 2, 3; exponential 1 -> 4: 1, 2, 4.
    assert Pacing(math.inf, 1.0, ("linear", 1.0, 3.0)).rates(3).tolist() == [1.0, 2.0, 3.0]
    assert Pacing(math.inf, 1.0, ("exponential", 1.0, 4.0)).rates(3).tolist() == [1.0, 2.0, 4.0]
    e = np.random.RandomState(0).standard_exponential(3)
    t, end = schedule(3, Pacing(math.inf, 1.0, ("linear", 1.0, 3.0)), 0, "precomputed")
    np.testing.assert_allclose(t, np.cumsum(e / [1.0, 2.0, 3.0]), rtol=1e-15)
    assert end == t[-1]
    t, end = schedule(3, Pacing(math.inf, 1.0, ("linear", 1.0, 3.0)), 0, "paced")
    np.testing.assert_allclose(t, [0.0, e[0], e[0] + e[1] / 2], rtol=1e-15)
    assert end == pytest.approx(e[0] + e[1] / 2 + e[2] / 3, rel=1e-15)


def test_run_end_under_a_cap_by_hand() -> None:
    due = np.array([0.0, 0.1, 0.2, 5.0])
    took = np.array([1.0, 1.0, 1.0, 0.5])
    # No cap: the last request ends at 5.5, after the pacing's 5.2.
    assert run_end(due, took, None, 5.2) == 5.5
    # One slot: sends at 0, 1, 2 (each waits for the one before), then 5.0 when due.
    assert run_end(due, took, 1, 0.0) == 5.5
    assert run_end(due[:3], took[:3], 1, 0.0) == 3.0
    # Two slots: 0 and 0.1 at once, the third when the first ends (1.0), ends at 2.0.
    assert run_end(due[:3], took[:3], 2, 0.0) == 2.0


@pytest.mark.parametrize("style", ["precomputed", "paced"])
def test_the_recorded_duration_picks_the_schedule(style: str) -> None:
    n, pacing, seed = 40, Pacing(5.0), 0
    took = np.linspace(0.2, 0.6, n)
    t, stop = schedule(n, pacing, seed, style)
    duration = run_end(t, took, None, stop) + 0.004   # the client's few ms of lag
    got, note = rebuild(n, pacing, seed, took, None, duration)
    np.testing.assert_array_equal(got, t - t[0])
    release = "vLLM 0.10 and later" if style == "precomputed" else "vLLM 0.9 and before"
    assert (f"with --seed 0 (Poisson at 5 req/s, the schedule of {release}; vLLM saved no "
            "per-request send times): at their recorded latencies the requests end 4.0 ms "
            "before the recorded duration") in note
    assert "neither" not in note
    # A duration neither schedule reaches: said, with what it means for the prediction.
    _, note = rebuild(n, pacing, seed, took, None, duration + 3 * AGREE_S)
    assert "neither schedule ends within 250 ms of it" in note
    assert "another draw of the same process" in note
    # A failed request keeps no time: a duration past every completed request's end is
    # then no contradiction, and said so.
    failed = took.copy()
    failed[0] = math.nan
    ends = [run_end(t, np.nan_to_num(failed), None, stop)
            for t, stop in (schedule(n, pacing, seed, s) for s in ("precomputed", "paced"))]
    _, note = rebuild(n, pacing, seed, failed, None, max(ends) + 5.0)
    assert ("(the run's 1 failed request may have ended later: the file keeps no time for "
            "them)") in note and "neither" not in note
    # Every request at once (request_rate inf): no draws, no schedule to choose.
    got, note = rebuild(n, Pacing(math.inf), seed, took, None, duration)
    assert got.tolist() == [0.0] * n and note == "request_rate inf: every request sent at 0 s"
    # No duration in the file: vLLM 0.10's schedule, and said so.
    got, note = rebuild(n, pacing, seed, took, None, None)
    t0, _ = schedule(n, pacing, seed, "precomputed")
    np.testing.assert_array_equal(got, t0 - t0[0])
    assert "the file has no duration to check the schedule against" in note


def test_result_without_send_times_is_rebuilt_from_the_seed() -> None:
    data = json.loads(FIXTURE.read_text())
    del data["start_times"]
    t, stop = schedule(4, Pacing(0.2), 0, "precomputed")
    # The completed requests' latencies put the run's end where its duration says.
    data["duration"] = run_end(t, np.array([0.194, 0.080, 0.313, 0.0]), None, stop) + 0.01
    run = vllm_results.parse(data, "<t>")
    np.testing.assert_allclose(run.arrival_s, t - t[0], rtol=0, atol=1e-12)
    assert "10.0 ms before the recorded duration" in run.arrivals_note
    # A ramp-up (vLLM writes request_rate "inf" with it) is rebuilt along its rates.
    data.update(request_rate="inf", ramp_up_strategy="exponential", ramp_up_start_rps=1,
                ramp_up_end_rps=8)
    run = vllm_results.parse(data, "<t>", seed=5)
    t, _ = schedule(4, Pacing(math.inf, 1.0, ("exponential", 1.0, 8.0)), 5, "precomputed")
    np.testing.assert_allclose(run.arrival_s, t - t[0], rtol=0, atol=1e-12)
    assert "Poisson, ramped exponentially from 1 to 8 req/s" in run.arrivals_note


# Run facts as vLLM writes them, with a sprinkling of what it never writes.
_junk = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.floats(allow_nan=True),
                  st.integers(-3, 3), st.lists(st.integers(), max_size=2))


def _maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, valid, _junk)


_rate = st.one_of(st.just("inf"), st.floats(1e-3, 1e4))
_facts = st.fixed_dictionaries({
    "request_rate": _maybe(_rate),
    "burstiness": _maybe(st.one_of(st.floats(0.05, 20.0), st.just(math.inf))),
    "max_concurrency": _maybe(st.one_of(st.none(), st.integers(0, 6))),
    "duration": _maybe(st.floats(0.0, 1e4)),
}, optional={
    "ramp_up_strategy": _maybe(st.sampled_from(["linear", "exponential"])),
    "ramp_up_start_rps": _maybe(st.integers(0, 20)),
    "ramp_up_end_rps": _maybe(st.integers(0, 40)),
})


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60")), deadline=None)
@given(facts=_facts, seed=st.integers(0, 2**31 - 1))
def test_fuzz_run_facts_give_send_times_or_one_error(facts: dict[str, Any], seed: int) -> None:
    # Whatever the pacing keys hold, a file without start_times is rebuilt into finite,
    # ordered send times from 0 for every request, or refused with one ServesimError
    # naming a key; never another exception.
    data = json.loads(FIXTURE.read_text())
    del data["start_times"]
    data.update(facts)
    try:
        run = vllm_results.parse(data, "<t>", seed=seed)
    except ServesimError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<t>: ")
        return
    t = run.arrival_s
    assert len(t) == 4 and np.isfinite(t).all() and t[0] == 0.0
    assert (np.diff(t) >= 0).all()
    assert run.arrivals_note


def test_saved_send_times_are_checked_against_the_seed() -> None:
    # A file from vLLM 0.16+ keeps its send times and is predicted from them; where its
    # client paced at a rate without a cap, they also say whether the seed was the one
    # a file without them would be rebuilt from.
    data = json.loads(FIXTURE.read_text())
    t, _ = schedule(4, Pacing(0.2), 0, "precomputed")
    data["start_times"] = (5000.0 + t + [0.0, 0.002, 0.001, 0.004]).tolist()
    run = vllm_results.parse(data, "<t>")
    assert run.arrivals_note == ("arrivals from the saved start_times; they are vLLM's "
                                 "schedule from --seed 0 (1.5 ms late at the median, 4.0 ms "
                                 "at most)")
    np.testing.assert_allclose(run.arrival_s, data["start_times"] - np.min(data["start_times"]))
    other = vllm_results.parse(data, "<t>", seed=1).arrivals_note
    assert "they are not vLLM's schedule from --seed 1" in other
    # Held by a cap, sends are no schedule's: nothing is claimed.
    data["max_concurrency"] = 1
    assert "schedule" not in vllm_results.parse(data, "<t>").arrivals_note
