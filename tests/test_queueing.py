"""Queueing-theory checks: the engine against closed forms.

With max_num_seqs = 1 and one output token, each request is one prefill of fixed
length: a deterministic service of D seconds. Poisson arrivals make it an M/D/1 queue:
mean wait Wq = λD² / (2(1 − ρ)), ρ = λD, and a fraction 1 − ρ of requests never wait.

Batched service (below): a step of fixed length D whatever its batch, every waiting
request joining the next step (a gated M/D/1 bulk queue); a decode-only batch whose
step count and times are closed forms; and Little's law on a long run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import run_both_ways, run_requests, tiny_scenario

from sim.core.engine import simulate
from sim.report.metrics import per_request
from sim.report.summary import summarize

D = 0.01 + 100 * 0.001  # seconds: 10 ms per step + 1 ms per token x 100 prompt tokens


def md1(rho: float, n: int, seed: int):
    sc = tiny_scenario(
        serving={"max_num_seqs": 1},
        workload={"arrivals": {"process": "poisson", "rate": rho / D},
                  "lengths": {"prompt": {"dist": "fixed", "value": 100},
                              "output": {"dist": "fixed", "value": 1}},
                  "num_requests": n, "seed": seed},
    )
    return simulate(sc)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho: float) -> None:
    res = md1(rho, 40000, seed=3)
    wait = per_request(res)["queueing"]
    lam = rho / D
    expected = lam * D * D / (2 * (1 - rho))
    assert np.mean(wait) == pytest.approx(expected, rel=0.06)
    # TTFT is the wait plus one service time.
    assert np.mean(per_request(res)["ttft"]) == pytest.approx(expected + D, rel=0.05)
    # PASTA: an arrival finds the server idle with probability 1 - rho.
    assert np.mean(wait == 0.0) == pytest.approx(1 - rho, abs=0.02)


def test_md1_throughput_equals_arrival_rate_below_saturation() -> None:
    res = md1(0.5, 20000, seed=4)
    s = summarize(res)
    assert s["throughput"]["requests_per_s"] == pytest.approx(0.5 / D, rel=0.03)
    assert s["busy_fraction"] == pytest.approx(0.5, abs=0.02)


def test_overloaded_queue_grows_linearly() -> None:
    # At rho = 2 the server completes one request per D while two arrive: the k-th
    # request waits about k*D - k*D/2 = k*D/2 seconds.
    res = md1(2.0, 2000, seed=5)
    wait = per_request(res)["queueing"]
    k = np.arange(len(wait))
    slope = np.polyfit(k[200:], wait[200:], 1)[0]
    assert slope == pytest.approx(D / 2, rel=0.05)


# -- batched service ------------------------------------------------------------------
STEP = 0.02  # seconds: the whole cost of a step, whatever its batch (linear, step_s only)


def gated(x: float, n: int, seed: int):
    """Poisson arrivals at x / STEP per second, one output token each: every request is
    one prefill, and continuous admits every waiting request into the next step."""
    sc = tiny_scenario(
        cost={"linear": {"step_s": STEP}},
        # 4096 tokens and 256 sequences a step: batches of 8-token prompts never reach
        # either cap at these loads (mean batch about 3).
        serving={"max_num_batched_tokens": 4096},
        workload={"arrivals": {"process": "poisson", "rate": x / STEP},
                  "lengths": {"prompt": {"dist": "fixed", "value": 8},
                              "output": {"dist": "fixed", "value": 1}},
                  "num_requests": n, "seed": seed},
    )
    return simulate(sc)


@pytest.mark.parametrize("x", [1.0, 3.0])
def test_gated_batch_service_matches_its_closed_form(x: float) -> None:
    """A step of D seconds serves every request waiting when it starts.

    With x = λD: a step is followed at once by another if anyone arrived during it
    (probability 1 − e^−x), else by an idle spell of mean 1/λ; so the server is busy a
    fraction β = D / (D + e^−x / λ) = 1 / (1 + e^−x / x) of the time. By PASTA an arrival
    finds it busy with probability β, and then waits the rest of a D-long step, uniform
    on (0, D); idle, it starts at once. Mean wait: β·D/2. Steps start at rate β/D, so the
    mean batch is λD/β = x + e^−x.
    """
    res = gated(x, 40000, seed=11)
    beta = 1 / (1 + math.exp(-x) / x)
    wait = per_request(res)["queueing"]
    # Standard error of one 40,000-request run, from 8 seeds: 0.46% of the mean wait at
    # x = 1, 0.27% at x = 3; of the mean batch 0.19% and 0.34%. 2.5% is over 5 of them.
    assert np.mean(wait) == pytest.approx(beta * STEP / 2, rel=0.025)
    assert summarize(res)["batch"]["mean_seqs"] == pytest.approx(x + math.exp(-x), rel=0.025)
    # Every step takes D, so TTFT is the wait plus D for every request.
    np.testing.assert_allclose(per_request(res)["ttft"], wait + STEP, rtol=0, atol=1e-9)


def test_decode_only_batch_follows_its_closed_form() -> None:
    """N equal requests arriving together: one prefill, then o − 1 decode steps of all N.

    Linear cost s + a·new + c·context + q·seqs. The prefill costs s + N(aP + q); decode
    step k (k = 1 .. o − 1) has N sequences at context P + k − 1 each, so it costs
    s + N(a + q) + cN(P + k − 1), and all N finish together at
    T = s + N(aP + q) + (o − 1)(s + N(a + q)) + cN((o − 1)P + (o − 1)(o − 2)/2).
    """
    s, a, c, q = 0.01, 0.001, 1e-5, 2e-4
    big_n, p, o = 64, 32, 200
    sc = tiny_scenario(cost={"linear": {"step_s": s, "per_new_token_s": a,
                                        "per_context_token_s": c, "per_seq_s": q}},
                       serving={"max_num_batched_tokens": 4096})
    res = run_requests(sc, [0.0] * big_n, [p] * big_n, [o] * big_n, log_steps=False)
    prefill = s + big_n * (a * p + q)  # 0.01 + 64 x 0.0322 = 2.0708 s
    decodes = ((o - 1) * (s + big_n * (a + q))
               + c * big_n * ((o - 1) * p + (o - 1) * (o - 2) / 2))
    np.testing.assert_allclose(res.first_token, prefill, rtol=1e-12)
    np.testing.assert_allclose(res.finish, prefill + decodes, rtol=1e-9)
    assert summarize(res)["batch"]["iterations"] == o  # 1 prefill + o - 1 decodes
    # Requests with different lengths leave the batch as they finish. P = 8, outputs 2,
    # 4 and 5; s, a, c, q = 10 ms, 1 ms, 0.1 ms, 2 ms:
    # prefill 10 + 24 + 6 = 40 ms; decode 1: 3 seqs at context 8 each, 10 + 3 + 2.4 + 6 =
    # 21.4 ms (61.4: the first finishes); decode 2: 2 seqs at context 9, 10 + 2 + 1.8 + 4
    # = 17.8 ms (79.2); decode 3: 2 at 10, 18 ms (97.2: the second finishes); decode 4:
    # 1 at 11, 10 + 1 + 1.1 + 2 = 14.1 ms (111.3).
    sc = tiny_scenario(cost={"linear": {"step_s": 0.01, "per_new_token_s": 0.001,
                                        "per_context_token_s": 1e-4, "per_seq_s": 0.002}})
    # Fused decode runs and step-by-step decoding must both give these times.
    res = run_both_ways(sc, [0.0] * 3, [8] * 3, [2, 4, 5])
    np.testing.assert_allclose(res.finish, [0.0614, 0.0972, 0.1113], rtol=0, atol=1e-12)
    assert [round(e - b, 9) for _, b, e, _ in res.step_log] == [0.04, 0.0214, 0.0178,
                                                                0.018, 0.0141]


def test_littles_law_holds_for_the_requests_in_service() -> None:
    """L = λW for the requests holding KV: prompt 2, 3 output tokens (context 4 at most)
    keeps each request in exactly one 4-token block from admission to finish, so the
    mean KV blocks held is the mean number in service, L; W is the mean time from
    admission to finish; λ the configured arrival rate."""
    lam = 60.0
    sc = tiny_scenario(
        serving={"policy": "chunked"},
        workload={"arrivals": {"process": "poisson", "rate": lam},
                  "lengths": {"prompt": {"dist": "fixed", "value": 2},
                              "output": {"dist": "fixed", "value": 3}},
                  "num_requests": 20000, "seed": 12},
    )
    res = simulate(sc)
    summ = summarize(res)
    blocks = summ["kv"]["blocks_per_replica"][0]
    held = summ["kv"]["mean_utilization"] * blocks  # time-average blocks = requests in service
    in_service = res.finish - res.first_sched
    # On the sample path the identity is exact: the area under the number in service over
    # the span equals the sum of the times in service (span: first arrival to last finish).
    assert held * summ["span_s"] == pytest.approx(in_service.sum(), rel=1e-9)
    # Against the configured rate, L = λW within sampling error: one 20,000-request run's
    # L / (λW) has a standard error of 0.69% (8 seeds); 3% is over 4 of them.
    assert held == pytest.approx(lam * in_service.mean(), rel=0.03)
    assert held > 1.5  # a batched regime (about 2.65 in service), not one at a time
