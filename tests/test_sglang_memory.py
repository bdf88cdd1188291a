"""SGLang's default mem_fraction_static (sim/cost/sglangmemory.py), worked by hand from
its two rules, and its use in sizing a silicon row's KV cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cost.gpus import GPUS
from sim.cost.presets import MODELS
from sim.cost.sglangmemory import (
    piecewise_graphs,
    sglang_chunk,
    sglang_static_fraction,
    summed_reserve,
)

H100_MIB = 85_045_477_376 / 2**20  # 81,105.6875 MiB, the memory an H100 reports
B200_MIB = 182_642.0
QWEN = MODELS["qwen3-32b"]
DEEPSEEK = MODELS["deepseek-v3"]


def frac(reserve_mib: float, mib: float = H100_MIB) -> float:
    return round((mib - reserve_mib) / mib, 3)


@pytest.mark.parametrize(("version", "summed"), [
    ("0.5.1.post1", False), ("0.5.2", False), ("0.5.3", True), ("0.5.8.post1", True),
    ("v0.4.10", False), ("nightly-dev-20250901-abcdef12", False),
    ("nightly-dev-20260216-d3bae71e", True), ("glm5-hopper", True), ("", True), (None, True)])
def test_which_rule_a_release_has(version: str | None, summed: bool) -> None:
    assert summed_reserve(version) is summed


def test_tiered_reserve_before_0_5_3() -> None:
    # (9.5 + tp/2) GiB on an 80 GB part: 10.5 GiB at tp 2, 13.5 at tp 8.
    h100 = GPUS["h100-sxm"]
    assert sglang_static_fraction("0.5.1.post1", h100, QWEN, 2) == frac(10.5 * 1024) == 0.867
    assert sglang_static_fraction("0.5.1.post1", h100, QWEN, 8) == frac(13.5 * 1024) == 0.83
    # (12 + tp/2) GiB under 160 GiB (H200), 32 GiB above (B200); a drafter 2 GiB more,
    # a standalone draft model 6, data-parallel attention 4.
    h200_mib = GPUS["h200"].mem_bytes / 2**20
    assert sglang_static_fraction("0.5.2", GPUS["h200"], QWEN, 4) == frac(14 * 1024, h200_mib)
    b200 = GPUS["b200"]
    assert sglang_static_fraction("0.5.2", b200, QWEN, 8) == frac(32 * 1024, B200_MIB)
    assert sglang_static_fraction("0.5.2", b200, QWEN, 8, speculative="eagle",
                                  dp=8) == frac(38 * 1024, B200_MIB)
    assert sglang_static_fraction("0.5.2", b200, QWEN, 8,
                                  speculative="ngram") == frac(34 * 1024, B200_MIB)
    assert sglang_static_fraction("0.5.2", b200, QWEN, 8,
                                  speculative="draft") == frac(38 * 1024, B200_MIB)


def test_summed_reserve_from_0_5_3() -> None:
    h100 = GPUS["h100-sxm"]
    # 512 + 1.5 x 8,192 chunk + 2 x 256 graph sequences + 1/8 GiB of tp 1 = 13,440 MiB.
    assert sglang_static_fraction("0.5.8.post1", h100, QWEN, 1) == frac(13_440) == 0.834
    # From 0.5.10 prefills are graphed piecewise: 58 graphs up to 8,192 tokens, 8 MiB each.
    assert sglang_static_fraction("0.5.14", h100, QWEN, 1) == frac(13_440 + 58 * 8) == 0.829
    # Under latent attention they stop at 2,048 tokens: 42 graphs.
    assert sglang_static_fraction("0.5.14", h100, DEEPSEEK, 1) == frac(13_440 + 42 * 8)
    # A small reserve on a GPU over 60 GiB is raised to 10 GiB.
    assert sglang_static_fraction("0.5.8", h100, QWEN, 1, chunk=2048,
                                  graph_bs=8) == frac(10 * 1024)
    # tp 8 on a B200, data-parallel attention over 8 ranks, 512 graph sequences:
    # 512 + 1.5 x 16,384 + 2 x 512 + 1 GiB + 3 x 512 x 8 + 1.5 x 512 x 8 = 45,568 MiB.
    assert sglang_static_fraction("0.5.9", GPUS["b200"], QWEN, 8,
                                  dp=8) == frac(45_568, B200_MIB) == 0.751
    # Drafting: 2 GiB (eagle, mtp), 6 GiB (a standalone draft model), none for n-grams.
    base = 13_440
    assert sglang_static_fraction("0.5.8", h100, QWEN, 1, speculative="mtp") == frac(base + 2048)
    assert sglang_static_fraction("0.5.8", h100, QWEN, 1, speculative="draft") == frac(base + 6144)
    assert sglang_static_fraction("0.5.8", h100, QWEN, 1, speculative="ngram") == frac(base)


def test_defaults_by_memory() -> None:
    assert [sglang_chunk(GPUS[g]) for g in ("l4", "l40s", "h100-sxm", "h200", "b200")] == [
        2048, 4096, 8192, 8192, 16384]
    assert [piecewise_graphs(n) for n in (4, 32, 2048, 8192, 16384)] == [1, 8, 42, 58, 74]


def test_an_sglang_row_without_a_recipe_takes_its_releases_fraction(tmp_path: Path) -> None:
    # Qwen3-32B on one H100 (61 GiB of weights): under SGLang 0.5.8 the weights and the
    # KV pool get 0.834 of the GPU, under 0.5.1 (tiered: 9.5 + 0.5 GiB) 0.874; both runs
    # are AIConfigurator's own, which pass no --mem-fraction-static.
    from conftest import silicon_csv

    from sim.cost.memory import memory_budget
    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrecipes import scenario_raw
    from sim.validate.siliconrows import read_rows

    rows = [f"{v},source_file=/aic/data/h100_sxm/sglang/{v}/q.csv,sglang,{v},Qwen/Qwen3-32B,"
            "h100_sxm,,agg,1000,128,8,1,1,,300,20" for v in ("0.5.8.post1", "0.5.1.post1")]
    blocks = []
    for row in read_rows(silicon_csv(tmp_path, rows)):
        c = classify(row)
        assert isinstance(c, Case)
        serving = scenario_raw(c)["serving"]
        b = memory_budget(QWEN, GPUS["h100-sxm"], 1, 0.9, 1, 8192, 2048)
        blocks.append((serving["num_gpu_blocks"], b))
    (new, b), (old, _) = blocks
    assert new == int((0.834 * b.total - b.weights) // b.block_bytes)
    assert old == int((frac(10 * 1024) * b.total - b.weights) // b.block_bytes)
    assert frac(10 * 1024) == 0.874


def sglang_scenario(**hardware: object) -> dict[str, object]:
    return {"name": "s", "model": "qwen3-32b",
            "hardware": {"gpu": "h100-sxm", "tp": 2, **hardware},
            "cost": {"measured": {"framework": "sglang"}},
            "workload": {"arrivals": {"process": "poisson", "rate": 1},
                         "lengths": {"prompt": {"dist": "fixed", "value": 100},
                                     "output": {"dist": "fixed", "value": 10}},
                         "num_requests": 5}}


def test_a_scenario_priced_by_sglangs_kernels_is_sized_as_sglang_sizes_memory() -> None:
    # Qwen3-32B on two H100s under SGLang 0.5.14 (the shipped profile's release): weights
    # and KV get 0.828 of each GPU (512 + 12,288 + 512 + 256 MiB, and 58 piecewise prefill
    # graphs at 8 MiB: 14,032 MiB), activations and graphs the rest; vLLM's terms are not
    # subtracted.
    from sim.config.disagg import pool_memory, pools
    from sim.config.scenario import from_dict

    sc = from_dict(sglang_scenario(), "<t>")
    (pool,) = pools(sc)
    assert pool.memory_utilization == frac(14_032) == 0.827
    b = pool_memory(sc.model, pool)
    assert (b.activation, b.non_torch, b.cuda_graph) == (0, 0, 0)
    assert b.kv == pytest.approx(0.827 * b.total - b.weights)
    assert "as SGLang 0.5.14 sizes it: mem_fraction_static 0.827 (its default)" in b.rules
    # Given, memory_utilization is read as SGLang's --mem-fraction-static.
    given = from_dict(sglang_scenario(memory_utilization=0.85), "<t>")
    (pool,) = pools(given)
    b = pool_memory(given.model, pool)
    assert b.kv == pytest.approx(0.85 * b.total - b.weights)
    assert "0.85 (hardware.memory_utilization)" in b.rules
    # Under vLLM's kernels the same scenario keeps vLLM's profile of memory.
    vllm = sglang_scenario()
    vllm["cost"] = {"measured": {"framework": "vllm"}}
    sv = from_dict(vllm, "<t>")
    (pool,) = pools(sv)
    b = pool_memory(sv.model, pool)
    assert pool.sglang is None and b.activation > 0 and b.non_torch > 0
