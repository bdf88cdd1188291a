"""Which routing a measured MoE layer is read under: the model family's power law by
default (as the tables' publisher prices serving), the nearest measured one where a
collection lacks it, and any of them on request."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import needs_tables

from sim.cost.presets import MODELS
from sim.cost.tables.moetable import DISTRIBUTIONS, family_routing, routing_order
from sim.errors import ServesimError


def test_family_routing_is_deepseeks_mild_law_and_the_others_steeper() -> None:
    assert family_routing(MODELS["deepseek-v3"]) == "power_law_1.01"
    for name in ("gpt-oss-120b", "qwen3-30b-a3b", "mixtral-8x7b", "qwen3-235b-a22b"):
        assert family_routing(MODELS[name]) == "power_law_1.2", name


def test_routing_order_nearest_skew_first_less_skewed_on_a_tie() -> None:
    assert routing_order("balanced") == ["balanced", "power_law_1.01", "power_law_1.2"]
    assert routing_order("power_law_1.01") == ["power_law_1.01", "balanced", "power_law_1.2"]
    assert routing_order("power_law_1.2") == ["power_law_1.2", "power_law_1.01", "balanced"]
    assert sorted(routing_order("balanced")) == sorted(DISTRIBUTIONS)


def _raw_ms(gpu: str, version: str, distribution: str, tokens: int) -> float:
    """gpt-oss-120b's MoE layer at tp 1 in the installed table, read without servesim."""
    import aiconfigurator_core
    import pyarrow.parquet as pq

    root = os.path.join(os.path.dirname(aiconfigurator_core.__file__), "systems", "data")
    t = pq.read_table(os.path.join(root, gpu, "moe", "vllm", version,
                                   "moe_perf.parquet")).to_pandas()
    rows = t[(t.hidden_size == 2880) & (t.inter_size == 2880) & (t.num_experts == 128)
             & (t.topk == 4) & (t.moe_tp_size == 1) & (t.moe_ep_size == 1)
             & (t.distribution == distribution) & (t.num_tokens == tokens)
             & (t.moe_dtype == "w4a16_mxfp4")]
    return float(np.median(rows.latency))


@needs_tables
def test_default_reads_the_family_power_law_rows() -> None:
    from sim.cost.tables.moetable import moe_times

    m = MODELS["gpt-oss-120b"]
    auto = moe_times("h200", "vllm", "0.24.0", m, 1)
    even = moe_times("h200", "vllm", "0.24.0", m, 1, routing="balanced")
    assert "power_law_1.2 routing, tp 1" in auto.note
    assert "balanced routing, tp 1" in even.note
    for n in (32, 8192):
        assert float(auto.at([n])[0]) == pytest.approx(
            _raw_ms("h200_sxm", "0.24.0", "power_law_1.2", n) / 1e3, rel=1e-9)
        assert float(even.at([n])[0]) == pytest.approx(
            _raw_ms("h200_sxm", "0.24.0", "balanced", n) / 1e3, rel=1e-9)
    # Skewed routing: a small decode batch touches fewer experts (cheaper), a long
    # prefill waits on its busiest experts (dearer).
    assert auto.at([32])[0] < 0.7 * even.at([32])[0]
    assert auto.at([8192])[0] > 1.2 * even.at([8192])[0]


@needs_tables
def test_a_routing_the_collection_lacks_takes_the_nearest_and_says_so() -> None:
    from sim.cost.tables.moetable import moe_times

    t = moe_times("a100-80gb", "vllm", "0.14.0", MODELS["mixtral-8x7b"], 2, routing="balanced")
    assert "power_law_1.01 routing (balanced not measured here), tp 2" in t.note


@needs_tables
def test_unknown_routing_is_one_line() -> None:
    from sim.cost.tables.moetable import moe_times

    with pytest.raises(ServesimError, match=r"--routing.*unknown routing 'zipf'; valid: auto, "
                                            r"balanced, power_law_1.01, power_law_1.2"):
        moe_times("h200", "vllm", "0.24.0", MODELS["gpt-oss-120b"], 1, routing="zipf")


@needs_tables
def test_build_routing_flag_reaches_the_profile(tmp_path) -> None:
    from sim.cli import main

    out = tmp_path / "p.yaml"
    assert main(["profile", "build", "--gpu", "h200", "--model", "gpt-oss-20b",
                 "--routing", "balanced", "--out", str(out)]) == 0
    import yaml

    notes = yaml.safe_load(out.read_text())["source"]["notes"]
    assert any(n.startswith("MoE layer: ") and ", balanced routing, tp 1," in n
               for n in notes)


@needs_tables
@pytest.mark.parametrize("flag, value", [("--routing", "balanced"), ("--moe-backend", "triton")])
def test_an_expert_option_on_a_dense_model_is_refused(tmp_path, capsys, flag: str,
                                                      value: str) -> None:
    # A dense model has no MoE layer for the option to act on: one line, nothing written.
    from sim.cli import main

    out = tmp_path / "p.yaml"
    assert main(["profile", "build", "--gpu", "h200", "--model", "llama-3-8b", flag, value,
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{flag}: got '{value}', but llama-3-8b has no experts" in err
    assert err.count("\n") == 1 and not out.exists()


@needs_tables
def test_build_moe_backend_flag_reaches_the_profile(tmp_path) -> None:
    from sim.cli import main

    out = tmp_path / "p.yaml"
    assert main(["profile", "build", "--gpu", "b200", "--model", "minimax-m2.5", "--tp", "2",
                 "--dtype", "fp8-block", "--moe-backend", "triton", "--out", str(out)]) == 0
    import yaml

    notes = " ".join(yaml.safe_load(out.read_text())["source"]["notes"])
    assert "MoE layer: vllm_fused_moe" in notes and "the vllm 0.22.0 tables'" in notes
