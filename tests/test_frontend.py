"""The API server's frontend latency (sim/cost/frontend.py) in the engine: requests reach the
engine ``request_s + per_prompt_token_s x prompt`` after the client sent them, in that
order; clients receive every token ``response_s`` after the engine emitted it.

Cost as in tests/test_engine_handworked.py: 10 ms per step + 1 ms per new token.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import tiny_scenario

from sim.config.scenario import from_dict
from sim.core.engine import Engine, build_cost, simulate
from sim.core.request import FINISHED, TIMED_OUT
from sim.report.metrics import per_request
from sim.report.outputs import requests_csv
from sim.report.summary import summarize
from sim.workload.requests import Requests


def with_frontend(request_s: float = 0.0, per_prompt_token_s: float = 0.0,
                  response_s: float = 0.0, jitter_s: float = 0.0, **sections: Any) -> Any:
    fe = {"request_s": request_s, "per_prompt_token_s": per_prompt_token_s,
          "response_s": response_s, "jitter_s": jitter_s}
    return tiny_scenario(cost={"linear": {"step_s": 0.01, "per_new_token_s": 0.001,
                                          "frontend": fe}}, **sections)


def run(sc: Any, arrivals: list[float], prompts: list[int], outputs: list[int]) -> Any:
    req = Requests(np.array(arrivals, dtype=float), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    return Engine(sc, req, build_cost(sc), np.random.default_rng(0), True).run()


def test_request_and_response_shift_ttft_and_e2e_exactly_at_low_load() -> None:
    # Requests one second apart never meet: each is the engine's only work.
    args = ([0.0, 1.0, 2.0], [20, 30, 10], [4, 1, 6])
    plain = run(tiny_scenario(), *args)
    fe = run(with_frontend(request_s=0.004, response_s=0.0015), *args)
    a, b = per_request(plain), per_request(fe)
    np.testing.assert_allclose(b["ttft"] - a["ttft"], 0.0055, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b["e2e"] - a["e2e"], 0.0055, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b["tpot"], a["tpot"], rtol=0, atol=1e-12)
    # The engine schedules it request_s after the send; the send time is the arrival.
    np.testing.assert_allclose(fe.first_sched - plain.first_sched, 0.004, rtol=0, atol=1e-12)
    # Queueing is the wait at the engine: the frontend's time is not in it.
    np.testing.assert_allclose(b["queueing"], a["queueing"], rtol=0, atol=1e-12)
    np.testing.assert_array_equal(fe.requests.arrival_s, plain.requests.arrival_s)
    assert fe.itl.counts.tolist() == plain.itl.counts.tolist()
    assert summarize(fe)["frontend"] == {"request_s": 0.004, "per_prompt_token_s": 0.0,
                                         "response_s": 0.0015, "jitter_s": 0.0}
    assert "frontend" not in summarize(plain)


def test_engine_sees_requests_in_engine_arrival_order() -> None:
    # A (sent at 0, 1000 tokens) reaches the engine at 10 ms; B (sent at 1 ms, 10 tokens)
    # at 1.1 ms: B is prefilled first (10 + 10 ms), A right after it (10 + 1000 ms).
    sc = with_frontend(per_prompt_token_s=1e-5, serving={"max_num_batched_tokens": 2048})
    res = run(sc, [0.0, 0.001], [1000, 10], [1, 1])
    assert [s[3][0][0] for s in res.step_log] == [1, 0]
    assert res.first_sched[1] == pytest.approx(0.0011, abs=1e-12)
    assert res.first_sched[0] == pytest.approx(0.0011 + 0.02, abs=1e-12)
    # TTFT counts from the client's send: A waited for the frontend and for B.
    assert per_request(res)["ttft"][0] == pytest.approx(0.0211 + 1.01, abs=1e-12)


def test_equal_engine_arrivals_go_in_id_order_on_every_dispatch_path() -> None:
    # Both reach the engine at 3/1024 s (powers of two: no rounding); one sequence at a
    # time, so the first routed is the first prefilled. Client timeouts route through
    # the guarded path: same order.
    k = 2.0**-10
    for extra in ({}, {"admission": {"timeout_s": 10.0}}):
        sc = with_frontend(per_prompt_token_s=k, serving={"max_num_seqs": 1}, **extra)
        res = run(sc, [0.0, 2 * k], [3, 1], [1, 1])
        assert [s[3][0][0] for s in res.step_log] == [0, 1]
        assert res.first_sched[0] == 3 * k


def test_zero_frontend_changes_nothing() -> None:
    args = ([0.0, 0.001, 0.002, 0.5], [30, 20, 10, 5], [5, 9, 2, 3])
    plain = run(tiny_scenario(), *args)
    zero = run(with_frontend(), *args)
    assert requests_csv(zero) == requests_csv(plain)
    assert zero.step_log == plain.step_log
    assert "frontend" not in summarize(zero)


def test_closed_loop_clients_wait_for_the_response() -> None:
    # One client: request 0 sent at 0 reaches the engine at 5 ms, its last token leaves
    # the engine at 5 + 18 + 11 ms and reaches the client 2 ms later, which then sends
    # request 1.
    raw = {"model": "tiny",
           "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001,
                               "frontend": {"request_s": 0.005, "response_s": 0.002}}},
           "serving": {"block_size": 4},
           "workload": {"concurrency": 1, "num_requests": 3,
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}}}}
    res = simulate(from_dict(raw))
    cycle = 0.005 + 0.018 + 0.011 + 0.002
    np.testing.assert_allclose(res.requests.arrival_s, [0.0, cycle, 2 * cycle], rtol=0,
                               atol=1e-12)
    assert res.requests.arrival_s[1] == res.finish[0]
    assert res.requests.arrival_s[2] == res.finish[1]
    np.testing.assert_allclose(per_request(res)["ttft"], 0.005 + 0.018 + 0.002, rtol=0,
                               atol=1e-12)


def test_closed_loop_engine_order_follows_prompt_delay() -> None:
    raw = {"model": "tiny",
           "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001,
                               "frontend": {"per_prompt_token_s": 1e-4}}},
           "serving": {"block_size": 4, "max_num_seqs": 1, "max_num_batched_tokens": 512},
           "workload": {"concurrency": 2, "num_requests": 2,
                        "lengths": {"prompt": {"dist": "uniform", "low": 10, "high": 400},
                                    "output": {"dist": "fixed", "value": 1}},
                        "seed": 1}}
    res = simulate(from_dict(raw), log_steps=True)
    p = res.requests.prompt_tokens
    assert p[0] != p[1]
    short = int(np.argmin(p))
    assert res.step_log[0][3][0][0] == short
    assert res.first_sched[short] == pytest.approx(1e-4 * p[short], abs=1e-12)


def test_a_client_may_give_up_before_the_engine_sees_its_request() -> None:
    # The frontend takes 30 ms, the client waits 20 ms: open loop, the engine abandons
    # it when it arrives; closed loop, the client gives up at 20 ms and sends again.
    sc = with_frontend(request_s=0.03, admission={"timeout_s": 0.02})
    res = run(sc, [0.0], [8], [2])
    assert res.status.tolist() == [TIMED_OUT]
    raw = {"model": "tiny",
           "cost": {"linear": {"step_s": 0.01, "frontend": {"request_s": 0.03}}},
           "admission": {"timeout_s": 0.02},
           "workload": {"concurrency": 1, "num_requests": 3,
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}}}}
    res = simulate(from_dict(raw))
    assert res.status.tolist() == [TIMED_OUT] * 3
    np.testing.assert_allclose(res.requests.arrival_s, [0.0, 0.02, 0.04], rtol=0, atol=1e-12)


def test_disaggregated_pools_use_the_entry_pools_frontend() -> None:
    raw: dict[str, Any] = {
        "model": "tiny", "serving": {"policy": "disaggregated"},
        "cost": {"roofline": {"frontend": {"request_s": 0.01, "response_s": 0.003}}},
        "workload": {"arrivals": {"process": "constant", "rate": 1.0}, "num_requests": 3,
                     "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                 "output": {"dist": "fixed", "value": 4}}}}
    fe = simulate(from_dict(raw))
    # The roofline's default frontend is vLLM's fitted prior: zero it for the baseline.
    raw["cost"] = {"roofline": {"frontend": {"request_s": 0.0}}}
    plain = simulate(from_dict(raw))
    assert (fe.status == FINISHED).all()
    np.testing.assert_allclose(per_request(fe)["ttft"] - per_request(plain)["ttft"], 0.013,
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(per_request(fe)["tpot"], per_request(plain)["tpot"], rtol=0,
                               atol=1e-12)


def test_jitter_delays_each_request_by_its_own_seeded_draw() -> None:
    """Each request reaches the engine an exponential draw (mean jitter_s) after its send,
    drawn in id order from the workload seed's fourth stream: the same run twice is the
    same, and requests sent together reach the engine apart."""
    from sim.core.engine import jitter_seed_of

    sc = with_frontend(request_s=0.002, jitter_s=0.003)
    args = ([0.0, 0.0, 0.0, 5.0], [20, 20, 20, 20], [2, 2, 2, 2])
    one, two = run(sc, *args), run(sc, *args)
    np.testing.assert_array_equal(one.first_sched, two.first_sched)
    draws = np.random.default_rng(jitter_seed_of(sc)).exponential(0.003, 4)
    seen = 0.002 + draws + np.array(args[0])
    # The first of the three sent together to reach the engine starts the instant it
    # arrives (an idle server), alone: a 20-token prefill, 10 + 20 ms. The other two,
    # seen during that step, are prefilled together right after it.
    first = int(np.argmin(seen[:3]))
    assert seen[:3].max() - seen[first] < 0.030  # both seen while the first prefills
    want = np.full(3, seen[first] + 0.030)
    want[first] = seen[first]
    np.testing.assert_allclose(one.first_sched[:3], want, rtol=0, atol=1e-12)
    assert one.first_sched[3] == pytest.approx(seen[3], abs=1e-12)


def test_a_partial_roofline_frontend_keeps_the_prior_it_leaves_out() -> None:
    # Left out, request_s keeps vLLM's fitted 15.9 ms, as an efficiency left out keeps
    # its default: a jitter setting does not silently zero the prior.
    from sim.cost.rooflineparams import VLLM_FRONTEND

    wl = {"arrivals": {"process": "poisson", "rate": 1}, "num_requests": 1,
          "lengths": {"prompt": {"dist": "fixed", "value": 8},
                      "output": {"dist": "fixed", "value": 2}}}
    fe = from_dict({"model": "tiny", "cost": {"roofline": {"frontend": {"jitter_s": 0.002}}},
                    "workload": wl}).cost.roofline.frontend
    assert fe.request_s == VLLM_FRONTEND.request_s > 0 and fe.jitter_s == 0.002
    zero = from_dict({"model": "tiny", "cost": {"roofline": {"frontend": {"request_s": 0}}},
                      "workload": wl}).cost.roofline.frontend
    assert zero.request_s == 0 and not zero.active
