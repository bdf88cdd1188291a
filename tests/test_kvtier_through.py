"""A write-through host KV tier (serving.kv_offload.write_policy: write_through), as vLLM's
CPU offloading connector and LMCache keep one: hand-worked step logs of a prefix found
on the host after the GPU evicted it (no store at eviction, the host keeps its copy),
of a GPU whose own cache is off (the host the only prefix cache), and of the host's LRU
when full; hypothesis invariants on block accounting; load-time errors.

Cost in every engine case: 10 ms per step + 1 ms per new token (linear), KV blocks of 4
tokens, prefix hashes naming 4-token blocks, no watermark; a host link that moves one
block in 1 ms (tests/test_kvtier.py gives the arithmetic).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_kvtier import FIVE, MS_PER_BLOCK, OP, move, own, run, run_shared, steps

from sim.config.scenario import from_dict
from sim.core.kvmanager import KVCacheManager
from sim.core.prefix import OWN_HASHES
from sim.core.request import Request
from sim.errors import ServesimError
from sim.report.printed import table
from sim.report.setup import scenario_digest
from sim.report.summary import summarize

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))


def through(blocks: int, **more: Any) -> dict[str, Any]:
    """A write-through kv_offload section holding ``blocks`` tiny-model blocks."""
    return {"cpu_gb": blocks / 131072, "bandwidth_gb_s": MS_PER_BLOCK,
            "write_policy": "write_through", **more}


# A (12 tokens, hashes 1 2, 2 out), B (20 tokens, no hashes, 1 out), C (12 tokens,
# hashes 1 2, 1 out), 6 GPU blocks: the case tests/test_kvtier.py works under write-back.
CASE = ([0.0, 1.0, 2.0], [12, 20, 12], [2, 1, 1], [[1, 2], [], [1, 2]])


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_the_host_copies_a_prompt_when_computed_and_keeps_it_when_a_hit_loads_it(
        policy: str) -> None:
    # An 8-block tier. A prefills (10 + 12 ms) and its 2 hashed blocks are copied to the
    # host, in the background (not priced); it decodes (11 ms), leaves entries 1 and 2
    # cached, and its third block (tokens 9-12, no hash) is copied as it leaves. B needs
    # 5 blocks with 4 free: entry 2 is evicted from the GPU and, the host holding its
    # copy, nothing moves: 10 + 20 = 30 ms (write-back: 31, storing it then); B's 5
    # blocks are copied as it leaves (8 in all). C finds 1 on the GPU and 2 on the host:
    # 4 tokens loaded (1 ms), 4 prefilled, 10 + 4 + 1 = 15 ms; its lookup made 1 and 2
    # the most recent, so its own block pushes out A's, the least recently used.
    eng, res = run({"policy": policy, "num_kv_blocks": 6, "kv_offload": through(8)}, *CASE)
    assert steps(res) == [
        (0, 0.0, 0.022, ((0, 12, 0),)),
        (0, 0.022, 0.033, ((0, 1, 12),)),
        (0, 1.0, 1.03, ((1, 20, 0),)),
        (0, 2.0, 2.015, ((2, 4, 8),)),
    ]
    t = summarize(res)["kv_tiers"]
    assert (t["gpu"]["hit_tokens"], t["host"]["hit_tokens"]) == (4, 4)
    assert (t["host"]["stored_blocks"], t["host"]["loaded_blocks"]) == (9, 1)
    assert t["transfer_s"] == pytest.approx(0.001)  # the load alone: copies are not priced
    kv = eng.replicas[0].kv
    # Both entries are back on the GPU and still on the host.
    assert kv.prefix is not None and sorted(kv.prefix.refs) == [1, 2]
    assert own(list(kv.host.entries)) == [(1, 4), (1, 3), (1, 2), (1, 1), (1, 0), 2, 1,
                                          (2, 2)]
    assert kv.host.dropped == 1
    pool = summarize(res)["simulated"]["pools"]["both"]
    assert pool["kv_offload"]["write_policy"] == "write_through"
    # The printed summary's line: 8 blocks of 8,192 B; 4 of 44 prefill tokens hit on each
    # tier; 1 and 9 blocks a GPU moved; 1 ms of loading.
    assert ("\nhost tier: 6.1e-05 GiB a GPU (write-through); 9.1% of prefill tokens hit "
            "there, 9.1% on the GPU; 0.0 GiB loaded and 0.0 GiB stored a GPU; 1 entries "
            "dropped; 0.001 s of iterations moving blocks\n") in table(summarize(res))


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_with_the_gpus_own_cache_off_the_host_is_the_only_prefix_cache(policy: str) -> None:
    # vLLM --no-enable-prefix-caching under LMCache. A prefills (22 ms), its blocks are
    # copied to the host, and when it finishes the GPU keeps nothing. B's 5 blocks fit
    # the 6 free (30 ms). C finds nothing on the GPU and both entries on the host: 8
    # tokens loaded (2 ms), 4 prefilled: 10 + 4 + 2 = 16 ms, where without the tier it
    # prefills all 12 (22 ms).
    serving = {"policy": policy, "num_kv_blocks": 6, "prefix_caching": False}
    eng, res = run({**serving, "kv_offload": through(8)}, *CASE)
    assert steps(res) == [
        (0, 0.0, 0.022, ((0, 12, 0),)),
        (0, 0.022, 0.033, ((0, 1, 12),)),
        (0, 1.0, 1.03, ((1, 20, 0),)),
        (0, 2.0, 2.016, ((2, 4, 8),)),
    ]
    _, off = run(serving, *CASE)
    assert steps(off)[3] == (0, 2.0, 2.022, ((2, 12, 0),))
    s = summarize(res)
    assert s["prefix_cache"]["hit_tokens"] == 8
    assert (s["kv_tiers"]["gpu"]["hit_tokens"], s["kv_tiers"]["host"]["hit_tokens"]) == (0, 8)
    assert "prefix_cache" not in summarize(off)
    kv = eng.replicas[0].kv
    # C's blocks were its own, not shared entries: every block is free again.
    assert kv.prefix is not None and not kv.prefix.refs and kv.used == 0
    assert kv.available == kv.total and {1, 2} <= set(kv.host.entries)
    assert (kv.host.stored, kv.host.loaded) == (9, 2)


def test_the_host_drops_its_least_recently_used_copy_when_full() -> None:
    # A 2-block tier, the GPU's own cache off; 8-token prompts, 1 out, every block
    # hashed. A's copies (1 2) fill the tier; B's (3 4) push both out. C (hashes 1 2)
    # finds nothing (its lookup may hit 1 alone, short of its last token) and prefills
    # 8 tokens (18 ms); its copies push 3 and 4 out. D (hashes 3 4) prefills whole too,
    # and its copies end the run, 3 (its head) the more recent.
    serving = {"num_kv_blocks": 6, "prefix_caching": False, "kv_offload": through(2)}
    eng, res = run(serving, [0.0, 1.0, 2.0, 3.0], [8] * 4, [1] * 4,
                   [[1, 2], [3, 4], [1, 2], [3, 4]])
    assert [s[2:] for s in steps(res)] == [(t + 0.018, ((i, 8, 0),))
                                           for i, t in enumerate([0.0, 1.0, 2.0, 3.0])]
    host = eng.replicas[0].kv.host
    assert (host.stored, host.loaded, host.dropped, list(host.entries)) == (8, 0, 6, [4, 3])


def test_an_entry_the_host_dropped_is_lost_when_the_gpu_evicts_it() -> None:
    # 6 GPU blocks, a 2-block tier; 12-token prompts hash their first 8 tokens. A (1 2)
    # and B (3 4), 1 out: the host copies each prompt's blocks, its own third block
    # pushing the older copy out; on the GPU each retires its third block ahead of its
    # entries: LRU a 2 1 b 4 3. D (20 tokens, no hashes) evicts a, 2, 1, b and 4, and
    # nothing moves (write-back would store all five during D's step, 5 ms more): 10 +
    # 20 = 30 ms. E (1 2) finds them nowhere and prefills 12 (22 ms), evicting entry 3,
    # older than D's retired blocks; F (3 4) finds neither: 12 tokens, 22 ms.
    eng, res = run({"num_kv_blocks": 6, "kv_offload": through(2)}, *FIVE)
    assert steps(res) == [
        (0, 0.0, 0.022, ((0, 12, 0),)),
        (0, 1.0, 1.022, ((1, 12, 0),)),
        (0, 2.0, 2.03, ((2, 20, 0),)),
        (0, 3.0, 3.022, ((3, 12, 0),)),
        (0, 4.0, 4.022, ((4, 12, 0),)),
    ]
    host = eng.replicas[0].kv.host
    # F copies 3 and 4, and its own third block pushes 4 out.
    assert (host.stored, host.loaded, host.dropped) == (17, 0, 15)
    assert own(list(host.entries)) == [3, (4, 2)]


def test_an_lmcache_tier_keeps_prompts_and_vllms_own_keeps_outputs_too() -> None:
    # A (8 tokens, hashes 1 2) writes 8 outputs: 15 tokens computed when it finishes.
    # vLLM's connector copies every full block, so A's third (tokens 9-12) too; LMCache
    # (store_outputs false) copies its prompt's 2 alone.
    args = ([0.0], [8], [8], [[1, 2]])
    eng, _ = run({"num_kv_blocks": 8, "kv_offload": through(8)}, *args)
    assert own(list(eng.replicas[0].kv.host.entries)) == [2, 1, (0, 2)]
    eng, _ = run({"num_kv_blocks": 8, "kv_offload": through(8, store_outputs=False)}, *args)
    assert list(eng.replicas[0].kv.host.entries) == [2, 1]


def manager(host_blocks: int, outputs: bool = True) -> KVCacheManager:
    """A 16-block GPU of 4-token blocks, prefix caching on, a write-through host tier."""
    kv = KVCacheManager(16, 4, 0, host_blocks, offload=True, write_through=True,
                        store_outputs=outputs)
    kv.enable_prefix_caching(4)
    return kv


def admitted(kv: KVCacheManager, rid: int, prompt: int, hashes: tuple[int, ...],
             computed: int) -> Request:
    """Request ``rid`` admitted (its prefix hit taken), computed up to ``computed``
    tokens, its prompt's blocks cached."""
    r = Request(rid, 0.0, prompt, 20)
    r.hashes = hashes
    hit = kv.computed_tokens(r)
    assert kv.allocate_slots(r, computed - hit.tokens, hit) is not None
    r.computed = computed
    kv.cache_blocks(r)
    return r


