"""``servesim validate``: the vLLM-result import and its arithmetic, checked by hand, and
the real path (replay on CPU, simulate, compare) end to end on a short trace."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import e2e

from sim.errors import ServesimError
from sim.validate import vllm_results
from sim.validate.command import main

FIXTURE = Path(__file__).parent / "fixtures" / "vllm" / "bench_detailed.json"
# Every request of the fixture arrives alone (start_times 10 s apart), so under this
# linear cost the prediction is exact arithmetic: TTFT = 0.01 + 0.001·prompt and one
# decode step = 0.011 s.
SCENARIO = {
    "name": "vllm-check", "model": "tiny",
    "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
    "serving": {"max_num_batched_tokens": 256, "num_kv_blocks": 64},
    "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                 "lengths": {"prompt": {"dist": "fixed", "value": 8},
                             "output": {"dist": "fixed", "value": 2}}, "num_requests": 1},
}


def test_vllm_result_is_read_with_vllm_definitions() -> None:
    run = vllm_results.load(FIXTURE)
    assert run.failed.tolist() == [False, False, False, True]
    np.testing.assert_allclose(run.arrival_s, [0.0, 10.0, 20.0, 25.0])
    np.testing.assert_allclose(run.e2e_s[:3], [0.194, 0.080, 0.313])
    assert np.isnan(run.e2e_s[3])
    assert "start_times" in run.arrivals_note
    assert any("1 of 4 requests failed" in n for n in run.notes)
    assert run.meta["aggregates_ms"]["median_ttft_ms"] == 150.0


def test_vllm_arrivals_are_reconstructed_when_not_saved() -> None:
    data = json.loads(FIXTURE.read_text())
    del data["start_times"]
    a = vllm_results.parse(data, "<t>", seed=3)
    b = vllm_results.parse(data, "<t>", seed=3)
    assert a.arrival_s[0] == 0.0 and np.all(np.diff(a.arrival_s) > 0)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    assert "with --seed 3 (Poisson at 0.2 req/s" in a.arrivals_note
    data["request_rate"] = "inf"
    assert vllm_results.parse(data, "<t>").arrival_s.tolist() == [0.0] * 4
    del data["itls"]
    with pytest.raises(ServesimError, match="save-detailed"):
        vllm_results.parse(data, "<t>")


def test_vllm_comparison_arithmetic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    assert main(["--vllm-result", str(FIXTURE), "--scenario", str(sc), "--out", str(out),
                 "--no-plots"]) == 0
    level = json.loads((out / "validation.json").read_text())["levels"][0]
    cmp = level["comparison"]
    assert cmp["compared"] == 3 and cmp["failed_in_vllm"] == 1
    m = cmp["metrics"]
    # Real: TTFT [0.15, 0.05, 0.30], TPOT [0.011, 0.015, 0.013], E2E [0.194, 0.080, 0.313].
    # Predicted: TTFT [0.11, 0.06, 0.21], TPOT 0.011 each, E2E [0.154, 0.082, 0.221].
    expect = {("ttft", "p50"): (0.150, 0.110), ("ttft", "p90"): (0.270, 0.190),
              ("tpot", "p50"): (0.013, 0.011), ("tpot", "p90"): (0.0146, 0.011),
              ("e2e", "p50"): (0.194, 0.154), ("e2e", "p99"): (0.31062, 0.21966)}
    for (metric, q), (real, pred) in expect.items():
        row = m[metric][q]
        assert row["real"] == pytest.approx(real, rel=1e-9)
        assert row["predicted"] == pytest.approx(pred, rel=1e-9)
        assert row["rel_err"] == pytest.approx((pred - real) / real, rel=1e-9)
    assert level["verdict"]["worst"] == pytest.approx(abs((0.19 - 0.27) / 0.27))
    assert level["cross_check"]["median_ttft_ms"] == {"vllm": 150.0,
                                                      "from_requests": pytest.approx(150.0)}
    rows = (out / "real-vllm.csv").read_text().splitlines()
    assert len(rows) == 4  # header + the three requests that did not fail
    text = capsys.readouterr().out
    assert "failed in vLLM: 1" in text and "-26.7%" in text


def _predicted(tmp_path: Path, edits: dict[str, object], name: str) -> list[dict[str, str]]:
    """predicted-vllm.csv of the fixture with ``edits`` (None removes a key)."""
    data = json.loads(FIXTURE.read_text())
    for k, v in edits.items():
        if v is None:
            data.pop(k)
        else:
            data[k] = v
    result = tmp_path / f"{name}.json"
    result.write_text(json.dumps(data))
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / name
    assert main(["--vllm-result", str(result), "--scenario", str(sc), "--out", str(out),
                 "--no-plots"]) == 0
    return list(csv.DictReader((out / "predicted-vllm.csv").open()))


def test_vllm_concurrency_cap_is_simulated_as_the_benchmark_client(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--max-concurrency 1 --request-rate inf``: one client sends each request when the
    one before has ended. Alone, each takes its prefill (10 ms + 1 ms a token) and then
    11 ms a token: request 0 (100/5) ends at 154 ms, request 1 (50/3) is sent then and
    ends at 236 ms, request 2 (200/2) is sent then."""
    rows = _predicted(tmp_path, {"request_rate": "inf", "start_times": None,
                                 "max_concurrency": 1}, "capped")
    assert [float(r["arrival_s"]) for r in rows] == pytest.approx([0.0, 0.154, 0.236])
    assert [float(r["ttft_s"]) for r in rows] == pytest.approx([0.110, 0.060, 0.210])
    text = capsys.readouterr().out
    assert "max_concurrency 1: predicted with 1 client, each request sent when it is due " \
           "(0 s, request_rate inf) and a client is free" in text
    assert "request_rate inf: every request due at 0 s" in text
    # Uncapped, all three are sent at 0 s and share the 256-token budget: 100 + 50 + 106
    # tokens (266 ms), then two decodes and the last 94 (106 ms).
    rows = _predicted(tmp_path, {"request_rate": "inf", "start_times": None}, "open")
    assert [float(r["arrival_s"]) for r in rows] == [0.0, 0.0, 0.0]
    assert [float(r["ttft_s"]) for r in rows] == pytest.approx([0.266, 0.266, 0.372])
    # Paced at a rate and capped: due at the file's send times (0, 50, 100 ms), each
    # waits for the client, which the request before holds until 154 and 236 ms.
    rows = _predicted(tmp_path, {"start_times": [100.0, 100.05, 100.1, 125.0],
                                 "max_concurrency": 1}, "paced")
    assert [float(r["arrival_s"]) for r in rows] == pytest.approx([0.0, 0.154, 0.236])
    assert "due (its send time in the file)" in capsys.readouterr().out


