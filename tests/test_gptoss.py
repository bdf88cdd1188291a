"""gpt-oss, 4-bit weights (mxfp4, nvfp4, int4), sliding-window attention and attention
sinks: the bytes and parameters against OpenAI's model card, how the roofline prices
them, the KV capacity a hybrid (sliding + full) model gets, and the HuggingFace configs
that set them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.config.scenario import from_dict
from sim.cost.gpus import GPUS
from sim.cost.hfconfig import from_hf_config
from sim.cost.memory import memory_budget
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.cost.shard import shard
from sim.cost.specs import recorded_fields
from sim.errors import ServesimError

GIB = 2**30
DATA = Path(__file__).resolve().parents[1] / "sim" / "data" / "models"
# Llama-3-8B's projection weights (tests/test_fp8.py: 6,979,321,856), and the rest
# (embedding and LM head, 2 x 128,256 x 4,096), which stay bf16.
LLAMA8_PROJ = 6_979_321_856
LLAMA8_REST = 2 * 128_256 * 4_096


@pytest.mark.parametrize(("name", "total", "active", "checkpoint_gib"), [
    # OpenAI's gpt-oss model card (arXiv 2508.10925, table 1): total and active
    # parameters (active counts the unembedding, not the embedding lookup) and the
    # checkpoint's size (experts mxfp4, the rest bf16).
    ("gpt-oss-120b", 116.83e9, 5.13e9, 60.8),
    ("gpt-oss-20b", 20.91e9, 3.61e9, 12.8),
])
def test_gpt_oss_matches_the_model_card(name: str, total: float, active: float,
                                        checkpoint_gib: float) -> None:
    m = MODELS[name]
    assert m.params == pytest.approx(total, rel=0.01)
    assert m.active_params - m.embedding_params == pytest.approx(active, rel=0.01)
    assert m.weight_bytes / GIB == pytest.approx(checkpoint_gib, rel=0.01)


def test_gpt_oss_120b_fits_one_80gb_gpu_and_its_kv_bytes() -> None:
    m = MODELS["gpt-oss-120b"]
    # 2 (K and V) x 36 layers x 8 KV heads x 64 x 2 bytes, every layer counted.
    assert m.kv_bytes_per_token == 2 * 36 * 8 * 64 * 2 == 73_728
    assert MODELS["gpt-oss-20b"].kv_bytes_per_token == 2 * 24 * 8 * 64 * 2
    # Its weights alone (60.7 GiB, with the 131,072-position rotary table) leave room on
    # one H100 at vLLM's 0.9.
    b = memory_budget(m, GPUS["h100-sxm"], 1, 0.9, 16, 8192, 256)
    assert b.weights / GIB == pytest.approx(60.71, abs=0.01)
    assert b.fitted().blocks > 0
    # The experts are mxfp4: 4.25 bits a weight, the rest bf16 (sinks: 64 a layer).
    experts = 36 * 128 * 3 * 2880 * 2880
    assert m.expert_stack_params == experts
    assert m.sink_params == 36 * 64
    assert m.weight_bytes == experts * 17 // 32 + (m.params - experts) * 2


def test_the_shipped_configs_give_the_presets() -> None:
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        assert from_hf_config(DATA / name / "config.json") == MODELS[name]


@pytest.mark.parametrize(("dtype", "proj_bytes"), [
    ("int4", LLAMA8_PROJ // 64 * 33),    # 4 + 16/128 bits = 33/64 bytes
    ("mxfp4", LLAMA8_PROJ // 32 * 17),   # 4 + 8/32 bits = 17/32 bytes
    ("nvfp4", LLAMA8_PROJ // 16 * 9),    # 4 + 8/16 bits = 9/16 bytes
    ("fp8", LLAMA8_PROJ),
    ("bf16", LLAMA8_PROJ * 2),
])
def test_four_bit_weights_take_their_packed_bytes(dtype: str, proj_bytes: int) -> None:
    m = dataclasses.replace(MODELS["llama-3-8b"], dtype=dtype)  # type: ignore[arg-type]
    assert m.weight_bytes == proj_bytes + LLAMA8_REST * 2
    assert isinstance(m.weight_bytes, int)
    # Sharded over two GPUs, each holds half the projections (and its vocabulary share).
    assert shard(m, 2).stack_bytes(m.dtype_bytes, m.dtype_bytes) == proj_bytes // 2


def test_older_models_record_and_weigh_what_they_did() -> None:
    for m in MODELS.values():
        if not (m.sliding_window or m.expert_dtype or m.attention_sinks):
            for key in ("expert_dtype", "sliding_window", "sliding_layers", "attention_sinks"):
                assert key not in recorded_fields(m)
            assert type(m.dtype_bytes) is int  # whole-byte dtypes stay integers
    assert "sliding_window" in recorded_fields(MODELS["gpt-oss-20b"])


def test_four_bit_compute_follows_the_gpu() -> None:
    oss, p = MODELS["gpt-oss-120b"], RooflineParams()
    # vLLM runs mxfp4 experts with bf16 activations on Hopper and Blackwell alike.
    for name in ("h100-sxm", "b200"):
        assert RooflineCost(oss, GPUS[name], 1, p).source.endswith(
            "; mxfp4 experts, weight-only (w4a16)")
    nv = dataclasses.replace(MODELS["llama-3-8b"], dtype="nvfp4")
    assert RooflineCost(nv, GPUS["b200"], 1, p).source.endswith(
        "; nvfp4 weights on FP4 tensor cores")
    assert RooflineCost(nv, GPUS["h200"], 1, p).source.endswith(
        "; nvfp4 weights, weight-only on h200 (no FP4 tensor cores)")
    int4 = dataclasses.replace(MODELS["llama-3-8b"], dtype="int4")
    assert RooflineCost(int4, GPUS["b200"], 1, p).source.endswith(
        "; int4 weights, weight-only (w4a16)")
    # A long prefill is FLOP-bound: int4 (bf16 compute) costs what bf16 does on the
    # projections, nvfp4 on a B200 runs at its FP4 peak (9 PFLOP/s, FP8's efficiency).
    shape = shape_of([(8192, 0)])
    bf16 = RooflineCost(MODELS["llama-3-8b"], GPUS["b200"], 1, p).parts(shape)["linear"]
    assert RooflineCost(int4, GPUS["b200"], 1, p).parts(shape)["linear"] == pytest.approx(bf16)
    flops = 2 * LLAMA8_PROJ * 8192 / (9000e12 * p.fp8_flops_efficiency)
    assert RooflineCost(nv, GPUS["b200"], 1, p).parts(shape)["linear"] == pytest.approx(
        flops + 4 * 32 * p.kernel_floor_s)
    # One decode is bandwidth-bound: the 4-bit weights' bytes set it.
    one = decode_shape(1, 100)
    mx = dataclasses.replace(MODELS["llama-3-8b"], dtype="mxfp4")
    bw = GPUS["h100-sxm"].mem_bw * p.bandwidth_efficiency
    assert RooflineCost(mx, GPUS["h100-sxm"], 1, p).parts(one)["linear"] == pytest.approx(
        LLAMA8_PROJ * 4.25 / 8 / bw + 4 * 32 * p.kernel_floor_s)


def _scenario(model: object, gpu: str) -> dict:
    return {"model": model, "hardware": {"gpu": gpu}, "cost": "roofline",
            "workload": {"arrivals": {"process": "poisson", "rate": 2.0}, "num_requests": 5,
                         "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                     "output": {"dist": "fixed", "value": 4}}}}


def test_nvfp4_where_vllm_cannot_run_it_is_one_line() -> None:
    with pytest.raises(ServesimError, match=r"model\.dtype: got 'nvfp4': mi300x has no FP4 "
                                            r"tensor cores and vLLM's weight-only FP4"):
        from_dict(_scenario({"preset": "llama-3-8b", "dtype": "nvfp4"}, "mi300x"))
    # Marlin runs it weight-only on every NVIDIA GPU from the A100 on.
    sc = from_dict(_scenario({"preset": "llama-3-8b", "dtype": "nvfp4"}, "a100-80gb"))
    assert "nvfp4 weights, weight-only on a100-80gb" in RooflineCost(
        sc.model, GPUS["a100-80gb"], 1, RooflineParams()).source
    # mxfp4 runs on the MI300X (vLLM's ROCm build lists it).
    from_dict(_scenario("gpt-oss-20b", "mi300x"))


def _windowed(sliding_layers: int, window: int = 128) -> object:
    return dataclasses.replace(MODELS["llama-3-8b"], sliding_window=window,
                               sliding_layers=sliding_layers)


def test_sliding_layers_cap_decode_attention_hand_worked() -> None:
    # 16 of Llama-3-8B's 32 layers slide over 128 tokens. 8 decodes at 4,095 cached
    # tokens (4,096 attended, with the new one): full layers read 4,096 tokens' KV,
    # sliding ones 128; the step is bandwidth-bound.
    p = RooflineParams()
    m = _windowed(16)
    bw = GPUS["h100-sxm"].mem_bw * p.bandwidth_efficiency
    layer_kv = 2 * 8 * 128 * 2  # bytes a token, one layer
    got = RooflineCost(m, GPUS["h100-sxm"], 1, p).parts(decode_shape(8, 8 * 4095))
    want = (16 * layer_kv * 8 * 4096 + 16 * layer_kv * (8 * 128 + 8)) / bw
    assert got["attention"] == pytest.approx(want + 32 * p.attention_floor_s)
    # Under the window nothing is capped: the same as the model without one.
    short = decode_shape(8, 8 * 100)
    plain = RooflineCost(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, p).parts(short)
    assert RooflineCost(m, GPUS["h100-sxm"], 1, p).parts(short)["attention"] == \
        pytest.approx(plain["attention"])


@settings(max_examples=60, deadline=None)
@given(prompt=st.integers(2, 6000), ctx=st.integers(0, 20000), decodes=st.integers(0, 40),
       dctx=st.integers(0, 50000), sliding=st.integers(1, 32))
def test_windows_never_cost_more_and_bound_all_sliding_models(
        prompt: int, ctx: int, decodes: int, dctx: int, sliding: int) -> None:
    p = RooflineParams()
    entries = [(prompt, ctx)] + [(1, dctx)] * decodes
    plain = RooflineCost(MODELS["llama-3-8b"], GPUS["h200"], 1, p).parts(shape_of(entries))
    win = RooflineCost(_windowed(sliding), GPUS["h200"], 1, p)
    assert win.parts(shape_of(entries))["attention"] <= plain["attention"] * (1 + 1e-12)
    # Every layer sliding: a context past the window costs what one at the window does.
    every = RooflineCost(_windowed(32), GPUS["h200"], 1, p)
    far = [(prompt, ctx + 4096)] + [(1, dctx + 4096)] * decodes
    near = [(prompt, 4096)] + [(1, 4096)] * decodes
    assert every.parts(shape_of(far))["attention"] == pytest.approx(
        every.parts(shape_of(near))["attention"])


def test_hybrid_kv_capacity_pools_both_kinds_of_layer_hand_worked() -> None:
    # gpt-oss-120b on one H200 at 0.9, 256 sequences: vLLM groups its 18 full and 18
    # sliding layers one group each, and a page of the one pool holds one group's KV of
    # 16 tokens (16 x 18 x 2,048 bytes). Nothing is set aside: the pool is the whole
    # room, and a request's window takes at most ceil(128 / 16) + 1 = 9 pages of it.
    m = MODELS["gpt-oss-120b"]
    b = memory_budget(m, GPUS["h200"], 1, 0.9, 16, 8192, 256)
    layer_block = 16 * 2 * 8 * 64 * 2
    assert b.block_bytes == 18 * layer_block
    room = b.budget - b.weights - b.activation - b.non_torch - b.cuda_graph
    assert b.blocks == int(room // (18 * layer_block))
    assert (b.window_blocks, b.window_groups) == (9, (1, 1))
    assert b.summary()["window_blocks_per_request"] == 9
    # The pool no longer shrinks with max_num_seqs beyond the sampler's share (an H100,
    # 1,024 sequences, where 3.48 GiB of windows had been set aside).
    tight = memory_budget(m, GPUS["h100-sxm"], 1, 0.9, 16, 8192, 1024)
    left = tight.budget - tight.weights - tight.activation - tight.non_torch - tight.cuda_graph
    assert tight.blocks == int(left // (18 * layer_block))
    # Every layer sliding (Mistral-7B v0.1): blocks carry every layer, no window pages.
    every = memory_budget(_windowed(32, 4096), GPUS["h200"], 1, 0.9, 16, 8192, 256)
    assert every.window_blocks == 0
    assert every.blocks == memory_budget(MODELS["llama-3-8b"], GPUS["h200"], 1, 0.9, 16,
                                         8192, 256).blocks


@pytest.mark.parametrize(("full", "sliding", "ratio", "groups"), [
    (18, 18, 1.5, (18, 1, 1)),   # gpt-oss-120b
    (10, 50, 1.5, (10, 1, 5)),   # an n:1 pattern (Gemma 3's 5:1): the "1" sets the size
    (13, 12, 1.5, (13, 1, 1)),   # gpt-oss-20b with an EAGLE layer: one sliding layer padded
    (12, 17, 1.5, (17, 1, 1)),   # under 1.5x apart: the larger count, 5 padding layers
    (12, 17, 1.25, (12, 1, 2)),  # vLLM 0.12-0.17: 1.25x
    (13, 12, 0.0, (12, 2, 1)),   # vLLM 0.11: always the smaller count
])
def test_hybrid_groups_as_vllm_pads_them(full: int, sliding: int, ratio: float,
                                         groups: tuple[int, int, int]) -> None:
    from sim.cost.kvpages import hybrid_groups

    assert hybrid_groups(full, sliding, ratio) == groups


def test_full_layers_in_two_groups_make_a_block_of_both_hand_worked() -> None:
    # 26 full and 13 sliding layers under vLLM 0.11 (groups of 13): a block of tokens
    # takes a page in each of two full groups, so servesim's block is 26 layers, and a
    # window of 9 pages costs 9 / 2 blocks, rounded up: 5.
    from sim.cost.vllmmemory import memory_rules

    m = dataclasses.replace(MODELS["llama-3-8b"], layers=39, sliding_layers=13,
                            sliding_window=128)
    b = memory_budget(m, GPUS["h200"], 1, 0.9, 16, 8192, 256,
                      rules=memory_rules("0.11.0", m))
    layer_block = 16 * 2 * 8 * 128 * 2
    assert b.block_bytes == 26 * layer_block
    assert (b.window_blocks, b.window_groups, b.window_request_blocks) == (9, (1, 2), 5)


def _config(tmp_path: Path, **over: object) -> Path:
    cfg = {"model_type": "mistral", "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
           "vocab_size": 32000, "max_position_embeddings": 32768, "rope_theta": 10000.0}
    cfg.update(over)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hf_sliding_windows(tmp_path: Path) -> None:
    # Mistral-7B v0.1: a 4,096-token window on every layer; later releases say null.
    v01 = from_hf_config(_config(tmp_path, sliding_window=4096))
    assert (v01.sliding_window, v01.sliding_layers, v01.attention_sinks) == (4096, 32, False)
    assert from_hf_config(_config(tmp_path, sliding_window=None)).sliding_layers == 0
    # Qwen's configs carry a window they do not use unless asked.
    assert from_hf_config(_config(tmp_path, model_type="qwen2", sliding_window=4096,
                                  use_sliding_window=False)).sliding_window == 0
    with pytest.raises(ServesimError, match=r"use_sliding_window: true: Qwen's sliding"):
        from_hf_config(_config(tmp_path, model_type="qwen2", sliding_window=4096,
                               use_sliding_window=True))
    with pytest.raises(ServesimError, match=r"layer_types: expected a list of 32 entries"):
        from_hf_config(_config(tmp_path, sliding_window=128, layer_types=["full_attention"]))
    # gpt-oss-20b's sliding layers with no window would be priced as full attention.
    shipped = Path(__file__).resolve().parent.parent / "sim" / "data" / "models"
    cfg = json.loads((shipped / "gpt-oss-20b" / "config.json").read_text())
    with pytest.raises(ServesimError, match=r"sliding_window: layer_types names 12 "
                                            r"sliding_attention layers but sliding_window is "
                                            r"null"):
        from_hf_config(_config(tmp_path, **{**cfg, "sliding_window": None}))


@pytest.mark.parametrize(("quant", "dtype"), [
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128}, "int4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"type": "float", "num_bits": 4, "group_size": 16}}}}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"type": "int", "num_bits": 4, "group_size": 128}}}}, "int4"),
])
def test_hf_four_bit_quantisation(tmp_path: Path, quant: object, dtype: str) -> None:
    assert from_hf_config(_config(tmp_path, quantization_config=quant)).dtype == dtype


def test_hf_eight_bit_gptq_is_named(tmp_path: Path) -> None:
    with pytest.raises(ServesimError, match=r"quantization_config\.quant_method: quantisation "
                                            r"'gptq' with bits 8 is not modelled"):
        from_hf_config(_config(tmp_path, quantization_config={"quant_method": "gptq",
                                                               "bits": 8}))
    # A list where compressed-tensors names a type is a layout not modelled, not a crash.
    with pytest.raises(ServesimError, match=r"quantisation 'compressed-tensors' is not "
                                            r"modelled"):
        from_hf_config(_config(tmp_path, quantization_config={
            "quant_method": "compressed-tensors",
            "config_groups": {"g": {"weights": {"type": ["float"], "num_bits": 8}}}}))


def test_a_gpt_oss_run_says_how_its_experts_run(tmp_path: Path) -> None:
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    sc = from_dict(_scenario("gpt-oss-20b", "h100-sxm"))
    s = summarize(simulate(sc))
    assert s["cost_source"].endswith("mxfp4 experts, weight-only (w4a16); steps over 512 "
                                     "tokens without CUDA graphs; async scheduling")

    assert s["requests"]["finished"] == 5
    assert s["memory"]["both"]["window_blocks_per_request"] == 9


def test_what_is_not_built_or_run_is_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from sim.cli import main

    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(_scenario({"preset": "qwen3-32b", "dtype": "nvfp4"},
                                             "mi300x")))
    assert main(["simulate", str(scen), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"servesim: error: {scen}: model.dtype: got "
                                               "'nvfp4': mi300x has no FP4 tensor cores")
    # gpt-oss's profiles are built (tests/test_gptoss_measured.py); 4-bit dense
    # projections only as NVFP4 where the GPU has FP4 tensor cores (tests/test_fp4_measured.py).
    assert main(["profile", "build", "--model", "qwen3-32b", "--dtype", "nvfp4", "--gpu",
                 "h200", "--out", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err.strip() == (
        "servesim: error: --dtype: nvfp4 projections run on FP4 tensor cores, which h200 "
        "lacks, so its tables time no nvfp4 GEMM (GPUs with them: b200, gb200, b300, gb300, "
        "rtx-pro-6000); cost: "
        "roofline prices nvfp4 weights there as weight-only")
    assert main(["profile", "build", "--model", "qwen3-32b", "--dtype", "int4", "--gpu",
                 "b200", "--out", str(tmp_path / "p.yaml")]) == 2
    assert capsys.readouterr().err.strip() == (
        "servesim: error: --dtype: dtype 'int4' (of qwen3-32b, unless --dtype set it) is not "
        "built from the tables; built: bf16, fp16, fp8, fp8-block, nvfp4: give one with --dtype")
