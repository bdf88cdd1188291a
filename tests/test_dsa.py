"""DeepSeek sparse attention (GLM-5, DeepSeek-V3.2): the model description against the
release's config.json and model card, the indexer's weights and cache by hand, the
roofline's caps, the measured profile against the tables' whole-module rows, and the
public GLM-5 rows as InferenceX's recipes launched them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables, silicon_csv

from sim.cost.gpus import gpu
from sim.cost.hfconfig import from_hf_config
from sim.cost.presets import MODELS
from sim.cost.profile import FORMS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.cost.shard import shard
from sim.cost.tables.layergemms import attention_gemms
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify
from sim.validate.siliconrecipes import recipe, scenario_raw
from sim.validate.siliconrows import read_rows

ROOT = Path(__file__).resolve().parents[1]
GLM5 = MODELS["glm-5"]
CONFIG = ROOT / "sim" / "data" / "models" / "glm-5" / "config.json"


def test_the_preset_is_the_shipped_config() -> None:
    spec = from_hf_config(CONFIG)
    assert dataclasses.replace(spec, name="glm-5") == GLM5
    assert (GLM5.index_topk, GLM5.index_n_heads, GLM5.index_head_dim) == (2048, 32, 128)


def test_deepseek_v32_is_its_config_and_deepseek_v3_with_an_indexer() -> None:
    v32 = MODELS["deepseek-v3.2"]
    spec = from_hf_config(ROOT / "sim" / "data" / "models" / "deepseek-v3.2" / "config.json")
    assert dataclasses.replace(spec, name="deepseek-v3.2") == v32
    assert dataclasses.replace(v32, index_topk=0, index_n_heads=0, index_head_dim=0,
                               name="deepseek-v3") == MODELS["deepseek-v3"]
    # DeepSeek-V3's 671B and 37B a token (the card's, without embedding and LM head), and
    # 61 indexers of 1536 x 64 x 128 + 7168 x (128 + 64) weights.
    assert v32.params == pytest.approx(671e9, rel=0.01)
    assert v32.active_params - 2 * v32.vocab * v32.hidden == pytest.approx(37e9, rel=0.02)
    assert v32.params - MODELS["deepseek-v3"].params == 61 * (
        1536 * 64 * 128 + 7168 * 192 + 2 * 128)


def test_weights_and_cache_against_the_model_card_and_by_hand() -> None:
    # The indexer: wq_b 2048 x (32 x 128), wk 6144 x 128, weights_proj 6144 x 32.
    assert GLM5.indexer_params == 2048 * 32 * 128 + 6144 * 128 + 6144 * 32 == 9_371_648
    # GLM-5's card: 744B weights, 40B active (without the embedding and LM head, 0.95B
    # each: the active count servesim gives, 41.8B, counts both).
    assert GLM5.params == pytest.approx(744e9, rel=0.01)
    tables = 2 * GLM5.vocab * GLM5.hidden
    assert GLM5.active_params - tables == pytest.approx(40e9, rel=0.01)
    # Each token caches its 576-element latent and its indexer key: 128 FP8 bytes and one
    # fp32 scale, whatever the cache's dtype.
    assert GLM5.index_key_bytes == 132
    assert GLM5.kv_bytes_per_token == 78 * (576 * 2 + 132) == 100_152
    fp8 = dataclasses.replace(GLM5, kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == 78 * (576 + 132)
    # Every GPU holds the whole indexer and caches the whole latent and key.
    rank = shard(fp8, 8)
    assert rank.indexer_params == GLM5.indexer_params
    assert rank.kv_bytes_per_token == fp8.kv_bytes_per_token
    # The indexer's GEMMs on a rank: its key rides the down-projection (2048 + 512 + 64 +
    # 128), its queries come from the query latent, its heads' weights from the hidden.
    assert attention_gemms(rank) == [(2752, 6144), (2048, 2048), (4096, 2048), (32, 6144),
                                     (6144, 2048)]


def test_sparse_fields_must_come_together_on_latent_attention() -> None:
    with pytest.raises(ServesimError, match=r"index_n_heads: required for sparse attention"
                                            r".*at least 1; got 0"):
        dataclasses.replace(GLM5, index_n_heads=0)
    dense = MODELS["llama-3-8b"]
    with pytest.raises(ServesimError, match=r"index_topk: got 2048 without latent attention"):
        dataclasses.replace(dense, index_topk=2048, index_n_heads=32, index_head_dim=128)
    with pytest.raises(ServesimError, match=r"index_topk: .*with a query latent"):
        dataclasses.replace(GLM5, q_lora_rank=0)


def _glm5_config(tmp_path: Path, quant: dict | None, model_type: str = "glm_moe_dsa") -> Path:
    cfg = json.loads(CONFIG.read_text())
    cfg["model_type"] = model_type
    cfg.pop("quantization_config")
    if quant is not None:
        cfg["quantization_config"] = quant
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hf_configs_keep_the_indexer_apart_from_the_attention_projections(
        tmp_path: Path) -> None:
    # The FP8 release keeps the indexer's weights_proj ("indexers_proj") and the latents'
    # norms in bf16: the projections are still FP8.
    fp8 = {"quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": [
        "lm_head", "model.layers.0.self_attn.indexers_proj",
        "model.layers.0.self_attn.indexer.k_norm", "model.layers.0.self_attn.q_a_layernorm"]}
    spec = from_hf_config(_glm5_config(tmp_path, fp8))
    assert (spec.dtype, spec.expert_dtype, spec.qkv_dtype) == ("fp8-block", "", "")
    # NVIDIA's NVFP4 export names every attention projection, the output's too: attention
    # is kept whole at 16 bits, the experts are 4-bit.
    names = ("indexer*", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj", "q_a_proj", "q_b_proj")
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
             "exclude_modules": ["lm_head", *(f"model.layers.0.self_attn.{n}" for n in names)]}
    spec = from_hf_config(_glm5_config(tmp_path, nvfp4))
    assert (spec.dtype, spec.expert_dtype, spec.kv_dtype) == ("bf16", "nvfp4", "fp8")
    # DeepSeek-V3.2's model_type reads the same keys.
    assert from_hf_config(_glm5_config(tmp_path, None, "deepseek_v32")).sparse


def test_the_roofline_caps_attention_at_the_top_k_and_scores_every_token() -> None:
    h200 = gpu("h200")
    cost = RooflineCost(GLM5, h200, 8, RooflineParams())
    dense = RooflineCost(dataclasses.replace(GLM5, index_topk=0, index_n_heads=0,
                                             index_head_dim=0, name="dense"),
                         h200, 8, RooflineParams())

    def attention(c: RooflineCost, shape: StepShape) -> float:
        return float(c.parts(shape)["attention"])
    # Past the top-k a decode's latent reads stop growing; its indexer keys (132 B a token
    # and layer) do not: 32k more cached tokens cost exactly their keys' bytes.
    a, b = attention(cost, decode_shape(64, 64 * 32768)), attention(cost, decode_shape(
        64, 64 * 65536))
    keys = 78 * 132 * 64 * 32768 / (h200.mem_bw * RooflineParams().bandwidth_efficiency)
    assert b - a == pytest.approx(keys, rel=1e-9)
    # Dense MLA reads every latent: the same 32k tokens cost it 78 x 1,152 B each.
    assert attention(dense, decode_shape(64, 64 * 65536)) - attention(
        dense, decode_shape(64, 64 * 32768)) > 8 * (b - a)
    # Within the top-k nothing is capped: sparse costs the dense latent attention plus
    # its indexer, never less.
    short = decode_shape(8, 8 * 1024)
    assert attention(cost, short) > attention(dense, short)


def test_the_sparse_prefill_term_prices_only_entries_past_the_top_k() -> None:
    form = FORMS["sparse_prefill"]
    coef = {"per_token_s": 1e-6, "topk_tokens": 2048.0}
    assert form.evaluate(coef, shape_of([(2048, 0)])) == 0.0
    assert form.evaluate(coef, shape_of([(4096, 0)])) == pytest.approx(4096e-6)
    # A chunk after cached context counts its whole sequence: 1,024 new after 1,536 cached.
    assert form.evaluate(coef, shape_of([(1024, 1536)])) == pytest.approx(1024e-6)
    # Decode entries in the step are not prefill.
    assert form.evaluate(coef, shape_of([(1, 9000), (1, 9000)])) == 0.0
    # Profiles written before it (every other model's) read as zero.
    assert form.defaults == {"per_token_s": 0.0, "topk_tokens": 1e9}


def test_the_sparse_price_per_token_is_recovered_exactly() -> None:
    from sim.cost.tables.dsaattn import dense_knots, fit_sparse_prefill

    dense = {k: 0.0 for k in FORMS["prefill_attention"].coefs} | {"const_s": 1e-4}
    shapes = [shape_of([(t, 0)] * b) for b, t in ((1, 1024), (1, 4096), (2, 4096), (1, 8192))]
    seconds = [1e-4 + (3e-7 * b * t if t > 2048 else 0.0)
               for b, t in ((1, 1024), (1, 4096), (2, 4096), (1, 8192))]
    # The dense term: knots over the step's tokens from 1,024 to 8,192 (a launch floor
    # falling from 2e-4 to 1e-4 s; the median of the batches making each total), the
    # formula's 1e-4 s past them.
    knots = dense_knots([shape_of([(1024, 0)]), shape_of([(2048, 0)] * 4),
                         shape_of([(1024, 0)] * 8), shape_of([(512, 0)] * 16)],
                        [2e-4, 1e-4, 0.9e-4, 5e-4])
    assert (knots.xs, knots.ys) == ((1024.0, 8192.0), (2e-4, 1e-4))
    # 4,096 tokens at once sit between the knots: 2e-4 - 1e-4 x 3,072 / 7,168.
    seconds[1] += 1e-4 - 1e-4 * 3072 / 7168
    fit = fit_sparse_prefill(dense, knots, shapes, seconds, 2048, "k")
    assert fit["coef"] == {"per_token_s": pytest.approx(3e-7), "topk_tokens": 2048.0}
    assert fit["fit"]["n_points"] == 3 and fit["fit"]["max_err_leave_one_out"] < 1e-9
    with pytest.raises(ServesimError, match="needs at least two"):
        fit_sparse_prefill(dense, knots, shapes[:2], seconds[:2], 2048, "k")


@needs_tables
def test_a_pure_step_costs_the_module_rows_exactly() -> None:
    from sim.cost.profilefile import parse_profile
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.gemmtable import projection_gemms
    from sim.cost.tables.kerneltables import load_table
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    model = dataclasses.replace(GLM5, kv_dtype="fp8")
    data = build_profile(BuildSpec(model, "h200", "sglang", 8))
    grid = data["components"]["decode_attention"]["grid"]
    rows = load_table("h200", "sparse_attention", "sglang", "0.5.14",
                      "dsa_generation_module_perf").where(
        model="zai-org/GLM-5-FP8", kv_cache_dtype="fp8", num_heads=8)
    gemm = projection_gemms("h200", "sglang", "0.5.14", "fp8-block")[0].table
    gemms = attention_gemms(shard(model, 8))
    for b, cached in ((4, 1024), (64, 4096)):
        module = float(rows.where(batch_size=b, step=cached).columns["latency"][0]) / 1e3
        proj = sum(gemm.at(float(b), n, k) for n, k in gemms)
        got = grid["s"][grid["seqs"].index(b)][grid["kv_per_seq"].index(cached + 1)]
        assert got + proj == pytest.approx(module, rel=1e-5), (b, cached)
    # Within the top-k, prefill is the knots over the step's tokens: the module rows less
    # their projections, the median of the batches making each total (8,192 tokens: 4 x
    # 2,048, 8 x 1,024, ...), within 6% of each batch's own.
    pre = data["components"]["prefill_attention"]
    knots = dict(zip(pre["table_at"], pre["table_s"], strict=True))
    ctx = load_table("h200", "sparse_attention", "sglang", "0.5.14",
                     "dsa_context_module_perf").where(model="zai-org/GLM-5-FP8",
                                                      kv_cache_dtype="fp8", num_heads=8, step=0)
    for b, t in ((1, 1024), (2, 2048), (4, 2048), (8, 1024)):
        module = float(ctx.where(batch_size=b, isl=t).columns["latency"][0]) / 1e3
        own = module - sum(gemm.at(float(b * t), n, k) for n, k in gemms)
        assert knots[b * t] == pytest.approx(own, rel=0.06), (b, t)
    # Prompts past the top-k pay the sparse path's price per token; the note names both
    # kernels SGLang chose by length.
    sparse = data["components"]["sparse_prefill"]
    assert sparse["coef"]["topk_tokens"] == 2048 and sparse["coef"]["per_token_s"] > 0
    assert "sglang_dsa_dense_mha_fa3 to 2048 tokens / sglang_dsa_indexer_flashmla_kv" in \
        " ".join(data["source"]["notes"])
    cost = parse_profile(data, "glm5")
    long, short = shape_of([(8192, 0)]), shape_of([(2048, 0)])
    assert cost.breakdown(long)["sparse_prefill"] > 0 == cost.breakdown(short)["sparse_prefill"]
    # The shipped profile (bf16 cache, the preset) is the same build, byte for byte.
    from sim.cost.profilefile import PROFILE_DIR

    shipped = (PROFILE_DIR / "h200-glm-5-tp8-sglang.yaml").read_text(encoding="utf-8")
    assert profile_text(build_profile(BuildSpec(GLM5, "h200", "sglang", 8))) == shipped


@needs_tables
def test_bf16_attention_rows_that_disagree_with_their_gemms_borrow_the_fp8_ones() -> None:
    from sim.cost.tables.dsaattn import sparse_attention
    from sim.cost.tables.gemmtable import projection_gemms

    model = dataclasses.replace(GLM5, dtype="bf16", expert_dtype="nvfp4", kv_dtype="fp8")
    rank = shard(model, 8)
    bf16 = projection_gemms("b200", "sglang", "0.5.14", "bf16")[0].table
    att = sparse_attention("b200", "sglang", "0.5.14", model, rank, "fp8", bf16,
                           attention_gemms(rank))
    assert "its bf16 rows disagree with the bf16 GEMM table" in att.notes[0]
    fp8 = projection_gemms("b200", "sglang", "0.5.14", "fp8-block")[0].table
    same = sparse_attention("b200", "sglang", "0.5.14", dataclasses.replace(
        model, dtype="fp8-block", expert_dtype=""), rank, "fp8", fp8, attention_gemms(rank))
    assert np.array_equal(att.decode.seconds, same.decode.seconds)


def test_other_sparse_architectures_are_named_as_untimed() -> None:
    from sim.cost.tables.dsaattn import architecture

    odd = dataclasses.replace(GLM5, index_n_heads=16, name="odd")
    with pytest.raises(ServesimError, match=r"odd's sparse attention is not one the tables "
                                            r"time; they time DeepseekV32ForCausalLM"):
        architecture(odd)
    assert architecture(GLM5) == "GlmMoeDsaForCausalLM"


def _glm_case(tmp_path: Path, system: str, precision: str, clients: int = 4) -> Case:
    mode = {"fp8": "fp8", "fp4": "nvfp4"}[precision]
    row = (f"glm5_{system}_{precision},source_file=2026-03-25.csv; model=GLM-5,sglang,"
           f"nightly-dev,zhipuai/GLM-5,{system},{precision},agg,1024,1024,{clients},8,1,1,"
           f"300,17,{mode},8,1")
    case = classify(read_rows(silicon_csv(tmp_path, [row], (
        "gemm_quant_mode", "moe_tp_size", "moe_ep_size")))[0])
    assert isinstance(case, Case)
    return case


def test_glm5_rows_run_as_their_recipes_launched_them(tmp_path: Path) -> None:
    # B200 FP8: Z.ai's block-scaled release, an FP8 cache, 32k-token chunks, 0.85 of
    # memory, a 30-token stream interval and as many running requests as clients.
    b200 = _glm_case(tmp_path, "b200_sxm", "fp8", clients=16)
    assert (b200.model, b200.dtype, b200.kv_dtype) == ("glm-5", "fp8-block", "fp8")
    assert recipe(b200) == {"max_num_batched_tokens": 32768, "static_fraction": 0.85,
                            "stream_interval": 30, "max_running": 16}
    # H200: SGLang's defaults but memory, and a bf16 cache.
    h200 = _glm_case(tmp_path, "h200_sxm", "fp8")
    assert h200.kv_dtype == "auto" and recipe(h200) == {"static_fraction": 0.85}
    # B200 FP4: NVIDIA's checkpoint, attention bf16 and experts NVFP4, an FP8 cache.
    fp4 = _glm_case(tmp_path, "b200_sxm", "fp4")
    assert (fp4.dtype, fp4.expert_dtype, fp4.kv_dtype) == ("bf16", "nvfp4", "fp8")
    assert recipe(fp4)["scheduler_recv_interval"] == 10
    raw = scenario_raw(fp4)
    assert raw["serving"]["max_num_batched_tokens"] == 32768



def test_untimed_decode_cells_grow_by_the_largest_batch_that_timed_the_context() -> None:
    from sim.cost.tables.attntables import AttentionRows
    from sim.cost.tables.dsaattn import sparse_decode_grid

    cols = (2, 1025, 2049, 4097, 8193)
    timed = {1: (1.0, 1.1, 1.2, 1.25, 1.3), 4: (2.0, 3.0, 4.0, 4.4), 16: (5.0, None, 13.0),
             64: (20.0,)}
    cells = [(b, c, v) for b, vs in timed.items() for c, v in zip(cols, vs, strict=False)
             if v is not None]
    batch, tokens, seconds = (np.array(x, dtype=float) for x in zip(*cells, strict=True))
    grid = sparse_decode_grid(AttentionRows(batch, tokens, seconds, "k", ""), 2048)
    # Within the top-k: 16 sequences grew 8 from 2 to 2,049 tokens; past it 4 sequences
    # grew 0.4 from 2,049 to 4,097 (the largest batches timing each).
    inside, past = 8 / (16 * 2047), 0.4 / (4 * 2048)
    assert grid.at(16, 4097) == pytest.approx(13 + 16 * past * 2048)
    assert grid.at(16, 8193) == pytest.approx(13 + 16 * past * 6144)
    assert grid.at(4, 8193) == pytest.approx(4.4 + 4 * past * 4096)
    # Between two timed contexts a batch's cell is joined linearly (not with the rate).
    assert grid.at(16, 1025) == pytest.approx(5 + 8 * 1023 / 2047)
    # A batch timed at one cached token only: the latents' rate to the top-k, then the
    # indexer's past it.
    assert grid.at(64, 2049) == pytest.approx(20 + 64 * inside * 2047)
    assert grid.at(64, 8193) == pytest.approx(20 + 64 * (inside * 2047 + past * 6144))
    # Timed cells are kept as they are.
    assert grid.at(1, 8193) == 1.3 and grid.at(4, 4097) == 4.4


def test_cost_measured_finds_the_sparse_presets_under_both_frameworks() -> None:
    from sim.cost.measured import find

    for name in ("glm-5", "deepseek-v3.2"):
        for fw in ("vllm", "sglang"):
            assert find(MODELS[name], "h200", 8, fw) == f"h200-{name}-tp8-{fw}"
    # DeepSeek-V3's profiles are not DeepSeek-V3.2's: the indexer is part of the
    # architecture a profile is matched on.
    assert find(MODELS["deepseek-v3"], "h200", 8, "sglang") == "h200-deepseek-v3-tp8-sglang"
    with pytest.raises(ServesimError, match=r"no measured profile for glm-5 at tp=4"):
        find(MODELS["glm-5"], "h200", 4, "vllm")
