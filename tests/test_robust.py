"""Robustness: overload, oversized requests, crash-safe outputs, determinism across
processes (hash seeds, worker counts)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_requests, tiny_scenario

from sim.config import scenario
from sim.core.engine import Engine, build_cost, simulate
from sim.core.request import FINISHED, REJECTED, UNFINISHED, Request
from sim.cost.frontend import Frontend
from sim.policies.registry import POLICIES
from sim.report import outputs as report
from sim.report.summary import summarize
from sim.study.sweep import SweepSpec, run_sweep
from sim.study.sweeppoint import read_raw

ROOT = Path(__file__).resolve().parent.parent
SCEN = ROOT / "scenarios"
STATUSES = ("finished", "rejected", "unfinished", "timed_out", "failed", "not_arrived")


def counted(summary: dict[str, Any]) -> int:
    """Requests accounted for by final status."""
    return sum(summary["requests"][k] for k in STATUSES)


# -- 1. overload --------------------------------------------------------------------------
def test_tenfold_overload_is_saturated_counted_and_holds_only_waiting_requests() -> None:
    # The shipped hour-long overload scenario, cut to five minutes of arrivals.
    sc = scenario.load(SCEN / "overload-10x.yaml", ["workload.duration_s=300", "horizon_s=300"])
    from sim.core.engine import fault_seed_of
    from sim.workload.build import build_requests

    rng = np.random.default_rng(np.random.SeedSequence(sc.workload.seed).spawn(3)[0])
    reqs = build_requests(sc.workload, sc.base_dir, rng, sc.source, sc.model.max_context)
    # A 50 ms frontend (AIConfigurator's harness measured about that), so that the few
    # requests sent in its last 50 ms before the horizon are still on their way.
    from sim.cost.models import eager_steps, unwrapped

    profile = unwrapped(build_cost(sc)).replace(frontend=Frontend(request_s=0.05))
    cost = eager_steps(sc, profile, sc.hardware.gpu_spec, sc.hardware.tp)
    eng = Engine(sc, reqs, cost, np.random.default_rng(0), fault_seed=fault_seed_of(sc))
    res = eng.run()
    s = summarize(res)
    assert counted(s) == s["requests"]["total"] == len(reqs) > 20000
    sat = s["saturation"]
    assert sat["saturated"] is True
    # Ten times the capacity arrives: the queue grows at about nine tenths of that.
    assert 0.8 * sat["offered_rps"] < sat["queue_growth_rps"] < sat["offered_rps"]
    # Python request objects exist only for requests still held by the replica.
    rep = eng.replicas[0]
    held = len(rep.waiting) + len(rep.running)
    # Sent in the frontend's last request_s before the horizon: not seen by the engine.
    unseen = int(((res.status == UNFINISHED) & (res.replica < 0)).sum())
    del res
    gc.collect()
    alive = sum(type(o) is Request for o in gc.get_objects())
    assert alive == held
    assert held + unseen == s["requests"]["unfinished"] and 0 < unseen < 10


def test_shipped_scenarios_at_capacity_are_not_saturated() -> None:
    s = summarize(simulate(scenario.load(SCEN / "faults-n-plus-1.yaml",
                                         ["workload.duration_s=300"])))
    assert s["saturation"]["saturated"] is False
    assert abs(s["saturation"]["queue_growth_rps"]) < 0.05 * s["saturation"]["offered_rps"]


def test_admission_control_keeps_the_queue_bounded_under_overload() -> None:
    sc = scenario.load(SCEN / "overload-admission.yaml", ["workload.duration_s=300"])
    s = summarize(simulate(sc))
    rq = s["requests"]
    assert counted(s) == rq["total"]
    assert rq["unfinished"] == 0 and rq["timed_out"] > 0
    assert set(rq["rejected_by_reason"]) == {"rate_limited", "queue_full"}
    assert s["saturation"]["saturated"] is True
    assert s["saturation"]["peak_waiting"] <= 32


# -- 4. oversized requests ----------------------------------------------------------------
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_oversized_requests_are_rejected_with_their_reason(policy: str) -> None:
    # tiny: max_context 4096. 10 blocks of 4 tokens hold 40 tokens of context.
    sc = tiny_scenario(serving={"policy": policy, "num_kv_blocks": 10})
    res = run_requests(sc, [0.0, 0.0, 0.0], [4090, 30, 8], [20, 30, 4])
    assert res.status.tolist() == [REJECTED, REJECTED, FINISHED]
    why = res.reason.tolist()
    assert why[0] == "exceeds_context"
    assert why[1].endswith("exceeds_kv_capacity")


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("preemption", ["recompute", "swap"])
def test_requests_that_each_fill_the_whole_cache_terminate(policy: str, preemption: str) -> None:
    # Each request needs every one of the 10 blocks at its end (prompt 20 + output 21 - 1
    # = 40 tokens): they can only run one after another, with preemptions on the way.
    # The run must end with all of them finished, never loop. The host holds one block
    # (4 tokens x 2048 B), less than any preempted request's KV: swapping falls back to
    # recompute, as it does when the swap space is full.
    sc = tiny_scenario(serving={"policy": policy, "num_kv_blocks": 10, "block_size": 4,
                                "preemption": preemption, "swap_space_gib": 8192 / 2**30})
    res = run_requests(sc, [0.0] * 6, [20] * 6, [21] * 6)
    assert (res.status == FINISHED).all()
    # Bounded work: at most one restart per request per other request.
    assert res.preemptions.max() <= 6


# -- 6. crash-safe outputs ----------------------------------------------------------------
def test_interrupted_write_leaves_no_complete_looking_file(tmp_path: Path,
                                                            monkeypatch: Any) -> None:
    res = run_requests(tiny_scenario(), [0.0, 0.1], [8, 8], [2, 2])
    summary = summarize(res)
    out = tmp_path / "run"

    def killed(fd: int) -> None:
        raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-write

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        report.write_run(res, summary, out, plots=False)
    assert list(tmp_path.iterdir()) == []  # no run folder, no temporary folder
    monkeypatch.undo()
    report.write_run(res, summary, out, plots=False)
    (out / "ttft_tpot_cdf.png").write_bytes(b"an older run's plot")
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    # A second run interrupted while moving its folder into place (renaming the old
    # folder away, or the new one in, after which the old one is put back) leaves the
    # first run's folder whole.
    real_rename = os.rename
    for cut_at, renames in ((1, 1), (2, 3)):
        calls: list[str] = []

        def cut(a: Any, b: Any, cut_at: int = cut_at, calls: list[str] = calls) -> None:
            calls.append(str(b))
            if len(calls) == cut_at:
                raise KeyboardInterrupt
            real_rename(a, b)

        monkeypatch.setattr(os, "rename", cut)
        with pytest.raises(KeyboardInterrupt):
            report.write_run(res, summary, out, plots=False)
        monkeypatch.undo()
        assert len(calls) == renames
        assert {p.name: p.read_bytes() for p in out.iterdir()} == old
        assert [p.name for p in tmp_path.iterdir()] == ["run"]
    # Uninterrupted, the new folder replaces the old one whole: the old plot goes.
    report.write_run(res, summary, out, plots=False)
    assert sorted(p.name for p in out.iterdir()) == ["requests.csv", "requests.csv.meta.json",
                                                     "summary.json"]
    saved = json.loads((out / "summary.json").read_bytes())
    assert saved["scenario_sha256"] and saved["servesim_version"]


# -- 7. determinism across processes ------------------------------------------------------
def run_cli(args: list[str], hash_seed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def test_faults_and_admission_results_do_not_depend_on_hash_seeds(tmp_path: Path) -> None:
    outs = []
    for i, seed in enumerate(("0", "4242")):
        out = tmp_path / f"r{i}"
        r = run_cli(["simulate", str(SCEN / "faults-n-plus-1.yaml"), "--set",
                     "workload.duration_s=120", "--set", "faults.failures_per_hour=60",
                     "--set", "admission={timeout_s: 10, max_waiting: 8}", "--out",
                     str(out), "--no-plots", "--quiet", "--allow-rejections"], seed)
        assert r.returncode == 0, r.stderr
        outs.append([(out / n).read_bytes() for n in ("requests.csv", "summary.json")])
    assert outs[0] == outs[1]
    assert b"faults" in outs[0][1]


def test_sweep_with_faults_is_identical_for_one_and_two_workers(tmp_path: Path) -> None:
    path = SCEN / "faults-n-plus-1.yaml"
    raw = read_raw(path, ["workload.num_requests=300", "faults.failures_per_hour=120"])
    spec = SweepSpec(raw, str(path), path.parent, [6.0, 12.0], ["continuous"], [2], [1], [0, 1])
    run_sweep(spec, tmp_path / "a", workers=1, plots=False)
    run_sweep(spec, tmp_path / "b", workers=2, plots=False)
    for name in ("points.csv", "sweep.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# -- 3. capacity planning with spare replicas ---------------------------------------------
def test_capacity_with_n_plus_one_redundancy(tmp_path: Path, capsys: Any) -> None:
    from sim.cli import main as cli_main

    md1 = SCEN / "capacity-md1.yaml"
    out = tmp_path / "cap"
    rc = cli_main(["capacity", str(md1), "--slo", "ttft_p99=0.3", "--seeds", "1", "--set",
                   "workload.num_requests=400", "--target-rate", "60", "--redundancy", "1",
                   "--out", str(out), "--no-plots", "--quiet"])
    assert rc == 0
    blob = json.loads((out / "capacity.json").read_text())
    n = blob["best"]["replicas"]
    assert blob["redundancy"] == 1
    assert blob["best_with_redundancy"] == {"replicas": n + 1, "gpus": (n + 1) * blob["best"]["tp"]}
    assert cli_main(["capacity", str(md1), "--slo", "ttft_p99=0.3", "--redundancy", "-1",
                     "--out", str(out)]) == 2
    assert "--redundancy -1" in capsys.readouterr().err
