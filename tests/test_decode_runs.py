"""Runs of decode-only iterations, worked out by hand and fuzzed: lazily advanced decodes
(sim/core/decodeset.py) must give exactly the request-by-request results — every timestamp,
every log entry, every count — including in closed loops, where each finish sends the
next request."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import assert_equivalent, lazy_and_eager, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import scenario
from sim.policies.registry import POLICIES
from sim.workload.requests import Requests


def test_a_decode_run_is_logged_step_by_step() -> None:
    # One request, prompt 8, 12 outputs: a prefill, then 11 decodes with nothing arriving.
    sc = tiny_scenario()
    req = Requests(np.array([0.0]), np.array([8]), np.array([12]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    assert len(lazy.step_log) == 12
    assert lazy.finish[0] == pytest.approx(0.018 + 11 * 0.011)
    assert lazy.replica_stats[0].iterations == 12


def test_an_arrival_and_a_kv_shortfall_during_decodes() -> None:
    # 6 blocks of 4 tokens: the running pair grows into a preemption mid-way, and a
    # third request arrives during the decodes.
    sc = tiny_scenario(serving={"num_kv_blocks": 6})
    req = Requests(np.array([0.0, 0.0, 0.05]), np.array([8, 8, 3]), np.array([9, 9, 2]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    assert lazy.preemptions.tolist() == [0, 1, 0]


def test_one_token_prompts_and_final_chunks_emit_first_tokens() -> None:
    # A 1-token prompt (or a prefill's last 1-token chunk) emits a first token, not an
    # inter-token gap: such an iteration must not be booked as a decode.
    for policy in ("continuous", "chunked"):
        sc = tiny_scenario(serving={"policy": policy, "block_size": 1, "num_kv_blocks": 4,
                                    "max_num_seqs": 1})
        req = Requests(np.array([0.0, 0.0]), np.array([1, 1]), np.array([3, 3]))
        lazy, eager = lazy_and_eager(sc, req)
        assert_equivalent(lazy, eager)
        assert np.isfinite(lazy.first_sched).all()
        assert lazy.itl.max < 1.0


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
def test_lazy_decodes_are_exact_in_closed_loops(policy: str, replicas: int, router: str,
                                                clients: int, think: float, rows: list[tuple],
                                                blocks: int, frontend: tuple[float, ...],
                                                admission: dict[str, Any]) -> None:
    # A finish sends the next request at its own time, possibly at the very instant
    # another replica's iteration ends.
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
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
