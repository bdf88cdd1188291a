"""Tiny scenarios worked out by hand: exact iteration logs and timestamps.

Cost in every case: 10 ms per step + 1 ms per new token (linear), block size 4.
Step log entries: (replica, start_s, end_s, ((request id, new tokens, context before), ...)).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import run_requests, tiny_scenario

from sim.core.engine import Engine, build_cost
from sim.core.request import FINISHED
from sim.workload.requests import Requests


def steps(res):
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def test_lone_request():
    # Prefill of 20 tokens: 10 + 20 ms; then 2 decodes of 10 + 1 ms each.
    res = run_requests(tiny_scenario(), [0.5], [20], [3])
    assert steps(res) == [
        (0, 0.5, 0.53, ((0, 20, 0),)),
        (0, 0.53, 0.541, ((0, 1, 20),)),
        (0, 0.541, 0.552, ((0, 1, 21),)),
    ]
    assert res.first_sched[0] == 0.5
    assert res.first_token[0] == pytest.approx(0.53, abs=1e-12)
    assert res.finish[0] == pytest.approx(0.552, abs=1e-12)
    assert res.status[0] == FINISHED


def test_arrival_during_prefill_waits_for_next_iteration():
    # B arrives at 15 ms, mid-way through A's prefill; it is prefilled alone next
    # (prefill-first), then both decode together.
    res = run_requests(tiny_scenario(), [0.0, 0.015], [20, 10], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.03, ((0, 20, 0),)),
        (0, 0.03, 0.05, ((1, 10, 0),)),
        (0, 0.05, 0.062, ((0, 1, 20), (1, 1, 10))),
        (0, 0.062, 0.073, ((0, 1, 21),)),
    ]
    np.testing.assert_allclose(res.first_token, [0.03, 0.05], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.073, 0.062], atol=1e-12)
    np.testing.assert_allclose(res.first_sched, [0.0, 0.03], atol=1e-12)


def test_arrival_exactly_at_boundary_is_seen_by_that_boundary():
    # B arrives exactly when A's prefill ends (30 ms): it is prefilled at 30 ms.
    res = run_requests(tiny_scenario(), [0.0, 0.03], [20, 10], [2, 2])
    assert steps(res)[1] == (0, 0.03, 0.05, ((1, 10, 0),))


def test_two_prompts_prefilled_together_when_both_wait():
    res = run_requests(tiny_scenario(), [0.0, 0.0], [8, 8], [2, 2])
    assert steps(res) == [
        (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0))),
        (0, 0.026, 0.038, ((0, 1, 8), (1, 1, 8))),
    ]


def test_preemption_by_recompute():
    # 6 blocks of 4 tokens. A and B (prompt 8 = 2 blocks each, output 6) prefill together,
    # each grows to 3 blocks at context 8; at context 12 A needs a 4th block while none is
    # free: B (newest) is preempted and its 3 blocks freed. A finishes; B re-prefills its
    # prompt plus its 5 generated tokens (13 tokens), which emits its 6th and last token.
    sc = tiny_scenario(serving={"num_kv_blocks": 6})
    res = run_requests(sc, [0.0, 0.0], [8, 8], [6, 6])
    assert steps(res) == [
        (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0))),
        (0, 0.026, 0.038, ((0, 1, 8), (1, 1, 8))),
        (0, 0.038, 0.05, ((0, 1, 9), (1, 1, 9))),
        (0, 0.05, 0.062, ((0, 1, 10), (1, 1, 10))),
        (0, 0.062, 0.074, ((0, 1, 11), (1, 1, 11))),
        (0, 0.074, 0.085, ((0, 1, 12),)),
        (0, 0.085, 0.108, ((1, 13, 0),)),
    ]
    assert res.preemptions.tolist() == [0, 1]
    np.testing.assert_allclose(res.finish, [0.085, 0.108], atol=1e-12)
    np.testing.assert_allclose(res.first_token, [0.026, 0.026], atol=1e-12)


def test_single_token_output_finishes_at_prefill_and_has_no_tpot():
    from sim.report.metrics import per_request

    res = run_requests(tiny_scenario(), [0.0], [10], [1])
    assert res.finish[0] == pytest.approx(0.02)
    assert math.isnan(per_request(res)["tpot"][0])


def test_max_num_seqs_limits_admission():
    sc = tiny_scenario(serving={"max_num_seqs": 1})
    res = run_requests(sc, [0.0, 0.0], [8, 8], [2, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.029, ((0, 1, 8),)),
        (0, 0.029, 0.047, ((1, 8, 0),)),
        (0, 0.047, 0.058, ((1, 1, 8),)),
    ]


def test_token_budget_limits_admission():
    sc = tiny_scenario(serving={"max_num_batched_tokens": 12})
    res = run_requests(sc, [0.0, 0.0], [8, 8], [2, 2])
    # B does not fit A's prefill budget: it is prefilled alone next, then both decode.
    assert [len(s[3]) for s in res.step_log] == [1, 1, 2]


def test_rejections_are_counted_with_reasons():
    from sim.core.request import REJECTED

    # tiny has max_context 4096; 30 blocks x 4 tokens = 120 tokens of KV.
    sc = tiny_scenario(serving={"num_kv_blocks": 30, "max_num_batched_tokens": 64})
    res = run_requests(sc, [0.0, 0.0, 0.0, 0.0], [4000, 130, 100, 8], [200, 2, 2, 2])
    assert res.status.tolist()[:3] == [REJECTED] * 3
    assert res.reason.tolist() == ["exceeds_context", "exceeds_kv_capacity",
                                   "prompt_exceeds_max_num_batched_tokens", ""]
    assert res.status[3] == FINISHED


def test_round_robin_spreads_over_replicas():
    sc = tiny_scenario(cluster={"replicas": 2})
    res = run_requests(sc, [0.0, 0.0, 0.0], [8, 8, 8], [2, 2, 2])
    assert res.replica.tolist() == [0, 1, 0]
    # Replica 1 serves its request alone: 18 ms prefill, 11 ms decode.
    assert res.finish[1] == pytest.approx(0.029)


def test_least_outstanding_prefers_the_lighter_replica():
    sc = tiny_scenario(cluster={"replicas": 2, "router": "least_outstanding"})
    res = run_requests(sc, [0.0, 0.0, 0.0], [100, 8, 8], [2, 2, 2])
    # 0 -> replica 0 (tie, lowest index); 1 -> replica 1 (empty); 2 -> replica 1 (10 < 102).
    assert res.replica.tolist() == [0, 1, 1]


def test_horizon_leaves_unfinished_requests_counted():
    from sim.core.request import NOT_ARRIVED, UNFINISHED

    sc = tiny_scenario(horizon_s=0.05)
    res = run_requests(sc, [0.0, 0.01, 1.0], [20, 20, 20], [10, 10, 10])
    # Both that arrived are cut mid-run (backlog); the third was due after the horizon.
    assert res.status.tolist() == [UNFINISHED, UNFINISHED, NOT_ARRIVED]


def test_requests_due_after_the_horizon_are_counted_apart_and_judged_in_nothing():
    from sim.core.request import NOT_ARRIVED, UNFINISHED
    from sim.report.outputs import requests_csv
    from sim.report.printed import table
    from sim.report.summary import summarize

    sc = tiny_scenario(horizon_s=0.1, slo={"ttft_s": 0.05})
    # A (0 s): prefill 0-30 ms, decodes to 41 and 52 ms: finished. B (60 ms): prefill
    # 60-80 ms, decodes end at 91 and 102 ms: cut by the horizon at 100 ms, unfinished.
    # C is due exactly at the horizon and D at 0.5 s: neither arrived.
    res = run_requests(sc, [0.0, 0.06, 0.1, 0.5], [20, 10, 8, 8], [3, 100, 2, 2])
    assert res.status.tolist() == [FINISHED, UNFINISHED, NOT_ARRIVED, NOT_ARRIVED]
    assert res.finish[0] == pytest.approx(0.052, abs=1e-12)
    assert res.first_token[1] == pytest.approx(0.08, abs=1e-12)
    s = summarize(res)
    assert s["requests"] == {"total": 4, "finished": 1, "rejected": 0, "unfinished": 1,
                             "timed_out": 0, "failed": 0, "not_arrived": 2,
                             "rejected_by_reason": {}}
    tp, sat = s["throughput"], s["saturation"]
    # A met the 50 ms TTFT; B, cut unfinished, did not: 1 of the 2 that arrived (the old
    # accounting divided by all 4: 25%).
    assert tp["slo_attainment"] == 0.5
    # One finish over the span from the first arrival to the horizon; its 20 prompt and
    # 3 output tokens (on the run's one GPU) over the same span.
    assert tp["requests_per_s"] == pytest.approx(1 / 0.1)
    assert tp["prompt_tokens_per_s"] == pytest.approx(20 / 0.1)
    assert tp["output_tokens_per_s"] == tp["output_tokens_per_s_per_gpu"] == pytest.approx(30)
    # Offered: the 2 that arrived, 60 ms apart (all 4 would give 3 / 0.5 s = 6 req/s).
    # Each was scheduled on arrival, so nothing waited: no queue growth, not saturated
    # (C and D, never scheduled, would have made the queue grow through 0.1-0.5 s).
    assert sat["offered_rps"] == pytest.approx(1 / 0.06)
    assert sat["queue_growth_rps"] == 0.0 and sat["peak_waiting"] == 0
    assert sat["saturated"] is False
    assert requests_csv(res).decode().splitlines()[3].split(",")[12] == "not_arrived"
    # Busy: A's 52 ms, B's prefill (20 ms), first decode (11 ms) and the 9 ms of its
    # second decode before the horizon (it would end at 102 ms): 92 ms of the 100 ms
    # span. Counting that iteration whole (94%) had put overloaded runs above 1.
    assert s["busy_fraction"] == pytest.approx(0.92, abs=1e-12)
    assert ("1 finished, 0 rejected, 1 unfinished, 2 not arrived by the horizon"
            in table(s))
    # The printed throughput stands beside the rate offered, not a trace's whole rate.
    assert ("throughput: 10.000 req/s (offered 16.667), 30.0 output tok/s, 200.0 prompt "
            "tok/s; goodput ") in table(s)


class _Waking:
    """The tiny scenario's linear cost plus a wake term: 5 ms x (1 - exp(-idle / 0.1 s))."""

    def __init__(self, base):
        self.base = base
        self.frontend = base.frontend
        self.source = "linear cost model with a wake term"

    def step_time(self, shape):
        return self.base.step_time(shape)

    def wake_time(self, idle_s):
        return 0.005 * -math.expm1(-idle_s / 0.1)


