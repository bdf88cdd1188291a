"""SGLang's --scheduler-recv-interval (serving.scheduler_recv_interval): new requests are
read only every N decode steps, or right after a step with a prompt in it.

Hand-worked on the tiny model with a linear cost of 10 ms a step + 1 ms a new token,
policy continuous (prompts first, apart from decodes), 4-token blocks (tests/conftest.py).
Step log entries: (replica, start_s, end_s, ((request id, new tokens, context), ...)).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from conftest import run_requests, tiny_scenario

from sim.core.request import FAILED, FINISHED, REJECTED
from sim.cost.models import LinearCost, build_cost
from sim.errors import ServesimError


def steps(res: Any) -> list[tuple[Any, ...]]:
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def gated(n: int, **sections: Any) -> Any:
    return tiny_scenario(serving={"scheduler_recv_interval": n}, **sections)


def test_a_request_routed_during_decodes_waits_for_the_nth_decode_step() -> None:
    # A (0 s, 8 + 10 tokens) reaches an idle replica: read at once, prefilled 0-18 ms
    # (a prompt step: the counter is past 3 when it ends, so the next loop reads and
    # resets it). A then decodes 18-29 ms (counter 1 at its end), 29-40 ms (2). B
    # arrives at 30 ms, during that step: unread at 40 ms (2 < 3), so A decodes alone
    # 40-51 ms (3): read then, and B prefills 51-69 ms. With every iteration reading,
    # B would prefill at 40 ms.
    arrivals, prompts, outputs = [0.0, 0.03], [8, 8], [10, 2]
    res = run_requests(gated(3), arrivals, prompts, outputs)
    assert steps(res)[:6] == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.029, ((0, 1, 8),)),
        (0, 0.029, 0.04, ((0, 1, 9),)),
        (0, 0.04, 0.051, ((0, 1, 10),)),
        (0, 0.051, 0.069, ((1, 8, 0),)),
        (0, 0.069, 0.081, ((0, 1, 11), (1, 1, 8))),
    ]
    assert res.first_sched[1] == pytest.approx(0.051, abs=1e-12)
    assert res.first_token[1] - res.requests.arrival_s[1] == pytest.approx(0.039, abs=1e-12)
    plain = run_requests(gated(1), arrivals, prompts, outputs)
    assert plain.first_sched[1] == pytest.approx(0.04, abs=1e-12)
    assert (res.status == FINISHED).all() and (plain.status == FINISHED).all()


def test_an_idle_replica_reads_a_request_at_once() -> None:
    res = run_requests(gated(30), [0.0, 1.0], [8, 8], [2, 2])
    np.testing.assert_allclose(res.first_sched, [0.0, 1.0], atol=1e-12)


def test_requests_reaching_an_idle_replica_together_are_read_together() -> None:
    # A and B (8 + 2 tokens) reach the idle replica at the same instant: its scheduler
    # reads every request it has been sent, so both prefill in the first step, 0-26 ms
    # (10 ms + 16 tokens), rather than B waiting out the interval behind A.
    res = run_requests(gated(30), [0.0, 0.0], [8, 8], [2, 2])
    assert steps(res)[0] == (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0)))
    np.testing.assert_allclose(res.first_sched, [0.0, 0.0], atol=1e-12)


def test_held_requests_count_against_the_waiting_queue_limit() -> None:
    # A runs from 0 s; B (30 ms) is held behind the interval; C (35 ms) finds the one
    # waiting place taken by B and is refused, as SGLang's queue would refuse it.
    res = run_requests(gated(5, admission={"max_waiting": 1}), [0.0, 0.03, 0.035],
                       [8, 8, 8], [10, 2, 2])
    assert res.status.tolist()[2] == REJECTED and res.reason[2] == "queue_full"
    assert res.status.tolist()[:2] == [FINISHED, FINISHED]


def test_a_fault_loses_the_held_requests_too() -> None:
    # Replica 0, the only one, fails at 35 ms: A (running) and B (held since 30 ms) are
    # both lost, and with nowhere to retry both fail; none is left behind in the gate.
    faults = {"outages": [{"replica": 0, "at_s": 0.035, "duration_s": 1.0}],
              "detection_s": 0.0, "on_failure": "fail"}
    res = run_requests(gated(5, faults=faults), [0.0, 0.03], [8, 8], [10, 2])
    assert res.status.tolist() == [FAILED, FAILED]


def test_interval_one_is_every_iteration() -> None:
    a = run_requests(gated(1), [0.0, 0.03, 0.031], [8, 8, 12], [10, 2, 3])
    b = run_requests(tiny_scenario(), [0.0, 0.03, 0.031], [8, 8, 12], [10, 2, 3])
    assert steps(a) == steps(b)


@pytest.mark.parametrize("value, message", [
    (0, "at least 1"), (-3, "at least 1"), (2.5, "integer"), ("x", "integer")])
def test_bad_intervals_name_the_key(value: Any, message: str) -> None:
    with pytest.raises(ServesimError, match=message) as exc:
        gated(value)
    assert "serving.scheduler_recv_interval" in str(exc.value)


def test_an_interval_with_pipeline_stages_is_refused() -> None:
    with pytest.raises(ServesimError, match="single-stage") as exc:
        tiny_scenario(serving={"scheduler_recv_interval": 10, "policy": "chunked"},
                      hardware={"pp": 2})
    assert "serving.scheduler_recv_interval" in str(exc.value)


class SGLangLike(LinearCost):
    """The tiny scenario's linear cost, seen as a measured SGLang profile: SGLang's
    overlap scheduler (its default) makes the interval's reads a step late."""

    meta: ClassVar[dict[str, Any]] = {"source": {"framework": "sglang"}}


def test_an_overlapped_loop_reads_only_what_came_before_the_last_step() -> None:
    # As the first test, but B arrives at 45 ms, during A's third decode (40-51 ms),
    # after the loop had read (nothing) for the step after it. A synchronous loop reads B
    # at 51 ms (the counter at 3) and prefills it 51-69 ms. An overlapped loop's read at
    # 51 ms takes only what arrived before 40 ms: B waits for the next read, three decode
    # steps on (84 ms), and prefills 84-102 ms.
    sc = gated(3)
    linear = build_cost(sc)
    res = run_requests(sc, [0.0, 0.045], [8, 8], [10, 2],
                       cost=SGLangLike(linear.step_s, linear.per_new_token_s))
    assert steps(res)[3:9] == [
        (0, 0.04, 0.051, ((0, 1, 10),)),
        (0, 0.051, 0.062, ((0, 1, 11),)),
        (0, 0.062, 0.073, ((0, 1, 12),)),
        (0, 0.073, 0.084, ((0, 1, 13),)),
        (0, 0.084, 0.102, ((1, 8, 0),)),
        (0, 0.102, 0.114, ((0, 1, 14), (1, 1, 8))),
    ]
    sync = run_requests(gated(3), [0.0, 0.045], [8, 8], [10, 2])
    assert steps(sync)[4] == (0, 0.051, 0.069, ((1, 8, 0),))
    assert (res.status == FINISHED).all() and (sync.status == FINISHED).all()
