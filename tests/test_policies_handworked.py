"""Each batching policy on tiny scenarios worked out by hand: exact iteration logs.

Cost in every case: 10 ms per step + 1 ms per new token (linear), block size 4 (see
conftest.tiny_scenario). Step log entries: (replica, start_s, end_s, ((request id, new
tokens, context before), ...)).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import run_requests, tiny_scenario

from sim.core.engine import Engine, build_cost
from sim.core.request import FINISHED
from sim.errors import ServesimError
from sim.report.summary import summarize
from sim.workload.requests import Requests


def steps(res):
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


# -- static -------------------------------------------------------------------------
def test_static_batch_runs_until_its_longest_request_finishes():
    # A and B prefill together (10 + 16 ms). B finishes at its 2nd token; its slot idles
    # while A decodes alone. C arrived at 5 ms but waits for the whole batch to drain.
    sc = tiny_scenario(serving={"policy": "static"})
    res = run_requests(sc, [0.0, 0.0, 0.005], [8, 8, 8], [3, 2, 2])
    assert steps(res) == [
        (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0))),
        (0, 0.026, 0.038, ((0, 1, 8), (1, 1, 8))),
        (0, 0.038, 0.049, ((0, 1, 9),)),
        (0, 0.049, 0.067, ((2, 8, 0),)),
        (0, 0.067, 0.078, ((2, 1, 8),)),
    ]
    np.testing.assert_allclose(res.first_token, [0.026, 0.026, 0.067], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.049, 0.038, 0.078], atol=1e-12)


def test_static_reserves_whole_life_kv_and_respects_batch_size():
    # 5 blocks of 4 tokens: A reserves blocks_for(8 + 3 - 1) = 3, so B (3 more) cannot
    # join A's batch even though its prompt alone (2 blocks) would fit.
    sc = tiny_scenario(serving={"policy": "static", "num_kv_blocks": 5})
    res = run_requests(sc, [0.0, 0.0], [8, 8], [3, 3])
    assert [len(s[3]) for s in res.step_log] == [1, 1, 1, 1, 1, 1]
    # static_batch_size caps the batch even when KV and tokens would allow more.
    sc = tiny_scenario(serving={"policy": "static", "static_batch_size": 2})
    res = run_requests(sc, [0.0] * 3, [8] * 3, [2] * 3)
    assert [s[3] for s in res.step_log][:2] == [((0, 8, 0), (1, 8, 0)), ((0, 1, 8), (1, 1, 8))]
    assert res.step_log[2][3] == ((2, 8, 0),)


# -- orca ---------------------------------------------------------------------------
def test_orca_mixes_a_whole_prefill_into_a_decode_iteration():
    # B arrives mid-way through A's prefill; next iteration A decodes and B prefills in
    # the same forward pass (10 + 1 + 8 ms); then both decode.
    sc = tiny_scenario(serving={"policy": "orca"})
    res = run_requests(sc, [0.0, 0.015], [8, 8], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.037, ((0, 1, 8), (1, 8, 0))),
        (0, 0.037, 0.049, ((0, 1, 9), (1, 1, 8))),
    ]
    np.testing.assert_allclose(res.first_token, [0.018, 0.037], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.049, 0.049], atol=1e-12)


def test_orca_token_budget_counts_decodes():
    # Budget 12: A's decode takes 1, so B's 12-token prompt waits until A has finished.
    sc = tiny_scenario(serving={"policy": "orca", "max_num_batched_tokens": 12})
    res = run_requests(sc, [0.0, 0.001], [8, 12], [2, 2])
    assert [s[3] for s in res.step_log] == [((0, 8, 0),), ((0, 1, 8),), ((1, 12, 0),),
                                            ((1, 1, 12),)]


@pytest.mark.parametrize(("wait", "log", "ttft"), [
    # Held twice (the timeout), then B and C join together: 10 + 1 + 16 ms.
    ({"batch_wait_timeout_iters": 2, "batch_wait_max_tokens_ratio": 0.5},
     [(0, 0.0, 0.018, ((0, 8, 0),)),
      (0, 0.018, 0.029, ((0, 1, 8),)),
      (0, 0.029, 0.04, ((0, 1, 9),)),
      (0, 0.04, 0.067, ((0, 1, 10), (1, 8, 0), (2, 8, 0))),
      (0, 0.067, 0.08, ((0, 1, 11), (1, 1, 8), (2, 1, 8))),
      (0, 0.08, 0.092, ((1, 1, 9), (2, 1, 9)))],
     [0.018, 0.066, 0.065]),
    # B's and C's 16 prompt tokens plus A's decode reach 0.25 x 64 = 16: no wait.
    ({"batch_wait_timeout_iters": 2, "batch_wait_max_tokens_ratio": 0.25},
     [(0, 0.0, 0.018, ((0, 8, 0),)),
      (0, 0.018, 0.045, ((0, 1, 8), (1, 8, 0), (2, 8, 0))),
      (0, 0.045, 0.058, ((0, 1, 9), (1, 1, 8), (2, 1, 8))),
      (0, 0.058, 0.071, ((0, 1, 10), (1, 1, 9), (2, 1, 9))),
      (0, 0.071, 0.082, ((0, 1, 11),))],
     [0.018, 0.044, 0.043]),
])
def test_orca_batch_waiting_holds_new_prompts_back_as_tensorrt_llm_does(
        wait: dict, log: list, ttft: list) -> None:
    # TensorRT-LLM's batch_wait_timeout_iters / batch_wait_max_tokens_ratio: B and C
    # arrive during A's prefill; while A decodes, their prompts wait until the held
    # iterations reach the timeout or the step's tokens reach the ratio of the budget.
    sc = tiny_scenario(serving={"policy": "orca", "max_num_batched_tokens": 64, **wait})
    res = run_requests(sc, [0.0, 0.001, 0.002], [8, 8, 8], [5, 3, 3])
    assert steps(res) == log
    np.testing.assert_allclose(res.first_token - res.requests.arrival_s, ttft, atol=1e-12)


def test_orca_batch_waiting_never_holds_prompts_when_nothing_decodes() -> None:
    # B arrives after A finished: nothing runs, so it is admitted at once.
    sc = tiny_scenario(serving={"policy": "orca", "batch_wait_timeout_iters": 20,
                                "batch_wait_max_tokens_ratio": 0.9})
    res = run_requests(sc, [0.0, 1.0], [8, 8], [2, 2])
    assert [s[3] for s in res.step_log] == [((0, 8, 0),), ((0, 1, 8),), ((1, 8, 0),),
                                            ((1, 1, 8),)]


# -- chunked ------------------------------------------------------------------------
def test_chunked_prefill_splits_prompts_under_the_token_budget():
    # Budget 8. A's 12-token prompt is cut 8 + 4; B fills the rest of the second
    # iteration with a 4-token chunk and finishes its prefill next to A's first decode.
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 8})
    res = run_requests(sc, [0.0, 0.0], [12, 6], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.036, ((0, 4, 8), (1, 4, 0))),
        (0, 0.036, 0.049, ((0, 1, 12), (1, 2, 4))),
        (0, 0.049, 0.061, ((0, 1, 13), (1, 1, 6))),
    ]
    np.testing.assert_allclose(res.first_token, [0.036, 0.049], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.061, 0.061], atol=1e-12)


def test_chunked_decodes_never_wait_behind_a_whole_prompt():
    # A is decoding when B's 20-token prompt arrives: every iteration carries A's decode
    # plus at most 7 prompt tokens, so A's gaps stay at 18 ms (continuous: 30 ms stall).
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 8})
    res = run_requests(sc, [0.0, 0.012], [4, 20], [4, 2])
    assert steps(res) == [
        (0, 0.0, 0.014, ((0, 4, 0),)),
        (0, 0.014, 0.032, ((0, 1, 4), (1, 7, 0))),
        (0, 0.032, 0.05, ((0, 1, 5), (1, 7, 7))),
        (0, 0.05, 0.067, ((0, 1, 6), (1, 6, 14))),
        (0, 0.067, 0.078, ((1, 1, 20),)),
    ]
    cont = run_requests(tiny_scenario(), [0.0, 0.012], [4, 20], [4, 2])
    assert steps(cont)[1] == (0, 0.014, 0.044, ((1, 20, 0),))
    assert res.itl.max < 0.0181 < 0.03 <= cont.itl.max


# -- preemption by swap -------------------------------------------------------------
def test_swap_preemption_moves_kv_to_host_and_back():
    # As test_preemption_by_recompute (6 blocks): at context 12 B is preempted, but its 3
    # blocks go to host memory over PCIe and come back for one decode instead of a
    # 13-token re-prefill. Each block is 4 tokens x 2048 B (tiny model) = 8192 B at the
    # H100's 64 GB/s: 0.128 us, paid in the iteration that swaps.
    sc = tiny_scenario(serving={"num_kv_blocks": 6, "preemption": "swap"})
    res = run_requests(sc, [0.0, 0.0], [8, 8], [6, 6])
    swap3 = 3 * 8192 / 64e9
    log = steps(res)
    assert log[5] == (0, 0.074, round(0.085 + swap3, 9), ((0, 1, 12),))
    assert log[6] == (0, round(0.085 + swap3, 9), round(0.096 + 2 * swap3, 9), ((1, 1, 12),))
    assert len(log) == 7
    assert res.preemptions.tolist() == [0, 1]
    assert res.finish[1] == pytest.approx(0.096 + 2 * swap3, abs=1e-12)


def test_swap_without_host_space_falls_back_to_recompute():
    # Two blocks of swap space (2 x 8192 B): B's three do not fit, so it recomputes, and
    # the summary says which way each preemption went.
    sc = tiny_scenario(serving={"num_kv_blocks": 6, "preemption": "swap",
                                "swap_space_gib": 2 * 8192 / 2**30})
    res = run_requests(sc, [0.0, 0.0], [8, 8], [6, 6])
    assert steps(res)[-1] == (0, 0.085, 0.108, ((1, 13, 0),))
    assert summarize(res)["swap"] == {"swapped": 0, "recomputed": 1}
    roomy = run_requests(dataclasses.replace(sc, serving=dataclasses.replace(
        sc.serving, swap_space_gib=3 * 8192 / 2**30)), [0.0, 0.0], [8, 8], [6, 6])
    assert summarize(roomy)["swap"] == {"swapped": 1, "recomputed": 0}
    from sim.report.printed import table
    from sim.study.reportdoc import _run_table

    assert "preemptions 1 (0 swapped to host memory, 1 recomputed: " in table(summarize(res))
    rows = dict(_run_table(summarize(roomy))[1])
    assert rows["preemptions"] == "1 (1 swapped to host memory, 0 recomputed)"
    assert "swap" not in summarize(run_requests(tiny_scenario(serving={"num_kv_blocks": 6}),
                                                [0.0, 0.0], [8, 8], [6, 6]))


def test_a_swap_space_under_one_block_or_past_the_host_is_refused():
    """A swap space holding no block had sent every preemption to recompute unsaid; one of
    more than 70% of the node's memory is one vLLM v0 refuses to start with."""
    with pytest.raises(ServesimError, match=r"serving\.swap_space_gib: got 0 GiB per GPU under "
                       r"preemption: swap, less than one KV block \(8,192 bytes"):
        tiny_scenario(serving={"preemption": "swap", "swap_space_gib": 0})
    tiny_scenario(serving={"preemption": "recompute", "swap_space_gib": 0})
    with pytest.raises(ServesimError, match=r"got 80 GiB per GPU x 2 tensor-parallel GPU\(s\) = "
                       r"160 GiB, more than 70% of the 200 GiB of hardware.host_memory_gb"):
        tiny_scenario(serving={"preemption": "swap", "swap_space_gib": 80},
                      hardware={"tp": 2, "host_memory_gb": 200})
    tiny_scenario(serving={"preemption": "swap", "swap_space_gib": 70},
                  hardware={"tp": 2, "host_memory_gb": 200})


