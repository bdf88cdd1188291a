"""Measured profiles of gpt-oss: sliding-window layers' attention from the tables'
windowed rows (or full rows capped at the window), mxfp4 experts from the MoE tables,
the shipped gpt-oss profiles, and the public end-to-end rows of gpt-oss."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables, silicon_csv

from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.cost.tables.attntables import AttentionRows, decode_grid
from sim.cost.tables.windowattn import _capped, _mean_rows
from sim.errors import ServesimError


def _rows(batch: list[int], tokens: list[int], secs: list[float]) -> AttentionRows:
    return AttentionRows(np.array(batch, float), np.array(tokens, float), np.array(secs),
                         "k", "n")


def test_capped_rows_read_at_most_the_window() -> None:
    r = _rows([1, 1, 1, 1, 2, 2], [64, 128, 256, 512, 64, 192], [1.0, 2.0, 3.0, 4.0, 5.0, 7.0])
    dec = _capped(r, 128, decode=True)
    # A decode past the window reads the window: the time at 128 tokens (batch 2: joined
    # linearly between 64 and 192, 5 + (7 - 5) * 64 / 128 = 6).
    assert dec.seconds.tolist() == [1.0, 2.0, 2.0, 2.0, 5.0, 6.0]
    pre = _capped(r, 128, decode=False)
    # A 512-token chunk is four 128-token ones; 192 tokens is 1.5 of them.
    assert pre.seconds.tolist() == [1.0, 2.0, 4.0, 8.0, 5.0, 9.0]


def test_mean_rows_weight_the_layers_at_common_points() -> None:
    a = _rows([1, 1, 2], [16, 32, 16], [1.0, 2.0, 3.0])
    b = _rows([1, 2, 4], [16, 16, 16], [5.0, 7.0, 9.0])
    m = _mean_rows(a, b, 0.75, 0.25)
    assert m.batch.tolist() == [1.0, 2.0] and m.tokens.tolist() == [16.0, 16.0]
    assert m.seconds.tolist() == [0.75 * 1 + 0.25 * 5, 0.75 * 3 + 0.25 * 7]


def test_windowed_decode_grid_is_flat_past_its_last_measured_context() -> None:
    # Batch 2 was measured to 256 tokens only: past it a window-128 layer still reads
    # 128 tokens (flat), a dense one reads in proportion (twice at 512, four times at 1024).
    r = _rows([1, 1, 1, 1, 2, 2], [128, 256, 512, 1024, 128, 256],
              [1.0, 1.5, 1.5, 1.5, 2.0, 3.0])
    assert decode_grid(r, 128).values[1] == (2.0, 3.0, 3.0, 3.0)
    assert decode_grid(r).values[1] == (2.0, 3.0, 6.0, 12.0)
    # Measured only up to the window: past it, in proportion to the read up to the window.
    short = _rows([1, 1, 2], [64, 256, 64], [1.0, 2.0, 1.0])
    assert decode_grid(short, 128).values[1] == (1.0, 2.0)


@pytest.fixture(scope="module")
def h200_120b() -> dict:
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    return build_profile(BuildSpec(MODELS["gpt-oss-120b"], "h200", "vllm", 1))


def _table_ms(name: str, window: int, batch: int, col: str, value: int) -> float:
    """One measured latency (ms) of the H200 vLLM 0.24.0 attention tables at gpt-oss's
    64 query and 8 KV heads of 64, bf16 KV cache."""
    from sim.cost.tables.profileparts import attention_table

    t = attention_table("h200", "vllm", "0.24.0", name).where(
        num_heads=64, num_key_value_heads=8, head_dim=64, kv_cache_dtype="bfloat16",
        window_size=window, beam_width=1, batch_size=batch, kernel_source="vllm_flash_attn_fa3")
    t = t.where(**{col: value})
    assert len(t) == 1
    return float(t.columns["latency"][0])


@needs_tables
def test_decode_grid_is_the_layers_mean_of_full_and_window_rows(h200_120b: dict) -> None:
    g = h200_120b["components"]["decode_attention"]["grid"]
    seqs, kv, s = g["seqs"], g["kv_per_seq"], g["s"]
    # 64 entries at 1,024 cached tokens (the tables' step 1023, KV 1,024 with the new one):
    # half the layers full, half window-128.
    i, j = seqs.index(64.0), kv.index(1024.0)
    want = 0.5 * (_table_ms("generation_attention_perf", 0, 64, "step", 1023)
                  + _table_ms("generation_attention_perf", 128, 64, "step", 1023)) / 1e3
    assert s[i][j] == pytest.approx(want, rel=1e-5)
    # The column at the model's 131,072-token context: the full half grows in proportion
    # from 65,536 tokens, the sliding half stays where it was.
    assert kv[-1] == 131072.0 and kv[-2] == 65536.0
    full = _table_ms("generation_attention_perf", 0, 1, "step", 65535)
    slid = _table_ms("generation_attention_perf", 128, 1, "step", 65535)
    assert s[0][-1] == pytest.approx(0.5 * (2 * full + slid) / 1e3, rel=1e-5)
    notes = h200_120b["source"]["notes"]
    assert ("sliding-window layers (18 of 36, window 128): the tables' window-128 rows; "
            "attention per layer is the mean of 18 full and 18 sliding layers") in notes
    assert any(n.startswith("attention sinks") and "not timed" in n for n in notes)


@needs_tables
def test_prefill_fit_follows_the_mean_rows(h200_120b: dict) -> None:
    """The prefill formula, fitted on the layers' mean rows, prices one 8,192-token
    prompt within its held-out error of the mean of the two measured rows."""
    from sim.cost.profile import FORMS
    from sim.cost.shape import shape_of

    comp = h200_120b["components"]["prefill_attention"]
    assert comp["fit"]["mape_test"] < 0.15
    want = 0.5 * (_table_ms("context_attention_perf", 0, 1, "isl", 8192)
                  + _table_ms("context_attention_perf", 128, 1, "isl", 8192)) / 1e3
    got = FORMS["prefill_attention"].evaluate(comp["coef"], shape_of([(8192, 0)]))
    assert float(got) == pytest.approx(want, rel=0.15)
    # The window halves the whole model's attention at that length, near enough: the
    # sliding rows cost a sixth of the full ones there.
    full = _table_ms("context_attention_perf", 0, 1, "isl", 8192)
    assert _table_ms("context_attention_perf", 128, 1, "isl", 8192) < full / 6


@needs_tables
def test_experts_come_from_the_mxfp4_moe_rows(h200_120b: dict) -> None:
    src = h200_120b["source"]
    assert src["kernels"]["moe"] == "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
    assert any(n.startswith("MoE layer: vllm_gptossmxfp4moe_triton_"
                            "oaitritonmxfp4expertsmonolithic, w4a16_mxfp4, "
                            "power_law_1.2 routing, tp 1") for n in src["notes"])
    assert src["phrase"] == ("measured kernels: vLLM 0.24.0 on H200-SXM; mxfp4 experts, "
                             "weight-only (w4a16)")


@needs_tables
def test_a_window_the_tables_lack_is_full_rows_capped_and_said_so() -> None:
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    odd = dataclasses.replace(MODELS["gpt-oss-20b"], sliding_window=256, name="odd")
    p = build_profile(BuildSpec(odd, "h200", "vllm", 1))
    assert ("sliding-window layers (12 of 24, window 256): no window-256 rows (windows "
            "measured: 128, 1024, 8192); full-attention rows capped at the window; attention "
            "per layer is the mean of 12 full and 12 sliding layers") in p["source"]["notes"]
    g = p["components"]["decode_attention"]["grid"]
    j = g["kv_per_seq"].index(4096.0)
    k = g["kv_per_seq"].index(256.0)
    full = _table_ms("generation_attention_perf", 0, 1, "step", 4095) / 1e3
    at_window = _table_ms("generation_attention_perf", 0, 1, "step", 255) / 1e3
    assert g["s"][0][j] == pytest.approx(0.5 * (full + at_window), rel=1e-5)
    assert g["s"][0][k] == pytest.approx(at_window, rel=1e-5)


@needs_tables
@pytest.mark.parametrize(("gpu", "model", "tp", "framework"), [
    ("h200", "gpt-oss-120b", 1, "vllm"), ("b200", "gpt-oss-20b", 2, "sglang"),
    ("h100-sxm", "gpt-oss-120b", 8, "sglang")])
def test_a_rebuild_equals_the_shipped_gpt_oss_profile(gpu: str, model: str, tp: int,
                                                      framework: str) -> None:
    from sim.cost.profilefile import PROFILE_DIR
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile, profile_name

    spec = BuildSpec(MODELS[model], gpu, framework, tp)
    path = PROFILE_DIR / f"{profile_name(spec)}.yaml"
    assert profile_text(build_profile(spec)) == path.read_text(encoding="utf-8")


def test_cost_measured_picks_the_gpt_oss_profile_and_sliding_is_cheaper() -> None:
    from sim.config.scenario import from_dict
    from sim.core.engine import build_cost, simulate
    from sim.cost.measured import find, shipped
    from sim.cost.models import unwrapped
    from sim.cost.shape import decode_shape
    from sim.report.summary import summarize

    names = {s.stem for s in shipped() if s.model.startswith("gpt-oss")}
    assert len(names) == 42 and "rtx-pro-6000-gpt-oss-120b-tp1-vllm" in names
    assert find(MODELS["gpt-oss-120b"], "h200", 4, "sglang") == "h200-gpt-oss-120b-tp4-sglang"
    sc = from_dict({"model": "gpt-oss-120b", "hardware": {"gpu": "h200"}, "cost": "measured",
                    "workload": {"arrivals": {"process": "poisson", "rate": 4.0},
                                 "num_requests": 20,
                                 "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                             "output": {"dist": "fixed", "value": 16}}}})
    cost = build_cost(sc)
    assert cost.source.endswith("mxfp4 experts, weight-only (w4a16); steps over 512 tokens "
                                "without CUDA graphs; async scheduling")
    assert summarize(simulate(sc))["requests"]["finished"] == 20
    # Past the window a decode's attention grows with the full layers only.
    a8, a16 = (unwrapped(cost).breakdown(decode_shape(8, 8 * n))["decode_attention"]
               for n in (8192, 16384))
    assert a8 < a16 < 2 * a8
    with pytest.raises(ServesimError, match="no measured profile for gpt-oss-120b at tp=2 "
                                            "under vllm on l40s"):
        find(MODELS["gpt-oss-120b"], "l40s", 2, "vllm")


@needs_tables
def test_a_decode_step_prices_half_its_layers_at_the_window() -> None:
    from sim.cost.profilefile import load_profile
    from sim.cost.shape import decode_shape

    cost = load_profile("h200-gpt-oss-120b-tp1-vllm")
    got = cost.breakdown(decode_shape(8, 8 * 16384))["decode_attention"]
    full = _table_ms("generation_attention_perf", 0, 8, "step", 16383) / 1e3
    slid = _table_ms("generation_attention_perf", 128, 8, "step", 16383) / 1e3
    # 18 full layers and 18 window-128 ones; the window's row is a fifth of the full one.
    # (The shape's KV counts the new token: 16,385 a sequence, 1/16,384 past the column.)
    assert got == pytest.approx(18 * full + 18 * slid, rel=1e-4)
    assert slid < full / 4


def test_silicon_gpt_oss_rows_are_held_out_and_others_named(tmp_path: Path) -> None:
    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrows import read_rows

    path = silicon_csv(tmp_path, [
        "a,x,vllm,0.18.0,openai/gpt-oss-120b,h200_sxm,fp4,agg,1024,1024,4,2,1,1,90,5,nvfp4,2,1",
        "b,x,trtllm,dev,openai/gpt-oss-120b,h200_sxm,fp4,agg,1024,1024,4,4,1,1,90,5,nvfp4,2,2",
        "c,x,trtllm,1.3,openai/gpt-oss-120b,h100_sxm,fp8,agg,1024,1024,4,4,1,,90,5,fp8,4,1",
        "d,x,trtllm,0.7,openai/gpt-oss-120b,gb200,fp4,disagg,1024,1024,4,4,1,1,90,5,nvfp4,4,1",
    ], ("gemm_quant_mode", "moe_tp_size", "moe_ep_size"))
    a, b, c, d = (classify(r) for r in read_rows(path))
    assert isinstance(a, Case) and (a.model, a.dtype, a.spec.expert_dtype) == (
        "gpt-oss-120b", "bf16", "mxfp4")
    # Every gpt-oss row is held out: nothing is fitted on 4-bit experts.
    assert a.held_out
    assert b == ("experts split other than by tensor parallelism or by expert parallelism "
                 "over the tp GPUs (tp 4, expert tp 2, expert parallelism 2)")
    assert c == "fp8 weights of openai/gpt-oss-120b: servesim models its released mxfp4 experts"
    assert d == "disaggregated serving (prefill and decode pools of their own)"


@needs_tables
def test_silicon_rows_the_moe_tables_lack_are_named(tmp_path: Path) -> None:
    from sim.cost.tables.kerneltables import coverage
    from sim.validate.silicon import Case, tables_cover
    from sim.validate.siliconrows import Row

    row = Row("x", 2, "trtllm", "1.2", "openai/gpt-oss-120b", "h200_sxm", "fp4", "agg", 1024,
              1024, 4, 2, 1, 1, 90.0, 5.0)
    newest = coverage()["h200"]["trtllm"][-1]
    case = Case(row, "gpt-oss-120b", "h200", "trtllm")
    assert tables_cover(case) == (f"gpt-oss-120b's MoE layer is not in the trtllm {newest} "
                                  "tables at tp 2")
    ok = Case(dataclasses.replace(row, backend="vllm"), "gpt-oss-120b", "h200", "vllm")
    assert tables_cover(ok) is ok


def test_silicon_summary_keeps_4bit_rows_apart() -> None:
    from sim.validate.siliconfit import group, summary

    base = {"framework": "vllm", "dtype": "bf16", "split": "test", "ttft_err": 0.1,
            "tpot_err": -0.2}
    recs = [base, {**base, "expert_dtype": "mxfp4", "ttft_err": 0.5, "tpot_err": 0.3}]
    assert [group(r) for r in recs] == ["vllm", "vllm mxfp4"]
    s = summary(recs)
    assert list(s) == ["vllm", "vllm mxfp4", "all", "all mxfp4"]
    assert s["all"]["test"]["ttft"]["median"] == pytest.approx(0.1)
    assert s["all mxfp4"]["test"]["tpot"]["median"] == pytest.approx(0.3)


def test_shard_of_gpt_oss_splits_at_every_shipped_tp() -> None:
    for tp in (1, 2, 4, 8):
        r = shard(MODELS["gpt-oss-120b"], tp)
        assert (r.heads, r.kv_heads, r.expert_intermediate) == (64 // tp, 8 // tp, 2880 // tp)


def test_mxfp4_experts_take_mxfp8_activations_where_the_framework_does() -> None:
    from sim.cost.tables.moetable import table_moe_dtype

    # TensorRT-LLM and SGLang quantise the activations to MXFP8 on Blackwell; vLLM keeps
    # bf16 there; every framework keeps bf16 on Hopper. Other dtypes are not affected.
    assert table_moe_dtype("mxfp4", "trtllm", "b200") == "w4a8_mxfp4_mxfp8"
    assert table_moe_dtype("mxfp4", "sglang", "gb200") == "w4a8_mxfp4_mxfp8"
    assert table_moe_dtype("mxfp4", "vllm", "b200") == "w4a16_mxfp4"
    assert table_moe_dtype("mxfp4", "trtllm", "h200") == "w4a16_mxfp4"
    assert table_moe_dtype("nvfp4", "trtllm", "b200") == "nvfp4"
    assert table_moe_dtype("fp4", "trtllm", "b200") is None


@needs_tables
def test_tensorrt_llm_on_b200_prices_gpt_oss_experts_at_mxfp8_activations() -> None:
    from sim.cost.tables.moetable import moe_times
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    m = MODELS["gpt-oss-120b"]
    p = build_profile(BuildSpec(m, "b200", "trtllm", 1))
    assert p["source"]["phrase"].endswith("mxfp4 experts, mxfp8 activations (w4a8)")
    assert ", w4a8_mxfp4_mxfp8, power_law_1.2 routing, tp 1" in p["source"]["notes"][0]
    version = p["source"]["version"]
    moe = moe_times("b200", "trtllm", version, m, 1)
    # The w4a8 rows, read as they are: at 4 tokens the tables time them 3.6x faster than
    # the w4a16 rows (0.0499 against 0.1777 ms, 1.3.0rc20).
    want = _moe_ms("b200", "trtllm", version, "w4a8_mxfp4_mxfp8", 4) / 1e3
    assert float(moe.at(np.array([4.0]))[0]) == pytest.approx(want, rel=1e-9)
    assert _moe_ms("b200", "trtllm", version, "w4a16_mxfp4", 4) > 3 * want * 1e3


def _moe_ms(gpu: str, framework: str, version: str, dtype: str, tokens: int) -> float:
    """The median of the public MoE table's gpt-oss-120b rows at ``tokens`` (ms)."""
    from sim.cost.tables.kerneltables import load_table

    t = load_table(gpu, "moe", framework, version, "moe_perf")
    rows = t.where(hidden_size=2880, num_experts=128, topk=4, moe_tp_size=1, moe_ep_size=1,
                   distribution="power_law_1.2", moe_dtype=dtype, num_tokens=tokens)
    return float(np.median(np.asarray(rows.columns["latency"])))


