"""Query/key/value projections at a dtype of their own (``qkv_dtype``): NVIDIA's NVFP4
DeepSeek checkpoints keep attention's q_a, q_b, kv_a and kv_b in bf16 and quantise the
rest. Weight bytes, the roofline's linear terms and a measured profile's projections by
hand; the Hugging Face import; the public FP4 DeepSeek rows as InferenceX launched them;
and TensorRT-LLM's NVFP4 GEMM rows without the input quantisation they time (the fit
itself: tests/test_fp8_input_quant.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables, silicon_csv

from sim.cost.gpus import GPUS, dtype_note
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shard import shard
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify
from sim.validate.siliconrecipes import recipe, scenario_raw
from sim.validate.siliconrows import read_rows

V3 = MODELS["deepseek-v3"]
FP4 = dataclasses.replace(V3, dtype="nvfp4", kv_dtype="fp8")
SPLIT = dataclasses.replace(FP4, qkv_dtype="bf16")
# One DeepSeek-V3 layer's q_a (7168 x 1536), q_b (1536 x 128 heads x 192), kv_a
# (7168 x (512 + 64)) and kv_b (512 x 128 x (128 + 128)).
QKV = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
# On each of 8 GPUs: q_a and kv_a whole, q_b and kv_b for 16 heads.
QKV_TP8 = 7168 * 1536 + 7168 * 576 + 1536 * 16 * 192 + 512 * 16 * 256


def test_weight_bytes_count_the_qkv_projections_at_their_own_dtype() -> None:
    assert V3.qkv_params_per_layer == QKV == 69_664_768
    # bf16 (2 bytes) against NVFP4 (4.5 bits: 0.5625 bytes) for 61 layers' worth.
    assert SPLIT.weight_bytes - FP4.weight_bytes == pytest.approx(61 * QKV * 1.4375, abs=1)
    assert (shard(SPLIT, 8).weight_bytes - shard(FP4, 8).weight_bytes
            == pytest.approx(61 * QKV_TP8 * 1.4375, abs=1))
    # Naming the weights' own dtype changes nothing.
    same = dataclasses.replace(FP4, qkv_dtype="nvfp4")
    assert same.weight_bytes == FP4.weight_bytes
    # A dense model's fused QKV: all but the output projection.
    llama = MODELS["llama-3-8b"]
    assert llama.qkv_params_per_layer == 4096 * (32 + 2 * 8) * 128
    assert dataclasses.replace(llama, dtype="fp8", qkv_dtype="bf16").weight_bytes \
        - dataclasses.replace(llama, dtype="fp8").weight_bytes == 32 * 4096 * 48 * 128


def test_the_roofline_reads_and_multiplies_them_at_their_dtype() -> None:
    gpu, p = GPUS["b200"], RooflineParams()
    split, fp4 = RooflineCost(SPLIT, gpu, 8, p), RooflineCost(FP4, gpu, 8, p)
    bw = gpu.mem_bw * p.bandwidth_efficiency
    qkv = 61 * QKV_TP8
    assert split._lin_mem_s - fp4._lin_mem_s == pytest.approx(qkv * 1.4375 / bw, rel=1e-9)
    # Their FLOPs at bf16's peak, the rest at FP4's.
    bf16_s = 2 * qkv / (gpu.flops * p.flops_efficiency)
    fp4_s = 2 * qkv / (gpu.fp4_flops * p.fp8_flops_efficiency)
    assert split._lin_flop_s - fp4._lin_flop_s == pytest.approx(bf16_s - fp4_s, rel=1e-9)
    assert dtype_note(SPLIT, gpu).endswith(
        "bf16 query/key/value projections, fp8 KV cache")


@needs_tables
def test_a_profile_prices_them_from_their_own_gemm_rows() -> None:
    from sim.cost.tables.gemmtable import gemm_table, projection_gemms
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    ver = "1.3.0rc20"
    split = build_profile(BuildSpec(SPLIT, "b200", "trtllm", 8, version=ver))
    fp4 = build_profile(BuildSpec(FP4, "b200", "trtllm", 8, version=ver))
    bf16 = gemm_table("b200", "trtllm", ver, "bf16").table
    nvfp4 = projection_gemms("b200", "trtllm", ver, "nvfp4")[0].table
    # The rank's q_a/kv_a down-projection (n = 1536 + 512 + 64) and q_b (16 x 192 from
    # the 1536-wide query latent): bf16 rows in place of NVFP4 ones, in every layer.
    knots = split["components"]["linear"]["table_at"]
    assert knots == fp4["components"]["linear"]["table_at"]
    for m, a, b in zip(knots, split["components"]["linear"]["table_s"],
                       fp4["components"]["linear"]["table_s"], strict=True):
        want = sum(bf16.at(m, n, k) - nvfp4.at(m, n, k) for n, k in ((2112, 7168),
                                                                      (3072, 1536)))
        assert a - b == pytest.approx(want, abs=5e-6 * (a + b))  # knots keep 6 digits
    notes = split["source"]["notes"]
    assert any(n.startswith("query/key/value projections (q_a/kv_a, q_b, kv_b) at bf16, "
                            "from the bfloat16 GEMM rows") for n in notes)
    assert split["model"]["qkv_dtype"] == "bf16" and "qkv_dtype" not in fp4["model"]
    assert split["source"]["phrase"].endswith("bf16 query/key/value projections, fp8 KV cache")


def _hf(tmp_path: Path, exclude: list[str]) -> Path:
    root = Path(__file__).resolve().parents[1]
    cfg = json.loads((root / "sim/data/models/deepseek-v3/config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4",
                                  "kv_cache_quant_algo": "FP8", "group_size": 16,
                                  "exclude_modules": exclude}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hf_config_of_nvidias_nvfp4_deepseek_export(tmp_path: Path) -> None:
    from sim.cost.hfconfig import from_hf_config

    # nvidia--DeepSeek-V3.1-NVFP4's exclude list: the four input projections of every
    # layer, the MTP layer and the LM head.
    names = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj")
    spec = from_hf_config(_hf(tmp_path, ["lm_head", "model.layers.61*", *(
        f"model.layers.{i}.self_attn.{n}" for i in range(61) for n in names)]))
    # Its kv_cache_quant_algo FP8 is the cache vLLM's auto takes.
    assert (spec.dtype, spec.expert_dtype, spec.qkv_dtype, spec.kv_dtype) == (
        "nvfp4", "", "bf16", "fp8")
    assert spec.weight_bytes == SPLIT.weight_bytes
    # Leaving out one of the four is a subset servesim does not model.
    with pytest.raises(ServesimError, match=r"keeps 'model.layers.0.self_attn.q_a_proj' and "
                                            r"other single attention projections unquantised"):
        from_hf_config(_hf(tmp_path, [f"model.layers.0.self_attn.{n}" for n in names[:3]]))


ROW = ("x,source_file=2026-03-25.csv; model=DeepSeek-R1,{fw},1.2.0rc6.post2,"
       "deepseek-ai/DeepSeek-R1,b200_sxm,fp4,agg,{isl},1024,{conc},{tp},1,1,300,10,nvfp4")


def _case(tmp_path: Path, fw: str, isl: int = 1024, conc: int = 8, tp: int = 8) -> Case:
    line = ROW.format(fw=fw, isl=isl, conc=conc, tp=tp)
    case = classify(read_rows(silicon_csv(tmp_path, [line], ("gemm_quant_mode",)))[0])
    assert isinstance(case, Case)
    return case


def test_deepseek_fp4_rows_run_as_their_recipes_launched_them(tmp_path: Path) -> None:
    from sim.validate.siliconfit import group

    # DeepSeek-R1-0528-NVFP4-v2: NVFP4 but the QKV projections, an FP8 KV cache.
    trt = _case(tmp_path, "trtllm")
    assert (trt.dtype, trt.qkv_dtype, trt.kv_dtype, trt.expert_dtype) == (
        "nvfp4", "bf16", "fp8", "")
    assert (trt.spec.qkv_dtype, trt.spec.expert_dtype) == ("bf16", "")
    assert scenario_raw(trt)["model"] == {"preset": "deepseek-r1", "dtype": "nvfp4",
                                          "kv_dtype": "fp8", "qkv_dtype": "bf16"}
    assert group({"framework": "trtllm", "dtype": "nvfp4", "qkv_dtype": "bf16"}) == \
        "trtllm nvfp4 bf16-qkv"
    # dsr1_fp4_b200_trt.sh: TRTLLM MoE but CUTLASS from 256 clients at 1,024/1,024 and
    # above 32 at 8,192/1,024; free fraction 0.8, stream_interval 10, no batch waiting.
    backends = [_case(tmp_path, "trtllm", isl=isl, conc=conc).moe_backend
                for isl, conc in ((1024, 255), (1024, 256), (8192, 32), (8192, 33))]
    assert backends == ["trtllm-gen", "auto", "trtllm-gen", "auto"]
    assert recipe(_case(tmp_path, "trtllm", conc=64)) == {
        "max_num_batched_tokens": 8192, "free_fraction": 0.8, "stream_interval": 10}
    assert recipe(_case(tmp_path, "trtllm", isl=8192, conc=64))["max_num_batched_tokens"] \
        == 8320  # 64 + 8192 + 64, a multiple of 64
    # dsr1_fp4_b200.sh: 0.85 static, 16,384-token prefill chunks, 256 running, the
    # receive interval 30 from 16 clients and 10 below, stream interval 10.
    sgl = _case(tmp_path, "sglang", conc=16)
    assert recipe(sgl) == {"max_num_batched_tokens": 16384, "static_fraction": 0.85,
                           "scheduler_recv_interval": 30, "stream_interval": 10,
                           "max_running": 256}
    assert recipe(_case(tmp_path, "sglang", conc=8))["scheduler_recv_interval"] == 10
    # AIConfigurator's own FP4 runs name no checkpoint: still not simulated.
    aic = ROW.format(fw="trtllm", isl=1024, conc=8, tp=8).replace(
        "source_file=2026-03-25.csv; model=DeepSeek-R1", "aic")
    why = classify(read_rows(silicon_csv(tmp_path, [aic], ("gemm_quant_mode",)))[0])
    assert isinstance(why, str) and why.startswith("nvfp4 weights of a mixture of experts")


@needs_tables
def test_trtllm_gen_under_tensorrt_llm_reads_its_min_latency_rows() -> None:
    from sim.cost.tables.gemmtable import gemm_table, projection_gemms
    from sim.cost.tables.moetable import is_backend, moe_times

    # AIConfigurator's collector names the TRTLLM backend's min-latency rows so.
    assert is_backend("moe_torch_flow_min_latency", "trtllm-gen")
    assert not is_backend("moe_torch_flow_cutlass", "trtllm-gen")
    gen = moe_times("b200", "trtllm", "1.3.0rc20", FP4, 8, backend="trtllm-gen")
    own = moe_times("b200", "trtllm", "1.3.0rc20", FP4, 8)
    assert (gen.kernel, own.kernel) == ("moe_torch_flow_min_latency", "moe_torch_flow_cutlass")
    # NVFP4 projections less 11.1 us a call on B200, never below the fastest bf16 row.
    raw = gemm_table("b200", "trtllm", "1.3.0rc20", "nvfp4")
    got = projection_gemms("b200", "trtllm", "1.3.0rc20", "nvfp4")[0]
    assert got.input_quant_s == pytest.approx(11.1e-6, abs=0.05e-6)
    floor = float(gemm_table("b200", "trtllm", "1.3.0rc20", "bf16").table.cube.min())
    np.testing.assert_allclose(got.table.cube,
                               np.maximum(raw.table.cube - got.input_quant_s, floor))


def test_profile_build_takes_a_qkv_dtype_flag(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main

    out = tmp_path / "x.yaml"
    assert main(["profile", "build", "--gpu", "b200", "--model", "deepseek-v3",
                 "--qkv-dtype", "fp4", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--qkv-dtype: got 'fp4'; valid: bf16, fp16, fp8, fp8-block, mxfp4, nvfp4, int4" \
        in err and err.count("\n") == 1
    assert not out.exists()


def test_a_scenario_names_them_and_no_shipped_profile_claims_them() -> None:
    from sim.config.scenario import from_dict
    from sim.core.engine import build_cost

    raw = {"model": {"preset": "deepseek-v3", "dtype": "nvfp4", "qkv_dtype": "bf16",
                     "kv_dtype": "fp8"},
           "hardware": {"gpu": "b200", "tp": 8},
           "workload": {"concurrency": 4, "num_requests": 8,
                        "lengths": {"prompt": {"dist": "fixed", "value": 1024},
                                    "output": {"dist": "fixed", "value": 16}}}}
    assert ("; nvfp4 weights on FP4 tensor cores, bf16 query/key/value projections, fp8 KV "
            "cache;") in build_cost(from_dict(raw, "<t>")).source
    with pytest.raises(ServesimError, match="no measured profile for model deepseek-v3 with "
                                            "nvfp4 weights, bf16 query/key/value projections "
                                            "and KV cache fp8"):
        build_cost(from_dict({**raw, "cost": "measured"}, "<t>"))
    with pytest.raises(ServesimError, match=r"model.qkv_dtype: got 'fp4', expected one of"):
        from_dict({**raw, "model": {**raw["model"], "qkv_dtype": "fp4"}}, "<t>")
