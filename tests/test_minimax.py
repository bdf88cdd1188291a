"""MiniMax-M2.5: the preset against its release's config.json and model card, the
HuggingFace import of its family, and its public end-to-end rows as their recipes ran."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from conftest import needs_tables, silicon_csv

from sim.cost.hfconfig import from_hf_config
from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify
from sim.validate.siliconrecipes import recipe, scenario_raw
from sim.validate.siliconrows import read_rows

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "sim" / "data" / "models" / "minimax-m2.5" / "config.json"
M = MODELS["minimax-m2.5"]


def test_preset_is_the_release_config() -> None:
    got = from_hf_config(CONFIG)
    assert got == M
    # Block-scaled FP8 from quantization_config; every layer 256 experts of width 1536.
    assert (M.dtype, M.experts, M.experts_per_token, M.expert_intermediate, M.dense_layers,
            M.shared_experts) == ("fp8-block", 256, 8, 1536, 0, 0)


def test_sizes_match_the_model_card() -> None:
    # Card: 230B total, 10B activated. The active count here includes the embedding
    # table (0.61B) and the LM head (0.61B); without them, attention, router and 8
    # experts a layer are 9.80B, which the card rounds to 10B.
    assert M.params == pytest.approx(230e9, rel=0.01)
    per_layer = (3072 * 48 * 128 + 2 * 3072 * 8 * 128 + 48 * 128 * 3072  # q, k, v, o
                 + 3072 * 256  # router
                 + 8 * 3 * 3072 * 1536)  # 8 experts' gate, up and down
    assert M.active_params - 2 * M.embedding_params == pytest.approx(62 * per_layer, rel=1e-3)
    assert 62 * per_layer == pytest.approx(10e9, rel=0.03)
    # 48 query heads split over tp 4, 8 KV heads: 12 and 2 a GPU.
    rank = shard(M, 4)
    assert (rank.heads, rank.kv_heads) == (12, 2)


def test_shared_experts_are_refused_in_one_line(tmp_path: Path) -> None:
    cfg = json.loads(CONFIG.read_text())
    cfg["shared_intermediate_size"] = 1536
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError, match=r"shared_intermediate_size: got 1536: MiniMax "
                                            r"shared experts are not modelled \(0\)"):
        from_hf_config(path)


ROW = ("x,source_file=2026-04-06.csv; model=MiniMax-M2.5,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,"
       "{system},{label},agg,1024,1024,16,{tp},1,1,80,10")


@pytest.mark.parametrize(("system", "memory"), [("b200_sxm", 0.95), ("b300_sxm", 0.95),
                                                ("h200_sxm", 0.95), ("h100_sxm", 0.9)])
def test_rows_run_at_their_recipes_memory(tmp_path: Path, system: str, memory: float) -> None:
    line = ROW.format(system=system, label="fp8", tp=4)
    case = classify(read_rows(silicon_csv(tmp_path, [line]))[0])
    assert isinstance(case, Case) and (case.model, case.dtype) == ("minimax-m2.5", "fp8-block")
    # The H100 recipe also caps the running batch (--max-num-seqs 256), which sizes the
    # sampler's profiling peak and so the KV cache.
    seqs = {"max_num_seqs": 256} if system == "h100_sxm" else {}
    assert recipe(case) == {"memory_utilization": memory, **seqs}
    assert scenario_raw(case)["hardware"]["memory_utilization"] == memory
    assert scenario_raw(case)["serving"]["max_num_seqs"] == seqs.get("max_num_seqs", 1024)
    fp4 = ROW.format(system=system, label="fp4", tp=4)
    assert str(classify(read_rows(silicon_csv(tmp_path, [fp4]))[0])).startswith("fp4 weights")


@needs_tables
def test_measured_profile_prices_its_experts_from_the_moe_tables() -> None:
    from sim.cost.measured import find
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    assert find(dataclasses.replace(M, name="m"), "h200", 2, "vllm") == \
        "h200-minimax-m2.5-tp2-vllm"
    data = build_profile(BuildSpec(M, "b200", "vllm", 4))
    notes = " ".join(data["source"]["notes"])
    assert "MoE layer:" in notes and "fp8_block" in notes and "tp 4" in notes


@needs_tables
def test_linear_knot_is_projections_experts_and_router_by_hand() -> None:
    """One token's linear term on 4 B200s under vLLM: the three attention projections
    (block-FP8, from SGLang's DeepGEMM rows: sim/cost/tables/gemmtable.py), the MoE
    tables' layer, the router GEMM the MoE tables leave out (n = 256 experts, k = 3072,
    bf16), and the layer's memory-bound kernels, one more for the query/key norm over all
    heads, split around its all-reduce under tp."""
    import numpy as np

    from sim.cost.tables.gemmtable import projection_gemms
    from sim.cost.tables.layergemms import attention_gemms
    from sim.cost.tables.moetable import moe_times
    from sim.cost.tables.profilebuild import BuildSpec, build_profile
    from sim.cost.tables.profileparts import LAYER_ELEMENTWISE_KERNELS

    data = build_profile(BuildSpec(M, "b200", "vllm", 4))
    rank = shard(M, 4)
    proj = projection_gemms("b200", "vllm", "0.24.0", "fp8-block")[0].table
    bf16 = projection_gemms("b200", "vllm", "0.24.0", "bf16")[0].table  # SGLang's rows
    experts = float(moe_times("b200", "vllm", "0.24.0", M, 4, 1).at(np.array([1.0]))[0])
    src = data["source"]["derived"]
    width = 8 * 1536 // 4  # 8 experts a token, each a quarter on this GPU
    elementwise = 2 * (8 * 3072 + 2 * (12 + 2) * 128 + 4 * 2 * 128 + 3 * width)
    want = (sum(proj.at(1, n, k) for n, k in attention_gemms(rank)) + experts
            + bf16.at(1, 256, 3072) + (LAYER_ELEMENTWISE_KERNELS + 1) * src["kernel_floor_s"]
            + elementwise / src["bandwidth_bytes_s"])
    lin = data["components"]["linear"]
    assert lin["table_s"][lin["table_at"].index(1)] == pytest.approx(want, rel=2e-5)
    assert any(n.startswith("router GEMM (n=256, k=3072, bf16)") for n in
               data["source"]["notes"])


@pytest.mark.parametrize(("norm", "layer_wide"), [("per_layer", True), ("per_head", False)])
def test_qk_norm_type_sets_the_layer_wide_norm(tmp_path: Path, norm: str,
                                               layer_wide: bool) -> None:
    cfg = json.loads(CONFIG.read_text())
    cfg["qk_norm_type"] = norm
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert from_hf_config(path).layer_qk_norm is layer_wide
    cfg["qk_norm_type"] = "per_token"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ServesimError, match=r"qk_norm_type: got 'per_token'; modelled: "
                                            r"per_layer"):
        from_hf_config(path)


@pytest.mark.parametrize("tp", [1, 4])
def test_roofline_adds_the_norms_all_reduce_by_hand(tp: int) -> None:
    """Per layer under tp: one ring all-reduce of 8 bytes a token (latency plus
    2(tp-1)/tp of the bytes over the link) and one more kernel floor; nothing at tp 1."""
    from sim.cost.gpus import GPUS
    from sim.cost.roofline import RooflineCost, RooflineParams
    from sim.cost.shape import decode_shape

    gpu, params = GPUS["h200"], RooflineParams()
    shape = decode_shape(16, 16 * 1000)
    with_norm = RooflineCost(M, gpu, tp, params).parts(shape)
    without = RooflineCost(dataclasses.replace(M, layer_qk_norm=False), gpu, tp,
                           params).parts(shape)
    extra = {k: with_norm[k] - without[k] for k in with_norm}
    if tp == 1:
        assert extra == dict.fromkeys(extra, 0.0)
        return
    link_bw, link_s = gpu.tp_link(tp)
    assert extra["allreduce"] == pytest.approx(62 * (link_s + 2 * 3 / 4 * 8 * 16 / link_bw),
                                               rel=1e-9)
    assert extra["linear"] == pytest.approx(62 * params.kernel_floor_s, rel=1e-9)
    assert extra["attention"] == extra["lm_head"] == extra["overhead"] == 0.0


@needs_tables
def test_measured_profile_adds_the_norms_all_reduce_from_the_tables() -> None:
    import numpy as np

    from sim.cost.tables.commtable import load_collectives
    from sim.cost.tables.profilebuild import BuildSpec, build_profile
    from sim.cost.tables.profileparts import GRAPH_TOKENS

    def knots(model: object) -> tuple[np.ndarray, np.ndarray]:
        ar = build_profile(BuildSpec(model, "b200", "vllm", 4))["components"]["allreduce"]
        return np.array(ar["table_at"], float), np.array(ar["table_s"])

    ms, with_norm = knots(M)
    ms2, without = knots(dataclasses.replace(M, layer_qk_norm=False))
    assert ms.tolist() == ms2.tolist()
    comm = load_collectives("b200", "vllm", "0.24.0", 4)
    want = 62 * comm.allreduce(ms * 8, ms <= GRAPH_TOKENS["vllm"])
    assert with_norm - without == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize(("system", "backend"), [("b200_sxm", "triton"), ("b300_sxm", "triton"),
                                                 ("h200_sxm", "triton"), ("h100_sxm", "auto")])
def test_rows_run_the_moe_kernel_their_recipe_forces(tmp_path: Path, system: str,
                                                     backend: str) -> None:
    # minimaxm2.5_fp8_b200.sh turns FlashInfer's FP8 MoE and DeepGEMM off, the H200 recipe
    # passes --moe-backend triton; the H100 recipe leaves vLLM's default.
    case = classify(read_rows(silicon_csv(tmp_path, [ROW.format(system=system, label="fp8",
                                                                 tp=4)]))[0])
    assert isinstance(case, Case) and case.moe_backend == backend


@needs_tables
def test_a_row_whose_forced_kernel_no_table_times_says_so(tmp_path: Path) -> None:
    # minimaxm2.5_fp8_b300.sh reuses the B200 recipe (Triton's fused MoE); vLLM's only
    # B300 tables (0.24.0) time block-FP8 experts with FlashInfer's kernels alone.
    from sim.validate.silicon import tables_cover

    case = classify(read_rows(silicon_csv(tmp_path, [ROW.format(system="b300_sxm",
                                                                 label="fp8", tp=2)]))[0])
    assert isinstance(case, Case)
    assert tables_cover(case) == ("minimax-m2.5's MoE layer (its recipe's triton kernel) is "
                                  "not in the vllm 0.24.0 tables at tp 2")


@needs_tables
def test_a_triton_moe_layer_comes_from_the_newest_tables_that_time_it() -> None:
    # vLLM 0.24.0's B200 tables time MiniMax-M2.5's block-FP8 experts only with
    # FlashInfer's TensorRT-LLM kernels; its 0.22.0 tables time vLLM's Triton fused MoE.
    from sim.cost.presets import MODELS
    from sim.cost.tables.moetable import moe_times

    m = MODELS["minimax-m2.5"]
    auto = moe_times("b200", "vllm", "0.24.0", m, 2)
    triton = moe_times("b200", "vllm", "0.24.0", m, 2, backend="triton")
    assert "flashinfer" in auto.kernel and triton.kernel == "vllm_fused_moe"
    assert "the vllm 0.22.0 tables'" in triton.note
    # Slower than FlashInfer's at a prefill's tokens (about 1.7x at 8192), as measured.
    assert 1.3 < float(triton.at(8192) / auto.at(8192)) < 2.2
    # On H200, 0.24.0 times the Triton kernel itself: no older table is read.
    h200 = moe_times("h200", "vllm", "0.24.0", m, 2, backend="triton")
    assert "triton" in h200.kernel and "tables'" not in h200.note
    with pytest.raises(ServesimError, match="unknown MoE backend 'cutlass'; valid: auto, triton"):
        moe_times("b200", "vllm", "0.24.0", m, 2, backend="cutlass")
