"""Closed-loop clients (workload.concurrency): send times worked out by hand, queueing
closed forms, every way a request ends, requests not sent, bad input.

Cost as in tests/test_engine_handworked.py: 10 ms per step + 1 ms per new token
(linear), block size 4, on the tiny model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.config.scenario import from_dict
from sim.core.engine import Engine, build_cost, simulate
from sim.core.request import FINISHED, REJECTED, TIMED_OUT, UNFINISHED
from sim.errors import ServesimError
from sim.report.metrics import per_request
from sim.report.outputs import requests_csv, summary_json
from sim.report.printed import table
from sim.report.summary import summarize
from sim.workload.requests import Requests

ROOT = Path(__file__).resolve().parent.parent


def fixed(prompt: int, output: int) -> dict[str, Any]:
    return {"prompt": {"dist": "fixed", "value": prompt},
            "output": {"dist": "fixed", "value": output}}


def closed(workload: dict[str, Any], **sections: Any) -> Any:
    """The tiny scenario with ``workload`` (a None value removes a key) in place of its
    open-loop one."""
    raw: dict[str, Any] = {
        "model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
        **sections,
        "serving": {"policy": "continuous", "block_size": 4, "max_num_batched_tokens": 256,
                    "watermark": 0.0, **sections.get("serving", {})},
    }
    wl = {"lengths": fixed(8, 2), **workload}
    raw["workload"] = {k: v for k, v in wl.items() if v is not None}
    return from_dict(raw)


def paced_file(tmp_path: Path, rate: float) -> Path:
    """A scenario file: one client, 200 requests due at ``rate`` req/s, 29 ms each."""
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps({
        "model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
        "serving": {"policy": "continuous", "block_size": 4, "watermark": 0.0},
        "workload": {"concurrency": 1, "arrivals": {"process": "constant", "rate": rate},
                     "num_requests": 200, "lengths": fixed(8, 2)}}))
    return path


def run_lengths(sc: Any, prompts: list[int], outputs: list[int]) -> Any:
    """Run ``sc``'s clients over exactly these requests (arrival times ignored)."""
    n = len(prompts)
    req = Requests(np.full(n, np.inf), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    return Engine(sc, req, build_cost(sc), np.random.default_rng(0), True).run()


def steps(res: Any) -> list[tuple[Any, ...]]:
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def test_each_end_sends_the_next_request_at_its_time() -> None:
    # Two clients send 0 and 1 at t = 0: prefilled together (10 + 16 ms), two decodes of
    # 12 ms. Request 0 (3 tokens) ends at 50 ms and its client sends request 2 at once;
    # the decision at 50 ms does not see it (sent at that instant, it is routed after
    # every decision of the instant): request 1 decodes alone (11 ms), request 2 is
    # prefilled at 61 ms (18 ms), then 1 and 2 decode together and both end at 91 ms.
    # Request 3, the last, is sent then; the replica is idle and starts it at once.
    sc = closed({"concurrency": 2, "num_requests": 4})
    res = run_lengths(sc, [8, 8, 8, 8], [3, 5, 2, 2])
    assert steps(res) == [
        (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0))),
        (0, 0.026, 0.038, ((0, 1, 8), (1, 1, 8))),
        (0, 0.038, 0.05, ((0, 1, 9), (1, 1, 9))),
        (0, 0.05, 0.061, ((1, 1, 10),)),
        (0, 0.061, 0.079, ((2, 8, 0),)),
        (0, 0.079, 0.091, ((1, 1, 11), (2, 1, 8))),
        (0, 0.091, 0.109, ((3, 8, 0),)),
        (0, 0.109, 0.12, ((3, 1, 8),)),
    ]
    arr = res.requests.arrival_s
    assert arr[0] == arr[1] == 0.0
    # Send times are the earlier requests' finish times, exactly.
    assert arr[2] == res.finish[0]
    assert arr[3] == res.finish[1] == res.finish[2]
    np.testing.assert_allclose(res.finish, [0.05, 0.091, 0.091, 0.12], rtol=0, atol=1e-12)
    assert res.first_sched[3] == arr[3]
    assert (res.status == FINISHED).all()


