"""calibrate --refit: a profile fitted again from a calibration's CSV and settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import e2e

from calibrate.cli import main, summary
from calibrate.grids import Point
from calibrate.output import meta_path, read_csv, write_csv
from calibrate.records import Measurement, Timing
from calibrate.refit import refit


def test_the_csv_reads_back_every_sample_to_the_last_digit(tmp_path: Path) -> None:
    rows = [Measurement(Point("linear", ((7, 0),), "n=7"), "ok",
                        Timing((1 / 3, 2.718281828459045e-05, 0.1 + 0.2), True), split="train"),
            Measurement(Point("decode_attention", ((1, 128), (1, 130)), "b=2 c~129"), "oom",
                        note="out of memory"),
            Measurement(Point("whole_step", ((64, 0), (1, 17)), "prefill 64 + 1"), "ok",
                        Timing((0.5,), False), note="1 rounds x 1; a, b", split="cv-a")]
    path = tmp_path / "m.csv"
    write_csv(path, rows)
    back = read_csv(path)
    assert [(m.point, m.status, m.timing, m.note, m.split) for m in back] == \
        [(m.point, m.status, m.timing, m.note, m.split) for m in rows]


@pytest.fixture(scope="module")
def calibrated(cpu_calibration):
    """The suite's one quick CPU calibration (tests/conftest.py)."""
    return cpu_calibration[0]


@e2e
def test_a_refit_writes_the_runs_profile(calibrated, tmp_path: Path) -> None:
    """Refitted from the run's CSV and settings, the profile has the run's components,
    fits, whole-step errors, device and model, and the notes one line more; the CSV and
    the settings it writes are the run's, byte for byte (the same splits recomputed)."""
    res = calibrated
    again = refit(res.csv_path, tmp_path / "again.yaml")
    a = yaml.safe_load(res.profile_path.read_text())
    b = yaml.safe_load(again.profile_path.read_text())
    for key in ("components", "validation", "device", "model", "dtype", "tp", "source"):
        assert a.get(key) == b.get(key), key
    assert b["measurements"] == "again.csv"
    assert again.refit_of == "cpu-tiny.csv" and res.refit_of is None
    assert summary(again).endswith(f"wrote {tmp_path / 'again.yaml'} and again.csv "
                                   "(refitted from cpu-tiny.csv)")
    notes_a, notes_b = a["calibration"]["notes"], b["calibration"]["notes"]
    assert [n for n in notes_b if n not in notes_a] == [
        "refitted without a device from cpu-tiny.csv"]
    assert [n for n in notes_b if n in notes_a] == notes_a
    assert any(n.startswith("skipped decode_attention") for n in notes_b)  # the oom point
    assert (tmp_path / "again.csv").read_bytes() == res.csv_path.read_bytes()
    assert meta_path(tmp_path / "again.csv").read_bytes() == meta_path(res.csv_path).read_bytes()


