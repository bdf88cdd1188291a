"""Qwen3.5 (Gated DeltaNet layers beside softmax attention): the presets against their
releases' config.json files and model cards, the recurrent state's bytes, memory and
concurrency, the roofline's and the tables' prices, and the refusals."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.cost.gpus import GPUS
from sim.cost.hfconfig import from_hf_config
from sim.cost.memory import linear_state_seqs, memory_budget
from sim.cost.presets import MODELS
from sim.cost.roofline import GDN_CHUNK, RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b")
BIG = MODELS["qwen3.5-397b-a17b"]


def _config(name: str) -> Path:
    return ROOT / "sim" / "data" / "models" / name / "config.json"


@pytest.mark.parametrize("name", NAMES)
def test_presets_are_the_release_configs(name: str) -> None:
    assert from_hf_config(_config(name)) == MODELS[name]


def test_layers_of_the_397b_by_hand() -> None:
    m = BIG
    assert (m.layers, m.linear_layers, m.attention_layers) == (60, 45, 15)
    # Gated DeltaNet: qkvz (2 x 16 key heads + 2 x 64 value heads, 128 each), ba (2 per
    # value head), a 4-wide convolution over queries, keys and values, out_proj.
    keys, values = 16 * 128, 64 * 128
    gdn = 4096 * (2 * keys + 2 * values) + 4096 * 2 * 64 + (2 * keys + values) * 4 \
        + values * 4096
    assert m.linear_params_per_mixer == gdn == 118_013_952
    # Attention: q_proj makes queries and gates (2 x 32 heads x 256), 2 KV heads.
    attn = 4096 * (2 * 32 + 2 * 2) * 256 + 32 * 256 * 4096
    assert m.attention_params_per_layer == attn
    # Card: 397B total, 17B activated (the vision tower and the MTP layer, not served
    # by text requests, are not counted here).
    assert m.params == pytest.approx(397e9, rel=0.01)
    assert m.active_params == pytest.approx(17e9, rel=0.025)
    assert MODELS["qwen3.5-122b-a10b"].params == pytest.approx(122e9, rel=0.01)
    assert MODELS["qwen3.5-27b"].params == pytest.approx(27e9, rel=0.01)
    # The 35B's card counts its vision tower (~0.4B) too.
    assert MODELS["qwen3.5-35b-a3b"].params == pytest.approx(35e9, rel=0.015)


def test_kv_and_state_bytes_by_hand() -> None:
    # The KV cache holds the 15 attention layers only: 2 x 15 x 2 heads x 256 x 2 bytes.
    assert BIG.kv_bytes_per_token == 2 * 15 * 2 * 256 * 2
    # On 8 GPUs: one KV head each (replicated), 8 of the 64 value heads' states (fp32)
    # and 1/8 of the 12,288 convolution channels (3 past inputs, bf16) per layer.
    rank = shard(BIG, 8)
    assert rank.kv_bytes_per_token == 2 * 15 * 1 * 256 * 2
    per_layer = 8 * 128 * 128 * 4 + 1536 * 3 * 2
    assert rank.linear_state_bytes == 45 * per_layer == 24_007_680
    half = shard(dataclasses.replace(BIG, linear_state_dtype="bf16"), 8)
    assert half.linear_state_bytes == 45 * (8 * 128 * 128 * 2 + 1536 * 3 * 2)
    with pytest.raises(ServesimError, match="16 linear-attention key heads do not split "
                                            r"over tp=32"):
        shard(BIG, 32)


def test_states_are_set_aside_and_cap_the_running_sequences() -> None:
    b = memory_budget(BIG, GPUS["b200"], 8, 0.9, 16, 8192, 1024)
    rank = shard(BIG, 8)
    assert (b.state_seqs, b.linear_state) == (1024, 1024 * rank.linear_state_bytes)
    room = b.budget - b.weights - b.activation - b.non_torch - b.cuda_graph
    assert b.kv == pytest.approx(room - b.linear_state)
    assert b.summary()["linear_state_seqs"] == 1024
    # Room for fewer: as many as 0.9 / 1.9 of the room holds (SGLang's default split),
    # at least one.
    assert linear_state_seqs(100, 64, 1900.0) == 9
    assert linear_state_seqs(100, 4, 1900.0) == 4
    assert linear_state_seqs(100, 64, -5.0) == 1
    # Qwen3.5-35B-A3B in bf16 on one H200: some 50 GiB past its 65 GiB of weights, a
    # sequence's state 61.4 MiB: fewer states than 1,024 sequences fit, and no more run
    # where the states are set aside (SGLang's pool; vLLM pages them: test_state_pool.py).
    small = MODELS["qwen3.5-35b-a3b"]
    sb = memory_budget(small, GPUS["h200"], 1, 0.92, 16, 8192, 1024)  # vLLM 0.24's default
    seqs = sb.state_seqs
    state = shard(small, 1).linear_state_bytes
    room = sb.budget - sb.weights - sb.activation - sb.non_torch - sb.cuda_graph
    assert seqs == int(room * 0.9 / 1.9 // state) < 1024
    sc = from_dict({"name": "q", "model": "qwen3.5-35b-a3b",
                    "hardware": {"gpu": "h200", "tp": 1}, "cost": "roofline",
                    "serving": {"max_num_seqs": 1024, "linear_state_pool": "reserved"},
                    "workload": {"concurrency": seqs + 40, "num_requests": 3 * (seqs + 40),
                                 "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                             "output": {"dist": "fixed", "value": 64}}}})
    res = simulate(sc, log_steps=True)
    assert res.step_log is not None
    assert max(len(step[3]) for step in res.step_log) == seqs
    assert res.memory["both"]["linear_state_seqs"] == seqs


def test_roofline_prices_the_recurrence_by_hand() -> None:
    p = RooflineParams()
    gpu = GPUS["b200"]
    cost = RooflineCost(BIG, gpu, 8, p)
    twin = dataclasses.replace(BIG, linear_layers=0, linear_key_heads=0, linear_value_heads=0,
                               linear_key_dim=0, linear_value_dim=0, linear_conv=0)
    rank = shard(BIG, 8)
    attn_flops = gpu.flops * p.attention_flops_efficiency
    bw = gpu.mem_bw * p.bandwidth_efficiency
    heads = 45 * 8  # value heads of the linear layers on one GPU
    # A decode of 32 sequences, 1,000 cached tokens each: the bytes dominate.
    sh = decode_shape(32, 32_000)
    pairs, kv = sh.decode_kv, sh.context_tokens + sh.new_tokens
    flop_s = (4 * 15 * rank.heads * 256 * pairs + 6 * heads * 128 * 128 * 32) / attn_flops
    mem_s = (rank.kv_bytes_per_token * kv + 2 * rank.linear_state_bytes * 32) / bw
    assert cost.parts(sh)["attention"] == pytest.approx(max(flop_s, mem_s)
                                                        + 60 * p.attention_floor_s
                                                        + 45 * p.attention_floor_s)
    # A 4,096-token prefill adds the chunked form's in-chunk products.
    pre = shape_of([(4096, 0)])
    flops = (4 * 15 * rank.heads * 256 * pre.prefill_pairs
             + heads * (6 * 128 * 128 + 2 * GDN_CHUNK * 256) * 4096) / attn_flops
    mem = (rank.kv_bytes_per_token * 4096 + 2 * rank.linear_state_bytes) / bw
    assert cost.parts(pre)["attention"] == pytest.approx(max(flops, mem)
                                                         + 105 * p.attention_floor_s)
    # The linear layers' projections are priced with the rest; the twin without them
    # has softmax attention in all 60 layers.
    assert RooflineCost(twin, gpu, 8, p).step_time(sh) != cost.step_time(sh)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("mamba_ssm_dtype", "float16", r"mamba_ssm_dtype: got 'float16'; modelled: float32, "
                                   r"bfloat16"),
    ("mamba_ssm_dtype", ["float32"], r"mamba_ssm_dtype: got \['float32'\]; modelled: "),
    ("shared_expert_intermediate_size", 2048, r"shared_expert_intermediate_size: got 2048: "
                                              r"a shared expert is modelled at the routed "
                                              r"experts' width"),
    ("layer_types", ["linear_attention"] * 3, r"layer_types: expected a list of 60 entries"),
])
def test_config_errors_name_the_key(tmp_path: Path, key: str, value: object,
                                    message: str) -> None:
    cfg = json.loads(_config("qwen3.5-397b-a17b").read_text())
    cfg["text_config"][key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError, match=message):
        from_hf_config(path)


def test_a_wrapper_without_its_text_config_says_so(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen3_5_moe"}))
    with pytest.raises(ServesimError, match=r"text_config: got None: model_type "
                                            r"'qwen3_5_moe' wraps its language model's "
                                            r"config in text_config, a mapping"):
        from_hf_config(path)


def test_interval_stands_for_layer_types_and_fp8_release(tmp_path: Path) -> None:
    cfg = json.loads(_config("qwen3.5-397b-a17b").read_text())
    del cfg["text_config"]["layer_types"]  # every 4th layer full (full_attention_interval)
    cfg["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    got = from_hf_config(path)
    assert got.linear_layers == 45
    assert got.dtype == "fp8-block"
    fp8 = MODELS["qwen3.5-397b-a17b-fp8"]
    assert dataclasses.replace(got, name=fp8.name) == fp8


def test_spec_errors() -> None:
    with pytest.raises(ServesimError, match="linear_key_heads: got 16 without linear-attention"):
        dataclasses.replace(BIG, linear_layers=0)
    with pytest.raises(ServesimError, match="linear_layers: got 60, must be below layers"):
        dataclasses.replace(BIG, linear_layers=60)
    with pytest.raises(ServesimError, match="linear_value_heads=60 is not a multiple of "
                                            "linear_key_heads=16"):
        dataclasses.replace(BIG, linear_value_heads=60)


@pytest.mark.parametrize(("key", "value", "where"), [
    # (Prefix caching is modelled under vLLM's layout: tests/test_state_prefix.py.)
    ("serving.kv_offload", {"cpu_gb": 1, "write_policy": "write_through"},
     "serving.kv_offload"),
    ("serving.preemption", "swap", "serving.preemption"),
    ("hardware.pp", 2, "hardware.pp"),
])
def test_features_not_modelled_with_states_are_refused(key: str, value: object,
                                                       where: str) -> None:
    raw: dict = {"name": "q", "model": "qwen3.5-35b-a3b",
                 "hardware": {"gpu": "h200", "tp": 1}, "cost": "roofline",
                 "serving": {}, "workload": {
                     "concurrency": 2, "num_requests": 4,
                     "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                 "output": {"dist": "fixed", "value": 64}}}}
    section, _, name = key.partition(".")
    raw[section][name] = value
    with pytest.raises(ServesimError, match=rf"{where}: model qwen3.5-35b-a3b has 30 "
                                            "linear-attention \\(Gated DeltaNet\\) layers"):
        from_dict(raw)


@needs_tables
def test_tables_price_the_layer_as_measured() -> None:
    from sim.cost.tables.gdntable import gdn_times, with_linear_layers
    from sim.cost.tables.kerneltables import load_table
    from sim.cost.tables.profilebuild import BuildSpec, build_profile
    from sim.cost.tables.windowattn import ModelAttention

    rank = shard(BIG, 8)
    g = gdn_times("b200", "sglang", "0.5.14", BIG, rank)
    t = load_table("b200", "linear_attention", "sglang", "0.5.14", "gdn_perf").where(
        num_k_heads=2, num_v_heads=8, d_model=4096)

    def ms(phase: str, **at: int) -> float:
        rows = t.where(phase=phase, **at)
        assert len(rows) == 2  # the convolution and the delta rule
        return float(np.sum(rows.columns["latency"])) / 1e3

    assert g.prefill(1, 4096) == pytest.approx(ms("context", batch_size=1, seq_len=4096))
    assert g.step(64) == pytest.approx(ms("generation", batch_size=64))
    # Between measured lengths, joined linearly; past the largest batch, in proportion.
    mid = (ms("context", batch_size=1, seq_len=2048) + ms("context", batch_size=1,
                                                           seq_len=4096)) / 2
    assert g.prefill(1, 3072) == pytest.approx(mid)
    assert g.step(2048) == pytest.approx(2 * g.step(1024))
    # The layers' mean: 15 attention and 45 Gated DeltaNet layers of 60.
    grid = ((2.0, 4.0), (6.0, 8.0))
    from sim.cost.curves import Grid
    from sim.cost.tables.attntables import AttentionRows
    rows = AttentionRows(np.array([1.0, 64.0]), np.array([4096.0, 4096.0]),
                         np.array([0.01, 0.02]), "k", "n")
    att = ModelAttention(rows, rows, Grid((1.0, 64.0), (128.0, 4096.0), grid), np.array([]),
                         ())
    mean = with_linear_layers(att, g, BIG)
    assert mean.grid.values[1][0] == pytest.approx(0.25 * 6.0 + 0.75 * g.step(64))
    assert mean.prefill.seconds[0] == pytest.approx(0.25 * 0.01 + 0.75 * g.prefill(1, 4096))
    prof = build_profile(BuildSpec(BIG, "b200", "sglang", 8))
    assert any("Gated DeltaNet layers: gdn_perf" in n for n in prof["source"]["notes"])
    assert prof["model"]["linear_layers"] == 45


def test_calibrate_refuses_gated_deltanet_in_one_line() -> None:
    from calibrate.executor import check_timeable

    with pytest.raises(ServesimError, match=r"model.linear_layers: calibrate's torch model "
                                            r"has no linear-attention \(Gated DeltaNet\)"):
        check_timeable(MODELS["qwen3.5-27b"], "cuda")


def test_vllm_flag_sets_the_state_dtype() -> None:
    def model(value: str) -> ModelSpec:
        return from_dict({"name": "q", "model": "qwen3.5-35b-a3b", "cost": "roofline",
                          "hardware": {"gpu": "h200"},
                          "vllm": {"mamba-ssm-cache-dtype": value},
                          "workload": {"concurrency": 1, "num_requests": 1,
                                       "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                                   "output": {"dist": "fixed",
                                                              "value": 8}}}}).model

    assert model("bfloat16").linear_state_dtype == "bf16"
    assert model("auto").linear_state_dtype == "fp32"  # the checkpoint's mamba_ssm_dtype
    with pytest.raises(ServesimError, match="vllm.mamba-ssm-cache-dtype"):
        model("float16")


QROW = ("x,{source},sglang,0.5.9,Qwen/Qwen3.5-397B-A17B,{system},{label},agg,1024,1024,{conc},"
        "8,1,1,300,10,{mode}")


def _row(tmp_path: Path, system: str = "b200_sxm", label: str = "bf16", conc: int = 8,
         source: str = "source_file=qwen3.5-397b-gap-analysis.csv; silicon_concurrency=8"
         ) -> object:
    from conftest import silicon_csv

    from sim.validate.silicon import classify
    from sim.validate.siliconrows import read_rows

    mode = {"fp4": "nvfp4", "fp8": "fp8"}.get(label, "")
    line = QROW.format(source=source, system=system, label=label, conc=conc, mode=mode)
    return classify(read_rows(silicon_csv(tmp_path, [line], ("gemm_quant_mode",)))[0])


def test_public_rows_run_as_their_scripts_launched_them(tmp_path: Path) -> None:
    from sim.validate.silicon import Case
    from sim.validate.siliconrecipes import recipe, scenario_raw

    # AIConfigurator's gap-analysis file copies InferenceX's runs: priced as those.
    case = _row(tmp_path)
    assert isinstance(case, Case) and case.row.collection == "inferencex"
    assert (case.model, case.dtype, case.kv_dtype, case.state_dtype) == (
        "qwen3.5-397b-a17b", "bf16", "auto", "fp32")
    # B200 (qwen3.5_bf16_b200.sh): first chunk at 30 tokens, recv every 10 below 16
    # clients, 32,768-token prefill batches, 0.82 of memory, 128 running.
    assert recipe(case) == {"max_num_batched_tokens": 32768, "static_fraction": 0.82,
                            "max_running": 128, "stream_interval": 30,
                            "scheduler_recv_interval": 10}
    sv = scenario_raw(case)["serving"]
    # SGLang 0.5.9 holds the first token for the first chunk.
    assert (sv["stream_interval"], sv["stream_first_token"], sv["scheduler_recv_interval"],
            sv["max_num_batched_tokens"]) == (30, False, 10, 32768)
    # SGLang's state pool: 128 slots (the radix cache off), the KV pool the rest.
    rank = shard(BIG, 8)
    assert sv["max_num_seqs"] == 128
    static = 0.82 * GPUS["b200"].mem_bytes
    from sim.cost.memory import weight_bytes
    kv = static - weight_bytes(BIG, 8) - 128 * rank.linear_state_bytes
    assert sv["num_gpu_blocks"] == int(kv // rank.kv_bytes_per_token)
    # H200's FP8 script: bf16 states, an FP8 KV cache, chunks of 50 tokens.
    h200 = _row(tmp_path, "h200_sxm", "fp8")
    assert isinstance(h200, Case)
    assert (h200.dtype, h200.kv_dtype, h200.state_dtype) == ("fp8-block", "fp8", "bf16")
    raw = scenario_raw(h200)
    assert raw["model"]["linear_state_dtype"] == "bf16"
    assert raw["serving"]["stream_interval"] == 50
    # B300 rows take B200's settings.
    b300 = _row(tmp_path, "b300_sxm")
    assert isinstance(b300, Case) and recipe(b300) == recipe(case)
    # FP4 rows serve NVIDIA's NVFP4 checkpoint: NVFP4 routed experts, the rest bf16, an
    # FP8 KV cache (qwen3.5_fp4_b200.sh: 0.85 of memory, recv and stream intervals 30).
    fp4 = _row(tmp_path, "b200_sxm", "fp4")
    assert isinstance(fp4, Case)
    assert (fp4.dtype, fp4.expert_dtype, fp4.kv_dtype) == ("bf16", "nvfp4", "fp8")
    assert recipe(fp4) == {"max_num_batched_tokens": 32768, "static_fraction": 0.85,
                           "max_running": 128, "stream_interval": 30,
                           "scheduler_recv_interval": 30}


def test_sglang_state_pool_by_hand() -> None:
    from sim.validate.hybridruns import sglang_state_pool

    # A launch's --max-running-requests: that many slots, the rest to the KV pool.
    assert sglang_state_pool(1000.0, 10, 30, 2048) == (700.0, 30)
    # Its defaults: 0.9 / 1.9 of the room to states, a third of the slots running.
    kv, running = sglang_state_pool(1900.0, 10, None, 2048)
    assert (kv, running) == (pytest.approx(1000.0), 30)
    assert sglang_state_pool(1900.0, 10, None, 8)[1] == 8


def test_sglang_builds_before_0_5_10_hold_the_first_token() -> None:
    from sim.validate.siliconrecipes import sglang_first_token_waits

    assert [sglang_first_token_waits(v) for v in (
        "0.5.6.post2", "0.5.9", "nightly-dev", "nightly-dev-20260402-d7256eb6",
        "0.5.10.post1", "0.5.14", "")] == [True, True, True, True, False, False, False]


@pytest.mark.parametrize(("key", "value", "message"), [
    ("num_hidden_layers", 0, "text_config.num_hidden_layers: got 0, expected a whole number "
                             "of at least 1 and below 2**53"),
    ("vocab_size", "big", "text_config.vocab_size: got 'big', expected a number"),
    ("layer_types", ["full_attention"] * 3, "text_config.layer_types: expected a list of 60 "
                                            "entries"),
    ("rope_parameters", {"rope_type": "yarn"}, "text_config.rope_parameters.factor: absent "
                                               "or null; a yarn rope type needs a factor"),
])
def test_a_wrapped_configs_errors_name_the_text_config_path(
        tmp_path: Path, key: str, value: object, message: str) -> None:
    """A Qwen3.5 config has these keys only under text_config: the error says so (it had
    named num_hidden_layers, which the file's top level does not have)."""
    cfg = json.loads(_config("qwen3.5-397b-a17b").read_text())
    cfg["text_config"][key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_wrappers_own_quantization_config_keeps_its_path(tmp_path: Path) -> None:
    """The quantization_config beside text_config is named at the top level, as written."""
    cfg = json.loads(_config("qwen3.5-397b-a17b").read_text())
    cfg["quantization_config"] = {"quant_method": "nonesuch"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value).startswith(f"{path}: quantization_config")


@pytest.mark.parametrize(("change", "message"), [
    ({"layer_types": ["full_attention"] * 60},
     "text_config.layer_types: got 0 linear_attention and 60 full_attention layers: a "
     "qwen3_5_moe_text model is modelled with both kinds"),
    ({"layer_types": ["linear_attention"] * 60},
     "text_config.layer_types: got 60 linear_attention and 0 full_attention layers"),
    ({"layer_types": None, "full_attention_interval": 1},
     "text_config.full_attention_interval: got 1 (0 of the 60 layers linear_attention)"),
])
def test_layers_of_one_kind_are_refused_naming_the_config_key(
        tmp_path: Path, change: dict[str, object], message: str) -> None:
    """All softmax-attention or all Gated DeltaNet layers are refused naming the file's key
    and what it gave (the error had named servesim's linear_layers and linear_key_heads)."""
    cfg = json.loads(_config("qwen3.5-397b-a17b").read_text())
    cfg["text_config"].update(change)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value).startswith(f"{path}: {message}")
    assert "linear_key_heads" not in str(err.value)


def test_partial_rotary_factor_sizes_the_rotary_table(tmp_path: Path) -> None:
    """Qwen3.5 turns a quarter of each 256-wide head (rope_parameters' partial_rotary_factor
    0.25): its rotary cos/sin table is 262,144 x 64 x 2 B = 32 MiB a GPU, not 128."""
    from sim.cost.memory import rotary_table_bytes

    m = MODELS["qwen3.5-27b"]
    assert (m.rope_dim, m.rotary_dim) == (64, 64)
    assert rotary_table_bytes(m) == 262_144 * 64 * 2
    assert MODELS["minimax-m2.5"].rotary_dim == 64  # its rotary_dim key
    cfg = json.loads(_config("qwen3.5-27b").read_text())
    text = cfg["text_config"]
    del text["rope_parameters"]["partial_rotary_factor"]
    text["partial_rotary_factor"] = 0.5  # beside the other keys, as Qwen3-Next gives it
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert from_hf_config(path).rotary_dim == 128
    text["rope_parameters"]["partial_rotary_factor"] = 0.25
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError, match=r"text_config.rope_parameters.partial_rotary_"
                                            r"factor: got 0.25 beside partial_rotary_factor "
                                            r"0.5: which one"):
        from_hf_config(path)
    text["partial_rotary_factor"] = 0
    del text["rope_parameters"]["partial_rotary_factor"]
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError, match=r"text_config.partial_rotary_factor: got 0, "
                                            r"expected a number above 0 and at most 1"):
        from_hf_config(path)


