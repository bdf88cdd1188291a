"""Steady-state points, zero-load floors, pruning and independent trace replications."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.cli import main as cli_main
from sim.errors import ServesimError
from sim.report.slospec import parse_slos
from sim.study.capacity import run_capacity
from sim.study.pointrun import PointCache
from sim.study.ratesearch import MaxRate, Search
from sim.study.steady import (
    MIN_KEPT,
    Measured,
    Steady,
    floor_stats,
    floor_violations,
    half_width,
    point_done,
    steady_stats,
)
from sim.study.sweep import read_csv
from sim.study.sweeppoint import PointKey, point_raw, read_raw
from sim.study.traceplan import trace_plan
from sim.workload.traces import load_trace
from sim.workload.tracetools import skip_rows

ROOT = Path(__file__).resolve().parents[1]
MD1 = ROOT / "scenarios" / "capacity-md1.yaml"

# Long decodes on a linear cost: a request lives about 8 s near capacity, so a 150-request
# run (about 20 s of arrivals) is mostly the batch filling up and draining.
DECODE_HEAVY = """\
name: decode-heavy
model: tiny
cost:
  linear: {step_s: 0.005, per_new_token_s: 0.0002}
serving:
  policy: continuous
  max_num_seqs: 256
  max_num_batched_tokens: 4096
  block_size: 16
workload:
  arrivals: {process: poisson, rate: 8.0}
  lengths:
    prompt: {dist: fixed, value: 50}
    output: {dist: uniform, low: 200, high: 600}
  num_requests: 150
  seed: 0
"""

TRACE_SCENARIO = """\
name: small-trace
model: tiny
cost:
  linear: {step_s: 0.01, per_new_token_s: 0.001}
serving:
  policy: continuous
  max_num_seqs: 8
  max_num_batched_tokens: 256
  block_size: 4
workload:
  trace: {path: t.csv, format: servesim}
  num_requests: 40
  seed: 0
