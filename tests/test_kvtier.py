"""The host-memory KV tier (serving.kv_offload): hand-worked step logs of a prefix evicted
to host and loaded back, a swapped request resumed from the tier, the tier's LRU when
full; hypothesis invariants on block accounting across the two tiers; load-time errors.

Cost in every engine case: 10 ms per step + 1 ms per new token (linear), KV blocks of 4
tokens, prefix hashes naming 4-token blocks, no watermark. A block of the tiny model is
4 tokens x 2048 B = 8192 B per GPU, so a host link of 0.008192 GB/s moves one block in
1 ms; cpu_gb = n / 131072 holds n blocks (n x 8192 B = n / 131072 GiB).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import assert_equivalent, lazy_and_eager, run_both_ways, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.scenario import from_dict
from sim.core.engine import Engine, build_cost
from sim.core.kvmanager import KVCacheManager
from sim.core.prefix import OWN_HASHES
from sim.core.request import FINISHED, REJECTED, Request
from sim.cost.gpus import GPUS, NODE_HOST_MEMORY_GIB
from sim.cost.kvpages import blocks_for
from sim.errors import ServesimError
from sim.report.setup import scenario_digest
from sim.report.summary import summarize
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))
MS_PER_BLOCK = 8192 / 1e-3 / 1e9  # GB/s that move one 8192-byte block in 1 ms


def tier(blocks: int, **more: Any) -> dict[str, Any]:
    """A kv_offload section holding ``blocks`` tiny-model blocks, 1 ms a block."""
    return {"cpu_gb": blocks / 131072, "bandwidth_gb_s": MS_PER_BLOCK, **more}


def run(serving: dict, arrivals: list[float], prompts: list[int], outputs: list[int],
        hashes: list[list[int]]):
    sc = tiny_scenario(serving={"prefix_caching": True, **serving})
    req = Requests(np.array(arrivals), np.array(prompts), np.array(outputs),
                   prefix_hashes=tuple(np.array(h, dtype=np.int64) for h in hashes),
                   prefix_block_tokens=4)
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(0), log_steps=True)
    return eng, eng.run()


def steps(res):
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def own(host_keys: list[int]) -> list[object]:
    """Host keys as written in the cases: a prefix hash, or ``(request, block)`` for a
    block of a request's own (past its prompt's hashes)."""
    return [h if h < OWN_HASHES else ((h - OWN_HASHES) >> 32, (h - OWN_HASHES) & 0xFFFFFFFF)
            for h in host_keys]


# -- 1. a prefix evicted to host, hit there, loaded instead of recomputed -------------
# 6 GPU blocks. A (12 tokens, hashes 1 2, 2 out) prefills (10 + 12 ms), publishes its 2
# full hashed blocks, decodes at context 12 (a 4th block, 11 ms) and finishes: entries 1
# and 2 stay cached, unreferenced (the tail, 2, is the older). B (20 tokens, no hashes, 1
# out) needs 5 blocks with 4 free: entry 2 is evicted. C (12 tokens, hashes 1 2) then
# finds 1 on the GPU and 2 (a) in the host tier, or (b) nowhere.
@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_a_prefix_evicted_to_host_is_loaded_back_instead_of_recomputed(policy: str) -> None:
    args = ([0.0, 1.0, 2.0], [12, 20, 12], [2, 1, 1], [[1, 2], [], [1, 2]])
    eng, res = run({"policy": policy, "num_kv_blocks": 6, "kv_offload": tier(4)}, *args)
    # A ends holding 4 blocks: entries 1, 2, its prompt's third block (full, keyed as
    # its own) and its output's partial one; it retires the last two as a run ahead of
    # its entries, head last: LRU [A's run, 2, 1]. (a) B's 5 blocks take the 2 free ones
    # and evict 3: A's partial block (stores nothing), its full block and entry 2 (each
    # written to host): 10 + 20 + 2 ms. B retires its 5 full blocks: LRU [1, B's run].
    # C hits 8 tokens (entry 1 on the GPU, entry 2 loaded: 1 ms) and needs 2 blocks, the
    # last 2 of B's run, written to host first (2 ms): 10 + 4 + 1 + 2 = 17 ms of TTFT.
    assert steps(res) == [
        (0, 0.0, 0.022, ((0, 12, 0),)),
        (0, 0.022, 0.033, ((0, 1, 12),)),
        (0, 1.0, 1.032, ((1, 20, 0),)),
        (0, 2.0, 2.017, ((2, 4, 8),)),
    ]
    assert res.first_token[2] - 2.0 == pytest.approx(0.017, abs=1e-12)
    # (b) Without the tier B's iteration is 30 ms and C recomputes entry 2's 4 tokens:
    # 10 + 8 = 18 ms. The tier saves 4 ms of prefill for 1 ms of loading and 2 of
    # writing B's blocks back: 1 ms.
    _, off = run({"policy": policy, "num_kv_blocks": 6}, *args)
    assert steps(off)[2:] == [(0, 1.0, 1.03, ((1, 20, 0),)), (0, 2.0, 2.018, ((2, 8, 4),))]
    assert (off.first_token[2] - res.first_token[2]) == pytest.approx(0.001, abs=1e-12)
    t = summarize(res)["kv_tiers"]
    assert (t["gpu"]["hit_tokens"], t["host"]["hit_tokens"]) == (4, 4)
    assert t["gpu"]["hit_rate"] == t["host"]["hit_rate"] == pytest.approx(4 / 44)
    assert (t["gpu"]["blocks_per_replica"], t["host"]["blocks_per_replica"]) == ([6], [4])
    assert t["host"]["gib_per_gpu"] == [4 * 8192 / 2**30]
    assert (t["host"]["stored_blocks"], t["host"]["loaded_blocks"]) == (4, 1)
    assert t["host"]["loaded_gib_per_gpu"] == [8192 / 2**30]
    assert t["transfer_s"] == pytest.approx(0.005)
    assert summarize(res)["prefix_cache"]["hit_tokens"] == 8  # both tiers together
    assert "kv_tiers" not in summarize(off)
    # C held both entries, back on the GPU, and retired its last block; the host holds
    # A's block and B's last two, the tail written first.
    kv = eng.replicas[0].kv
    assert kv.prefix is not None and kv.prefix.refs == {1: 0, 2: 0}
    assert own(kv.host.entries) == [(0, 2), (1, 4), (1, 3)]
    assert (kv.used, kv.in_use) == (6, 0)


def test_overlapped_loads_hide_under_the_compute() -> None:
    # As above with overlap: B's 30 ms prefill hides its 2 ms of stores, C's 14 ms its
    # load and its 2 ms of stores.
    _, res = run({"num_kv_blocks": 6, "kv_offload": tier(4, overlap=True)},
                 [0.0, 1.0, 2.0], [12, 20, 12], [2, 1, 1], [[1, 2], [], [1, 2]])
    assert steps(res)[2:] == [(0, 1.0, 1.03, ((1, 20, 0),)), (0, 2.0, 2.014, ((2, 4, 8),))]


# -- 2. a preempted request's KV swapped to the tier and resumed with its load -------
@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_a_preempted_request_resumes_from_the_host_tier(policy: str) -> None:
    # 9 blocks. A, B, C (8 tokens, 6 out) prefill together (10 + 24 ms) and decode at
    # contexts 8 to 11 (13 ms each, 34 -> 86 ms). At context 12 A needs a 4th block: C,
    # the newest, is preempted, its 3 blocks written to the host tier (3 ms) in the
    # iteration where A and B decode: 10 + 2 + 3 = 15 ms, and they finish at 101 ms. C
    # gets 4 blocks back, its 3 loaded (3 ms), and decodes at context 12: 10 + 1 + 3 =
    # 14 ms, finishing at 115 ms (by recompute: 121 ms, a 13-token re-prefill). Under
    # chunked, prefix caching is on (vLLM v1's default): A and B retired their 4 blocks
    # each as runs, so C's 4 take the one free block and 3 of A's run, its partial block
    # and its last two full ones, written back first (2 ms): 16 ms, finishing at 117 ms.
    late = 0.002 if policy == "chunked" else 0.0
    sc = tiny_scenario(serving={"policy": policy, "num_kv_blocks": 9, "preemption": "swap",
                                "kv_offload": tier(4)})
    res = run_both_ways(sc, [0.0, 0.0, 0.0], [8, 8, 8], [6, 6, 6])
    decodes = [(0, round(0.034 + 0.013 * k, 9), round(0.047 + 0.013 * k, 9),
                tuple((i, 1, 8 + k) for i in range(3))) for k in range(4)]
    assert steps(res) == [
        (0, 0.0, 0.034, ((0, 8, 0), (1, 8, 0), (2, 8, 0))),
        *decodes,
        (0, 0.086, 0.101, ((0, 1, 12), (1, 1, 12))),
        (0, 0.101, round(0.115 + late, 9), ((2, 1, 12),)),
    ]
    assert res.preemptions.tolist() == [0, 0, 1]
    np.testing.assert_allclose(res.finish, [0.101, 0.101, 0.115 + late], atol=1e-12)
    t = summarize(res)["kv_tiers"]["host"]
    assert (t["stored_blocks"], t["loaded_blocks"], t["hit_tokens"]) == (3 + 1000 * late, 3, 0)


def test_a_swap_out_pushes_stored_prefix_entries_out_of_the_tier() -> None:
    # Swapped KV and evicted prefixes share the tier's 3 blocks; a swap takes precedence.
    kv = KVCacheManager(4, 4, swap_blocks=3, offload=True)
    kv.enable_prefix_caching(4)
    a = Request(0, 0.0, 12, 1)
    a.hashes = (1, 2, 3)
    assert kv.allocate_slots(a, 12) == 3
    kv.cache_blocks(a)
    kv.free(a)  # entries 3, 2, 1 unreferenced, oldest first
    b = Request(1, 0.0, 16, 1)
    assert kv.allocate_slots(b, 16) == 4  # evicts all three to the host
    assert list(kv.host.entries) == [3, 2, 1] and kv.pending_io == 3
    b.computed = 16
    c = Request(2, 0.0, 4, 1)
    kv.free(b)  # its 4 full blocks stay on the GPU as a run, keyed as its own
    # C's block is B's last, written back: the full tier drops its oldest entry.
    assert kv.allocate_slots(c, 4) == 1
    assert own(kv.host.entries) == [2, 1, (1, 3)] and kv.host.dropped == 1
    c.computed = 4
    assert kv.swap_free == 3 and kv.swap_out(c)  # one block: the oldest entry goes
    assert own(kv.host.entries) == [1, (1, 3)] and kv.host.dropped == 2
    assert kv.host.swapped == 1
    # D's 3 blocks: C's, freed whole by its swap (no run), and B's next two, written
    # back into the 2 blocks the swap leaves: entries 1 and B's last are dropped.
    d = Request(3, 0.0, 12, 1)
    assert kv.allocate_slots(d, 12) == 3
    assert own(kv.host.entries) == [(1, 2), (1, 1)] and kv.host.dropped == 4
    d.computed = 12
    assert not kv.swap_out(d)  # 3 blocks > the 2 not swapped: refused, nothing changed
    assert own(kv.host.entries) == [(1, 2), (1, 1)] and d.blocks == 3


# -- 3. the tier full: least recently stored entries dropped first ------------------
# A (hashes 1 2), B (3 4), D (20 tokens, no hashes), E (1 2), F (3 4), a second apart;
# prompts of 12 tokens but D's, 1 output token each.
FIVE = ([0.0, 1.0, 2.0, 3.0, 4.0], [12, 12, 20, 12, 12], [1] * 5,
        [[1, 2], [3, 4], [], [1, 2], [3, 4]])


def test_the_host_tier_drops_its_least_recently_stored_entry_when_full() -> None:
    # 6 GPU blocks, a 3-block tier. A (hashes 1 2) and B (3 4), 12 tokens and 1 out
    # each, end holding their entries and their prompts' third blocks (keyed as their
    # own, a, b), each retiring its own block ahead of its entries: LRU a 2 1 b 4 3 (used
    # 6). D (20 tokens, no hashes) needs 5: a, 2, 1, b, 4 go down in that order, the
    # tier keeping the last 3 (1 b 4; a and 2 dropped): 10 + 20 + 5 ms. D retires its
    # 5 blocks (d0-d4): LRU 3 d. E (1 2) finds 1 in the tier (loaded, 1 ms) and 2
    # nowhere, prefills 8 tokens, and evicts 3, d4 and d3 for its 3 blocks (3 stores;
    # the tier keeps 3 d4 d3): 10 + 8 + 1 + 3 = 22 ms. F (3 4) finds 3 in the tier, 4
    # dropped, and evicts d2 d1 d0 (E's own block and entries are younger): 22 ms.
    eng, res = run({"num_kv_blocks": 6, "kv_offload": tier(3)}, *FIVE)
    assert steps(res) == [
        (0, 0.0, 0.022, ((0, 12, 0),)),
        (0, 1.0, 1.022, ((1, 12, 0),)),
        (0, 2.0, 2.035, ((2, 20, 0),)),
        (0, 3.0, 3.022, ((3, 8, 4),)),
        (0, 4.0, 4.022, ((4, 8, 4),)),
    ]
    host = eng.replicas[0].kv.host
    assert (host.stored, host.loaded, host.dropped) == (11, 2, 6)
    assert own(host.entries) == [(2, 2), (2, 1), (2, 0)]
    t = summarize(res)["kv_tiers"]
    assert (t["gpu"]["hit_tokens"], t["host"]["hit_tokens"]) == (0, 8)
    assert t["host"]["dropped_entries"] == 6


# -- invariants: no block lost or duplicated across the tiers ------------------------
Tiers = tuple[set[int], set[int], int]


def tiers(kv: KVCacheManager) -> Tiers:
    """(entries on the GPU, entries in the host tier, entries dropped so far)."""
    assert kv.prefix is not None
    return set(kv.prefix.refs), set(kv.host.entries), kv.host.dropped


def run_keys(kv: KVCacheManager) -> set[int]:
    """Keys of the full blocks of retired runs on the GPU."""
    assert kv.prefix is not None
    return {h for _, keys in kv.prefix.runs.values() for h in keys}


def check(kv: KVCacheManager, live: list[Request], swapped: list[Request]) -> None:
    """Every GPU block is a live request's own or a cached entry's; every host block a
    swapped request's, a stored entry's or free; no entry in both tiers."""
    pc, host = kv.prefix, kv.host
    assert pc is not None
    assert 0 <= kv.used <= kv.total
    own = sum(r.blocks - r.cached * pc.per_hash for r in live)
    assert kv.used == own + len(pc.refs) * pc.per_hash + sum(n for n, _ in pc.runs.values())
    refs = {h: 0 for h in pc.refs}
    for r in live:
        for h in (r.hashes or ())[:r.cached]:
            refs[h] += 1
    assert refs == pc.refs
    assert host.swapped == sum(r.swapped for r in swapped)
    assert host.free >= 0
    assert host.swapped + host.entry_blocks + host.free == host.total
    assert not (set(pc.refs) | run_keys(kv)) & set(host.entries)


def moved(before: Tiers, after: Tiers, published: set[int]) -> None:
    """Between two :func:`tiers` snapshots (runs' keys with the GPU's entries): what
    left both tiers was dropped, one entry a count; nothing appeared from nowhere (only
    a publish makes an entry, and a free a run); what came down to the host came from
    the GPU."""
    was, now = before[0] | before[1], after[0] | after[1]
    assert len(was - now) == after[2] - before[2]
    assert now - was <= published
    assert after[1] - before[1] <= before[0]


OP = st.tuples(st.sampled_from(["admit", "grow", "free", "swap", "resume", "publish"]),
               st.integers(0, 40), st.integers(1, 40), st.booleans())


def move(kv: KVCacheManager, op: str, pick: int, tokens: int, keep: bool,
         live: list[Request], swapped: list[Request]) -> None:
    """Apply one of the ops "grow", "free", "swap" or "resume" to a live or swapped
    request (``pick`` chooses which; nothing when there is none, or for another op)."""
    if op == "grow" and live:
        r = live[pick % len(live)]
        if kv.allocate_slots(r, tokens % 9 + 1) is not None:
            r.computed += tokens % 9 + 1
    elif op == "free" and live:
        kv.free(live.pop(pick % len(live)))
    elif op == "swap" and live:
        r = live[pick % len(live)]
        if kv.swap_out(r):
            live.remove(r)
            swapped.append(r)
    elif op == "resume" and swapped:
        r = swapped[pick % len(swapped)]
        if kv.allocate_slots(r, 1, keep_watermark=keep) is not None:
            kv.swap_in(r)
            r.computed += 1
            swapped.remove(r)
            live.append(r)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 24), st.sampled_from([1, 2, 4]), st.integers(0, 16),
       st.lists(OP, min_size=20, max_size=80))
def test_blocks_are_never_lost_or_duplicated_across_the_tiers(
        total: int, bs: int, host_blocks: int, ops: list[tuple]) -> None:
    kv = KVCacheManager(total, bs, 0, host_blocks, offload=True)
    pc = kv.enable_prefix_caching(2 * bs)
    live: list[Request] = []
    swapped: list[Request] = []
    made = 0

    def publish(r: Request) -> None:
        before = tiers(kv)
        assert r.hashes is not None
        kv.cache_blocks(r)
        check(kv, live, swapped)
        moved(before, tiers(kv), set(r.hashes[:r.prompt // pc.hash_tokens]))

    def tiers_and_runs() -> Tiers:
        gpu, host, dropped = tiers(kv)
        return gpu | run_keys(kv), host, dropped

    for op, pick, tokens, keep in ops:
        before = tiers_and_runs()
        io = kv.pending_io
        admitted = None
        if op == "admit":
            r = Request(made, 0.0, tokens, 3)
            made += 1
            r.hashes = tuple(range(pick % 2, pick % 2 + tokens // (2 * bs)))
            hit = kv.computed_tokens(r)
            assert hit.loaded <= hit.tokens < tokens
            if kv.allocate_slots(r, tokens - hit.tokens, hit, keep_watermark=keep) is not None:
                assert r.blocks == blocks_for(tokens, bs) and r.cached * 2 * bs == hit.tokens
                r.computed = tokens
                live.append(r)
                # The loaded entries moved up a tier: counted as moved blocks.
                assert kv.pending_io - io >= hit.loaded // bs
                admitted = r
        else:
            move(kv, op, pick, tokens, keep, live, swapped)
        check(kv, live, swapped)
        after = tiers_and_runs()
        # A free retires its request's run: keys of its own (or past its references).
        moved(before, after, after[0] - before[0] if op == "free" else set())
        if op == "publish" and live:
            publish(live[pick % len(live)])
        elif admitted is not None and not keep:
            publish(admitted)  # its prefill done, as the replica publishes at once
    for r in live:
        kv.free(r)
    for r in swapped:
        kv.swap_in(r)
    check(kv, [], [])
    assert kv.host.swapped == 0 and kv.available == kv.total


@settings(max_examples=EXAMPLES // 2, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(policy=st.sampled_from(["continuous", "chunked"]),
       preemption=st.sampled_from(["recompute", "swap"]),
       blocks=st.integers(8, 40), host=st.integers(0, 24), overlap=st.booleans(),
       reqs=st.lists(st.tuples(st.sampled_from([0.0, 0.005, 0.05]), st.integers(2, 40),
                               st.integers(1, 12), st.integers(0, 3)), min_size=1, max_size=14))
def test_runs_with_a_tier_end_with_every_block_home(
        policy: str, preemption: str, blocks: int, host: int, overlap: bool,
        reqs: list[tuple]) -> None:
    # Requests sharing prefixes under tight GPU and host tiers, decodes advanced lazily
    # and one by one alike: the same logs and records, everything ends, the GPU ends
    # holding cached entries and runs only and the host no swapped block, no entry in
    # both tiers.
    kv = run_shared(tiny_scenario(serving={
        "policy": policy, "num_kv_blocks": blocks, "max_num_batched_tokens": 64,
        "prefix_caching": True, "preemption": preemption,
        "kv_offload": tier(host, overlap=overlap)}), reqs)
    assert kv.prefix is not None
    assert kv.in_use == 0 and kv.host.swapped == 0
    assert kv.used == len(kv.prefix.refs) + sum(n for n, _ in kv.prefix.runs.values())
    assert not (set(kv.prefix.refs) | run_keys(kv)) & set(kv.host.entries)
    assert len(kv.host.entries) <= host


def run_shared(sc: Any, reqs: list[tuple]) -> KVCacheManager:
    """Run ``reqs`` (gap s, prompt tokens, output tokens, prefix group: groups share their
    prompts' leading 4-token hashes) under ``sc``: lazy and eager decodes must agree, and
    every request end (one whose whole context cannot fit the GPU is refused at arrival);
    returns the replica's KV manager after the run."""
    gaps, prompts, outputs, group = (list(x) for x in zip(*reqs, strict=True))
    hashes = tuple(np.arange(p // 4, dtype=np.int64) + 100 * g for p, g in zip(prompts, group,
                                                                              strict=True))
    req = Requests(np.cumsum(gaps), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64), prefix_hashes=hashes,
                   prefix_block_tokens=4)
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(0))
    res = eng.run()
    assert set(res.status.tolist()) <= {FINISHED, REJECTED}
    return eng.replicas[0].kv


