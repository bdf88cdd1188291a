"""The real replay loop (calibrate/replay.py): it follows the simulator's policies exactly,
runs the tiny model on CPU with consistent bookkeeping, and never imports SimPy."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import e2e

from calibrate.executor import ModelExecutor, replay_on_device
from calibrate.model import build_decoder
from calibrate.replay import STEP_FIELDS, CostExecutor, VirtualClock, WallClock, run_loop
from calibrate.replay_cli import main as replay_main
from calibrate.replay_cli import saturation_rate, serving_config, to_record, trace_workload
from sim.core.engine import Engine
from sim.core.request import FINISHED
from sim.cost.models import LinearCost
from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.errors import ServesimError
from sim.validate.replayfile import read_replay
from sim.validate.validation import scenario_for
from sim.workload.requests import Requests

ROOT = Path(__file__).parents[1]
COST = {"step_s": 0.004, "per_new_token_s": 2e-5, "per_context_token_s": 1e-6,
        "per_seq_s": 1e-4}


def _engine(serving, w, arrival):
    # As a record written before serving.prefix_caching existed: chunked's default (on)
    # must not give the simulation a cache the replay never had.
    limits = {k: v for k, v in dataclasses.asdict(serving).items() if k != "prefix_caching"}
    sc = scenario_for(dataclasses.asdict(MODELS["tiny"]), limits, {"linear": COST}, "eq")
    assert sc.serving.prefix_caching is False
    req = Requests(arrival, w.prompt, w.output)
    return Engine(sc, req, LinearCost(**COST), np.random.default_rng(0)).run()


@pytest.mark.parametrize(("policy", "blocks"), [("continuous", None), ("continuous", 120),
                                                ("chunked", None), ("chunked", 120)])
def test_virtual_replay_equals_the_simulator(policy: str, blocks: int | None) -> None:
    """Same step times in, same schedule out: every first token and finish to the ns,
    with KV pressure (preemption by recompute) and without."""
    w = trace_workload("azure_2023_conv", 150, 2048)
    sv = serving_config({"policy": policy, "max_num_seqs": 12, "max_num_batched_tokens": 2048,
                         "block_size": 16, "num_kv_blocks": blocks or 12 * 128})
    cost = LinearCost(**COST)
    arrival = w.at_rate(0.8 * saturation_rate(w, sv, 4096, cost))
    mine = run_loop(arrival, w.prompt, w.output, sv, 4096, CostExecutor(cost), VirtualClock())
    sim = _engine(sv, w, arrival)
    assert np.array_equal(np.isnan(mine.finish), np.isnan(sim.finish))
    np.testing.assert_allclose(mine.first_token, sim.first_token, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mine.finish, sim.finish, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mine.first_sched, sim.first_sched, rtol=0, atol=1e-9)
    assert np.array_equal(mine.preemptions, sim.preemptions)
    if blocks is not None:
        assert mine.preemptions.sum() > 0  # the KV limit was actually exercised
    assert [s == "finished" for s in mine.status] == list(sim.status == FINISHED)


def test_speed_matched_prediction_recovers_a_uniformly_slower_device() -> None:
    """A device that ran prefill steps 10% and decode-only steps 25% over the cost model:
    the level's measured factors come out exact, and the prediction priced with them
    reproduces every request's latency, where the plain prediction is optimistic."""
    from sim.validate.validation import (
        SpeedMatched,
        compare,
        real_result,
        sensitivity,
        simulate_requests,
        speed_matched,
        step_errors,
    )

    w = trace_workload("azure_2023_conv", 60, 2048)
    sv = serving_config({"policy": "continuous", "max_num_seqs": 12,
                         "max_num_batched_tokens": 2048, "num_kv_blocks": 12 * 128})
    cost = LinearCost(**COST)
    arrival = w.at_rate(0.7 * saturation_rate(w, sv, 4096, cost))
    res = run_loop(arrival, w.prompt, w.output, sv, 4096,
                   CostExecutor(SpeedMatched(cost, 1.1, 1.25)), VirtualClock())
    rec = to_record(res, {"label": "x", "serving": dataclasses.asdict(sv),
                          "model": dataclasses.asdict(MODELS["tiny"])})
    requests, cols, steps = read_replay(rec, "<test>")
    sc = scenario_for(dataclasses.asdict(MODELS["tiny"]), dataclasses.asdict(sv),
                      {"linear": COST}, "sm")
    real = real_result(sc, requests, cols["first_token"], cols["finish"], cols["status"])
    summary = step_errors(steps, cost)
    out, run = speed_matched(sc, requests, real, cost, summary, 0.15)
    np.testing.assert_allclose(run.finish, real.finish, rtol=0, atol=2e-9)
    assert out["prefill_factor"] == pytest.approx(1.1, rel=1e-6)
    assert out["decode_factor"] == pytest.approx(1.25, rel=1e-6)
    for m in ("ttft", "tpot", "e2e"):
        for q in ("p50", "p90", "p99"):
            assert abs(out["comparison"]["metrics"][m][q]["rel_err"]) < 1e-6, (m, q)
    assert out["verdict"]["passed"]
    plain = compare(real, simulate_requests(sc, requests, cost=cost))["metrics"]
    assert plain["tpot"]["p50"]["rel_err"] < -0.15  # 1/1.25 - 1 = -20% on pure decode
    assert plain["ttft"]["p50"]["rel_err"] < -0.05
    # Sensitivity: at x1 it is the plain prediction; cheaper steps, shorter latencies.
    sens = sensitivity(sc, requests, cost, (0.9, 1.0, 1.1))["metrics"]
    for m in ("ttft", "tpot"):
        for q in ("p50", "p90"):
            lo, one, hi = sens[m][q]
            assert one == plain[m][q]["predicted"] and lo < one < hi, (m, q)