@pytest.mark.parametrize("outputs", [True, False])
def test_a_preempted_requests_output_blocks_reach_the_host_only_if_it_keeps_outputs(
        outputs: bool) -> None:
    # 8 prompt tokens (hashes 1 2) and 12 of output computed: preempted for recompute,
    # its 3 output blocks are cached by keys of its own and copied to a host that
    # stores outputs (vLLM's connector), not to one that keeps prompts alone (LMCache).
    kv = manager(8, outputs)
    r = admitted(kv, 0, 8, (1, 2), 20)
    kv.preempt(r)
    assert own(list(kv.host.entries)) == ([(0, 4), (0, 3), (0, 2), 2, 1] if outputs
                                          else [2, 1])


def test_a_gpu_hit_the_host_lacks_is_copied_when_it_is_taken() -> None:
    # A 2-block tier. A (hashes 1 2) is copied; B (hashes 3 4) pushes its copies out;
    # C (hashes 1 2, 12 tokens) hits both on the GPU and, as vLLM stores every block
    # the host lacks, the host copies 1 and 2 again (none loaded).
    kv = manager(2, outputs=False)
    a = admitted(kv, 0, 8, (1, 2), 8)
    kv.free(a)
    b = admitted(kv, 1, 8, (3, 4), 8)
    kv.free(b)
    assert list(kv.host.entries) == [4, 3]
    admitted(kv, 2, 12, (1, 2), 12)
    assert list(kv.host.entries) == [2, 1] and (kv.host.stored, kv.host.loaded) == (6, 0)