def test_several_vllm_results_are_a_level_each(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A sweep's files, one level each, named after the files (a name given twice gets
    ~2), every one predicted as its own client sent it; the levels' files all written."""
    data = json.loads(FIXTURE.read_text())
    capped = {**data, "request_rate": "inf", "max_concurrency": 1}
    del capped["start_times"]
    (tmp_path / "a").mkdir()
    paths = [tmp_path / "c1.json", tmp_path / "open.json", tmp_path / "a" / "open.json"]
    for path, blob in zip(paths, (capped, data, data), strict=True):
        path.write_text(json.dumps(blob))
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    assert main(["--vllm-result", *map(str, paths), "--scenario", str(sc), "--out", str(out),
                 "--no-plots"]) == 0
    levels = json.loads((out / "validation.json").read_text())["levels"]
    assert [lv["label"] for lv in levels] == ["vllm-c1", "vllm-open", "vllm-open~2"]
    assert [lv["source"] for lv in levels] == list(map(str, paths))
    pred = list(csv.DictReader((out / "predicted-vllm-c1.csv").open()))
    assert [float(r["arrival_s"]) for r in pred] == pytest.approx([0.0, 0.154, 0.236])
    for label in ("vllm-open", "vllm-open~2"):
        pred = list(csv.DictReader((out / f"predicted-{label}.csv").open()))
        assert [float(r["arrival_s"]) for r in pred] == [0.0, 10.0, 20.0]
    text = capsys.readouterr().out
    assert text.count("== vLLM vllm hand-made/tiny") == 3
    # --no-plots writes none, and the last line had said it wrote plots.
    assert f"per-level CSVs in {out}\n" in text and "plots" not in text
    # The option repeated adds its files: none is dropped in favour of the last.
    again = tmp_path / "again"
    assert main(["--vllm-result", str(paths[0]), "--vllm-result", *map(str, paths[1:]),
                 "--scenario", str(sc), "--out", str(again), "--no-plots"]) == 0
    assert [lv["label"] for lv in json.loads((again / "validation.json").read_text())
            ["levels"]] == ["vllm-c1", "vllm-open", "vllm-open~2"]
    # The sweep at a glance: one line a level, real / predicted p50s (ms), the verdict.
    rows = text.split("levels (real / predicted, ms):\n")[1].splitlines()
    assert rows[2].split() == ["vllm-c1", "inf", "1", "150.0", "/", "110.0", "13.0", "/",
                               "11.0", "29.6%", "OVER", "the", "10%", "bar"]
    assert rows[3].split()[:3] == ["vllm-open", "0.2", "-"]


