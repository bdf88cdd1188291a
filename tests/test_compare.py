"""``servesim compare``: one workload through several policies, a table, CSV, JSON, plot."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from sim.cli import main

SCENARIO = {
    "name": "cmp",
    "model": "tiny",
    "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
    "serving": {"block_size": 4, "max_num_batched_tokens": 256},
    "workload": {"arrivals": {"process": "poisson", "rate": 20},
                 "lengths": {"prompt": {"dist": "uniform", "low": 8, "high": 200},
                             "output": {"dist": "uniform", "low": 2, "high": 40}},
                 "num_requests": 60, "seed": 3},
}


def test_compare_writes_a_side_by_side_table(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    for policy in ("static", "continuous", "orca", "chunked", "disaggregated"):
        assert policy in text
    with open(out / "compare.csv") as f:
        table = {r["policy"]: r for r in csv.DictReader(f)}
    assert table["disaggregated"]["gpus"] == "2" and table["continuous"]["gpus"] == "1"
    assert {r["finished"] for r in table.values()} == {"60"}
    summaries = json.loads((out / "compare.json").read_text())
    assert summaries["chunked"]["policy"] == "chunked"
    assert (out / "compare_cdf.png").stat().st_size > 10_000


def test_compare_leaves_out_default_policies_the_scenario_refuses(tmp_path, capsys):
    # Speculative decoding runs under continuous, orca and chunked only: the default
    # list's other two are left out, each named with its reason, and the three run.
    spec = {**SCENARIO, "serving": {**SCENARIO["serving"], "speculative": {
        "method": "ngram", "num_tokens": 2, "acceptance": {"rate": 0.5}}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--no-plots", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    for p in ("static", "disaggregated"):
        assert (f"compare: left out {p}: speculative decoding is modelled for policies "
                f"continuous, orca and chunked, not '{p}'") in err
    assert "left out orca" not in err
    with open(out / "compare.csv") as f:
        assert [r["policy"] for r in csv.DictReader(f)] == ["continuous", "orca", "chunked"]
    # Asked for by name, a refused policy is the error it always was.
    assert main(["compare", str(path), "--policies", "static,chunked", "--no-plots",
                 "--out", str(tmp_path / "o2")]) == 2
    assert "not 'static'" in capsys.readouterr().err


def test_compare_keeps_a_policys_own_keys_to_its_own_runs(tmp_path, capsys):
    """A chunk size or batch size, refused under the policies that do not read it, is put
    back to its default in their runs, whether the scenario or a --set gives it."""
    own = {**SCENARIO, "serving": {**SCENARIO["serving"], "policy": "chunked",
                                   "token_budget": 64}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(own))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--policies", "static,continuous,chunked",
                 "--set", "serving.long_prefill_token_threshold=32", "--no-plots",
                 "--out", str(out)]) == 0
    assert "left out" not in capsys.readouterr().err
    pools = {p: s["simulated"]["pools"]["both"]
             for p, s in json.loads((out / "compare.json").read_text()).items()}
    assert [pools[p]["token_budget"] for p in ("static", "continuous", "chunked")] == \
        [None, None, 64]
    assert pools["chunked"]["long_prefill_token_threshold"] == 32


@pytest.mark.parametrize("policies, message", [
    ("continuous,fifo", "unknown policy 'fifo'; valid: chunked"),
    # A repeat would be silently one run.
    ("chunked,chunked", "got 'chunked,chunked': each policy once"),
])
def test_compare_unknown_policy_is_a_one_line_error(tmp_path, capsys, policies, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["compare", str(path), "--policies", policies]) == 2
    err = capsys.readouterr().err
    assert f"--policies: {message}" in err and err.count("\n") == 1


@pytest.mark.parametrize("flag, value, message", [
    # Empty is not the default list; an empty item had been skipped without a word.
    ("--policies", "", "--policies: got an empty value; give --policies a value"),
    ("--policies", "continuous,,chunked", "--policies continuous,,chunked: an empty item"),
    ("--gpus", "h100-sxm,,b200", "--gpus h100-sxm,,b200: an empty item"),
    ("--gpus", ",", "--gpus ,: an empty item"),
    # The scenario's tp is 1: the two names are one configuration, run twice before.
    ("--gpus", "h100-sxm,h100-sxm:1", "--gpus: got 'h100-sxm' and 'h100-sxm:1': both run "
                                      "h100-sxm at tp 1; each configuration once"),
])
def test_compare_lists_refuse_empty_items_and_repeats(tmp_path, capsys, flag, value, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "model": "llama-3-8b", "cost": "roofline"}))
    assert main(["compare", str(path), flag, value, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {message}") and err.count("\n") == 1, err


@pytest.mark.parametrize("key, value", [("serving.token_budget", 2),
                                        ("disaggregated.link.bandwidth_gb_s", 0)])
def test_compare_bad_option_is_an_error(tmp_path, capsys, key, value):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["compare", str(path), "--no-plots", "--out", str(tmp_path / "o"),
                 "--set", f"{key}={value}"]) == 2
    assert key.split(".")[-1] in capsys.readouterr().err


def test_compare_gpus_runs_the_workload_on_each_gpu(tmp_path, capsys):
    # --gpus varies hardware.gpu instead of the policy: each run priced by its own GPU's
    # figures (the roofline here), the scenario's policy kept, the same requests.
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "model": "llama-3-8b", "cost": "roofline",
                                    "serving": {"policy": "chunked"}}))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--gpus", "h100-sxm,b200", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "h100-sxm: cost: analytic roofline" in text and "b200: cost: analytic" in text
    with open(out / "compare.csv") as f:
        table = {r["gpu"]: r for r in csv.DictReader(f)}
    assert list(table) == ["h100-sxm", "b200"]
    assert {r["finished"] for r in table.values()} == {"60"}
    # B200's bandwidth and FLOP/s make every step cheaper: its decode is faster.
    assert float(table["b200"]["tpot_p50_s"]) < float(table["h100-sxm"]["tpot_p50_s"])
    summaries = json.loads((out / "compare.json").read_text())
    for gpu, s in summaries.items():
        assert s["simulated"]["pools"]["both"]["gpu"] == gpu
        assert s["simulated"]["policy"] == "chunked"
    meta = json.loads((out / "compare.csv.meta.json").read_text())
    assert "one row per GPU" in json.dumps(meta) and "b200" in json.dumps(meta)
    # The report names the GPUs, not policies, and each run's cost model.
    assert main(["report", str(out), "--format", "md"]) == 0
    doc = (out / "report.md").read_text()
    assert doc.startswith("# cmp: Llama-3-8B on h100-sxm, b200, policy chunked")
    assert "## GPUs side by side" in doc and "## Cost model of each GPU's run" in doc
    assert "on 2 GPUs, each priced by its own cost model" in doc


def test_compare_gpus_takes_a_tensor_parallel_degree(tmp_path, capsys):
    # GPU:TP sets hardware.tp with the GPU: two H100s against one, and a B200 at the
    # scenario's own tp; the rows, the GPU counts and the pools say so.
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, "model": "llama-3-8b", "cost": "roofline",
                                    "serving": {"policy": "chunked"}}))
    out = tmp_path / "out"
    assert main(["compare", str(path), "--gpus", "h100-sxm:2,h100-sxm,b200",
                 "--no-plots", "--out", str(out)]) == 0
    with open(out / "compare.csv") as f:
        table = {r["gpu"]: r for r in csv.DictReader(f)}
    assert list(table) == ["h100-sxm:2", "h100-sxm", "b200"]
    assert [table[g]["gpus"] for g in table] == ["2", "1", "1"]
    # Each rank reads half the weights: the two-GPU decode is faster.
    assert float(table["h100-sxm:2"]["tpot_p50_s"]) < float(table["h100-sxm"]["tpot_p50_s"])
    summaries = json.loads((out / "compare.json").read_text())
    pools = {g: s["simulated"]["pools"]["both"] for g, s in summaries.items()}
    assert [(p["gpu"], p["tp"]) for p in pools.values()] == [
        ("h100-sxm", 2), ("h100-sxm", 1), ("b200", 1)]
    assert main(["report", str(out), "--format", "md"]) == 0
    assert "## GPUs side by side" in (out / "report.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["--gpus", "b200", "--policies", "chunked"],
     "give one of --policies, --gpus or --variant, not --policies and --gpus"),
    (["--gpus", "b200,x9"], "unknown gpu 'x9'; valid: a100-40gb, a100-80gb"),
    (["--gpus", "b200,b200"], "got 'b200,b200': each GPU once"),
    (["--gpus", "b200:x"], "got 'b200:x': after a GPU, ':' takes its tensor-parallel degree"),
    (["--gpus", "b200:0"], "got 'b200:0': after a GPU, ':' takes"),
    (["--gpus", "b200:"], "got 'b200:': after a GPU, ':' takes"),
])
def test_compare_gpus_bad_input_is_one_line(tmp_path, capsys, args, message):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["compare", str(path), "--no-plots", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr().err
    assert f"--gpus: {message}" in err and err.count("\n") == 1


@pytest.mark.parametrize(("argv", "want"), [
    (["--policies", "chunked,continuous", "--set", "serving={policy: static, block_size: 16}"],
     "--policies: --set serving={policy: static, block_size: 16} sets serving.policy in the "
     "mapping it gives serving, and --policies sets serving.policy for each run"),
    (["--gpus", "h100-sxm", "--set", "hardware={gpu: h200, tp: 1}"],
     "--gpus: --set hardware={gpu: h200, tp: 1} sets hardware.gpu in the mapping it gives "
     "hardware, and --gpus sets hardware.gpu for each run"),
    (["--variant", "a", "serving.policy=continuous", "--variant", "b", "--set",
      "serving={policy: static}"],
     "--variant: variant a: --set serving={policy: static} sets serving.policy in the "
     "mapping it gives serving, and the variant sets serving.policy for each run")])
def test_a_mapping_set_of_what_the_runs_vary_is_refused(tmp_path, capsys, argv, want):
    """A --set of the varied key in mapping form was dropped without a word, where the
    dotted form is refused."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["compare", str(path), *argv, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and want in err
    assert not (tmp_path / "o").exists()
    # A mapping that leaves the varied key out is the scenario's to take.
    assert main(["compare", str(path), "--policies", "chunked,continuous", "--set",
                 "serving={block_size: 8}", "--out", str(tmp_path / "ok"), "--no-plots"]) == 0
