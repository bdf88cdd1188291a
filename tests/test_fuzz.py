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

from sim.engine import simulate
from sim.errors import ServesimError
from sim.policies import POLICIES
from sim.request import FINISHED, REJECTED, UNFINISHED
from sim.scenario import from_dict

EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# Mostly-valid values with a sprinkling of wrong types and out-of-range numbers.
junk = st.one_of(st.none(), st.booleans(), st.text(max_size=5), st.floats(allow_nan=True),
                 st.integers(-5, 5), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(valid, valid, valid, junk)


positive_int = st.integers(1, 64)


@st.composite
def scenario_dicts(draw: Any) -> dict[str, Any]:
    dist = st.one_of(
        st.fixed_dictionaries({"dist": st.just("fixed"), "value": maybe(st.integers(1, 40))}),
        st.fixed_dictionaries({"dist": st.just("uniform"), "low": maybe(st.integers(1, 10)),
                               "high": maybe(st.integers(1, 40))}),
        st.fixed_dictionaries({"dist": st.just("lognormal"), "median": maybe(st.floats(1, 30)),
                               "sigma": maybe(st.floats(0, 2)), "min": st.integers(1, 5),
                               "max": maybe(st.integers(1, 60))}),
    )
    workload: dict[str, Any] = {
        "arrivals": {"process": draw(maybe(st.sampled_from(["poisson", "gamma", "constant"]))),
                     "rate": draw(maybe(st.floats(0.1, 500)))},
        "lengths": {"prompt": draw(dist), "output": draw(dist)},
        "num_requests": draw(maybe(st.integers(1, 40))),
        "seed": draw(st.integers(0, 3)),
    }
    if draw(st.booleans()):
        workload["arrivals"]["cv"] = draw(maybe(st.floats(0.1, 4)))
    raw: dict[str, Any] = {
        "model": draw(maybe(st.sampled_from(["tiny", "llama-3-8b"]))),
        "hardware": {"gpu": draw(maybe(st.sampled_from(["h100-sxm", "l40s", "a100-80gb"]))),
                     "tp": draw(maybe(st.sampled_from([1, 2]))),
                     "memory_utilization": draw(maybe(st.floats(0.05, 1.0)))},
        "cost": draw(st.one_of(
            st.just("roofline"),
            st.fixed_dictionaries({"linear": st.fixed_dictionaries(
                {"step_s": maybe(st.floats(1e-4, 0.05)),
                 "per_new_token_s": maybe(st.floats(0, 1e-3))})}),
        )),
        "serving": {"policy": draw(maybe(st.sampled_from(sorted(POLICIES)))),
                    "max_num_seqs": draw(maybe(positive_int)),
                    "max_num_batched_tokens": draw(maybe(st.integers(8, 512))),
                    "block_size": draw(maybe(st.sampled_from([1, 4, 16]))),
                    "num_kv_blocks": draw(maybe(st.integers(2, 200)))},
        "cluster": {"replicas": draw(maybe(st.integers(1, 3))),
                    "router": draw(maybe(st.sampled_from(["round_robin", "least_outstanding",
                                                          "random"])))},
        "workload": workload,
        "slo": {"ttft_s": draw(maybe(st.floats(0.01, 5)))},
    }
    if draw(st.integers(0, 9)) == 0:
        raw[draw(st.sampled_from(["extra", "workload"]))] = draw(junk)
    return raw


def check_error(exc: ServesimError) -> None:
    text = str(exc)
    assert "\n" not in text and text
    assert exc.where or exc.source


def check_result(res: Any) -> None:
    st_ = res.status
    assert set(st_.tolist()) <= {FINISHED, REJECTED, UNFINISHED}
    done = st_ == FINISHED
    assert np.all(res.first_token[done] <= res.finish[done])
    assert np.all(res.requests.arrival_s[done] <= res.first_token[done])


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
    from sim.scenario import load

    p = tmp_path / "evil.yaml"
    p.write_text("model: !!python/object/apply:os.system ['echo pwned']\nworkload: {}\n")
    try:
        load(p)
    except ServesimError as exc:
        assert "evil.yaml" in str(exc) and "\n" not in str(exc)
    else:
        raise AssertionError("a python object tag was accepted")