# -- configuration --------------------------------------------------------------------
def test_every_gpu_has_a_node_host_memory_figure() -> None:
    assert set(NODE_HOST_MEMORY_GIB) == set(GPUS)


def base(**serving: Any) -> dict[str, Any]:
    return {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "tp": 8},
            "serving": {"policy": "chunked", "prefix_caching": True, **serving},
            "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                         "lengths": {"prompt": {"dist": "fixed", "value": 100},
                                     "output": {"dist": "fixed", "value": 10}},
                         "num_requests": 10}}


@pytest.mark.parametrize("raw, key, needle", [
    (base(kv_offload={"cpu_gb": 300}), "serving.kv_offload.cpu_gb",
     "got 300 GiB per GPU x 8 GPUs on a node = 2400 GiB, more than the 2048 GiB of the "
     "installed memory of a h100-sxm node"),
    ({**base(kv_offload={"cpu_gb": 20}), "hardware": {"tp": 8, "host_memory_gb": 100}},
     "serving.kv_offload.cpu_gb", "= 160 GiB, more than the 100 GiB of "
                                  "hardware.host_memory_gb"),
    (base(kv_offload={"cpu_gb": 10, "bandwidth_gb_s": 0}),
     "serving.kv_offload.bandwidth_gb_s", "got 0.0, must be greater than 0"),
    (base(kv_offload={"cpu_gb": 10, "bandwidth_gb_s": -5}),
     "serving.kv_offload.bandwidth_gb_s", "got -5.0, must be greater than 0"),
    (base(kv_offload={"cpu_gb": -1}), "serving.kv_offload.cpu_gb", "got -1.0, must be at least 0"),
    (base(kv_offload={}), "serving.kv_offload.cpu_gb", "required key is missing"),
    (base(kv_offload={"cpu_gb": 1, "size": 2}), "serving.kv_offload.size", "unknown key"),
    (base(kv_offload={"cpu_gb": 1}, prefix_caching=False), "serving.kv_offload",
     "with none of them it would stay empty"),
    # Orca and static reserve whole lives and never swap: the tier had been accepted
    # with swap and stayed empty.
    (base(kv_offload={"cpu_gb": 1}, policy="orca", prefix_caching=False, preemption="swap"),
     "serving.kv_offload", "policy 'orca' reserves each request's whole KV at admission "
                           "and never preempts, so a host tier would stay empty"),
    (base(kv_offload={"cpu_gb": 1}, policy="static", prefix_caching=False, preemption="swap"),
     "serving.kv_offload", "policy 'static' reserves"),
    (base(kv_offload={"cpu_gb": 1}, swap_space_gib=8), "serving.swap_space_gib",
     "give only kv_offload.cpu_gb"),
    ({**base(kv_offload={"cpu_gb": 1}), "hardware": {"host_memory_gb": 0}},
     "hardware.host_memory_gb", "got 0.0, must be greater than 0"),
    # Sizes past 1 PiB: a raised host_memory_gb had let 1e300 GiB reach int(nan).
    ({**base(kv_offload={"cpu_gb": 1e300}), "hardware": {"tp": 1, "host_memory_gb": 1e6}},
     "serving.kv_offload.cpu_gb", "got 1e+300, must be at most 1048576"),
    ({**base(kv_offload={"cpu_gb": 1}), "hardware": {"host_memory_gb": 1e305}},
     "hardware.host_memory_gb", "got 1e+305, must be at most 1048576"),
    # A tier above 0 that holds no whole block had run as a 0-block tier without a word.
    (base(kv_offload={"cpu_gb": 1e-4}), "serving.kv_offload.cpu_gb",
     "got 0.0001 GiB per GPU, less than one KV block (262,144 bytes, 0.25 MiB per GPU), so "
     "the tier would hold nothing; give at least 0.000244 GiB, or 0"),
])
def test_bad_tiers_are_one_clear_error(raw: dict, key: str, needle: str) -> None:
    with pytest.raises(ServesimError) as info:
        from_dict(raw, "s.yaml")
    msg = str(info.value)
    assert msg.startswith(f"s.yaml: {key}: ") and needle in msg and "\n" not in msg