def test_paced_clients_send_when_due_and_a_client_is_free() -> None:
    # One client; requests due at 0, 10 ms and 100 ms (vLLM's benchmark client with a
    # request rate and --max-concurrency 1). Each takes 18 + 11 ms. Request 1 is due
    # before request 0 ends, so it waits for the client (29 ms); request 2 is due after
    # request 1 ends (58 ms), so it waits for its time.
    sc = closed({"concurrency": 1, "num_requests": 3})
    req = Requests(np.array([0.0, 0.01, 0.1]), np.array([8, 8, 8], dtype=np.int64),
                   np.array([2, 2, 2], dtype=np.int64))
    res = Engine(sc, req, build_cost(sc), np.random.default_rng(0)).run()
    np.testing.assert_allclose(res.requests.arrival_s, [0.0, 0.029, 0.1], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.029, 0.058, 0.129], rtol=0, atol=1e-12)
    assert res.requests.arrival_s[1] == res.finish[0]
    # Without due times (+inf: a plain closed loop) each goes the moment the client frees.
    res = run_lengths(sc, [8, 8, 8], [2, 2, 2])
    np.testing.assert_allclose(res.requests.arrival_s, [0.0, 0.029, 0.058], rtol=0,
                               atol=1e-12)


def test_paced_scenario_draws_the_open_loop_requests_and_reports_the_wait() -> None:
    # workload.arrivals beside concurrency (vllm bench serve --request-rate 50
    # --max-concurrency 1): requests due at 0, 20 and 40 ms, each 29 ms alone, so the
    # second waits 9 ms for the client and the third 18 ms.
    sc = closed({"concurrency": 1, "num_requests": 3,
                 "arrivals": {"process": "constant", "rate": 50.0}})
    res = simulate(sc)
    np.testing.assert_allclose(res.requests.arrival_s, [0.0, 0.029, 0.058], rtol=0,
                               atol=1e-12)
    w = summarize(res)["workload"]
    assert w["paced"] is True and w["requests_held"] == 2 and w["requests_sent"] == 3
    assert w["client_wait_mean_s"] == pytest.approx(0.009)
    assert w["client_wait_max_s"] == pytest.approx(0.018)
    assert "paced clients: 2 requests waited for a free client past their due time " \
           "(mean 9.00 ms, max 18.0 ms" in table(summarize(res))
    # The requests are the open loop's of the same seed: its arrivals are their due times.
    wl = {"arrivals": {"process": "poisson", "rate": 5.0}, "num_requests": 50,
          "lengths": {"prompt": {"dist": "uniform", "low": 4, "high": 40},
                      "output": {"dist": "uniform", "low": 2, "high": 9}}}
    open_sc = closed(wl)  # no concurrency: the open loop
    from sim.workload.build import build_requests

    paced = build_requests(closed({"concurrency": 3, **wl}).workload, None,
                           np.random.default_rng(0))
    plain = build_requests(open_sc.workload, None, np.random.default_rng(0))
    np.testing.assert_array_equal(paced.arrival_s, plain.arrival_s)
    np.testing.assert_array_equal(paced.prompt_tokens, plain.prompt_tokens)
    np.testing.assert_array_equal(paced.output_tokens, plain.output_tokens)


def test_paced_clients_that_fall_behind_are_saturated() -> None:
    # One client, 29 ms a request (34.5 req/s at most). Due at 5 req/s it keeps up; at
    # 200 req/s the requests held at the client grow at 200 - 34.5 req/s.
    def run(rate: float) -> dict[str, Any]:
        sc = closed({"concurrency": 1, "num_requests": 200,
                     "arrivals": {"process": "constant", "rate": rate}})
        return summarize(simulate(sc))["saturation"]

    calm, behind = run(5.0), run(200.0)
    assert calm["saturated"] is False and calm["due_rps"] == pytest.approx(5.0)
    assert calm["clients_behind"] is False and behind["clients_behind"] is True
    assert abs(calm["client_backlog_growth_rps"]) < 0.05
    assert behind["saturated"] is True and behind["due_rps"] == pytest.approx(200.0)
    assert behind["client_backlog_growth_rps"] == pytest.approx(200.0 - 1 / 0.029, rel=0.02)
    # The engine's own queue never grows: the client holds the backlog.
    assert behind["queue_growth_rps"] < 0.05 * behind["offered_rps"]


