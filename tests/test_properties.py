"""Invariants that hold for every policy on random small workloads (hypothesis).

Each example runs a tiny model with a linear cost and a small KV cache, then checks
the step log against the requests: limits respected, KV never over-allocated and all
returned, every request ends counted, tokens produced equal output tokens.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.core.engine import Engine, build_cost
from sim.core.request import FINISHED, REJECTED, UNFINISHED
from sim.policies.registry import POLICIES
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))


@st.composite
def workloads(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 16))
    gaps = draw(st.lists(st.sampled_from([0.0, 0.001, 0.005, 0.02, 0.1]), min_size=n,
                         max_size=n))
    return {
        "arrivals": np.cumsum(gaps).tolist(),
        "prompts": draw(st.lists(st.integers(1, 60), min_size=n, max_size=n)),
        "outputs": draw(st.lists(st.integers(1, 20), min_size=n, max_size=n)),
    }


@st.composite
def servings(draw: Any) -> dict[str, Any]:
    return {
        "policy": draw(st.sampled_from(sorted(POLICIES))),
        "block_size": draw(st.sampled_from([1, 2, 4, 16])),
        "num_kv_blocks": draw(st.integers(4, 48)),
        "max_num_seqs": draw(st.integers(1, 6)),
        "max_num_batched_tokens": draw(st.sampled_from([16, 32, 64, 256])),
    }


def run(serving: dict[str, Any], cluster: dict[str, Any], wl: dict[str, Any]) -> Any:
    sc = tiny_scenario(serving=serving, cluster=cluster)
    req = Requests(np.array(wl["arrivals"]), np.array(wl["prompts"], dtype=np.int64),
                   np.array(wl["outputs"], dtype=np.int64))
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(1), log_steps=True)
    return sc, eng, eng.run()


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(servings(), st.integers(1, 3), st.sampled_from(["round_robin", "least_outstanding",
                                                       "random"]), workloads())
def test_invariants_hold_for_every_policy(serving: dict[str, Any], replicas: int, router: str,
                                          wl: dict[str, Any]) -> None:
    sc, eng, res = run(serving, {"replicas": replicas, "router": router}, wl)
    n = len(wl["prompts"])
    prompts, outputs = wl["prompts"], wl["outputs"]

    # Every request ends counted; with no horizon nothing is left unfinished.
    assert set(res.status.tolist()) <= {FINISHED, REJECTED}
    assert all(bool(res.reason[i]) == (res.status[i] == REJECTED) for i in range(n))
    assert (res.status != UNFINISHED).all()

    # All KV blocks are returned at the end (a preempted request's blocks the prefix
    # cache kept, chunked's default, are free for the taking).
    for rep in eng.replicas:
        assert rep.kv.in_use == 0 and rep.kv.available == rep.kv.total
        assert not rep.waiting and not rep.running

    # Replay the step log: limits per step, iterations of one replica never overlap,
    # and each request emits exactly output_tokens tokens.
    generated = [0] * n
    last_end: dict[int, float] = {}
    for replica, start, end, entries in res.step_log:
        assert end > start >= last_end.get(replica, 0.0) - 1e-12
        last_end[replica] = end
        ids = [e[0] for e in entries]
        assert len(ids) == len(set(ids))
        assert len(entries) <= serving["max_num_seqs"]
        assert sum(e[1] for e in entries) <= serving["max_num_batched_tokens"]
        for rid, new, ctx in entries:
            # A disaggregated request prefills on one replica and decodes on another.
            prefill_rep = -1 if res.prefill_replica is None else res.prefill_replica[rid]
            assert replica in (res.replica[rid], prefill_rep)
            assert new >= 1
            total = ctx + new
            # Context plus new tokens never exceeds the KV the request can hold.
            assert total <= prompts[rid] + outputs[rid] - 1 or outputs[rid] == 1
            if total == prompts[rid] + generated[rid]:
                generated[rid] += 1
    for i in range(n):
        if res.status[i] == FINISHED:
            assert generated[i] == outputs[i]
            arrival = wl["arrivals"][i]
            assert arrival <= res.first_sched[i] <= res.first_token[i] <= res.finish[i]
            assert res.first_token[i] - arrival <= res.finish[i] - arrival
        else:
            assert generated[i] == 0


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(servings(), st.integers(1, 3), st.integers(1, 6), st.sampled_from([0.0, 0.02]),
       st.sampled_from([0.0, 0.004]), workloads())
def test_closed_loop_sends_each_request_when_an_earlier_one_ends(
        serving: dict[str, Any], replicas: int, clients: int, think: float, response: float,
        wl: dict[str, Any]) -> None:
    from sim.config.scenario import from_dict

    sc = from_dict({
        "model": "tiny",
        "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001,
                            "frontend": {"response_s": response}}},
        "serving": {**serving, "watermark": 0.0},
        "cluster": {"replicas": replicas},
        "workload": {"concurrency": clients, "think_time_s": think, "num_requests": 1,
                     "lengths": {"prompt": {"dist": "fixed", "value": 1},
                                 "output": {"dist": "fixed", "value": 1}}},
    })
    n = len(wl["prompts"])
    req = Requests(np.full(n, np.inf), np.array(wl["prompts"], dtype=np.int64),
                   np.array(wl["outputs"], dtype=np.int64))
    res = Engine(sc, req, build_cost(sc), np.random.default_rng(1)).run()
    # Every request is sent (nothing bounds the run) and ends counted.
    assert len(res.requests) == n
    assert set(res.status.tolist()) <= {FINISHED, REJECTED}
    sent = res.requests.arrival_s
    k = min(clients, n)
    assert (sent[:k] == 0).all() and np.all(np.diff(sent) >= 0)
    # A client learns of an end response_s after the engine: a finish (recorded on the
    # client's side) or a refusal (at the engine when it arrived, without frontend delay).
    ends = np.where(res.status == FINISHED, res.finish, sent + response)
    # Request clients + j goes out think_time_s after the j-th end, in time order.
    np.testing.assert_allclose(sent[k:], np.sort(ends)[:n - k] + think, rtol=0, atol=1e-12)
