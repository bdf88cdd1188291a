"""Fuzzing: generated scenario mappings and trace files, valid and invalid.

Every case must end either in a result whose invariants hold, or in a ServesimError
whose message is one line naming a key, a line or a file. Any other exception is a
bug. `make fuzz` raises the example count (SERVESIM_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.core.request import FAILED, FINISHED, NOT_ARRIVED, REJECTED, TIMED_OUT, UNFINISHED
from sim.errors import ServesimError
from sim.policies.registry import POLICIES
from sim.report.summary import summarize

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Mostly-valid values with a sprinkling of wrong types and out-of-range numbers.
junk = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.floats(allow_nan=True),
                 st.integers(-5, 5), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, valid, junk)


def _same(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return valid


positive_int = st.integers(1, 64)


@st.composite
def scenario_dicts(draw: Any) -> dict[str, Any]:
    # One case in three is corrupt: any key may then hold junk. (Junk everywhere at
    # once would leave almost no valid scenario to run.)
    bad = draw(st.integers(0, 2)) == 2  # hypothesis favours small values: 0 is valid
    m = maybe if bad else _same
    dist = st.one_of(
        st.fixed_dictionaries({"dist": st.just("fixed"), "value": m(st.integers(1, 40))}),
        st.fixed_dictionaries({"dist": st.just("uniform"), "low": m(st.integers(1, 10)),
                               "high": m(st.integers(1, 40))}),
        st.fixed_dictionaries({"dist": st.just("lognormal"), "median": m(st.floats(1, 30)),
                               "sigma": m(st.floats(0, 2)), "min": st.integers(1, 5),
                               "max": m(st.integers(1, 60))}),
    )
    workload: dict[str, Any] = {
        "arrivals": {"process": draw(m(st.sampled_from(["poisson", "gamma", "constant"]))),
                     "rate": draw(m(st.floats(0.1, 500)))},
        "lengths": {"prompt": draw(dist), "output": draw(dist)},
        "num_requests": draw(m(st.integers(1, 40))),
        "seed": draw(st.integers(0, 3)),
    }
    if workload["arrivals"]["process"] == "gamma" or (bad and draw(st.booleans())):
        workload["arrivals"]["cv"] = draw(m(st.floats(0.1, 4)))
    raw: dict[str, Any] = {
        "model": draw(m(st.sampled_from(["tiny", "llama-3-8b"]))),
        "hardware": {"gpu": draw(m(st.sampled_from(["h100-sxm", "l40s", "a100-80gb"]))),
                     "tp": draw(m(st.sampled_from([1, 2]))),
                     "memory_utilization": draw(m(st.floats(0.05, 1.0)))},
        "cost": draw(st.one_of(
            st.just("roofline"),
            st.fixed_dictionaries({"linear": st.fixed_dictionaries(
                {"step_s": m(st.floats(1e-4, 0.05)),
                 "per_new_token_s": m(st.floats(0, 1e-3))})}),
        )),
        "serving": {"policy": draw(m(st.sampled_from(sorted(POLICIES)))),
                    "max_num_seqs": draw(m(positive_int)),
                    "max_num_batched_tokens": draw(m(st.integers(8, 512))),
                    "block_size": draw(m(st.sampled_from([1, 4, 16]))),
                    "num_kv_blocks": draw(m(st.integers(2, 200)))},
        "cluster": {"replicas": draw(m(st.integers(1, 3))),
                    "router": draw(m(st.sampled_from(["round_robin", "least_outstanding",
                                                          "random"])))},
        "workload": workload,
        "slo": {"ttft_s": draw(m(st.floats(0.01, 5)))},
    }
    if draw(st.booleans()):
        raw["admission"] = draw(admission_dicts(bad))
    if draw(st.booleans()):
        raw["faults"] = draw(fault_dicts(bad))
    if draw(st.booleans()):
        raw["horizon_s"] = draw(m(st.floats(0.01, 5)))
    if draw(st.integers(0, 9)) == 9:
        raw[draw(st.sampled_from(["extra", "workload", "admission", "faults"]))] = draw(junk)
    return raw


@st.composite
def admission_dicts(draw: Any, bad: bool) -> dict[str, Any]:
    m = maybe if bad else _same
    """admission: queue limit, token bucket, client timeout (docs/reliability.md)."""
    keys = {"max_waiting": m(st.integers(0, 8)),
            "rate_limit": m(st.fixed_dictionaries(
                {"rate": m(st.floats(0.5, 200))},
                optional={"burst": m(st.integers(0, 5))})),
            "timeout_s": m(st.floats(0.001, 2))}
    chosen = draw(st.lists(st.sampled_from(sorted(keys)), unique=True))
    return {k: draw(keys[k]) for k in chosen}


@st.composite
def fault_dicts(draw: Any, bad: bool) -> dict[str, Any]:
    m = maybe if bad else _same
    """faults: planned outages, a failure rate, detection, retry or fail."""
    outage = st.fixed_dictionaries({"replica": m(st.integers(0, 3)),
                                    "at_s": m(st.floats(0, 2)),
                                    "duration_s": m(st.floats(0.001, 1))})
    keys = {"outages": m(st.lists(outage, max_size=3)),
            "failures_per_hour": m(st.floats(0, 20000)),
            "repair_s": m(st.floats(0.001, 1)),
            "detection_s": m(st.floats(0, 0.5)),
            "on_failure": m(st.sampled_from(["retry", "fail"])),
            "max_retries": m(st.integers(0, 3))}
    chosen = draw(st.lists(st.sampled_from(sorted(keys)), unique=True))
    return {k: draw(keys[k]) for k in chosen}


def check_error(exc: ServesimError) -> None:
    text = str(exc)
    assert "\n" not in text and text
    assert exc.where or exc.source


def check_result(res: Any) -> None:
    st_ = res.status
    assert set(st_.tolist()) <= {FINISHED, REJECTED, UNFINISHED, TIMED_OUT, FAILED, NOT_ARRIVED}
    done = st_ == FINISHED
    assert np.all(res.first_token[done] <= res.finish[done])
    assert np.all(res.requests.arrival_s[done] <= res.first_sched[done])
    assert np.all(res.first_sched[done] <= res.first_token[done])
    # Every request that did not finish says why (unfinished: the horizon cut it).
    ended = (st_ == REJECTED) | (st_ == TIMED_OUT) | (st_ == FAILED)
    assert all(bool(res.reason[i]) == bool(ended[i]) for i in range(len(st_)))
    horizon = res.scenario.horizon_s
    if horizon is None:
        assert not ((st_ == UNFINISHED) | (st_ == NOT_ARRIVED)).any()
    else:  # not arrived: exactly those sent at or after the horizon
        assert ((st_ == NOT_ARRIVED) == (res.requests.arrival_s >= horizon)).all()
    counts = summarize(res)["requests"]
    assert sum(counts[k] for k in ("finished", "rejected", "unfinished", "timed_out",
                                   "failed", "not_arrived")) == counts["total"] == len(st_)


@FUZZ
@given(scenario_dicts())
def test_fuzzed_scenarios_run_or_fail_cleanly(raw: dict[str, Any]) -> None:
    try:
        sc = from_dict(raw, "fuzz.yaml")
    except ServesimError as exc:
        check_error(exc)
        return
    check_result(simulate(sc))


rows = st.lists(st.tuples(
    maybe(st.floats(0, 100)), maybe(st.integers(1, 50)), maybe(st.integers(1, 20))),
    min_size=0, max_size=12)


@FUZZ
@given(rows, st.booleans())
def test_fuzzed_trace_files_run_or_fail_cleanly(tmp_path_factory: Any, data: list[tuple],
                                                sort: bool) -> None:
    d: Path = tmp_path_factory.mktemp("trace")
    lines = ["arrival_s,prompt_tokens,output_tokens"]
    lines += [",".join("" if v is None else str(v) for v in r) for r in data]
    (d / "t.csv").write_text("\n".join(lines) + "\n")
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": {"trace": {"path": "t.csv", "sort": sort}}}
    try:
        res = simulate(from_dict(raw, str(d / "s.yaml"), d))
    except ServesimError as exc:
        check_error(exc)
        return
    check_result(res)
    assert len(res.status) == len(data)  # never a lost row


def test_yaml_object_tags_are_refused(tmp_path: Path) -> None:
    from sim.config.scenario import load

    p = tmp_path / "evil.yaml"
    p.write_text("model: !!python/object/apply:os.system ['echo pwned']\nworkload: {}\n")
    try:
        load(p)
    except ServesimError as exc:
        assert "evil.yaml" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a python object tag was accepted")
