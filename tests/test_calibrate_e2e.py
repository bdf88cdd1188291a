"""End to end on CPU: a quick calibration of `tiny`, its profile, and the error paths."""

from __future__ import annotations

import csv
import dataclasses
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import E2E_OOM_LABEL, E2E_ROUNDS, e2e, gpu_report

from calibrate import sweeps
from calibrate.cli import main
from calibrate.grids import Point, grid_for, whole_step_points
from calibrate.host import WAKE_ROUNDS
from calibrate.model import build_decoder, prepare
from calibrate.records import Measurement, Timing
from calibrate.run import (
    _best,
    _step_layer_bytes,
    _sweep,
)
from calibrate.timing import Timer, TimingConfig
from calibrate.wake import IDLE_S
from sim.cost.presets import MODELS
from sim.cost.profile import FORMS, wake_curve
from sim.cost.profilefile import load_profile
from sim.cost.profilekeys import SCHEMA
from sim.cost.shape import StepShape, shape_of
from sim.cost.shard import shard

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def calibrated(cpu_calibration):
    """The suite's one quick CPU calibration (tests/conftest.py), with one sweep point
    made to run out of memory."""
    res, mask = cpu_calibration
    # The calibration bound this thread to one core while it ran, and released it.
    assert os.sched_getaffinity(0) == mask
    return res


def _shape(row: dict[str, str]) -> StepShape:
    """The step shape a measurements-CSV row was timed at."""
    return StepShape(*(float(row[f]) for f in StepShape._fields))


@e2e
def test_quick_cpu_calibration_writes_a_loadable_profile(calibrated) -> None:
    # How long it takes and how well its fits predict are a benchmark's business
    # (bench/bench_calibrate.py, docs/performance.md), not a test's: on a shared 2-core
    # machine the same calibration took 42-154 s and its errors move with the load.
    # What is checked is that the errors it records are the ones its own rows give.
    res = calibrated
    cost = load_profile(str(res.profile_path))
    assert cost.model.name == "tiny" and cost.tp == 1 and cost.dtype == "fp32"
    data = yaml.safe_load(res.profile_path.read_text())
    assert data["device"]["threads"] == 1 and data["device"]["type"] == "cpu"
    assert data["device"]["host_memory_kept"] is sys.platform.startswith("linux")
    pinned = data["device"]["pinned_cpus"]
    assert len(pinned) == 1 and pinned[0] == max(os.sched_getaffinity(0))
    assert data["measurements"] == "cpu-tiny.csv"
    assert data["calibration"]["stopped_early"] is False
    rows = [r for r in csv.DictReader(res.csv_path.open()) if r["status"] == "ok"]
    for name, comp in data["components"].items():
        assert all(math.isfinite(v) and v >= 0 for v in comp["coef"].values()), name
    for name in ("step", "linear", "prefill_attention", "decode_attention", "lm_head",
                 "host"):
        fit = data["components"][name]["fit"]
        assert fit["source"] == "measured"
        coef = data["components"][name]["coef"]
        for split, key in (("test", "mape_test"), ("train", "mape_train")):
            mine = [r for r in rows if r["component"] == name and r["split"] == split]
            assert len(mine) == fit[f"n_{split}"] >= 2, (name, split)
            errs = [abs(float(FORMS[name].evaluate(coef, _shape(r))) - float(r["median_s"]))
                    / float(r["median_s"]) for r in mine]
            # The file keeps coefficients and medians to 6 significant digits, which moves
            # each row's relative error by up to a few 1e-6: a fit whose errors are a tenth
            # of a percent needs that absolute slack beside the relative one.
            assert fit[key] == pytest.approx(statistics.fmean(errs), rel=1e-3, abs=1e-5), \
                (name, split)
            if split == "test":
                assert fit["max_err_test"] == pytest.approx(max(errs), rel=1e-3, abs=1e-5), name
        assert fit["passed"] is (fit["mape_test"] <= data["validation"]["bar"])
    # The whole steps: each row's out-of-fold prediction against its mean gives the
    # validation error the profile reports (and in_situ's held-out error is that).
    steps = [r for r in rows if r["component"] == "whole_step"]
    assert {r["split"] for r in steps} == {"cv-a", "cv-b"}
    errs = [abs(float(r["predicted_s"]) - float(r["mean_s"])) / float(r["mean_s"])
            for r in steps]
    val = data["validation"]
    assert val["whole_steps"] == val["fit_steps"] == len(steps) >= 8
    assert val["mape"] == pytest.approx(statistics.fmean(errs), rel=1e-3)
    assert val["max_err"] == pytest.approx(max(errs), rel=1e-3)
    assert val["passed"] is (val["mape"] <= val["bar"]) and val["bar"] == 0.10
    assert data["components"]["in_situ"]["fit"]["mape_test"] == pytest.approx(val["mape"])
    # The serving loop's host work was timed at most batch sizes and costs something.
    host = data["components"]["host"]
    assert host["fit"]["n_train"] >= 20
    assert host["coef"]["const_s"] + host["coef"]["per_seq_s"] > 0