@pytest.mark.parametrize("policy", ["continuous", "chunked", "orca", "static"])
def test_paced_clients_never_short_of_a_client_are_the_open_loop(policy: str) -> None:
    # As many clients as requests: none is ever held, so the run is the open loop's to
    # the bit (same requests, send times and every timestamp), frontend delays included.
    wl = {"arrivals": {"process": "gamma", "rate": 30.0, "cv": 3.0}, "num_requests": 300,
          "lengths": {"prompt": {"dist": "uniform", "low": 10, "high": 900},
                      "output": {"dist": "uniform", "low": 1, "high": 60}}, "seed": 3}
    base = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"}, "cost": "measured",
            "serving": {"policy": policy}}
    plain = simulate(from_dict({**base, "workload": wl}))
    paced = simulate(from_dict({**base, "workload": {**wl, "concurrency": 300}}))
    for name in ("first_sched", "first_token", "finish", "preemptions", "status"):
        np.testing.assert_array_equal(getattr(paced, name), getattr(plain, name))
    np.testing.assert_array_equal(paced.requests.arrival_s, plain.requests.arrival_s)
    assert summarize(paced)["workload"]["requests_held"] == 0


def test_reports_name_the_paced_clients_backlog(tmp_path: Path) -> None:
    from sim.cli import main

    path = paced_file(tmp_path, 200.0)
    out = tmp_path / "o"
    assert main(["simulate", str(path), "--out", str(out), "--no-plots", "--quiet"]) == 0
    assert main(["report", str(out), "--format", "md", "--out", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "saturated: the requests held at the clients grew by 167 req/s at 200 req/s due" \
        in text


def test_think_time_delays_each_next_request() -> None:
    # One client, think time 100 ms: prefill 18 ms + one decode of 11 ms, then a pause.
    sc = closed({"concurrency": 1, "num_requests": 3, "think_time_s": 0.1})
    res = run_lengths(sc, [8, 8, 8], [2, 2, 2])
    e2e = 0.018 + 0.011
    np.testing.assert_allclose(res.requests.arrival_s, [0.0, e2e + 0.1, 2 * e2e + 0.2],
                               rtol=0, atol=1e-12)
    assert res.requests.arrival_s[1] == res.finish[0] + 0.1
    assert res.requests.arrival_s[2] == res.finish[1] + 0.1
    np.testing.assert_allclose(per_request(res)["e2e"], [e2e] * 3, rtol=0, atol=1e-12)


def test_refused_requests_free_their_clients_at_once() -> None:
    # One sequence at a time and at most one request waiting. At t = 0 the three
    # clients' requests are routed in id order: 0 queues (the replica has not yet taken
    # it), 1 and 2 find the queue full. Their clients send 3 and 4 at once, routed after
    # the instant's decisions: 0 is running by then, so 3 queues and 4 is refused; 4's
    # client sends 5, refused too. 0 ends at 29 ms, 3 (scheduled before its deadline of
    # 40 ms) at 58 ms.
    sc = closed({"concurrency": 3, "num_requests": 6},
                serving={"max_num_seqs": 1}, admission={"max_waiting": 1, "timeout_s": 0.04})
    res = run_lengths(sc, [8] * 6, [2] * 6)
    assert res.status.tolist() == [FINISHED, REJECTED, REJECTED, FINISHED, REJECTED, REJECTED]
    assert set(res.reason[res.status == REJECTED]) == {"queue_full"}
    np.testing.assert_array_equal(res.requests.arrival_s, [0.0] * 6)
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.029, ((0, 1, 8),)),
        (0, 0.029, 0.047, ((3, 8, 0),)),
        (0, 0.047, 0.058, ((3, 1, 8),)),
    ]


def test_a_client_that_gives_up_sends_its_next_request_at_the_deadline() -> None:
    # One sequence at a time; request 0 (prompt 8, 20 tokens: 18 + 19 x 11 ms = 227 ms)
    # holds the replica; request 1 waits and is abandoned at its deadline, 50 ms; its
    # client sends request 2 at exactly 50 ms (not at the replica's next iteration
    # boundary, 51 ms), abandoned at 100 ms; request 3 follows, abandoned at 150 ms.
    sc = closed({"concurrency": 2, "num_requests": 4},
                serving={"max_num_seqs": 1}, admission={"timeout_s": 0.05})
    res = run_lengths(sc, [8, 8, 8, 8], [20, 2, 2, 2])
    assert res.status.tolist() == [FINISHED, TIMED_OUT, TIMED_OUT, TIMED_OUT]
    np.testing.assert_array_equal(res.requests.arrival_s, [0.0, 0.0, 0.05, 0.1])
    assert res.finish[0] == pytest.approx(0.018 + 19 * 0.011, abs=1e-12)


