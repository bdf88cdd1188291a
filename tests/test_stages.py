"""Load that changes over time (workload.stages): arrivals per stage, a trace replayed at
each stage's rate, the per-stage summary, and clear errors for what cannot be staged.

Hand-worked cases use the tiny model with a linear cost of 10 ms a step + 1 ms a new
token and 4-token blocks (tests/conftest.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import tiny_scenario

from sim.config.scenario import load
from sim.core.engine import simulate
from sim.errors import ServesimError
from sim.report.outputs import write_run
from sim.report.printed import table
from sim.report.summary import summarize
from sim.workload.build import build_requests
from sim.workload.stages import StageConfig, stage_trace_times, windows

FIXED = {"prompt": {"dist": "fixed", "value": 8}, "output": {"dist": "fixed", "value": 2}}


def staged(stages: list[dict], process: str = "constant", **workload) -> dict:
    """A workload section (tiny_scenario's own num_requests cleared)."""
    return {"arrivals": {"process": process}, "lengths": FIXED, "stages": stages, "seed": 3,
            "num_requests": None, **workload}


def requests_of(sc):
    return build_requests(sc.workload, sc.base_dir, np.random.default_rng(0), sc.source)


def test_constant_stages_arrive_at_each_stage_rate_from_its_start() -> None:
    sc = tiny_scenario(workload=staged([{"rate": 2, "duration_s": 2},
                                        {"rate": 4, "duration_s": 1}]))
    rq = requests_of(sc)
    # Stage 1: 0, 0.5, 1.0, 1.5; stage 2 from its start at 2.0 (rate x duration whole
    # in stage 1, so the stream's next point is the boundary): 2.0, 2.25, 2.5, 2.75.
    assert rq.arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.25, 2.5, 2.75]
    assert rq.stage_windows == ((0.0, 2.0), (2.0, 3.0))


def test_a_constant_stream_keeps_its_phase_across_a_step() -> None:
    # 2 req/s for 1.25 s, then 4 req/s: operational time runs 2.5 in the first stage, so
    # its arrivals are at 0, 0.5, 1.0, and the next falls half a gap (0.5 of 1) into the
    # second stage, at 1.25 + 0.5 / 4 = 1.375, then every 0.25 s while the stage lasts.
    sc = tiny_scenario(workload=staged([{"rate": 2, "duration_s": 1.25},
                                        {"rate": 4, "duration_s": 1}]))
    assert requests_of(sc).arrival_s.tolist() == [0.0, 0.5, 1.0, 1.375, 1.625, 1.875, 2.125]


@pytest.mark.parametrize("process", ["poisson", "gamma", "constant"])
def test_a_profile_in_short_steps_offers_what_one_long_stage_does(process: str) -> None:
    # Sixty 1-second stages at 0.5 req/s are one minute at 0.5 req/s: the same arrivals
    # from the same seed (each stage had started with an arrival of its own: 91 requests
    # in the minute where about 30 were asked).
    more = {"cv": 2.0} if process == "gamma" else {}
    steps = staged([{"rate": 0.5, "duration_s": 1}] * 60, process=process)
    whole = staged([{"rate": 0.5, "duration_s": 60}], process=process)
    steps["arrivals"].update(more)
    whole["arrivals"].update(more)
    a, b = (requests_of(tiny_scenario(workload=w)).arrival_s for w in (steps, whole))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)
    assert len(a) < 60  # about 30


def test_num_requests_caps_a_staged_workload() -> None:
    sc = tiny_scenario(workload=staged([{"rate": 2, "duration_s": 2},
                                        {"rate": 4, "duration_s": 1}], num_requests=5))
    assert requests_of(sc).arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_a_cap_that_ends_the_stages_early_is_noted() -> None:
    """num_requests reached in stage 1 of 3: the later stages' empty reports say why."""
    three = [{"rate": 2, "duration_s": 2}, {"rate": 4, "duration_s": 1},
             {"rate": 1, "duration_s": 1}]
    rq = requests_of(tiny_scenario(workload=staged(three, num_requests=3)))
    assert rq.notes == ("workload.num_requests (3) is reached at 1 s, in stage 1 of 3 (0 to "
                        "2 s): stages 2 to 3 send no request; raise num_requests (or leave "
                        "it out) to run every stage",)
    rq = requests_of(tiny_scenario(workload=staged(three[:2], num_requests=5)))
    assert rq.notes == ("workload.num_requests (5) is reached at 2 s, in stage 2 of 2 (2 to "
                        "3 s): no request arrives in the rest of it",)
    assert requests_of(tiny_scenario(workload=staged(three, num_requests=100))).notes == ()