@e2e
def test_every_sample_is_kept_and_the_oom_point_recorded(calibrated) -> None:
    res = calibrated
    rows = list(csv.DictReader(res.csv_path.open()))
    oom = [r for r in rows
           if r["label"] == E2E_OOM_LABEL and r["component"] == "decode_attention"]
    assert len(oom) == 1 and oom[0]["status"] == "oom" and oom[0]["samples_s"] == ""
    ok = [r for r in rows if r["status"] == "ok"]
    assert len(ok) == len(rows) - 1
    for r in ok:
        samples = [float(x) for x in r["samples_s"].split()]
        # The loop's host intervals come a few per batch size (calibrate.host), whole
        # steps at least one per round (calibrate.rounds).
        least = {"host": 3, "whole_step": E2E_ROUNDS}.get(r["component"], 5)
        assert len(samples) == int(r["repeats"]) >= least
        assert float(r["median_s"]) == pytest.approx(statistics.median(samples), rel=1e-4)
        assert float(r["mean_s"]) == pytest.approx(statistics.fmean(samples), rel=1e-4)
    # Whole steps are timed in rounds: every round gives a step the same number of samples.
    steps = [r for r in ok if r["component"] == "whole_step"]
    assert steps and all(r["note"].startswith(f"{E2E_ROUNDS} rounds x ") for r in steps)
    for r in steps:
        per_round = int(r["note"].split()[3].rstrip(";"))
        assert int(r["repeats"]) == E2E_ROUNDS * per_round
    assert {r["split"] for r in ok} == {"train", "test", "table", "cv-a", "cv-b", "wake"}
    assert any("out of memory" in n for n in res.notes)
    # The linear stack and LM head keep their medians at every count 1..32 as a table.
    data = yaml.safe_load(res.profile_path.read_text())
    assert data["schema"] == SCHEMA
    # Prefills after each idle spell, both prompt lengths, six rounds (quick grid).
    wake_rows = [r for r in ok if r["component"] == "wake"]
    assert len(wake_rows) == 2 * len(IDLE_S) and all(r["split"] == "wake" for r in wake_rows)
    assert {int(r["repeats"]) for r in wake_rows} == {WAKE_ROUNDS[True]}
    wake = data["components"]["wake"]
    assert wake["fit"] == {"source": "measured", "points": 2 * (len(IDLE_S) - 1),
                           "mean_abs_err_s": pytest.approx(wake["fit"]["mean_abs_err_s"])}
    # The fit's bounds (calibrate.wake.fit_wake): tau within a tenth of the shortest idle
    # spell and ten times the longest, the height within ten times the largest excess;
    # its recorded error is the one the CSV's medians give.
    med = {(int(r["new_tokens"]), r["label"].split(" after ")[1]): float(r["median_s"])
           for r in wake_rows}
    excess = [(idle, med[(n, f"{idle * 1e3:g} ms idle")] - med[(n, "0 ms idle")])
              for n in {n for n, _ in med} for idle in IDLE_S if idle > 0]
    coef = wake["coef"]
    assert min(IDLE_S[1:]) / 10 <= coef["tau_s"] <= max(IDLE_S) * 10
    # (The coefficient and the CSV's medians are both written to 6 significant digits: a
    # fit at its bound may read up to 1e-5 of it above the bound the medians give.)
    assert 0 <= coef["max_s"] <= 10 * max(0.0, *(e for _, e in excess)) * (1 + 1e-5) + 1e-9
    fit_err = statistics.fmean(abs(wake_curve(i, coef["max_s"], coef["tau_s"]) - e)
                               for i, e in excess)
    assert wake["fit"]["mean_abs_err_s"] == pytest.approx(fit_err, rel=1e-2, abs=1e-7)
    for name, count in (("linear", "new_tokens"), ("lm_head", "seqs")):
        table = sorted((int(r[count]), float(r["median_s"])) for r in ok
                       if r["component"] == name and r["split"] == "table")
        assert [n for n, _ in table] == list(range(1, 33))
        assert data["components"][name]["table_s"] == pytest.approx([t for _, t in table],
                                                                   rel=1e-5)


