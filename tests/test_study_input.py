"""Bad input to ``sweep`` and ``capacity``: one error line naming the flag or key, the value
and what is allowed; never a traceback, an empty row, or an answer the search was steered
to by points that measured nothing."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import sim.study.capacity as capacity
from sim.cli import main as cli_main
from sim.errors import ServesimError
from sim.report.slospec import parse_slos
from sim.study.capacity import size_for
from sim.study.pointrun import PointCache, run_task
from sim.study.ratesearch import MaxRate, Search, max_rate
from sim.study.sweep import SweepSpec, run_sweep
from sim.study.sweeppoint import PointKey, make_task, point_raw, read_raw

ROOT = Path(__file__).resolve().parents[1]
MD1 = ROOT / "scenarios" / "capacity-md1.yaml"
# The M/D/1 scenario's model and prices (0.02 s a request, one at a time) over a trace.
TRACE_SCENARIO = """name: tr
model: tiny
cost:
  linear: {{step_s: 0.01, per_new_token_s: 0.001}}
serving: {{policy: continuous, max_num_seqs: 1, max_num_batched_tokens: 256, block_size: 4,
          watermark: 0.0}}
workload:
  trace: {{path: {trace}}}
{bound}
  seed: 0
"""


def trace_scenario(tmp_path: Path, rows: int = 2000, first_s: float = 0.0,
                   bound: str = "  duration_s: 30", labels: list[str] | None = None) -> Path:
    """A scenario replaying a trace of ``rows`` requests (10-token prompts, one output
    token), the first arriving at ``first_s``, with a ``class`` column when ``labels``."""
    gaps = np.random.default_rng(3).exponential(0.05, rows)
    arrival = first_s + np.concatenate([[0.0], np.cumsum(gaps[1:])])
    head = "arrival_s,prompt_tokens,output_tokens" + (",class" if labels else "")
    lines = [f"{a:.6f},10,1" + (f",{labels[i]}" if labels else "")
             for i, a in enumerate(arrival)]
    trace = tmp_path / "t.csv"
    trace.write_text(head + "\n" + "\n".join(lines) + "\n")
    path = tmp_path / "tr.yaml"
    path.write_text(TRACE_SCENARIO.format(trace=trace, bound=bound))
    return path


def one_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command printed (it must exit 2)."""
    assert cli_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


SEARCH = ["--seeds", "1", "--warmup", "0", "--precision", "0", "--quiet", "--no-plots"]


# -- 1. a rate above any server's: no overflow ------------------------------------------
@pytest.mark.parametrize("rates", ["1e308", "2e6", "1:2e6:1e5"])
def test_a_sweep_rate_above_the_top_is_refused_naming_the_bound(tmp_path, capsys, rates):
    line = one_error(["sweep", str(trace_scenario(tmp_path)), "--rates", rates, "--out",
                      str(tmp_path / "o"), "--workers", "1", "--quiet"], capsys)
    assert line.startswith(f"servesim: error: --rates {rates}: ")
    assert "is above 1e+06 requests/s" in line and "rates run from 1e-06 to 1e+06" in line


# -- 2. a target far above one replica: bounded, and no list of counts built ------------
@pytest.mark.parametrize("target", ["1e308", "1e12"])
def test_a_target_rate_above_the_top_is_refused(tmp_path, capsys, target):
    line = one_error(["capacity", str(MD1), "--slo", "ttft_p99=0.5", "--target-rate", target,
                      "--out", str(tmp_path / "o"), *SEARCH], capsys)
    assert f"--target-rate {target}: " in line and "is above 1e+06 requests/s" in line


def test_sizing_for_a_target_far_above_one_replica_builds_no_list_of_counts():
    s = Search(read_raw(MD1), str(MD1), MD1.parent, parse_slos(["ttft_p99=0.5"]), [0],
               PointCache(None))
    tiny = MaxRate("continuous", 1, [1e-300], [(1e-300, 2e-300)], 1e-300, None)
    # 1e306 replicas would be needed: with a best of 2 GPUs found, none is simulated.
    assert size_for(s, tiny, 1e6, None, limit_gpus=0) == (None, [])
    assert "not checked" in s.pruned[0]


@pytest.mark.parametrize("fewest, checks", [(100_000, 2), (99_999, 4), (3, 40)])
def test_sizing_down_from_a_guess_takes_few_checks(monkeypatch, fewest, checks):
    # A guess of 100,000 replicas (a target 100,000 times one replica's rate): one check
    # below it when it is right, a few dozen when 3 replicas would do, not 99,998.
    calls: list[int] = []

    def check_config(s, policy, replicas, tp, rate, pp=1):
        calls.append(replicas)
        return capacity.Config(policy, replicas, tp, replicas >= fewest, {}, pp)

    monkeypatch.setattr(capacity, "check_config", check_config)
    s = Search(read_raw(MD1), str(MD1), MD1.parent, parse_slos(["ttft_p99=0.5"]), [0],
               PointCache(None))
    mr = MaxRate("continuous", 1, [1e-3], [(1e-3, 2e-3)], 1e-3, None)
    best, tried = size_for(s, mr, 100.0, None)
    assert best is not None and best.replicas == fewest
    assert calls[0] == 100_000 and len(calls) <= checks


