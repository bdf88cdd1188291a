"""Expert parallelism (hardware.ep, vLLM's --enable-expert-parallel): sharding, memory,
the roofline's decode step worked by hand, configuration errors, measured profiles."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from sim.config.scenario import from_dict
from sim.cost.gpus import GPUS
from sim.cost.memory import activation_bytes, memory_budget, weight_bytes
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape, decode_shape
from sim.cost.shard import expert_shard, shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

Q235 = MODELS["qwen3-235b-a22b"]
# A small MoE model whose terms are easy to work by hand.
TOY = ModelSpec(name="toy", layers=2, hidden=1024, heads=8, kv_heads=8, head_dim=128,
                intermediate=512, vocab=4096, experts=8, experts_per_token=2,
                expert_intermediate=512)


def _raw(**hardware: Any) -> dict[str, Any]:
    return {"model": "qwen3-235b-a22b", "hardware": {"gpu": "h200", "tp": 8, **hardware},
            "cost": "roofline",
            "workload": {"concurrency": 1, "num_requests": 1,
                         "lengths": {"prompt": {"dist": "fixed", "value": 16},
                                     "output": {"dist": "fixed", "value": 2}}}}


def test_expert_shard_deals_out_whole_experts() -> None:
    d = shard(Q235, 8, ep=8)
    assert (d.experts, d.expert_intermediate, d.ep) == (16, 1536, 8)
    # Attention is split as under tp; the router is whole on every GPU.
    t = shard(Q235, 8)
    assert (d.heads, d.kv_heads, d.vocab) == (t.heads, t.kv_heads, t.vocab) == (8, 1, 18992)
    # 16 whole experts of 3·4096·1536 weights = 128 slices of 3·4096·192: the same bytes.
    assert d.stack_params == t.stack_params
    assert d.params == t.params == 29_479_784_448
    assert weight_bytes(Q235, 8, 8) == weight_bytes(Q235, 8)


def test_shared_experts_stay_tensor_parallel() -> None:
    spec = dataclasses.replace(TOY, shared_experts=1)
    d, t = expert_shard(spec, 2, 2), shard(spec, 2)
    assert d.shared_expert_params == t.expert_params == 3 * 1024 * 256
    assert d.expert_params == 3 * 1024 * 512  # routed: whole
    assert d.stack_params == t.stack_params


def test_activation_peak_holds_whole_experts_intermediates() -> None:
    # Layers' peak, 8192 tokens, bf16: T·2·(3h + 3·k·I) with I the whole width under ep
    # (8·1536 = 12288) against the tp slice (8·192 = 1536).
    assert activation_bytes(Q235, 8, 8192, 256, sampler=False, ep=8) == \
        8192 * 2 * (3 * 4096 + 3 * 12288) == 805_306_368
    assert activation_bytes(Q235, 8, 8192, 256, sampler=False) == \
        8192 * 2 * (3 * 4096 + 3 * 1536) == 276_824_064


def test_model_that_does_not_fit_names_ep() -> None:
    b = memory_budget(MODELS["qwen3-235b-a22b"], GPUS["h100-sxm"], 4, 0.9, 16, 8192, 1024,
                      ep=4)
    with pytest.raises(ServesimError, match=r"tp=4 and ep=4: per GPU 79.\d\d GiB"):
        b.fitted()


def test_roofline_decode_step_by_hand() -> None:
    """One decode step of 4 sequences (1,000 cached tokens each) of TOY on 2 H200s,
    experts dealt out over ep = 2: every term from the datasheet and the defaults."""
    p = RooflineParams()
    ep = RooflineCost(TOY, GPUS["h200"], 2, p, ep=2)
    shape = decode_shape(4, 4000)
    flops, moe_flops, bw = 989e12 * 0.686, 989e12 * 0.398, 4.8e12 * 0.815
    always = 2 * (1024 * (4 + 8) * 128 + 4 * 128 * 1024)  # QKV + output, 4 heads a GPU
    router = 2 * 1024 * 8
    routed = 2 * 2 * (3 * 1024 * 512) / 2  # k whole experts a token, half of them here
    flop_s = 2 * always / flops + 2 * router / flops + 2 * routed / moe_flops
    mem_s = (always * 2 + router * 2) / bw
    experts_s = 2 * 4 * (3 * 1024 * 512) * 2 / bw  # 4 whole experts a layer a GPU
    touched = 1 - (1 - 2 / 8) ** 4  # share of a GPU's experts 4 tokens touch
    kernels = 2 * 2 + 2 * 6  # QKV and output GEMMs, and the MoE kernels, a layer
    linear = max(flop_s * 4, mem_s + experts_s * touched) + kernels * p.kernel_floor_s
    parts = ep.parts(shape)
    assert parts["linear"] == pytest.approx(linear, rel=1e-12)
    assert touched == pytest.approx(0.68359375)
    # vLLM with one data-parallel rank: no all-to-all, the all-reduces of tp remain.
    link_bw, link_s = 450e9, 8e-6
    allreduce = 2 * 2 * link_s + 2 * 2 * 2 * (2 - 1) / 2 * 1024 * 2 / link_bw * 4
    assert parts["allreduce"] == pytest.approx(allreduce, rel=1e-12)
    # Balanced routing: the same FLOPs and bytes as slicing every expert over tp.
    tp = RooflineCost(TOY, GPUS["h200"], 2, p).parts(shape)
    assert parts == pytest.approx(tp, rel=1e-12)
    assert "expert parallelism ep=2" in ep.source


def test_imbalance_scales_the_busiest_gpus_expert_flops() -> None:
    p = RooflineParams()
    shape = StepShape(1, 8192, 0, 1, 8192, 8192 * 8193 // 2, 0)  # FLOP-bound prefill
    even = RooflineCost(TOY, GPUS["h200"], 2, p, ep=2).parts(shape)["linear"]
    skew = RooflineCost(TOY, GPUS["h200"], 2, p, ep=2, ep_imbalance=1.5).parts(shape)["linear"]
    routed = 2 * 2 * (3 * 1024 * 512) / 2
    moe_flops = 989e12 * 0.398
    assert skew - even == pytest.approx(2 * routed * 0.5 / moe_flops * 8192, rel=1e-9)


@pytest.mark.parametrize(("hardware", "model", "where", "text"), [
    ({"ep": 4}, "qwen3-235b-a22b", "hardware.ep", "ep must be 1 or tp (8)"),
    ({"ep": 8}, "llama-3-70b", "hardware.ep", "model llama-3-70b is dense"),
    ({"tp": 4, "ep": 4}, "mixtral-8x7b", "hardware.ep", None),
    ({"ep_imbalance": 0.9}, "qwen3-235b-a22b", "hardware.ep_imbalance", "at least 1"),
    ({"ep": 1, "ep_imbalance": 3}, "qwen3-235b-a22b", "hardware.ep_imbalance",
     "got 3: the busiest GPU's share of routed tokens applies under expert parallelism"),
])
def test_bad_ep_is_one_line(hardware: dict[str, Any], model: str, where: str,
                            text: str | None) -> None:
    raw = _raw(**hardware)
    raw["model"] = model
    if text is None:  # Mixtral's 8 experts split over 4: allowed; over 16 GPUs they would not
        assert from_dict(raw).hardware.ep == 4
        return
    with pytest.raises(ServesimError) as exc:
        from_dict(raw, "s.yaml")
    assert exc.value.where == where and text in exc.value.message
    assert "\n" not in str(exc.value)


def test_ep_that_does_not_divide_the_experts() -> None:
    spec = dataclasses.replace(TOY, experts=6, experts_per_token=2)
    with pytest.raises(ServesimError, match="does not divide the model's 6 experts") as exc:
        shard(spec, 4, ep=4, ep_where="hardware.ep")
    assert exc.value.where == "hardware.ep"


def test_vllm_flag_sets_ep_to_tp() -> None:
    raw = _raw()
    del raw["hardware"]["tp"]
    raw["vllm"] = {"tensor-parallel-size": 8, "enable-expert-parallel": True}
    assert from_dict(raw).hardware.ep == 8
    # With several data-parallel ranks the experts spread over all their GPUs, and the
    # ranks are one replica's (data-parallel attention), not copies.
    raw["vllm"] = {"tensor-parallel-size": 2, "enable-expert-parallel": True,
                   "data-parallel-size": 4}
    hw = from_dict(raw).hardware
    assert (hw.tp, hw.dp, hw.ep) == (2, 4, 8)
    assert from_dict(raw).cluster.replicas == 1
    raw["vllm"] = {"tensor-parallel-size": 8, "data-parallel-size": 2}
    sc = from_dict(raw)
    assert (sc.hardware.dp, sc.hardware.ep, sc.cluster.replicas) == (1, 1, 2)


def test_disaggregated_with_ep_is_refused() -> None:
    raw = _raw(ep=8)
    raw["serving"] = {"policy": "disaggregated"}
    with pytest.raises(ServesimError, match="co-located replicas") as exc:
        from_dict(raw)
    assert exc.value.where == "hardware.ep"


def test_measured_picks_the_ep_profile_and_lists_others() -> None:
    from sim.cost.measured import find
    from sim.cost.models import build_cost, unwrapped

    assert find(Q235, "h200", 8, "vllm", 8) == "h200-qwen3-235b-a22b-tp8-ep8-vllm"
    assert find(Q235, "h200", 8, "vllm") == "h200-qwen3-235b-a22b-tp8-vllm"
    raw = _raw(ep=8)
    raw["cost"] = "measured"
    cost = build_cost(from_dict(raw))
    assert unwrapped(cost).meta["ep"] == 8  # the profile, under async scheduling's overlap
    assert cost.source.endswith("expert parallelism ep=8; steps over 512 tokens without CUDA "
                                "graphs; async scheduling")
    raw["hardware"].update(tp=4, ep=4)
    with pytest.raises(ServesimError, match="shipped with expert parallelism there: vllm tp 1 "
                                            "dp 8 ep 8, vllm tp 8 ep 8"):
        from_dict(raw)


def test_ep_moe_rows_are_the_tables_expert_parallel_ones() -> None:
    from sim.cost.tables.moetable import moe_times

    fp8 = MODELS["qwen3-235b-a22b-fp8"]
    one = moe_times("h200", "vllm", "0.24.0", fp8, 1, routing="balanced")
    ep8 = moe_times("h200", "vllm", "0.24.0", fp8, 8, 8, routing="balanced")
    assert "tp 1, expert parallelism 8" in ep8.note
    # 16 of 128 experts a GPU: a long step's expert work is several times smaller.
    ratio = float(one.at([8192])[0] / ep8.at([8192])[0])
    assert 4 < ratio <= 8
    # Under the skewed routing profiles read, the busiest GPU's experts get more than an
    # eighth of the tokens, so expert parallelism saves less.
    skew = float(moe_times("h200", "vllm", "0.24.0", fp8, 1).at([8192])[0]
                 / moe_times("h200", "vllm", "0.24.0", fp8, 8, 8).at([8192])[0])
    assert 1 < skew < ratio


def test_shipped_ep_profile_equals_a_rebuild() -> None:
    from sim.cost.profilefile import PROFILE_DIR
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    spec = BuildSpec(Q235, "h200", "vllm", 8, ep=8)
    text = profile_text(build_profile(spec))
    assert "\nep: 8\n" in text
    assert (PROFILE_DIR / "h200-qwen3-235b-a22b-tp8-ep8-vllm.yaml").read_text() == text
