"""Sweeps: grid parsing, per-point overrides, CI aggregation, caching/resume, determinism."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import t as student_t

import sim.study.pointrun as pr
import sim.study.sweeppoint as sp
from sim.cli import main as cli_main
from sim.errors import ServesimError
from sim.report.slospec import parse_slo, parse_slos
from sim.study.studyargs import parse_ints, parse_names, parse_rates
from sim.study.sweep import SweepSpec, aggregate, read_csv, run_sweep
from sim.study.sweeppoint import PointKey, make_task, point_raw, read_raw

ROOT = Path(__file__).resolve().parents[1]
MD1 = ROOT / "scenarios" / "capacity-md1.yaml"


def md1_spec(rates: list[float], seeds: int = 1, n: int = 300, **kw) -> SweepSpec:
    """The M/D/1 scenario (D = 0.02 s) with ``n`` requests per point."""
    raw = read_raw(MD1, [f"workload.num_requests={n}"])
    return SweepSpec(raw, str(MD1), MD1.parent, rates, ["continuous"], [1], [1],
                     list(range(seeds)), **kw)


# -- parsing -------------------------------------------------------------------------
def test_parse_rates_ranges_and_lists():
    assert parse_rates("1:5:1") == [1, 2, 3, 4, 5]
    assert parse_rates("0.1:0.3:0.1") == [0.1, 0.2, 0.3]
    assert parse_rates("1:2:0.4") == [1.0, 1.4, 1.8]
    assert parse_rates("8,2,4") == [2, 4, 8]


@pytest.mark.parametrize("bad", ["5:1:1", "1:5:0", "1:5", "a:b:c", "x", "-1,2", "0:4:1", "2,2",
                                 "1,,2", "1,2,", "1:inf:1", "nan:2:1"])
def test_parse_rates_errors_name_flag_and_value(bad):
    with pytest.raises(ServesimError, match=f"--rates {bad}"):
        parse_rates(bad)


@pytest.mark.parametrize("grid, points", [("1:1e6:1e-9", "1e+15"), ("1:100000:1", "1e+05")])
def test_a_rate_grid_of_more_than_ten_thousand_points_is_refused_before_it_runs(
        grid: str, points: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(f"--rates {grid}: {points} rates; at "
                                                      "most 10,000")):
        parse_rates(grid)
    assert len(parse_rates("1:10000:1")) == 10_000


@pytest.mark.parametrize("parse, flag, text, allowed", [
    (parse_rates, "--rates", "1,,2", "START:STOP:STEP or a comma list"),
    (parse_rates, "--rates", "2,4,", "START:STOP:STEP or a comma list"),
    (parse_ints, "--tp", "1,,2", "a comma list of positive integers"),
    (parse_names, "--policies", "orca, ,continuous", "distinct names separated by commas")])
def test_an_empty_item_in_a_comma_list_is_refused_not_dropped(
        parse: Any, flag: str, text: str, allowed: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(f"{flag} {text}: an empty item; "
                                                      f"expected {allowed}")):
        parse(text, flag)


def test_parse_lists():
    assert parse_ints("1,2,4", "--tp") == [1, 2, 4]
    assert parse_names("continuous, orca", "--policies") == ["continuous", "orca"]
    for bad in ("0", "1,1", "a", "1,,2"):
        with pytest.raises(ServesimError, match="--tp"):
            parse_ints(bad, "--tp")


def test_parse_slo():
    s = parse_slo("ttft_p99=0.5")
    assert (s.metric, s.stat, s.limit_s, s.column) == ("ttft", "p99", 0.5, "ttft_p99")
    assert parse_slo("tpot_mean=50ms").limit_s == pytest.approx(0.05)
    assert s.met(0.5) and not s.met(0.51) and not s.met(None) and not s.met(math.nan)
    for bad in ("foo=1", "ttft_p42=1", "ttft_p99=abc", "ttft_p99=-1", "ttft_p99"):
        with pytest.raises(ServesimError, match=f"--slo {bad}"):
            parse_slo(bad)
    with pytest.raises(ServesimError, match="twice"):
        parse_slos(["ttft_p99=1", "ttft_p99=2"])


@pytest.mark.parametrize("item, seconds", [
    ("ttft_p99=500", None), ("ttft_p99=500s", 500.0), ("ttft_p99=500ms", 0.5),
    ("ttft_p99=60", 60.0), ("queueing_max=61", None), ("tpot_p99=50", None),
    ("tpot_p99=1", 1.0), ("itl_p99=2", None), ("e2e_p99=3600", 3600.0),
    ("e2e_p99=4e3", None), ("tpot_p99=2S", 2.0), ("ttft_p99=1_000", None),
])
def test_a_bare_slo_number_past_its_metric_s_range_needs_a_unit(item: str,
                                                                 seconds: float | None):
    # ttft_p99=500 is milliseconds meant far more often than eight minutes.
    if seconds is not None:
        assert parse_slo(item).limit_s == pytest.approx(seconds)
        return
    with pytest.raises(ServesimError) as err:
        parse_slo(item)
    value = item.split("=")[1]
    assert str(err.value).startswith(f"--slo {item}: ")
    assert f"write {value}ms for milliseconds, or {value}s if seconds are meant" in str(err.value)


# -- one point ----------------------------------------------------------------------------
def test_point_overrides_generated_workload():
    raw = read_raw(MD1)
    p = point_raw(raw, PointKey("continuous", 2, 4, 12.5, 7), horizon_factor=4.0)
    assert p["workload"]["arrivals"]["rate"] == 12.5
    assert p["workload"]["seed"] == 7
    assert (p["cluster"]["replicas"], p["hardware"]["tp"]) == (2, 4)
    assert p["horizon_s"] == pytest.approx(4 * 4000 / 12.5 + 60)
    assert "horizon_s" not in raw  # the base mapping is not modified
    raw["horizon_s"] = 5.0
    assert point_raw(raw, PointKey("continuous", 1, 1, 1.0, 0), 4.0)["horizon_s"] == 5.0


def test_point_overrides_trace_workload(tmp_path):
    trace = tmp_path / "t.csv"
    rng = np.random.default_rng(1)
    arr = np.cumsum(rng.exponential(0.5, 200))
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{a:.6f},10,1\n" for a in arr))
    scen = tmp_path / "s.yaml"
    scen.write_text(MD1.read_text().replace(
        "  arrivals: {process: poisson, rate: 30.0}\n", f"  trace: {{path: {trace}, time_scale: "
        "0.5}\n").replace("  lengths:\n    prompt: {dist: fixed, value: 10}\n"
                          "    output: {dist: fixed, value: 1}\n", "").replace(
        "  num_requests: 4000\n", ""))
    raw = read_raw(scen)
    task = make_task(raw, str(scen), tmp_path, PointKey("continuous", 1, 1, 20.0, 0))
    assert task.raw["workload"]["trace"]["target_rate"] == 20.0
    assert task.raw["workload"]["trace"]["time_scale"] == 1.0
    row = pr.run_task(task)
    assert row["offered_rps"] == pytest.approx(20.0, rel=0.01)
    assert row["finished"] == 200


def trace_scenarios() -> list[Path]:
    """The shipped scenarios whose workload replays a trace."""
    import yaml

    return [p for p in sorted((ROOT / "scenarios").glob("*.yaml"))
            if "trace" in (yaml.safe_load(p.read_text()).get("workload") or {})]


def test_every_shipped_trace_scenario_is_offered_the_rate_asked():
    from sim.config.scenario import from_dict
    from sim.workload.build import build_requests
    from sim.workload.traces import find_trace, load_trace

    paths = trace_scenarios()
    assert {p.stem for p in paths} >= {"quickstart", "policies-disaggregated"}
    for path in paths:
        raw = read_raw(path)
        policy = raw["serving"]["policy"]
        # 25 req/s x 900 s is more than the trace holds: it is replayed whole, at 25.
        for rate in (1.0, 3.7, 11.0, 25.0):
            task = make_task(raw, str(path), path.parent, PointKey(policy, 1, 1, rate, 0))
            sc = from_dict(task.raw, task.source, path.parent)
            rng = np.random.default_rng(np.random.SeedSequence(0).spawn(3)[0])
            arr = build_requests(sc.workload, sc.base_dir, rng, sc.source,
                                 sc.model.max_context).arrival_s
            offered = (len(arr) - 1) / (arr[-1] - arr[0])
            assert offered == pytest.approx(rate, rel=0.01), (path.name, rate)
            # The window: rate x duration_s requests (or the whole trace), all before it.
            wl = sc.workload
            rows = len(load_trace(find_trace(wl.trace.path, sc.base_dir)))
            assert len(arr) == min(int(rate * wl.duration_s), rows)
            assert arr[-1] < wl.duration_s
        # The point's row records the rate as simulated (the run's own offered rate).
        row = pr.run_task(make_task(raw, str(path), path.parent,
                                    PointKey(policy, 1, 1, 2.0, 0)))
        assert row["offered_rps"] == pytest.approx(2.0, rel=0.01) and row["finished"] == 1800


def test_a_trace_without_gaps_to_rescale_names_target_rate(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "5.0,10,1\n" * 3)
    scen = tmp_path / "s.yaml"
    scen.write_text(MD1.read_text().replace(
        "  arrivals: {process: poisson, rate: 30.0}\n", f"  trace: {{path: {trace}}}\n")
        .replace("  lengths:\n    prompt: {dist: fixed, value: 10}\n"
                 "    output: {dist: fixed, value: 1}\n", ""))
    task = make_task(read_raw(scen), str(scen), tmp_path, PointKey("continuous", 1, 1, 2.0, 0))
    with pytest.raises(ServesimError) as e:
        pr.run_task(task)
    assert "\n" not in str(e.value) and "workload.trace.target_rate" in str(e.value)
    assert "same time" in str(e.value)


def test_unknown_policy_fails_before_running():
    spec = md1_spec([1.0])
    spec.policies = ["nosuch"]
    with pytest.raises(ServesimError, match="unknown policy 'nosuch'.*policy=nosuch"):
        spec.tasks()


def test_saturated_point_is_cut_at_the_horizon_and_marked():
    raw = read_raw(MD1, ["workload.num_requests=5000"])
    # Capacity is 1/D = 50 req/s; at 500 req/s the queue grows without bound. The
    # arrivals span 10 s, so horizon factor 1 cuts the run at 10 + 60 s: 3,500 served.
    task = make_task(raw, str(MD1), MD1.parent, PointKey("continuous", 1, 1, 500.0, 0), 1.0)
    assert task.raw["horizon_s"] == pytest.approx(5000 / 500 + 60)
    row = pr.run_task(task)
    assert row["saturated"] == 1.0
    assert row["finished"] == pytest.approx(3500, abs=2)
    assert row["finished"] + row["unfinished"] == 5000
    ok = pr.run_task(make_task(raw, str(MD1), MD1.parent, PointKey("continuous", 1, 1, 20.0, 0)))
    assert ok["saturated"] == 0.0 and ok["unfinished"] == 0


def test_a_point_an_outage_left_behind_is_saturated():
    # Two M/D/1 replicas serve 100 req/s; offered 90, one is down from 10 to 25 s: the
    # queue grows by 40 req/s for 15 s and drains at 10 req/s after, beyond the last
    # arrival (~44 s). The second quarter's delays exceed the last's, so the quarters'
    # rule alone had called it unsaturated (TTFT p99 12 s); the run's own verdict, its
    # waiting queue's trend, says it never caught up. Without the outage, or at 40 req/s
    # (under one replica's 50), it is not saturated.
    fault = "faults={outages: [{replica: 0, at_s: 10, duration_s: 15}]}"
    raw = read_raw(MD1, ["cluster.replicas=2", fault])
    row = pr.run_task(make_task(raw, str(MD1), MD1.parent, PointKey("continuous", 2, 1, 90.0, 0)))
    assert row["saturated"] == 1.0 and row["queue_growth_s"] < 0 and row["unfinished"] == 0
    calm = pr.run_task(make_task(read_raw(MD1, ["cluster.replicas=2"]), str(MD1), MD1.parent,
                                 PointKey("continuous", 2, 1, 90.0, 0)))
    slow = pr.run_task(make_task(raw, str(MD1), MD1.parent, PointKey("continuous", 2, 1, 40.0, 0)))
    assert calm["saturated"] == 0.0 and slow["saturated"] == 0.0


def test_a_point_cut_by_the_scenario_horizon_judges_only_what_arrived():
    from sim.config.scenario import from_dict
    from sim.workload.build import build_requests

    # 4,000 requests at 20 req/s would arrive over ~200 s; the scenario stops at 50 s.
    # The ~1,000 that arrived are served at 40% load: not saturated, none (or the one in
    # service) unfinished. The ~3,000 due later are no backlog.
    raw = read_raw(MD1, ["horizon_s=50"])
    task = make_task(raw, str(MD1), MD1.parent, PointKey("continuous", 1, 1, 20.0, 0))
    sc = from_dict(task.raw, task.source, MD1.parent)
    rng = np.random.default_rng(np.random.SeedSequence(sc.workload.seed).spawn(3)[0])
    arr = build_requests(sc.workload, sc.base_dir, rng, sc.source).arrival_s
    came = arr[arr < 50.0]
    row = pr.run_task(task)
    assert row["saturated"] == 0.0 and row["unfinished"] <= 1
    assert row["finished"] + row["unfinished"] == len(came)
    assert 800 < len(came) < 1200 and len(arr) == 4000
    assert row["offered_rps"] == pytest.approx((len(came) - 1) / (came[-1] - came[0]))
    # At 100 req/s, twice the capacity (1 / 20 ms), the queue of what arrived by 20 s
    # grows: saturated, though 2,000 requests never arrived.
    raw = read_raw(MD1, ["horizon_s=20"])
    over = pr.run_task(make_task(raw, str(MD1), MD1.parent,
                                 PointKey("continuous", 1, 1, 100.0, 0)))
    assert over["saturated"] == 1.0 and over["finished"] == pytest.approx(1000, abs=2)
    assert 800 < over["unfinished"] < 1200


# -- aggregation ---------------------------------------------------------------------------
def test_aggregate_mean_and_student_t_interval():
    rows = [{"policy": "p", "replicas": 1, "tp": 1, "pp": 1, "rate": 1.0, "seed": s,
             **{c: None for c in sp.METRIC_COLUMNS}} for s in range(3)]
    for r, v in zip(rows, (1.0, 2.0, 4.0), strict=True):
        r["ttft_p99"] = v
    rows[2]["tpot_p99"] = 3.0
    g = aggregate(rows)
    assert len(g) == 1 and g[0]["seeds"] == 3
    half = student_t.ppf(0.975, 2) * np.std([1, 2, 4], ddof=1) / math.sqrt(3)
    assert g[0]["ttft_p99"] == pytest.approx(7 / 3)
    assert g[0]["ttft_p99_ci"] == pytest.approx(half)
    assert g[0]["tpot_p99"] == 3.0 and g[0]["tpot_p99_ci"] is None  # one defined value
    assert g[0]["e2e_p99"] is None


# -- whole sweeps ----------------------------------------------------------------------------
def test_sweep_csv_identical_for_one_and_two_workers(tmp_path):
    spec = md1_spec([10.0, 25.0, 40.0], seeds=2)
    a = run_sweep(spec, tmp_path / "a", workers=1, plots=False)
    b = run_sweep(spec, tmp_path / "b", workers=2, plots=False)
    assert a.stats.computed == b.stats.computed == 6
    for name in ("points.csv", "sweep.csv", "sweep.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    grid = read_csv(tmp_path / "a" / "sweep.csv")
    pts = read_csv(tmp_path / "a" / "points.csv")
    assert [g["rate"] for g in grid] == [10.0, 25.0, 40.0]
    # Each grid value is the mean of its seeds' values.
    for g in grid:
        vals = [p["ttft_p99"] for p in pts if p["rate"] == g["rate"]]
        assert g["ttft_p99"] == pytest.approx(np.mean(vals))
        assert g["ttft_p99_ci"] is not None and g["ttft_p99_ci"] > 0
    # Latency grows with load on an M/D/1 queue.
    assert grid[0]["ttft_mean"] < grid[1]["ttft_mean"] < grid[2]["ttft_mean"]


def test_interrupted_sweep_resumes_without_recomputing(tmp_path, monkeypatch):
    spec = md1_spec([5.0, 10.0, 15.0, 20.0, 25.0], seeds=2)
    real = pr.run_task
    first: list[str] = []

    def interrupt_after_three(task):
        if len(first) == 3:
            raise KeyboardInterrupt
        first.append(task.digest)
        return real(task)

    monkeypatch.setattr(pr, "run_task", interrupt_after_three)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path, workers=1, plots=False)
    assert not (tmp_path / "sweep.csv").exists()
    assert len(list((tmp_path / "cache").glob("*.json"))) == 3

    second: list[str] = []

    def record(task):
        second.append(task.digest)
        return real(task)

    monkeypatch.setattr(pr, "run_task", record)
    res = run_sweep(spec, tmp_path, workers=1, plots=False)
    assert len(second) == 7 and not set(second) & set(first)
    assert (res.stats.cached, res.stats.computed) == (3, 7)

    # A third run (in a process pool) and a wider grid run only what is new.
    monkeypatch.setattr(pr, "run_task", real)
    again = run_sweep(spec, tmp_path, workers=2, plots=False)
    assert again.stats.computed == 0
    wider = md1_spec([5.0, 10.0, 15.0, 20.0, 25.0, 30.0], seeds=2)
    more = run_sweep(wider, tmp_path, workers=2, plots=False)
    assert (more.stats.cached, more.stats.computed) == (10, 2)


def test_fresh_run_equals_resumed_run(tmp_path, monkeypatch):
    spec = md1_spec([10.0, 30.0], seeds=2)
    real = pr.run_task
    calls: list[int] = []

    def flaky(task):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(pr, "run_task", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path / "resumed", workers=1, plots=False)
    monkeypatch.setattr(pr, "run_task", real)
    run_sweep(spec, tmp_path / "resumed", workers=1, plots=False)
    run_sweep(spec, tmp_path / "fresh", workers=1, plots=False, use_cache=False)
    assert not (tmp_path / "fresh" / "cache").exists()
    assert ((tmp_path / "resumed" / "sweep.csv").read_bytes()
            == (tmp_path / "fresh" / "sweep.csv").read_bytes())


def test_corrupt_cache_entry_is_recomputed(tmp_path):
    spec = md1_spec([10.0])
    run_sweep(spec, tmp_path, workers=1, plots=False)
    (entry,) = (tmp_path / "cache").glob("*.json")
    entry.write_text('{"row": {"ttft_p99"')  # as if a crash cut the write short
    assert run_sweep(spec, tmp_path, workers=1, plots=False).stats.computed == 1


def test_cli_sweep_end_to_end(tmp_path, capsys):
    out = tmp_path / "o"
    rc = cli_main(["sweep", str(MD1), "--rates", "10:30:10", "--seeds", "2", "--set",
                   "workload.num_requests=200", "--slo", "ttft_p99=0.1", "--out", str(out),
                   "--workers", "2", "--quiet", "--no-plots"])
    assert rc == 0
    grid = read_csv(out / "sweep.csv")
    assert [(g["rate"], g["seeds"]) for g in grid] == [(10.0, 2.0), (20.0, 2.0), (30.0, 2.0)]
    rc = cli_main(["sweep", str(MD1), "--rates", "5:1:1", "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rates 5:1:1" in err[0]
    assert cli_main(["sweep", str(MD1), "--rates", "1", "--slo", "foo=1"]) == 2
    assert "--slo foo=1" in capsys.readouterr().err
    assert cli_main(["sweep", str(MD1), "--rates", "1", "--policies", "nosuch",
                     "--out", str(out)]) == 2
    assert "unknown policy 'nosuch'" in capsys.readouterr().err
    # A --set of the rate the sweep itself sets would be saved and never used.
    assert cli_main(["sweep", str(MD1), "--rates", "1", "--set", "workload.arrivals.rate=3",
                     "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.endswith(
        "--set workload.arrivals.rate=3: the sweep sets each point's rate (--rates)\n")
    # So is one of the policy or replicas the grid sets, dotted or in mapping form.
    for sets, want in (
            ("workload.arrivals={process: poisson, rate: 7}",
             "--set workload.arrivals={process: poisson, rate: 7}: the sweep sets each "
             "point's rate (--rates)\n"),
            ("serving.policy=static", "--policies: --set serving.policy=static: --policies "
             "sets serving.policy for each point, so the override would be lost"),
            ("serving={policy: static}", "--policies: --set serving={policy: static}: "
             "--policies sets serving.policy for each point"),
            ("cluster={replicas: 4}", "--replicas: --set cluster={replicas: 4}: --replicas "
             "sets cluster.replicas for each point")):
        assert cli_main(["sweep", str(MD1), "--rates", "1", "--policies", "continuous",
                         "--replicas", "2", "--set", sets, "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and want in err, err


def test_sweep_draws_no_progress_bar_into_a_log(tmp_path, capsys):
    """Without --quiet, a stderr that is not a terminal (a log file, CI) gets no tqdm
    carriage-return lines; the table still goes to stdout."""
    rc = cli_main(["sweep", str(MD1), "--rates", "10,20", "--seeds", "1", "--set",
                   "workload.num_requests=100", "--slo", "ttft_p99=0.1", "--workers", "1",
                   "--out", str(tmp_path / "o"), "--no-plots"])
    assert rc == 0
    cap = capsys.readouterr()
    assert "\r" not in cap.err and "pt/s" not in cap.err and "pt]" not in cap.err
    assert "sweep.csv" in cap.out


def _ray():
    """Ray, or a skip; `make test` (SERVESIM_REQUIRE_RAY=1) fails instead of skipping."""
    if os.environ.get("SERVESIM_REQUIRE_RAY"):
        import ray
        return ray
    return pytest.importorskip("ray")


def test_ray_backend_matches_local(tmp_path):
    """A sweep on a local Ray cluster (a head started here, on loopback, two CPUs) gives
    the process pool's points.csv and sweep.csv byte for byte."""
    ray = _ray()
    spec = md1_spec([10.0, 30.0], seeds=2)
    run_sweep(spec, tmp_path / "local", workers=2, plots=False, use_cache=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _node_ip_address="127.0.0.1")
    try:
        assert ray.is_initialized()
        res = run_sweep(spec, tmp_path / "ray", backend="ray", plots=False, use_cache=False)
        # Every point was computed as a Ray task, none served from a cache.
        assert res.stats.computed == 4 and res.stats.cached == 0
        nodes = ray.nodes()
        assert len(nodes) == 1 and nodes[0]["Alive"]
    finally:
        ray.shutdown()
    for name in ("points.csv", "sweep.csv"):
        assert ((tmp_path / "local" / name).read_bytes()
                == (tmp_path / "ray" / name).read_bytes())


def test_sweep_json_gives_each_shape_its_memory(tmp_path):
    # One entry a (policy, tp, pp): a replica's memory as a run of that shape sizes it
    # (the rate and the seed change none of it); the report draws it as a table.
    import json

    from sim.config.scenario import load
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    out = tmp_path / "o"
    assert cli_main(["sweep", str(MD1), "--rates", "10", "--tp", "1,2", "--set",
                     "workload.num_requests=50", "--out", str(out), "--workers", "1",
                     "--quiet", "--no-plots"]) == 0
    manifest = json.loads((out / "sweep.json").read_text())
    assert [(e["policy"], e["tp"], e["pp"]) for e in manifest["memory"]] == [
        ("continuous", 1, 1), ("continuous", 2, 1)]
    for e in manifest["memory"]:
        run = summarize(simulate(load(MD1, ["workload.num_requests=10",
                                            f"hardware.tp={e['tp']}"])))
        assert e["memory"] == json.loads(json.dumps(run["memory"]))
    assert cli_main(["report", str(out)]) == 0
    assert "GPU memory of each replica shape" in (out / "report.html").read_text()