# -- 3. a point with no request steers no search -----------------------------------------
def test_a_capacity_start_below_one_request_per_duration_is_refused(tmp_path, capsys):
    line = one_error(["capacity", str(trace_scenario(tmp_path)), "--slo", "ttft_p99=0.5",
                      "--rate-start", "0.01", "--tol", "0.2", "--out", str(tmp_path / "o"),
                      *SEARCH], capsys)
    assert "--rate-start 0.01: at 0.01 requests/s, workload.duration_s 30 s holds" in line
    assert "rates start at 0.0333 requests/s" in line


def test_an_empty_point_moves_the_search_up_not_down(tmp_path):
    # The trace's first request comes 20 s into a 30 s window: at 0.05 req/s the window
    # holds none, so the first point is empty though 0.05 x 30 s is over one request.
    path = trace_scenario(tmp_path, first_s=20.0)
    s = Search(read_raw(path), str(path), path.parent, parse_slos(["ttft_p99=0.5"]), [0],
               PointCache(None), workers=1)
    m = max_rate(s, "continuous", 1, start=0.05, tol=0.2)
    first = s.log[0]
    assert first["rate"] == 0.05 and first["arrived"] == 0 and not first["pass"]
    assert s.log[1]["rate"] == 0.1  # doubled: an empty point is no failure
    assert m.mean > 10  # M/D/1 at 0.02 s a request keeps up to nearly 50 req/s
    assert not s.notes


def test_halving_ends_at_the_lowest_rate_the_workload_measures(tmp_path):
    # A target no load meets at any rate with requests (one request alone takes 20 ms):
    # halving stops at 1 / duration_s instead of going on into empty windows.
    path = trace_scenario(tmp_path)
    s = Search(read_raw(path), str(path), path.parent, parse_slos(["ttft_p99=0.019"]), [0],
               PointCache(None), workers=1)
    m = max_rate(s, "continuous", 1, start=1.0, tol=0.2)
    assert m.mean == 0.0
    rates = [r["rate"] for r in s.log]
    assert min(rates) == pytest.approx(1 / 30, rel=1e-6) and all(r["arrived"] for r in s.log)
    # The note says why the lowest rate failed: the target, its value there, the limit.
    assert s.notes[0].endswith("the lowest this workload measures; there ttft_p99 0.02 s "
                               "over 0.019 s")


# -- 4. a sweep point with no request is an error, not an empty row ----------------------
def test_a_sweep_rate_below_one_request_per_duration_is_refused(tmp_path, capsys):
    line = one_error(["sweep", str(trace_scenario(tmp_path)), "--rates", "0.01,1", "--out",
                      str(tmp_path / "o"), "--workers", "1", "--quiet", "--no-plots"], capsys)
    assert "--rates 0.01,1: at 0.01 requests/s, workload.duration_s 30 s holds" in line
    assert not (tmp_path / "o" / "sweep.csv").exists()


def test_a_sweep_point_that_ran_empty_is_an_error_naming_its_rate(tmp_path, capsys):
    path = trace_scenario(tmp_path, first_s=20.0)
    line = one_error(["sweep", str(path), "--rates", "0.05,1", "--out", str(tmp_path / "o"),
                      "--workers", "1", "--quiet", "--no-plots"], capsys)
    assert "point policy=continuous replicas=1 tp=1 pp=1 rate=0.05 seed=0: no request " \
           "arrived, so the point simulates nothing" in line
    assert "before workload.duration_s 30 s" in line
    assert not (tmp_path / "o" / "sweep.csv").exists()


# -- 5. messages that name what the user set ----------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--rates", "1e-308"], "--rates 1e-308: rate 1e-308 is below 1e-06 requests/s"),
    (["--rates", "1e-10"], "--rates 1e-10: rate 1e-10 is below 1e-06 requests/s"),
    (["--rates", "1e-300:1:1"], "--rates 1e-300:1:1: START 1e-300 is below 1e-06"),
    (["--rates", "1:0.5:1"], "--rates 1:0.5:1: STOP 0.5 is below START 1"),
    (["--rates", "1", "--horizon-factor", "1e308"],
     "--horizon-factor 1e308: must be a finite number greater than 0 and at most 1e+06"),
])
def test_sweep_rate_and_horizon_errors_name_the_flag(tmp_path, capsys, args, needle):
    line = one_error(["sweep", str(trace_scenario(tmp_path)), *args, "--out",
                      str(tmp_path / "o"), "--workers", "1", "--quiet"], capsys)
    assert needle in line and "horizon_s" not in line


@pytest.mark.parametrize("args, needle", [
    (["--target-rate", "1e-308"], "--target-rate 1e-308: 1e-308 is below 1e-06 requests/s"),
    (["--rate-start", "1e-300"], "--rate-start 1e-300: 1e-300 is below 1e-06 requests/s"),
])
def test_capacity_rate_errors_name_the_flag(tmp_path, capsys, args, needle):
    line = one_error(["capacity", str(MD1), "--slo", "ttft_p99=0.5", *args,
                      "--out", str(tmp_path / "o"), *SEARCH], capsys)
    assert needle in line and "horizon_s" not in line


