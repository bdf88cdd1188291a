"""Measured profiles of latent-attention models (DeepSeek-V3) from the public kernel
tables: the projections each rank runs, the decode grid and prefill rows as the tables'
MLA kernel, batched-GEMM and GEMM rows summed by hand, and the public end-to-end rows of
DeepSeek as the runs were launched."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables, silicon_csv

from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.cost.tables.layergemms import attention_gemms
from sim.validate.silicon import Case, classify
from sim.validate.siliconrecipes import recipe, running_cap, scenario_raw
from sim.validate.siliconrows import read_rows

V3 = MODELS["deepseek-v3"]


def test_each_rank_runs_the_down_projection_whole_and_its_heads_share_of_the_rest() -> None:
    # q_a + kv_a + rotary key = 1536 + 512 + 64 on every GPU; 16 of 128 heads at tp 8:
    # q_b 16 x (128 + 64) from the 1536-wide query latent, output from 16 x 128.
    assert attention_gemms(shard(V3, 8)) == [(2112, 7168), (3072, 1536), (7168, 2048)]
    # Without a query latent (DeepSeek-V2-Lite) the query is projected from the hidden
    # state and the down-projection holds the KV latent and rotary key only.
    lite = dataclasses.replace(V3, q_lora_rank=0, name="no-q-latent")
    assert attention_gemms(shard(lite, 8)) == [(576, 7168), (3072, 7168), (7168, 2048)]


def _ms(table: object, **where: object) -> float:
    rows = table.where(**where).columns  # type: ignore[attr-defined]
    assert len(rows["latency"]) == 1, where
    return float(rows["latency"][0]) / 1e3


@needs_tables
def test_decode_grid_is_the_kernel_plus_both_batched_gemms_by_hand() -> None:
    from sim.cost.tables.kerneltables import load_table
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    data = build_profile(BuildSpec(V3, "h200", "sglang", 8))
    grid = data["components"]["decode_attention"]["grid"]
    gen = load_table("h200", "mla", "sglang", "0.5.14", "generation_mla_perf")
    bmm = load_table("h200", "mla_bmm", "sglang", "0.5.14", "mla_bmm_perf")
    for b, cached in ((1, 1023), (64, 2047), (256, 8191)):
        want = (_ms(gen, num_heads=16, kv_cache_dtype="bfloat16", batch_size=b, step=cached)
                # FP8 weights: the absorbed kv_b halves run as FP8 batched GEMMs.
                + _ms(bmm, op_name="mla_gen_pre", bmm_dtype="fp8", num_heads=16, num_tokens=b)
                + _ms(bmm, op_name="mla_gen_post", bmm_dtype="fp8", num_heads=16, num_tokens=b))
        got = grid["s"][grid["seqs"].index(b)][grid["kv_per_seq"].index(cached + 1)]
        assert got == pytest.approx(want, rel=1e-5), (b, cached)
    # The shipped profile is this build, byte for byte.
    from sim.cost.profilefile import PROFILE_DIR
    from sim.cost.tables.cli import profile_text

    shipped = (PROFILE_DIR / "h200-deepseek-v3-tp8-sglang.yaml").read_text(encoding="utf-8")
    assert profile_text(data) == shipped
    notes = " ".join(data["source"]["notes"])
    assert "latent attention (MLA) as sglang runs it" in notes and "16 heads measured" in notes
    assert data["source"]["phrase"] == ("measured kernels: SGLang 0.5.14 on H200-SXM; "
                                        "fp8-block weights")


@needs_tables
def test_prefill_rows_add_the_kv_b_up_projection_by_hand() -> None:
    from sim.cost.tables.gemmtable import gemm_table
    from sim.cost.tables.kerneltables import load_table
    from sim.cost.tables.mlaattn import mla_attention

    rank = shard(V3, 8)
    gemm = gemm_table("b200", "trtllm", "1.3.0rc20", "fp8-block").table
    att = mla_attention("b200", "trtllm", "1.3.0rc20", V3, rank, "fp8", gemm,
                        attention_gemms(rank))
    ctx = load_table("b200", "mla", "trtllm", "1.3.0rc20", "context_mla_perf")
    pre = att.prefill
    for b, isl in ((1, 1024), (4, 8192)):
        at = (pre.batch == b) & (pre.tokens == isl)
        # kv_b: n = 16 heads x (128 + 128), k = the 512-wide latent, m = every new token.
        want = (_ms(ctx, num_heads=16, kv_cache_dtype="fp8", batch_size=b, isl=isl)
                + gemm.at(b * isl, 4096, 512))
        assert float(pre.seconds[at][0]) == pytest.approx(want, rel=1e-12)
    # A cached token re-expanded for a later chunk costs kv_b's marginal price per token.
    hi, lo = float(gemm.ms[-1]), float(gemm.ms[-2])
    assert att.context_token_s == pytest.approx(
        (gemm.at(hi, 4096, 512) - gemm.at(lo, 4096, 512)) / (hi - lo))
    assert att.context_token_s > 0 and np.all(np.diff(att.grid.values[0]) > -1e-5)


ROW = ("x,source_file=2026-03-25.csv; model=DeepSeek-R1,{fw},0.5.9,deepseek-ai/DeepSeek-R1,"
       "{system},{label},agg,{isl},1024,{conc},{tp},1,1,300,10")


def _case(tmp_path: Path, fw: str, system: str, isl: int = 1024, conc: int = 64, tp: int = 8,
          label: str = "fp8") -> Case | str:
    line = ROW.format(fw=fw, system=system, label=label, isl=isl, conc=conc, tp=tp)
    return classify(read_rows(silicon_csv(tmp_path, [line]))[0])


def test_deepseek_rows_run_as_their_recipes_launched_them(tmp_path: Path) -> None:
    # The release's block-scaled FP8; TensorRT-LLM's recipe an FP8 KV cache on H200, its
    # --max_num_tokens one whole prompt beside every client: (64 + 8192 + 64) up to a
    # multiple of 64 is 8320; free_gpu_memory_fraction 0.75 there.
    trt = _case(tmp_path, "trtllm", "h200_sxm", isl=8192)
    assert isinstance(trt, Case)
    assert (trt.model, trt.dtype, trt.kv_dtype, trt.ep) == ("deepseek-r1", "fp8-block", "fp8", 1)
    assert recipe(trt) == {"max_num_batched_tokens": 8320, "free_fraction": 0.75,
                           "stream_interval": 10}
    assert scenario_raw(trt)["serving"]["max_num_batched_tokens"] == 8320
    # Below 8192 + clients the recipe keeps 8192.
    small = _case(tmp_path, "trtllm", "b200_sxm", isl=1024)
    assert isinstance(small, Case) and recipe(small)["max_num_batched_tokens"] == 8192
    # SGLang: bf16 KV on H200, FP8 on B200; 32768-token prefill batches; the static
    # memory fraction 0.82, 0.95 at tp 4.
    h200, b200 = _case(tmp_path, "sglang", "h200_sxm"), _case(tmp_path, "sglang", "b200_sxm")
    assert isinstance(h200, Case) and isinstance(b200, Case)
    assert (h200.kv_dtype, b200.kv_dtype) == ("auto", "fp8")
    # Both stream their output in chunks (10 tokens on H200, 30 on B200) and cap the
    # running requests (512 at 1,024/1,024 on H200; 128 at tp 8, 32 at tp 4 on B200).
    assert recipe(h200) == {"max_num_batched_tokens": 32768, "static_fraction": 0.82,
                            "stream_interval": 10, "max_running": 512}
    tp4 = _case(tmp_path, "sglang", "b200_sxm", tp=4, isl=8192)
    assert isinstance(tp4, Case) and recipe(tp4)["static_fraction"] == 0.95
    # On B200 (dsr1_fp8_b200.sh): --scheduler-recv-interval 10, or 30 at tp 8 from 16
    # clients up; tp 4 with 8192-token prefill batches. H200's recipe sets no interval.
    assert recipe(b200)["scheduler_recv_interval"] == 30  # 64 clients
    few = _case(tmp_path, "sglang", "b200_sxm", conc=8)
    assert isinstance(few, Case) and recipe(few)["scheduler_recv_interval"] == 10
    assert recipe(tp4) == {"max_num_batched_tokens": 8192, "static_fraction": 0.95,
                           "scheduler_recv_interval": 10, "stream_interval": 30,
                           "max_running": 32}
    served = scenario_raw(b200)["serving"]
    assert (served["scheduler_recv_interval"], served["stream_interval"],
            served["stream_first_token"]) == (30, 30, False)
    # The cap on running requests never falls below the row's clients (the sweep ran
    # these scripts past it); it stays a bound on nothing for a softmax-attention model.
    assert served["max_num_seqs"] == 2048
    assert (running_cap(recipe(b200), 64), running_cap(recipe(b200), 512)) == (128, 512)
    assert running_cap({}, 64) is None
    assert "scheduler_recv_interval" not in scenario_raw(h200)["serving"]
    # dsr1_fp8_b300.sh reuses the B200 recipe as it stood: the same settings on B300.
    b300 = _case(tmp_path, "sglang", "b300_sxm")
    b300_tp4 = _case(tmp_path, "sglang", "b300_sxm", tp=4, isl=8192)
    assert isinstance(b300, Case) and isinstance(b300_tp4, Case)
    assert (b300.gpu, b300.kv_dtype) == ("b300", "fp8")
    assert (recipe(b300), recipe(b300_tp4)) == (recipe(b200), recipe(tp4))


def test_deepseek_tensorrt_llm_rows_on_blackwell_take_its_moe_backend(tmp_path: Path) -> None:
    # dsr1_fp8_b200_trt.sh: moe_config.backend TRTLLM (FlashInfer's TensorRT-LLM MoE
    # kernel, read from SGLang's rows) below 256 clients, DEEPGEMM with a 0.7 memory
    # fraction from 256 at 1,024/1,024 and 1,024/8,192; batch waiting at 64-255 clients of
    # 1,024/1,024; 0.75 at tp 4 for 8,192/1,024; stream_interval 10. H200 keeps its own.
    def case(system: str, conc: int, isl: int = 1024, tp: int = 8) -> Case:
        c = _case(tmp_path, "trtllm", system, isl=isl, conc=conc, tp=tp)
        assert isinstance(c, Case)
        return c

    few, wait, many = case("b200_sxm", 8), case("b200_sxm", 64), case("b300_sxm", 256)
    tp4, h200 = case("b200_sxm", 8, isl=8192, tp=4), case("h200_sxm", 8)
    assert [c.moe_backend for c in (few, wait, many, tp4, h200)] == [
        "trtllm-gen", "trtllm-gen", "auto", "trtllm-gen", "auto"]
    assert recipe(few) == {"max_num_batched_tokens": 8192, "free_fraction": 0.8,
                           "stream_interval": 10}
    assert recipe(wait) == {"max_num_batched_tokens": 8192, "free_fraction": 0.8,
                            "stream_interval": 10, "batch_wait_timeout_iters": 40,
                            "batch_wait_max_tokens_ratio": 0.8}
    assert (recipe(many)["free_fraction"], recipe(tp4)["free_fraction"]) == (0.7, 0.75)
    assert recipe(h200) == {"max_num_batched_tokens": 8192, "free_fraction": 0.75,
                            "stream_interval": 10}


@needs_tables
def test_trtllm_gen_experts_come_from_sglangs_rows_of_the_kernel() -> None:
    from sim.cost.tables.moetable import is_backend, moe_times

    # TensorRT-LLM's B200 tables time DeepSeek's block-FP8 experts with DeepGEMM alone.
    own = moe_times("b200", "trtllm", "1.3.0rc20", V3, 8)
    gen = moe_times("b200", "trtllm", "1.3.0rc20", V3, 8, backend="trtllm-gen")
    assert own.kernel == "deepgemm" and gen.kernel == "sglang_flashinfer_trtllm_moe"
    assert gen.note.endswith("(the sglang 0.5.14 tables': trtllm's up to 1.3.0rc20 time "
                             "no trtllm-gen kernel for it)")
    # 2.7x faster than DeepGEMM at 4 tokens a GPU of 8.
    four = np.array([4.0])
    assert float(own.at(four)[0]) > 2.5 * float(gen.at(four)[0])
    # SGLang's own build reads its own rows; vLLM's names count too.
    assert moe_times("b200", "sglang", "0.5.14", V3, 8, backend="trtllm-gen").note == \
        moe_times("b200", "sglang", "0.5.14", V3, 8).note
    assert is_backend("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic", "trtllm-gen")
    assert not is_backend("deepgemm", "trtllm-gen")


def test_deepseek_fp4_rows_say_why_they_are_not_simulated(tmp_path: Path) -> None:
    # The sample's FP4 rows of DeepSeek's names (NVFP4 GEMMs) are not its FP8 release.
    assert str(_case(tmp_path, "sglang", "b200_sxm", label="fp4")).startswith(
        "fp4 weights (no GEMM mode): servesim models bf16, FP8 (fp8, fp8_block) and, for "
        "dense models, NVFP4")


@needs_tables
def test_vllm_attention_is_its_module_less_the_projections_by_hand() -> None:
    """vLLM times MLA as whole modules: a decode grid cell plus the block's projections
    (from the same GEMM table as the linear stack) gives back the module's row."""
    from sim.cost.tables.gemmtable import projection_gemms
    from sim.cost.tables.kerneltables import load_table
    from sim.cost.tables.mlaattn import mla_attention

    rank = shard(V3, 8)
    gemm, fw, _ = projection_gemms("b200", "vllm", "0.24.0", "fp8-block")
    # vLLM's own fp8_block rows contradict its modules; the same library's rows of
    # SGLang price the projections (sim/cost/tables/gemmtable.py).
    assert fw == "sglang"
    att = mla_attention("b200", "vllm", "0.24.0", V3, rank, "fp8", gemm.table,
                        attention_gemms(rank))
    mod = load_table("b200", "mla", "vllm", "0.24.0", "mla_generation_module_perf")
    for b, step in ((1, 2048), (64, 8192)):
        want = _ms(mod, num_heads=16, kv_cache_dtype="fp8", gemm_type="fp8_block",
                   batch_size=b, step=step)
        proj = sum(gemm.table.at(b, n, k) for n, k in attention_gemms(rank))
        assert att.grid.at(b, step + 1) + proj == pytest.approx(want, rel=1e-9)
    assert "0 of 184 decode points" in att.notes[0]