def test_a_tier_that_fits_the_node_loads_and_one_gpu_may_take_most_of_it() -> None:
    from_dict(base(kv_offload={"cpu_gb": 256}), "s.yaml")  # 8 x 256 = 2048 GiB
    one = {**base(kv_offload={"cpu_gb": 1500}), "hardware": {"tp": 1}}
    from_dict(one, "s.yaml")  # one GPU of the node in use
    # Swap with prefix caching is a host-tier scenario, not an error, once a tier is given.
    from_dict(base(kv_offload={"cpu_gb": 8}, preemption="swap"), "s.yaml")
    with pytest.raises(ServesimError, match="prefix_caching"):
        from_dict(base(preemption="swap"), "s.yaml")


def test_the_tier_keys_are_hashed_when_set() -> None:
    # Hashed only when set (digests of scenarios without them stay as they were, as
    # tests/test_golden.py checks); a set key changes the digest.
    plain = from_dict(base())
    assert scenario_digest(plain) != scenario_digest(from_dict(base(kv_offload={"cpu_gb": 8})))
    fields = {"hardware": {"gpu": "h100-sxm", "tp": 8, "host_memory_gb": 2048}}
    assert scenario_digest(plain) != scenario_digest(from_dict({**base(), **fields}))


def test_the_command_line_says_it_in_one_line(tmp_path: Any, capsys: Any) -> None:
    from sim.cli import main

    path = tmp_path / "tier.yaml"
    path.write_text("model: llama-3-8b\nhardware: {gpu: h200, tp: 8}\n"
                    "serving: {policy: chunked, preemption: swap, kv_offload: {cpu_gb: 512}}\n"
                    "workload: {arrivals: {process: poisson, rate: 1}, num_requests: 5,\n"
                    "  lengths: {prompt: {dist: fixed, value: 9},\n"
                    "            output: {dist: fixed, value: 2}}}\n")
    assert main(["simulate", str(path), "--quiet", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == (f"servesim: error: {path}: serving.kv_offload.cpu_gb: got 512 GiB per GPU "
                   f"x 8 GPUs on a node = 4096 GiB, more than the 2048 GiB of the installed "
                   f"memory of a h200 node; lower cpu_gb, or set hardware.host_memory_gb\n")


def test_the_host_tiers_traffic_per_gpu_is_one_figure_a_replica() -> None:
    # Two replicas under the shipped tier scenario's load: the GiB a GPU stored and loaded
    # are each replica's (their sum, reported before as "per GPU", was the cluster's).
    from pathlib import Path

    from sim.config.scenario import load
    from sim.core.engine import simulate

    path = Path(__file__).resolve().parent.parent / "scenarios" / "host-kv-tier.yaml"
    res = simulate(load(path, ["workload.num_requests=1200", "cluster.replicas=2",
                               "workload.arrivals.rate=14"]))
    host = summarize(res)["kv_tiers"]["host"]
    per_block = host["gib_per_gpu"][0] / host["blocks_per_replica"][0]
    stored, loaded = host["stored_gib_per_gpu"], host["loaded_gib_per_gpu"]
    assert len(stored) == len(loaded) == 2 and min(stored) > 0
    assert sum(stored) == pytest.approx(host["stored_blocks"] * per_block)
    assert sum(loaded) == pytest.approx(host["loaded_blocks"] * per_block)
    assert [s.host_stored * per_block for s in res.replica_stats] == pytest.approx(stored)
