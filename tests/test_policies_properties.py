"""Invariants for every policy under the options tests/test_properties.py leaves at their
defaults: swap preemption (with and without host space), priority classes, the
power-of-two router, and disaggregated pools (where a request's steps run on its
prefill replica, then on its decode replica)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.engine import Engine, build_cost
from sim.core.request import FINISHED, REJECTED
from sim.policies.registry import POLICIES
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(policy=st.sampled_from(sorted(POLICIES)),
       block_size=st.sampled_from([1, 2, 4, 16]),
       blocks=st.integers(4, 48),
       seqs=st.integers(1, 6),
       tokens=st.sampled_from([16, 32, 64, 256]),
       swap_blocks=st.sampled_from([1, 3, 1 << 19]),
       priority=st.booleans(),
       replicas=st.integers(1, 3),
       router=st.sampled_from(["power_of_two", "least_outstanding"]),
       reqs=st.lists(st.tuples(st.sampled_from([0.0, 0.001, 0.02]), st.integers(1, 60),
                               st.integers(1, 20), st.integers(0, 2)), min_size=1, max_size=16))
def test_invariants_with_swap_priority_and_pools(policy: str, block_size: int, blocks: int,
                                                 seqs: int, tokens: int, swap_blocks: int,
                                                 priority: bool, replicas: int, router: str,
                                                 reqs: list[Any]) -> None:
    # A swap space of whole blocks (the tiny model's KV is 2048 B a token): one or three
    # leave most preempted requests to recompute, 2**19 none.
    swap_gib = swap_blocks * 2048 * block_size / 2**30
    sc = tiny_scenario(serving={"policy": policy, "block_size": block_size,
                                "num_kv_blocks": blocks, "max_num_seqs": seqs,
                                "max_num_batched_tokens": tokens, "preemption": "swap",
                                "swap_space_gib": swap_gib, "priority": priority},
                       cluster={"replicas": replicas, "router": router})
    gaps, prompts, outputs, prio = (list(x) for x in zip(*reqs, strict=True))
    arrivals = np.cumsum(gaps)
    req = Requests(arrivals, np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64), priority=np.array(prio))
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(1), log_steps=True)
    res = eng.run()
    n = len(prompts)
    assert set(res.status.tolist()) <= {FINISHED, REJECTED}
    for rep in eng.replicas:
        assert rep.kv.in_use == 0 and rep.kv.available == rep.kv.total  # cached ones free
        assert not rep.waiting and not rep.running and not rep.inbox
        assert rep.kv.swap_free == swap_blocks
    generated = [0] * n
    last_end: dict[int, float] = {}
    for replica, start, end, entries in res.step_log:
        assert end > start >= last_end.get(replica, 0.0) - 1e-12
        last_end[replica] = end
        assert len(entries) <= seqs and sum(e[1] for e in entries) <= tokens
        for rid, new, ctx in entries:
            where = {res.replica[rid]}
            if res.prefill_replica is not None:
                where.add(res.prefill_replica[rid])
            assert replica in where and new >= 1
            assert ctx + new <= prompts[rid] + outputs[rid] - 1 or outputs[rid] == 1
            if ctx + new == prompts[rid] + generated[rid]:
                generated[rid] += 1
    for i in range(n):
        if res.status[i] == FINISHED:
            assert generated[i] == outputs[i]
            assert arrivals[i] <= res.first_sched[i] <= res.first_token[i] <= res.finish[i]
        else:
            assert generated[i] == 0 and res.reason[i]