def test_closed_loop_throughput_matches_the_closed_forms() -> None:
    # One request at a time (max_num_seqs 1), a 100-token prompt and one output token:
    # a deterministic service D = 10 + 100 ms. N clients thinking Z seconds between
    # requests: unsaturated (N·D <= D + Z) each client cycles every D + Z, so the
    # throughput is N / (D + Z); saturated, the server finishes one request per D.
    # Little's law for the whole loop holds in both: N = X (R + Z), R the mean E2E.
    d = 0.01 + 100 * 0.001
    for n, z, expected in ((3, 1.0, 3 / (d + 1.0)), (8, 0.1, 1 / d)):
        sc = closed({"concurrency": n, "think_time_s": z, "num_requests": 600,
                     "lengths": fixed(100, 1)}, serving={"max_num_seqs": 1})
        res = simulate(sc)
        s = summarize(res)
        x = s["throughput"]["requests_per_s"]
        r = s["latency_s"]["e2e"]["mean"]
        assert x == pytest.approx(expected, rel=0.01)
        assert n == pytest.approx(x * (r + z), rel=0.01)
        if n == 8:  # saturated: each waits for the seven others, R = N·D - Z
            assert r == pytest.approx(n * d - z, rel=0.01)


def test_unsent_requests_are_reported_not_dropped() -> None:
    # One client, 10 requests of 29 ms each: the horizon at 0.1 s lets it send four
    # (at 0, 29, 58, 87 ms); the fourth is cut unfinished; six were never sent.
    sc = closed({"concurrency": 1, "num_requests": 10}, horizon_s=0.1)
    res = simulate(sc)
    assert len(res.requests) == 4
    assert res.status.tolist() == [FINISHED] * 3 + [UNFINISHED]
    s = summarize(res)
    assert s["workload"] == {"kind": "closed_loop", "concurrency": 1, "think_time_s": 0.0,
                             "requests_sent": 4, "requests_not_sent": 6}
    # The six never sent are not in the run's arrays: none is counted not_arrived.
    assert s["requests"]["total"] == 4 and s["requests"]["not_arrived"] == 0
    assert s["requests"]["unfinished"] == 1
    assert "closed loop: 1 client, think time 0 s; 4 requests sent, 6 not sent" in table(s)
    assert any("6 of 10 requests not sent" in x and "horizon_s" in x
               for x in s["workload_notes"])
    # duration_s stops the clients: nobody sends at or after 0.05 s.
    sc = closed({"concurrency": 2, "num_requests": 10, "duration_s": 0.05})
    res = simulate(sc)
    assert (res.requests.arrival_s < 0.05).all() and (res.status == FINISHED).all()
    s = summarize(res)
    assert s["workload"]["requests_not_sent"] == 10 - len(res.requests)
    assert any("duration_s" in x for x in s["workload_notes"])


def test_duration_alone_draws_requests_as_the_clients_need_them() -> None:
    # No num_requests: requests are drawn in chunks (sim/workload/closedloop.py CHUNK) until the
    # clients stop at duration_s: some 55 requests a second for 90 s, past one chunk.
    sc = closed({"concurrency": 4, "duration_s": 90.0,
                 "lengths": {"prompt": {"dist": "uniform", "low": 4, "high": 12},
                             "output": {"dist": "uniform", "low": 1, "high": 3}}})
    a, b = simulate(sc), simulate(sc)
    assert len(a.requests) > 4096
    assert requests_csv(a) == requests_csv(b)
    assert (a.requests.arrival_s < 90.0).all() and (a.status == FINISHED).all()
    assert summarize(a)["workload"]["requests_not_sent"] is None


def test_clients_refused_without_end_stop_with_an_error() -> None:
    # Every prompt exceeds the model's context: each request ends the moment it is sent,
    # so with no think time and only duration_s, time would never pass.
    sc = closed({"concurrency": 2, "duration_s": 10.0, "lengths": fixed(5000, 2)})
    with pytest.raises(ServesimError, match="without simulated time passing") as err:
        simulate(sc)
    assert "workload.concurrency" in str(err.value)
    # With num_requests the burst ends: all refused at t = 0.
    res = simulate(closed({"concurrency": 2, "num_requests": 50, "lengths": fixed(5000, 2)}))
    assert (res.status == REJECTED).all() and (res.requests.arrival_s == 0).all()


