"""vLLM's async scheduling seen from a request (sim/core/asyncgate.py): a request that
reaches a busy replica joins the iteration after next; one that reaches an idle replica,
or a replica with nothing else to run, is scheduled at once.

Hand-worked on the tiny model, policy chunked (vLLM v1: decodes first, prompts fill the
rest of a 256-token budget), 4-token blocks, with a linear cost of 10 ms a step + 1 ms a
new token whose host work is declared zero, so that async scheduling's overlap leaves
every step's price as it is and only the admission moves (tests/conftest.py).
Step log entries: (replica, start_s, end_s, ((request id, new tokens, context), ...)).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
from conftest import run_requests, tiny_scenario

from sim.core.engine import Engine
from sim.core.request import FAILED, FINISHED, REJECTED
from sim.cost.models import LinearCost, build_cost
from sim.cost.overlap import HostOverlap, late_intake
from sim.workload.requests import Requests


class NoHostWork(LinearCost):
    """The linear cost, saying none of its seconds are host work."""

    def host_terms(self) -> tuple[float, float, float, int]:
        return 0.0, 0.0, 0.0, 0


class TensorRTLike(NoHostWork):
    """The same cost, seen as a measured TensorRT-LLM profile (its source's framework)."""

    meta: ClassVar[dict[str, Any]] = {"source": {"framework": "trtllm"}}


def run(arrivals: list[float], prompts: list[int], outputs: list[int], overlap: bool,
        kind: type[NoHostWork] = NoHostWork, **sections: Any) -> Any:
    sc = tiny_scenario(serving={"policy": "chunked", **sections.pop("serving", {})},
                       **sections)
    linear = build_cost(sc)
    cost: Any = kind(linear.step_s, linear.per_new_token_s)
    if overlap:
        cost = HostOverlap(cost)
    return run_requests(sc, arrivals, prompts, outputs, cost=cost)


def steps(res: Any) -> list[tuple[Any, ...]]:
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def test_a_request_reaching_a_busy_replica_joins_the_iteration_after_next() -> None:
    # A (0 s, 8 + 10 tokens) reaches an idle replica and is prefilled at once, 0-18 ms;
    # it decodes 18-29 ms and 29-40 ms. B (8 + 2) arrives at 25 ms, during A's first
    # decode: the step after it (29-40 ms) was scheduled before B came, so B is read
    # when that decode ends (29 ms) and prefills in the step after next, 40-59 ms,
    # beside A's third decode. Scheduled as soon as it is read, B prefills at 29 ms.
    arrivals, prompts, outputs = [0.0, 0.025], [8, 8], [10, 2]
    res = run(arrivals, prompts, outputs, overlap=True)
    assert steps(res)[:5] == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.029, ((0, 1, 8),)),
        (0, 0.029, 0.04, ((0, 1, 9),)),
        (0, 0.04, 0.059, ((0, 1, 10), (1, 8, 0))),
        (0, 0.059, 0.071, ((0, 1, 11), (1, 1, 8))),
    ]
    assert res.first_sched[1] == pytest.approx(0.04, abs=1e-12)
    sync = run(arrivals, prompts, outputs, overlap=False)
    assert steps(sync)[2] == (0, 0.029, 0.048, ((0, 1, 9), (1, 8, 0)))
    assert sync.first_sched[1] == pytest.approx(0.029, abs=1e-12)
    # One step more to the first token: 11 ms, the decode B now waits behind.
    ttft = res.first_token - res.requests.arrival_s
    ttft_sync = sync.first_token - sync.requests.arrival_s
    assert ttft[1] - ttft_sync[1] == pytest.approx(0.011, abs=1e-12)
    assert ttft[0] == ttft_sync[0]
    assert (res.status == FINISHED).all() and (sync.status == FINISHED).all()


def test_an_idle_replica_schedules_a_request_at_once() -> None:
    res = run([0.0, 1.0], [8, 8], [2, 2], overlap=True)
    np.testing.assert_allclose(res.first_sched, [0.0, 1.0], atol=1e-12)


def test_requests_reaching_an_idle_replica_together_share_its_first_iteration() -> None:
    # A, B and C (8 + 2 tokens each) reach the idle replica at the same instant, 0 s:
    # the engine wakes on the first and reads its input queue, where the other two
    # already are, so all three prefill in one step, 0-34 ms (10 ms + 24 tokens), and
    # decode together 34-47 ms. Held as arrivals at a busy replica, B and C would wait
    # for A's prefill and the step after it.
    res = run([0.0, 0.0, 0.0], [8, 8, 8], [2, 2, 2], overlap=True)
    assert steps(res) == [
        (0, 0.0, 0.034, ((0, 8, 0), (1, 8, 0), (2, 8, 0))),
        (0, 0.034, 0.047, ((0, 1, 8), (1, 1, 8), (2, 1, 8))),
    ]
    np.testing.assert_allclose(res.first_sched, [0.0, 0.0, 0.0], atol=1e-12)


def test_equal_closed_loop_clients_stay_in_step() -> None:
    # Three clients whose requests are all alike (8 + 2 tokens) end together at 47 ms and
    # send together: each round's three prompts reach the idle replica at one instant and
    # share one prefill, round after round (47-81 ms, 94-128 ms).
    res = run([0.0] * 9, [8] * 9, [2] * 9, overlap=True, workload={"concurrency": 3})
    log = steps(res)
    assert [len(s[3]) for s in log] == [3] * 6
    assert [s[1] for s in log[::2]] == [0.0, 0.047, 0.094]
    assert log[2] == (0, 0.047, 0.081, ((3, 8, 0), (4, 8, 0), (5, 8, 0)))


