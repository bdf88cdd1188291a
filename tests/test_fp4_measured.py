"""NVFP4 projections priced from the kernel tables: the builder reads the tables' nvfp4
GEMM rows where the GPU has FP4 tensor cores and refuses elsewhere in one line, the
shipped NVFP4 profiles are picked by ``cost: measured``, and the public end-to-end rows of
dense FP4 checkpoints are simulated (those of a mixture of experts keep a reason)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import needs_tables, silicon_csv

from sim.config.scenario import from_dict
from sim.core.engine import build_cost
from sim.cost.presets import MODELS
from sim.cost.shape import decode_shape, shape_of
from sim.errors import ServesimError


def fp4(name: str, kv: str = "auto") -> object:
    return dataclasses.replace(MODELS[name], dtype="nvfp4", kv_dtype=kv)


def _scenario(model: object, gpu: str = "b200") -> dict:
    return {"model": model, "hardware": {"gpu": gpu, "tp": 2}, "cost": "measured",
            "workload": {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 4,
                         "lengths": {"prompt": {"dist": "fixed", "value": 256},
                                     "output": {"dist": "fixed", "value": 8}}}}


def test_shipped_nvfp4_profiles_are_picked_and_faster_than_fp8() -> None:
    from sim.cost.measured import find

    assert find(fp4("llama-3.1-70b"), "b200", 2, "vllm") == "b200-llama-3-70b-tp2-vllm-nvfp4"  # type: ignore[arg-type]
    assert find(fp4("qwen3-32b"), "b200", 1, "sglang") == "b200-qwen3-32b-tp1-sglang-nvfp4"  # type: ignore[arg-type]
    w4 = build_cost(from_dict(_scenario({"preset": "llama-3.1-70b", "dtype": "nvfp4"})))
    w8 = build_cost(from_dict(_scenario({"preset": "llama-3.1-70b", "dtype": "fp8"})))
    assert w4.source == ("measured kernels: vLLM 0.24.0 on B200-SXM; nvfp4 weights on FP4 "
                         "tensor cores; steps over 512 tokens without CUDA graphs; async "
                         "scheduling")
    # A light decode step reads the projections' weights: NVFP4 holds 0.56 of FP8's
    # bytes, but the tables' small-batch FP4 kernel runs further below the bandwidth (6.5
    # against 8.7 ms of projections a step on two B200s), so the step is about 1.25x
    # faster, alike at one and at eight sequences (vLLM's FP8 rows time 1-16 tokens on
    # one grid: sim.cost.tables.gemmtable.ONE_GRID). A long prefill runs on FP4 tensor
    # cores, faster than FP8 but not twice as fast.
    light, eight = decode_shape(1, 1024), decode_shape(8, 1024)
    one = w8.step_time(light) / w4.step_time(light)
    assert 1.15 < one < 1.6
    assert w8.step_time(eight) / w4.step_time(eight) == pytest.approx(one, rel=0.1)
    long = shape_of([(8192, 0)])
    assert 1.2 < w8.step_time(long) / w4.step_time(long) < 2.0


def test_nvfp4_without_fp4_tensor_cores_is_one_line() -> None:
    from sim.cost.measured import find

    with pytest.raises(ServesimError, match=r"no measured profile for llama-3.1-70b with nvfp4 "
                                            r"weights on h200: it has no FP4 tensor cores and "
                                            r"the tables time no FP4 GEMM there"):
        find(fp4("llama-3.1-70b"), "h200", 2, "vllm")  # type: ignore[arg-type]
    with pytest.raises(ServesimError, match=r"with nvfp4 weights and KV cache fp8: FP8 "
                                            r"profiles ship .*NVFP4 ones for llama-3-8b, "
                                            r"llama-3-70b, qwen3-32b"):
        find(fp4("llama-3.1-70b", "fp8"), "b200", 2, "vllm")  # type: ignore[arg-type]


@needs_tables
def test_profile_build_reads_the_nvfp4_gemm_rows(tmp_path: Path) -> None:
    from sim.cli import main
    from sim.cost.profilefile import PROFILE_DIR
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile, profile_name

    spec = BuildSpec(fp4("llama-3-70b"), "b200", "vllm", 4)  # type: ignore[arg-type]
    assert profile_name(spec) == "b200-llama-3-70b-tp4-vllm-nvfp4"
    built = build_profile(spec)
    assert profile_text(built) == (PROFILE_DIR / "b200-llama-3-70b-tp4-vllm-nvfp4.yaml").read_text(
        encoding="utf-8")
    src = built["source"]
    assert src["kernels"]["linear_gemm"] == "FlashInferCuteDslNvFp4LinearKernel"
    assert any(n.startswith("nvfp4 projections from the nvfp4 GEMM rows") for n in src["notes"])
    # The LM head stays bf16: its GEMM comes from the bf16 rows (SGLang's, random weights).
    assert src["kernels"]["gemm"] == "sglang_torch_linear"
    out = tmp_path / "p.yaml"
    with pytest.raises(ServesimError, match=r"--dtype: nvfp4 projections run on FP4 tensor "
                                            r"cores, which h100-sxm lacks.*GPUs with them: "
                                            r"b200"):
        build_profile(BuildSpec(fp4("llama-3-8b"), "h100-sxm", "vllm"))  # type: ignore[arg-type]
    assert main(["profile", "build", "--gpu", "h100-sxm", "--model", "llama-3-8b",
                 "--dtype", "nvfp4", "--out", str(out)]) == 2
    assert not out.exists()


def test_silicon_fp4_rows_of_dense_models_and_minimax_are_simulated(tmp_path: Path) -> None:
    from sim.validate.silicon import Case, classify
    from sim.validate.siliconfit import group, weights
    from sim.validate.siliconrecipes import recipe, scenario_raw
    from sim.validate.siliconrows import read_rows

    rows = ["a,source_file=2026-01-10.csv; model=Llama-3.1-70B,trtllm,,meta-llama/Llama-3.1-70B,"
            "b200_sxm,fp4,agg,1024,1024,8,2,1,1,90,20,nvfp4",
            "b,db-dump/2026-04-27,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp4,agg,1024,1024,"
            "8,2,1,1,90,20,nvfp4",
            "c,db-dump/2026-04-27,trtllm,1.3.0rc5,nvidia/Qwen3-32B-NVFP4,b200_sxm,fp4,agg,15000,"
            "500,13,2,1,1,719,13,nvfp4",
            "d,source_file=2026-04-06.csv; model=DeepSeek-R1,sglang,,deepseek-ai/DeepSeek-R1,"
            "b200_sxm,fp4,agg,1024,1024,8,8,1,1,90,20,nvfp4"]
    a, b, c, d = (classify(r)
                  for r in read_rows(silicon_csv(tmp_path, rows, ("gemm_quant_mode",))))
    # DeepSeek's FP4 checkpoint quantises attention's output projection, not its query,
    # key and value projections (tests/test_qkv_dtype.py).
    assert isinstance(d, Case) and (d.dtype, d.qkv_dtype) == ("nvfp4", "bf16")
    assert isinstance(a, Case) and a.dtype == "nvfp4" and a.kv_dtype == "fp8"
    assert a.held_out and weights(a) == "4bit"
    assert group({"framework": "trtllm", "dtype": "nvfp4"}) == "trtllm nvfp4"
    assert scenario_raw(a)["model"] == {"preset": "llama-3.1-70b", "dtype": "nvfp4",
                                        "kv_dtype": "fp8"}
    # 70b_fp4_b200_trt_slurm.sh: --max_num_tokens $MAX_MODEL_LEN (not FP8's 16384), and
    # batch waiting for 1k/1k below tp 8.
    assert recipe(a) == {"max_num_batched_tokens": 2048, "batch_wait_timeout_iters": 20,
                         "batch_wait_max_tokens_ratio": 0.9}
    # nvidia/MiniMax-M2.5-NVFP4 (its FP4 recipes' checkpoint): NVFP4 experts, attention
    # and router in bf16, an FP8 KV cache; the recipe keeps vLLM's memory share and MoE
    # kernel.
    assert isinstance(b, Case) and (b.dtype, b.expert_dtype, b.kv_dtype, b.moe_backend) == (
        "bf16", "nvfp4", "fp8", "auto")
    assert b.held_out and weights(b) == "4bit" and recipe(b) == {"memory_utilization": 0.9}
    assert scenario_raw(b)["model"] == {"preset": "minimax-m2.5", "dtype": "bf16",
                                        "kv_dtype": "fp8", "expert_dtype": "nvfp4"}
    assert group({"framework": "vllm", "dtype": "bf16", "expert_dtype": "nvfp4"}) == \
        "vllm nvfp4 experts"
    # A prompt longer than TensorRT-LLM's default token budget ran, so the run had room
    # for it in one step: the scenario gives it that (orca refuses it otherwise).
    assert isinstance(c, Case) and scenario_raw(c)["serving"]["max_num_batched_tokens"] == 15000
    # The same run in AIConfigurator's collection had its generator's budget, 512 sequences
    # plus the prompt plus 1,500 tokens, rounded up to 32 (sim/validate/aicgenerator.py).
    aic = dataclasses.replace(c, row=dataclasses.replace(c.row, source="x"))
    assert aic.row.collection == "aic"
    assert scenario_raw(aic)["serving"]["max_num_batched_tokens"] == 17024


@needs_tables
def test_profile_build_takes_the_experts_dtype_apart(tmp_path: Path, capsys) -> None:
    # nvidia/MiniMax-M2.5-NVFP4: NVFP4 experts beside bf16 attention; the built profile
    # prices the experts from the MoE tables' nvfp4 rows and a scenario of the same model
    # runs on it.
    import yaml

    from sim.cli import main

    out = tmp_path / "mm.yaml"
    assert main(["profile", "build", "--gpu", "b200", "--model", "minimax-m2.5", "--tp", "2",
                 "--dtype", "bf16", "--expert-dtype", "nvfp4", "--out", str(out)]) == 0
    assert "nvfp4 experts on FP4 tensor cores" in capsys.readouterr().out
    model = {"preset": "minimax-m2.5", "dtype": "bf16", "expert_dtype": "nvfp4"}
    fp4_experts = build_cost(from_dict({**_scenario(model), "cost": {"profile": str(out)}},
                                       "<t>"))
    assert yaml.safe_load(out.read_text())["model"]["expert_dtype"] == "nvfp4"
    # Decode of 16 sequences reads NVFP4 experts: faster than the shipped block-FP8 release.
    ship = build_cost(from_dict(_scenario("minimax-m2.5"), "<t>"))
    step = decode_shape(16, 16 * 1024)
    assert fp4_experts.step_time(step) < ship.step_time(step)
    for args, message in ((["--model", "llama-3-8b", "--expert-dtype", "nvfp4"],
                           "--expert-dtype: got 'nvfp4', but llama-3-8b has no experts"),
                          (["--model", "minimax-m2.5", "--expert-dtype", "fp4"],
                           "--expert-dtype: got 'fp4'; valid: bf16, fp16, fp8, fp8-block, "
                           "mxfp4, nvfp4, int4")):
        assert main(["profile", "build", "--gpu", "b200", *args, "--out",
                     str(tmp_path / "x.yaml")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1
    assert not (tmp_path / "x.yaml").exists()


def test_hf_config_of_an_experts_only_modelopt_checkpoint(tmp_path: Path) -> None:
    # nvidia/MiniMax-M2.5-NVFP4's layout: ModelOpt NVFP4 with every layer's self_attn*
    # (and the router, LM head) excluded: NVFP4 experts, bf16 attention. A list that
    # keeps only some attention projections, not a whole query/key/value set, is one
    # clear line (DeepSeek's NVFP4 exports: tests/test_qkv_dtype.py).
    import json

    from sim.cost.hfconfig import from_hf_config

    root = Path(__file__).resolve().parents[1]
    cfg = json.loads((root / "sim/data/models/minimax-m2.5/config.json").read_text())
    cfg["quantization_config"] = {
        "quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
        "exclude_modules": ["lm_head", *(f"model.layers.{i}.self_attn*" for i in range(62)),
                            *(f"model.layers.{i}.block_sparse_moe.gate" for i in range(62))]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    spec = from_hf_config(path)
    assert (spec.dtype, spec.expert_dtype) == ("bf16", "nvfp4")
    cfg["quantization_config"]["exclude_modules"] = [
        "lm_head", "model.layers.0.self_attn.q_a_proj", "model.layers.0.self_attn.kv_b_proj"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError, match=r"quantization_config: keeps "
                                            r"'model.layers.0.self_attn.q_a_proj' and other "
                                            r"single attention projections unquantised"):
        from_hf_config(path)