def test_first_step_after_idle_pays_the_wake_term():
    # The replica is idle from 0 s. A (20-token prompt, 3 tokens) arrives at 0.5 s: its
    # prefill costs 30 ms + wake(0.5 s); two decodes of 11 ms follow. B arrives at 0.6 s,
    # after 0.6 - A's finish of idle: 20 ms + wake(that). C arrives at 0.61 s while B's
    # prefill runs: its prefill follows at once and pays no wake.
    sc = tiny_scenario()
    req = Requests(np.array([0.5, 0.6, 0.61]), np.array([20, 10, 10], dtype=np.int64),
                   np.array([3, 1, 1], dtype=np.int64))
    res = Engine(sc, req, _Waking(build_cost(sc)), np.random.default_rng(0), True).run()

    def wake(idle):
        return 0.005 * (1 - math.exp(-idle / 0.1))
    a_first = 0.5 + 0.030 + wake(0.5)
    a_done = a_first + 2 * 0.011
    b_first = 0.6 + 0.020 + wake(0.6 - a_done)
    c_first = b_first + 0.020
    np.testing.assert_allclose(res.first_token, [a_first, b_first, c_first], rtol=0,
                               atol=1e-12)
    np.testing.assert_allclose(res.finish, [a_done, b_first, c_first], rtol=0, atol=1e-12)
    assert wake(0.5) == pytest.approx(0.004966, abs=1e-6)
    # Without the term the same requests run as before.
    plain = run_requests(sc, [0.5, 0.6, 0.61], [20, 10, 10], [3, 1, 1])
    np.testing.assert_allclose(plain.first_token, [0.53, 0.62, 0.64], atol=1e-12)