def test_num_gpu_blocks_bound_counts_the_running_sequences_states() -> None:
    """Qwen3.5-27B on one H200: 81,920 blocks of 1 MiB (80 GiB) fit the 89.67 GiB beside
    the weights, but not beside the states of the 256 sequences that may run (256 x
    146.8 MiB = 36.70 GiB), set aside as SGLang does; 40,000 blocks fit and the memory
    line counts all 256 states. (Paged from the pool, vLLM's way, the blocks hold them.)"""
    raw: dict = {"name": "q", "model": "qwen3.5-27b", "hardware": {"gpu": "h200", "tp": 1},
                 "cost": "roofline",
                 "serving": {"policy": "chunked", "max_num_seqs": 256,
                             "num_gpu_blocks": 81_920, "linear_state_pool": "reserved"},
                 "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                              "lengths": {"prompt": {"dist": "fixed", "value": 100},
                                          "output": {"dist": "fixed", "value": 10}},
                              "num_requests": 2, "seed": 0}}
    with pytest.raises(ServesimError) as err:
        from_dict(raw)
    assert str(err.value).startswith(
        "<scenario>: serving.num_gpu_blocks: got 81920 blocks of 1048576 bytes, 80.00 GiB per "
        "GPU, more than the 52.97 GiB h200 has beside the weights and the linear-attention "
        "states of 256 sequences (serving.max_num_seqs) at 0.143 GiB each, 36.70 GiB")
    assert "give at most 54239 blocks, or lower serving.max_num_seqs" in str(err.value)
    raw["serving"]["num_gpu_blocks"] = 40_000
    from sim.report.summary import summarize

    mem = summarize(simulate(from_dict(raw)))["memory"]["both"]
    assert (mem["kv_blocks"], mem["linear_state_seqs"]) == (40_000, 256)
    assert mem["linear_state_gib"] == pytest.approx(256 * 153_944_064 / 2**30)
