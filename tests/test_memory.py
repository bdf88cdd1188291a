"""KV capacity as vLLM sizes it: hand-worked budgets, and checks against vLLM's own logs.

Every figure in the hand-worked tests is written out; the published-log tests take the
log's own GPU total, settings and (where the accounting differs by version) its
non-torch figure, and check weights, activation and KV against what the log printed.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from conftest import tiny_scenario

from sim.config.disagg import pool_memory, pools
from sim.config.scenario import from_dict
from sim.cost.gpus import GPUS
from sim.cost.memory import (
    CUDA_GRAPH_BYTES,
    NON_TORCH_BYTES,
    NON_TORCH_TP_BYTES,
    activation_bytes,
    memory_budget,
    weight_bytes,
)
from sim.cost.memorybudget import GIB
from sim.cost.presets import MODELS
from sim.cost.vllmmemory import memory_rules, uses_v2_runner
from sim.errors import ServesimError

NON_TORCH = 171_798_691  # int(0.16 GiB)
NON_TORCH_TP = 440_234_147  # int(0.41 GiB)
CUDA_GRAPHS = 783_831_531  # int(0.73 GiB)
# One short request: the scenarios below fail on memory before any runs.
ONE_REQUEST = {"arrivals": {"process": "poisson", "rate": 1.0},
               "lengths": {"prompt": {"dist": "fixed", "value": 8},
                           "output": {"dist": "fixed", "value": 2}},
               "num_requests": 1}


def test_constants_are_the_logged_figures() -> None:
    assert (NON_TORCH_BYTES, NON_TORCH_TP_BYTES, CUDA_GRAPH_BYTES) == (
        NON_TORCH, NON_TORCH_TP, CUDA_GRAPHS)


def test_llama3_8b_on_one_h100_by_hand() -> None:
    # Sized as vLLM 0.24.0 (the default release) sizes it: Llama runs on Model Runner V2,
    # which profiles the layers without attention and samples greedily, and estimates
    # no CUDA-graph memory.
    # Total reported by the H100: 85,045,477,376 B; x 0.9 = 76,540,929,638.4 B.
    # Weights: 32 layers x (218,103,808 projections + 8,192 norm weights)
    #   + 2 x 128,256 x 4,096 (embedding, LM head) + 4,096 (final norm) = 8,030,261,248
    #   parameters x 2 B = 16,060,522,496 B, + rotary table 8,192 x 128 x 2 B = 2,097,152.
    weights = 16_060_522_496 + 2_097_152
    # Activation: the MLP at 8,192 tokens, 8,192 x 2 B x (3 x 4,096 + 3 x 14,336) =
    # 905,969,664 B; the sampler's 8,192 x 4,096 x 2 B + 256 x 128,256 x 2 B (bf16 logits)
    # is smaller.
    activation = 8_192 * 2 * (3 * 4_096 + 3 * 14_336)
    assert activation > 8_192 * 4_096 * 2 + 256 * 128_256 * 2
    kv = 85_045_477_376 * 0.9 - weights - activation - NON_TORCH
    # 59,400,541,635.4 B over 2 x 32 layers x 8 heads x 128 x 2 B x 16 = 2,097,152 B a block.
    assert kv == pytest.approx(59_400_541_635.4)
    b = memory_budget(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, 0.9, 16, 8192, 256)
    assert (b.weights, b.activation, b.non_torch, b.cuda_graph) == (
        weights, activation, NON_TORCH, 0)
    assert b.block_bytes == 2_097_152
    assert b.blocks == 28_324 == int(kv // 2_097_152)
    assert b.kv_tokens == 28_324 * 16
    assert b.summary()["sized"] == "as vLLM 0.24.0 sizes it (Model Runner V2)"


def test_llama3_70b_on_four_h200s_by_hand() -> None:
    # Sized as vLLM 0.21 does: the V1 model runner (attention profiled too), a sampler
    # of about 14 bytes a logit (Triton top-k/top-p), and the CUDA-graph estimate.
    # Per GPU (tp 4): 16 query heads, 2 KV heads, MLP width 7,168, vocabulary 32,064.
    # A layer: QKV 8,192 x (16 + 2 x 2) x 128 = 20,971,520; output 16 x 128 x 8,192 =
    # 16,777,216; MLP 3 x 8,192 x 7,168 = 176,160,768; norms 2 x 8,192 = 16,384.
    layer = 20_971_520 + 16_777_216 + 176_160_768 + 16_384
    params = 80 * layer + 2 * 32_064 * 8_192 + 8_192
    assert params == 17_639_415_808
    weights = params * 2 + 8_192 * 128 * 2  # and the rotary table, whole on every GPU
    # Activation: layers 8,192 x 2 B x (3 x 8,192 + 3 x 7,168) = 754,974,720 B, larger than
    # the sampler over the whole (gathered) vocabulary 8,192 x 8,192 x 2 + 256 x 128,256 x 14.
    activation = 8_192 * 2 * (3 * 8_192 + 3 * 7_168)
    assert activation > 8_192 * 8_192 * 2 + 256 * 128_256 * 14
    # tp > 1 adds the NCCL channels the profiling pass connects to the non-torch memory.
    kv = (143_156 * 2**20 * 0.9 - weights - activation - (NON_TORCH + NON_TORCH_TP)
          - CUDA_GRAPHS)
    assert kv == pytest.approx(97_667_124_431.0)
    # A block per GPU: 2 x 80 layers x 2 heads x 128 x 2 B x 16 tokens = 1,310,720 B.
    rules = memory_rules("0.21.0", MODELS["llama-3-70b"])
    b = memory_budget(MODELS["llama-3-70b"], GPUS["h200"], 4, 0.9, 16, 8192, 256, rules=rules)
    assert (b.weights, b.activation, b.non_torch, b.cuda_graph) == (
        weights, activation, NON_TORCH + NON_TORCH_TP, CUDA_GRAPHS)
    assert b.blocks == 74_514 == int(kv // 1_310_720)


def test_vllm_pr_10511_llama3_8b_h100() -> None:
    # vllm-project/vllm PR 10511 (Dec 2024), `vllm serve meta-llama/Meta-Llama-3-8B` on
    # an H100: total_gpu_memory 79.22GiB, utilization 0.90, model weights take 14.96GiB,
    # PyTorch activation peak memory 1.26GiB. Defaults then: 8,192 batched tokens (the
    # model length; no chunked prefill), 256 sequences; top-k/top-p by sorting the
    # logits, as in vLLM up to 0.16, whose rules servesim applies to it. (Its
    # non_torch_memory, 1.79 GiB and 3.58 at tp 2, counted NCCL's buffers, which vLLM
    # leaves outside the budget since 0.11.)
    m = MODELS["llama-3-8b"]
    rules = memory_rules("0.16.0", m)
    assert weight_bytes(m, 1) / GIB == pytest.approx(14.96, abs=0.005)
    act = activation_bytes(m, 1, 8192, 256, rules=rules) / GIB
    assert act == pytest.approx(1.26, abs=0.01)
    # The same with -tp 2: weights 7.48GiB, activation still 1.26GiB (the sampler's
    # logits span the whole vocabulary on every GPU).
    assert weight_bytes(m, 2) / GIB == pytest.approx(7.48, abs=0.005)
    assert activation_bytes(m, 2, 8192, 256, rules=rules) / GIB == pytest.approx(1.26, abs=0.01)


@pytest.mark.parametrize(("tokens", "activation", "kv"), [(20_000, 2.07, 3.81),
                                                          (29_000, 2.99, 2.89)])
def test_vllm_issue_10517_llama31_8b_rtx3090(tokens: int, activation: float, kv: float) -> None:
    # vllm-project/vllm issue 10517: Llama-3.1-8B-Instruct on an RTX 3090, max model
    # length 20k and 29k (then the batched-token limit): "Loading model weights took
    # 14.9888 GB", total_gpu_memory=23.58GiB, peak_torch_memory=17.06GiB (20k) and
    # 17.98GiB (29k), non_torch_memory=0.35GiB, kv_cache_size=3.81GiB and 2.89GiB,
    # gpu_memory_utilization=0.90. Here the layers (attention profiled: the V1 runner),
    # not the sampler, set the peak.
    m = MODELS["llama-3.1-8b"]
    weights = weight_bytes(m, 1) / GIB
    assert weights == pytest.approx(14.9888, abs=0.001)  # the rotary table of 131k positions
    act = activation_bytes(m, 1, tokens, 256, rules=memory_rules("0.16.0", m)) / GIB
    assert act == pytest.approx(activation, rel=0.01)
    assert 23.58 * 0.90 - weights - act - 0.35 == pytest.approx(kv, abs=0.02)


# vLLM 0.11 on one and two H100s (79.18 GiB each), 0.9 of memory, vLLM's defaults for
# the GPU (8,192 batched tokens, 1,024 sequences): the figures llm-d-benchmark's table of
# its logs gives (config_explorer/empirical-vllm-memory-results.md): weights ("Model
# loading took"), torch peak and non-torch increase, "Available KV cache memory" (GiB).
LLMD = [("llama-3.1-8b", 1, 14.99, 4.76, 0.13, 51.38),
        ("qwen3-32b", 1, 61.03, 5.64, 0.14, 4.45),
        ("qwen3-32b", 2, 30.59, 5.64, 0.54, 34.49),
        ("llama-3.3-70b-fp8", 2, 33.88, 4.84, 0.55, 32.00)]


@pytest.mark.parametrize(("name", "tp", "weights", "activation", "non_torch", "kv"), LLMD)
def test_vllm_0_11_logs_on_h100(name: str, tp: int, weights: float, activation: float,
                                non_torch: float, kv: float) -> None:
    m = MODELS[name]
    gpu = dataclasses.replace(GPUS["h100-sxm"], mem_bytes=int(79.18 * GIB))
    b = memory_budget(m, gpu, tp, 0.9, 16, 8192, 1024, rules=memory_rules("0.11.0", m))
    assert b.weights / GIB == pytest.approx(weights, abs=0.08)
    # Sorting sampler over 1,024 sequences: within 2% of the logged peak.
    assert b.activation / GIB == pytest.approx(activation, rel=0.02)
    assert b.non_torch / GIB == pytest.approx(non_torch, abs=0.03)
    assert b.cuda_graph == 0  # graphs captured after the cache was sized, before 0.18
    assert b.kv / GIB == pytest.approx(kv, abs=0.15)


def test_each_release_profiles_as_its_code_does() -> None:
    llama, qwen3, qwen25 = MODELS["llama-3-8b"], MODELS["qwen3-32b"], MODELS["qwen2.5-7b"]
    moe, fp8 = MODELS["qwen3-30b-a3b"], MODELS["llama-3.3-70b-fp8"]
    # Model Runner V2 by default: Qwen3 dense from 0.22, Llama and Mistral from 0.23
    # (unquantised until 0.24), every model without experts from 0.25.
    assert [uses_v2_runner(v, qwen3) for v in ("0.19.0", "0.22.0", "0.24.0")] == [
        False, True, True]
    assert [uses_v2_runner(v, llama) for v in ("0.22.0", "0.23.0", "0.26.0")] == [
        False, True, True]
    assert [uses_v2_runner(v, fp8) for v in ("0.23.0", "0.24.0")] == [False, True]
    assert [uses_v2_runner(v, qwen25) for v in ("0.24.0", "0.25.0")] == [False, True]
    assert not uses_v2_runner("0.26.0", moe)
    # The sampler's bytes a logit: sorting up to 0.16, Triton/FlashInfer from 0.17; V2's
    # greedy profile holds the bf16 logits (and the all-gather's buffers under tp).
    assert memory_rules("0.16.0", qwen25).sampler_bytes_per_logit(1) == 39
    assert memory_rules("0.17.0", qwen25).sampler_bytes_per_logit(1) == 14
    # V2 up to 0.25 keeps its sampler's fp32 copy beside the bf16 logits; 0.26 works in place.
    v2 = memory_rules("0.24.0", qwen3)
    assert (v2.sampler_bytes_per_logit(1), v2.sampler_bytes_per_logit(2)) == (6, 6)
    v26 = memory_rules("0.26.0", qwen3)
    assert (v26.sampler_bytes_per_logit(1), v26.sampler_bytes_per_logit(2)) == (2, 5)
    # n-gram and draft-model speculation are features V2 lacks: the V1 runner profiles.
    assert not uses_v2_runner("0.24.0", qwen3, "ngram")
    assert uses_v2_runner("0.24.0", qwen3, "eagle") and not memory_rules(
        "0.24.0", qwen3, "draft").v2_runner
    # CUDA-graph estimate: from 0.21, not under V2; utilization default 0.92 from 0.22.
    assert [memory_rules(v, qwen25).graph_estimate for v in ("0.19.0", "0.21.0")] == [
        False, True]
    assert not v2.graph_estimate
    assert [memory_rules(v, qwen25).utilization for v in ("0.19.0", "0.22.0")] == [0.9, 0.92]


@pytest.mark.parametrize(("version", "message"), [
    ("0.27.0", "serving.vllm_version: got '0.27.0': servesim sizes the KV cache as vLLM "
               "0.11 to 0.26 do"),
    ("0.33.0", "give a release in that range, or serving.num_gpu_blocks from your server's "
               "log"),
    ("0.10.2", "got '0.10.2': servesim sizes the KV cache as vLLM 0.11 to 0.26 do"),
    ("latest", "serving.vllm_version: got 'latest', expected a vLLM release such as 0.24.0"),
    (0.24, "serving.vllm_version: got 0.24, a number, expected a string: quote the value"),
    ("0.024", "serving.vllm_version: got '0.024', expected a vLLM release such as 0.24.0"),
    # A near-miss with a long run of word characters: refused at once (a parser that could
    # split the run many ways took minutes on 30 characters and never returned on 60).
    ("0.24.0-build_" + "a" * 60 + "!", "expected a vLLM release such as 0.24.0"),
])
def test_a_release_outside_the_modelled_range_is_refused(version: object, message: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(message)):
        from_dict(tiny_scenario(serving={"vllm_version": version}))


@pytest.mark.parametrize(("name", "release"), [
    ("0.24.0", (0, 24)), ("v0.11.2.post1", (0, 11)), ("0.12.0rc1", (0, 12)),
    ("0.25.1.dev16+g8a8fc946231d6e.cu128", (0, 25)), ("0.10.1.1", (0, 10)), ("1.0.0", (1, 0)),
])
def test_release_names_as_builds_print_them(name: str, release: tuple[int, int]) -> None:
    from sim.cost.vllmmemory import version_tuple

    assert version_tuple(name) == release


def test_a_scenario_takes_its_profiles_release_or_the_one_it_names() -> None:
    def memory(**over: object) -> dict:
        sc = {"model": "qwen3-32b", "hardware": {"gpu": "h100-sxm"}, "cost": "measured",
              "workload": {"arrivals": {"process": "poisson", "rate": 1},
                           "lengths": {"prompt": {"dist": "fixed", "value": 100},
                                       "output": {"dist": "fixed", "value": 10}},
                           "num_requests": 1}}
        for k, v in over.items():
            sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
        return pool_memory(MODELS["qwen3-32b"], pools(from_dict(sc))[0]).summary()

    # H100's profiles are vLLM 0.24.0's: Qwen3 on V2, 0.92 of memory by default.
    h100 = memory()
    assert (h100["sized"], h100["utilization"], h100["cuda_graph_gib"]) == (
        "as vLLM 0.24.0 sizes it (Model Runner V2)", 0.92, 0.0)
    # A100's are vLLM 0.14.0's: the V1 runner, its sorting sampler, 0.9.
    # The MLP at 8,192 tokens peaks there: 8,192 x 2 B x (3 x 5,120 + 3 x 25,600).
    assert h100["activation_gib"] * GIB == 8_192 * 2 * (3 * 5_120 + 3 * 25_600)
    a100 = memory(hardware={"gpu": "a100-80gb"})
    assert (a100["sized"], a100["utilization"]) == (
        "as vLLM 0.14.0 sizes it (the V1 model runner)", 0.9)
    # vLLM's A100 defaults, 2,048 tokens and 256 sequences: the sorting sampler peaks,
    # 2,048 x 5,120 x 2 B + 256 x 151,936 x 39 B.
    assert a100["activation_gib"] * GIB == 2_048 * 5_120 * 2 + 256 * 151_936 * 39
    # Named, a release replaces the profile's; a given utilization stays.
    named = memory(serving={"vllm_version": "0.19.0"}, hardware={"memory_utilization": 0.85})
    assert (named["sized"], named["utilization"]) == (
        "as vLLM 0.19.0 sizes it (the V1 model runner)", 0.85)
    assert memory(cost="roofline")["sized"] == "as vLLM 0.24.0 sizes it (Model Runner V2)"



def test_a_release_before_0_14_runs_without_async_scheduling() -> None:
    from sim.cost.overlap import async_scheduling

    def runs_async(**serving: object) -> bool:
        return async_scheduling(tiny_scenario(cost="roofline",
                                              serving={"policy": "chunked", **serving}))

    assert runs_async() and runs_async(vllm_version="0.14.0")
    assert not runs_async(vllm_version="0.13.0")
    assert runs_async(vllm_version="0.12.0", async_scheduling=True)  # as a flag sets it


def test_model_that_does_not_fit_names_every_term() -> None:
    with pytest.raises(ServesimError) as err:
        from_dict({"model": "llama-3-70b", "hardware": {"gpu": "l40s"},
                   "workload": ONE_REQUEST})
    text = str(err.value)
    assert text.startswith("<scenario>: hardware: model llama-3-70b does not fit on l40s")
    # chunked on a 48 GB GPU: vLLM v1's 2048 tokens and 256 sequences, sized as vLLM 0.24.0
    # (0.92 of memory; Model Runner V2, no CUDA-graph estimate); the MLP peaks:
    # 2048 x 2 B x (3 x 8192 + 3 x 28672) = 0.42 GiB.
    for term in ("44.52 GiB x memory_utilization 0.92", "weights 131.42", "activation 0.42",
                 "non-torch 0.16", "CUDA graphs 0.00"):
        assert term in text, term
    # The weights alone are over the budget: the batch limits cannot help.
    assert text.endswith("the weights alone take more than the 40.96 GiB: raise tp (or pp, "
                         "ep) or memory_utilization, or choose a larger GPU")
    assert "\n" not in text


def test_model_that_fits_but_for_its_batch_terms_names_the_limits() -> None:
    # Llama-3-70B on two H100s: 65.71 GiB of weights and 0.57 non-torch fit the 72.87,
    # the activation peak of 65,536 batched tokens does not (65,536 x 2 B x (3 x 8,192 +
    # 3 x 14,336) = 8.25 GiB); what lowers it are the batch limits (8,192 fit).
    scenario = {"model": "llama-3-70b", "hardware": {"gpu": "h100-sxm", "tp": 2},
                "serving": {"max_num_batched_tokens": 65_536}, "workload": ONE_REQUEST}
    with pytest.raises(ServesimError) as err:
        from_dict(scenario)
    text = str(err.value)
    assert "weights 65.71, activation 8.25, non-torch 0.57, CUDA graphs 0.00 GiB" in text
    assert text.endswith("raise tp or memory_utilization, lower serving.max_num_seqs or "
                         "max_num_batched_tokens (the activation and CUDA-graph terms grow "
                         "with them), or choose a larger GPU")
    assert from_dict({**scenario, "serving": {"max_num_batched_tokens": 8_192}})


def test_num_gpu_blocks_and_its_alias() -> None:
    sc = tiny_scenario(serving={"num_gpu_blocks": 7})
    assert sc.serving.num_gpu_blocks == 7
    old = tiny_scenario(serving={"num_kv_blocks": 7})
    assert old.serving == sc.serving
    with pytest.raises(ServesimError, match="serving.num_kv_blocks: num_kv_blocks is another "
                                            "name for num_gpu_blocks"):
        tiny_scenario(serving={"num_gpu_blocks": 7, "num_kv_blocks": 7})
    pool = tiny_scenario(serving={"policy": "disaggregated"},
                         disaggregated={"decode": {"num_kv_blocks": 5}})
    assert pool.disaggregated.decode.num_gpu_blocks == 5


def test_gpu_memory_utilization_alias() -> None:
    sc = tiny_scenario(hardware={"gpu_memory_utilization": 0.5})
    assert sc.hardware.memory_utilization == 0.5
    with pytest.raises(ServesimError, match="hardware.gpu_memory_utilization: .*another name"):
        tiny_scenario(hardware={"gpu_memory_utilization": 0.5, "memory_utilization": 0.5})


def test_override_keeps_the_terms_in_the_summary() -> None:
    from conftest import run_requests

    from sim.report.printed import table
    from sim.report.summary import summarize

    res = run_requests(tiny_scenario(serving={"num_gpu_blocks": 9}), [0.0], [8], [2])
    mem = summarize(res)["memory"]["both"]
    assert (mem["kv_blocks"], mem["kv_tokens"], mem["kv_blocks_from"]) == (9, 36,
                                                                           "num_gpu_blocks")
    # The tiny model's block: 2 layers x 2 KV heads x 64 x 4 B x 2 x 4 tokens = 8,192 B.
    assert mem["kv_gib"] == 9 * 8192 / GIB
    assert mem["total_gib"] == GPUS["h100-sxm"].mem_bytes / GIB
    assert "memory/GPU: 79.20 GiB x 0.92 - weights" in table(summarize(res))
    # The override, not a release's profile, set the blocks: no "sized as" phrase.
    assert "sized" not in mem and "sizes it" not in table(summarize(res))
    free = summarize(run_requests(tiny_scenario(), [0.0], [8], [2]))["memory"]["both"]
    b = memory_budget(MODELS["tiny"], GPUS["h100-sxm"], 1, 0.92, 4, 256, 256)
    assert free == b.summary() and free["kv_blocks_from"] == "memory"
    assert dataclasses.asdict(b)["total"] == 85_045_477_376


def test_a_rotary_table_that_does_not_fit_asks_for_a_shorter_context() -> None:
    """Llama-3-8B stretched to 2**29 positions at tp 8: its rotary table (2**29 x 128 x
    2 B = 128 GiB) is what does not fit, and every GPU keeps it whole, so the error asks
    for a shorter context rather than more GPUs."""
    scenario = {"model": {"preset": "llama-3-8b", "max_context": 2**29,
                          "hf_overrides": {"max_position_embeddings": 8192,
                                           "rope_scaling": {"rope_type": "linear",
                                                            "factor": 65536.0}}},
                "hardware": {"gpu": "h100-sxm", "tp": 8}, "workload": ONE_REQUEST}
    with pytest.raises(ServesimError) as err:
        from_dict(scenario)
    text = str(err.value)
    assert text.endswith("under one KV block (262144 bytes); of the weights, the rotary "
                         "cos/sin table of 536,870,912 positions takes 128.00 GiB, which "
                         "every GPU keeps whole (more GPUs do not shrink it): give a shorter "
                         "context (model.max_context, or a smaller max_position_embeddings or "
                         "RoPE factor in hf_overrides)")
    assert "raise tp" not in text and "\n" not in text
    # A context whose table fits runs.
    assert from_dict({**scenario, "model": {**scenario["model"], "max_context": 2**24}})
