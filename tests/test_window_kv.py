"""A model with sliding-window and full layers (gpt-oss) keeps one pool of KV blocks, as
vLLM V1's hybrid KV-cache manager does: a request's window pages come out of it as the
request runs, not out of a reserve for every sequence max_num_seqs allows. Hand-worked
counts, a step log, and the lazily advanced decodes against request-by-request ones."""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import assert_equivalent, chunk_budget, lazy_and_eager, run_both_ways, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.kvmanager import KVCacheManager
from sim.core.request import Request
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40"))
# The tiny model (2 layers) with one of them sliding over 8 tokens: with 4-token blocks
# a request's window holds at most ceil(8 / 4) + 1 = 3 pages, one group of each kind.
WINDOWED = {"preset": "tiny", "sliding_window": 8, "sliding_layers": 1}


def test_a_window_is_charged_at_its_peak_hand_worked() -> None:
    kv = KVCacheManager(100, 16, window_blocks=9)
    # 1,000 prompt tokens: 63 blocks of the full layers and the window's 9.
    long = Request(0, 0.0, 1000, 100)
    assert kv.allocate_slots(long, 1000) == 72 and long.blocks == 72
    # A request of 29 tokens in all spans 2 blocks, and its window no more than that.
    short = Request(1, 0.0, 20, 10)
    assert kv.allocate_slots(short, 20) == 4
    assert kv.used == 76
    # 300 tokens need 19 + 9 = 28 blocks: 24 are left, and nothing changes.
    third = Request(2, 0.0, 300, 50)
    assert kv.allocate_slots(third, 300) is None
    assert (kv.used, third.blocks) == (76, 0)
    # Decoding past the window takes a block a block of tokens, the window staying put:
    # from 1,008 to 1,009 tokens crosses into block 64.
    long.computed = 1008
    assert kv.allocate_slots(long, 1) == 1 and long.blocks == 73
    assert kv.can_ever_hold(1300) and not kv.can_ever_hold(1500)  # 82 + 9, 94 + 9
    assert kv.free(long) == 73 and kv.used == 4
    # Five sliding groups to one full (an n:1 pattern): a page a group; two full groups
    # to one sliding: a window of 9 pages is 4.5 blocks, rounded up.
    assert KVCacheManager(100, 16, window_blocks=9, window_groups=(5, 1)).window_share(2) == 10
    assert KVCacheManager(100, 16, window_blocks=9, window_groups=(1, 2)).window_share(50) == 5
    assert KVCacheManager(100, 16).window_share(50) == 0


def test_windows_share_the_pool_step_log_hand_worked() -> None:
    # 12 blocks of 4 tokens; three requests of 10 prompt tokens and 2 output tokens, all
    # at t = 0. Each spans ceil(11 / 4) = 3 blocks of the full layer and 3 window pages:
    # 6 blocks, so two are admitted and the third waits for them to finish. Without the
    # sliding layer all three (3 blocks each) run at once.
    sc = tiny_scenario(model=WINDOWED, serving={"num_kv_blocks": 12})
    res = run_both_ways(sc, [0.0, 0.0, 0.0], [10, 10, 10], [2, 2, 2])
    assert [tuple(e[1:]) for e in res.step_log or []] == [
        (0.0, pytest.approx(0.03), ((0, 10, 0), (1, 10, 0))),
        (pytest.approx(0.03), pytest.approx(0.042), ((0, 1, 10), (1, 1, 10))),
        (pytest.approx(0.042), pytest.approx(0.062), ((2, 10, 0),)),
        (pytest.approx(0.062), pytest.approx(0.073), ((2, 1, 10),)),
    ]
    flat = run_both_ways(tiny_scenario(serving={"num_kv_blocks": 12}), [0.0] * 3, [10] * 3,
                         [2] * 3)
    assert (flat.step_log or [])[0][3] == ((0, 10, 0), (1, 10, 0), (2, 10, 0))
    # vLLM with its hybrid manager off: a block holds both layers, no window pages.
    off = tiny_scenario(model=WINDOWED, vllm={"disable-hybrid-kv-cache-manager": True},
                        serving={"num_kv_blocks": 12})
    assert off.serving.disable_hybrid_kv_cache_manager
    assert run_both_ways(off, [0.0] * 3, [10] * 3, [2] * 3).step_log == flat.step_log


def test_hybrid_manager_off_sizes_every_layer_for_every_token() -> None:
    from sim.config.disagg import pool_memory, pools
    from sim.config.scenario import from_dict

    def memory(**serving: object) -> dict[str, object]:
        sc = from_dict({"model": "gpt-oss-120b", "hardware": {"gpu": "h200"},
                        "serving": serving,
                        "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                                 "output": {"dist": "fixed", "value": 2}},
                                     "num_requests": 1}})
        return pool_memory(sc.model, pools(sc)[0]).summary()

    on, off = memory(), memory(disable_hybrid_kv_cache_manager=True)
    assert on["window_blocks_per_request"] == 9 and "window_blocks_per_request" not in off
    # The same bytes for the cache; a block of all 36 layers holds half as many tokens.
    assert off["kv_gib"] == pytest.approx(on["kv_gib"], abs=0.01)
    assert off["kv_tokens"] == pytest.approx(on["kv_tokens"] / 2, rel=0.001)


