"""``servesim compare --variant NAME KEY=VALUE ...``: named variants of one scenario (a
layout, a setting) run on the same requests, side by side."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from sim.cli import main

SCENARIO = {
    "name": "var",
    "model": "llama-3-8b",
    "hardware": {"gpu": "h100-sxm"},
    "cost": "roofline",
    "serving": {"policy": "chunked"},
    "workload": {"arrivals": {"process": "poisson", "rate": 8},
                 "lengths": {"prompt": {"dist": "uniform", "low": 64, "high": 900},
                             "output": {"dist": "uniform", "low": 8, "high": 120}},
                 "num_requests": 120, "seed": 5},
}


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    return path


def test_variants_run_side_by_side_with_their_settings(scenario, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["compare", str(scenario), "--no-plots", "--out", str(out),
                 "--variant", "one", "--variant", "tp2", "hardware.tp=2",
                 "--variant", "seqs4", "serving.max_num_seqs=4"]) == 0
    text = capsys.readouterr().out
    assert "one: the scenario as it is\ntp2: hardware.tp=2\nseqs4: serving.max_num_seqs=4\n" \
        in text
    with open(out / "compare.csv") as f:
        table = {r["variant"]: r for r in csv.DictReader(f)}
    assert list(table) == ["one", "tp2", "seqs4"]
    assert [table[v]["gpus"] for v in table] == ["1", "2", "1"]
    assert {r["finished"] for r in table.values()} == {"120"}
    # Each rank of two reads half the weights: the decode is faster. Four sequences at
    # most make requests queue for a slot: their first tokens come later.
    assert float(table["tp2"]["tpot_p50_s"]) < float(table["one"]["tpot_p50_s"])
    assert float(table["seqs4"]["ttft_p99_s"]) > float(table["one"]["ttft_p99_s"])
    summaries = json.loads((out / "compare.json").read_text())
    assert [s["simulated"]["pools"]["both"]["tp"] for s in summaries.values()] == [1, 2, 1]
    assert summaries["seqs4"]["simulated"]["pools"]["both"]["max_num_seqs"] == 4
    meta = json.loads((out / "compare.csv.meta.json").read_text())
    assert meta["rows"] == "one row per named variant, every run on the same requests"
    assert meta["varied"]["variants"] == {"one": [], "tp2": ["hardware.tp=2"],
                                          "seqs4": ["serving.max_num_seqs=4"]}
    assert main(["report", str(out), "--format", "md"]) == 0
    doc = (out / "report.md").read_text()
    assert doc.startswith("# var: Llama-3-8B in 3 variants (one, tp2, seqs4)")
    assert "## Variants side by side" in doc and "| variant | GPUs |" in doc
    assert "| tp2 | hardware.tp=2 | analytic roofline" in doc
    assert "| one | the scenario as it is |" in doc
    # The first run's memory terms, its utilization and the release that sized them, as
    # the printed summary's memory line gives them.
    assert ("| GPU memory | 79.20 GiB x 0.92 - weights 14.96 - activation 0.84 - non-torch "
            "0.16 - CUDA graphs 0.00 -> KV 56.91 GiB = 29135 blocks, 466160 tokens; as vLLM "
            "0.24.0 sizes it (Model Runner V2) |") in doc


def test_a_variant_without_settings_is_the_scenario_as_simulate_runs_it(scenario, tmp_path):
    out = tmp_path / "out"
    assert main(["compare", str(scenario), "--no-plots", "--out", str(out),
                 "--set", "workload.num_requests=60",
                 "--variant", "base", "--variant", "eager-seqs", "serving.max_num_seqs=2"]) == 0
    assert main(["simulate", str(scenario), "--no-plots", "--out", str(tmp_path / "sim"),
                 "--set", "workload.num_requests=60"]) == 0
    ran = json.loads((out / "compare.json").read_text())["base"]
    alone = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert ran["latency_s"] == alone["latency_s"] and ran["requests"] == alone["requests"]


@pytest.mark.parametrize("args, message", [
    (["--variant", "a=1"], "--variant: got 'a=1' first: a variant starts with its name"),
    (["--variant", "-x"], "expected at least one argument"),
    (["--variant", "tp2", "hardware.tp"],
     "--variant: variant tp2: got 'hardware.tp'; a setting is KEY=VALUE"),
    (["--variant", "tp2", "=2"], "--variant: variant tp2: got '=2'; a setting is KEY=VALUE"),
    (["--variant", "a", "--variant", "a", "hardware.tp=2"],
     "--variant: got the name 'a' twice: each variant once"),
    (["--variant", "a", "hardware.tp=2", "hardware.tp=4"], "--variant: variant a: sets "
                                                           "hardware.tp twice"),
    # The scenario's tp is 1: the two variants would be one run under two names.
    (["--variant", "a", "--variant", "b", "hardware.tp=1"],
     "--variant: variants a and b run the same scenario (no setting against hardware.tp=1)"),
    (["--variant", "a", "hardware.tp=2", "--set", "hardware.tp=4"],
     "--variant: variant a: --set hardware.tp=4: the variant sets hardware.tp itself"),
    (["--variant", "a", "hardware.tp=2", "--policies", "chunked"],
     "--variant: give one of --policies, --gpus or --variant, not --policies and --variant"),
    (["--variant", "a", "hardware.tp=2", "--gpus", "b200"],
     "--variant: give one of --policies, --gpus or --variant, not --gpus and --variant"),
    # Every variant runs the scenario's requests: a workload key is not a variant's.
    (["--variant", "a", "workload.seed=3"], "--variant: variant a: sets workload.seed; a "
                                            "comparison runs every variant on the same "
                                            "requests"),
    (["--variant", "a", "horizon_s=5"], "--variant: variant a: sets horizon_s; a comparison"),
    # What the scenario refuses names the variant and the key.
    (["--variant", "a", "hardware.tp=3"], "hardware.tp: variant a: "),
    (["--variant", "dp", "hardware.dp=2", "hardware.ep=2"],
     "hardware.dp: variant dp: got 2, but model llama-3-8b is dense"),
])
def test_bad_variants_are_one_line(scenario, tmp_path, capsys, args, message):
    out = tmp_path / "o"
    assert main(["compare", str(scenario), "--no-plots", "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not out.exists()  # refused before anything ran


def test_variants_of_other_models_are_titled_so(scenario, tmp_path):
    out = tmp_path / "out"
    assert main(["compare", str(scenario), "--no-plots", "--out", str(out),
                 "--variant", "llama", "--variant", "mistral", "model=mistral-7b"]) == 0
    assert main(["report", str(out), "--format", "md"]) == 0
    doc = (out / "report.md").read_text()
    assert doc.startswith("# var: several models in 2 variants (llama, mistral)")
    assert "**several models in 2 variants of the scenario on the same 120 requests" in doc


def test_a_variant_its_cost_model_refuses_is_named(tmp_path, capsys):
    """A profile of another tp is refused when the variant's run prices it, after loading:
    the error had not said which variant."""
    from pathlib import Path

    profile = Path(__file__).resolve().parents[1] / "sim/data/profiles/" \
        "h100-sxm-llama-3-8b-tp1-vllm.yaml"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "cost": {"profile": str(profile)}}))
    assert main(["compare", str(path), "--no-plots", "--out", str(tmp_path / "out"),
                 "--variant", "one", "--variant", "wide", "hardware.tp=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("servesim: error: ") and "variant wide: " in err, err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("setting, pinned", [
    ("hardware.tp=2", "tp"), ("cluster.replicas=2", "replicas"), ("hardware.gpu=h200", "gpu")])
def test_variants_of_a_key_the_disaggregated_pools_pin_are_one_run(tmp_path, capsys, setting,
                                                                    pinned):
    # Both pools set tp, GPU and replicas: the scenario's own value reaches neither, so
    # the two variants had run alike under two names (--tp, --replicas and --gpus refuse it).
    pool = {"replicas": 1, "gpu": "h100-sxm", "tp": 1, "policy": "continuous"}
    raw = {**SCENARIO, "serving": {"policy": "disaggregated"},
           "disaggregated": {"prefill": pool, "decode": pool, "link": {"kind": "nvlink"}}}
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(raw))
    out = tmp_path / "o"
    assert main(["compare", str(path), "--no-plots", "--out", str(out), "--variant", "a",
                 "--variant", "b", setting]) == 2
    err = capsys.readouterr().err
    assert (f"--variant: variants a and b run the same scenario (no setting against "
            f"{setting}): the disaggregated pools set their own tp, gpu, replicas, which the "
            "scenario's do not reach; make each one differ") in err, err
    assert pinned in err and not out.exists()