# -- invariants -----------------------------------------------------------------------
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 24), st.sampled_from([1, 2, 4]), st.integers(0, 16), st.booleans(),
       st.lists(OP, min_size=20, max_size=80))
def test_write_through_never_loses_or_duplicates_a_block(
        total: int, bs: int, host_blocks: int, retain: bool, ops: list[tuple]) -> None:
    # The GPU's blocks are live requests' own and cached entries' (none when it keeps
    # no entries); the host's entries are copies of blocks once computed, within its size
    # beside the swapped blocks; a load moves what the hit found on the host.
    kv = KVCacheManager(total, bs, 0, host_blocks, offload=True, write_through=True)
    pc = kv.enable_prefix_caching(2 * bs, retain=retain)
    live: list[Request] = []
    swapped: list[Request] = []
    published: set[int] = set()
    made = 0

    def check() -> None:
        assert 0 <= kv.used <= kv.total
        shared = sum(r.cached for r in live) if retain else 0
        runs = sum(n for n, keys in pc.runs.values() if not keys)  # none stored: through
        assert kv.used == sum(r.blocks for r in live) - shared * pc.per_hash + \
            len(pc.refs) * pc.per_hash + runs and runs == sum(n for n, _ in pc.runs.values())
        assert retain or not (pc.refs or pc.runs)
        host = kv.host
        assert host.swapped == sum(r.swapped for r in swapped)
        assert host.free >= 0 and host.swapped + host.entry_blocks + host.free == host.total
        assert {h for h in host.entries if h < OWN_HASHES} <= published

    for op, pick, tokens, keep in ops:
        if op == "admit":
            r = Request(made, 0.0, tokens, 3)
            made += 1
            r.hashes = tuple(range(pick % 2, pick % 2 + tokens // (2 * bs)))
            hit = kv.computed_tokens(r)
            assert hit.loaded <= hit.tokens < tokens
            assert retain or hit.loaded == hit.tokens
            io = kv.pending_io
            if kv.allocate_slots(r, tokens - hit.tokens, hit, keep_watermark=keep) is not None:
                assert kv.pending_io - io == hit.loaded // bs
                r.computed = tokens
                live.append(r)
                if not keep:
                    kv.cache_blocks(r)  # its prefill done, as the replica publishes at once
                    published |= set(r.hashes[:tokens // (2 * bs)])
        elif op == "publish" and live:
            r = live[pick % len(live)]
            assert r.hashes is not None
            io = kv.pending_io
            kv.cache_blocks(r)
            assert kv.pending_io == io  # write-through copies are not priced
            published |= set(r.hashes[:r.prompt // (2 * bs)])
        else:
            move(kv, op, pick, tokens, keep, live, swapped)
        check()
    for r in live:
        kv.free(r)
    for r in swapped:
        kv.swap_in(r)
    assert kv.host.swapped == 0 and kv.available == kv.total


@settings(max_examples=EXAMPLES // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(policy=st.sampled_from(["continuous", "chunked"]),
       preemption=st.sampled_from(["recompute", "swap"]), retain=st.booleans(),
       blocks=st.integers(8, 40), host=st.integers(0, 24), overlap=st.booleans(),
       reqs=st.lists(st.tuples(st.sampled_from([0.0, 0.005, 0.05]), st.integers(2, 40),
                               st.integers(1, 12), st.integers(0, 3)), min_size=1, max_size=14))
def test_write_through_runs_end_with_every_block_home(
        policy: str, preemption: str, retain: bool, blocks: int, host: int, overlap: bool,
        reqs: list[tuple]) -> None:
    # Lazy and eager decodes give the same logs and records; every request ends; the GPU
    # ends holding cached entries and runs only (none when it keeps none), the host no
    # swapped block and no more entries than it holds.
    kv = run_shared(tiny_scenario(serving={
        "policy": policy, "num_kv_blocks": blocks, "max_num_batched_tokens": 64,
        "prefix_caching": retain, "preemption": preemption,
        "kv_offload": through(host, overlap=overlap)}), reqs)
    assert kv.prefix is not None and kv.host.swapped == 0
    assert kv.used == len(kv.prefix.refs) + sum(n for n, _ in kv.prefix.runs.values())
    assert kv.in_use == 0 and (retain or kv.used == 0)
    assert len(kv.host.entries) <= host


# -- configuration --------------------------------------------------------------------
def base(**serving: Any) -> dict[str, Any]:
    return {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
            "serving": {"policy": "chunked", **serving},
            "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                         "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                     "output": {"dist": "fixed", "value": 8}},
                         "num_requests": 4}}


def test_a_write_through_tier_alone_is_a_prefix_cache_and_the_others_are_errors() -> None:
    # With the GPU's own cache off and preemption by recompute a write-back tier would
    # hold nothing; a write-through one keeps the prompts.
    with pytest.raises(ServesimError, match="with none of them it would stay empty"):
        from_dict(base(prefix_caching=False, kv_offload={"cpu_gb": 8}), "s.yaml")
    sc = from_dict(base(prefix_caching=False,
                        kv_offload={"cpu_gb": 8, "write_policy": "write_through"}), "s.yaml")
    assert sc.serving.caches_prefixes and not sc.serving.prefix_caching
    with pytest.raises(ServesimError, match=r"serving\.kv_offload\.write_policy.*"
                                            r"continuous and chunked, not 'disaggregated'"):
        from_dict(base(policy="disaggregated", kv_offload={
            "cpu_gb": 8, "write_policy": "write_through"}), "s.yaml")
    # orca refuses any tier: it never preempts and keeps no prefix cache.
    with pytest.raises(ServesimError, match=r"serving\.kv_offload: policy 'orca' reserves"):
        from_dict(base(policy="orca", kv_offload={"cpu_gb": 8,
                                                  "write_policy": "write_through"}), "s.yaml")
    with pytest.raises(ServesimError, match="write_policy"):
        from_dict(base(kv_offload={"cpu_gb": 8, "write_policy": "through"}), "s.yaml")
    with pytest.raises(ServesimError, match=r"serving\.kv_offload\.store_outputs: got false"):
        from_dict(base(kv_offload={"cpu_gb": 8, "store_outputs": False}), "s.yaml")


def test_the_write_policy_is_hashed_only_when_not_the_default() -> None:
    back = from_dict(base(kv_offload={"cpu_gb": 8}))
    same = from_dict(base(kv_offload={"cpu_gb": 8, "write_policy": "write_back"}))
    other = from_dict(base(kv_offload={"cpu_gb": 8, "write_policy": "write_through"}))
    assert scenario_digest(back) == scenario_digest(same) != scenario_digest(other)
    prompts = from_dict(base(kv_offload={"cpu_gb": 8, "write_policy": "write_through",
                                         "store_outputs": False}))
    assert scenario_digest(prompts) != scenario_digest(other)