def test_the_summary_reports_each_stage_by_hand() -> None:
    # One request a second for 3 s, then one every 10 ms for 0.1 s (10 requests, 8
    # tokens each, 1 more token out). Stage 2's requests queue behind each other:
    # continuous batching prefills whoever waits, so its last first token comes after
    # the stage ends, and drain_s says by how much.
    sc = tiny_scenario(workload=staged([{"rate": 1, "duration_s": 3},
                                        {"rate": 100, "duration_s": 0.1}]))
    res = simulate(sc)
    s = summarize(res)["stages"]
    assert [(x["stage"], x["start_s"], x["end_s"], x["rate_rps"]) for x in s] == [
        (1, 0.0, 3.0, 1.0), (2, 3.0, pytest.approx(3.1), 100.0)]
    assert [x["requests"]["arrived"] for x in s] == [3, 10]
    assert s[0]["offered_rps"] == pytest.approx(1.0)
    assert s[1]["offered_rps"] == pytest.approx(100.0)
    # Alone, a request takes 18 ms to its first token (10 + 8) and 11 ms more to finish.
    assert s[0]["latency_s"]["ttft"]["max"] == pytest.approx(0.018)
    assert s[0]["drain_s"] == 0.0
    assert s[0]["finished_rps"] == pytest.approx(3 / 3.0)
    last_first = float(np.nanmax(res.first_token[3:]))
    assert last_first > 3.1
    assert s[1]["drain_s"] == pytest.approx(last_first - 3.1)
    assert s[1]["latency_s"]["ttft"]["max"] > s[0]["latency_s"]["ttft"]["max"]
    text = table(summarize(res))
    assert "stage" in text and "never" not in text


def test_a_step_from_2_5_to_6_per_second_reports_each_stage(tmp_path: Path) -> None:
    # The example: 600 s at 2.5 req/s, then 600 s at 6 (Poisson).
    sc = tiny_scenario(workload=staged([{"rate": 2.5, "duration_s": 600},
                                        {"rate": 6, "duration_s": 600}], process="poisson"))
    res = simulate(sc)
    s = summarize(res)["stages"]
    for stage, rate in zip(s, (2.5, 6.0), strict=True):
        n = stage["requests"]["arrived"]
        # Poisson counts: within 4 standard deviations of rate x 600.
        assert abs(n - rate * 600) < 4 * np.sqrt(rate * 600)
        assert stage["offered_rps"] == pytest.approx(n / 600)
        assert stage["latency_s"]["ttft"]["p99"] is not None
        assert stage["latency_s"]["tpot"]["p50"] is not None
    paths = write_run(res, summarize(res), tmp_path)
    assert (tmp_path / "latency_over_time.png") in paths
    assert (tmp_path / "latency_over_time.png").stat().st_size > 10_000


def test_a_trace_replays_at_each_stage_rate() -> None:
    # Trace arrivals 0, 1, 3, 6, 10, 15 (gaps 1, 2, 3, 4, 5). Stage 1: 2 requests in
    # 1 s: rows 0 and 1, their span to row 2 (3 s) mapped onto 1 s: 0, 1/3. Stage 2:
    # 3 requests in 1 s: rows 2-4, span 3 -> 15 (12 s) onto [1, 2): 1, 1.25, 1.5833.
    t = np.array([0.0, 1.0, 3.0, 6.0, 10.0, 15.0])
    stages = (StageConfig(2.0, 1.0), StageConfig(3.0, 1.0))
    assert windows(stages, 0.0) == ((0.0, 1.0), (1.0, 2.0))
    out = stage_trace_times(t, stages, windows(stages, 0.0), "<test>")
    assert out.tolist() == pytest.approx([0.0, 1 / 3, 1.0, 1.25, 1 + 7 / 12])