def test_a_rate_whose_requests_outlast_the_clock_names_the_request_count(tmp_path, capsys):
    # 4,000 requests at 1e-6 req/s would arrive over 4e9 s, past the simulated clock.
    line = one_error(["sweep", str(MD1), "--rates", "1e-6", "--out", str(tmp_path / "o"),
                      "--workers", "1", "--quiet"], capsys)
    assert "--rates 1e-6: at 1e-06 requests/s, 4,000 requests (workload.num_requests) " \
           "arrive over 4e+09 s" in line and "rates start at 8e-06" in line


def test_a_horizon_never_passes_the_simulated_clock():
    raw = read_raw(MD1)
    p = point_raw(raw, PointKey("continuous", 1, 1, 1.0, 0), horizon_factor=1e6)
    assert p["horizon_s"] == 1e9  # 1e6 x 4,000 s would be 4e9 s


@pytest.mark.parametrize("command", [["sweep", "--rates", "1"],
                                     ["capacity", "--slo", "ttft_p99=0.5"]])
def test_a_staged_workload_is_refused_saying_what_the_command_does(tmp_path, capsys, command):
    path = tmp_path / "st.yaml"
    path.write_text(MD1.read_text().replace("  num_requests: 4000\n", "").replace(
        "  arrivals: {process: poisson, rate: 30.0}\n",
        "  arrivals: {process: poisson}\n  stages:\n    - {rate: 2, duration_s: 10}\n"
        "    - {rate: 4, duration_s: 10}\n"))
    line = one_error([command[0], str(path), *command[1:], "--out", str(tmp_path / "o"),
                      "--quiet"], capsys)
    assert "workload.stages: " in line and "runs each point at one arrival rate" in line
    assert "remove arrivals.rate" not in line and "--set workload.stages=null" in line


def test_an_error_in_a_worker_names_its_point(tmp_path):
    # A whole trace of 2,000 requests at 1e-6 req/s would arrive over 2e9 s.
    path = trace_scenario(tmp_path, bound="")
    task = make_task(read_raw(path), str(path), path.parent, PointKey("continuous", 1, 1, 1e-6, 0))
    with pytest.raises(ServesimError, match=re.escape(
            "(point policy=continuous replicas=1 tp=1 pp=1 rate=1e-06 seed=0)")):
        run_task(task)


# -- 6. a tolerance finer than the search resolves ----------------------------------------
def test_a_tolerance_below_the_floor_is_refused_saying_why(tmp_path, capsys):
    # The scenario does not exist: the flag must be refused before it is read.
    line = one_error(["capacity", str(tmp_path / "none.yaml"), "--slo", "ttft_p99=0.5",
                      "--tol", "1e-300"], capsys)
    assert "--tol 1e-300: at least 0.0001" in line and "4 significant figures" in line


# -- 7. a class the trace has, but not in every replication's stretch ---------------------
@pytest.mark.parametrize("command", [["sweep", "--rates", "1"],
                                     ["capacity", "--slo", "ttft_p99=0.5"]])
def test_a_class_missing_from_a_replications_stretch_names_it(tmp_path, capsys, command):
    labels = ["chat"] * 10 + ["other"] * 290
    path = trace_scenario(tmp_path, rows=300, bound="  num_requests: 100\n  classes:\n"
                          "    chat: {slo: {ttft_s: 0.1}}", labels=labels)
    line = one_error([command[0], str(path), *command[1:], "--seeds", "3", "--out",
                      str(tmp_path / "o"), "--quiet", "--no-plots"], capsys)
    assert "workload.classes.chat: --seeds 3: replication 2 of 3 replays the trace from " \
           "row 100" in line
    assert "last row of class 'chat' is row 9" in line and "--seeds 1 keeps" in line


# -- 8. an execution flag that would be ignored -------------------------------------------
@pytest.mark.parametrize("command", [["sweep", "--rates", "1"],
                                     ["capacity", "--slo", "ttft_p99=0.5"]])
def test_a_ray_address_without_the_ray_backend_is_refused(tmp_path, capsys, command):
    line = one_error([command[0], str(MD1), *command[1:], "--ray-address", "foo",
                      "--set", "workload.num_requests=20", "--out", str(tmp_path / "o"),
                      "--quiet", "--no-plots", "--workers", "1"], capsys)
    assert "--ray-address foo: only --backend ray joins a Ray cluster" in line


def test_a_sweep_spec_refuses_an_empty_point_however_it_is_run(tmp_path):
    path = trace_scenario(tmp_path, first_s=20.0)
    spec = SweepSpec(read_raw(path), str(path), path.parent, [0.05], ["continuous"], [1], [1],
                     [0])
    with pytest.raises(ServesimError, match="rate=0.05 seed=0: no request arrived"):
        run_sweep(spec, tmp_path / "o", workers=1, plots=False)
