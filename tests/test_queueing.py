"""Queueing-theory checks: the engine against closed forms.

With max_num_seqs = 1 and one output token, each request is one prefill of fixed
length: a deterministic service of D seconds. Poisson arrivals make it an M/D/1 queue:
mean wait Wq = λD² / (2(1 − ρ)), ρ = λD, and a fraction 1 − ρ of requests never wait.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import tiny_scenario

from sim.engine import simulate
from sim.metrics import per_request, summarize

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