def test_a_replica_with_nothing_else_to_run_reads_at_once() -> None:
    # A (8 + 1) prefills 0-18 ms and is done: no step was scheduled ahead of it, so B
    # (arrived at 10 ms, during it) is read when it ends and prefills at 18 ms.
    res = run([0.0, 0.01], [8, 8], [1, 1], overlap=True)
    assert steps(res) == [(0, 0.0, 0.018, ((0, 8, 0),)), (0, 0.018, 0.036, ((1, 8, 0),))]


def test_held_requests_count_against_the_waiting_queue_limit() -> None:
    # B (25 ms) is held until the scheduling at 40 ms; C (33 ms) finds the one waiting
    # place taken by B and is refused. Without async scheduling B is admitted at 29 ms
    # and C finds the place free.
    arrivals, prompts, outputs = [0.0, 0.025, 0.033], [8, 8, 8], [10, 2, 2]
    res = run(arrivals, prompts, outputs, overlap=True, admission={"max_waiting": 1})
    assert res.status.tolist() == [FINISHED, FINISHED, REJECTED]
    assert res.reason[2] == "queue_full"
    sync = run(arrivals, prompts, outputs, overlap=False, admission={"max_waiting": 1})
    assert sync.status.tolist() == [FINISHED, FINISHED, FINISHED]


def test_a_fault_loses_the_held_requests_too() -> None:
    # The only replica fails at 35 ms: A (running), B (arrived 25 ms, held until the
    # scheduling at 40 ms) and C (arrived 33 ms, held for the one after) are all lost;
    # none is left in the gate to run once the replica is back.
    faults = {"outages": [{"replica": 0, "at_s": 0.035, "duration_s": 1.0}],
              "detection_s": 0.0, "on_failure": "fail"}
    res = run([0.0, 0.025, 0.033], [8, 8, 8], [10, 2, 2], overlap=True, faults=faults)
    assert res.status.tolist() == [FAILED, FAILED, FAILED]


def test_a_tensorrt_llm_loop_reads_a_step_late_unless_async_scheduling_is_off() -> None:
    # TensorRT-LLM's executor overlaps its loop by default: the first test's log, with
    # no host-work overlap priced (its fitted priors are net of it), only the intake.
    arrivals, prompts, outputs = [0.0, 0.025], [8, 8], [10, 2]
    res = run(arrivals, prompts, outputs, overlap=False, kind=TensorRTLike)
    assert steps(res)[3] == (0, 0.04, 0.059, ((0, 1, 10), (1, 8, 0)))
    assert res.first_sched[1] == pytest.approx(0.04, abs=1e-12)
    off = run(arrivals, prompts, outputs, overlap=False, kind=TensorRTLike,
              serving={"async_scheduling": False})
    assert steps(off)[2] == (0, 0.029, 0.048, ((0, 1, 9), (1, 8, 0)))


def loop(framework: str | None, pp: int = 1, method: str | None = None,
         linear_layers: int = 0, async_scheduling: bool | None = None) -> bool:
    """late_intake for a scenario of these settings, the overlap not priced."""
    spec = None if method is None else SimpleNamespace(method=method)
    sc = SimpleNamespace(serving=SimpleNamespace(async_scheduling=async_scheduling,
                                                 speculative=spec),
                         hardware=SimpleNamespace(pp=pp),
                         model=SimpleNamespace(linear_layers=linear_layers))
    return late_intake(sc, framework, priced=False)  # type: ignore[arg-type]


def test_which_loops_read_a_step_late() -> None:
    for fw in ("sglang", "trtllm"):
        assert loop(fw)
        assert not loop(fw, async_scheduling=False)
        assert not loop(fw, pp=2)  # both run pipeline stages with a loop of their own
    # vLLM's and a model's without a framework: only where the overlap is priced.
    assert not loop("vllm") and not loop(None)
    assert late_intake(SimpleNamespace(), "vllm", priced=True)  # type: ignore[arg-type]
    # SGLang keeps its loop synchronous with speculation (spec v1) and for a model with
    # linear-attention layers (its Mamba cache strategy beside the radix cache).
    assert not loop("sglang", method="eagle") and not loop("sglang", linear_layers=45)
    assert loop("trtllm", method="mtp") and not loop("trtllm", method="ngram")
    assert loop("trtllm", linear_layers=45)


def test_measured_scenarios_run_the_gate_where_their_framework_loop_overlaps() -> None:
    from sim.config.scenario import from_dict
    from sim.core.asyncgate import AsyncGate
    from sim.core.recvgate import RecvGate

    def gate(framework: str, **serving: Any) -> Any:
        sc = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                        "cost": {"measured": {"framework": framework}},
                        "serving": {"policy": "chunked", **serving},
                        "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                                 "output": {"dist": "fixed", "value": 2}},
                                     "num_requests": 1}})
        req = Requests(np.array([0.0]), np.array([8]), np.array([2]))
        return Engine(sc, req, build_cost(sc), np.random.default_rng(0)).replicas[0].gate

    assert isinstance(gate("vllm"), AsyncGate)
    assert gate("vllm", async_scheduling=False) is None
    assert isinstance(gate("sglang"), AsyncGate)
    assert gate("sglang", async_scheduling=False) is None
    recv = gate("sglang", scheduler_recv_interval=4)
    assert isinstance(recv, RecvGate) and recv.lag
    assert not gate("sglang", scheduler_recv_interval=4, async_scheduling=False).lag