def _requests(rows: list[tuple[float, int, int]]) -> Requests:
    rows = sorted(rows)
    return Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                    np.array([r[2] for r in rows]))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "chunked", "static", "orca"]), st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.integers(12, 60), st.sampled_from(["swap", "recompute", "cached"]),
       st.integers(2, 24), st.integers(1, 30))
def test_lazy_decodes_equal_eager_with_windows(policy: str, block: int,
                                               rows: list[tuple[float, int, int]],
                                               blocks: int, preemption: str, budget: int,
                                               window: int) -> None:
    # Small caches force preemptions (the decode set flushes and members settle with
    # their window pages); windows shorter and longer than the requests; with prefix
    # caching, a preempted request's own blocks cached beside its window pages.
    cached = preemption == "cached" and policy in ("continuous", "chunked")
    sc = tiny_scenario(
        model={**WINDOWED, "sliding_window": window},
        serving={"policy": policy, "block_size": block, "num_kv_blocks": blocks,
                 "max_num_seqs": 5, **chunk_budget(policy, max(budget, block)),
                 "preemption": "swap" if preemption == "swap" else "recompute",
                 "prefix_caching": cached})
    lazy, eager = lazy_and_eager(sc, _requests(rows))
    assert_equivalent(lazy, eager)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "chunked"]), st.integers(1, 4), st.floats(0, 1),
       st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 60)),
                min_size=1, max_size=14),
       st.integers(14, 60), st.integers(1, 30))
def test_lazy_verifies_equal_eager_with_windows(policy: str, k: int, a: float, block: int,
                                                rows: list[tuple[float, int, int]],
                                                blocks: int, window: int) -> None:
    sc = tiny_scenario(
        model={**WINDOWED, "sliding_window": window},
        serving={"policy": policy, "block_size": block, "num_kv_blocks": blocks,
                 "max_num_seqs": 5, **chunk_budget(policy, max(24, block, k + 1)),
                 "speculative": {"method": "ngram", "num_tokens": k,
                                 "acceptance": {"rate": a}}})
    lazy, eager = lazy_and_eager(sc, _requests(rows))
    assert_equivalent(lazy, eager)


def test_a_prefill_replica_charges_the_window_of_the_prompt_it_holds() -> None:
    # A disaggregated prefill pool of 3 blocks: a 4-token prompt spans 1 block and its
    # window 1 page there (its 30 output tokens live on the decode pool), so it runs;
    # charging the window of its whole life (3 pages) had left it waiting for ever.
    link = {"kind": "pcie", "bandwidth_gb_s": 0.002048, "latency_s": 0.002}
    sc = tiny_scenario(model=WINDOWED, serving={"policy": "disaggregated"},
                       disaggregated={"link": link, "prefill": {"num_gpu_blocks": 3},
                                      "decode": {"num_gpu_blocks": 100}})
    res = run_both_ways(sc, [0.0, 0.1], [4, 4], [30, 2])
    from sim.report.summary import summarize

    assert summarize(res)["requests"]["finished"] == 2


def test_override_blocks_are_pages_of_the_pool() -> None:
    # 26 full and 13 sliding layers under vLLM 0.11 (groups of 13): a block of servesim's
    # takes two pages, so vLLM's --num-gpu-blocks-override of 10 pages is 5 blocks.
    import dataclasses

    from sim.config.serving import ServingConfig
    from sim.core.cluster import pool_blocks
    from sim.cost.gpus import GPUS
    from sim.cost.memory import memory_budget
    from sim.cost.presets import MODELS
    from sim.cost.vllmmemory import memory_rules

    m = dataclasses.replace(MODELS["llama-3-8b"], layers=39, sliding_layers=13,
                            sliding_window=128)
    b = memory_budget(m, GPUS["h200"], 1, 0.9, 16, 8192, 256, rules=memory_rules("0.11.0", m))
    assert pool_blocks(ServingConfig(num_gpu_blocks=10), b) == 5
    assert pool_blocks(ServingConfig(), b) == b.blocks


@pytest.mark.parametrize(("release", "hybrid"), [("0.19.0", False), ("0.22.0", True)])
def test_disaggregated_pools_keep_the_hybrid_manager_from_0_22(release: str,
                                                                hybrid: bool) -> None:
    # vLLM turned its hybrid manager off for any KV connector up to 0.19; from 0.22 it
    # keeps it for connectors that support it (NIXL's).
    from sim.config.disagg import pool_memory, pools
    from sim.config.scenario import from_dict

    sc = from_dict({
        "model": "gpt-oss-20b", "hardware": {"gpu": "h100-sxm"},
        "serving": {"policy": "disaggregated", "vllm_version": release},
        "disaggregated": {"link": {"kind": "nvlink"}},
        "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                 "output": {"dist": "fixed", "value": 2}},
                     "num_requests": 1}})
    for pool in pools(sc):
        summary = pool_memory(sc.model, pool).summary()
        assert ("window_blocks_per_request" in summary) is hybrid
