"""summary.json says what was simulated: the ``simulated`` section."""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path
from typing import Any

from sim.cli import main as cli_main
from sim.config import scenario
from sim.core.engine import simulate
from sim.report.setup import scenario_digest, simulated

ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "scenarios" / "quickstart.yaml"


def test_the_section_gives_the_resolved_setup_and_the_overrides(tmp_path: Path) -> None:
    sets = ["workload.duration_s=20", "workload.seed=7", "cluster.replicas=2",
            "serving.max_num_seqs=64", "serving.policy=chunked", "serving.token_budget=512",
            "model={preset: llama-3-8b, max_context: 4096}", "hardware.gpu=h200"]
    args = [x for s in sets for x in ("--set", s)]
    # max_context 4096 rejects a few of the trace's requests: allowed here.
    assert cli_main(["simulate", str(QUICK), *args, "--out", str(tmp_path / "o"),
                     "--allow-rejections", "--quiet", "--no-plots"]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    got = summary["simulated"]
    assert got["file"] == str(QUICK) and got["overrides"] == sets
    assert got["sha256"] == summary["scenario_sha256"]
    assert got["seed"] == 7 and got["policy"] == "chunked"
    assert got["cost_source"] == summary["cost_source"]
    assert got["model"]["name"] == "llama-3-8b" and got["model"]["max_context"] == 4096
    assert (got["model"]["layers"], got["model"]["hidden"], got["model"]["heads"],
            got["model"]["kv_heads"], got["model"]["dtype"], got["model"]["kv_dtype"]) == (
        32, 4096, 32, 8, "bf16", "auto")
    pool = got["pools"]["both"]
    assert (pool["gpu"], pool["tp"], pool["replicas"]) == ("h200", 1, 2)
    assert (pool["max_num_seqs"], pool["max_num_batched_tokens"], pool["token_budget"],
            pool["block_size"]) == (64, 8192, 512, 16)
    assert pool["kv_blocks_per_replica"] == summary["kv"]["blocks_per_replica"]
    assert pool["kv_blocks_per_replica"][0] == summary["memory"]["both"]["kv_blocks"]
    # Overrides change the settings (and so the digest), not the digest's recipe.
    assert got["sha256"] == scenario_digest(scenario.load(QUICK, sets))
    assert got["sha256"] != scenario_digest(scenario.load(QUICK))


def test_no_overrides_is_an_empty_list_and_chunked_budget_is_resolved() -> None:
    sc = scenario.load(QUICK, None)
    assert sc.overrides == ()
    res = simulate(scenario.load(QUICK, ["workload.duration_s=5",
                                         "serving.max_num_batched_tokens=4096"]))
    pool = simulated(res)["pools"]["both"]
    assert pool["token_budget"] == 4096  # chunked's budget: max_num_batched_tokens, resolved
    assert pool["watermark"] == 0.0  # chunked keeps no admission watermark (vLLM v1)
    res = simulate(scenario.load(QUICK, ["workload.duration_s=5", "serving.policy=continuous"]))
    assert simulated(res)["pools"]["both"]["watermark"] == 0.01  # vLLM v0's default
    # continuous spends no token budget (one given is refused), and none is recorded.
    assert simulated(res)["pools"]["both"]["token_budget"] is None


def test_each_pool_of_a_disaggregated_cluster_is_listed() -> None:
    path = ROOT / "scenarios" / "policies-disaggregated.yaml"
    res = simulate(scenario.load(path, ["workload.duration_s=10",
                                        "disaggregated.decode.replicas=2",
                                        "disaggregated.decode.gpu=h200"]))
    got = simulated(res)
    assert got["policy"] == "disaggregated"
    assert list(got["pools"]) == ["prefill", "decode"]
    dec = got["pools"]["decode"]
    assert (dec["gpu"], dec["replicas"], len(dec["kv_blocks_per_replica"])) == ("h200", 2, 2)
    assert got["pools"]["prefill"]["replicas"] == 1


def test_version_falls_back_to_unknown(monkeypatch: Any) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    res = simulate(scenario.load(QUICK, ["workload.duration_s=5"]))
    assert simulated(res)["servesim_version"] == "unknown"


def test_features_beyond_plain_batching_are_said_only_when_set() -> None:
    """Speculative decoding, swap preemption, priority, admission limits and faults
    change what is simulated; the section and the report's setup table had left them
    out. A scenario without them has no such keys (the golden summary is unchanged)."""
    from sim.study.docparts import setup_table

    sets = ["workload.duration_s=5", "serving.preemption=swap", "serving.priority=true",
            "serving.speculative={method: eagle, num_tokens: 3, acceptance: {rate: 0.7}}",
            "admission.timeout_s=30",
            "faults={outages: [{replica: 0, at_s: 2, duration_s: 1}], on_failure: fail}"]
    got = describe(scenario.load(QUICK, sets))
    pool = got["pools"]["both"]
    assert pool["speculative"] == {"method": "eagle", "num_tokens": 3,
                                   "acceptance": {"rate": 0.7}}
    assert pool["preemption"] == "swap" and pool["priority"] is True
    assert "prefix_caching" not in pool and "kv_offload" not in pool
    assert got["admission"] == {"timeout_s": 30.0}
    assert got["faults"]["outages"] == [{"replica": 0, "at_s": 2.0, "duration_s": 1.0}]
    assert got["faults"]["on_failure"] == "fail" and got["faults"]["detection_s"] == 5.0
    rows = dict(setup_table(got)[1])
    assert rows["serving features"] == ("speculative method eagle, acceptance {rate 0.7}, "
                                        "num_tokens 3; preemption swap; priority")
    assert rows["admission"] == "timeout_s 30"
    plain = describe(scenario.load(QUICK, ["workload.duration_s=5"]))
    assert "admission" not in plain and "faults" not in plain
    assert not {"speculative", "preemption", "priority"} & set(plain["pools"]["both"])


def describe(sc: Any) -> dict[str, Any]:
    from sim.report.setup import describe_scenario

    return describe_scenario(sc, "x")
