"""FP8 weights and an FP8 KV cache: the bytes they take, how each cost model prices them
(FP8 tensor cores where the GPU has them, weight-only where it does not), the shipped
FP8 profiles, and every way a user gives the dtypes (scenario keys, vLLM flags, a
HuggingFace quantization_config, the profile builder's flags)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import needs_tables, silicon_csv

from sim.config.scenario import from_dict
from sim.core.engine import build_cost, simulate
from sim.cost.gpus import GPUS
from sim.cost.memory import kv_capacity_blocks, memory_budget, weight_bytes
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.cost.shard import shard
from sim.errors import ServesimError
from sim.report.setup import scenario_digest
from sim.report.summary import summarize

GIB = 2**30


def fp8(name: str, kv: str = "auto") -> object:
    return dataclasses.replace(MODELS[name], dtype="fp8", kv_dtype=kv)


def scenario(model: object = "llama-3.1-8b", gpu: str = "h100-sxm", cost: object = "roofline",
             **over: object) -> dict:
    raw = {"model": model, "hardware": {"gpu": gpu}, "cost": cost,
           "workload": {"arrivals": {"process": "poisson", "rate": 2.0}, "num_requests": 20,
                        "lengths": {"prompt": {"dist": "fixed", "value": 256},
                                    "output": {"dist": "fixed", "value": 8}}}}
    raw.update(over)
    return raw


def test_fp8_weights_load_the_bytes_vllm_reports() -> None:
    # vLLM's FP8 docs: Meta-Llama-3-8B-Instruct-FP8 "Loading model weights took 8.4596 GB"
    # (GiB). Projections 6,979,321,856 B at one byte; embedding and LM head
    # 2 x 525,336,576 elements, norms and the rotary table at two.
    m = fp8("llama-3-8b")
    assert weight_bytes(m, 1) / GIB == pytest.approx(8.4596, rel=2e-4)
    assert m.weight_bytes == 6_979_321_856 + 2 * 1_050_673_152
    # The bf16 model is what it was (docs/model.md: 14.96 GiB).
    assert weight_bytes(MODELS["llama-3-8b"], 1) / GIB == pytest.approx(14.96, abs=0.005)
    # Sharded: each GPU holds half the projections, at one byte.
    d = shard(m, 2)
    assert d.dtype_bytes == 1 and d.act_bytes == 2 and d.kv_bytes == 2
    assert d.weight_bytes < shard(MODELS["llama-3-8b"], 2).weight_bytes * 0.6


def test_the_kv_cache_dtype_sets_kv_bytes_and_capacity() -> None:
    bf16, w8, w8kv8 = MODELS["llama-3.1-70b"], fp8("llama-3.1-70b"), fp8("llama-3.1-70b", "fp8")
    # auto: FP8 weights keep a bf16 cache, 2 x 80 layers x 8 heads x 128 x 2 B a token.
    assert bf16.kv_bytes_per_token == w8.kv_bytes_per_token == 327_680
    assert w8kv8.kv_bytes_per_token == 163_840
    h100 = GPUS["h100-sxm"]
    b_bf16 = memory_budget(bf16, h100, 4, 0.9, 16, 8192, 256)
    b_w8 = memory_budget(w8, h100, 4, 0.9, 16, 8192, 256)
    b_kv8 = memory_budget(w8kv8, h100, 4, 0.9, 16, 8192, 256)
    assert b_w8.weights < b_bf16.weights and b_w8.blocks > b_bf16.blocks
    # The same memory, blocks of half the bytes: twice the blocks (to the block).
    assert b_kv8.block_bytes * 2 == b_w8.block_bytes
    assert b_kv8.blocks == b_kv8.kv // b_kv8.block_bytes and b_kv8.kv == b_w8.kv
    assert abs(b_kv8.blocks - 2 * b_w8.blocks) <= 1
    # 70B in FP8 fits one H100; in bf16 it does not.
    assert kv_capacity_blocks(w8, h100, 1, 0.9, 16) > 0
    with pytest.raises(ServesimError, match="does not fit"):
        kv_capacity_blocks(bf16, h100, 1, 0.9, 16)


def test_the_preset_and_scenario_keys() -> None:
    m = MODELS["llama-3.3-70b-fp8"]
    assert (m.dtype, m.kv_dtype, m.layers, m.max_context) == ("fp8", "auto", 80, 131072)
    sc = from_dict(scenario(model={"preset": "llama-3.1-8b", "dtype": "fp8-block",
                                   "kv_dtype": "fp8"}))
    assert (sc.model.dtype, sc.model.kv_dtype) == ("fp8-block", "fp8")
    with pytest.raises(ServesimError, match=r"model\.kv_dtype: got 'int8'"):
        from_dict(scenario(model={"preset": "llama-3.1-8b", "kv_dtype": "int8"}))
    # A 16-bit scenario's digest is what it was before kv_dtype existed; an FP8 cache's differs.
    plain, kv8 = from_dict(scenario()), from_dict(scenario(model={"preset": "llama-3.1-8b",
                                                                  "kv_dtype": "fp8"}))
    assert scenario_digest(plain) != scenario_digest(kv8)


def test_roofline_runs_fp8_projections_at_the_fp8_peak_or_weight_only() -> None:
    p = RooflineParams()
    long, decode = shape_of([(8192, 0)]), decode_shape(8, 8 * 512)
    h100 = {dt: RooflineCost(dataclasses.replace(MODELS["llama-3.1-8b"], dtype=dt),
                             GPUS["h100-sxm"], 1, p) for dt in ("bf16", "fp8")}
    a100 = {dt: RooflineCost(dataclasses.replace(MODELS["llama-3.1-8b"], dtype=dt),
                             GPUS["a100-80gb"], 1, p) for dt in ("bf16", "fp8")}
    floor = h100["bf16"]._lin_floor_s
    # A long prefill's projections are FLOP-bound: FP8 peak x its own efficiency.
    speed = (GPUS["h100-sxm"].fp8_flops * p.fp8_flops_efficiency
             / (GPUS["h100-sxm"].flops * p.flops_efficiency))
    assert (h100["bf16"].parts(long)["linear"] - floor) / (
        h100["fp8"].parts(long)["linear"] - floor) == pytest.approx(speed, rel=1e-9)
    assert h100["fp8"].step_time(long) < h100["bf16"].step_time(long) / 1.25
    # A100: no FP8 tensor cores, the same prefill FLOP time; decodes read half the bytes.
    assert a100["fp8"].parts(long)["linear"] == pytest.approx(a100["bf16"].parts(long)["linear"])
    assert a100["fp8"].parts(decode)["linear"] - floor == pytest.approx(
        (a100["bf16"].parts(decode)["linear"] - floor) / 2)
    assert a100["fp8"].parts(long)["lm_head"] == a100["bf16"].parts(long)["lm_head"]
    assert h100["fp8"].source.endswith("; fp8 weights")
    assert a100["fp8"].source.endswith("; fp8 weights, weight-only on a100-80gb (no FP8 "
                                       "tensor cores)")
    s = summarize(simulate(from_dict(scenario(model={"preset": "llama-3.1-8b", "dtype": "fp8"},
                                              gpu="a100-80gb"))))
    assert "weight-only on a100-80gb" in s["cost_source"]


def test_measured_fp8_profiles_ship_and_are_picked() -> None:
    from sim.cost.measured import find

    assert find(fp8("llama-3.1-8b"), "h100-sxm", 1, "vllm") == "h100-sxm-llama-3-8b-tp1-vllm-fp8"
    assert find(MODELS["llama-3.3-70b-fp8"], "h200", 1, "sglang") == \
        "h200-llama-3-70b-tp1-sglang-fp8"
    bf16 = build_cost(from_dict(scenario(cost="measured")))
    w8 = build_cost(from_dict(scenario(model={"preset": "llama-3.1-8b", "dtype": "fp8"},
                                       cost="measured")))
    assert w8.source == ("measured kernels: vLLM 0.24.0 on H100-SXM; fp8 weights; steps over "
                         "512 tokens without CUDA graphs; async scheduling")
    # The tables' FP8 GEMMs: a long prefill 1.3-1.5x faster than bf16, not 2x.
    ratio = bf16.step_time(shape_of([(8192, 0)])) / w8.step_time(shape_of([(8192, 0)]))
    assert 1.2 < ratio < 1.6
    with pytest.raises(ServesimError, match=r"no measured profile for llama-3.1-8b with fp8 "
                                            r"weights on a100-80gb: it has no FP8 tensor cores"):
        find(fp8("llama-3.1-8b"), "a100-80gb", 1, "vllm")
    with pytest.raises(ServesimError, match=r"llama-3.1-8b with fp8 weights and KV cache fp8: "
                                            r"FP8 profiles ship for llama-3-8b"):
        find(fp8("llama-3.1-8b", "fp8"), "h100-sxm", 1, "vllm")


def test_vllm_flags_set_the_dtypes() -> None:
    sc = from_dict(scenario(vllm={"quantization": "fp8", "kv-cache-dtype": "fp8_e4m3"}))
    assert (sc.model.dtype, sc.model.kv_dtype) == ("fp8", "fp8")
    with pytest.raises(ServesimError, match=r"vllm\.kv_cache_dtype: got 'int8'; servesim models "
                                            r"auto, fp8, fp8_e4m3, fp8_e5m2"):
        from_dict(scenario(vllm={"kv_cache_dtype": "int8"}))
    with pytest.raises(ServesimError, match=r"vllm\.quantization: sets model\.dtype, which the "
                                            r"scenario sets too"):
        from_dict(scenario(model={"preset": "llama-3.1-8b", "dtype": "bf16"},
                           vllm={"quantization": "fp8"}))


@pytest.mark.parametrize(("quant", "dtype"), [
    (None, "bf16"),
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}}, "fp8"),
    ({"quant_method": "modelopt", "quant_algo": "FP8"}, "fp8"),
])
def test_hf_quantization_config_sets_the_weights_dtype(tmp_path: Path, quant: object,
                                                        dtype: str) -> None:
    from sim.cost.hfconfig import from_hf_config

    cfg = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
           "vocab_size": 128256, "torch_dtype": "bfloat16", "max_position_embeddings": 8192}
    if quant is not None:
        cfg["quantization_config"] = quant
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert from_hf_config(tmp_path / "config.json").dtype == dtype


def test_hf_quantisation_not_modelled_is_named(tmp_path: Path) -> None:
    from sim.cost.hfconfig import from_hf_config

    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100,
        "quantization_config": {"quant_method": "bitsandbytes"}}))
    with pytest.raises(ServesimError, match=r"config\.json: quantization_config\.quant_method: "
                                            r"quantisation 'bitsandbytes' is not modelled"):
        from_hf_config(tmp_path / "config.json")


def test_silicon_fp8_rows_are_simulated_and_always_held_out(tmp_path: Path) -> None:
    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrecipes import scenario_raw
    from sim.validate.siliconrows import read_rows

    rows = ["a,x,vllm,,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,1024,128,8,2,1,,90,20,fp8",
            "b,x,sglang,0.5,meta-llama/Llama-3.1-8B-Instruct,h200_sxm,fp8,agg,1024,128,8,1,1,,"
            "30,5,fp8_block",
            "c,x,vllm,,meta-llama/Llama-3.1-70B,b200_sxm,fp4,agg,1024,128,8,2,1,,90,20,nvfp4"]
    path = silicon_csv(tmp_path, rows, ("gemm_quant_mode",))
    a, b, c = (classify(r) for r in read_rows(path))
    assert isinstance(a, Case) and isinstance(b, Case)
    assert (a.dtype, b.dtype) == ("fp8", "fp8-block") and a.held_out and b.held_out
    assert scenario_raw(a)["model"] == {"preset": "llama-3.1-70b", "dtype": "fp8"}
    # A dense model's NVFP4 row runs at nvfp4 (tests/test_fp4_measured.py).
    assert isinstance(c, Case) and c.dtype == "nvfp4" and c.held_out


def test_calibrate_refuses_fp8_in_one_line() -> None:
    pytest.importorskip("torch")
    from calibrate.executor import check_timeable

    check_timeable(MODELS["tiny"])
    with pytest.raises(ServesimError, match=r"model\.dtype: calibrate times bf16, fp16 and "
                                            r"fp32 models.*servesim profile build --dtype fp8"):
        check_timeable(fp8("llama-3-8b"))  # type: ignore[arg-type]


@needs_tables
def test_profile_build_flags_and_a_shipped_fp8_rebuild(tmp_path: Path) -> None:
    from sim.cli import main
    from sim.cost.profilefile import PROFILE_DIR, load_profile
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile, profile_name

    spec = BuildSpec(fp8("llama-3-70b"), "h200", "vllm", 2)  # type: ignore[arg-type]
    name = profile_name(spec)
    assert name == "h200-llama-3-70b-tp2-vllm-fp8"
    shipped = (PROFILE_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert profile_text(build_profile(spec)) == shipped
    out = tmp_path / "p.yaml"
    assert main(["profile", "build", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                 "--dtype", "fp8", "--kv-dtype", "fp8", "--out", str(out)]) == 0
    cost = load_profile(str(out))
    assert cost.model.kv_dtype == "fp8" and cost.dtype == "fp8"
    assert cost.source == "measured kernels: vLLM 0.24.0 on H100-SXM; fp8 weights, fp8 KV cache"
    assert main(["profile", "build", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                 "--dtype", "int4", "--out", str(out)]) == 2


def test_set_model_keys_on_a_preset_keep_the_preset(tmp_path: Path) -> None:
    """`--set model.dtype=fp8` on `model: llama-3.1-8b` sets the preset's dtype (it used to
    replace the preset by a mapping with no dimensions: "model.layers: required key")."""
    from sim.config.scenario import load

    path = tmp_path / "s.yaml"
    path.write_text("model: llama-3.1-8b\nhardware: {gpu: h100-sxm}\nworkload:\n"
                    "  arrivals: {process: poisson, rate: 1.0}\n  num_requests: 2\n"
                    "  lengths: {prompt: {dist: fixed, value: 8}, output: {dist: fixed, "
                    "value: 2}}\n")
    sc = load(path, ["model.dtype=fp8", "model.kv_dtype=fp8"])
    assert sc.model == fp8("llama-3.1-8b", "fp8")
    with pytest.raises(ServesimError, match=r"s\.yaml: model\.kv_dtype: got 'int8', expected "
                                            r"one of 'auto', 'fp8'"):
        load(path, ["model.kv_dtype=int8"])
