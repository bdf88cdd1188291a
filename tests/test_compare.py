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


def test_compare_unknown_policy_is_a_one_line_error(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["compare", str(path), "--policies", "continuous,fifo"]) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'fifo'" in err and "chunked" in err and err.count("\n") == 1


@pytest.mark.parametrize("key, value", [("serving.token_budget", 2),
                                        ("disaggregated.link.bandwidth_gb_s", 0)])
def test_compare_bad_option_is_an_error(tmp_path, capsys, key, value):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    assert main(["compare", str(path), "--no-plots", "--out", str(tmp_path / "o"),
                 "--set", f"{key}={value}"]) == 2
    assert key.split(".")[-1] in capsys.readouterr().err
