"""Exact event skipping: runs of decode-only iterations fused into one event must give
exactly the step-by-step results — every timestamp, every log entry, every count."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim import scenario
from sim.engine import Engine, build_cost, simulate
from sim.errors import ServesimError
from sim.metrics import summarize
from sim.policies import POLICIES
from sim.report import requests_csv
from sim.workload import Requests

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))


def _sorted_logs(res: Any) -> None:
    # Fused runs book their iterations when they end, so entries of different replicas
    # interleave differently; per replica, in time order, they must be equal.
    res.step_log.sort(key=lambda e: (e[0], e[1]))


def both_ways(raw_or_sc: Any, requests: Requests | None = None, log: bool = False):
    out = []
    for skip in (True, False):
        sc = raw_or_sc.__class__(**{**raw_or_sc.__dict__, "event_skipping": skip})
        if requests is None:
            out.append(simulate(sc, log_steps=log))
        else:
            out.append(Engine(sc, requests, build_cost(sc), np.random.default_rng(0),
                              log_steps=log).run())
    if log:
        for res in out:
            _sorted_logs(res)
    return out


def assert_same(a: Any, b: Any) -> None:
    assert requests_csv(a) == requests_csv(b)
    for field in ("first_sched", "first_token", "finish"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    sa, sb = summarize(a), summarize(b)
    for s in (sa, sb):
        s.pop("scenario_sha256")
    assert sa == sb
    assert a.itl.counts.tolist() == b.itl.counts.tolist()


@pytest.mark.parametrize("name", SHIPPED)
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_shipped_scenarios_identical_with_and_without_skipping(name: str, policy: str) -> None:
    try:
        sc = scenario.load(ROOT / "scenarios" / name,
                           [f"serving.policy={policy}", "workload.num_requests=400"])
    except ServesimError as exc:  # e.g. prefix caching with a policy that lacks it
        pytest.skip(f"{name} does not combine with {policy}: {exc}")
    on, off = both_ways(sc)
    assert_same(on, off)


def test_a_decode_run_is_fused_and_logged_step_by_step() -> None:
    # One request, prompt 8, 12 outputs: a prefill, then 11 decodes with nothing
    # arriving. With skipping, the decodes take far fewer events, same log and times.
    sc = tiny_scenario()
    req = Requests(np.array([0.0]), np.array([8]), np.array([12]))
    on, off = both_ways(sc, req, log=True)
    assert on.step_log == off.step_log
    assert len(off.step_log) == 12
    assert on.finish[0] == off.finish[0] == pytest.approx(0.018 + 11 * 0.011)
    assert on.replica_stats[0].iterations == off.replica_stats[0].iterations == 12


def test_run_stops_before_an_arrival_and_before_kv_runs_out() -> None:
    # 6 blocks of 4 tokens: the running pair grows into a preemption mid-way, and a
    # third request arrives during the decode run.
    sc = tiny_scenario(serving={"num_kv_blocks": 6})
    req = Requests(np.array([0.0, 0.0, 0.05]), np.array([8, 8, 3]), np.array([9, 9, 2]))
    on, off = both_ways(sc, req, log=True)
    assert on.step_log == off.step_log
    assert on.preemptions.tolist() == off.preemptions.tolist() == [0, 1, 0]


def test_one_token_prompts_and_final_chunks_are_not_fused() -> None:
    # A 1-token prompt (or a prefill's last 1-token chunk) emits a first token, not an
    # inter-token gap: such an iteration must not be booked as a decode.
    for policy in ("continuous", "chunked"):
        sc = tiny_scenario(serving={"policy": policy, "block_size": 1, "num_kv_blocks": 4,
                                    "max_num_seqs": 1})
        req = Requests(np.array([0.0, 0.0]), np.array([1, 1]), np.array([3, 3]))
        on, off = both_ways(sc, req, log=True)
        assert on.step_log == off.step_log
        assert_same(on, off)
        assert np.isfinite(on.first_sched).all()
        assert on.itl.max < 1.0


def test_prefix_caching_with_eviction_is_exact() -> None:
    sc = tiny_scenario(serving={"prefix_caching": True, "num_kv_blocks": 40,
                                "max_num_seqs": 6},
                       cluster={"replicas": 2, "router": "prefix_affinity"})
    rng = np.random.default_rng(5)
    n = 80
    arrivals = np.sort(rng.uniform(0, 3, n))
    prompts = rng.integers(8, 40, n)
    hashes = tuple(np.arange(6, dtype=np.int64) + 100 * int(g) for g in rng.integers(0, 5, n))
    req = Requests(arrivals, prompts, rng.integers(1, 30, n), prefix_hashes=hashes,
                   prefix_block_tokens=4)
    on, off = both_ways(sc, req, log=True)
    assert on.step_log == off.step_log
    assert_same(on, off)
    assert summarize(on)["prefix_cache"]["evictions"] > 0


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(POLICIES)), st.integers(1, 12),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=12),
       st.integers(6, 60), st.booleans())
def test_skipping_is_exact_on_random_workloads(policy: str, block: int, rows: list[tuple],
                                               blocks: int, swap: bool) -> None:
    rows = sorted(rows)
    sc = tiny_scenario(serving={"policy": policy, "block_size": block, "num_kv_blocks": blocks,
                                "max_num_seqs": 4,
                                "preemption": "swap" if swap else "recompute"})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    on, off = both_ways(sc, req, log=True)
    assert on.step_log == off.step_log
    assert_same(on, off)


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(POLICIES)), st.integers(1, 3),
       st.sampled_from(["round_robin", "least_outstanding", "random"]), st.integers(1, 8),
       st.sampled_from([0.0, 0.0, 0.01, 0.05]),
       st.lists(st.tuples(st.integers(1, 40), st.integers(1, 40)), min_size=1, max_size=30),
       st.integers(6, 120), st.tuples(st.sampled_from([0.0, 0.002]),
                                      st.sampled_from([0.0, 2e-5]),
                                      st.sampled_from([0.0, 0.003])),
       st.sampled_from([{}, {"timeout_s": 0.05}, {"max_waiting": 2}]))
def test_skipping_is_exact_in_closed_loops(policy: str, replicas: int, router: str,
                                           clients: int, think: float, rows: list[tuple],
                                           blocks: int, frontend: tuple[float, ...],
                                           admission: dict[str, Any]) -> None:
    # A finish sends the next request at its own time: fused runs stop before any
    # iteration that finishes one, and stay clear of ends on the other replicas.
    fe = dict(zip(("request_s", "per_prompt_token_s", "response_s"), frontend, strict=True))
    sc = scenario.from_dict({
        "model": "tiny",
        "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001,
                            "per_context_token_s": 1e-5, "frontend": fe}},
        "serving": {"policy": policy, "block_size": 4, "num_kv_blocks": blocks,
                    "max_num_seqs": 4, "max_num_batched_tokens": 256, "watermark": 0.0},
        "cluster": {"replicas": replicas, "router": router},
        "admission": admission,
        "workload": {"concurrency": clients, "think_time_s": think, "num_requests": 1,
                     "lengths": {"prompt": {"dist": "fixed", "value": 1},
                                 "output": {"dist": "fixed", "value": 1}}},
    })
    req = Requests(np.full(len(rows), np.inf), np.array([r[0] for r in rows]),
                   np.array([r[1] for r in rows]))
    on, off = both_ways(sc, req, log=True)
    assert on.step_log == off.step_log
    assert_same(on, off)