@pytest.mark.parametrize("extra", [
    {"replicas": 3, "router": "least_outstanding"},
    {"replicas": 2, "router": "round_robin", "policy": "disaggregated"},
])
def test_multi_replica_and_disaggregated_runs_are_deterministic(extra: dict[str, Any]) -> None:
    sections: dict[str, Any] = {"cluster": {"replicas": extra["replicas"],
                                            "router": extra["router"]}}
    if "policy" in extra:
        sections["serving"] = {"policy": extra["policy"]}
    sc = closed({"concurrency": 6, "num_requests": 60, "seed": 3,
                 "lengths": {"prompt": {"dist": "uniform", "low": 4, "high": 60},
                             "output": {"dist": "uniform", "low": 1, "high": 30}}},
                **sections)
    a, b = simulate(sc), simulate(sc)
    assert requests_csv(a) == requests_csv(b)
    assert summary_json(summarize(a)) == summary_json(summarize(b))
    assert (a.status == FINISHED).all() and len(a.requests) == 60
    # At most six in flight at any time: sends never run ahead of ends.
    ends = np.sort(a.finish)
    np.testing.assert_array_equal(a.requests.arrival_s[6:], ends[:54])


def test_shipped_closed_loop_scenario_and_its_summary(tmp_path: Path) -> None:
    from sim.config import scenario

    sc = scenario.load(ROOT / "scenarios" / "closed-loop.yaml")
    res = simulate(sc)
    s = summarize(res)
    assert s["workload"]["concurrency"] == 32 and s["requests"]["finished"] == 320
    assert "closed loop: 32 clients" in table(s)
    # Little's law over the loop: 32 = throughput x mean E2E (no think time).
    x = s["throughput"]["requests_per_s"]
    assert x * s["latency_s"]["e2e"]["mean"] == pytest.approx(32, rel=0.02)
    saved = json.loads(summary_json(s))
    assert saved["workload"]["kind"] == "closed_loop"


def test_classes_and_traces_feed_a_closed_loop(tmp_path: Path) -> None:
    sc = closed({"concurrency": 3, "num_requests": 40, "lengths": None,
                 "classes": {"short": {"weight": 3, "lengths": fixed(8, 2)},
                             "long": {"weight": 1, "lengths": fixed(40, 6)}}})
    res = simulate(sc)
    s = summarize(res)
    assert set(s["classes"]) == {"short", "long"}
    assert sum(c["requests"]["total"] for c in s["classes"].values()) == 40
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n5.0,8,2\n9.0,16,3\n9.5,12,2\n")
    sc = closed({"concurrency": 2, "lengths": None, "trace": {"path": str(trace)}})
    res = simulate(sc)
    assert res.requests.prompt_tokens.tolist() == [8, 16, 12]
    assert res.requests.arrival_s[0] == 0.0
    assert any("arrival times are ignored" in x for x in res.requests.notes)


@pytest.mark.parametrize(("workload", "key"), [
    ({"concurrency": 2, "lengths": None, "trace": {"path": "t.csv"},
      "arrivals": {"process": "poisson", "rate": 1.0}}, "workload.arrivals"),
    ({"concurrency": 2, "num_requests": None, "arrivals": {"process": "poisson"},
      "stages": [{"rate": 1.0, "duration_s": 10.0}]}, "workload.stages"),
    ({"concurrency": 0}, "workload.concurrency"),
    ({"concurrency": 2, "think_time_s": -1.0}, "workload.think_time_s"),
    ({"think_time_s": 1.0, "arrivals": {"process": "poisson", "rate": 1.0}},
     "workload.think_time_s"),
    ({"concurrency": 2, "num_requests": None}, "workload.num_requests"),
    ({"concurrency": 2, "lengths": None}, "workload.lengths"),
    ({"concurrency": 2, "lengths": None,
      "classes": {"a": {"arrivals": {"process": "poisson", "rate": 1.0},
                        "lengths": fixed(8, 2)}}}, "workload.classes.a.arrivals"),
    ({"concurrency": 2, "lengths": None, "trace": {"path": "t.csv", "time_scale": 0.5}},
     "workload.trace.time_scale"),
])
def test_bad_closed_loop_input_is_one_line_naming_the_key(workload: dict[str, Any],
                                                          key: str) -> None:
    wl = {"num_requests": 10, "lengths": fixed(8, 2), **workload}
    raw = {"model": "tiny", "workload": {k: v for k, v in wl.items() if v is not None}}
    with pytest.raises(ServesimError) as err:
        from_dict(raw, "s.yaml")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"s.yaml: {key}: "), text


