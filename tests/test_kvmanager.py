"""The KV-cache manager's invariants (sim/core/kvmanager.py), on random operation sequences
and through the engine: no over-allocation, every block returned at the end, the
watermark honoured at admission, and a refused allocation changing nothing."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.engine import Engine, build_cost
from sim.core.kvmanager import NO_HIT, KVCacheManager
from sim.core.request import FINISHED, Request
from sim.cost.kvpages import blocks_for
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))


def snapshot(kv: KVCacheManager, reqs: list[Request]) -> tuple[Any, ...]:
    pc = kv.prefix
    cache = None if pc is None else (dict(pc.refs), list(pc.lru), dict(pc.runs),
                                     pc.evictable, pc.evictions)
    return (kv.used, kv.swap_free, kv.admit_low_water, cache,
            [(r.blocks, r.cached, r.swapped) for r in reqs])


def check(kv: KVCacheManager, live: list[Request]) -> None:
    """Counts agree: every used block belongs to a live request, a cached entry or a
    freed request's retired run; the evictable ones are the unreferenced entries' and
    the runs'."""
    assert 0 <= kv.used <= kv.total
    pc = kv.prefix
    cached = 0 if pc is None else len(pc.refs) * pc.per_hash + kept(pc)
    own = sum(r.blocks - (r.cached * pc.per_hash if pc is not None else 0) for r in live)
    assert kv.used == own + cached
    if pc is not None:
        refs = {h: 0 for h in pc.refs}
        for r in live:
            assert r.hashes is not None or r.cached == 0
            for h in (r.hashes or ())[:r.cached]:
                refs[h] += 1
        assert refs == pc.refs
        unref = {h for h, n in pc.refs.items() if n == 0}
        assert set(pc.lru) == unref | set(pc.runs) and not unref & set(pc.runs)
        assert pc.evictable == len(unref) * pc.per_hash + kept(pc)
        assert all(n > 0 and len(keys) * pc.per_hash <= n for n, keys in pc.runs.values())
        assert pc.held == len(unref) + sum(bool(keys) for _, keys in pc.runs.values())


def kept(pc: Any) -> int:
    """Blocks of retired runs."""
    return sum(n for n, _ in pc.runs.values())


OP = st.tuples(st.sampled_from(["admit", "grow", "free", "swap", "resume", "publish"]),
               st.integers(0, 40), st.integers(1, 60), st.booleans())


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(4, 40), st.sampled_from([1, 2, 4]), st.floats(0, 0.3), st.integers(0, 30),
       st.booleans(), st.lists(OP, max_size=80),
       st.sampled_from([(0, (1, 1)), (3, (1, 1)), (2, (5, 1)), (3, (1, 2))]))
