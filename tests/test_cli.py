"""The command line end to end: outputs, determinism, and one-line errors on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "scenarios" / "quickstart.yaml"


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True,
                          text=True, env=full_env, cwd=ROOT, timeout=300)


def test_simulate_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", str(QUICK), "--set", "workload.duration_s=60", "--out",
               str(tmp_path)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "ttft" in printed and "goodput" in printed
    rows = (tmp_path / "requests.csv").read_text().splitlines()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert len(rows) - 1 == summary["requests"]["total"] > 0
    assert (tmp_path / "ttft_tpot_cdf.png").stat().st_size > 10_000
    counted = sum(summary["requests"][k] for k in ("finished", "rejected", "unfinished"))
    assert counted == summary["requests"]["total"]



def test_the_printed_summary_says_what_the_workload_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace's dropped rows (here BurstGPT's two failed requests) and its transforms are
    on screen, not only in summary.json: a request left out is never silent."""
    scenario = tmp_path / "s.yaml"
    trace = ROOT / "tests" / "fixtures" / "traces" / "burstgpt_sample.csv"
    scenario.write_text(
        "name: dropped\nmodel: llama-3-8b\nhardware: {gpu: h100-sxm}\ncost: measured\n"
        f"workload: {{trace: {{path: {trace}, time_scale: 0.5}}}}\n")
    assert main(["simulate", str(scenario), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.splitlines()
    notes = json.loads((tmp_path / "out" / "summary.json").read_text())["workload_notes"]
    assert len(notes) == 2 and "dropped 2 rows (failed (0 response tokens))" in notes[0]
    assert notes[1].startswith("time_scale x0.5")
    at = next(i for i, line in enumerate(printed) if line.startswith("requests: 6 total"))
    assert printed[at + 1:at + 3] == [f"workload: {n}" for n in notes]
    # And in the folder's HTML report, beside the request counts.
    assert main(["report", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text()
    assert "dropped 2 rows (failed (0 response tokens))" in page and "time_scale x0.5" in page

def test_same_seed_gives_byte_identical_outputs_across_hash_seeds(tmp_path: Path) -> None:
    outs = []
    for i, hash_seed in enumerate(("0", "12345")):
        out = tmp_path / f"run{i}"
        r = run_cli("simulate", str(QUICK), "--set", "workload.duration_s=120", "--out",
                    str(out), "--no-plots", "--quiet", env={"PYTHONHASHSEED": hash_seed})
        assert r.returncode == 0, r.stderr
        outs.append(((out / "requests.csv").read_bytes(), (out / "summary.json").read_bytes()))
    assert outs[0] == outs[1]


def test_different_seed_changes_generated_workload(tmp_path: Path) -> None:
    scen = tmp_path / "gen.yaml"
    scen.write_text(
        "model: llama-3-8b\n"
        "workload:\n"
        "  arrivals: {process: poisson, rate: 5}\n"
        "  lengths: {prompt: {dist: uniform, low: 10, high: 500},"
        " output: {dist: uniform, low: 2, high: 50}}\n"
        "  num_requests: 50\n"
    )
    csvs = []
    for seed in ("1", "1", "2"):
        out = tmp_path / f"s{len(csvs)}"
        assert main(["simulate", str(scen), "--set", f"workload.seed={seed}", "--out",
                     str(out), "--no-plots", "--quiet"]) == 0
        csvs.append((out / "requests.csv").read_bytes())
    assert csvs[0] == csvs[1] != csvs[2]


BAD = {
    "unknown_key": ("model: tiny\nworkload: {trace: {path: azure_2023_conv}}\nservng: {}\n",
                    ["servng", "allowed"]),
    "nested_unknown_key": ("model: tiny\nworkload: {trace: {path: azure_2023_conv, speed: 2}}\n",
                           ["workload.trace.speed", "allowed"]),
    "wrong_type": ("model: tiny\nserving: {max_num_seqs: lots}\n"
                   "workload: {trace: {path: azure_2023_conv}}\n",
                   ["serving.max_num_seqs", "'lots'", "integer"]),
    "negative_rate": ("model: tiny\nworkload:\n  arrivals: {process: poisson, rate: -3}\n"
                      "  lengths: {empirical: azure_2023_conv}\n  num_requests: 5\n",
                      ["workload.arrivals.rate", "-3", "greater than 0"]),
    "unknown_policy": ("model: tiny\nserving: {policy: fastest}\n"
                       "workload: {trace: {path: azure_2023_conv}}\n",
                       ["serving.policy", "'fastest'", "continuous"]),
    "unknown_preset": ("model: llama-9\nworkload: {trace: {path: azure_2023_conv}}\n",
                       ["model", "'llama-9'", "llama-3-8b"]),
    "missing_trace": ("model: tiny\nworkload: {trace: {path: nowhere.csv}}\n",
                      ["workload.trace", "nowhere.csv"]),
    "does_not_fit": ("model: llama-3-70b\nhardware: {gpu: l40s}\n"
                     "workload: {trace: {path: azure_2023_conv}}\n",
                     ["does not fit", "weights 131.42", "= 40.96 GiB", "l40s"]),
    "yaml_syntax": ("model: tiny\nworkload: {trace: [\n", ["invalid YAML", "line"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_clear_line(case: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    text, needles = BAD[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    rc = main(["simulate", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err
    for needle in needles:
        assert needle in err, err
    assert not (tmp_path / "out").exists()  # nothing written for a failed run


def test_malformed_trace_row_names_file_line_and_value(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n0.5,ten,5\n")
    scen = tmp_path / "s.yaml"
    scen.write_text("model: tiny\nworkload: {trace: {path: t.csv}}\n")
    assert main(["simulate", str(scen), "--quiet", "--no-plots",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "t.csv" in err and "line 3" in err and "ten" in err


def test_missing_scenario_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "/nonexistent/scenario.yaml"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/scenario.yaml" in err and "cannot read" in err


def test_bad_override(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(QUICK), "--set", "serving.block_size=0", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "serving.block_size" in err and "at least 1" in err


@pytest.mark.parametrize("buffered", [True, False])
def test_closed_output_pipe_is_one_line_not_a_traceback(buffered: bool) -> None:
    """`servesim ... | head` closes the pipe early: the command stops with one line on
    stderr and the shell's SIGPIPE status. Buffered (the default for a pipe), the
    output is lost at the final flush; unbuffered, at the first print."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "trace", "stats",
                             "azure_2023_conv"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the interpreter has even started: every write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "Exception ignored" not in err
    assert err.count("\n") == 1 and err.startswith("servesim: trace")
    assert "standard output was closed" in err


def test_closed_pipe_shared_with_stderr_exits_quietly() -> None:
    """`servesim ... 2>&1 | head`: nowhere left to say it, so nothing said, same status."""
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "trace", "stats",
                             "azure_2023_conv"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=ROOT)
    assert proc.stdout is not None
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141



def test_a_forced_run_past_memory_ends_in_one_line(tmp_path: Path) -> None:
    # --force skips the memory check; under a 3 GiB address-space limit, drawing 1.8e9
    # arrival gaps then fails, and the command says so in one line instead of a
    # traceback. (Without a limit, an overcommitting kernel would kill it instead.) Past
    # 2**31 - 1 expected requests the run is refused before drawing (test_workload_bounds).
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    out = subprocess.run(
        [sys.executable, "-m", "sim.cli", "simulate", "scenarios/overload-10x.yaml",
         "--set", "workload.arrivals.rate=5e5", "--force", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=300, preexec_fn=limit,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2, out.stderr
    assert out.stderr.count("\n") == 1 and "simulate ran out of memory" in out.stderr


@pytest.mark.parametrize(("flag", "argv"), [
    ("--out", ["simulate", str(QUICK), "--out", "{tmp}/a", "--out", "{tmp}/b"]),
    ("--max-rejected-share", ["simulate", str(QUICK), "--out", "{tmp}/o",
                              "--max-rejected-share", "0.5", "--max-rejected-share=0"]),
    ("--rates", ["sweep", str(QUICK), "--out", "{tmp}/o", "--rates", "2", "--rates", "4"]),
    ("--model", ["calibrate", "--model", "tiny", "--model", "tiny", "--out", "{tmp}/x.yaml"])])
def test_an_option_of_one_value_given_twice_is_refused(
        flag: str, argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The last value had won without a word (``--rates 2 --rates 4`` ran rate 4 only)."""
    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert not list(tmp_path.iterdir())
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{flag} given twice ({flag} " in err
    assert "it takes one value; give it once" in err