@needs_tables
def test_vllm_mla_where_its_tables_disagree_is_refused() -> None:
    """On L40S no other collection times block-FP8 GEMMs, vLLM's own rows price the
    projections above many of its modules, and the build stops saying so."""
    from sim.cost.tables.profilebuild import BuildSpec, build_profile
    from sim.errors import ServesimError

    with pytest.raises(ServesimError, match=r"--gpu: deepseek-v3 on l40s: vllm's whole-module "
                                            r"MLA rows are faster than the block's projections "
                                            r".* at 47 of 113 prefill points"):
        build_profile(BuildSpec(V3, "l40s", "vllm", 8))


def test_rows_exported_with_tp_times_ep_as_tp_run_their_single_node_split(
        tmp_path: Path) -> None:
    # InferenceX's single-node runs of tp 8 with experts over the 8 GPUs, exported as
    # tp_size 64, moe_tp_size 8, moe_ep_size 8 (the id names the split): tp 8, ep 8.
    line = ("{id},source_file=2026-04-06.csv; model=DeepSeek-R1,sglang,0.5.9,"
            "deepseek-ai/DeepSeek-R1,b200_sxm,fp8,agg,1024,1024,4,{tp},1,1,189,8.05,{mtp},{mep}")

    def case(tp: int, mtp: int, mep: int, source: str = "source_file=2026-04-06.csv",
             run: str = "r_c4_tp8_ep8") -> object:
        row = line.format(id=run, tp=tp, mtp=mtp, mep=mep).replace(
            "source_file=2026-04-06.csv", source)
        return classify(read_rows(silicon_csv(tmp_path, [row],
                                              ("moe_tp_size", "moe_ep_size")))[0])

    c = case(64, 8, 8)
    assert isinstance(c, Case) and (c.tp, c.ep, c.row.tp, c.row.moe_tp) == (8, 8, 8, 1)
    # Equal to the same run exported as (tp 8, expert tp 1, expert parallelism 8).
    same = case(8, 1, 8)
    assert isinstance(same, Case) and scenario_raw(same) == scenario_raw(c)
    # tp 4 x ep 4 as 16 likewise; a split within one node is read as written.
    four = case(16, 4, 4)
    assert isinstance(four, Case) and (four.tp, four.ep) == (4, 4)
    assert str(case(4, 2, 2)).startswith("experts split other than by tensor parallelism")
    # ... unless its id names that split (tp 2 x ep 2 written as tp_size 4).
    two = case(4, 2, 2, run="r_c4_tp2_ep2_927")
    assert isinstance(two, Case) and (two.tp, two.ep) == (2, 2)
    # AIConfigurator's own rows are not InferenceX's single-node scripts: as written.
    assert str(case(64, 8, 8, source="aic")).startswith("experts split other than")