def test_silicon_gpt_oss_tensorrt_llm_rows_take_their_recipe(tmp_path: Path) -> None:
    from sim.validate.silicon import classify
    from sim.validate.siliconrecipes import recipe, scenario_raw
    from sim.validate.siliconrows import read_rows

    path = silicon_csv(tmp_path, [
        "a,db-dump,trtllm,1.2.0rc2,openai/gpt-oss-120b,b200_sxm,fp4,agg,8192,1024,64,1,1,1,90,5,"
        "nvfp4,1,1",
        "b,db-dump,trtllm,dev,openai/gpt-oss-120b,h200_sxm,fp4,agg,8192,1024,64,1,1,1,90,5,"
        "nvfp4,1,1",
    ], ("gemm_quant_mode", "moe_tp_size", "moe_ep_size"))
    b200, h200 = (classify(r) for r in read_rows(path))
    assert not isinstance(b200, str) and not isinstance(h200, str)
    # gptoss_fp4_{b200,h200}_trt.sh: 20,000 batched tokens, 0.85 of free memory for KV,
    # stream_interval 20; an FP8 KV cache on B200 only.
    assert recipe(b200) == recipe(h200) == {"max_num_batched_tokens": 20000,
                                            "free_fraction": 0.85, "stream_interval": 20}
    assert (b200.kv_dtype, h200.kv_dtype) == ("fp8", "auto")
    serving = scenario_raw(b200)["serving"]
    assert (serving["max_num_batched_tokens"], serving["stream_interval"]) == (20000, 20)