def test_wake_is_paid_alike_with_lazy_and_eager_decodes(tmp_path):
    """A profile's wake term with lazily advanced decodes and request by request: same
    outputs, and the arrivals that find the replica idle pay it."""
    import dataclasses

    import yaml
    from conftest import run_both_ways

    from sim.config.scenario import from_dict
    from sim.cost.presets import MODELS
    from sim.cost.profile import FORMS
    from sim.cost.profilekeys import SCHEMA

    coefs = {k: dict.fromkeys(f.coefs, 0.0) for k, f in FORMS.items()}
    coefs["step"].update(const_s=0.01, per_new_token_s=0.001)

    def scenario(wake):
        comps = {k: {"coef": v} for k, v in coefs.items()}
        if wake:
            comps["wake"] = {"coef": {"max_s": 0.004, "tau_s": 0.05}}
        path = tmp_path / f"wake-{wake}.yaml"
        path.write_text(yaml.safe_dump({
            "schema": SCHEMA, "device": {"name": "t"}, "dtype": "fp32", "tp": 1,
            "model": dataclasses.asdict(MODELS["tiny"]), "components": comps}))
        return from_dict({
            "model": "tiny", "cost": {"profile": str(path)},
            "serving": {"block_size": 4, "max_num_batched_tokens": 256, "watermark": 0.0},
            "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                         "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                     "output": {"dist": "fixed", "value": 2}},
                         "num_requests": 1}})
    args = ([0.0, 0.005, 2.0, 2.02], [20, 12, 30, 8], [40, 30, 20, 25])
    woken = run_both_ways(scenario(True), *args)
    plain = run_both_ways(scenario(False), *args)
    # Request 0 arrives at 0 s (no idle time); request 2 at 2 s, long after the first
    # two finished (about 0.5 s): it pays the full 4 ms less exp(-1.5/0.05) of it.
    assert woken.first_token[0] == pytest.approx(plain.first_token[0], abs=1e-12)
    assert woken.first_token[2] - plain.first_token[2] == pytest.approx(0.004, abs=1e-9)
    assert woken.finish[3] > plain.finish[3]
