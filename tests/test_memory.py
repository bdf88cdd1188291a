"""KV capacity as vLLM sizes it: hand-worked budgets, and checks against vLLM's own logs.

Every figure in the hand-worked tests is written out; the published-log tests take the
log's own GPU total, settings and (where the accounting differs by version) its
non-torch figure, and check weights, activation and KV against what the log printed.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import tiny_scenario

from sim.config.scenario import from_dict
from sim.cost.gpus import GPUS
from sim.cost.memory import (
    CUDA_GRAPH_BYTES,
    GIB,
    NON_TORCH_BYTES,
    NON_TORCH_TP_BYTES,
    activation_bytes,
    kv_capacity_blocks,
    memory_budget,
    weight_bytes,
)
from sim.cost.presets import MODELS
from sim.errors import ServesimError

NON_TORCH = 171_798_691  # int(0.16 GiB)
NON_TORCH_TP = 1_921_997_864  # int(1.79 GiB)
CUDA_GRAPHS = 783_831_531  # int(0.73 GiB)


def test_constants_are_the_logged_figures() -> None:
    assert (NON_TORCH_BYTES, NON_TORCH_TP_BYTES, CUDA_GRAPH_BYTES) == (
        NON_TORCH, NON_TORCH_TP, CUDA_GRAPHS)


def test_llama3_8b_on_one_h100_by_hand() -> None:
    # Total reported by the H100: 85,045,477,376 B; x 0.9 = 76,540,929,638.4 B.
    # Weights: 32 layers x (218,103,808 projections + 8,192 norm weights)
    #   + 2 x 128,256 x 4,096 (embedding, LM head) + 4,096 (final norm) = 8,030,261,248
    #   parameters x 2 B = 16,060,522,496 B, + rotary table 8,192 x 128 x 2 B = 2,097,152.
    weights = 16_060_522_496 + 2_097_152
    # Activation: layers 8,192 tokens x 2 B x (3 x 4,096 + 3 x 14,336) = 905,969,664 B;
    # sampler 8,192 x 4,096 x 2 B + 256 x 128,256 x 39 B = 1,347,616,768 B: the larger.
    activation = 8_192 * 4_096 * 2 + 256 * 128_256 * 39
    assert activation > 8_192 * 2 * (3 * 4_096 + 3 * 14_336)
    kv = 85_045_477_376 * 0.9 - weights - activation - NON_TORCH - CUDA_GRAPHS
    # 58,175,063,000.4 B over 2 x 32 layers x 8 heads x 128 x 2 B x 16 = 2,097,152 B a block.
    assert kv == pytest.approx(58_175_063_000.4)
    b = memory_budget(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, 0.9, 16, 8192, 256)
    assert (b.weights, b.activation, b.non_torch, b.cuda_graph) == (
        weights, activation, NON_TORCH, CUDA_GRAPHS)
    assert b.block_bytes == 2_097_152
    assert b.blocks == 27_740 == int(kv // 2_097_152)
    assert b.kv_tokens == 27_740 * 16


def test_llama3_70b_on_four_h200s_by_hand() -> None:
    # Per GPU (tp 4): 16 query heads, 2 KV heads, MLP width 7,168, vocabulary 32,064.
    # A layer: QKV 8,192 x (16 + 2 x 2) x 128 = 20,971,520; output 16 x 128 x 8,192 =
    # 16,777,216; MLP 3 x 8,192 x 7,168 = 176,160,768; norms 2 x 8,192 = 16,384.
    layer = 20_971_520 + 16_777_216 + 176_160_768 + 16_384
    params = 80 * layer + 2 * 32_064 * 8_192 + 8_192
    assert params == 17_639_415_808
    weights = params * 2 + 8_192 * 128 * 2  # and the rotary table, whole on every GPU
    # Activation: layers 8,192 x 2 B x (3 x 8,192 + 3 x 7,168) = 754,974,720 B; sampler
    # over the whole (gathered) vocabulary 8,192 x 8,192 x 2 + 256 x 128,256 x 39 B.
    activation = 8_192 * 8_192 * 2 + 256 * 128_256 * 39
    assert activation > 8_192 * 2 * (3 * 8_192 + 3 * 7_168)
    # tp > 1 adds NCCL and custom all-reduce buffers to the non-torch memory.
    kv = (143_156 * 2**20 * 0.9 - weights - activation - (NON_TORCH + NON_TORCH_TP)
          - CUDA_GRAPHS)
    assert kv == pytest.approx(95_525_668_784.4)
    # A block per GPU: 2 x 80 layers x 2 heads x 128 x 2 B x 16 tokens = 1,310,720 B.
    b = memory_budget(MODELS["llama-3-70b"], GPUS["h200"], 4, 0.9, 16, 8192, 256)
    assert (b.weights, b.activation, b.non_torch) == (weights, activation,
                                                      NON_TORCH + NON_TORCH_TP)
    assert b.blocks == 72_880 == int(kv // 1_310_720)
    assert kv_capacity_blocks(MODELS["llama-3-70b"], GPUS["h200"], 4, 0.9, 16) == 72_880


def test_vllm_pr_10511_llama3_8b_h100() -> None:
    # vllm-project/vllm PR 10511 (Dec 2024), `vllm serve meta-llama/Meta-Llama-3-8B` on
    # an H100: total_gpu_memory 79.22GiB, utilization 0.90, model weights take 14.96GiB,
    # non_torch_memory 1.79GiB, PyTorch activation peak memory 1.26GiB,
    # available_kv_cache_memory 53.29GiB. Defaults then: 8,192 batched tokens (the model
    # length; no chunked prefill), 256 sequences; CUDA graphs captured after sizing.
    m = MODELS["llama-3-8b"]
    assert weight_bytes(m, 1) / GIB == pytest.approx(14.96, abs=0.005)
    act = activation_bytes(m, 1, 8192, 256) / GIB
    assert act == pytest.approx(1.26, abs=0.01)
    kv = 79.22 * 0.90 - weight_bytes(m, 1) / GIB - act - 1.79
    assert kv == pytest.approx(53.29, abs=0.01)
    # The same with -tp 2: weights 7.48GiB, activation still 1.26GiB (the sampler's
    # logits span the whole vocabulary on every GPU), non_torch_memory 3.58GiB.
    assert weight_bytes(m, 2) / GIB == pytest.approx(7.48, abs=0.005)
    assert activation_bytes(m, 2, 8192, 256) / GIB == pytest.approx(1.26, abs=0.01)
    collectives = NON_TORCH_TP / GIB
    assert collectives == pytest.approx(3.58 - 1.79, abs=0.005)


@pytest.mark.parametrize(("tokens", "activation", "kv"), [(20_000, 2.07, 3.81),
                                                          (29_000, 2.99, 2.89)])
def test_vllm_issue_10517_llama31_8b_rtx3090(tokens: int, activation: float, kv: float) -> None:
    # vllm-project/vllm issue 10517: Llama-3.1-8B-Instruct on an RTX 3090, max model
    # length 20k and 29k (then the batched-token limit): "Loading model weights took
    # 14.9888 GB", total_gpu_memory=23.58GiB, peak_torch_memory=17.06GiB (20k) and
    # 17.98GiB (29k), non_torch_memory=0.35GiB, kv_cache_size=3.81GiB and 2.89GiB,
    # gpu_memory_utilization=0.90. Here the layers, not the sampler, set the peak.
    m = MODELS["llama-3.1-8b"]
    weights = weight_bytes(m, 1) / GIB
    assert weights == pytest.approx(14.9888, abs=0.001)  # the rotary table of 131k positions
    act = activation_bytes(m, 1, tokens, 256) / GIB
    assert act == pytest.approx(activation, rel=0.01)
    assert 23.58 * 0.90 - weights - act - 0.35 == pytest.approx(kv, abs=0.02)


def test_model_that_does_not_fit_names_every_term() -> None:
    with pytest.raises(ServesimError) as err:
        from_dict({"model": "llama-3-70b", "hardware": {"gpu": "l40s"},
                   "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                                "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                            "output": {"dist": "fixed", "value": 2}},
                                "num_requests": 1}})
    text = str(err.value)
    assert text.startswith("<scenario>: hardware: model llama-3-70b does not fit on l40s")
    # chunked on a 48 GB GPU: vLLM v1's 2048 tokens and 256 sequences; the sampler peaks:
    # 2048 x 8192 x 2 + 256 x 128256 x 39 bytes = 1.22 GiB.
    for term in ("44.52 GiB x memory_utilization 0.9", "weights 131.42", "activation 1.22",
                 "non-torch 0.16", "CUDA graphs 0.73"):
        assert term in text, term
    # The weights alone are over the budget: the batch limits cannot help.
    assert text.endswith("the weights alone take more than the 40.07 GiB: raise tp (or pp, "
                         "ep) or memory_utilization, or choose a larger GPU")
    assert "\n" not in text


def test_model_that_fits_but_for_its_batch_terms_names_the_limits() -> None:
    # Llama-3-70B on two H100s: 65.71 GiB of weights and 1.95 non-torch fit the 71.28, the
    # activation peak of 8,192 tokens and 1,024 sequences' CUDA graphs do not; what lowers
    # them are the batch limits (256 sequences fit).
    with pytest.raises(ServesimError) as err:
        from_dict({"model": "llama-3-70b", "hardware": {"gpu": "h100-sxm", "tp": 2},
                   "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                                "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                            "output": {"dist": "fixed", "value": 2}},
                                "num_requests": 1}})
    text = str(err.value)
    assert "weights 65.71, activation 4.90, non-torch 1.95, CUDA graphs 0.73 GiB" in text
    assert text.endswith("raise tp or memory_utilization, lower serving.max_num_seqs or "
                         "max_num_batched_tokens (the activation and CUDA-graph terms grow "
                         "with them), or choose a larger GPU")


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

    from sim.report.outputs import table
    from sim.report.summary import summarize

    res = run_requests(tiny_scenario(serving={"num_gpu_blocks": 9}), [0.0], [8], [2])
    mem = summarize(res)["memory"]["both"]
    assert (mem["kv_blocks"], mem["kv_tokens"], mem["kv_blocks_from"]) == (9, 36,
                                                                           "num_gpu_blocks")
    # The tiny model's block: 2 layers x 2 KV heads x 64 x 4 B x 2 x 4 tokens = 8,192 B.
    assert mem["kv_gib"] == 9 * 8192 / GIB
    assert mem["total_gib"] == GPUS["h100-sxm"].mem_bytes / GIB
    assert "memory/GPU: 79.20 GiB x 0.9 - weights" in table(summarize(res))
    free = summarize(run_requests(tiny_scenario(), [0.0], [8], [2]))["memory"]["both"]
    b = memory_budget(MODELS["tiny"], GPUS["h100-sxm"], 1, 0.9, 4, 256, 256)
    assert free == b.summary() and free["kv_blocks_from"] == "memory"
    assert dataclasses.asdict(b)["total"] == 85_045_477_376
