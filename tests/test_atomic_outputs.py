"""Output folders are replaced whole: an interrupted run leaves the previous one as it was.

The SIGINT tests start ``servesim simulate`` in a subprocess, interrupt it at several
moments (while it simulates, once its temporary folder exists, once a file is in it) and
check what is left: the previous folder byte for byte, or the new one complete; never a
mix, never a temporary folder. Nothing is asserted about how long anything took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main as cli_main
from sim.config import scenario
from sim.core.engine import simulate
from sim.errors import ServesimError
from sim.report import outputs as report
from sim.report.folder import remove_stale, replaced_folder
from sim.report.summary import summarize

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "scenarios" / "quickstart.yaml"
RUN_FILES = {"requests.csv", "requests.csv.meta.json", "summary.json", "ttft_tpot_cdf.png"}
WAIT_S = 300.0  # generous: a poll that gives up fails the test, it never judges speed


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name != out.name)


def start(out: Path, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "sim.cli", "simulate", str(QUICK),
                             "--out", str(out), "--quiet", *extra], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (Linux), None where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(cond: Any, proc: subprocess.Popen[str]) -> bool:
    """Poll ``cond`` until it holds (True) or the process ends first (False)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if cond():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    raise AssertionError("the condition never held while the run went on")


def check_left(out: Path, old: dict[str, bytes], rc: int) -> str:
    """The folder is the old one byte for byte or a complete new one; no stray siblings."""
    assert siblings(out) == [], siblings(out)
    now = snapshot(out)
    if now == old:
        assert rc == 130
        return "old folder intact"
    assert set(now) == RUN_FILES, sorted(now)
    summary = json.loads(now["summary.json"])
    rows = now["requests.csv"].decode().count("\n") - 1
    assert rows == summary["requests"]["total"]
    assert summary["simulated"]["overrides"] == []
    return "new folder complete"


