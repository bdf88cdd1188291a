"""Multi-head latent attention and DeepSeek-V3: sizes against the model card and a
published load log, the latent KV cache and how tensor parallelism keeps it whole, the
roofline's MLA terms against hand-worked figures, the HuggingFace import and memory fit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.cli import main
from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.cost.gpus import GPUS
from sim.cost.hfconfig import from_hf_config
from sim.cost.memory import memory_budget, weight_bytes
from sim.cost.memorybudget import GIB
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec, recorded_fields
from sim.errors import ServesimError
from sim.report.summary import summarize

ROOT = Path(__file__).resolve().parents[1]
V3_CONFIG = ROOT / "sim" / "data" / "models" / "deepseek-v3" / "config.json"
V3 = MODELS["deepseek-v3"]

# DeepSeek-V2-Lite's config.json (the keys that set its shape): no query compression
# (q_lora_rank null), 2 shared experts, one dense layer first.
V2_LITE = {
    "model_type": "deepseek_v2", "torch_dtype": "bfloat16", "vocab_size": 102400,
    "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
    "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16,
    "n_shared_experts": 2, "n_routed_experts": 64, "num_experts_per_tok": 6,
    "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": None,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
    "max_position_embeddings": 163840, "rope_theta": 10000, "tie_word_embeddings": False,
}


def test_preset_is_the_release_config() -> None:
    spec = from_hf_config(V3_CONFIG)
    assert dataclasses.replace(spec, name="deepseek-v3") == V3
    # The release is FP8 with 128 x 128 block scales: quantization_config says so.
    assert json.loads(V3_CONFIG.read_text())["quantization_config"]["weight_block_size"] == [
        128, 128]
    assert V3.dtype == "fp8-block" and V3.kv_dtype == "auto"


def test_sizes_match_the_model_card() -> None:
    # Model card: 671B total, 37B activated per token (the 685B on the hub adds the 14B
    # multi-token-prediction module, which is not served without speculative decoding).
    assert V3.params == pytest.approx(671e9, rel=0.01)
    # 37.55B counted (with the embedding table, as for every model here); the card's
    # figure is rounded to whole billions, so this holds to 2%, not 1% (1.5% off).
    assert V3.active_params == pytest.approx(37e9, rel=0.02)
    # One layer's attention, hand-summed: q_a 7168x1536, q_b 1536x128x192,
    # kv_a 7168x576, kv_b 512x128x256, o 128x128x7168.
    attention = (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256
                 + 128 * 128 * 7168)
    assert V3.attention_params_per_layer == attention == 187_105_280
    # DeepSeek-V2-Lite's card: 15.7B total.
    lite = _lite()
    assert lite.q_lora_rank == 0 and lite.shared_experts == 2 and lite.dense_layers == 1
    assert lite.params == pytest.approx(15.7e9, rel=0.01)


def _lite(tmp: Path | None = None) -> ModelSpec:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(V2_LITE))
        return from_hf_config(path)


def test_kv_cache_holds_one_latent_per_layer_on_every_gpu() -> None:
    # 61 layers x (512 latent + 64 rotary key) elements, one copy, at 2 bytes (bf16).
    assert V3.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    fp8 = dataclasses.replace(V3, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == 61 * 576 == 35_136
    for tp in (1, 2, 4, 8, 16):
        d = shard(V3, tp)
        # vLLM gives an MLA model one KV head per GPU: the latent is not split by tp.
        assert d.kv_bytes_per_token == 70_272
        assert d.heads == 128 // tp
    # A Llama-shaped model's KV still splits by tp.
    assert shard(MODELS["llama-3-70b"], 8).kv_bytes_per_token * 8 == MODELS[
        "llama-3-70b"].kv_bytes_per_token


def test_tp_splits_heads_and_keeps_the_down_projections_whole() -> None:
    d = shard(V3, 8)
    # q_a and kv_a replicated; q_b, kv_b and o split by head (16 a GPU).
    per_gpu = (7168 * 1536 + 1536 * 16 * 192 + 7168 * 576 + 512 * 16 * 256
               + 16 * 128 * 7168)
    assert d.attention_params_per_layer == per_gpu == 36_634_624
    # Any tp: the split parts add up to the whole, the replicated down-projection
    # (7168 x (1536 + 576)) is held by every GPU.
    replicated = 7168 * (1536 + 576)
    for tp in (1, 2, 4, 8, 16, 32, 64, 128):
        split = shard(V3, tp).attention_params_per_layer - replicated
        assert split * tp + replicated == V3.attention_params_per_layer
    with pytest.raises(ServesimError, match="128 query heads do not split over tp=3"):
        shard(V3, 3)


def test_weights_per_gpu_match_a_published_load() -> None:
    # DeepSeek-R1 (the same shape and FP8 checkpoint) on 8 devices under vLLM,
    # HabanaAI/vllm-fork issue 809: "Pre-loading model weights ... took 79.41 GiB".
    assert weight_bytes(MODELS["deepseek-r1"], 8) / GIB == pytest.approx(79.41, rel=0.01)


def test_fits_eight_h200s_and_not_eight_h100s() -> None:
    h200 = memory_budget(V3, GPUS["h200"], 8, 0.9, 16, 8192, 256).fitted()
    assert h200.block_bytes == 70_272 * 16
    assert h200.kv_tokens > 500_000  # about 649k tokens of latent cache a replica
    with pytest.raises(ServesimError, match=r"model deepseek-v3 does not fit on h100-sxm "
                                            r"with tp=8: per GPU 79\.\d\d GiB .* less weights "
                                            r"79\.29.* leaves -\d+\.\d\d GiB"):
        memory_budget(V3, GPUS["h100-sxm"], 8, 0.9, 16, 8192, 256).fitted()


def _bare(gpu: str = "h200") -> RooflineCost:
    """The roofline at the datasheet peaks, no floors or overheads: terms by hand."""
    p = RooflineParams(flops_efficiency=1.0, bandwidth_efficiency=1.0,
                       attention_flops_efficiency=1.0, fp8_flops_efficiency=1.0,
                       moe_flops_efficiency=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0,
                       kernel_floor_s=0.0, attention_floor_s=0.0)
    return RooflineCost(V3, GPUS[gpu], 8, p)


def test_decode_step_by_hand() -> None:
    cost = _bare()
    # 4 sequences at 1,023 cached tokens each: 4,096 latents read, 4 written.
    parts = cost.parts(decode_shape(4, 4 * 1023))
    # Attention: absorbed, 16 heads a GPU x 2 x (576 + 512) FLOPs per cached token a
    # layer = 2.12e9 FLOPs a sequence-kilotoken: far below the latent reads, so bytes:
    # 70,272 B x 4,096 tokens / 4.8e12 B/s.
    flops = 2 * 16 * (576 + 512) * 61 * 4096 / 989e12
    bytes_s = 70_272 * 4096 / 4.8e12
    assert flops < bytes_s
    assert parts["attention"] == pytest.approx(bytes_s, rel=1e-12)
    # Projections and experts, weight-bound: always read (per GPU) 61 layers' attention
    # 36,634,624 + 3 dense MLPs 3x7168x2304 + 58 shared experts 3x7168x256, at 1 byte;
    # routers 58x7168x256 at 2 bytes; the routed experts 4 tokens touch:
    # 256 x (1 - (1 - 8/256)^4) of each layer's 256, 3x7168x256 at 1 byte each.
    always = 61 * 36_634_624 + 3 * 3 * 7168 * 2304 + 58 * 3 * 7168 * 256
    touched = 256 * (1 - (1 - 8 / 256) ** 4)
    routed = 58 * touched * 3 * 7168 * 256
    linear = (always + 2 * 58 * 7168 * 256 + routed) / 4.8e12
    assert parts["linear"] == pytest.approx(linear, rel=1e-9)


def test_prefill_steps_by_hand() -> None:
    cost = _bare()
    # One 4,096-token prompt: expanded attention, 2 x 16 heads x (128 + 64 + 128) FLOPs
    # per causal pair a layer, 4,096 x 4,097 / 2 pairs: FLOP-bound at 989e12.
    pairs = 4096 * 4097 // 2
    parts = cost.parts(shape_of([(4096, 0)]))
    assert parts["attention"] == pytest.approx(2 * 16 * 320 * 61 * pairs / 989e12, rel=1e-12)
    # A 1,024-token chunk after 3,072 cached: its pairs, plus kv_b up-projecting the
    # 3,072 cached latents again, 2 x 512 x 16 x (128 + 128) FLOPs each a layer, at the
    # FP8 projections' 1,979e12.
    pairs = 1024 * 3072 + 1024 * 1025 // 2
    chunk = cost.parts(shape_of([(1024, 3072), (1, 500)]))
    expected = (2 * 16 * 320 * 61 * pairs / 989e12 + 2 * 16 * 1088 * 61 * 501 / 989e12
                + 2 * 512 * 16 * 256 * 61 * 3072 / 1979e12)
    assert chunk["attention"] == pytest.approx(expected, rel=1e-12)


def test_mla_fields_are_checked() -> None:
    with pytest.raises(ServesimError, match=r"head_dim: got 128, must be qk_nope_head_dim \+ "
                                            r"qk_rope_head_dim \(192\)"):
        dataclasses.replace(V3, head_dim=128)
    with pytest.raises(ServesimError, match=r"v_head_dim: got 128 without latent attention"):
        dataclasses.replace(MODELS["llama-3-8b"], v_head_dim=128)
    with pytest.raises(ServesimError, match="qk_rope_head_dim: required for latent attention"):
        dataclasses.replace(V3, qk_rope_head_dim=0)
    # Models without MLA record and hash exactly what they did before.
    assert not {"kv_lora_rank", "v_head_dim"} & set(recorded_fields(MODELS["llama-3-8b"]))
    assert recorded_fields(V3)["kv_lora_rank"] == 512


def test_hf_import_reads_deepseek_and_refuses_other_layouts(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**V2_LITE, "moe_layer_freq": 2}))
    with pytest.raises(ServesimError, match=r"moe_layer_freq: got 2"):
        from_hf_config(path)
    path.write_text(json.dumps({**V2_LITE, "model_type": "phi3"}))
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert "unsupported model_type 'phi3'" in str(err.value)
    assert "deepseek_v2, deepseek_v3" in str(err.value)


def test_deepseek_scenario_runs_and_reports_its_latent() -> None:
    sc = from_dict({"model": "deepseek-v3", "hardware": {"gpu": "h200", "tp": 8},
                    "workload": {"arrivals": {"process": "poisson", "rate": 2.0},
                                 "num_requests": 20,
                                 "lengths": {"prompt": {"dist": "fixed", "value": 1024},
                                             "output": {"dist": "fixed", "value": 16}}}})
    s = summarize(simulate(sc))
    assert s["requests"]["finished"] == 20
    model = s["simulated"]["model"]
    assert (model["kv_lora_rank"], model["qk_rope_head_dim"], model["experts"]) == (512, 64, 256)
    assert "fp8-block weights" in s["simulated"]["cost_source"]


def test_deepseek_on_h100s_is_one_clear_line(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ds.yaml"
    path.write_text(f"model: {{hf_config: {V3_CONFIG}}}\nhardware: {{gpu: h100-sxm, tp: 8}}\n"
                    "workload: {trace: {path: azure_2023_conv}}\n")
    rc = main(["simulate", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "does not fit on h100-sxm with tp=8" in err and "weights 79.29" in err


def test_calibrate_refuses_mla_in_one_line() -> None:
    pytest.importorskip("torch")
    from calibrate.executor import check_timeable

    with pytest.raises(ServesimError, match=r"model\.kv_lora_rank: calibrate's torch model "
                                            r"has no latent-attention"):
        check_timeable(V3)


def test_reports_write_deepseek_as_its_maker_does() -> None:
    from sim.report.human import model_name

    assert model_name("deepseek-v3") == "DeepSeek-V3"
    assert model_name("deepseek-r1") == "DeepSeek-R1"


def test_measured_cost_finds_deepseek_under_both_frameworks() -> None:
    from sim.cost.measured import find

    assert find(V3, "h200", 8, "sglang") == "h200-deepseek-v3-tp8-sglang"
    assert find(V3, "b200", 8, "vllm") == "b200-deepseek-v3-tp8-vllm"
    assert find(MODELS["deepseek-r1"], "b200", 8, "sglang") == "b200-deepseek-v3-tp8-sglang"
    # Eight H100s cannot hold it: the error lists the GPUs that have a profile.
    with pytest.raises(ServesimError, match=r"no measured profile for deepseek-v3 at tp=8 "
                                            r"under vllm on h100-sxm; GPUs with one: b200, "
                                            r"b300, h200"):
        find(V3, "h100-sxm", 8, "vllm")