# -- priority -----------------------------------------------------------------------
def _run_with_priority(sc, arrivals, prompts, outputs, priority):
    req = Requests(np.array(arrivals, dtype=float), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64), priority=np.array(priority))
    return Engine(sc, req, build_cost(sc), np.random.default_rng(0), log_steps=True).run()


@pytest.mark.parametrize("policy", ["continuous", "chunked", "orca", "static"])
def test_priority_orders_admission_then_arrival(policy):
    # One sequence at a time: C (class 0) arrived last but runs before B (class 1).
    sc = tiny_scenario(serving={"policy": policy, "max_num_seqs": 1, "priority": True})
    res = _run_with_priority(sc, [0.0, 0.001, 0.002], [8, 8, 8], [2, 2, 2], [1, 1, 0])
    order = [s[3][0][0] for s in res.step_log if s[3][0][1] > 1]
    assert order == [0, 2, 1]
    np.testing.assert_allclose(res.first_token, [0.018, 0.076, 0.047], atol=1e-12)
    # Without the option the same requests run in arrival order.
    sc = tiny_scenario(serving={"policy": policy, "max_num_seqs": 1})
    res = _run_with_priority(sc, [0.0, 0.001, 0.002], [8, 8, 8], [2, 2, 2], [1, 1, 0])
    assert [s[3][0][0] for s in res.step_log if s[3][0][1] > 1] == [0, 1, 2]


