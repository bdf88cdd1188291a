"""Mixture-of-experts models: their sizes against the model cards, the layouts refused,
how the roofline reads only the experts a step touches, the measured MoE profiles, and
the public end-to-end rows they stand for."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import needs_tables, silicon_csv

from sim.config.scenario import from_dict
from sim.core.engine import build_cost, simulate
from sim.cost.gpus import GPUS
from sim.cost.models import unwrapped
from sim.cost.presets import MODELS
from sim.cost.roofline import MOE_KERNELS, RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.report.summary import summarize


@pytest.mark.parametrize(("name", "total", "active", "kv_per_token"), [
    # Model cards: Mixtral-8x7B 46.7B parameters, 12.9B used per token; Qwen3-30B-A3B
    # 30.5B / 3.3B; Qwen3-235B-A22B 235B / 22B. KV: 2 x layers x KV heads x 128 x 2 B.
    ("mixtral-8x7b", 46.7e9, 12.9e9, 2 * 32 * 8 * 128 * 2),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 2 * 48 * 4 * 128 * 2),
    ("qwen3-235b-a22b", 235e9, 22e9, 2 * 94 * 4 * 128 * 2),
])
def test_moe_presets_match_their_model_cards(name: str, total: float, active: float,
                                             kv_per_token: int) -> None:
    m = MODELS[name]
    assert m.params == pytest.approx(total, rel=0.01)
    assert m.active_params == pytest.approx(active, rel=0.02)
    assert m.weight_bytes == 2 * m.params and m.kv_bytes_per_token == kv_per_token
    # Sharded over 2 GPUs: each holds half of every expert, the routers whole.
    d = shard(m, 2)
    assert d.expert_intermediate * 2 == m.expert_intermediate
    assert d.params == pytest.approx(m.params / 2, rel=0.01)


def test_fp8_moe_preset_quantises_the_experts() -> None:
    m = MODELS["qwen3-235b-a22b-fp8"]
    assert m.dtype == "fp8-block" and m.stack_params == MODELS["qwen3-235b-a22b"].stack_params
    # Projections and experts at one byte, routers and embeddings at two.
    assert m.weight_bytes == m.stack_params + 2 * (m.params - m.stack_params)
    assert m.weight_bytes / 1e9 == pytest.approx(236.4, rel=0.01)


@pytest.mark.parametrize(("change", "match"), [
    ({"experts_per_token": 9}, r"experts_per_token: got 9, must be 1 to experts \(8\)"),
    ({"expert_intermediate": 0}, "expert_intermediate: required for a mixture-of-experts"),
    ({"dense_layers": 32}, r"dense_layers: got 32, must be below layers \(32\)"),
    ({"experts": 0}, r"experts_per_token: got 2 for a dense model \(experts is 0\)"),
])
def test_moe_fields_are_checked(change: dict, match: str) -> None:
    with pytest.raises(ServesimError, match=match):
        dataclasses.replace(MODELS["mixtral-8x7b"], **change)


def test_an_expert_width_that_does_not_split_is_refused() -> None:
    m = dataclasses.replace(MODELS["qwen3-30b-a3b"], expert_intermediate=100)
    with pytest.raises(ServesimError, match=r"tp: the model's expert width "
                                            r"expert_intermediate=100 does not split over tp=8"):
        shard(m, 8)
    # The dense width of a model with no dense layer is never used: not checked.
    shard(dataclasses.replace(MODELS["qwen3-30b-a3b"], intermediate=6001), 8)


def test_roofline_reads_the_experts_a_step_touches() -> None:
    m, g, p = MODELS["qwen3-30b-a3b"], GPUS["h100-sxm"], RooflineParams()
    cost = RooflineCost(m, g, 1, p)
    bw = g.mem_bw * p.bandwidth_efficiency
    always = m.layers * m.attention_params_per_layer  # no dense layer, no shared expert
    router = m.layers * m.hidden * m.experts
    experts = m.layers * m.experts * m.expert_params
    floor = m.layers * (2 + MOE_KERNELS) * p.kernel_floor_s
    # One decode: its 8 of 128 experts in each layer, by hand.
    one = cost.parts(decode_shape(1, 100))["linear"]
    assert one == pytest.approx((always * 2 + router * 2 + experts * 2 * 8 / 128) / bw + floor)
    # 16 tokens touch 128·(1 - (120/128)^16) = 82.4 experts a layer on average.
    sixteen = cost.parts(decode_shape(16, 1600))["linear"]
    touched = 128 * (1 - (120 / 128) ** 16)
    assert touched == pytest.approx(82.42, abs=0.01)
    assert sixteen == pytest.approx(
        (always * 2 + router * 2 + experts * 2 * touched / 128) / bw + floor)
    # A long prefill reads every expert and is FLOP-bound on the 8 a token uses, whose
    # grouped GEMMs run at their own (fitted) efficiency.
    long = cost.parts(shape_of([(8192, 0)]))["linear"]
    flops, moe_flops = g.flops * p.flops_efficiency, g.flops * p.moe_flops_efficiency
    routed = m.layers * 8 * m.expert_params
    assert long == pytest.approx(2 * 8192 * ((always + router) / flops + routed / moe_flops)
                                 + floor)
    # A dense model of the same active size is priced as before: no expert term.
    assert RooflineCost(MODELS["llama-3-8b"], g, 1, p)._moe_q is None


def test_measured_moe_profiles_ship_and_the_roofline_follows_them() -> None:
    sc = from_dict({"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm"},
                    "cost": "measured",
                    "workload": {"arrivals": {"process": "poisson", "rate": 4.0},
                                 "num_requests": 40,
                                 "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                             "output": {"dist": "fixed", "value": 32}}}})
    cost = unwrapped(build_cost(sc))  # the profile itself, without the overlap and floor
    assert cost.source == "measured kernels: vLLM 0.24.0 on H100-SXM"
    assert summarize(simulate(sc))["requests"]["finished"] == 40
    # Decode steps: the fitted roofline within 15% of the MoE tables' prices
    # (docs/models.md: 5.70 / 5.53, 14.61 / 13.26, 28.34 / 29.33 ms at 1, 8, 64 entries).
    roof = RooflineCost(sc.model, GPUS["h100-sxm"], 1, RooflineParams())
    for b in (1, 8, 64):
        shape = decode_shape(b, b * 1024)
        assert roof.step_time(shape) == pytest.approx(cost.step_time(shape), rel=0.15), b


@needs_tables
def test_moe_shapes_the_tables_did_not_measure_are_named(tmp_path: Path) -> None:
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    odd = dataclasses.replace(MODELS["qwen3-30b-a3b"], experts=64, name="odd")
    with pytest.raises(ServesimError, match=r"moe_perf\.parquet: no MoE rows for hidden 2048, "
                                            r"expert width 768, 8 of 64 experts; measured "
                                            r"\(hidden, width, top-k, experts\): .*\(2048, 768, "
                                            r"8, 128\)"):
        build_profile(BuildSpec(odd, "h100-sxm", "vllm", 1))


def test_silicon_moe_rows_split_by_tp_are_simulated_others_named(tmp_path: Path) -> None:
    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrows import read_rows

    path = silicon_csv(tmp_path, [
        "a,x,vllm,0.12.0,Qwen/Qwen3-235B-A22B-FP8,h200_sxm,fp8,agg,1000,100,8,4,1,,90,20,fp8,4,1",
        "b,x,trtllm,1.0,Qwen/Qwen3-235B-A22B-FP8,h100_sxm,fp8,agg,1000,100,8,8,1,,90,20,"
        "fp8_block,1,8",
        "c,x,trtllm,1.0,Qwen/Qwen3-235B-A22B-FP8,h100_sxm,fp8,agg,1000,100,8,4,1,,90,20,"
        "fp8_block,2,2"], ("gemm_quant_mode", "moe_tp_size", "moe_ep_size"))
    a, b, c = (classify(r) for r in read_rows(path))
    # Labelled fp8, but Qwen's checkpoint is block-scaled: simulated as such.
    assert isinstance(a, Case) and (a.model, a.dtype, a.spec.experts, a.ep) == (
        "qwen3-235b-a22b", "fp8-block", 128, 1)
    # Experts dealt out whole over the tp GPUs: expert parallelism, ep = tp.
    assert isinstance(b, Case) and b.ep == 8
    assert c == ("experts split other than by tensor parallelism or by expert parallelism "
                 "over the tp GPUs (tp 4, expert tp 2, expert parallelism 2)")


def test_moe_model_from_a_scenario_mapping() -> None:
    sc = from_dict({"model": {"preset": "llama-3-8b", "experts": 4, "experts_per_token": 2,
                              "expert_intermediate": 7168},
                    "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                                 "num_requests": 5,
                                 "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                             "output": {"dist": "fixed", "value": 4}}}})
    assert isinstance(sc.model, ModelSpec) and sc.model.moe and sc.model.moe_layers == 32
    s = summarize(simulate(sc))
    assert s["requests"]["finished"] == 5
    assert s["simulated"]["model"]["experts"] == 4
    assert "experts" not in summarize(simulate(from_dict({**sc_raw_dense()}))) \
        ["simulated"]["model"]


def sc_raw_dense() -> dict:
    return {"model": "llama-3-8b",
            "workload": {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 2,
                         "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                     "output": {"dist": "fixed", "value": 4}}}}


def test_calibrate_times_moe_models() -> None:
    # calibrate's torch model has a MoE layer (tests/test_calibrate_moe.py): no refusal.
    pytest.importorskip("torch")
    from calibrate.executor import check_timeable

    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "tiny-moe"):
        check_timeable(MODELS[name])
        check_timeable(MODELS[name], "cpu")
