"""With prefix caching on, a request preempted for recompute leaves its computed full
blocks in the cache, as vLLM's cache keeps every full block it computed until an
allocation evicts it: resumed, it takes back those still cached and prefills the rest.
Hand-worked counts, a step log, and lazily advanced decodes against request by request."""

from __future__ import annotations

import os

import numpy as np
from conftest import assert_equivalent, chunk_budget, lazy_and_eager, run_both_ways, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.kvmanager import KVCacheManager
from sim.core.prefix import OWN_HASHES
from sim.core.request import Request
from sim.report.summary import summarize
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40"))


def test_a_preempted_request_finds_its_own_blocks_hand_worked() -> None:
    kv = KVCacheManager(20, 4)
    kv.enable_prefix_caching(4)
    r = Request(7, 0.0, 30, 5)
    assert kv.allocate_slots(r, 30) == 8
    r.computed = 30
    # Its 7 full blocks are cached under hashes of its own; the partial eighth is freed
    # (nothing cached waited in the LRU order: it would be taken first anyway).
    assert kv.preempt(r) == 8
    r.computed = 0
    assert r.hashes == tuple(range(OWN_HASHES + (7 << 32), OWN_HASHES + (7 << 32) + 7))
    assert (kv.used, kv.in_use, kv.available) == (7, 0, 20)
    assert list(kv.prefix.lru) == list(reversed(r.hashes))  # type: ignore[union-attr]
    # Resumed: 28 tokens hit (never the last prompt token's block), 2 to prefill, 1 block.
    hit = kv.computed_tokens(r)
    assert (hit.tokens, hit.pinned) == (28, 7)
    assert kv.allocate_slots(r, 2, hit) == 1
    assert (r.blocks, r.cached, kv.used) == (8, 7, 8)
    kv.free(r)
    # Another request's 16 blocks take the 13 free ones and evict 3 of the 7, the last
    # blocks first: 4 survive.
    other = Request(8, 0.0, 64, 1)
    assert kv.allocate_slots(other, 64) == 16
    assert kv.computed_tokens(r).tokens == 16
    # Without caching, preempting frees every block and remembers nothing.
    plain = KVCacheManager(20, 4)
    q = Request(1, 0.0, 30, 5)
    plain.allocate_slots(q, 30)
    q.computed = 30
    assert plain.preempt(q) == 8 and plain.used == 0 and q.hashes is None


def test_a_resumed_request_prefills_only_what_was_evicted_step_log() -> None:
    # 7 blocks of 4 tokens, two requests of 12 prompt and 6 output tokens at t = 0, both
    # prefilled in the first step (6 blocks). Request 0's decode needs a fourth block at
    # its 13th token: request 1, the newer, is preempted. Its 3 prompt blocks stay cached;
    # request 0 grows to 5 blocks (17 tokens), evicting the newest of them. Resumed, it
    # finds 8 tokens and prefills 5 (its prompt's last 4 and its first output token).
    sc = tiny_scenario(serving={"num_kv_blocks": 7, "prefix_caching": True,
                                "policy": "chunked"})
    res = run_both_ways(sc, [0.0, 0.0], [12, 12], [6, 6])
    entries = [e[3] for e in res.step_log or []]
    assert entries[:2] == [((0, 12, 0), (1, 12, 0)), ((0, 1, 12),)]
    assert entries[6:8] == [((1, 5, 8),), ((1, 1, 13),)]
    # Counted apart from the hit rate, as vLLM (from 0.14) counts a preempted request's.
    pc = summarize(res)["prefix_cache"]
    assert (pc["prefill_tokens"], pc["hit_tokens"]) == (24, 0)
    assert (pc["resumed_prefill_tokens"], pc["resumed_hit_tokens"]) == (13, 8)
    assert pc["note"].endswith("preempted requests found their own computed blocks again "
                               "when they resumed (resumed_hit_tokens)")
    # Caching off: request 1 prefills its 13 tokens again.
    off = tiny_scenario(serving={"num_kv_blocks": 7, "prefix_caching": False,
                                 "policy": "chunked"})
    assert [e[3] for e in run_both_ways(off, [0.0, 0.0], [12, 12], [6, 6]).step_log or []][6] \
        == ((1, 13, 0),)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "chunked"]), st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.integers(8, 40), st.integers(2, 24), st.booleans())
def test_lazy_decodes_equal_eager_with_resumed_requests(policy: str, block: int,
                                                        rows: list[tuple[float, int, int]],
                                                        blocks: int, budget: int,
                                                        hashed: bool) -> None:
    rows = sorted(rows)
    sc = tiny_scenario(serving={"policy": policy, "block_size": block, "num_kv_blocks": blocks,
                                "max_num_seqs": 5, **chunk_budget(policy, max(budget, block)),
                                "prefix_caching": True})
    n = len(rows)
    prompts = np.array([r[1] for r in rows])
    # Some requests share leading blocks, the others carry none.
    hashes = tuple(np.arange(-(-int(p) // block) // 2, dtype=np.int64) + 1000 * (i % 2)
                   for i, p in enumerate(prompts)) if hashed else None
    req = Requests(np.array([r[0] for r in rows]), prompts, np.array([r[2] for r in rows]),
                   prefix_hashes=hashes, prefix_block_tokens=block if hashed else None)
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    counts = summarize(lazy)["requests"]
    assert counts["finished"] + counts["rejected"] == n  # too long for the cache: refused