def test_chunked_priority_preempts_the_lowest_class_as_vllm_v1_does():
    # 5 blocks of 4 tokens. L (class 1) prefills alone, then decodes beside H's (class 0)
    # prefill: 3 + 2 blocks, the cache full. At 37 ms L's decode (context 9) fits its
    # third block, but H's (context 8) needs a sixth: vLLM v1's priority policy preempts
    # the running request of the largest class, latest arrival, L, though it was given
    # its decode earlier in the same iteration: the decode is taken back and H decodes
    # alone (10 + 1 ms). L comes back once H is done: 10 tokens, its first prompt block
    # still cached (H's two new blocks evicted the other two), so 6 recomputed.
    sc = tiny_scenario(serving={"policy": "chunked", "num_kv_blocks": 5, "priority": True})
    res = _run_with_priority(sc, [0.0, 0.001], [8, 8], [6, 6], [1, 0])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.037, ((0, 1, 8), (1, 8, 0))),
        (0, 0.037, 0.048, ((1, 1, 8),)),
        (0, 0.048, 0.059, ((1, 1, 9),)),
        (0, 0.059, 0.07, ((1, 1, 10),)),
        (0, 0.07, 0.081, ((1, 1, 11),)),
        (0, 0.081, 0.092, ((1, 1, 12),)),
        (0, 0.092, 0.108, ((0, 6, 4),)),
        (0, 0.108, 0.119, ((0, 1, 10),)),
        (0, 0.119, 0.13, ((0, 1, 11),)),
        (0, 0.13, 0.141, ((0, 1, 12),)),
    ]
    assert res.preemptions.tolist() == [1, 0]
    np.testing.assert_allclose(res.finish, [0.141, 0.092], atol=1e-12)
    # First come, first served, the newest running request (H) yields instead.
    sc = tiny_scenario(serving={"policy": "chunked", "num_kv_blocks": 5})
    res = _run_with_priority(sc, [0.0, 0.001], [8, 8], [6, 6], [1, 0])
    assert steps(res)[2] == (0, 0.037, 0.048, ((0, 1, 9),))
    assert res.preemptions.tolist() == [0, 1]


# -- routers ------------------------------------------------------------------------
def test_power_of_two_choices_picks_the_lighter_of_two():
    # With two replicas both are always sampled: it acts as least_outstanding.
    sc = tiny_scenario(cluster={"replicas": 2, "router": "power_of_two"})
    res = run_requests(sc, [0.0, 0.0, 0.0], [100, 8, 8], [2, 2, 2])
    assert res.replica.tolist() == [0, 1, 1]
    assert (res.status == FINISHED).all()


def test_random_router_uses_every_replica():
    sc = tiny_scenario(cluster={"replicas": 3, "router": "random"})
    res = run_requests(sc, [0.001 * i for i in range(30)], [8] * 30, [2] * 30)
    assert set(res.replica.tolist()) == {0, 1, 2}