def test_a_shipped_trace_in_stages_offers_the_rate_asked() -> None:
    sc = tiny_scenario(
        model="llama-3-8b", hardware={"gpu": "h100-sxm"}, cost="roofline",
        serving={"block_size": 16},
        workload={"trace": {"path": "azure_2023_conv"}, "seed": 0, "num_requests": None,
                  "arrivals": None, "lengths": None,
                  "stages": [{"rate": 3, "duration_s": 120}, {"rate": 9, "duration_s": 60},
                             {"rate": 1.5, "duration_s": 200}]})
    rq = requests_of(sc)
    assert len(rq) == 360 + 540 + 300
    s = summarize(simulate(sc))["stages"]
    for stage, rate in zip(s, (3, 9, 1.5), strict=True):
        assert stage["offered_rps"] == pytest.approx(rate, abs=0.5 / 60)


def test_a_trace_too_short_for_its_stages_is_an_error() -> None:
    with pytest.raises(ServesimError, match="the stages replay 5 requests .* the trace has 3"):
        stage_trace_times(np.array([0.0, 1.0, 2.0]), (StageConfig(5.0, 1.0),),
                          ((0.0, 1.0),), "<t>")


def test_a_stage_of_requests_at_one_instant_is_an_error() -> None:
    # Stage 2's three requests and the one after them all arrive at 4 s: no gaps to
    # scale, and spreading them evenly would be arrivals the trace never had. A stage
    # of one request needs no gap (stage 1: row 0 at the window's start).
    t = np.array([0.0, 4.0, 4.0, 4.0, 4.0])
    stages = (StageConfig(1.0, 1.0), StageConfig(3.0, 1.0))
    wins = windows(stages, 0.0)
    with pytest.raises(ServesimError, match=r"stage 2 replays 3 requests that all arrive at "
                                            r"4 s in the trace \(the next one too\)"):
        stage_trace_times(t, stages, wins, "<t>")
    out = stage_trace_times(np.array([0.0, 4.0, 4.0, 4.0, 5.0]), stages, wins, "<t>")
    assert out.tolist() == pytest.approx([0.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("workload, key, message", [
    ({"stages": []}, "workload.stages", "give at least one"),
    ({"stages": [{"rate": 0, "duration_s": 5}]}, "workload.stages[0].rate", ""),
    ({"stages": [{"rate": 1, "duration_s": -1}]}, "workload.stages[0].duration_s", ""),
    ({"stages": [{"rate": 1, "duration_s": 5, "ramp": True}]}, "workload.stages[0]", "ramp"),
    ({"stages": [{"rate": 1, "duration_s": 5}], "duration_s": 10}, "workload.duration_s",
     "the stages set the duration"),
    ({"stages": [{"rate": 1, "duration_s": 5}], "arrivals": {"process": "poisson", "rate": 2}},
     "workload.arrivals.rate", "remove arrivals.rate"),
])
def test_bad_stages_name_the_key(workload: dict, key: str, message: str) -> None:
    wl = {"arrivals": {"process": "poisson"}, "lengths": FIXED, "num_requests": None,
          **workload}
    with pytest.raises(ServesimError) as exc:
        tiny_scenario(workload=wl)
    assert key in str(exc.value) and message in str(exc.value)


def test_a_rate_is_still_required_without_stages() -> None:
    with pytest.raises(ServesimError, match="workload.arrivals.rate.*required"):
        tiny_scenario(workload={"arrivals": {"process": "poisson"}, "lengths": FIXED,
                                "num_requests": 5})


def test_closed_loop_clients_take_no_stages() -> None:
    with pytest.raises(ServesimError, match="closed-loop clients .* remove stages"):
        tiny_scenario(workload={"concurrency": 2, "lengths": FIXED, "num_requests": 5,
                                "arrivals": None,
                                "stages": [{"rate": 1, "duration_s": 5}]})


def test_a_sweep_rate_on_a_staged_scenario_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("model: tiny\ncost: {linear: {step_s: 0.01}}\nworkload:\n"
                    "  arrivals: {process: poisson}\n"
                    "  lengths: {prompt: {dist: fixed, value: 8},\n"
                    "            output: {dist: fixed, value: 2}}\n"
                    "  stages: [{rate: 1, duration_s: 5}]\n")
    with pytest.raises(ServesimError, match="workload.arrivals.rate: workload.stages gives "
                                            "each stage's rate; remove arrivals.rate"):
        load(path, ["workload.arrivals.rate=4"])


def test_same_seed_same_staged_arrivals() -> None:
    wl = staged([{"rate": 5, "duration_s": 10}, {"rate": 1, "duration_s": 10}],
                process="gamma")
    wl["arrivals"]["cv"] = 2.0
    a, b = (requests_of(tiny_scenario(workload=wl)).arrival_s for _ in range(2))
    assert a.tolist() == b.tolist()
    assert ((a >= 0) & (a < 20)).all() and np.all(np.diff(a) >= 0)


def test_a_horizon_inside_a_stage_ends_its_window_there() -> None:
    # Stage 1: 1 req/s over [0, 3) s; stage 2: 4 req/s over [3, 4) s, arrivals at 3.0,
    # 3.25, 3.5, 3.75; stage 3: [4, 5) s. The horizon at 3.5 s: stage 2 had 2 arrivals
    # in its first 0.5 s (4 req/s, as asked), each done 29 ms later; 3.5 and 3.75 and all
    # of stage 3 never arrived, so they are not stage 2's backlog.
    sc = tiny_scenario(workload=staged([{"rate": 1, "duration_s": 3},
                                        {"rate": 4, "duration_s": 1},
                                        {"rate": 2, "duration_s": 1}]), horizon_s=3.5)
    s = summarize(simulate(sc))
    assert s["requests"]["not_arrived"] == 4 and s["requests"]["unfinished"] == 0
    one, two, three = s["stages"]
    assert one["requests"]["arrived"] == 3 and one["offered_rps"] == pytest.approx(1.0)
    assert two["requests"]["arrived"] == 2 and two["requests"]["not_arrived"] == 2
    assert two["offered_rps"] == pytest.approx(4.0)
    assert two["finished_rps"] == pytest.approx(2 / 0.5)
    assert two["slo_attainment"] == 1.0  # no SLO: both that arrived finished
    assert three["requests"]["arrived"] == 0 and three["requests"]["not_arrived"] == 2
    assert three["offered_rps"] is None and three["slo_attainment"] is None
    assert s["throughput"]["slo_attainment"] == 1.0
    assert s["saturation"]["saturated"] is False
    assert "  -" in table(s).splitlines()[-1]  # stage 3's rates: the run ended before it


def test_a_capped_stage_far_longer_than_the_cap_draws_only_what_the_cap_keeps() -> None:
    # 10^30 s at 2 req/s once drew its whole expected count at once (numpy refused the
    # size: a traceback); capped at 50 it now draws in pieces and stops at the cap.
    sc = tiny_scenario(workload=staged([{"rate": 2, "duration_s": 1e30},
                                        {"rate": 4, "duration_s": 1e30}],
                                       process="poisson", num_requests=50))
    t = requests_of(sc).arrival_s
    assert len(t) == 50 and t[0] == 0.0 and np.all(np.diff(t) > 0) and t[-1] < 1e3


def test_a_long_capped_span_keeps_its_earliest_arrivals_exact() -> None:
    # A span expecting more than SPAN_CHUNK arrivals stops drawing at the cap; the arrivals
    # it keeps are the first of what the uncapped span draws from the same seed.
    from sim.workload.draw import SPAN_CHUNK, arrival_times
    from sim.workload.requests import ArrivalsConfig

    a = ArrivalsConfig(process="poisson", rate=1000.0)
    horizon = 2.0 * SPAN_CHUNK / 1000.0  # about 2 SPAN_CHUNK arrivals expected
    whole = arrival_times(a, None, horizon, np.random.default_rng(7))
    capped = arrival_times(a, None, horizon, np.random.default_rng(7), limit=100)
    assert len(whole) > SPAN_CHUNK and SPAN_CHUNK >= len(capped) >= 100
    assert np.array_equal(capped, whole[:len(capped)])