def test_virtual_replay_pays_wake_like_the_simulator() -> None:
    """A profile's wake term: the stand-in device pays it after the loop's idle waits
    exactly where sim's replica does, to the ns."""
    from sim.cost.profile import FORMS
    from sim.cost.profilecost import ProfileCost

    coefs = {k: dict.fromkeys(f.coefs, 0.0) for k, f in FORMS.items()}
    coefs["step"].update(const_s=4e-3, per_new_token_s=2e-5, per_seq_s=1e-4)
    cost = ProfileCost(MODELS["tiny"], 1, "t", "fp32", coefs,
                       wake={"max_s": 2e-3, "tau_s": 0.05})
    w = trace_workload("azure_2023_conv", 80, 2048)
    sv = serving_config({"policy": "continuous", "max_num_seqs": 12,
                         "max_num_batched_tokens": 2048, "num_kv_blocks": 12 * 128})
    arrival = w.at_rate(0.3 * saturation_rate(w, sv, 4096, cost))
    clock = VirtualClock()
    mine = run_loop(arrival, w.prompt, w.output, sv, 4096, CostExecutor(cost, clock), clock)
    sc = scenario_for(dataclasses.asdict(MODELS["tiny"]), dataclasses.asdict(sv),
                      {"linear": COST}, "wake")
    req = Requests(arrival, w.prompt, w.output)
    sim = Engine(sc, req, cost, np.random.default_rng(0)).run()
    np.testing.assert_allclose(mine.first_token, sim.first_token, rtol=0, atol=1e-9)
    np.testing.assert_allclose(mine.finish, sim.finish, rtol=0, atol=1e-9)
    plain = Engine(sc, req, ProfileCost(MODELS["tiny"], 1, "t", "fp32", coefs),
                   np.random.default_rng(0)).run()
    # The term mattered: arrivals that woke the idle server got their first token later
    # (and the schedule after them moved).
    assert np.abs(sim.first_token - plain.first_token).max() > 1e-3


class InterruptedAt(CostExecutor):
    """A stand-in device interrupted (as by a timeout's SIGINT) in its ``k``-th step."""

    def __init__(self, cost: LinearCost, k: int):
        super().__init__(cost)
        self.k, self.calls = k, 0

    def step(self, entries, tokens):
        self.calls += 1
        if self.calls == self.k:
            raise KeyboardInterrupt
        return super().step(entries, tokens)