"""


def write_trace(folder: Path, rows: int) -> None:
    """A servesim-format trace: one request a second, prompt 10 + i mod 7, output 2 + i mod 5."""
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [f"{i}.0,{10 + i % 7},{2 + i % 5}" for i in range(rows)]
    (folder / "t.csv").write_text("\n".join(lines) + "\n")


def test_half_width_is_batch_means_by_hand():
    # Ten batches of 3 values whose means are 0..9: sd of 0..9 is sqrt(55/6).
    values = np.repeat(np.arange(10.0), 3) + np.tile([-1.0, 0.0, 1.0], 10)
    expected = 2.2621572 * np.sqrt(55.0 / 6.0) / np.sqrt(10)
    assert half_width(values, "mean") == pytest.approx(expected, rel=1e-7)
    assert half_width(values[:9], "mean") is None  # fewer values than batches
    assert half_width(np.full(30, 0.2), "p99") == 0.0


def test_warmup_and_drain_cut_by_fraction_and_by_lifetime():
    n = 1000
    arrival = np.arange(n, dtype=float)  # one a second
    lat = {m: np.full(n, 0.5) for m in ("ttft", "tpot", "queueing")}
    lat["e2e"] = np.full(n, 0.5)  # short lives: the 10% rule decides
    st = Steady(warmup=0.1, precision=0.1, columns=("ttft_p99",))
    m = steady_stats(lat, arrival, np.ones(n, bool), st)
    assert m.discarded == 200 and m.settled and m.arrived == n
    # Lives of 300 s: arrivals less than 300 s after the first or before the last go
    # (t < 300 and t > 699: 300 each), 400 kept: under half, so not settled.
    lat["e2e"] = np.full(n, 300.0)
    m = steady_stats(lat, arrival, np.ones(n, bool), st)
    assert m.discarded == 600 and not m.settled
    # Lives longer than the run (overload): the 10% rule's figures, not settled.
    lat["e2e"] = np.full(n, 2000.0)
    m = steady_stats(lat, arrival, np.ones(n, bool), st)
    assert m.discarded == 200 and not m.settled and m.cols["ttft_p99"] == 0.5
    # Requests due after a horizon take no part; warmup 0 keeps everything.
    came = np.arange(n) < 500
    m = steady_stats(lat, arrival, came, Steady(warmup=0.0, columns=("ttft_p99",)))
    assert m.discarded == 0 and m.settled and m.arrived == 500
    # Fewer kept than MIN_KEPT (batches of 20): not settled, however calm.
    few = np.arange(n) < MIN_KEPT + 10
    m = steady_stats({**lat, "e2e": np.full(n, 0.5)}, arrival, few, st)
    assert m.discarded == 2 * ((MIN_KEPT + 10) // 10) and not m.settled


def test_point_done_needs_settled_then_precision_or_a_clear_verdict():
    st = Steady(precision=0.1, columns=("ttft_p99", "tpot_p99"),
                targets=(("ttft_p99", 0.5), ("tpot_p99", 0.05)))
    row = {"ttft_p99": 0.3, "tpot_p99": 0.04, "saturated": 0.0}

    def m(rt, rp, settled=True, arrived=MIN_KEPT):
        return Measured({}, {"ttft_p99": rt, "tpot_p99": rp}, 0, settled, arrived)

    assert point_done(row, m(0.05, 0.05), st)  # precise
    assert not point_done(row, m(0.05, 0.05, settled=False), st)
    assert point_done(row, m(0.5, 0.2), st)  # 0.3x1.5 < 0.5 and 0.04x1.2 < 0.05: both met
    assert not point_done(row, m(0.5, 0.3), st)  # tpot's interval holds 0.05: unclear
    assert point_done({**row, "tpot_p99": 0.07}, m(0.9, 0.2), st)  # tpot clearly missed
    assert point_done({**row, "saturated": 1.0}, m(None, None, False), st)
    # Too few arrivals to call it saturated: the point runs again, larger.
    assert not point_done({**row, "saturated": 1.0}, m(None, None, False, MIN_KEPT - 1), st)


def test_skip_rows_keeps_gaps_from_the_first_arrival(tmp_path):
    write_trace(tmp_path, 10)
    tr = load_trace(tmp_path / "t.csv", "servesim")
    out, change = skip_rows(tr, 4)
    assert out.arrival_s.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert out.prompt_tokens.tolist() == [14, 15, 16, 10, 11, 12]
    assert change.rows_affected == 4 and "start_row 4" in str(change)
    with pytest.raises(ServesimError, match="got 10, but .*t.csv has 10 rows") as e:
        skip_rows(tr, 10)
    assert e.value.where == "start_row"


def test_trace_plan_counts_windows_that_do_not_overlap(tmp_path):
    write_trace(tmp_path, 100)
    src = tmp_path / "s.yaml"
    src.write_text(TRACE_SCENARIO)
    raw = read_raw(src)
    plan = trace_plan(raw, str(src), tmp_path, 3, 40)
    assert plan is not None and (plan.replications, plan.segment, plan.rows) == (2, 50, 100)
    assert [plan.start_row(r) for r in range(2)] == [0, 50]
    assert "2 independent replication(s), not 3" in plan.note
    one = trace_plan(raw, str(src), tmp_path, 3, 60)
    assert one is not None and one.replications == 1 and "no interval" in one.note
    assert trace_plan(read_raw(MD1), str(MD1), MD1.parent, 3, 40) is None


def test_trace_sweep_replications_differ_and_one_window_gives_no_interval(tmp_path, capsys):
    write_trace(tmp_path, 100)
    src = tmp_path / "s.yaml"
    src.write_text(TRACE_SCENARIO)
    out = tmp_path / "sw"
    assert cli_main(["sweep", str(src), "--rates", "5", "--seeds", "2", "--out", str(out),
                     "--workers", "1", "--no-plots", "--quiet"]) == 0
    p0, p1 = read_csv(out / "points.csv")
    assert p0["ttft_mean"] != p1["ttft_mean"]  # two stretches of the trace, not one twice
    (g,) = read_csv(out / "sweep.csv")
    assert g["seeds"] == 2 and g["ttft_mean_ci"] > 0
    out2 = tmp_path / "sw2"
    assert cli_main(["sweep", str(src), "--rates", "5", "--seeds", "3", "--out", str(out2),
                     "--workers", "1", "--no-plots", "--set", "workload.num_requests=60"]) == 0
    assert "no interval" in capsys.readouterr().out
    (g,) = read_csv(out2 / "sweep.csv")
    assert g["seeds"] == 1 and g["ttft_mean_ci"] is None


def test_md1_zero_load_floor_is_the_service_time():
    raw = point_raw(read_raw(MD1), PointKey("continuous", 1, 1, 30.0, 0), None)
    f = floor_stats(raw, str(MD1), MD1.parent)
    # Alone, every request is one 10-token prefill of 0.01 + 10 x 0.001 s.
    assert f["ttft_p99"] == pytest.approx(0.02) and f["ttft_mean_low"] == pytest.approx(0.02)
    assert f["tpot_p99"] is None  # one output token: no TPOT
    assert floor_violations(f, parse_slos(["ttft_mean=10ms"])) == [
        "ttft_mean at zero load is 20 ms; the target is 10 ms"]
    assert floor_violations(f, parse_slos(["ttft_p99=21ms"])) == []


def test_impossible_slo_is_one_line_naming_floor_and_target(tmp_path, capsys):
    rc = cli_main(["capacity", str(MD1), "--slo", "ttft_p99=0.1ms", "--out",
                   str(tmp_path / "c"), "--workers", "1"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "ttft_p99 at zero load is 20 ms; the target is 0.1 ms (continuous, tp 1)" in err[0]


def test_steady_capacity_answer_from_a_short_run_matches_the_long_run(tmp_path):
    """150 requests, measured in steady state, give the GPU count that 1,500 do (4;
    docs/capacity.md records both runs); counted whole, one run of 150 requests per
    point as before, they give 2."""
    src = tmp_path / "dh.yaml"
    src.write_text(DECODE_HEAVY)
    slos = parse_slos(["tpot_p99=0.02"])

    def answer(steady: Steady | None) -> tuple[int | None, int]:
        s = Search(read_raw(src), str(src), tmp_path, slos, [0, 1], PointCache(None),
                   workers=2, steady=steady)
        res = run_capacity(s, ["continuous"], [1], start=8.0, tol=0.05, target=30.0)
        used = max(int(r.get("requests_used", 150)) for r in res.search)
        return (res.best.replicas if res.best else None), used

    steady = Steady(0.1, 0.1, 64000, ("tpot_p99",), (("tpot_p99", 0.02),))
    replicas, used = answer(steady)
    assert replicas == 4 and used > 150
    assert answer(None) == (2, 150)


def test_pruning_skips_configurations_that_cannot_win():
    raw = read_raw(MD1, ["workload.num_requests=600"])
    s = Search(raw, str(MD1), MD1.parent, parse_slos(["ttft_mean=0.05"]), [0, 1],
               PointCache(None), workers=2)
    res = run_capacity(s, ["continuous"], [1, 2], start=30.0, tol=0.05, target=100.0)
    # The linear cost ignores tp: tp 2 sustains what tp 1 does, at twice the GPUs.
    assert res.best is not None and (res.best.tp, res.best.gpus) == (1, 3)
    assert all(c.gpus <= 3 for c in res.checked if c.tp == 2)
    assert any("tp 2" in p and "more GPUs than the 3" in p for p in res.pruned)


def test_interval_text_is_honest():
    one = MaxRate("continuous", 1, [10.0], [(10.0, 10.2)], 10.0, None)
    assert one.interval_text() == " (one replication: no interval)"
    agree = MaxRate("continuous", 1, [10.0, 10.0], [(10.0, 10.2), (10.0, 10.15)], 10.0, 0.0)
    assert "± 0.2 (search resolution" in agree.interval_text()
    spread = MaxRate("continuous", 1, [9.0, 11.0], [(9.0, 9.1), (11.0, 11.1)], 10.0, 12.7)
    assert spread.interval_text() == " ± 12.7 (95% CI over 2 independent replications)"


def test_cli_capacity_reports_requests_used(tmp_path, capsys):
    out = tmp_path / "cap"
    assert cli_main(["capacity", str(MD1), "--slo", "ttft_mean=0.05", "--seeds", "2",
                     "--set", "workload.num_requests=500", "--out", str(out),
                     "--workers", "2", "--no-plots", "--max-requests", "4000"]) == 0
    text = capsys.readouterr().out
    assert "steady state: first and last 10% of arrivals left out" in text
    rows = read_csv(out / "search.csv")
    assert all(500 <= r["requests_used"] <= 4000 for r in rows)
    assert any(r["requests_used"] > 500 for r in rows)  # near the answer, points grew
    blob = json.loads((out / "capacity.json").read_text())
    assert blob["notes"]


@pytest.mark.parametrize("args, needle", [
    (["--warmup", "0.6"], "--warmup 0.6"),
    (["--precision", "-1"], "--precision -1.0"),
    (["--max-requests", "0"], "--max-requests 0"),
])
def test_cli_steady_flag_errors(args, needle, tmp_path, capsys):
    rc = cli_main(["capacity", str(MD1), "--slo", "ttft_mean=0.05", "--out", str(tmp_path),
                   *args])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_max_requests_without_precision_is_refused(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """sweep measures each point once unless --precision is given: a --max-requests
    beside no precision bounded nothing and had been dropped without a word."""
    assert cli_main(["sweep", str(MD1), "--rates", "20", "--max-requests", "100",
                     "--out", str(tmp_path / "sw")]) == 2
    assert capsys.readouterr().err == (
        "servesim: error: --max-requests 100: bounds the requests a point grows to under "
        "--precision, which is 0 (each point runs once over workload.num_requests); give "
        "--precision too, or leave --max-requests out\n")
    assert not (tmp_path / "sw").exists()


def test_max_requests_below_the_start_is_refused_and_a_capped_point_noted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A cap below the requests a point starts with had been exceeded without a word,
    and a sweep point stopped by the cap short of the precision looked settled."""
    md1 = str(MD1)
    base = ["--set", "workload.num_requests=50", "--no-cache", "--no-plots", "--workers", "1"]
    for cmd in (["sweep", md1, "--rates", "20"],
                ["capacity", md1, "--slo", "ttft_p99=0.5"]):
        assert cli_main([*cmd, *base, "--precision", "0.1", "--max-requests", "10",
                         "--out", str(tmp_path / cmd[0])]) == 2
        assert capsys.readouterr().err == (
            "servesim: error: --max-requests 10: below the 50 requests each point starts "
            "with (workload.num_requests); give at least 50, or a smaller "
            "workload.num_requests\n")
    assert cli_main(["sweep", md1, "--rates", "20", *base, "--precision", "0.001",
                     "--max-requests", "100", "--out", str(tmp_path / "sw")]) == 0
    assert "note: 1 of 1 points stopped at --max-requests (100) before their statistics " \
           "reached ±0.1%" in capsys.readouterr().out
