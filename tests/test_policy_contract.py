"""The policy-replica contract: a policy written outside the package, registered with one
call, runs through the engine like a shipped one (docs/policies.md, "Adding a policy").

Cost: 10 ms per step + 1 ms per new token (linear), block size 4, as in
tests/test_engine_handworked.py. Step log entries: (replica, start_s, end_s,
((request id, new tokens, context before), ...)).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import run_requests, tiny_scenario

from sim.config.serving import ServingConfig
from sim.errors import ServesimError
from sim.policies.base import Batch, ReplicaState, decode_all
from sim.policies.registry import POLICIES, register


class OneAtATime:
    """Serves one request at a time: the head of the queue prefills alone once nothing
    runs, then decodes alone until it finishes; the next waits."""

    lazy_decodes = False  # a decode is a batch entry: nothing to aggregate
    reserves_kv = False

    def __init__(self, cfg: ServingConfig):
        self.max_tokens = cfg.max_num_batched_tokens

    def reject_reason(self, prompt: int, output: int, state: ReplicaState) -> str | None:
        return "prompt_too_long" if prompt > self.max_tokens else None

    def schedule(self, state: ReplicaState) -> Batch:
        batch = Batch()
        if state.running:
            return decode_all(state, batch)
        if state.waiting:
            r = state.waiting[0]
            if state.kv.allocate_slots(r, r.prompt, keep_watermark=True) is not None:
                state.waiting.popleft()
                state.admit(r)
                batch[r] = r.prompt
        return batch


@pytest.fixture
def one_at_a_time() -> Iterator[str]:
    register("one_at_a_time", OneAtATime)
    try:
        yield "one_at_a_time"
    finally:
        del POLICIES["one_at_a_time"]


def steps(res):
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def test_a_policy_registered_from_outside_runs_through_the_engine(one_at_a_time: str) -> None:
    # A (8 tokens, 3 out) and B (4 tokens, 2 out) both arrive at 0. A prefills alone
    # (10 + 8 ms), decodes twice (11 ms each) and finishes at 40 ms; only then does B
    # prefill (10 + 4 ms) and decode once (11 ms). Continuous batching would have
    # prefilled both at once.
    res = run_requests(tiny_scenario(serving={"policy": one_at_a_time}),
                       [0.0, 0.0], [8, 4], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.029, ((0, 1, 8),)),
        (0, 0.029, 0.04, ((0, 1, 9),)),
        (0, 0.04, 0.054, ((1, 4, 0),)),
        (0, 0.054, 0.065, ((1, 1, 4),)),
    ]
    assert res.first_sched.tolist() == pytest.approx([0.0, 0.04])
    assert res.finish.tolist() == pytest.approx([0.04, 0.065])


def test_its_reject_reason_reaches_the_request(one_at_a_time: str) -> None:
    sc = tiny_scenario(serving={"policy": one_at_a_time, "max_num_batched_tokens": 16})
    res = run_requests(sc, [0.0], [20], [2])
    assert res.reason.tolist() == ["prompt_too_long"]


def test_registering_twice_or_without_capabilities_is_a_clear_error(one_at_a_time: str) -> None:
    with pytest.raises(ServesimError, match="already registered"):
        register(one_at_a_time, OneAtATime)

    class Undeclared:
        def __init__(self, cfg: ServingConfig):
            pass

    with pytest.raises(ServesimError, match="must declare lazy_decodes"):
        register("undeclared", Undeclared)
    assert "undeclared" not in POLICIES


def test_an_unregistered_name_lists_the_valid_ones() -> None:
    with pytest.raises(ServesimError) as exc:
        tiny_scenario(serving={"policy": "one_at_a_time"})
    assert "unknown policy 'one_at_a_time'" in str(exc.value)
    assert "chunked, continuous, disaggregated, orca, static" in str(exc.value)


def test_every_shipped_policy_declares_its_capabilities() -> None:
    for name, cls in POLICIES.items():
        if name == "disaggregated":  # a cluster layout, refused as a replica policy
            continue
        assert isinstance(cls.lazy_decodes, bool) and isinstance(cls.reserves_kv, bool), name
