"""Lazily advanced decodes (sim/core/decodeset.py) must give exactly what request-by-request
decoding gives: every timestamp, log entry, KV count and inter-token gap."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_equivalent, chunk_budget, eager_run, lazy_and_eager, tiny_scenario
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sim.config import scenario
from sim.config.flagaxes import policy_setting
from sim.core.batch import Batch
from sim.core.decodeset import DecodeSet
from sim.core.engine import simulate
from sim.core.histogram import LogHistogram
from sim.core.kvmanager import KVCacheManager
from sim.core.request import Request
from sim.core.result import Outcomes, finish_requests
from sim.errors import ServesimError
from sim.report.summary import summarize
from sim.workload.requests import Requests

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
LAZY_POLICIES = ("continuous", "chunked", "static", "orca")


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LAZY_POLICIES), st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.integers(8, 60), st.booleans(), st.integers(2, 24), st.integers(0, 12))
def test_lazy_decodes_equal_eager_on_random_workloads(
        policy: str, block: int, rows: list[tuple], blocks: int, swap: bool,
        budget: int, threshold: int) -> None:
    # Small KV caches force preemptions (the set flushes); small chunk budgets leave
    # decodes out of a batch (the set holds only the running list's leading entries);
    # under chunked, a long_prefill_token_threshold lets several prompts run part-way.
    rows = sorted(rows)
    extra = {"long_prefill_token_threshold": threshold} if policy == "chunked" else {}
    sc = tiny_scenario(serving={"policy": policy, "block_size": block, "num_kv_blocks": blocks,
                                "max_num_seqs": 5, **chunk_budget(policy, max(budget, block)),
                                "preemption": "swap" if swap else "recompute", **extra})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40),
                          st.integers(0, 2)), min_size=2, max_size=14),
       st.integers(8, 60), st.integers(2, 24), st.booleans())
# A verify aggregate whose members' blocks fit while a later running request's do not:
# without the spare check the aggregate ran and the priority victim differed.
@example(3, [(0.0, 1, 8, 0), (0.0, 1, 36, 0), (0.25, 10, 1, 0), (0.21875, 10, 2, 0),
             (0.03125, 1, 28, 1)], 31, 15, True)
def test_lazy_decodes_equal_eager_under_priority_preemption(
        block: int, rows: list[tuple], blocks: int, budget: int, spec: bool) -> None:
    # chunked's priority policy may preempt a member of the decode aggregate (the
    # largest class, latest arrival), so the aggregate decodes only in iterations that
    # preempt nobody; with speculation the aggregate is the verifies' (specset.py).
    rows = sorted(rows)
    drafts = ({"speculative": {"method": "eagle", "num_tokens": 2,
                               "acceptance": {"rate": 0.7}}} if spec else {})
    sc = tiny_scenario(serving={"policy": "chunked", "block_size": block, "priority": True,
                                "num_kv_blocks": max(blocks, 12), "max_num_seqs": 5,
                                **chunk_budget("chunked", max(budget, block, 3)), **drafts})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]), priority=np.array([r[3] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("policy", [*LAZY_POLICIES, "disaggregated"])
def test_shipped_scenarios_lazy_equal_eager(name: str, policy: str) -> None:
    # Disaggregated pools run continuous batching on their replicas. The policy is set as
    # compare --policies sets it: another policy's own keys (a chunk budget) go back to
    # their defaults.
    path = ROOT / "scenarios" / name
    try:
        sets = policy_setting(scenario.load_raw(path), policy)
        sc = scenario.load(path, [*sets, "workload.num_requests=300"])
    except ServesimError as exc:
        pytest.skip(f"{name} does not combine with {policy}: {exc}")
    ref = simulate(sc)  # the engine as `servesim simulate` builds it (lazy)
    assert_equivalent(ref, eager_run(sc))


def test_prefix_caching_with_eviction_lazy_equal_eager() -> None:
    sc = tiny_scenario(serving={"prefix_caching": True, "num_kv_blocks": 40, "max_num_seqs": 6},
                       cluster={"replicas": 2, "router": "prefix_affinity"})
    rng = np.random.default_rng(5)
    n = 80
    groups = rng.integers(0, 5, n)
    arrival, prompt, output = np.sort(rng.uniform(0, 3, n)), rng.integers(8, 40, n), \
        rng.integers(1, 30, n)
    # Up to 6 shared leading blocks of 4 tokens, no more than each prompt fills.
    hashes = tuple(np.arange(min(6, -(-int(p) // 4)), dtype=np.int64) + 100 * int(g)
                   for g, p in zip(groups, prompt, strict=True))
    req = Requests(arrival, prompt, output, prefix_hashes=hashes, prefix_block_tokens=4)
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    assert summarize(lazy)["prefix_cache"]["evictions"] > 0


def _member(rid: int, computed: int, generated: int, output: int, bs: int) -> Request:
    r = Request(rid, 0.0, computed - generated + 1, output)
    r.computed, r.generated, r.blocks = computed, generated, -(-computed // bs)
    return r


class StubReplica:
    """What a replica does around its DecodeSet's iterations."""

    def __init__(self, running: list[Request], kv: KVCacheManager):
        self.running = running
        self.kv = kv
        self.itl = LogHistogram()
        self.outstanding = 0
        self.engine = Outcomes(2)

    def end_step(self, g: DecodeSet, now: float) -> None:
        self.outstanding -= g.n
        done = g.end_step(self.itl, now)
        if done is not None:
            finish_requests(done, now, self.kv, self.engine)
            self.running = [r for r in self.running if r not in done]


