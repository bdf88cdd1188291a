"""Kimi-K2.5: the preset against its release's config.json (a multimodal wrapper around a
DeepSeek-V3-shaped decoder with int4 experts) and model card, and its public end-to-end
rows: the int4 release simulated, rows labelled fp4 (NVFP4 GEMMs) named as not modelled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables, silicon_csv

from sim.cost.hfconfig import from_hf_config
from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.validate.silicon import Case, classify
from sim.validate.siliconfit import weights
from sim.validate.siliconrows import read_rows

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "sim" / "data" / "models" / "kimi-k2.5" / "config.json"
K = MODELS["kimi-k2.5"]


def test_preset_is_the_release_config() -> None:
    # The wrapper's text_config is read: latent attention at 64 heads, 384 experts, int4
    # experts from the compressed-tensors config (attention and the rest left bf16).
    assert from_hf_config(CONFIG) == K
    assert (K.heads, K.experts, K.dense_layers, K.dtype, K.expert_dtype, K.mla) == (
        64, 384, 1, "bf16", "int4", True)


def test_sizes_match_the_model_card() -> None:
    # Card: 1.04T total, 32B activated (the latter without the embedding table).
    assert K.params == pytest.approx(1.04e12, rel=0.015)
    assert K.active_params - K.embedding_params == pytest.approx(32e9, rel=0.02)
    # 64 heads over tp 8: 8 a GPU; the latent is whole on every GPU, as DeepSeek-V3's.
    assert shard(K, 8).heads == 8
    assert K.kv_bytes_per_token == MODELS["deepseek-v3"].kv_bytes_per_token


ROW = ("x,source_file=2026-04-06.csv; model=Kimi-K2.5,vllm,0.15.1,moonshotai/Kimi-K2.5,"
       "b200_sxm,{label},agg,1024,1024,8,8,1,1,140,12")


def test_int4_rows_are_simulated_and_nvfp4_ones_named(tmp_path: Path) -> None:
    case = classify(read_rows(silicon_csv(tmp_path, [ROW.format(label="int4")]))[0])
    assert isinstance(case, Case) and case.model == "kimi-k2.5"
    assert case.spec.expert_dtype == "int4"
    fp4 = classify(read_rows(silicon_csv(tmp_path, [ROW.format(label="fp4")]))[0])
    assert fp4 == ("fp4 weights of moonshotai/Kimi-K2.5: servesim models its released int4 "
                   "experts")
    # With NVFP4 GEMMs: nvidia/Kimi-K2.5-NVFP4, bf16 attention, NVFP4 experts, FP8 KV.
    nv = classify(read_rows(silicon_csv(tmp_path, [ROW.format(label="fp4") + ",nvfp4"],
                                        ("gemm_quant_mode",)))[0])
    assert isinstance(nv, Case) and (nv.dtype, nv.spec.expert_dtype, nv.kv_dtype) == (
        "bf16", "nvfp4", "fp8")
    assert nv.moe_backend == "auto" and weights(nv) == "4bit"
    # Its rows labelled attention-data-parallel ran tp with expert parallelism, their
    # batch_size one rank's share of the clients.
    dep = ("x,source_file=2026-04-06.csv; model=Kimi-K2.5,vllm,0.17.0,moonshotai/Kimi-K2.5,"
           "b200_sxm,fp4,agg,1024,1024,8,4,1,4,140,12,nvfp4,1,16")
    d = classify(read_rows(silicon_csv(tmp_path, [dep], ("gemm_quant_mode", "moe_tp_size",
                                                         "moe_ep_size")))[0])
    assert isinstance(d, Case) and (d.tp, d.ep, d.dp, d.row.concurrency) == (4, 4, 1, 32)


@needs_tables
def test_vllm_profile_reads_the_marlin_int4_experts_and_the_modules() -> None:
    from sim.cost.measured import find
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    assert find(K, "h200", 8, "vllm") == "h200-kimi-k2.5-tp8-vllm"
    data = build_profile(BuildSpec(K, "h200", "vllm", 8))
    notes = " ".join(data["source"]["notes"])
    assert "marlin" in data["source"]["kernels"]["moe"] and "int4_wo" in notes
    assert "whole-module rows" in notes and "8 heads measured" in notes
    assert "0 of 54 prefill and 0 of 184 decode points" in notes


@needs_tables
def test_hf_config_of_nvidias_nvfp4_kimi(tmp_path: Path) -> None:
    # nvidia/Kimi-K2.5-NVFP4's config.json as aiconfigurator-core ships it: every layer's
    # self_attn* ignored (bf16 attention), NVFP4 experts, an 8-bit float KV-cache scheme,
    # which vLLM's --kv-cache-dtype auto takes as FP8.
    import aiconfigurator_core

    src = (Path(aiconfigurator_core.__file__).parent / "model_configs"
           / "nvidia--Kimi-K2.5-NVFP4_config.json")
    path = tmp_path / "config.json"
    path.write_text(src.read_text())
    spec = from_hf_config(path)
    assert (spec.dtype, spec.expert_dtype, spec.qkv_dtype, spec.kv_dtype) == (
        "bf16", "nvfp4", "", "fp8")


@needs_tables
def test_vllm_b300_latent_attention_reads_b200s_module_rows() -> None:
    # vLLM 0.24.0's B300 whole-module MLA rows are about twice its B200 ones where the
    # other frameworks' MLA kernels time the two GPUs alike: a B300 build takes B200's
    # rows less B200's projection prices, so its attention terms equal B200's.
    from sim.cost.tables.gemmtable import projection_gemms
    from sim.cost.tables.layergemms import attention_gemms
    from sim.cost.tables.mlaattn import mla_attention

    rank = shard(K, 4)
    att = {g: mla_attention(g, "vllm", "0.24.0", K, rank, "fp8",
                            projection_gemms(g, "vllm", "0.24.0", "bf16")[0].table,
                            attention_gemms(rank)) for g in ("b200", "b300")}
    np.testing.assert_array_equal(np.asarray(att["b300"].grid.values),
                                  np.asarray(att["b200"].grid.values))
    np.testing.assert_array_equal(att["b300"].prefill.seconds, att["b200"].prefill.seconds)
    assert att["b300"].notes[0].endswith(
        "b300's module rows are inconsistent with its other tables (sim/cost/tables/"
        "mlaattn.py, MODULE_DONORS): b200's rows of the same release, less their "
        "projections at b200's GEMM prices")
    assert "MODULE_DONORS" not in att["b200"].notes[0]