@needs_tables
def test_the_mxfp8_backend_borrows_sglangs_rows_where_vllms_lack_them() -> None:
    from sim.cost.tables.moetable import moe_times
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    m = MODELS["gpt-oss-120b"]
    # vLLM 0.24.0's B200 tables time gpt-oss's experts at bf16 activations only: MXFP8
    # activations (VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1) come from SGLang's rows of the
    # same FlashInfer kernel, the note naming them.
    got = moe_times("b200", "vllm", "0.24.0", m, 1, backend="mxfp8")
    assert got.kernel == "sglang_flashinfer_trtllm_moe"
    # (SGLang 0.5.16's tables, the newest, do not time gpt-oss's shape: 0.5.14's do.)
    assert got.note.endswith("(the sglang 0.5.14 tables': vllm's up to 0.24.0 time no "
                             "w4a8_mxfp4_mxfp8 rows for it)")
    plain = moe_times("b200", "vllm", "0.24.0", m, 1)
    assert "w4a16_mxfp4" in plain.note
    assert float(got.at(np.array([8192.0]))[0]) < 0.5 * float(plain.at(np.array([8192.0]))[0])
    p = build_profile(BuildSpec(m, "b200", "vllm", 1, moe_backend="mxfp8"))
    assert p["source"]["phrase"].endswith("mxfp4 experts, mxfp8 activations (w4a8)")
    with pytest.raises(ServesimError, match="got 'mxfp8' for nvfp4 experts"):
        moe_times("b200", "vllm", "0.24.0",
                  dataclasses.replace(m, expert_dtype="nvfp4"), 1, backend="mxfp8")
