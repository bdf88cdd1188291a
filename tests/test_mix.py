"""Mixed workloads: classes by weight or own arrivals, trace classes, per-class SLOs,
per-class metrics, report lines and the requests.csv class column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sim.config import scenario
from sim.configtools import build
from sim.core.engine import simulate
from sim.errors import ServesimError
from sim.report.outputs import CSV_COLUMNS, requests_csv
from sim.report.printed import table
from sim.report.summary import summarize
from sim.workload.build import build_requests
from sim.workload.requests import WorkloadConfig

ROOT = Path(__file__).resolve().parent.parent


def fixed(prompt: int, output: int) -> dict[str, Any]:
    return {"prompt": {"dist": "fixed", "value": prompt},
            "output": {"dist": "fixed", "value": output}}


def wl(**kw: Any) -> WorkloadConfig:
    return build(WorkloadConfig, kw, "workload")


def shared(n: int = 10000, **extra: Any) -> WorkloadConfig:
    return wl(arrivals={"process": "poisson", "rate": 20.0}, num_requests=n,
              classes={"chat": {"weight": 0.7, "lengths": fixed(100, 20), "priority": 0},
                       "summ": {"weight": 0.3, "lengths": fixed(3000, 200), "priority": 2}},
              **extra)


def test_shared_arrivals_split_by_weight_with_each_class_lengths_and_priority() -> None:
    r = build_requests(shared(), None, np.random.default_rng(3))
    assert r.class_names == ("chat", "summ") and r.klass is not None
    assert np.mean(r.klass == 0) == pytest.approx(0.7, abs=0.015)
    chat, summ = r.klass == 0, r.klass == 1
    assert set(r.prompt_tokens[chat]) == {100} and set(r.output_tokens[summ]) == {200}
    assert r.priority is not None
    assert set(r.priority[chat]) == {0} and set(r.priority[summ]) == {2}


def test_classes_do_not_change_the_shared_arrival_process() -> None:
    plain = wl(arrivals={"process": "poisson", "rate": 20.0}, num_requests=500,
               lengths=fixed(5, 5))
    a = build_requests(plain, None, np.random.default_rng(9))
    b = build_requests(shared(500), None, np.random.default_rng(9))
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert a.klass is None and a.class_names == ()


def test_same_seed_same_mix_and_another_seed_another() -> None:
    a, b, c = (build_requests(shared(300), None, np.random.default_rng(s)) for s in (1, 1, 2))
    assert a.klass is not None and b.klass is not None and c.klass is not None
    assert np.array_equal(a.klass, b.klass) and np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.klass, c.klass)


def test_shared_lengths_are_the_default_for_a_class_without_its_own() -> None:
    cfg = wl(arrivals={"process": "constant", "rate": 1.0}, num_requests=200,
             lengths=fixed(7, 3),
             classes={"a": {"weight": 1}, "b": {"weight": 1, "lengths": fixed(50, 9)}})
    r = build_requests(cfg, None, np.random.default_rng(0))
    assert r.klass is not None and r.priority is None
    assert set(r.prompt_tokens[r.klass == 0]) == {7} and set(r.prompt_tokens[r.klass == 1]) == {50}


def test_own_arrivals_are_merged_by_time_with_ties_in_class_order() -> None:
    cfg = wl(duration_s=10.0, classes={
        "slow": {"arrivals": {"process": "constant", "rate": 1.0}, "lengths": fixed(10, 2)},
        "fast": {"arrivals": {"process": "constant", "rate": 2.0, "start_s": 0.25},
                 "lengths": fixed(20, 2)}})
    r = build_requests(cfg, None, np.random.default_rng(0))
    assert r.klass is not None
    assert int((r.klass == 0).sum()) == 10 and int((r.klass == 1).sum()) == 20
    assert np.all(np.diff(r.arrival_s) >= 0)
    assert r.arrival_s[:4].tolist() == [0.0, 0.25, 0.75, 1.0]
    assert r.klass[:4].tolist() == [0, 1, 1, 0]
    assert set(r.prompt_tokens[r.klass == 1]) == {20}


def test_own_arrivals_with_num_requests_keep_the_earliest_of_the_merged_stream() -> None:
    cfg = wl(num_requests=5, classes={
        "a": {"arrivals": {"process": "constant", "rate": 1.0}, "lengths": fixed(10, 2)},
        "b": {"arrivals": {"process": "constant", "rate": 1.0, "start_s": 0.5},
              "lengths": fixed(10, 2)}})
    r = build_requests(cfg, None, np.random.default_rng(0))
    assert r.arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert r.klass is not None and r.klass.tolist() == [0, 1, 0, 1, 0]


ARR = {"process": "poisson", "rate": 1.0}
L = fixed(5, 5)


@pytest.mark.parametrize("raw, where", [
    ({"arrivals": ARR, "num_requests": 1, "classes": {"a": {"lengths": L}}},
     "workload.classes.a.weight"),
    ({"num_requests": 1, "classes": {"a": {"arrivals": ARR, "lengths": L},
                                     "b": {"lengths": L}}}, "workload.classes.b.arrivals"),
    ({"num_requests": 1, "classes": {"a": {"arrivals": ARR, "weight": 1, "lengths": L}}},
     "workload.classes.a.weight"),
    ({"arrivals": ARR, "num_requests": 1, "classes": {"a": {"arrivals": ARR, "lengths": L}}},
     "workload.arrivals"),
    ({"num_requests": 1, "classes": {"a": {"weight": 1, "lengths": L}}}, "workload.arrivals"),
    ({"arrivals": ARR, "num_requests": 1, "classes": {"a": {"weight": 1}}},
     "workload.classes.a.lengths"),
    ({"arrivals": ARR, "lengths": L, "num_requests": 1,
      "classes": {"a": {"weight": 1, "lengths": L}}}, "workload.lengths"),
    ({"arrivals": ARR, "num_requests": 1, "priority": {"classes": [0, 1]},
      "classes": {"a": {"weight": 1, "lengths": L}}}, "workload.priority"),
    ({"arrivals": ARR, "classes": {"a": {"weight": 1, "lengths": L}}},
     "workload.num_requests"),
    ({"arrivals": ARR, "num_requests": 1, "classes": {"a b": {"weight": 1, "lengths": L}}},
     "workload.classes.a b"),
    ({"arrivals": ARR, "num_requests": 1, "classes": {}}, "workload.classes"),
    ({"arrivals": ARR, "num_requests": 1, "classes": {"a": {"weight": 0, "lengths": L}}},
     "workload.classes.a.weight"),
    ({"trace": {"path": "t.csv"}, "classes": {"a": {"weight": 1}}},
     "workload.classes.a.weight"),
    ({"trace": {"path": "t.csv"}, "classes": {"a": {"lengths": L}}},
     "workload.classes.a.lengths"),
    ({"arrivals": ARR, "num_requests": 1,
      "classes": {"a": {"weight": 1, "lengths": L, "slo": {"ttft_s": -1}}}},
     "workload.classes.a.slo.ttft_s"),
])
def test_class_validation_names_the_key(raw: dict[str, Any], where: str) -> None:
    with pytest.raises(ServesimError) as info:
        wl(**raw)
    assert info.value.where == where
    assert "\n" not in str(info.value)


def write_trace(path: Path, with_priority: bool = False) -> Path:
    head = "arrival_s,prompt_tokens,output_tokens" + (",priority" if with_priority else "")
    rows = [head]
    for i in range(12):
        label = "summ" if i % 3 == 0 else "chat"
        rows.append(f"{i * 0.5},{400 if label == 'summ' else 20},4"
                    + (",1" if with_priority else "") + f",{label}")
    path.write_text(rows[0] + ",class\n" + "\n".join(rows[1:]) + "\n")
    return path


def test_trace_class_column_defines_classes_in_declared_then_sorted_order(
        tmp_path: Path) -> None:
    write_trace(tmp_path / "t.csv")
    cfg = wl(trace={"path": "t.csv"}, classes={"summ": {"priority": 1}})
    r = build_requests(cfg, tmp_path, np.random.default_rng(0))
    assert r.class_names == ("summ", "chat") and r.klass is not None
    assert r.klass[:4].tolist() == [0, 1, 1, 0]
    assert r.priority is not None and r.priority[:4].tolist() == [1, 0, 0, 1]
    plain = build_requests(wl(trace={"path": "t.csv"}, num_requests=5), tmp_path,
                           np.random.default_rng(0))
    assert plain.class_names == ("chat", "summ") and plain.klass is not None
    assert plain.klass.tolist() == [1, 0, 0, 1, 0] and plain.priority is None


@pytest.mark.parametrize("classes, priority_column, where", [
    ({"sum": {}}, False, "workload.classes.sum"),
    ({"summ": {"priority": 1}}, True, "workload.classes.summ.priority"),
])
def test_trace_class_errors_name_the_class(tmp_path: Path, classes: dict[str, Any],
                                           priority_column: bool, where: str) -> None:
    write_trace(tmp_path / "t.csv", priority_column)
    with pytest.raises(ServesimError) as info:
        build_requests(wl(trace={"path": "t.csv"}, classes=classes), tmp_path,
                       np.random.default_rng(0), "s.yaml")
    assert info.value.where == where and info.value.source == "s.yaml"


def test_classes_need_a_class_column_in_the_trace(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,5\n")
    with pytest.raises(ServesimError, match="no class column") as info:
        build_requests(wl(trace={"path": "t.csv"}, classes={"a": {}}), tmp_path,
                       np.random.default_rng(0))
    assert info.value.where == "workload.classes"


def mixed_scenario(**workload: Any) -> Any:
    """Two classes on a linear cost where every step takes 0.1 s: every request's TTFT is
    at least 0.1 s, so a 0.05 s TTFT target is missed and a 10 s one met."""
    return scenario.from_dict(_raw_of_mixed(**workload))


def _raw_of_mixed(**workload: Any) -> dict[str, Any]:
    return {
        "model": "llama-3-8b",
        "cost": {"linear": {"step_s": 0.1}},
        "workload": {"arrivals": {"process": "poisson", "rate": 2.0}, "num_requests": 300,
                     "classes": {
                         "tight": {"weight": 1, "lengths": fixed(32, 4),
                                   "slo": {"ttft_s": 0.05}},
                         "loose": {"weight": 1, "lengths": fixed(64, 1)}},
                     **workload},
        "slo": {"ttft_s": 10.0, "tpot_s": 1.0},
    }


def test_each_request_meets_its_own_class_slo_and_classes_add_up() -> None:
    res = simulate(mixed_scenario())
    s = summarize(res)
    tight, loose = s["classes"]["tight"], s["classes"]["loose"]
    assert tight["throughput"]["slo"] == {"ttft_s": 0.05, "tpot_s": 1.0}
    assert loose["throughput"]["slo"] == {"ttft_s": 10.0, "tpot_s": 1.0}
    assert tight["throughput"]["slo_attainment"] == 0.0
    assert loose["throughput"]["slo_attainment"] == 1.0
    assert loose["latency_s"]["tpot"]["p50"] is None  # one output token: no TPOT
    for key in ("total", "finished", "rejected", "unfinished"):
        assert tight["requests"][key] + loose["requests"][key] == s["requests"][key]
    tp = s["throughput"]
    assert tp["goodput_requests_per_s"] == pytest.approx(
        loose["throughput"]["goodput_requests_per_s"])
    assert tp["requests_per_s"] == pytest.approx(
        tight["throughput"]["requests_per_s"] + loose["throughput"]["requests_per_s"])
    assert tight["tokens"] == {"prompt_mean": 32.0, "output_mean": 4.0}
    assert tight["latency_s"]["ttft"]["p50"] >= 0.1
    assert "itl" not in tight["latency_s"]


def test_class_attainment_is_of_the_class_requests_that_arrived() -> None:
    from sim.core.request import FINISHED, NOT_ARRIVED

    # 300 requests at 2 req/s arrive over ~150 s; the horizon at 60 s leaves ~180 of
    # them not arrived. A loose request is served in one 0.1 s step, far inside its 10 s
    # TTFT: all that arrived meet it but any still in service at 60 s.
    res = simulate(scenario.from_dict({**_raw_of_mixed(), "horizon_s": 60.0}))
    s = summarize(res)
    loose = s["classes"]["loose"]
    m = res.requests.klass == res.requests.class_names.index("loose")
    came = m & (res.status != NOT_ARRIVED)
    assert loose["requests"]["not_arrived"] == int((m & ~came).sum()) > 50
    assert sum(c["requests"]["not_arrived"] for c in s["classes"].values()) == \
        s["requests"]["not_arrived"]
    good = int((came & (res.status == FINISHED)).sum())
    assert loose["throughput"]["slo_attainment"] == pytest.approx(good / int(came.sum()))
    assert loose["throughput"]["slo_attainment"] > 0.95  # all 150 would give about 0.4


def test_table_and_csv_show_each_request_class() -> None:
    res = simulate(mixed_scenario(num_requests=40))
    s = summarize(res)
    text = table(s)
    lines = text.splitlines()
    i = next(j for j, ln in enumerate(lines) if ln.startswith("class"))
    tight, loose = lines[i + 2].split(), lines[i + 3].split()
    assert tight[0] == "tight" and tight[9] == "0.0%" and tight[10] == "ttft<=0.05,"
    assert loose[0] == "loose" and loose[9] == "100.0%" and loose[5] == "-"  # no TPOT
    assert "SLO per class" in text
    rows = requests_csv(res).decode().splitlines()
    assert rows[0].split(",") == [*CSV_COLUMNS]
    assert CSV_COLUMNS[-2:] == ("reason", "class")
    klass = res.requests.klass
    assert klass is not None
    assert [r.rsplit(",", 1)[1] for r in rows[1:]] == [("tight", "loose")[k] for k in klass]
    assert json.loads(json.dumps(s))["classes"].keys() == {"tight", "loose"}


def test_workload_without_classes_has_no_class_summary_and_empty_class_cells() -> None:
    raw = {"model": "llama-3-8b", "cost": {"linear": {"step_s": 0.01}},
           "workload": {"arrivals": {"process": "constant", "rate": 5.0}, "num_requests": 5,
                        "lengths": fixed(16, 3)}}
    res = simulate(scenario.from_dict(raw))
    s = summarize(res)
    assert "classes" not in s and "class " not in table(s)
    rows = requests_csv(res).decode().splitlines()
    assert all(r.endswith(",") for r in rows[1:])


def test_shipped_mixed_scenario_runs_and_reports_both_classes() -> None:
    sc = scenario.load(ROOT / "scenarios" / "mixed-chat-summarize.yaml",
                       ["workload.duration_s=60"])
    s = summarize(simulate(sc))
    chat, summ = s["classes"]["chat"], s["classes"]["summarize"]
    assert chat["requests"]["total"] + summ["requests"]["total"] == s["requests"]["total"]
    assert chat["requests"]["total"] / s["requests"]["total"] == pytest.approx(0.7, abs=0.06)
    assert summ["tokens"]["prompt_mean"] > 2 * chat["tokens"]["prompt_mean"]
    assert summ["throughput"]["slo"]["ttft_s"] == 3.0
