"""Admission control and client timeouts, worked out by hand.

Cost: 10 ms per step + 1 ms per new token (linear), block size 4 (tests/conftest.py).
Every scenario runs with lazily advanced decodes and request by request: the results
must be identical.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from conftest import run_both_ways as both
from conftest import tiny_scenario

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.core.request import FINISHED, REJECTED, TIMED_OUT
from sim.errors import ServesimError
from sim.policies.admission import RateLimitConfig, TokenBucket
from sim.report.summary import summarize


def test_token_bucket_refills_at_its_rate_and_caps_at_burst() -> None:
    b = TokenBucket(RateLimitConfig(rate=10.0, burst=2))
    # Full bucket of 2; 0.05 s refills half a token; 0.1 s one token; never above 2.
    got = [b.take(t) for t in (0.0, 0.0, 0.0, 0.05, 0.1, 0.25, 10.0, 10.0, 10.0)]
    assert got == [True, True, False, False, True, True, True, True, False]


def test_rate_limited_arrivals_are_rejected_and_counted() -> None:
    sc = tiny_scenario(admission={"rate_limit": {"rate": 10.0, "burst": 2}})
    res = both(sc, [0.0, 0.0, 0.0, 0.05, 0.1], [8] * 5, [2] * 5)
    assert res.status.tolist() == [FINISHED, FINISHED, REJECTED, REJECTED, FINISHED]
    assert res.reason.tolist() == ["", "", "rate_limited", "rate_limited", ""]
    s = summarize(res)
    assert s["requests"]["rejected_by_reason"] == {"rate_limited": 2}
    assert s["saturation"]["refused_fraction"] == pytest.approx(0.4)
    assert s["saturation"]["saturated"] is True


def test_full_waiting_queue_refuses_arrivals() -> None:
    # A prefills 0-30 ms; B (10 ms) waits; C (20 ms) finds one waiting: refused.
    # B is prefilled at 30 ms alone (prefill-first), D (40 ms) finds the queue empty.
    sc = tiny_scenario(admission={"max_waiting": 1})
    res = both(sc, [0.0, 0.01, 0.02, 0.04], [20, 10, 8, 8], [3, 2, 2, 2])
    assert res.status.tolist() == [FINISHED, FINISHED, REJECTED, FINISHED]
    assert res.reason[2] == "queue_full"
    assert res.first_sched[1] == pytest.approx(0.03, abs=1e-12)
    assert summarize(res)["throughput"]["slo_attainment"] == pytest.approx(0.75)


def test_waiting_request_times_out_at_arrival_plus_timeout() -> None:
    # One sequence at a time: A (prompt 20, 10 outputs) runs 0-129 ms. B arrives at 10 ms
    # with a 50 ms timeout: abandoned at 60 ms, never scheduled. C (100 ms) is scheduled
    # when A finishes, at 129 ms, within its deadline of 150 ms.
    sc = tiny_scenario(serving={"max_num_seqs": 1}, admission={"timeout_s": 0.05})
    res = both(sc, [0.0, 0.01, 0.1], [20, 10, 8], [10, 2, 2])
    assert res.status.tolist() == [FINISHED, TIMED_OUT, FINISHED]
    assert res.reason.tolist() == ["", "timeout", ""]
    assert math.isnan(res.first_sched[1]) and math.isnan(res.finish[1])
    assert res.first_sched[2] == pytest.approx(0.129, abs=1e-12)
    assert res.finish[2] == pytest.approx(0.158, abs=1e-12)
    s = summarize(res)
    assert s["requests"]["timed_out"] == 1
    counts = s["requests"]
    assert sum(counts[k] for k in ("finished", "rejected", "unfinished", "timed_out",
                                   "failed")) == counts["total"] == 3


def test_timeout_of_a_blocking_head_unblocks_the_queue_inside_a_decode_run() -> None:
    # 11 blocks of 4 tokens. A (prompt 20) holds 5 blocks, 6 once decoding. B (prompt 28:
    # 7 blocks) cannot be admitted while A runs, and C (prompt 4) waits behind it (FCFS).
    # B's deadline is 60 ms; A's decodes end at 41, 52, 63 ms: at the 63 ms boundary B is
    # gone and C is prefilled (63-77 ms). A fused decode run must stop before 60 ms, or
    # C would wait for A to finish.
    sc = tiny_scenario(serving={"num_kv_blocks": 11}, admission={"timeout_s": 0.05})
    res = both(sc, [0.0, 0.01, 0.02], [20, 28, 4], [10, 2, 2])
    assert res.status.tolist() == [FINISHED, TIMED_OUT, FINISHED]
    assert res.first_sched[2] == pytest.approx(0.063, abs=1e-12)
    assert res.first_token[2] == pytest.approx(0.077, abs=1e-12)


def test_requests_still_waiting_past_their_deadline_at_the_horizon_time_out() -> None:
    sc = tiny_scenario(serving={"max_num_seqs": 1}, admission={"timeout_s": 0.05},
                       horizon_s=0.1)
    res = both(sc, [0.0, 0.01, 0.07], [20, 10, 8], [50, 2, 2])
    # B's deadline (60 ms) passed before the horizon; C's (120 ms) did not.
    assert res.status.tolist()[1:] == [TIMED_OUT, 3]  # 3: unfinished


@pytest.mark.parametrize("section,value,key", [
    ({"max_waiting": 0}, "0", "admission.max_waiting"),
    ({"rate_limit": {"burst": 2}}, "missing", "admission.rate_limit.rate"),
    ({"timeout_s": -1}, "-1", "admission.timeout_s"),
    ({"timeout": 3}, "timeout", "admission.timeout"),
])
def test_bad_admission_keys_fail_with_one_line_naming_them(section: dict[str, Any], value: str,
                                                           key: str) -> None:
    with pytest.raises(ServesimError) as e:
        tiny_scenario(admission=section)
    text = str(e.value)
    assert "\n" not in text and key in text and value in text


def test_goodput_counts_only_served_requests() -> None:
    sc = tiny_scenario(serving={"max_num_seqs": 1}, admission={"timeout_s": 0.05})
    res = both(sc, [0.0, 0.01, 0.1], [20, 10, 8], [10, 2, 2])
    s = summarize(res)
    span = s["span_s"]
    assert s["throughput"]["goodput_requests_per_s"] == pytest.approx(2 / span)
    assert np.isnan(res.first_token[1])


def test_a_request_held_for_async_scheduling_times_out_there() -> None:
    # Async scheduling (roofline: it needs the host's share of a step) holds B, arrived at
    # 1 ms while A's 2,000-token prefill runs, for the step after next. B's deadline
    # (21 ms) passes before that prefill ends: B times out where it is held and is never
    # served; C is served after A (one sequence at a time).
    sc = tiny_scenario(model="llama-3-8b", cost="roofline", hardware={"gpu": "h100-sxm"},
                       serving={"max_num_seqs": 1, "async_scheduling": True,
                                "max_num_batched_tokens": 8192},
                       admission={"timeout_s": 0.02})
    res = both(sc, [0.0, 0.001, 0.5], [2000, 10, 8], [10, 2, 2])
    assert res.first_token[0] > 0.021
    assert res.status.tolist() == [FINISHED, TIMED_OUT, FINISHED]
    assert math.isnan(res.first_sched[1]) and math.isnan(res.finish[1])
    assert summarize(res)["requests"]["timed_out"] == 1


def test_closed_loop_clients_time_out_under_async_scheduling() -> None:
    # Three clients, one sequence at a time, 6 requests of 2,000 tokens (a prefill takes
    # longer than the 10 ms patience): clients that give up send again while a prefill
    # runs, so async scheduling holds their requests, and some time out there. Each
    # request ends once (served or given up), and its client sends the next then.
    sc = from_dict({"model": "llama-3-8b", "cost": "roofline", "hardware": {"gpu": "h100-sxm"},
                    "serving": {"async_scheduling": True, "max_num_seqs": 1},
                    "admission": {"timeout_s": 0.01},
                    "workload": {"concurrency": 3, "num_requests": 6,
                                 "lengths": {"prompt": {"dist": "fixed", "value": 2000},
                                             "output": {"dist": "fixed", "value": 1}}}})
    counts = summarize(simulate(sc))["requests"]
    assert counts["timed_out"] >= 1
    assert counts["finished"] + counts["timed_out"] == counts["total"] == 6
