"""Prefix caching: exact hand-worked hits, sharing, eviction; TTFT gain on shared prefixes.

Cost: 10 ms per step + 1 ms per new token (linear); KV blocks of 4 tokens; prefix
hashes name 4-token blocks.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.engine import Engine, build_cost, simulate
from sim.core.kvmanager import KVCacheManager
from sim.core.prefix import PrefixCache, block_hashes
from sim.core.request import FINISHED, Request
from sim.errors import ServesimError
from sim.report.metrics import per_request
from sim.report.summary import summarize
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))


def run(serving: dict, arrivals: list[float], prompts: list[int], outputs: list[int],
        hashes: list[list[int]], cluster: dict | None = None, hash_tokens: int = 4):
    sc = tiny_scenario(serving={"prefix_caching": True, **serving}, cluster=cluster or {})
    req = Requests(np.array(arrivals), np.array(prompts), np.array(outputs),
                   prefix_hashes=tuple(np.array(h, dtype=np.int64) for h in hashes),
                   prefix_block_tokens=hash_tokens)
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(0), log_steps=True)
    return eng, eng.run()


def steps(res):
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def test_second_request_skips_the_cached_prefix() -> None:
    # A computes all 12 prompt tokens and publishes its 2 full hashed blocks (8 tokens).
    # B, later, with the same 2 hashes, prefills only its last 4 tokens after 8 cached.
    eng, res = run({}, [0.0, 1.0], [12, 12], [2, 2], [[7, 8], [7, 8]])
    assert steps(res) == [
        (0, 0.0, 0.022, ((0, 12, 0),)),
        (0, 0.022, 0.033, ((0, 1, 12),)),
        (0, 1.0, 1.014, ((1, 4, 8),)),
        (0, 1.014, 1.025, ((1, 1, 12),)),
    ]
    s = summarize(res)["prefix_cache"]
    assert (s["prefill_tokens"], s["hit_tokens"]) == (24, 8)
    assert s["hit_rate"] == pytest.approx(1 / 3)
    # The two cached blocks stay, unreferenced, the prefix's head last in LRU order. Each
    # request's other two (13 tokens computed: 4 blocks) are free: when it ended no
    # entry waited in that order (its own were still its), so they would be the first
    # taken anyway, kept or not.
    rep = eng.replicas[0]
    pc = rep.prefix
    assert pc is not None and rep.kv.used == 2 and pc.evictable == 2
    assert list(pc.lru) == [8, 7] and not pc.runs


def test_hit_stops_at_the_first_missing_hash_and_before_the_last_token() -> None:
    # B shares only the first hash. C's prompt is exactly the 8 cached tokens: its last
    # token must be computed (its logits give the first output), so only 4 are reused.
    _, res = run({}, [0.0, 1.0, 2.0], [12, 12, 8], [2, 2, 2],
                 [[7, 8], [7, 9], [7, 8]])
    prefills = [e for s in res.step_log for e in s[3] if e[1] > 1]
    assert prefills == [(0, 12, 0), (1, 8, 4), (2, 4, 4)]


def test_concurrent_identical_prefixes_share_one_copy() -> None:
    # A and B prefill together (neither is cached yet); when their prefills end, B's
    # copy of the 2 blocks is freed and it shares A's entries.
    eng, res = run({}, [0.0, 0.0], [8, 8], [3, 3], [[5, 6], [5, 6]])
    assert steps(res)[0] == (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0)))
    rep = eng.replicas[0]
    # During decode: 2 shared blocks + 1 private block each; all returned at the end
    # except the 2 cached ones.
    assert rep.stats.kv_peak == 4
    assert rep.kv.used == 2


def test_chunked_caches_blocks_as_it_schedules_them_as_vllm_v1_does() -> None:
    # vLLM v1 caches a prompt's full blocks when it schedules them: B, admitted in the
    # same pass as A with the same two hashes, hits the 8 tokens A computes in that very
    # step and prefills only its last 4 (10 + 12 + 4 ms; 34 ms with both prompts whole).
    _, res = run({"policy": "chunked"}, [0.0, 0.0], [12, 12], [2, 2], [[7, 8], [7, 8]])
    assert steps(res) == [
        (0, 0.0, 0.026, ((0, 12, 0), (1, 4, 8))),
        (0, 0.026, 0.038, ((0, 1, 12), (1, 1, 12))),
    ]
    assert summarize(res)["prefix_cache"]["hit_tokens"] == 8
    # A part-way through its prompt: its first 8-token chunk is cached as it is
    # scheduled, so B, arriving during that step, hits it beside A's last chunk.
    _, res = run({"policy": "chunked", "token_budget": 8}, [0.0, 0.005], [12, 12], [2, 2],
                 [[7, 8], [7, 8]])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.036, ((0, 4, 8), (1, 4, 8))),
        (0, 0.036, 0.048, ((0, 1, 12), (1, 1, 12))),
    ]


def test_unreferenced_entries_are_evicted_lru_when_space_is_needed() -> None:
    # 6 blocks. A caches [1, 2] (2 blocks), then B (no hashes in common, prompt 16 = 4
    # blocks + 1 to decode) needs 5: the LRU entry goes first, then the next.
    eng, res = run({"num_kv_blocks": 6}, [0.0, 1.0], [8, 16], [2, 2], [[1, 2], [3, 4, 5, 6]])
    rep = eng.replicas[0]
    assert rep.stats.prefix_evictions == 1
    assert res.status.tolist() == [1, 1]
    assert rep.kv.used <= rep.kv.total


def test_freed_blocks_no_hash_names_wait_their_turn_before_older_entries() -> None:
    # 6 blocks, as vLLM's block pool orders them: A (hashes 1, 2; 9 tokens computed)
    # ends and frees its partial block first, then its entries, head last: [A's 1, 2,
    # 1]. C, hashless, takes the 3 blocks never used and frees them after: [A's 1, 2, 1,
    # C's 3]. D, hashless too, takes A's partial block and entry 2 for its prompt and
    # entry 1 to decode, though C's freed blocks are there: they are younger. B then
    # finds nothing of 1, 2 and prefills its whole prompt. Reusing C's blocks first
    # (as if freed blocks no hash names were never cached) would keep both entries
    # for B to hit 8 tokens.
    eng, res = run({"num_kv_blocks": 6}, [0.0, 1.0, 2.0, 3.0], [8, 8, 8, 12],
                   [2, 2, 2, 2], [[1, 2], [], [], [1, 2]])
    assert [e for s in res.step_log for e in s[3] if e[1] > 1] == [
        (0, 8, 0), (1, 8, 0), (2, 8, 0), (3, 12, 0)]
    rep = eng.replicas[0]
    assert rep.stats.prefix_evictions == 2
    assert summarize(res)["prefix_cache"]["hit_tokens"] == 0


class KeepEveryRun(PrefixCache):
    """The reference: every run retired, even with nothing cached for it to wait behind
    (vLLM's free queue keeps each freed block in its place)."""

    def retire(self, blocks: int, keys: tuple[int, ...] = ()) -> bool:
        key = self._next_run
        self._next_run += 1
        self.lru[key] = None
        self.runs[key] = (blocks, keys)
        self.evictable += blocks
        self.held += bool(keys)
        return True


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(6, 40), st.sampled_from([1, 2, 4]),
       st.lists(st.tuples(st.sampled_from(["admit", "grow", "free", "preempt"]),
                          st.integers(0, 40), st.integers(1, 40)), max_size=80))