def test_manager_invariants_on_random_operations(total: int, bs: int, wm: float, swap: int,
                                                 caching: bool, ops: list[tuple],
                                                 window: tuple[int, tuple[int, int]]) -> None:
    # window: a sliding-window model's pages a request (sim.cost.kvpages.hybrid_groups).
    kv = KVCacheManager(total, bs, int(wm * total), swap, window_blocks=window[0],
                        window_groups=window[1])

    def spans(r: Request, tokens: int) -> int:
        return blocks_for(tokens, bs) + kv.window_share(blocks_for(r.prompt + 2, bs))
    if caching:
        kv.enable_prefix_caching(2 * bs)
    live: list[Request] = []  # holding GPU blocks
    swapped: list[Request] = []  # holding host blocks
    made = 0
    for op, pick, tokens, keep in ops:
        if op == "admit":
            r = Request(made, 0.0, tokens, 3)
            made += 1
            if caching:
                r.hashes = tuple(range(pick % 3, pick % 3 + tokens // (2 * bs)))
            hit = kv.computed_tokens(r)
            assert hit.tokens < tokens
            before = snapshot(kv, [*live, r])
            got = kv.allocate_slots(r, tokens - hit.tokens, hit, keep_watermark=keep)
            if got is None:
                assert snapshot(kv, [*live, r]) == before
            else:
                assert r.blocks == spans(r, tokens)
                r.computed = tokens
                live.append(r)
                if keep:
                    assert kv.available >= kv.watermark
        elif op == "grow" and live:
            r = live[pick % len(live)]
            before = snapshot(kv, live)
            got = kv.allocate_slots(r, tokens % 9 + 1)
            if got is None:
                assert snapshot(kv, live) == before
            else:
                r.computed += tokens % 9 + 1
                assert r.blocks == spans(r, r.computed)
        elif op == "free" and live:
            kv.free(live.pop(pick % len(live)))
        elif op == "swap" and live:
            r = live[pick % len(live)]
            before = snapshot(kv, live)
            if kv.swap_out(r):
                live.remove(r)
                swapped.append(r)
            else:
                assert snapshot(kv, live) == before
        elif op == "resume" and swapped:
            r = swapped[pick % len(swapped)]
            if kv.allocate_slots(r, 1, keep_watermark=True) is not None:
                kv.swap_in(r)
                r.computed += 1
                swapped.remove(r)
                live.append(r)
        elif op == "publish" and live and caching:
            r = live[pick % len(live)]
            if r.hashes is not None:
                kv.cache_blocks(r)
        check(kv, live)
        assert kv.swap_free + sum(r.swapped for r in swapped) == swap
        assert kv.admit_low_water >= kv.watermark
    for r in live:
        kv.free(r)
    for r in swapped:
        kv.swap_in(r)
    check(kv, [])
    assert kv.swap_free == swap
    pc = kv.prefix
    assert kv.used == (0 if pc is None else len(pc.refs) * pc.per_hash + kept(pc))
    assert kv.available == kv.total


def test_refused_admission_keeps_the_watermark_and_changes_nothing() -> None:
    kv = KVCacheManager(10, 4, watermark_blocks=2)
    a = Request(0, 0.0, 32, 1)
    assert kv.allocate_slots(a, 32, keep_watermark=True) == 8
    a.computed = 32
    b = Request(1, 0.0, 1, 1)
    assert kv.allocate_slots(b, 1, keep_watermark=True) is None
    assert (kv.used, b.blocks, kv.admit_low_water) == (8, 0, 2)
    # Decode growth may use the watermark's blocks; admission may not.
    assert kv.allocate_slots(a, 5) == 2 and kv.used == 10
    a.computed = 37
    assert kv.allocate_slots(a, 4) is None and a.blocks == 10
    assert kv.computed_tokens(b) == NO_HIT
    assert kv.can_ever_hold(32) and not kv.can_ever_hold(33)


def test_a_swap_without_host_room_changes_nothing() -> None:
    kv = KVCacheManager(10, 4, swap_blocks=2)
    r = Request(0, 0.0, 12, 1)
    kv.allocate_slots(r, 12)
    assert not kv.swap_out(r) and (kv.used, r.blocks, r.swapped, kv.swap_free) == (3, 3, 0, 2)


@settings(max_examples=max(EXAMPLES // 3, 10), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "chunked", "static", "orca"]), st.integers(12, 40),
       st.sampled_from([0.1, 0.2, 0.3]), st.booleans(), st.booleans(),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 30)),
                min_size=1, max_size=20))
def test_engine_keeps_the_watermark_and_returns_every_block(
        policy: str, blocks: int, watermark: float, swap: bool, lazy: bool,
        rows: list[tuple[float, int, int]]) -> None:
    rows = sorted(rows)
    sc = tiny_scenario(serving={"policy": policy, "num_kv_blocks": blocks,
                                "watermark": watermark, "max_num_seqs": 6,
                                "preemption": "swap" if swap else "recompute"})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(0), lazy_decodes=lazy)
    kv = eng.replicas[0].kv
    host = kv.swap_free
    res = eng.run()
    wm = int(watermark * blocks)
    assert kv.watermark == wm
    # Cached blocks (a preempted request's, prefix caching being on under chunked) are
    # free for the taking: no request holds a block.
    assert kv.in_use == 0 and kv.available == kv.total
    assert kv.swap_free == host  # nothing left on the host
    admitted = np.isfinite(res.first_sched)
    if admitted.any():
        assert kv.admit_low_water >= wm
    # Whatever the watermark refused at first ran later: nothing is left pending.
    fits = [blocks_for(p + o - 1, 4) <= blocks - wm for _, p, o in rows]
    assert (res.status[fits] == FINISHED).all()


def test_watermark_low_water_is_reached_on_a_tight_cache() -> None:
    # 10 blocks of 4 tokens, watermark 2: each 12-token prompt takes 3 blocks, so the
    # third admission would leave 1 < 2 free and must wait.
    sc = tiny_scenario(serving={"num_kv_blocks": 10, "watermark": 0.2, "max_num_seqs": 8})
    req = Requests(np.zeros(3), np.array([12, 12, 12]), np.array([2, 2, 2]))
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(0), log_steps=True)
    res = eng.run()
    kv = eng.replicas[0].kv
    assert kv.admit_low_water == 4 and kv.used == 0
    assert res.step_log[0][3] == ((0, 12, 0), (1, 12, 0))
    assert res.first_sched[2] > res.first_sched[0]
    assert (res.status == FINISHED).all()


@pytest.mark.parametrize("module", ["sim.core.kvmanager", "sim.core.result", "sim.core.prefix"])
def test_manager_modules_do_not_import_simpy(module: str) -> None:
    import subprocess
    import sys

    code = (f"import sys, {module}; "
            "sys.exit(1 if any(m == 'simpy' or m.startswith('simpy.') for m in sys.modules)"
            " else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
