"""Studies that vary tp (``compare --gpus GPU:TP``, ``sweep --tp``, ``capacity --tp``)
from a scenario whose own tp does not fit its model: each runs the model at the tp the
study gives, and a ``--set hardware.tp`` beside them is replaced, not a conflict."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.study.sweep import read_csv

# Llama-3-70B's 131 GiB of weights need at least two H200s or four H100s: the file's own
# GPU (an H100, tp 1) does not hold them.
SCENARIO = {
    "name": "seventy",
    "model": "llama-3-70b",
    "hardware": {"gpu": "h100-sxm"},
    "cost": "roofline",
    "serving": {"policy": "chunked", "max_num_seqs": 64, "max_num_batched_tokens": 2048},
    "workload": {"arrivals": {"process": "poisson", "rate": 2.0},
                 "lengths": {"prompt": {"dist": "fixed", "value": 256},
                             "output": {"dist": "fixed", "value": 8}},
                 "num_requests": 12, "seed": 1},
}


def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def pools(out: Path) -> dict[str, tuple[str, int]]:
    runs = json.loads((out / "compare.json").read_text())
    return {g: (s["simulated"]["pools"]["both"]["gpu"], s["simulated"]["pools"]["both"]["tp"])
            for g, s in runs.items()}


def test_compare_gpus_runs_each_tp_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    path, out = scenario(tmp_path), tmp_path / "out"
    assert main(["compare", str(path), "--gpus", "h100-sxm:4,h200:2", "--no-plots",
                 "--out", str(out)]) == 0
    assert pools(out) == {"h100-sxm:4": ("h100-sxm", 4), "h200:2": ("h200", 2)}
    runs = json.loads((out / "compare.json").read_text())
    for name, gpus in (("h100-sxm:4", 4), ("h200:2", 2)):
        tp = runs[name]["throughput"]
        assert tp["output_tokens_per_s_per_gpu"] == pytest.approx(tp["output_tokens_per_s"]
                                                                  / gpus)
    with open(out / "compare.csv") as f:
        assert {r["gpu"]: r["finished"] for r in csv.DictReader(f)} == {
            "h100-sxm:4": "12", "h200:2": "12"}


def test_compare_gpu_tp_replaces_a_set_tp(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    # GPU:TP runs its own tp; a GPU without one runs --set's.
    path, out = scenario(tmp_path), tmp_path / "out"
    assert main(["compare", str(path), "--gpus", "h100-sxm:8,h200", "--set", "hardware.tp=4",
                 "--no-plots", "--out", str(out)]) == 0
    assert pools(out) == {"h100-sxm:8": ("h100-sxm", 8), "h200": ("h200", 4)}
    # The same configuration twice, once through --set, is still refused.
    assert main(["compare", str(path), "--gpus", "h200:4,h200", "--set", "hardware.tp=4",
                 "--no-plots", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--gpus: got 'h200:4' and 'h200': both run h200 at tp 4" in err


def test_compare_refuses_a_set_inside_what_gpus_replaces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(scenario(tmp_path)), "--gpus", "h200:2",
                 "--set", "hardware.gpu.flops=1e15", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert ("--gpus: --set hardware.gpu.flops=1e15 sets a key inside hardware.gpu, which "
            "--gpus replaces whole in each run, so it would be dropped") in err


def test_sweep_tp_checks_the_scenario_at_the_grid_s_tp(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario(tmp_path)), "--tp", "4,8", "--rates", "1",
                 "--no-plots", "--quiet", "--workers", "1", "--out", str(out)]) == 0
    rows = read_csv(out / "points.csv")
    assert sorted(r["tp"] for r in rows) == [4, 8]
    assert all(r["finished"] == 12 for r in rows)
    # A tp of the grid that does not fit is the error, naming it.
    assert main(["sweep", str(scenario(tmp_path)), "--tp", "1,8", "--rates", "1",
                 "--no-plots", "--quiet", "--workers", "1", "--out", str(out)]) == 2
    assert "does not fit on h100-sxm with tp=1" in capsys.readouterr().err


def test_capacity_tp_checks_the_scenario_at_the_grid_s_tp(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    assert main(["capacity", str(scenario(tmp_path)), "--tp", "4", "--slo", "ttft_p99=5",
                 "--seeds", "1", "--tol", "0.5", "--max-requests", "40", "--no-plots",
                 "--quiet", "--workers", "1", "--set", "hardware.tp=1",
                 "--out", str(out)]) == 0
    assert {r["tp"] for r in read_csv(out / "search.csv")} == {4}


def test_the_printed_sweep_table_names_its_units() -> None:
    from sim.study.sweepcli import summary_table

    row = {"policy": "chunked", "replicas": 1, "tp": 4, "pp": 1, "rate": 2.0,
           "ttft_p99": 0.3021, "tpot_p99": 0.0269, "e2e_p99": 4.9832, "throughput_rps": 1.9,
           "goodput_rps": 1.8, "saturated": 0}
    head, _, line = summary_table([row]).splitlines()
    assert head.split() == ["policy", "rep", "tp", "pp", "rate", "ttft", "p99", "ms", "tpot",
                            "p99", "ms", "e2e", "p99", "ms", "req/s", "goodput", "sat"]
    assert line.split() == ["chunked", "1", "4", "1", "2", "302.1", "26.9", "4983.2", "1.90",
                            "1.80"]


VLLM = {
    "name": "flags",
    "model": "llama-3-8b",
    "hardware": {"gpu": "h100-sxm"},
    "cost": "roofline",
    "vllm": {"tp": 1, "pipeline-parallel-size": 1, "data-parallel-size": 1,
             "max-num-seqs": 64, "O3": True},
    "workload": {"arrivals": {"process": "poisson", "rate": 2.0},
                 "lengths": {"prompt": {"dist": "fixed", "value": 256},
                             "output": {"dist": "fixed", "value": 8}},
                 "num_requests": 12, "seed": 1},
}


def test_studies_vary_the_degrees_a_pasted_flag_set_gives(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Setting hardware.tp beside the section's tp flag was refused as given twice: no
    # pasted flag set naming its degrees could be swept, searched or compared by GPU.
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(VLLM))
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--tp", "1,2", "--pp", "1,2", "--replicas", "1,2",
                 "--rates", "1", "--no-plots", "--workers", "1", "--out", str(out)]) == 0
    rows = read_csv(out / "points.csv")
    assert sorted((r["tp"], r["pp"], r["replicas"]) for r in rows) == [
        (tp, pp, n) for tp in (1, 2) for pp in (1, 2) for n in (1, 2)]
    # The kernel flag's note, printed and in the manifest, and a report's "not priced" row.
    note = ("vllm.O3: a kernel or compilation setting, not priced: steps cost what vLLM's "
            "default kernels take")
    assert f"note: {note}" in capsys.readouterr().out
    assert json.loads((out / "sweep.json").read_text())["simulated"]["notes"] == [note]
    assert main(["report", str(out), "--format", "md"]) == 0
    assert f"| not priced | {note} |" in (out / "report.md").read_text()
    cmp = tmp_path / "cmp"
    assert main(["compare", str(path), "--gpus", "h100-sxm:2,h200", "--no-plots",
                 "--out", str(cmp)]) == 0
    assert pools(cmp) == {"h100-sxm:2": ("h100-sxm", 2), "h200": ("h200", 1)}
    assert f"note: {note}" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--policies", "chunked,continuous", "--set", "serving.policy=static"],
     "--policies: --set serving.policy=static: --policies sets serving.policy for each run"),
    (["--gpus", "h100-sxm,h200", "--set", "hardware.gpu=b200"],
     "--gpus: --set hardware.gpu=b200: --gpus sets hardware.gpu for each run"),
])
def test_compare_refuses_a_set_of_what_it_varies(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 args: list[str], message: str) -> None:
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(VLLM))
    assert main(["compare", str(path), *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_grid_degree_that_does_not_split_the_model_names_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sweep", str(scenario(tmp_path)), "--tp", "3,4", "--rates", "1",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith("(tp must divide the heads) (the first of --tp 3,4)")


def test_a_vllm_config_file_is_an_input_of_the_run_and_of_the_cache(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # An edited config file was served from a sweep's cache, and a run into the folder
    # holding it deleted it.
    from sim.config.scenario import input_files, load
    from sim.study.sweeppoint import inputs_fingerprint

    (tmp_path / "serve.yaml").write_text("max-num-seqs: 4\n")
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({**VLLM, "vllm": {"config": "serve.yaml"}}))
    sc = load(path)
    assert input_files(sc) == [path, tmp_path / "serve.yaml"]
    before = inputs_fingerprint(sc)
    (tmp_path / "serve.yaml").write_text("max-num-seqs: 256\n")
    assert inputs_fingerprint(load(path)) != before
    out = tmp_path / "sweep"
    for seqs, ran in ((4, 1), (256, 1), (256, 0)):
        (tmp_path / "serve.yaml").write_text(f"max-num-seqs: {seqs}\n")
        assert main(["sweep", str(path), "--rates", "1", "--no-plots", "--workers", "1",
                     "--out", str(out)]) == 0
        assert f"1 simulations: {ran} run, {1 - ran} from the cache" in capsys.readouterr().out
    # A run's folder that holds the config file read keeps it, as it keeps a trace.
    run = tmp_path / "run"
    assert main(["simulate", str(path), "--no-plots", "--out", str(run)]) == 0
    inner = run / "serve.yaml"
    inner.write_text("max-num-seqs: 8\n")
    path.write_text(yaml.safe_dump({**VLLM, "vllm": {"config": str(inner)}}))
    assert main(["simulate", str(path), "--no-plots", "--out", str(run)]) == 0
    assert inner.read_text() == "max-num-seqs: 8\n"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["simulated"]["pools"]["both"]["max_num_seqs"] == 8


def test_a_pasted_chunked_prefill_flag_carries_the_policy_axis(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # enable-chunked-prefill chooses the policy: sweeping or comparing policies set
    # serving.policy beside it and was refused as given twice.
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump({**VLLM, "vllm": {"enable-chunked-prefill": True}}))
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--policies", "chunked,continuous", "--rates", "1",
                 "--no-plots", "--quiet", "--workers", "1", "--out", str(out)]) == 0
    assert sorted(r["policy"] for r in read_csv(out / "points.csv")) == ["chunked",
                                                                         "continuous"]
    cmp = tmp_path / "cmp"
    assert main(["compare", str(path), "--policies", "continuous,chunked", "--no-plots",
                 "--out", str(cmp)]) == 0
    runs = json.loads((cmp / "compare.json").read_text())
    assert {p: s["simulated"]["policy"] for p, s in runs.items()} == {
        "continuous": "continuous", "chunked": "chunked"}
    assert main(["compare", str(path), "--policies", "chunked,static", "--no-plots",
                 "--out", str(cmp)]) == 2
    assert (f"{path}: vllm.enable-chunked-prefill: chooses the policy (chunked or "
            "continuous), so static cannot run with it") in capsys.readouterr().err