def test_vllm_result_client_replaces_a_closed_loop_scenario(tmp_path: Path) -> None:
    """The file's client decides when requests go, not the scenario's workload: a
    scenario of one closed-loop client still predicts the uncapped run's requests at
    their send times (0, 50 and 100 ms; one client would hold them to 154 and 236 ms)."""
    data = json.loads(FIXTURE.read_text())
    data["start_times"] = [100.0, 100.05, 100.1, 125.0]
    result = tmp_path / "r.json"
    result.write_text(json.dumps(data))
    sc = {**SCENARIO, "workload": {"concurrency": 1, "num_requests": 4,
                                   "lengths": SCENARIO["workload"]["lengths"]}}
    path = tmp_path / "closed.yaml"
    path.write_text(yaml.safe_dump(sc))
    out = tmp_path / "o"
    assert main(["--vllm-result", str(result), "--scenario", str(path), "--out", str(out),
                 "--no-plots"]) == 0
    rows = list(csv.DictReader((out / "predicted-vllm.csv").open()))
    assert [float(r["arrival_s"]) for r in rows] == pytest.approx([0.0, 0.05, 0.1])


def test_step_diagnostics_split_device_and_host_time() -> None:
    """Executor seconds are priced without the profile's host part; the loop's recorded
    host seconds are set against that part."""
    from sim.cost.presets import MODELS
    from sim.cost.profile import FORMS
    from sim.cost.profilecost import ProfileCost
    from sim.cost.shape import StepShape, decode_shape, shape_of
    from sim.validate.validation import step_errors

    coefs = {k: dict.fromkeys(f.coefs, 0.0) for k, f in FORMS.items()}
    coefs["step"]["const_s"] = 1e-3
    coefs["host"] = {"const_s": 2e-5, "per_seq_s": 1e-6}
    cost = ProfileCost(MODELS["tiny"], 1, "t", "fp32", coefs)
    shapes = [decode_shape(1, 10), decode_shape(3, 30), shape_of([(50, 0)])]
    steps = {f: np.array(col, dtype=float)
             for f, col in zip(StepShape._fields, zip(*shapes, strict=True), strict=True)}
    steps.update({"start_s": np.array([0.0, 0.01, 0.02]),
                  "end_s": np.array([0.0012, 0.0112, 0.0212]),
                  "exec_s": np.full(3, 1.1e-3), "host_s": np.array([3e-5, 4e-5, 2e-5])})
    out = step_errors(steps, cost)
    assert out["exec_predicted_s"] == pytest.approx(3e-3)
    assert out["decode_only"]["predicted_s"] == pytest.approx(2e-3)
    assert out["decode_only"]["median_rel_err"] == pytest.approx(1e-3 / 1.1e-3 - 1)
    assert out["host"]["real_s"] == pytest.approx(9e-5)
    assert out["host"]["predicted_s"] == pytest.approx(3 * 2e-5 + 1e-6 * (1 + 3 + 1))
    del steps["host_s"]  # a record from before the loop timed its host work
    assert "host" not in step_errors(steps, cost)