def test_an_interrupted_replay_keeps_what_it_served() -> None:
    w = trace_workload("azure_2023_conv", 60, 2048)
    sv = serving_config({"policy": "continuous", "max_num_seqs": 8,
                         "max_num_batched_tokens": 2048, "num_kv_blocks": 8 * 128})
    cost = LinearCost(**COST)
    arrival = w.at_rate(0.7 * saturation_rate(w, sv, 4096, cost))
    whole = run_loop(arrival, w.prompt, w.output, sv, 4096, CostExecutor(cost), VirtualClock())
    k = len(whole.steps) // 2
    # Calibration's uses of the loop (host timing, saturation) stop when asked.
    with pytest.raises(KeyboardInterrupt):
        run_loop(arrival, w.prompt, w.output, sv, 4096, InterruptedAt(cost, k), VirtualClock())
    part = run_loop(arrival, w.prompt, w.output, sv, 4096, InterruptedAt(cost, k),
                    VirtualClock(), interruptible=True)
    assert part.interrupted and not whole.interrupted
    assert len(part.steps) == k - 1  # the interrupted step is not recorded
    done = np.isfinite(part.finish)
    assert 0 < done.sum() < len(w.prompt)
    # Up to the interrupt the two runs are the same run.
    np.testing.assert_array_equal(part.finish[done], whole.finish[done])
    assert [s for s, d in zip(part.status, done, strict=True) if not d] == \
        ["unfinished"] * int((~done).sum())
    assert all(s == "finished" for s, d in zip(part.status, done, strict=True) if d)


def test_a_loop_past_its_stop_time_starts_no_step() -> None:
    """``stop_at`` (calibration's host-work window): no step starts once it has passed;
    the loop ends as an interrupted one, every request unfinished. A stop time that
    never comes changes nothing."""
    w = trace_workload("azure_2023_conv", 20, 2048)
    sv = serving_config({"policy": "continuous", "max_num_seqs": 8,
                         "max_num_batched_tokens": 2048, "num_kv_blocks": 8 * 128})
    ex = CostExecutor(LinearCost(**COST))
    arrival = np.zeros(20)
    whole = run_loop(arrival, w.prompt, w.output, sv, 4096, ex, VirtualClock())
    late = run_loop(arrival, w.prompt, w.output, sv, 4096, ex, VirtualClock(),
                    stop_at=float("inf"))
    # Columns 3 and 4 are the wall clock's (CPU and host seconds); the rest are the run's.
    assert [r[:3] + r[5:] for r in late.steps] == [r[:3] + r[5:] for r in whole.steps]
    assert not late.interrupted and late.status == whole.status
    np.testing.assert_array_equal(late.finish, whole.finish)
    gone = run_loop(arrival, w.prompt, w.output, sv, 4096, ex, VirtualClock(),
                    stop_at=float("-inf"))
    assert gone.interrupted and gone.steps == []
    assert gone.status == ["unfinished"] * 20
    assert not np.isfinite(gone.finish).any()


def test_a_level_cut_short_runs_at_its_rate() -> None:
    """--level-s keeps the first n requests; their own span sets the rate, whatever the
    rest of the trace does (its first rows are sparser than the whole)."""
    w = trace_workload("azure_2023_conv", 300, 4096)
    for n in (20, 90, 300):
        a = w.at_rate(4.0, n)
        assert len(a) == n and a[0] == 0.0
        assert n / (a[-1] - a[0]) == pytest.approx(4.0, rel=1e-12)
    # Scaled by the whole trace's span instead, the first 90 would run well below 4 req/s.
    whole = w.at_rate(4.0)[:90]
    assert 90 / whole[-1] < 0.8 * 4.0
    np.testing.assert_array_equal(w.at_rate(4.0, 300), w.at_rate(4.0))


def test_rejections_follow_the_simulator() -> None:
    sv = serving_config({"policy": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 64,
                         "num_kv_blocks": 8, "block_size": 16})
    prompt, output = np.array([30, 70, 10, 100]), np.array([10, 1, 200, 1])
    res = run_loop(np.zeros(4), prompt, output, sv, 256, CostExecutor(LinearCost(**COST)),
                   VirtualClock())
    assert res.reason == ["", "prompt_exceeds_max_num_batched_tokens", "exceeds_kv_capacity",
                          "prompt_exceeds_max_num_batched_tokens"]
    assert res.status[0] == "finished" and np.isfinite(res.finish[0])


@pytest.mark.parametrize("capacity", [2, 20, 127])
def test_warm_up_stays_inside_a_short_cache(capacity: int) -> None:
    """A cache shorter than 64 + slots tokens (requests all short, or a small
    --max-len) is warmed up without a position past its last row."""
    with torch.inference_mode():
        model = build_decoder(shard(MODELS["tiny"], 1), 1, capacity, "fp32",
                              torch.device("cpu"))
        ex = ModelExecutor(model, model.caches(64, capacity), torch.device("cpu"))
        ex.warm_up(capacity, repeats=1)