def test_freeing_a_run_nothing_cached_waits_behind_changes_no_outcome(
        total: int, bs: int, ops: list[tuple[str, int, int]]) -> None:
    # Two managers, one keeping every freed request's run, one freeing a run outright
    # when no entry (or stored run) waits in the LRU order: every allocation, hit and
    # count agrees, as those blocks would be taken first either way.
    pair = [KVCacheManager(total, bs), KVCacheManager(total, bs)]
    pair[0].enable_prefix_caching(bs)
    pair[1].prefix = KeepEveryRun(bs, bs)
    live: list[list[Request]] = [[], []]
    for n, (op, pick, tokens) in enumerate(ops):
        seen = []
        for kv, reqs in zip(pair, live, strict=True):
            if op == "admit":
                r = Request(n, 0.0, tokens, 4)
                r.hashes = tuple(range(100 * (pick % 3), 100 * (pick % 3) + tokens // bs))
                hit = kv.computed_tokens(r)
                got = kv.allocate_slots(r, tokens - hit.tokens, hit)
                if got is not None:
                    r.computed = tokens
                    kv.cache_blocks(r)
                    reqs.append(r)
                seen.append((hit, got))
            elif op == "grow" and reqs:
                r = reqs[pick % len(reqs)]
                got = kv.allocate_slots(r, tokens % 5 + 1)
                if got is not None:
                    r.computed += tokens % 5 + 1
                seen.append(got)
            elif op in ("free", "preempt") and reqs:
                r = reqs.pop(pick % len(reqs))
                seen.append(kv.free(r) if op == "free" else kv.preempt(r))
            pc = kv.prefix
            assert pc is not None
            seen.append((kv.available, kv.in_use, pc.evictions, dict(pc.refs)))
        assert seen[:len(seen) // 2] == seen[len(seen) // 2:]


def test_prefix_cache_unit_refcounts() -> None:
    kv = KVCacheManager(10, 4)
    pc = kv.enable_prefix_caching(8)
    assert pc.per_hash == 2
    # A request computes a 16-token prompt (4 blocks) and publishes its two hashes.
    a = Request(0, 0.0, 16, 2)
    a.hashes = (1, 2)
    assert kv.allocate_slots(a, 16) == 4 and kv.used == 4
    kv.cache_blocks(a)
    assert a.cached == 2 and pc.refs == {1: 1, 2: 1}
    assert pc.match([1, 2, 3], 100) == (2, 0)
    kv.free(a)  # its blocks now belong to the cache alone
    assert kv.used == 4 and a.blocks == 0
    assert pc.evictable == 4 and list(pc.lru) == [2, 1]  # the tail is evicted first
    assert pc.match([1, 2], 100) == (2, 4)
    assert kv.can_allocate(10)
    b = Request(1, 0.0, 32, 1)
    assert kv.allocate_slots(b, 32) == 8
    assert pc.evictions == 1 and kv.used == 10 and list(pc.refs) == [1]


def test_shared_system_prompt_lowers_ttft() -> None:
    base = {
        # The API server's fixed latency is left out: what caching saves is prefill.
        "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
        "cost": {"roofline": {"frontend": {"request_s": 0.0}}},
        "workload": {"arrivals": {"process": "poisson", "rate": 8.0},
                     "lengths": {"prompt": {"dist": "uniform", "low": 2100, "high": 2600},
                                 "output": {"dist": "uniform", "low": 20, "high": 80}},
                     "shared_prefix": {"tokens": 2048, "groups": 4},
                     "num_requests": 600, "seed": 2},
    }
    from sim.config.scenario import from_dict

    on = simulate(from_dict({**base, "serving": {"prefix_caching": True}}))
    off = simulate(from_dict({**base, "serving": {"prefix_caching": False}}))
    t_on = np.median(per_request(on)["ttft"])
    t_off = np.median(per_request(off)["ttft"])
    assert t_on < 0.5 * t_off
    assert summarize(on)["prefix_cache"]["hit_rate"] > 0.7
    # The same requests (lengths, arrivals) in both runs: only the caching differs.
    np.testing.assert_array_equal(on.requests.prompt_tokens, off.requests.prompt_tokens)


def test_prefix_affinity_routes_to_the_replica_holding_the_prefix() -> None:
    _, res = run({}, [0.0, 0.0, 1.0, 1.0], [12, 12, 12, 12], [2, 2, 2, 2],
                 [[1, 2], [3, 4], [3, 4], [1, 2]],
                 cluster={"replicas": 2, "router": "prefix_affinity"})
    assert res.replica.tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("serving, needle", [
    ({"policy": "static"}, "prefix_caching"),
    ({"preemption": "swap"}, "prefix_caching"),
])
def test_unsupported_combinations_are_errors(serving: dict, needle: str) -> None:
    with pytest.raises(ServesimError) as info:
        tiny_scenario(serving={"prefix_caching": True, **serving})
    assert needle in str(info.value)


def test_caching_without_hashes_shares_nothing_and_says_so() -> None:
    # A pasted vLLM flag set turns caching on whatever the workload: requests without
    # hashes are unique prompts, so the run is the run without caching, every request
    # alike, and the summary says why nothing hit.
    on = simulate(tiny_scenario(serving={"prefix_caching": True}))
    off = simulate(tiny_scenario(serving={"prefix_caching": False}))
    assert on.step_log == off.step_log
    for key in ("ttft", "e2e"):
        assert np.array_equal(per_request(on)[key], per_request(off)[key], equal_nan=True)
    pc = summarize(on)["prefix_cache"]
    assert pc["hit_tokens"] == 0 and pc["hit_rate"] == 0.0
    assert pc["prefill_tokens"] == int(on.requests.prompt_tokens.sum())
    assert pc["note"].startswith("the requests carry no prefix hashes")
    assert summarize(on)["kv"] == summarize(off)["kv"]
    assert "note" not in summarize(run({}, [0.0], [12], [2], [[7, 8]])[1])["prefix_cache"]


def test_kv_use_counts_blocks_requests_hold_not_idle_cached_ones() -> None:
    # A (12 prompt tokens, 2 outputs) peaks at 4 blocks, then leaves its 2 hashed blocks
    # cached, unreferenced. B, unrelated, peaks at 4 blocks of its own: the use is 4, as
    # vLLM's KV-cache usage counts unreferenced cached blocks free, not 6.
    _, res = run({}, [0.0, 1.0], [12, 12], [2, 2], [[7, 8], [9, 10]])
    assert res.replica_stats[0].kv_peak == 4
    # Busy 22 + 11 ms twice, holding 3 then 4 blocks each time: (3·22 + 4·11)·2 block-ms.
    assert res.replica_stats[0].kv_block_s == pytest.approx(2 * (3 * 0.022 + 4 * 0.011))


def test_coarse_trace_hashes_are_split_into_kv_blocks() -> None:
    # Hashes of 8-token blocks (as a Mooncake trace names 512) over 4-token KV blocks:
    # hash h becomes block hashes 2h and 2h + 1.
    assert block_hashes(np.array([7, 9]), 8, 4) == (14, 15, 18, 19)
    assert block_hashes(np.array([7, 9]), 4, 4) == (7, 9)
    big = np.array([2**62 + 5], dtype=np.int64)  # beyond int64 once multiplied
    assert block_hashes(big, 8, 4) == (2 * (2**62 + 5), 2 * (2**62 + 5) + 1)
    with pytest.raises(ServesimError, match="prefix blocks of 6 tokens are not a multiple"):
        block_hashes(np.array([1]), 6, 4)


def test_a_partly_filled_coarse_block_still_shares_its_full_kv_blocks() -> None:
    # A and B: 14-token prompts naming the same two 8-token blocks. At 4-token
    # granularity A caches 3 full blocks (tokens 0-11, the third inside the second,
    # partly filled coarse block), and B reuses all 12 tokens; at 8-token granularity
    # it could reuse only the first 8.
    _, res = run({}, [0.0, 1.0], [14, 14], [2, 2], [[7, 8], [7, 8]], hash_tokens=8)
    prefills = [e for s in res.step_log for e in s[3] if e[1] > 1]
    assert prefills == [(0, 14, 0), (1, 2, 12)]
    assert summarize(res)["prefix_cache"]["hit_tokens"] == 12


def test_a_prompt_shorter_than_the_shared_prefix_shares_the_blocks_it_covers() -> None:
    # Prefix 40 tokens in blocks of 8 (5 blocks); prompts of 12, 16, 41 and 7 tokens
    # cover 1, 2, 5 and 0 whole blocks of it.
    from sim.workload.requests import Requests, SharedPrefixConfig

    reqs = Requests(np.zeros(4), np.array([12, 16, 41, 7]), np.ones(4, dtype=np.int64))
    got = SharedPrefixConfig(tokens=40, groups=1, block_tokens=8).apply(
        reqs, np.random.default_rng(0))
    assert [h.tolist() for h in got.prefix_hashes] == [[0], [0, 1], [0, 1, 2, 3, 4], []]
    # And a whole run with prompts shorter than the prefix goes through.
    from sim.config.scenario import from_dict

    res = simulate(from_dict({
        "model": "tiny", "serving": {"prefix_caching": True, "block_size": 8},
        "workload": {"arrivals": {"process": "poisson", "rate": 5.0}, "num_requests": 20,
                     "lengths": {"prompt": {"dist": "uniform", "low": 4, "high": 64},
                                 "output": {"dist": "fixed", "value": 2}},
                     "shared_prefix": {"tokens": 48, "groups": 2, "block_tokens": 8}}}))
    assert (res.status == FINISHED).all()