def test_speed_matched_cost_scales_the_device_part_by_kind() -> None:
    """Prefill steps (and waking) by one factor, decode-only steps by another, host as
    priced; scalar and array shapes alike; a level without one kind of step keeps that
    factor at 1."""
    from sim.cost.presets import MODELS
    from sim.cost.profile import FORMS
    from sim.cost.profilecost import ProfileCost
    from sim.cost.shape import StepShape, decode_shape, shape_of
    from sim.validate.validation import SpeedMatched, speed_factors

    coefs = {k: dict.fromkeys(f.coefs, 0.0) for k, f in FORMS.items()}
    coefs["step"]["const_s"] = 1e-3
    coefs["host"] = {"const_s": 2e-5, "per_seq_s": 0.0}
    base = ProfileCost(MODELS["tiny"], 1, "t", "fp32", coefs, wake={"max_s": 1e-3, "tau_s": 0.1})
    cost = SpeedMatched(base, 1.5, 0.5)
    assert cost.wake_time(0.1) == pytest.approx(1.5e-3 * -math.expm1(-1.0))
    assert cost.step_time(decode_shape(2, 40)) == pytest.approx(0.5e-3 + 2e-5)
    assert cost.step_time(shape_of([(30, 0), (1, 9)])) == pytest.approx(1.5e-3 + 2e-5)
    both = StepShape(*(np.array(col, dtype=float) for col in zip(
        decode_shape(2, 40), shape_of([(30, 0)]), strict=True)))
    np.testing.assert_allclose(cost.step_time(both), [0.52e-3, 1.52e-3])
    summary = {"with_prefill": {"iterations": 0, "real_s": 0.0, "predicted_s": 0.0},
               "decode_only": {"iterations": 5, "real_s": 3.0, "predicted_s": 2.0}}
    assert speed_factors(summary) == (1.0, 1.5)


@pytest.fixture(scope="module")
def profile(cpu_calibration) -> Path:
    """The suite's one quick calibration of tiny on CPU (tests/conftest.py); its accuracy
    is not what is tested."""
    return cpu_calibration[0].profile_path