@e2e
def test_wall_clock_replay_of_the_tiny_model_on_cpu() -> None:
    """A real run: arrivals respected, token accounting exact, steps back to back."""
    spec = MODELS["tiny"]
    w = trace_workload("azure_2023_conv", 12, 256)
    sv = serving_config({"policy": "chunked", "max_num_seqs": 4, "max_num_batched_tokens": 256,
                         "token_budget": 64, "num_kv_blocks": 40})
    arrival = w.at_rate(40.0)
    threads = torch.get_num_threads()
    try:
        res, info = replay_on_device(spec, arrival, w.prompt, w.output, sv, "cpu", None)
    finally:
        torch.set_num_threads(threads)
    assert info["threads"] == 1 and info["type"] == "cpu"
    assert all(s == "finished" for s in res.status)
    assert np.all(res.first_sched >= arrival) and np.all(res.first_token > res.first_sched)
    assert np.all(res.finish >= res.first_token)
    col = dict(zip(STEP_FIELDS, np.array(res.steps).T, strict=True))
    assert np.all(col["start_s"][1:] >= col["end_s"][:-1])  # iterations never overlap
    assert np.all(col["exec_s"] <= col["end_s"] - col["start_s"] + 1e-9)  # exec within the step
    assert col["cpu_s"].sum() > 0  # CPU seconds recorded
    # The loop's host work before each step is recorded (how large a share of the run it
    # is depends on the machine's load: a benchmark's figure, not a test's).
    assert np.all(col["host_s"] > 0) and np.all(np.isfinite(col["host_s"]))
    # Every prompt token plus every output token but the last is computed at least once.
    assert col["new_tokens"].sum() >= (w.prompt + w.output - 1).sum()
    assert col["new_tokens"].max() <= 64  # the chunked budget held
    rec = json.loads(json.dumps(to_record(res, {"label": "x", "model": {"name": "tiny"},
                                             "serving": {}}), allow_nan=False))
    requests, cols, back = read_replay(rec, "<test>")
    np.testing.assert_allclose(cols["finish"], res.finish, atol=1e-8)
    assert np.array_equal(requests.prompt_tokens, w.prompt)
    assert len(back["start_s"]) == len(res.steps)


def test_wall_clock_waits_for_arrivals() -> None:
    # Never early (how late depends on the machine's load, so that is not asserted).
    clock = WallClock()
    clock.wait_until(0.02)
    assert clock.now() >= 0.02


class FakeTime:
    """``time.perf_counter`` and ``time.sleep`` on a fake clock: each reading advances it
    by ``tick`` seconds, and a sleep by exactly what was asked."""

    def __init__(self, tick: float) -> None:
        self.t, self.tick, self.sleeps = 100.0, tick, []

    def perf_counter(self) -> float:
        self.t += self.tick
        return self.t

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s


def test_wall_clock_sleeps_to_a_millisecond_before_and_spins_the_rest(monkeypatch) -> None:
    import calibrate.replay

    fake = FakeTime(1e-5)
    monkeypatch.setattr(calibrate.replay, "time", fake)
    clock = WallClock()
    clock.wait_until(0.02)
    # One sleep to within a millisecond of the time, the rest spun on the clock.
    assert len(fake.sleeps) == 1 and fake.sleeps[0] == pytest.approx(0.019, abs=1e-4)
    assert 0.02 <= clock.now() <= 0.02 + 2e-5
    fake.sleeps.clear()
    clock.wait_until(0.01)  # already past: no wait at all
    assert fake.sleeps == []