@pytest.fixture
def old_run(tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A previous run's folder (one minute of the quickstart workload)."""
    out = tmp_path / "out" / "run"
    assert cli_main(["simulate", str(QUICK), "--set", "workload.duration_s=60", "--out",
                     str(out), "--quiet"]) == 0
    return out, snapshot(out)


def moment_simulating(out: Path, proc: subprocess.Popen[str]) -> bool:
    # Past the imports (about half a CPU second), before any output folder exists.
    if cpu_s(proc.pid) is None:
        pytest.skip("no /proc to read a process's CPU time")
    return wait_for(lambda: (cpu_s(proc.pid) or 0.0) >= 1.0, proc)


def moment_folder(out: Path, proc: subprocess.Popen[str]) -> bool:
    return wait_for(lambda: out.with_name(f"{out.name}.tmp-{proc.pid}").exists(), proc)


def moment_file(out: Path, proc: subprocess.Popen[str]) -> bool:
    stage = out.with_name(f"{out.name}.tmp-{proc.pid}")
    return wait_for(lambda: (stage / "summary.json").exists(), proc)


@pytest.mark.parametrize("moment", [moment_simulating, moment_folder, moment_file],
                         ids=["while-simulating", "temp-folder-made", "summary-written"])
def test_sigint_leaves_the_old_folder_or_a_complete_new_one(old_run: Any, moment: Any,
                                                            capsys: Any) -> None:
    out, old = old_run
    proc = start(out)
    try:
        reached = moment(out, proc)
        if reached:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        outcome = check_left(out, old, proc.returncode)
    except AssertionError as exc:  # what the run said, for whoever reads the failure
        raise AssertionError(f"{exc}; signal {'sent' if reached else 'not sent'}, exit "
                             f"{proc.returncode}, stderr {err[-3000:]!r}") from exc
    if proc.returncode == 130:
        assert err.strip() == "servesim: interrupted"
    with capsys.disabled():  # what happened, for whoever reads the log
        print(f"\n{moment.__name__}: signal {'sent' if reached else 'not sent (run ended)'}, "
              f"exit {proc.returncode}, {outcome}")


def test_an_uninterrupted_run_replaces_the_old_folder(old_run: Any) -> None:
    out, old = old_run
    proc = start(out)
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 0, err
    assert check_left(out, old, 0) == "new folder complete"


def test_a_hard_killed_runs_leftovers_are_removed_by_the_next_run(old_run: Any) -> None:
    out, old = old_run
    proc = start(out)
    try:
        assert moment_file(out, proc)
        proc.kill()  # SIGKILL: no clean-up possible
        proc.wait(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    stale = out.with_name(f"{out.name}.tmp-{proc.pid}")
    assert stale.exists() and snapshot(out) == old  # left behind, never taken for results
    # A sibling of a live process (this one's parent stands in for a concurrent run) stays.
    live = out.with_name(f"{out.name}.tmp-{os.getppid()}")
    live.mkdir()
    assert cli_main(["simulate", str(QUICK), "--set", "workload.duration_s=30", "--out",
                     str(out), "--quiet", "--no-plots"]) == 0
    assert not stale.exists() and live.exists()
    assert sorted(p.name for p in out.iterdir()) == ["requests.csv", "requests.csv.meta.json",
                                                     "summary.json"]
    assert remove_stale(out) == []  # nothing else to remove


def test_a_folder_servesim_did_not_write_is_never_replaced(tmp_path: Path,
                                                           capsys: Any) -> None:
    mine = tmp_path / "project"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    rc = cli_main(["simulate", str(QUICK), "--out", str(mine), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"servesim: error: --out {mine}: holds none of this command's "
                             "outputs (summary.json, requests.csv)")
    assert snapshot(mine) == {"notes.txt": b"mine"}
    afile = tmp_path / "file"
    afile.write_text("x")
    assert cli_main(["simulate", str(QUICK), "--out", str(afile), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (f"servesim: error: --out {afile}: exists and "
                                               "is not a folder")
    assert siblings(mine) == ["file"]


def test_a_scenario_kept_in_the_output_folder_survives(tmp_path: Path) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    scen = out / "scenario.yaml"
    text = QUICK.read_text().replace("name: quickstart", "name: kept")
    scen.write_text(text)
    for _ in range(2):  # into a folder holding only the scenario, then over a run's folder
        assert cli_main(["simulate", str(scen), "--set", "workload.duration_s=30", "--out",
                         str(out), "--quiet", "--no-plots"]) == 0
        assert scen.read_text() == text
        assert sorted(p.name for p in out.iterdir()) == ["requests.csv",
                                                         "requests.csv.meta.json",
                                                         "scenario.yaml", "summary.json"]


def test_a_trace_kept_in_the_output_folder_survives_or_is_refused(tmp_path: Path,
                                                                  capsys: Any) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    rows = "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n"
    (out / "t.csv").write_text(rows)
    scen = out / "scenario.yaml"
    scen.write_text("name: t\nmodel: tiny\ncost: {linear: {step_s: 0.01}}\n"
                    "workload: {trace: {path: t.csv}}\n")
    for _ in range(2):  # the trace is an input, not a stranger's file, and stays
        assert cli_main(["simulate", str(scen), "--out", str(out), "--quiet",
                         "--no-plots"]) == 0
        assert (out / "t.csv").read_text() == rows
    # A trace named as an output would be written over: refused, everything left as it was.
    (out / "t.csv").rename(out / "requests.csv")
    scen.write_text(scen.read_text().replace("t.csv", "requests.csv"))
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    assert cli_main(["simulate", str(scen), "--out", str(out), "--quiet", "--no-plots"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"servesim: error: --out {out}: holds requests.csv, which this run read, and an "
        "output of that name would replace it; give another --out, or move the input")
    assert snapshot(out) == before


def test_sweep_and_capacity_never_replace_each_others_folders(tmp_path: Path,
                                                              capsys: Any) -> None:
    # Both keep a cache; another command's folder holding one is not theirs to replace.
    md1 = ROOT / "scenarios" / "capacity-md1.yaml"
    small = ["--set", "workload.num_requests=100", "--no-plots", "--quiet"]
    sweep = ["sweep", str(md1), "--rates", "10", *small]
    capacity = ["capacity", str(md1), "--slo", "ttft_mean=0.05", "--seeds", "1", *small]
    def files(out: Path) -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    for first, second, own in ((sweep, capacity, "capacity.json"),
                               (capacity, sweep, "sweep.json")):
        out = tmp_path / first[0]
        assert cli_main([*first, "--out", str(out)]) == 0
        before = files(out)
        assert cli_main([*second, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"--out {out}: holds none of this command's outputs ({own}" in err
        assert files(out) == before
    # A folder an interrupted run left with its cache alone is resumed.
    (tmp_path / "left" / "cache").mkdir(parents=True)
    assert cli_main([*sweep, "--out", str(tmp_path / "left")]) == 0


def test_an_interrupt_keeps_what_asks_to_be_salvaged(tmp_path: Path) -> None:
    out = tmp_path / "v"
    with pytest.raises(KeyboardInterrupt), replaced_folder(
            out, ("validation.json",), salvage=".interrupted") as stage:
        (stage / "replay-a.json").write_text("{}")
        raise KeyboardInterrupt
    assert not out.exists()
    assert [p.name for p in (tmp_path / "v.interrupted").iterdir()] == ["replay-a.json"]
    # An error (not an interrupt) keeps nothing.
    with pytest.raises(ServesimError), replaced_folder(out, ("validation.json",),
                                                       salvage=".interrupted") as stage:
        (stage / "replay-b.json").write_text("{}")
        raise ServesimError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.interrupted"]


def test_same_scenario_and_seed_give_byte_identical_outputs(tmp_path: Path) -> None:
    sc = scenario.load(QUICK, ["workload.duration_s=30"])
    outs = []
    for name in ("a", "b"):
        res = simulate(sc)
        report.write_run(res, summarize(res), tmp_path / name, plots=False)
        outs.append(snapshot(tmp_path / name))
    assert outs[0] == outs[1]


def test_an_interrupted_sweep_keeps_the_old_results_and_grows_the_cache(
        tmp_path: Path, monkeypatch: Any) -> None:
    from sim.study import pointrun as sp
    from sim.study.sweep import SweepSpec, run_sweep
    from sim.study.sweeppoint import read_raw

    md1 = ROOT / "scenarios" / "capacity-md1.yaml"
    raw = read_raw(md1, ["workload.num_requests=200"])

    def spec(rates: list[float]) -> SweepSpec:
        return SweepSpec(raw, str(md1), md1.parent, rates, ["continuous"], [1], [1], [0])

    out = tmp_path / "sweep"
    run_sweep(spec([10.0]), out, workers=1, plots=False)
    (out / "report.html").write_text("made from the first sweep")
    results = {n: (out / n).read_bytes() for n in ("points.csv", "sweep.csv", "sweep.json")}
    real = sp.run_task
    done: list[str] = []

    def interrupt_second(task: Any) -> Any:
        if done:
            raise KeyboardInterrupt
        done.append(task.digest)
        return real(task)

    monkeypatch.setattr(sp, "run_task", interrupt_second)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec([10.0, 20.0, 30.0]), out, workers=1, plots=False)
    monkeypatch.undo()
    assert {n: (out / n).read_bytes() for n in results} == results  # the old results
    assert (out / "report.html").exists()
    assert len(list((out / "cache").glob("*.json"))) == 2  # grown by the finished point
    assert siblings(out) == []
    res = run_sweep(spec([10.0, 20.0, 30.0]), out, workers=1, plots=False)
    assert (res.stats.cached, res.stats.computed) == (2, 1)
    # Replaced whole: the stale report is gone, the cache came across.
    assert sorted(p.name for p in out.iterdir()) == ["cache", "points.csv",
                                                     "points.csv.meta.json", "sweep.csv",
                                                     "sweep.csv.meta.json", "sweep.json"]
    assert len(list((out / "cache").glob("*.json"))) == 3