def test_random_failures_need_an_end() -> None:
    raw = {"model": "tiny", "workload": {"concurrency": 2, "num_requests": 5,
                                         "lengths": fixed(8, 2)},
           "faults": {"failures_per_hour": 1.0}}
    with pytest.raises(ServesimError, match="faults.failures_per_hour"):
        from_dict(raw, "s.yaml")
    from_dict({**raw, "horizon_s": 100.0})  # an end: accepted


def test_rate_sweeps_and_capacity_refuse_a_closed_loop(tmp_path: Path) -> None:
    from sim.study import capacitycli, sweepcli

    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"model": "tiny", "workload": {
        "concurrency": 2, "num_requests": 5, "lengths": fixed(8, 2)}}))
    with pytest.raises(ServesimError, match="closed loop") as err:
        sweepcli.main([str(path), "--rates", "1,2", "--quiet", "--out", str(tmp_path / "o")])
    assert "workload.concurrency" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ServesimError, match="closed loop"):
        capacitycli.main([str(path), "--slo", "ttft_p99=0.5", "--quiet",
                       "--out", str(tmp_path / "c")])


def test_a_sweep_varies_paced_clients_rate_and_capacity_refuses_them(tmp_path: Path) -> None:
    # One client at 29 ms a request: it keeps up with 5 req/s and not with 200 (the
    # engine's queue stays empty either way; the backlog is the client's).
    from sim.study import capacitycli, sweepcli

    path = paced_file(tmp_path, 1.0)
    out = tmp_path / "s"
    assert sweepcli.main([str(path), "--rates", "5,200", "--quiet", "--no-plots",
                          "--out", str(out)]) == 0
    rows = (out / "sweep.csv").read_text().splitlines()
    head = rows[0].split(",")
    sat = [r.split(",")[head.index("saturated")] for r in rows[1:]]
    served = [float(r.split(",")[head.index("throughput_rps")]) for r in rows[1:]]
    assert sat == ["0.0", "1.0"]
    assert served[1] == pytest.approx(1 / 0.029)
    with pytest.raises(ServesimError, match="paced clients cap the requests in flight at 1 "
                                            "for the whole cluster") as err:
        capacitycli.main([str(path), "--slo", "ttft_p99=0.5", "--quiet",
                          "--out", str(tmp_path / "c")])
    assert err.value.where == "workload.concurrency"


def test_rate_sweeps_refuse_classes_whose_arrivals_are_their_own(tmp_path: Path) -> None:
    # No shared workload.arrivals to vary: said so, not "arrivals.process: required".
    from sim.study import capacitycli, sweepcli

    own = {"arrivals": {"process": "poisson", "rate": 5}, "lengths": fixed(8, 2)}
    path = tmp_path / "k.yaml"
    path.write_text(json.dumps({"model": "tiny", "workload": {
        "num_requests": 20, "classes": {"a": own, "b": own}}}))
    for run, args in ((sweepcli.main, ["--rates", "1,2"]),
                      (capacitycli.main, ["--slo", "ttft_p99=0.5"])):
        with pytest.raises(ServesimError) as err:
            run([str(path), *args, "--quiet", "--out", str(tmp_path / "o")])
        assert err.value.where == "workload.classes.a.arrivals"
        assert "class 'a' has an arrival process of its own" in err.value.message


def test_more_clients_than_requests_send_only_the_requests() -> None:
    # A billion clients and 5 requests: 5 clients send, the others never do. The memory
    # estimate counts the requests (it had counted a billion clients' and refused the run
    # as needing 931 GiB), and the clients stop being started once every request is out.
    from sim.core.budget import expected_requests

    sc = closed({"concurrency": 10**9, "num_requests": 5})
    assert expected_requests(sc) == 5
    res = simulate(closed({"concurrency": 10**6, "num_requests": 5}))
    assert (res.status == FINISHED).all() and len(res.status) == 5
    assert res.requests.arrival_s.tolist() == [0.0] * 5  # all sent at once
