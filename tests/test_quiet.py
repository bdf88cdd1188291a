"""Iterations that end without a SimPy event of their own (sim/core/quiet.py): on the
only replica, every output is the same to the bit as with one event per iteration,
and most decode iterations of a busy run do skip their event."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
from conftest import tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.scenario import from_dict
from sim.core.engine import Engine, build_cost
from sim.report.outputs import requests_csv
from sim.report.summary import summarize
from sim.workload.build import build_requests
from sim.workload.requests import Requests

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))


def _run(sc: Any, req: Requests, skip: bool) -> tuple[Any, int]:
    """``sc`` on ``req`` with a step log, and the SimPy events the run took."""
    eng = Engine(sc, req, build_cost(sc), np.random.default_rng(0), log_steps=True,
                 skip_events=skip)
    events = [0]
    step = eng.env.step

    def counted() -> None:
        events[0] += 1
        step()

    eng.env.step = counted  # type: ignore[method-assign]
    return eng.run(), events[0]


def same_both_ways(sc: Any, req: Requests) -> tuple[int, int, int]:
    """Run ``sc`` on ``req`` skipping events and not; assert every output equal to the
    bit (per-request CSV, summary, step log, end time, replica totals). Returns the
    iterations and each way's SimPy events."""
    (a, ea), (b, eb) = _run(sc, req, True), _run(sc, req, False)
    assert a.end_s == b.end_s
    assert requests_csv(a) == requests_csv(b)
    assert json.dumps(summarize(a)) == json.dumps(summarize(b))
    assert a.step_log == b.step_log
    fields = type(a.replica_stats[0]).__slots__
    assert [[getattr(s, k) for k in fields] for s in a.replica_stats] == \
        [[getattr(s, k) for k in fields] for s in b.replica_stats]
    return len(a.step_log or []), ea, eb


def _azure(policy: str, rate: float, replicas: int = 1, pp: int = 1,
           **serving: Any) -> tuple[Any, Requests]:
    """Llama-3-8B on H100s (roofline), 300 Azure conversations, Poisson at ``rate``."""
    sc = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "pp": pp},
                    "serving": {"policy": policy, **serving},
                    "cluster": {"replicas": replicas},
                    "workload": {"arrivals": {"process": "poisson", "rate": rate},
                                 "lengths": {"empirical": "azure_2023_conv"},
                                 "num_requests": 300, "seed": 5}})
    return sc, build_requests(sc.workload, None, np.random.default_rng(0), sc.source)


def test_a_busy_replica_skips_most_events_and_changes_nothing() -> None:
    # Llama-3-8B on one H100 (roofline), 300 Azure conversations near capacity: most
    # iterations end before the next arrival is due and skip their event.
    for policy, serving in (("continuous", {}), ("chunked", {}),
                            ("chunked", {"speculative": {"method": "eagle", "num_tokens": 3,
                                                         "acceptance": {"rate": 0.7}}})):
        sc, req = _azure(policy, 14.0, **serving)
        iterations, skipping, every = same_both_ways(sc, req)
        # One event per iteration and per arrival the timer delivers, at least.
        assert every > iterations
        assert skipping < every - iterations // 2, (policy, iterations, skipping, every)


def test_a_pipeline_follows_the_same_switch() -> None:
    # A 2-stage replica's micro-batches skip their events by the same rule, and
    # skip_events=False gives each its own, with the same outputs.
    sc, req = _azure("chunked", 17.0, pp=2)
    _, skipping, every = same_both_ways(sc, req)
    assert skipping < every // 2


def test_two_replicas_skip_nothing() -> None:
    # Another replica's events may read this one's state: every iteration keeps its own.
    sc, req = _azure("chunked", 20.0, replicas=2)
    _, skipping, every = same_both_ways(sc, req)
    assert skipping == every


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(policy=st.sampled_from(["continuous", "chunked", "orca"]),
       intake=st.sampled_from(["none", "async", "recv"]),
       spec=st.booleans(), prefix=st.booleans(),
       blocks=st.integers(8, 40), seqs=st.integers(1, 6),
       horizon=st.sampled_from([None, 0.05, 0.2]),
       reqs=st.lists(st.tuples(st.sampled_from([0.0, 0.001, 0.02, 0.3]), st.integers(1, 40),
                               st.integers(1, 30)), min_size=1, max_size=14))
def test_skipping_events_changes_nothing(policy: str, intake: str, spec: bool, prefix: bool,
                                         blocks: int, seqs: int, horizon: float | None,
                                         reqs: list[Any]) -> None:
    # Random arrivals (some after idle spells), KV pressure and preemption, horizons,
    # vLLM's async scheduling and SGLang's receive interval, speculation, prefix caching.
    serving: dict[str, Any] = {"policy": policy, "num_kv_blocks": blocks, "max_num_seqs": seqs,
                               "max_num_batched_tokens": 64,
                               "prefix_caching": prefix and policy != "orca"}
    if intake == "async":
        serving["async_scheduling"] = True
    elif intake == "recv":
        serving["scheduler_recv_interval"] = 3
    if spec:
        serving["speculative"] = {"method": "eagle", "num_tokens": 2, "acceptance": {"rate": 0.6}}
    more: dict[str, Any] = {} if horizon is None else {"horizon_s": horizon}
    if intake == "async":  # it needs the host's share of a step: not a linear cost
        more.update(cost="roofline", hardware={"gpu": "h100-sxm"})
    sc = tiny_scenario(serving=serving, **more)
    gaps, prompts, outputs = (list(x) for x in zip(*reqs, strict=True))
    req = Requests(np.cumsum(gaps), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    same_both_ways(sc, req)
