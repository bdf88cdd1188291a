"""Gated DeltaNet states as vLLM keeps them: pages of the KV blocks' pool, the block
size raised so that a page of one attention layer holds one linear layer's state, a
running request holding a page a group of linear layers (1 + k under speculative
decoding); SGLang's pool of its own where a scenario says so, or its kernels price."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from sim.config.disagg import pool_memory, pools
from sim.config.scenario import MeasuredConfig, from_dict
from sim.config.statepool import resolve_state_pool
from sim.core.engine import simulate
from sim.cost.gpus import GPUS
from sim.cost.kvpages import state_block_size
from sim.cost.memory import memory_budget
from sim.cost.presets import MODELS
from sim.errors import ServesimError
from sim.report.human import memory_terms
from sim.report.summary import summarize

Q27 = MODELS["qwen3.5-27b"]
# One GPU, one linear layer of Qwen3.5-27B: 48 value heads' 128 x 128 fp32 matrices and
# the last 3 of 10,240 convolution channels in bf16.
LAYER_STATE = 48 * 128 * 128 * 4 + 10_240 * 3 * 2
# One attention layer's K and V of a token on one GPU: 4 KV heads of 256, bf16.
LAYER_TOKEN = 2 * 4 * 256 * 2


def _raw(**serving: Any) -> dict[str, Any]:
    return {"name": "q", "model": "qwen3.5-27b", "hardware": {"gpu": "h200", "tp": 1},
            "cost": "roofline",
            # Without a prefix cache, whose align mode cuts prompts on the grid
            # (test_state_prefix.py): one chunk a prompt.
            "serving": {"policy": "chunked", "prefix_caching": False, **serving},
            "workload": {"concurrency": 20, "num_requests": 60, "seed": 0,
                         "lengths": {"prompt": {"dist": "fixed", "value": 1000},
                                     "output": {"dist": "fixed", "value": 64}}}}


def test_block_size_as_vllm_raises_it() -> None:
    assert LAYER_STATE == 3_207_168 and LAYER_STATE / LAYER_TOKEN == 783.0
    # The fewest multiple of 16 tokens whose page holds the state: 49 x 16.
    assert state_block_size(Q27, 1, 16) == 784
    # At tp 2 both halve (2 KV heads, 24 value heads, 5,120 channels a GPU).
    assert state_block_size(Q27, 2, 16) == 784
    # An FP8 KV cache halves the token's bytes: twice the tokens.
    assert state_block_size(dataclasses.replace(Q27, kv_dtype="fp8"), 1, 16) == 1568
    # A larger --block-size is the multiple: 13 x 64.
    assert state_block_size(Q27, 1, 64) == 832
    # Drafting 2 tokens keeps 2 more convolution inputs: 10,240 x 2 x 2 bytes more,
    # 3,248,128 / 4,096 = 793 tokens, 50 x 16.
    assert state_block_size(Q27, 1, 16, 2) == 800


def test_blocks_hold_the_attention_layers_and_requests_take_state_pages() -> None:
    sc = from_dict(_raw())
    assert (sc.serving.linear_state_pool, sc.serving.block_size) == ("kv_cache", 784)
    assert any("serving.block_size: 16 -> 784 tokens" in n and "3,207,168 bytes" in n
               for n in sc.notes)
    b = pool_memory(sc.model, pools(sc)[0])
    # A block: 784 tokens of the 16 attention layers; nothing set aside for states.
    assert b.block_bytes == 16 * LAYER_TOKEN * 784 == 51_380_224
    assert (b.linear_state, b.state_seqs, b.state_groups, b.state_blocks) == (0, 0, (3, 1), 3)
    room = b.budget - b.weights - b.activation - b.non_torch - b.cuda_graph
    assert b.blocks == int(room // b.block_bytes)
    m = b.summary()
    assert m["linear_state_blocks_per_request"] == 3 and "linear_state_gib" not in m
    assert "each running request's linear-attention states, 3 blocks of them" in \
        memory_terms(m)
    # Reserved instead (SGLang's way): the 16-token block and states set aside.
    r = from_dict(_raw(linear_state_pool="reserved"))
    rb = pool_memory(r.model, pools(r)[0])
    assert (r.serving.block_size, rb.state_blocks, rb.state_seqs > 0) == (16, 0, True)


def test_speculative_decoding_takes_one_page_a_state() -> None:
    mtp = {"method": "mtp", "num_tokens": 2, "acceptance": {"rate": 0.7}}
    sc = from_dict(_raw(speculative=copy.deepcopy(mtp)))
    b = pool_memory(sc.model, pools(sc)[0])
    # 1 + k = 3 states, a page in each of 3 linear groups.
    assert (b.state_copies, b.state_blocks) == (3, 9)
    assert b.summary()["linear_state_copies"] == 3


def test_the_pool_bounds_the_running_requests_by_hand() -> None:
    # 50 blocks; a request of 1,000 + 64 tokens spans 2 blocks of 784 and holds 3 state
    # pages: 10 run at once of the 20 clients, none preempted (its blocks never grow).
    sc = from_dict(_raw(num_gpu_blocks=50))
    res = simulate(sc, log_steps=True)
    assert res.step_log is not None
    assert max(len(step[3]) for step in res.step_log) == 10
    s = summarize(res)
    assert s["requests"]["finished"] == 60 and s["preemptions"] == 0
    # Set aside (SGLang's way) the same bytes are 50 x 49 blocks of 16 tokens for the
    # attention KV alone (67 a request), the states outside them: all 20 run.
    r = simulate(from_dict(_raw(num_gpu_blocks=50 * 49, linear_state_pool="reserved",
                                max_num_seqs=20)), log_steps=True)
    assert r.step_log is not None and max(len(step[3]) for step in r.step_log) == 20


def test_a_request_that_cannot_hold_its_states_is_rejected() -> None:
    # 5 blocks: 1,000 + 64 tokens take 2 and the states 3; 1,600 + 64 would take 6.
    ok = summarize(simulate(from_dict(_raw(num_gpu_blocks=5))))
    assert ok["requests"]["finished"] == 60
    raw = _raw(num_gpu_blocks=5)
    raw["workload"]["lengths"]["prompt"]["value"] = 1600
    res = simulate(from_dict(raw))
    assert set(res.reason.tolist()) == {"exceeds_kv_capacity"}


def test_default_follows_the_kernels_framework_and_key_checks() -> None:
    sc = from_dict(_raw())
    raw_serving = dataclasses.replace(sc.serving, linear_state_pool=None, block_size=16)
    for framework, kind, size in (("sglang", "reserved", 16), ("trtllm", "reserved", 16),
                                  ("vllm", "kv_cache", 784)):
        measured = dataclasses.replace(sc, serving=raw_serving, notes=(), cost=dataclasses.replace(
            sc.cost, roofline=None, measured=MeasuredConfig(framework=framework)))
        out = resolve_state_pool(measured)
        assert (out.serving.linear_state_pool, out.serving.block_size) == (kind, size)
    with pytest.raises(ServesimError, match=r"serving\.linear_state_pool.*no linear-attention"):
        from_dict({**_raw(linear_state_pool="kv_cache"), "model": "llama-3-8b"})
    with pytest.raises(ServesimError, match=r"serving\.linear_state_pool.*'kv_cache'"):
        from_dict(_raw(linear_state_pool="paged"))


def test_budget_default_keeps_states_set_aside() -> None:
    # memory_budget's own default (silicon's SGLang sizing reads it) stays SGLang's.
    b = memory_budget(Q27, GPUS["h200"], 1, 0.9, 16, 8192, 64)
    assert b.state_seqs == 64 and b.state_blocks == 0


@pytest.mark.parametrize(("gpu", "model", "tp", "size"), [
    ("h200", "qwen3.5-27b", 1, 784), ("b200", "qwen3.5-27b", 1, 800),
    ("b300", "qwen3.5-27b", 1, 800), ("rtx-pro-6000", "qwen3.5-27b", 1, 784),
    ("b200", "qwen3.5-397b-a17b", 8, 544), ("h200", "qwen3.5-397b-a17b", 8, 528),
])
def test_blackwell_aligns_the_block_to_32_tokens(gpu: str, model: str, tp: int,
                                                  size: int) -> None:
    # Heads of 256 under FlashInfer on compute capability 10.x: 32-token alignment, so
    # 783 tokens' worth of state takes 25 x 32 = 800 (49 x 16 = 784 elsewhere); the
    # 397B model's 525 tokens' worth 17 x 32 = 544 (33 x 16 = 528).
    raw = _raw()
    raw["model"], raw["hardware"] = model, {"gpu": gpu, "tp": tp}
    assert from_dict(raw).serving.block_size == size