@e2e
def test_profile_file_prices_steps_as_the_calibration_did(calibrated) -> None:
    """The profile on disk is the calibration's cost model: loaded back, it prices every
    whole step it was checked on, and a step built directly on the model, as a cost
    model made of the calibration's own coefficients, tables and wake term does (to the
    six significant digits the file keeps). How close those prices are to the steps'
    measured times is bench/bench_calibrate.py's business."""
    res = calibrated
    cost = load_profile(str(res.profile_path))
    kept = res.cost  # the calibration's own cost model, in_situ included
    rows = [r for r in csv.DictReader(res.csv_path.open())
            if r["component"] == "whole_step" and r["status"] == "ok"]
    shapes = [_shape(r) for r in rows]
    entries = [(0, 96, 0)] + [(1 + i, 1, 150 + 40 * i) for i in range(6)]
    # The direct step runs on the model its shape describes.
    with torch.inference_mode():
        model = build_decoder(shard(MODELS["tiny"], 1), 2, 4096, "fp32", torch.device("cpu"))
        out = model(torch.tensor([3] * 102), model.caches(8, 512),
                    prepare(entries, torch.device("cpu")))
    assert out.shape[0] == len(entries)
    shapes.append(shape_of([(n, c) for _, n, c in entries]))
    for shape in shapes:
        loaded, mine = float(cost.step_time(shape)), float(kept.step_time(shape))
        assert math.isfinite(mine) and mine > 0
        assert loaded == pytest.approx(mine, rel=1e-4), shape
        parts = cost.breakdown(shape)
        assert parts["in_situ"] >= 0
        assert loaded == pytest.approx(sum(float(v) for v in parts.values()), rel=1e-9)


def timed(point: Point, median: float) -> Measurement:
    return Measurement(point, "ok", Timing((median,) * 5, False))


def test_passes_keep_each_points_fastest_median() -> None:
    points = [Point("lm_head", ((1, 0),) * s, f"seqs={s}") for s in (1, 2, 4)]
    # Pass one: 3, 1, 5 ms; pass two (cut short): 2, 4 ms (a neighbour was busy).
    first = [timed(p, t) for p, t in zip(points, (3e-3, 1e-3, 5e-3), strict=True)]
    second = [timed(p, t) for p, t in zip(points, (2e-3, 4e-3), strict=False)]
    out = _best([first, second], points)
    assert [m.point for m in out] == points
    assert [m.timing.median_s for m in out if m.timing] == [2e-3, 1e-3, 5e-3]
    assert out[0].note == "pass medians (s): 0.003 0.002" and out[2].note == ""