@e2e
def test_refit_refuses_what_it_cannot_fit_in_one_line(calibrated, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def run(*argv: str) -> str:
        assert main([*argv, "--out", str(tmp_path / "out" / "p.yaml")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err
        return err

    lone = tmp_path / "lone.csv"
    shutil.copy(calibrated.csv_path, lone)
    assert "no lone.csv.meta.json beside it" in run("--refit", str(lone))
    assert "--refit: --model: a refit takes the model" in run("--refit", str(lone),
                                                              "--model", "tiny")
    assert "--refit: --tp, --quick: a refit takes" in run("--refit", str(lone), "--quick",
                                                          "--tp", "2")
    meta_path(lone).write_text('{"schema": "something else"}')
    assert "not a calibration's settings" in run("--refit", str(lone))
    shutil.copy(meta_path(calibrated.csv_path), meta_path(lone))
    lines = lone.read_text().splitlines()
    lines[3] = lines[3].rsplit(",", 1)[0] + ",0.1 abc"
    lone.write_text("\n".join(lines) + "\n")
    err = run("--refit", str(lone))
    assert "lone.csv" in err and "line 4" in err and "not a measurement row" in err
    lone.write_text("a,b\n1,2\n")
    assert "not a calibration CSV" in run("--refit", str(lone))


@e2e
def test_refit_names_a_bad_setting_and_its_value(calibrated, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A settings file edited by hand or cut short: each bad value is one line naming the
    settings file, the key, the value and what is allowed (never a traceback)."""
    good = json.loads(meta_path(calibrated.csv_path).read_text())
    lone = tmp_path / "lone.csv"
    shutil.copy(calibrated.csv_path, lone)
    cases = [("layers", "abc", "layers: got 'abc', expected a whole number of at least 1"),
             ("gpu_key", [], "gpu_key: got [], expected null or one of"),
             ("device", "tpu", "device: got 'tpu', expected cpu or cuda"),
             ("quick", 1, "quick: got 1, expected true or false"),
             ("model", {**good["model"], "layers": "x"}, "model.layers"),
             # Not numbers a run writes: a profile would carry them on (elapsed_s: .nan).
             ("elapsed_s", float("nan"), "elapsed_s: got nan, expected seconds, at least 0"),
             ("elapsed_s", -2.5, "elapsed_s: got -2.5, expected seconds, at least 0"),
             ("budget_s", float("inf"), "budget_s: got inf, expected seconds greater than 0"),
             # More layers timed than the model has: its whole steps were not this model's.
             ("layers", good["model"]["layers"] + 1,
              f"layers: got {good['model']['layers'] + 1}, more than the model's "
              f"{good['model']['layers']} (model.layers)")]
    for key, value, want in cases:
        meta_path(lone).write_text(json.dumps({**good, key: value}))
        assert main(["--refit", str(lone), "--out", str(tmp_path / "o" / "p.yaml")]) == 2, key
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and want in err and "lone.csv.meta.json" in err, err
    del good["layers"]
    meta_path(lone).write_text(json.dumps(good))
    assert main(["--refit", str(lone), "--out", str(tmp_path / "o" / "p.yaml")]) == 2
    assert "the run's settings lack layers" in capsys.readouterr().err


# Run as a script in a fresh interpreter: importing torch or simpy fails there, as on a
# machine with only the base install.
_WITHOUT_TORCH = """
import sys

class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "simpy"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Absent())
from calibrate.cli import main
code = main(sys.argv[1:])
assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "simpy")]
sys.exit(code)
"""


@e2e
def test_a_refit_needs_neither_torch_nor_simpy(calibrated, tmp_path: Path) -> None:
    """A CSV timed on a GPU machine is fitted again where torch is not installed: the
    refit imports neither torch nor simpy and writes what it writes with them; asking
    such a machine to time gives one line naming the extra to install."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *argv], cwd=root,
                              capture_output=True, text=True, timeout=300)

    done = run("--refit", str(calibrated.csv_path), "--out", str(tmp_path / "bare.yaml"))
    assert done.returncode == 0, done.stderr
    assert "refitted from cpu-tiny.csv" in done.stdout
    with_torch = refit(calibrated.csv_path, tmp_path / "full.yaml")
    bare = yaml.safe_load((tmp_path / "bare.yaml").read_text())
    full = yaml.safe_load(with_torch.profile_path.read_text())
    for key in ("components", "validation", "device", "model", "dtype", "tp", "source"):
        assert bare.get(key) == full.get(key), key
    assert (tmp_path / "bare.csv").read_bytes() == calibrated.csv_path.read_bytes()

    timing = run("--model", "tiny", "--device", "cpu", "--out", str(tmp_path / "t.yaml"))
    assert timing.returncode == 2 and "Traceback" not in timing.stderr
    err = timing.stderr.strip()
    assert "\n" not in err and "needs torch: install servesim[calibrate]" in err, err


def test_a_failed_fit_keeps_the_measurements_of_the_profile_at_out(tmp_path: Path) -> None:
    """A fit that fails keeps what it measured under NAME.partial.csv: the CSV and the
    settings of the profile already at --out stay as they were, a pair that refits."""
    from calibrate.calresult import CalibrationConfig
    from calibrate.fitprofile import Measured, fit_profile
    from sim.cost.presets import MODELS
    from sim.errors import ServesimError

    out = tmp_path / "p.yaml"
    old_csv, old_meta = b"the earlier run's measurements\n", b'{"the earlier": "settings"}\n'
    (tmp_path / "p.csv").write_bytes(old_csv)
    meta_path(tmp_path / "p.csv").write_bytes(old_meta)
    model = MODELS["tiny"]
    with pytest.raises(ServesimError, match="measurements kept in .*p.partial.csv"):
        fit_profile(CalibrationConfig(model=model, out=out),
                    Measured(model, {"name": "cpu"}, None, model.layers, 512, [], []))
    assert (tmp_path / "p.csv").read_bytes() == old_csv
    assert meta_path(tmp_path / "p.csv").read_bytes() == old_meta
    assert (tmp_path / "p.partial.csv").is_file()
    assert json.loads(meta_path(tmp_path / "p.partial.csv").read_text())["layers"] == \
        model.layers


def test_out_replaces_only_calibrations_own_files(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """--out over a scenario, or beside a trace of the same stem, is refused before any
    timing, and the files are kept; a profile calibrate wrote is not refused."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: mine\nmodel: {preset: llama-3-8b}\n")
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,5\n")
    base = ["--model", "tiny", "--device", "cpu", "--budget-s", "1", "--out"]
    assert main([*base, str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "\n" not in err.strip() and f"--out: got '{scenario}', which exists and is not " \
        "a profile calibrate wrote" in err
    assert main([*base, str(tmp_path / "t.yaml")]) == 2
    assert f"--out (its t.csv beside it): got '{trace}', which exists and is not a " \
        "calibration's measurements" in capsys.readouterr().err
    assert scenario.read_text().startswith("name: mine") and trace.read_text().endswith("5\n")
    from calibrate.cli import _check_replaceable

    mine = tmp_path / "mine.yaml"
    mine.write_text("schema: servesim-profile/5\ncalibration: {grid: cpu-quick}\n")
    write_csv(tmp_path / "mine.csv", [])
    meta_path(tmp_path / "mine.csv").write_text('{"schema": "servesim-calibration-meta/1"}')
    _check_replaceable(mine, None)


def test_a_refit_that_fails_on_its_csv_makes_no_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--out's folder had been made before the CSV was read: a refit of a missing CSV
    left an empty folder behind."""
    out = tmp_path / "new" / "sub" / "refit.yaml"
    assert main(["--refit", str(tmp_path / "gone.csv"), "--out", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