def test_set_bookkeeping_by_hand() -> None:
    # Block size 4. A: 5 tokens cached (2 blocks), 1 of 6 outputs; B: 8 cached (2 full
    # blocks), 2 of 3 outputs, so one more decode finishes it.
    bs = 4
    kv = KVCacheManager(10, bs)
    g = DecodeSet(kv)
    a, b = _member(0, 5, 1, 6, bs), _member(1, 8, 2, 3, bs)
    assert kv.allocate_blocks(4)
    rep = StubReplica([a, b], kv)
    g.join(a)
    g.join(b)
    assert g.shape() == (2, 2, 13, 0, 0, 0, 15)
    assert g.finish_at == {5: [a], 1: [b]}
    assert not DecodeSet(kv).reserve([a], Batch())  # a running request outside the set
    # Tick 0: B's 9th token needs a third block; A's 6th fits its second.
    assert g.reserve(rep.running, Batch()) and kv.used == 5
    rep.end_step(g, 1.0)  # both emit; B finishes and frees its 3 blocks
    assert rep.running == [a] and kv.used == 2 and rep.engine.finish[1] == 1.0
    assert rep.outstanding == -2 and g.n == 1
    # Ticks 1 and 2: A computes its 7th and 8th tokens inside its 2 blocks.
    for t in (1.5, 2.5):
        assert g.reserve(rep.running, Batch()) and kv.used == 2
        assert g.shape().context_tokens == a.computed + g.tick
        rep.end_step(g, t)
    # Tick 3: A's 9th token needs a block.
    assert g.reserve(rep.running, Batch()) and kv.used == 3
    g.flush(rep.running)
    assert (a.computed, a.generated, a.blocks, a.last_token, a.sync) == (8, 4, 2, 2.5, -1)
    assert g.n == 0 and not g.finish_at and sum(g.phase) == 0
    # Gaps: 1.0 for both at the first step (they joined with last token 0), then 0.5, 1.0.
    rep.itl.flush()
    assert (rep.itl.total, rep.itl.max) == (4, 1.0)
    assert rep.itl.mean == pytest.approx(3.5 / 4)


def test_histogram_repeated_values_equal_individual_ones() -> None:
    rng = np.random.default_rng(3)
    one, rep = LogHistogram(), LogHistogram()
    for _ in range(500):
        v = float(rng.exponential(0.02))
        k = int(rng.integers(0, 50))
        one.extend([v] * k)
        rep.add_repeated(v, k)
    rep.extend([0.0, 0.5])
    one.extend([0.0, 0.5])
    for q in (0.0, 0.1, 0.5, 0.9, 0.99, 1.0):
        assert one.quantile(q) == rep.quantile(q)
    assert (one.total, one.zeros, one.max) == (rep.total, rep.zeros, rep.max)
    assert one.counts.tolist() == rep.counts.tolist()
    assert rep.mean == pytest.approx(one.mean, rel=1e-12)
