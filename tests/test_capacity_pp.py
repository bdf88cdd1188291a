"""Capacity search over pipeline stages (``--pp``): candidates are (policy, tp, pp), a
replica of tp x pp GPUs, and the cheapest configuration counts every stage's GPUs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sim.cli import main as cli_main
from sim.report.slospec import parse_slos
from sim.study.capacity import run_capacity
from sim.study.pointrun import PointCache
from sim.study.ratesearch import Search
from sim.study.sweep import read_csv
from sim.study.sweeppoint import PointKey, point_sets, read_raw

SCENARIO = {
    "name": "pp-capacity",
    "model": "llama-3-8b",
    "hardware": {"gpu": "h100-sxm"},
    "serving": {"policy": "chunked"},
    "cost": {"roofline": {}},
    "workload": {"num_requests": 400, "seed": 0, "arrivals": {"process": "poisson", "rate": 10.0},
                 "lengths": {"prompt": {"dist": "fixed", "value": 2048},
                             "output": {"dist": "fixed", "value": 64}}},
}


def scenario(tmp_path: Path, **over: object) -> Path:
    path = tmp_path / "pp.yaml"
    path.write_text(yaml.safe_dump({**SCENARIO, **over}))
    return path


def test_point_sets_name_the_stages_only_when_they_change(tmp_path: Path) -> None:
    raw = read_raw(scenario(tmp_path))
    one = point_sets(raw, PointKey("chunked", 1, 1, 5.0, 0), None)
    two = point_sets(raw, PointKey("chunked", 1, 1, 5.0, 0, pp=2), None)
    assert not any(s.startswith("hardware.pp") for s in one)  # digests of old points kept
    assert "hardware.pp=2" in two
    # A scenario whose stages come from a pasted vLLM flag is changed there, not twice.
    flagged = read_raw(scenario(tmp_path, vllm={"pipeline-parallel-size": 2}))
    back = point_sets(flagged, PointKey("chunked", 1, 1, 5.0, 0, pp=1), None)
    assert "vllm.pipeline-parallel-size=1" in back
    assert not any(s.startswith("vllm.pipeline") for s in
                   point_sets(flagged, PointKey("chunked", 1, 1, 5.0, 0, pp=2), None))


def test_capacity_chooses_between_tp_and_pp(tmp_path: Path) -> None:
    path = scenario(tmp_path)
    s = Search(read_raw(path), str(path), tmp_path, parse_slos(["ttft_p99=1.0"]), [0],
               PointCache(None), workers=1)
    res = run_capacity(s, ["chunked"], [1, 2], start=5.0, tol=0.1, target=40.0,
                       pps=[1, 2])
    rates = {(m.tp, m.pp): m.mean for m in res.max_rates}
    assert set(rates) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    # A second stage adds a GPU's compute to a replica: on these prefill-heavy requests
    # (2,048-token prompts, 64 outputs) it serves well over what one stage does.
    assert rates[(1, 2)] > 1.5 * rates[(1, 1)]
    # Every point of a pp=2 candidate ran with two stages; GPUs count them.
    assert {r["pp"] for r in res.search} == {1, 2}
    for c in res.checked:
        assert c.gpus == c.replicas * c.tp * c.pp
    assert res.best is not None and res.best.passed
    assert res.best.gpus == min(c.gpus for c in res.checked if c.passed)
    # No candidate that passed needs fewer GPUs than its max rate allows.
    for m in res.max_rates:
        fewest = math.ceil(40.0 / m.mean - 1e-9) * m.tp * m.pp
        assert all(c.gpus >= fewest - m.tp * m.pp for c in res.checked
                   if c.passed and (c.tp, c.pp) == (m.tp, m.pp))


def test_cli_capacity_writes_the_stages(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    out = tmp_path / "out"
    rc = cli_main(["capacity", str(scenario(tmp_path)), "--slo", "ttft_p99=1.0", "--tp", "1",
                   "--pp", "1,2", "--seeds", "1", "--tol", "0.2", "--target-rate", "20",
                   "--out", str(out), "--no-plots", "--quiet", "--workers", "1"])
    assert rc == 0
    cap = read_csv(out / "capacity.csv")
    assert [(r["tp"], r["pp"]) for r in cap] == [(1, 1), (1, 2)]
    configs = read_csv(out / "configs.csv")
    assert all(r["gpus"] == r["replicas"] * r["tp"] * r["pp"] for r in configs)
    assert {r["pp"] for r in read_csv(out / "search.csv")} == {1, 2}


def test_bad_pp_list_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["capacity", str(scenario(tmp_path)), "--slo", "ttft_p99=1.0", "--pp", "0,2",
                   "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "--pp 0,2" in err
