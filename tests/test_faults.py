"""Replica faults: outages, lost requests, retries through the router, failure rates.

Cost: 10 ms per step + 1 ms per new token (linear), block size 4 (tests/conftest.py).
Step log entries: (replica, start_s, end_s, ((request id, new tokens, context), ...)).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import assert_equivalent, lazy_and_eager, tiny_scenario
from conftest import run_both_ways as both
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.faults import FaultsConfig, OutageConfig, outage_plan
from sim.core.request import FAILED, FINISHED, REJECTED, STATUS_NAMES, TIMED_OUT, UNFINISHED
from sim.errors import ServesimError
from sim.policies.registry import POLICIES
from sim.report.summary import summarize
from sim.workload.requests import Requests


def steps(res: Any) -> list[tuple[Any, ...]]:
    return sorted((s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log)


OUTAGE = {"outages": [{"replica": 0, "at_s": 0.02, "duration_s": 1.0}], "detection_s": 0.05}


def test_outage_loses_in_flight_and_misrouted_requests_which_retry_elsewhere() -> None:
    # Two replicas, round robin. A (0 s, prompt 20) prefills on replica 0 from 0 to 30 ms,
    # but replica 0 fails at 20 ms: A is lost. B (10 ms) runs on replica 1. C (40 ms) is
    # sent to replica 0, which the router still trusts until 70 ms: lost too. At 70 ms
    # both retry through the router, which now sees only replica 1: they prefill together
    # (28 tokens: 38 ms), then decode. D (1.5 s) finds replica 0 repaired (at 1.02 s).
    sc = tiny_scenario(cluster={"replicas": 2}, faults=OUTAGE)
    res = both(sc, [0.0, 0.01, 0.04, 1.5], [20, 10, 8, 8], [3, 2, 2, 2])
    assert steps(res) == [
        (0, 0.0, 0.03, ((0, 20, 0),)),  # cut short at 20 ms by the fault
        (0, 1.5, 1.518, ((3, 8, 0),)),
        (0, 1.518, 1.529, ((3, 1, 8),)),
        (1, 0.01, 0.03, ((1, 10, 0),)),
        (1, 0.03, 0.041, ((1, 1, 10),)),
        (1, 0.07, 0.108, ((0, 20, 0), (2, 8, 0))),
        (1, 0.108, 0.12, ((0, 1, 20), (2, 1, 8))),
        (1, 0.12, 0.131, ((0, 1, 21),)),
    ]
    assert (res.status == FINISHED).all()
    assert res.retries.tolist() == [1, 0, 1, 0]
    assert res.replica.tolist() == [1, 1, 1, 0]
    # Latencies count from the original arrival; times are those of the attempt that ran.
    np.testing.assert_allclose(res.first_sched, [0.07, 0.01, 0.07, 1.5], atol=1e-12)
    np.testing.assert_allclose(res.first_token, [0.108, 0.03, 0.108, 1.518], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.131, 0.041, 0.12, 1.529], atol=1e-12)
    # Replica 0 was busy 20 ms of A's cut prefill, then 18 + 11 ms for D.
    assert res.replica_stats[0].busy_s == pytest.approx(0.049, abs=1e-12)
    f = summarize(res)["faults"]
    assert f["outages"] == 1 and f["downtime_s"] == pytest.approx(1.0)
    assert f["requests_lost"] == 2 and f["requests_retried"] == 2 and f["requests_failed"] == 0
    assert f["latency_s"]["affected"]["e2e"]["max"] == pytest.approx(0.131)
    assert f["latency_s"]["unaffected"]["e2e"]["max"] == pytest.approx(0.031)
    # A planned outage after the last request finished (at 1.529 s) took nothing down:
    # not counted, and downtime is that within the run's span.
    late = {**OUTAGE, "outages": [*OUTAGE["outages"],
                                  {"replica": 1, "at_s": 5.0, "duration_s": 300.0}]}
    res = both(tiny_scenario(cluster={"replicas": 2}, faults=late),
               [0.0, 0.01, 0.04, 1.5], [20, 10, 8, 8], [3, 2, 2, 2])
    s = summarize(res)
    assert s["span_s"] == pytest.approx(1.529)
    assert s["faults"]["outages"] == 1 and s["faults"]["downtime_s"] == pytest.approx(1.0)


def test_on_failure_fail_ends_lost_requests_failed() -> None:
    sc = tiny_scenario(cluster={"replicas": 2}, faults={**OUTAGE, "on_failure": "fail"})
    res = both(sc, [0.0, 0.01, 0.04, 1.5], [20, 10, 8, 8], [3, 2, 2, 2])
    assert res.status.tolist() == [FAILED, FINISHED, FAILED, FINISHED]
    assert res.reason.tolist() == ["replica_failure", "", "replica_failure", ""]
    s = summarize(res)
    assert s["requests"]["failed"] == 2
    assert s["throughput"]["slo_attainment"] == pytest.approx(0.5)


def test_the_span_reaches_the_last_failure() -> None:
    # A (prompt 20) and B (prompt 8, 2 tokens) prefill together (28 tokens: 0-38 ms) and
    # decode together (38-50 ms: B's last token). A's next decode (50-61 ms) is cut at
    # 55 ms by the outage, which fails it. The replica was busy 55 ms; the span had ended
    # at B's finish (50 ms), giving a busy share of 1.1, and the outage, after that end,
    # was not counted although it failed A.
    sc = tiny_scenario(faults={"outages": [{"replica": 0, "at_s": 0.055, "duration_s": 1.0}],
                               "on_failure": "fail"})
    res = both(sc, [0.0, 0.0], [20, 8], [30, 2])
    assert res.status.tolist() == [FAILED, FINISHED]
    s = summarize(res)
    assert s["span_s"] == pytest.approx(0.055, abs=1e-12)
    assert s["busy_fraction"] == pytest.approx(1.0, abs=1e-12)
    assert s["faults"]["outages"] == 1 and s["faults"]["downtime_s"] == 0.0
    assert s["faults"]["requests_failed"] == 1


def test_retries_are_bounded_then_fail() -> None:
    # A is lost on replica 0 at 20 ms and retried at once (no detection delay) on
    # replica 1, whose prefill of it ends at 50 ms: exactly when replica 1 fails. The
    # iteration ending at the fault's instant completes first (its first token is out),
    # then A is lost again; with max_retries 1 it fails, its first token struck out.
    outages = [{"replica": 0, "at_s": 0.02, "duration_s": 1.0},
               {"replica": 1, "at_s": 0.05, "duration_s": 1.0}]
    sc = tiny_scenario(cluster={"replicas": 2},
                       faults={"outages": outages, "detection_s": 0.0, "max_retries": 1})
    res = both(sc, [0.0], [20], [30])
    assert steps(res) == [
        (0, 0.0, 0.03, ((0, 20, 0),)),
        (1, 0.02, 0.05, ((0, 20, 0),)),
        (1, 0.05, 0.061, ((0, 1, 20),)),  # cut at once by the fault
    ]
    assert res.status.tolist() == [FAILED] and res.retries.tolist() == [1]
    assert np.isnan(res.first_token[0]) and np.isnan(res.first_sched[0])
    assert summarize(res)["faults"]["requests_lost"] == 2


def test_lone_replica_down_refuses_arrivals_once_detected() -> None:
    outages = [{"replica": 0, "at_s": 0.02, "duration_s": 0.1}]
    sc = tiny_scenario(faults={"outages": outages, "detection_s": 0.03, "max_retries": 1})
    res = both(sc, [0.0, 0.03, 0.06, 0.2], [20, 8, 8, 8], [3, 2, 2, 2])
    # A (lost at 20 ms) and B (sent to the failed replica at 30 ms) retry at 50 ms: no
    # replica is known up, so they fail; C, a new arrival at 60 ms, is refused. D
    # (200 ms) runs.
    assert [STATUS_NAMES[s] for s in res.status.tolist()] == [
        "failed", "failed", "rejected", "finished"]
    assert set(res.reason.tolist()[:3]) == {"no_replica_up"}
    assert res.retries.tolist() == [1, 1, 0, 0]
    # Only C was refused; A and B were lost to the outage (their reason reads the same).
    assert summarize(res)["saturation"]["refused_fraction"] == pytest.approx(0.25)


def test_retry_after_the_client_deadline_times_out() -> None:
    sc = tiny_scenario(cluster={"replicas": 2}, faults=OUTAGE,
                       admission={"timeout_s": 0.06})
    res = both(sc, [0.0, 0.01, 0.04], [20, 10, 8], [3, 2, 2])
    # A's retry comes at 70 ms, after its deadline (60 ms); C's deadline is 100 ms.
    assert res.status.tolist() == [TIMED_OUT, FINISHED, FINISHED]


def test_failure_rate_plan_is_seeded_and_per_replica() -> None:
    cfg = FaultsConfig(failures_per_hour=3600.0, repair_s=0.5,
                       outages=(OutageConfig(replica=1, at_s=2.0, duration_s=1.0),))
    seed = np.random.SeedSequence(7)
    two = outage_plan(cfg, 2, 20.0, seed)
    three = outage_plan(cfg, 3, 20.0, np.random.SeedSequence(7))
    assert two == three[:2]  # a third replica leaves the others' failures alone
    for ws in three:
        assert ws and all(d < 20.0 and u > d for d, u in ws)
        assert all(a[1] < b[0] for a, b in zip(ws, ws[1:], strict=False))  # disjoint
    assert any(d <= 2.0 < u for d, u in two[1])  # the planned one is merged in
    assert outage_plan(cfg, 2, 20.0, np.random.SeedSequence(8)) != two


def test_outage_of_a_missing_replica_is_a_load_error() -> None:
    with pytest.raises(ServesimError) as e:
        tiny_scenario(cluster={"replicas": 2},
                      faults={"outages": [{"replica": 2, "at_s": 1, "duration_s": 1}]})
    text = str(e.value)
    assert "\n" not in text and "faults.outages[0].replica" in text and "2" in text


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(POLICIES)), st.integers(1, 3),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.sampled_from(["retry", "fail"]), st.floats(0, 0.05), st.one_of(
           st.none(), st.floats(0.01, 0.3)), st.one_of(st.none(), st.integers(1, 4)))
def test_fuzzed_faults_and_admission_keep_lazy_decodes_exact_and_every_request_counted(
        policy: str, replicas: int, rows: list[tuple[float, int, int]], on_failure: str,
        detection: float, timeout: float | None, max_waiting: int | None) -> None:
    rows = sorted(rows)
    sc = tiny_scenario(
        serving={"policy": policy, "num_kv_blocks": 40, "max_num_seqs": 4},
        cluster={"replicas": replicas, "router": "least_outstanding"},
        faults={"failures_per_hour": 36000.0, "repair_s": 0.03, "detection_s": detection,
                "on_failure": on_failure,
                "outages": [{"replica": 0, "at_s": 0.05, "duration_s": 0.04}]},
        admission={"timeout_s": timeout, "max_waiting": max_waiting},
    )
    res = both(sc, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    assert set(res.status.tolist()) <= {FINISHED, REJECTED, TIMED_OUT, FAILED, UNFINISHED}
    assert UNFINISHED not in res.status.tolist()  # no horizon: everything ends
    done = res.status == FINISHED
    arr = np.array([r[0] for r in rows])
    assert (arr[done] <= res.first_sched[done]).all()
    assert (res.first_sched[done] <= res.first_token[done]).all()
    assert (res.first_token[done] <= res.finish[done]).all()
    assert all(bool(res.reason[i]) == (res.status[i] != FINISHED) for i in range(len(rows)))


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "chunked"]), st.integers(1, 3), st.integers(6, 40),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.sampled_from(["retry", "fail"]), st.integers(1, 3), st.floats(0.1, 0.9))
def test_fuzzed_faults_with_speculation_keep_lazy_decodes_exact_down_to_the_summary(
        policy: str, replicas: int, blocks: int, rows: list[tuple[float, int, int]],
        on_failure: str, k: int, rate: float) -> None:
    # Replicas that crash while their speculating decode sets run, empty or not: lazy
    # and eager runs must agree in every log, record and summary figure (verify counts,
    # KV use), not only in the requests' timings.
    rows = sorted(rows)
    sc = tiny_scenario(
        serving={"policy": policy, "num_kv_blocks": blocks, "max_num_seqs": 4,
                 "speculative": {"method": "ngram", "num_tokens": k,
                                 "acceptance": {"rate": rate}}},
        cluster={"replicas": replicas, "router": "round_robin"},
        faults={"failures_per_hour": 36000.0, "repair_s": 0.03, "detection_s": 0.01,
                "on_failure": on_failure,
                "outages": [{"replica": 0, "at_s": 0.05, "duration_s": 0.04}]},
    )
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)


def test_reliability_table_script_runs_a_case_end_to_end() -> None:
    # docs/scripts/reliability.py makes docs/reliability.md's table: its child program
    # (one case, run as the table runs it) must still import and run, and account for
    # every request of the shipped N+1 scenario.
    import json
    import subprocess
    import sys
    from pathlib import Path

    from conftest import load_script

    root = Path(__file__).resolve().parents[1]
    script = load_script(root / "docs" / "scripts" / "reliability.py")
    out = subprocess.run([sys.executable, "-c", script.CHILD, "faults-n-plus-1.yaml"],
                         capture_output=True, text=True, cwd=root, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    rq, f = s["requests"], s["faults"]
    assert rq["finished"] == rq["total"] > 0
    assert f["outages"] == 2 and f["requests_lost"] == f["requests_retried"] > 0


def test_a_failure_rate_that_would_draw_millions_of_outages_is_one_error() -> None:
    # 10^12 failures an hour, repaired in a nanosecond: close to a billion outages over a run of a
    # few seconds, which filled the memory before the run began. The count is bounded
    # before any is drawn, and the error names the key, the figures and the unit.
    from sim.core.engine import simulate

    sc = tiny_scenario(faults={"failures_per_hour": 1e12, "repair_s": 1e-9},
                       workload={"arrivals": {"process": "constant", "rate": 1.0},
                                 "num_requests": 5})
    with pytest.raises(ServesimError) as exc:
        simulate(sc)
    assert exc.value.where == "faults.failures_per_hour"
    # 4 s / (3.6 ns up + 1 ns repair) = 8.7e8 outages.
    assert "over the run's 4 s would fail about 8.7e+08 times, more than 1,000,000" in \
        exc.value.message
    # A rate a fault study uses draws its outages as before.
    plan = outage_plan(FaultsConfig(failures_per_hour=2.0, repair_s=60.0), 2, 3600.0,
                       np.random.SeedSequence(0))
    assert all(all(up - down == 60.0 for down, up in ws) for ws in plan)


def test_a_horizon_past_the_run_draws_no_more_failures() -> None:
    """Random failures are drawn while the workload sends, cut at a horizon that comes
    first. A horizon the run never reached had drawn failures through the drain too, so a
    sweep's point (whose horizon only bounds an overloaded run) differed from simulate's
    run of the same scenario."""
    from sim.core.engine import simulate

    sections: dict[str, Any] = {
        "cluster": {"replicas": 2, "router": "round_robin"},
        "faults": {"failures_per_hour": 1800.0, "repair_s": 0.5, "detection_s": 0.01},
        "workload": {"arrivals": {"process": "constant", "rate": 10.0}, "num_requests": 40,
                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                 "output": {"dist": "fixed", "value": 400}}}}
    plain = simulate(tiny_scenario(**sections))
    far = simulate(tiny_scenario(**sections, horizon_s=1000.0))
    last = float(plain.requests.arrival_s[-1])
    assert plain.outages and all(down < last for _, down, _ in plain.outages)
    assert far.outages == plain.outages
    np.testing.assert_array_equal(far.finish, plain.finish)
    cut = simulate(tiny_scenario(**sections, horizon_s=last / 2))
    assert cut.outages == tuple(o for o in plain.outages if o[1] < last / 2)