def test_exhausted_budget_stops_the_sweep() -> None:
    points = [Point("lm_head", ((1, 0),), "seqs=1")] * 3
    out, stopped = _sweep(points, None, deadline=time.perf_counter() - 1,  # type: ignore[arg-type]
                          label="x", progress=False)
    assert stopped and out == []


@e2e
def test_tiny_budget_is_a_clear_error_and_keeps_measurements(tmp_path: Path, capsys) -> None:
    out = tmp_path / "p.yaml"
    threads = torch.get_num_threads()
    try:
        rc = main(["--model", "tiny", "--device", "cpu", "--quick", "--budget-s", "0.3",
                   "--no-progress", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err
    # A failed run's measurements stay under a name of their own, refittable.
    assert "measured points" in err and "--budget-s" in err and "p.partial.csv" in err
    assert (tmp_path / "p.partial.csv").exists() and not out.exists()
    assert not (tmp_path / "p.csv").exists()


@pytest.mark.parametrize(("argv", "match"), [
    (["--model", "nope"], "unknown model preset 'nope'"),
    (["--model", "tiny", "--device", "cuda"], "--device: torch"),
    (["--model", "tiny", "--device", "tpu"], "expected cuda or cpu"),
    (["--model", "tiny", "--device", "cpu", "--tp", "2"], "--tp: tp > 1 needs"),
    (["--model", "tiny", "--budget-s", "0"], "--budget-s"),
])
def test_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, argv: list[str], match: str) -> None:
    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc = main([*argv, "--no-progress", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and match in err and "\n" not in err and "Traceback" not in err


def test_an_out_folder_that_cannot_take_the_profile_is_refused_before_timing(
        tmp_path: Path, capsys) -> None:
    # The folder is made and probed first: timing a model for minutes and then failing to
    # write its profile would lose them.
    (tmp_path / "file").write_text("")
    rc = main(["--model", "tiny", "--device", "cpu", "--no-progress",
               "--out", str(tmp_path / "file" / "sub" / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err == (f"servesim calibrate: error: --out: got "
                               f"'{tmp_path / 'file' / 'sub' / 'p.yaml'}': "
                               f"{tmp_path / 'file'} is a file, not a folder")
    # Folders that do not exist yet are made (and left empty of probes).
    from calibrate.cli import _check_writable

    _check_writable(tmp_path / "new" / "deeper" / "p.yaml")
    assert list((tmp_path / "new" / "deeper").iterdir()) == []


@e2e
def test_gpu_check_script_cpu_path(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable,
           "SERVESIM_CHECK_DEVICE": "cpu"}
    # The GPU machine has only torch, numpy, scipy and pyyaml of what servesim uses:
    # block the rest in the child.
    (tmp_path / "block").mkdir()
    for name in ("simpy", "tqdm", "matplotlib"):
        (tmp_path / "block" / f"{name}.py").write_text(f"raise ImportError('{name} is blocked')\n")
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{tmp_path / 'block'}"
    out = tmp_path / "out"
    # A hang guard only, not a measure: the script bounds its own runs with `timeout`
    # (8 minutes in all), and on a loaded 2-core machine its CPU path took 87 s.
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(out)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    log = (out / "gpu_check.log").read_text()
    assert proc.returncode == 0, log
    names = sorted(p.name for p in out.iterdir())
    # The script's validation block (calibrate/replay.py's owner) may add its archive.
    names = [n for n in names if n != "validate-cpu-tiny.tar.gz"]
    assert names == ["cpu-tiny.csv", "cpu-tiny.csv.meta.json", "cpu-tiny.yaml", "gpu_check.log",
                     "kernels-cpu.csv"]
    assert all(p.is_file() for p in out.iterdir())
    assert "whole steps: mean error" in log
    assert "== kernels: exit 0" in log
    load_profile(str(out / "cpu-tiny.yaml"))
    # What is run here on those files (scripts/gpu_report.sh): the replays validated
    # against the profile; the GPU-only comparisons skipped, each saying so.
    rep = tmp_path / "report"
    rc, md = gpu_report(out, rep)
    assert rc == 0, md
    assert "skipped: no " + str(out / "kernels-cuda.csv") in md
    assert "skipped: no " + str(out / "cuda-*.csv") in md
    # The verdict is printed; which way it goes is the loaded machine's (docs/validation.md).
    assert f"--profile {out / 'cpu-tiny.yaml'}" in md and "the 15% bar" in md
    assert (rep / "validate" / "validation.json").is_file()


def test_whole_step_memory_estimate_is_what_reserve_builds() -> None:
    """The layer count for whole steps is sized from this estimate (a model whose caches
    do not fit at full depth runs them at fewer layers), so it must match the weights
    and caches :meth:`Bench.reserve` actually allocates."""
    spec = MODELS["tiny"]
    points = whole_step_points(spec, grid_for("cpu", True))
    meta = torch.device("meta")
    bench = sweeps.Bench(shard(spec, 1), spec.layers, spec.max_context, "fp32", meta,
                         Timer(meta, TimingConfig()))
    bench.reserve(points)
    built = bench.reserved()
    assert built is not None
    model, caches = built
    layer = model.layers[0]
    weights = sum(m.weight.numel() * m.weight.element_size() for m in layer.modules()
                  if isinstance(m, torch.nn.Linear))
    kv = 2 * caches[0].k.numel() * caches[0].k.element_size()
    assert _step_layer_bytes(spec, 1, points) == weights + kv
    # mistral-7b's longest whole-step prompt on the GPU grid with its 64-entry decodes:
    # 4.1 GiB a layer in bf16, so 60% of an H200's free memory holds 20 of its 32 layers.
    big = dataclasses.replace(MODELS["mistral-7b"], dtype="bf16")
    per_layer = _step_layer_bytes(big, 1, whole_step_points(big, grid_for("cuda", False)))
    assert 4.0 < per_layer / 2**30 < 4.3


@e2e
def test_an_interrupted_calibration_writes_the_profile_it_measured(tmp_path: Path) -> None:
    """A hard time limit's SIGINT while the whole steps are timed (they run to the end of
    a 300 s budget, so it lands there): the calibration fits what it measured, writes the
    profile with a note saying so, and exits 130. SIGINT is reset to its default in the
    child, whatever the test runner's own handling of it."""
    out = tmp_path / "p.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "calibrate", "--model", "tiny", "--device", "cpu",
         "--quick", "--passes", "1", "--budget-s", "300", "--no-progress", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "host work and waking timed" in line:
            proc.send_signal(signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=600)
    text = "".join(lines) + rest
    assert proc.returncode == 130, text + err
    assert "interrupted, fitting what was measured" in text
    assert err.strip().endswith("interrupted; the profile is fitted on what was measured")
    profile = yaml.safe_load(out.read_text())
    assert profile["calibration"]["stopped_early"] is True
    assert any(n.startswith("interrupted while timing whole steps: fitted on the 44 reached")
               for n in profile["calibration"]["notes"])


@e2e
def test_an_interrupt_during_the_operator_sweep_keeps_its_points(tmp_path: Path) -> None:
    """A SIGINT once the operator sweep has begun (its first line printed; tiny's quick
    sweep takes seconds): the points measured so far are written to the CSV, no profile
    is, and the command exits 130 saying where they are."""
    out = tmp_path / "p.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "calibrate", "--model", "tiny", "--device", "cpu",
         "--quick", "--passes", "1", "--budget-s", "300", "--no-progress", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    first = proc.stdout.readline()
    assert "timing" in first and "operator points" in first, first
    total = int(first.split("timing ")[1].split()[0])
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, first + rest + err
    assert "interrupted during the operator sweep" in rest
    assert err.strip() == "servesim calibrate: interrupted"
    assert not out.exists()
    with (tmp_path / "p.partial.csv").open() as f:
        kept = list(csv.DictReader(f))
    assert 0 < len(kept) < total, (len(kept), total)
    assert f"{len(kept)} points kept in {tmp_path / 'p.partial.csv'}" in rest