def _columns(path: Path) -> dict[str, np.ndarray]:
    """A per-request CSV (sim.report.outputs.requests_csv) as columns of strings."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def _seconds(cells: np.ndarray) -> np.ndarray:
    return np.array([float(c) if c else np.nan for c in cells])


@e2e
def test_validate_real_path_on_cpu(profile: Path, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Replay, simulate, compare at two rates. How close the prediction comes is not
    asserted (a busy 2-core machine slows the real side several-fold; the 15% bar is the
    command's, and bench/bench_calibrate.py reports the error): the comparison is checked
    against the per-request CSVs it was made from."""
    out = tmp_path / "v"
    threads = torch.get_num_threads()
    try:
        rc = main(["--model", "tiny", "--device", "cpu", "--profile", str(profile),
                   "--requests", "16", "--max-len", "512", "--rate", "4,12", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    assert rc == 0
    levels = json.loads((out / "validation.json").read_text())["levels"]
    assert [lv["rate_rps"] for lv in levels] == [4.0, 12.0]
    for lv in levels:
        cmp = lv["comparison"]
        assert cmp["compared"] == 16 and cmp["real"]["finished"] == 16
        real, pred = (_columns(out / f"{name}-{lv['label']}.csv") for name in ("real",
                                                                               "predicted"))
        both = (real["status"] == "finished") & (pred["status"] == "finished")
        assert both.sum() == 16
        for metric in ("ttft", "tpot", "e2e"):
            rs, ps = (_seconds(c[f"{metric}_s"]) for c in (real, pred))
            ok = both & np.isfinite(rs) & np.isfinite(ps)
            for q in (50, 90, 99):
                row = cmp["metrics"][metric][f"p{q}"]
                r, p = np.percentile(rs[ok], q), np.percentile(ps[ok], q)
                assert r > 0 and p > 0
                # The CSVs keep nanoseconds.
                assert row["real"] == pytest.approx(r, abs=2e-9), (metric, q)
                assert row["predicted"] == pytest.approx(p, abs=2e-9), (metric, q)
                assert row["rel_err"] == pytest.approx((p - r) / r, rel=1e-4, abs=1e-6)
        assert lv["steps"]["iterations"] > 16
        # Fixed steps timed around the level, priced by the profile.
        assert len(lv["probe"]) == 3
        for p in lv["probe"].values():
            assert min(p["before_s"], p["after_s"], p["predicted_s"]) > 0
        # The same requests priced at the level's measured speed (a diagnostic).
        sm = lv["speed_matched"]
        assert sm["prefill_factor"] > 0 and sm["decode_factor"] > 0
        assert sm["comparison"]["compared"] == 16
        assert lv["sensitivity"]["factors"] == [0.95, 1.05]
        assert all(len(v) == 2 for rows in lv["sensitivity"]["metrics"].values()
                   for v in rows.values())
        for name in ("real", "predicted"):
            assert (out / f"{name}-{lv['label']}.csv").is_file()
        assert (out / f"cdf-{lv['label']}.png").stat().st_size > 1000
    text = capsys.readouterr().out
    assert text.count("rel err") == 2 and "bar" in text and text.count("probe steps") == 2
    assert text.count("speed-matched") == 2 and text.count("sensitivity:") == 2
    # The recorded replays compare again without re-running the model.
    replays = sorted(str(p) for p in out.glob("replay-*.json"))
    assert main(["--replay", *replays, "--profile", str(profile), "--out", str(tmp_path / "r"),
                 "--no-plots"]) == 0
    again = json.loads((tmp_path / "r" / "validation.json").read_text())["levels"]
    assert {lv["label"]: lv["comparison"] for lv in again} == {
        lv["label"]: lv["comparison"] for lv in levels}
    # A level the replay was interrupted in: what finished is compared, nothing judged.
    rec = json.loads(Path(replays[0]).read_text())
    rq = rec["requests"]
    for i in range(11, 16):
        rq["status"][i], rq["finish_s"][i] = "unfinished", None
    cut = tmp_path / "replay-cut.json"
    cut.write_text(json.dumps(rec))
    capsys.readouterr()
    assert main(["--replay", str(cut), "--profile", str(profile), "--out", str(tmp_path / "c"),
                 "--no-plots"]) == 0
    lv = json.loads((tmp_path / "c" / "validation.json").read_text())["levels"][0]
    assert lv["comparison"]["compared"] == 11 and lv["comparison"]["real"]["unfinished"] == 5
    assert lv["verdict"]["passed"] is None
    assert lv["verdict"]["why"] == "the real run was interrupted with 5 of 16 requests unfinished"
    assert "not judged (the real run was interrupted" in capsys.readouterr().out


def test_vllm_run_of_one_token_outputs_is_not_judged(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """One output token per request: no TPOT on either side, so no verdict; it had been
    written as ``passed: false`` with no worst error."""
    data = json.loads(FIXTURE.read_text())
    data.update(output_lens=[1, 1, 1, 0], itls=[[], [], [], []])
    result = tmp_path / "one.json"
    result.write_text(json.dumps(data))
    sc = tmp_path / "s.yaml"
    sc.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    assert main(["--vllm-result", str(result), "--scenario", str(sc), "--out", str(out),
                 "--no-plots"]) == 0
    verdict = json.loads((out / "validation.json").read_text())["levels"][0]["verdict"]
    assert verdict["passed"] is None and verdict["worst"] is None
    assert verdict["why"].startswith("no compared request has a TPOT")
    assert "TTFT/TPOT p50+p90: not judged (no compared request has a TPOT" in \
        capsys.readouterr().out


def test_the_saturation_line_names_where_the_profile_will_be(monkeypatch) -> None:
    """validate without --profile calibrates into its temporary folder, renamed when the
    run ends: the line had named the temporary path, which no longer exists after."""
    import calibrate.replay_cli as rc
    import sim.cost.profilefile as pf

    monkeypatch.setattr(pf, "load_profile", lambda ref, base=None: object())
    monkeypatch.setattr(rc, "saturation_rate", lambda *args: 10.0)
    args = rc.parser().parse_args(["--model", "tiny", "--requests", "5", "--profile",
                                   "/out.tmp-1/p.yaml", "--out", "/unused"])
    said: list[str] = []
    rates = rc.prepare_levels(args, said.append, "/out/p.yaml")[3]
    assert rates == [5.0, 8.5]
    assert said == ["predicted saturation: 10 req/s for these requests (/out/p.yaml)"]