@e2e
def test_replay_command_writes_records(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    try:
        rc = replay_main(["--model", "tiny", "--device", "cpu", "--requests", "6",
                          "--max-len", "128", "--rate", "50", "--max-num-seqs", "4",
                          "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    (path,) = tmp_path.glob("replay-*.json")
    rec = json.loads(path.read_text())
    assert rec["schema"] == "servesim-replay/1" and rec["rate_rps"] == 50.0
    assert rec["serving"]["max_num_seqs"] == 4 and len(rec["requests"]["status"]) == 6
    assert replay_main(["--model", "tiny", "--device", "cpu", "--out", str(tmp_path),
                        "--requests", "6"]) == 2  # --load needs a profile


def test_a_level_length_that_is_not_positive_is_one_clear_error(tmp_path: Path,
                                                                 capsys) -> None:
    rc = replay_main(["--model", "tiny", "--device", "cpu", "--rate", "3", "--level-s", "-5",
                      "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == "replay: error: --level-s: got -5, must be > 0 seconds"
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--rate", "-1", "got '-1', each must be a finite number above 0"),
    ("--rate", "2,,3", "got '2,,3', expected a comma list of numbers above 0"),
    ("--load", "0.5,inf", "got '0.5,inf', each must be a finite number above 0"),
    # Had replayed the same level twice.
    ("--rate", "2,2", "got '2,2': a level is given twice; give each once"),
    ("--load", "0.5,0.50", "got '0.5,0.50': a level is given twice; give each once"),
    # The trace's rows too: read before the calibration, not after it.
    ("--offset", "99999999", "cannot take 100 rows from 99999999 of a 19366-row trace"),
    ("--requests", "20000", "cannot take 20000 rows from 0 of a 19366-row trace"),
    # Had been cut to the context without a word.
    ("--max-len", "999999", "got 999999, above model tiny's context of 4096 tokens; give at "
                            "most that"),
    # Serving settings, named by their flag: had been found after the calibration, named
    # by the scenario key the flag fills.
    ("--token-budget", "16", "got 16; a per-iteration token budget applies to policy "
                             "chunked only, not 'continuous'"),
    # Had been found only after the real run, when the profile priced it.
    ("--profile", str(ROOT / "sim" / "data" / "profiles" / "h100-sxm-llama-3-8b-tp1-vllm.yaml"),
     f"profile {ROOT}/sim/data/profiles/h100-sxm-llama-3-8b-tp1-vllm.yaml: it was measured "
     "for model 'llama-3-8b', the run's model is 'tiny', which differs in"),
])
def test_rates_and_loads_are_refused_before_anything_runs(
        tmp_path: Path, capsys, flag: str, value: str, message: str) -> None:
    # servesim validate calibrates before it replays: a bad level found only then would
    # have cost the calibration's minute.
    from sim.cli import main

    rc = main(["validate", "--device", "cpu", "--model", "tiny", "--trace", "azure_2023_conv",
               flag, value, "--out", str(tmp_path / "v")])
    assert rc == 2
    assert capsys.readouterr().err.startswith(f"servesim: error: {flag}: {message}")
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize(("limits", "why"), [
    ({"num_kv_blocks": 1}, "5 refused as exceeds_kv_capacity (raise --num-kv-blocks, now 1 "
                           "block of 16 tokens)"),
    ({"max_num_batched_tokens": 10}, "5 refused as prompt_exceeds_max_num_batched_tokens "
                                     "(raise --max-num-batched-tokens, now 10 tokens)"),
])
def test_a_workload_no_request_of_which_can_finish_says_which_limit(
        limits: dict[str, int], why: str) -> None:
    """Every request refused: the error counts the reasons and names the flag of each
    limit with its value, not only that none can finish."""
    w = trace_workload("azure_2023_conv", 5, 2048)
    sv = serving_config({"policy": "continuous", "max_num_seqs": 4, "block_size": 16,
                         "max_num_batched_tokens": 2048, "num_kv_blocks": 128, **limits})
    with pytest.raises(ServesimError) as exc:
        saturation_rate(w, sv, 4096, LinearCost(**COST))
    assert exc.value.message == f"none of the 5 requests can finish under these limits: {why}"


def test_load_beside_rate_is_refused(tmp_path: Path, capsys) -> None:
    """--rate sets the levels; a --load beside it had been dropped without a word."""
    from sim.cli import main

    rc = main(["validate", "--device", "cpu", "--model", "tiny", "--rate", "2", "--load",
               "0.5", "--out", str(tmp_path / "v")])
    assert rc == 2
    assert capsys.readouterr().err == (
        "servesim: error: --load: got --load 0.5 with --rate 2: --load turns fractions of "
        "saturation into rates, --rate gives the rates; give one\n")
    assert not (tmp_path / "v").exists()


def test_replay_never_imports_simpy() -> None:
    code = ("import sys; import calibrate.replay, calibrate.replay_cli; "
            "assert 'simpy' not in sys.modules and 'matplotlib' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
