"""Chunked streaming (vLLM's --stream-interval, sim/core/streaming.py): the first token at
once, then a chunk every N tokens and the rest at the finish; ITL is one gap a chunk,
TTFT/TPOT/E2E do not move; SGLang's (stream_first_token false) holds the first token for
the first chunk, which sets TTFT; the decode set's lazy chunks equal request-by-request
ones."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import assert_equivalent, chunk_budget, eager_run, lazy_and_eager, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config import scenario
from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.core.request import FINISHED, UNFINISHED
from sim.errors import ServesimError
from sim.report.metrics import per_request
from sim.report.summary import summarize
from sim.workload.requests import Requests

ROOT = Path(__file__).resolve().parent.parent


def _one(interval: int, output: int = 11, first_token: bool = True) -> object:
    # One request alone: an 8-token prompt prefilled in one 10 ms step, then one token
    # every 10 ms step (linear cost: 10 ms a step, no per-token term).
    sc = tiny_scenario(cost={"linear": {"step_s": 0.01, "per_new_token_s": 0.0}},
                       serving={"stream_interval": interval,
                                "stream_first_token": first_token},
                       workload={"lengths": {"prompt": {"dist": "fixed", "value": 8},
                                             "output": {"dist": "fixed", "value": output}}})
    return simulate(sc)


def test_chunks_by_hand() -> None:
    # 11 tokens at 10, 20, ..., 110 ms. N = 4: the first at once (10 ms), then tokens
    # 5 and 9 (50, 90 ms), then the last two with token 11 (110 ms): gaps 40, 40, 20 ms.
    res = _one(4)
    itl = summarize(res)["latency_s"]["itl"]
    assert itl["mean"] == pytest.approx((0.04 + 0.04 + 0.02) / 3)
    assert itl["max"] == pytest.approx(0.04)
    assert res.itl.total == 3
    # N = 1: ten gaps of 10 ms; TTFT, TPOT and E2E the same either way.
    plain = _one(1)
    assert plain.itl.total == 10
    a, b = per_request(res), per_request(plain)
    for key in ("ttft", "tpot", "e2e"):
        np.testing.assert_array_equal(a[key], b[key])
    # A last chunk that is full sends nothing more: 9 tokens at N = 4 are 1 | 2-5 | 6-9.
    assert _one(4, output=9).itl.total == 2
    # Fewer tokens than one chunk past the first: one gap, first to last token.
    short = _one(20)
    assert short.itl.total == 1 and summarize(short)["latency_s"]["itl"]["max"] == \
        pytest.approx(0.10)


def test_first_chunk_by_hand() -> None:
    # SGLang's --stream-interval 4: tokens at 10, 20, ..., 110 ms go out with tokens 4 and
    # 8 (40, 80 ms) and the last three with token 11 (110 ms). The client's first token is
    # the first chunk's: TTFT 40 ms, not 10; then gaps of 40 and 30 ms, and TPOT over the
    # other ten tokens (110 - 40) / 10 = 7 ms, not 10.
    res = _one(4, first_token=False)
    lat = per_request(res)
    assert lat["ttft"][0] == pytest.approx(0.04)
    assert lat["tpot"][0] == pytest.approx(0.007)
    assert lat["e2e"][0] == pytest.approx(0.11)
    assert res.itl.total == 2
    assert summarize(res)["latency_s"]["itl"]["max"] == pytest.approx(0.04)
    # Output shorter than a chunk: one send, at the finish (30 ms).
    short = _one(4, output=3, first_token=False)
    assert per_request(short)["ttft"][0] == pytest.approx(0.03)
    assert short.itl.total == 0
    # A chunk of one token is a send a token, first alone or not.
    a, b = per_request(_one(1, first_token=False)), per_request(_one(1))
    for key in ("ttft", "tpot", "e2e"):
        np.testing.assert_array_equal(a[key], b[key])


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(("continuous", "chunked", "static", "orca")), st.integers(2, 9),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.integers(8, 60), st.booleans(), st.booleans())
def test_lazy_chunks_equal_eager(policy: str, interval: int, rows: list[tuple], blocks: int,
                                 swap: bool, first_token: bool) -> None:
    # Small KV caches force preemptions: the set settles members mid-chunk and they go on
    # request by request, then join again.
    rows = sorted(rows)
    sc = tiny_scenario(serving={"policy": policy, "block_size": 4, "num_kv_blocks": blocks,
                                "max_num_seqs": 5, "stream_interval": interval,
                                "stream_first_token": first_token,
                                "preemption": "swap" if swap else "recompute"})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(("continuous", "chunked")), st.integers(1, 5), st.floats(0, 1),
       st.integers(2, 9),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 60)),
                min_size=1, max_size=14),
       st.integers(12, 60), st.booleans(), st.integers(6, 24), st.booleans())
def test_lazy_chunks_of_verifies_equal_eager(policy: str, k: int, a: float, interval: int,
                                             rows: list[tuple], blocks: int, swap: bool,
                                             budget: int, first_token: bool) -> None:
    # Verifies emit 1 to k + 1 tokens: a chunk goes out after the verify that brings N
    # unsent ones. Small budgets cut verifies short; small caches force flushes.
    rows = sorted(rows)
    sc = tiny_scenario(model={"preset": "tiny", "mtp_layers": 1}, serving={
        "policy": policy, "block_size": 4, "num_kv_blocks": blocks, "max_num_seqs": 5,
        **chunk_budget(policy, max(budget, 4, k + 1)),
        "preemption": "swap" if swap else "recompute",
        "stream_interval": interval, "stream_first_token": first_token,
        "speculative": {"method": "mtp", "num_tokens": k, "acceptance": {"rate": a}}})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)


@pytest.mark.parametrize("name, extra", [
    ("quickstart.yaml", []), ("policies-disaggregated.yaml", []),
    ("faults-n-plus-1.yaml", []), ("quickstart.yaml", ["hardware.pp=2", "hardware.tp=1"]),
    ("speculative-eagle.yaml", [])])
def test_shipped_scenarios_stream_in_chunks_lazy_equal_eager(name: str,
                                                             extra: list[str]) -> None:
    sc = scenario.load(ROOT / "scenarios" / name,
                       ["workload.num_requests=300", "serving.stream_interval=7", *extra])
    ref = simulate(sc)
    assert_equivalent(ref, eager_run(sc))
    # Chunks of 7: far fewer gaps than one a token (or a verify of 2.5 tokens on average),
    # and TTFT and TPOT as without chunks.
    plain = simulate(scenario.load(ROOT / "scenarios" / name,
                                   ["workload.num_requests=300", *extra]))
    assert ref.itl.total < plain.itl.total / 2
    a, b = per_request(ref), per_request(plain)
    for key in ("ttft", "tpot"):
        np.testing.assert_array_equal(a[key], b[key])


def test_vllm_flag_sets_the_interval_and_a_bad_value_is_an_error() -> None:
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01}},
           "vllm": {"stream-interval": 20},
           "workload": {"arrivals": {"process": "poisson", "rate": 1}, "num_requests": 2,
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 4}}}}
    assert from_dict(raw, "<t>").serving.stream_interval == 20
    with pytest.raises(ServesimError, match="stream_interval"):
        from_dict({**raw, "vllm": {}, "serving": {"stream_interval": 0}}, "<t>")


def test_end_times_forget_what_no_member_needs() -> None:
    # Past TRIM_AT stored times the set drops those before its oldest member's join tick.
    from sim.core.request import Request
    from sim.core.streaming import TRIM_AT, EndTimes

    ends = EndTimes()
    old, new = Request(0, 0.0, 8, 4), Request(1, 0.0, 8, 4)
    old.sync, new.sync = 1000, TRIM_AT - 5
    members = {TRIM_AT + 3: [new], TRIM_AT + 9: [old]}
    for t in range(TRIM_AT - 1):
        ends.store(0.5 * t, members)
    assert (ends.base, len(ends.times)) == (0, TRIM_AT - 1)
    ends.store(0.5 * (TRIM_AT - 1), members)
    assert (ends.base, len(ends.times)) == (1000, TRIM_AT - 1000)
    assert ends.at(1000) == 500.0 and ends.at(TRIM_AT - 1) == 0.5 * (TRIM_AT - 1)
    # The next look is at twice what was kept; with the same member still there it
    # forgets nothing and waits for twice as many again (amortised O(1) a tick).
    kept = TRIM_AT - 1000
    assert ends.limit == 2 * kept
    for t in range(TRIM_AT, TRIM_AT + kept):
        ends.store(0.5 * t, members)
    assert (ends.base, len(ends.times), ends.limit) == (1000, 2 * kept, 4 * kept)


def test_summary_and_report_say_itl_is_per_chunk(tmp_path: Path, capsys) -> None:
    import json

    import yaml

    from sim.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "chunks", "model": "tiny", "cost": {"linear": {"step_s": 0.01}},
        "vllm": {"stream-interval": 4},
        "workload": {"arrivals": {"process": "poisson", "rate": 5}, "num_requests": 20,
                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                 "output": {"dist": "fixed", "value": 11}}}}))
    out = tmp_path / "out"
    assert main(["simulate", str(path), "--out", str(out), "--no-plots"]) == 0
    assert "itl: one gap per streamed chunk of 4 tokens (stream_interval)" in \
        capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"]["pools"]["both"]["stream_interval"] == 4
    assert main(["report", str(out), "--format", "md"]) == 0
    assert "stream_interval 4 (ITL per chunk)" in (out / "report.md").read_text()


def _closed(first_token: bool, **workload: object) -> object:
    # Closed-loop clients bounded by a duration: the engine grows its per-request arrays
    # as they send, past the 4,096 it starts with.
    raw = yaml.safe_load((ROOT / "scenarios" / "closed-loop.yaml").read_text())
    raw["cost"] = "roofline"
    raw["workload"].pop("num_requests")
    raw["workload"].update(duration_s=60.0, **workload)
    raw["workload"]["lengths"] = {"prompt": {"dist": "fixed", "value": 128},
                                  "output": {"dist": "fixed", "value": 32}}
    raw["serving"].update(stream_interval=8, stream_first_token=first_token)
    return simulate(from_dict(raw, "<closed loop>"))


def test_first_chunks_of_a_growing_closed_loop() -> None:
    late, soon = _closed(False), _closed(True)
    n = len(late.first_token)
    assert n > 4096 and n == len(soon.first_token)
    done = (late.status == FINISHED) & (soon.status == FINISHED)
    # Every finished request's first chunk came with its 8th token, after its first.
    assert np.all(late.first_token[done] > soon.first_token[done])


def test_a_horizon_settles_the_chunks_sent_before_it() -> None:
    def run(first_token: bool) -> object:
        raw = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
        raw["workload"]["duration_s"] = 40
        raw["horizon_s"] = 30.0
        raw["serving"].update(stream_interval=16, stream_first_token=first_token)
        return simulate(from_dict(raw, "<horizon>"))

    late, soon = run(False), run(True)
    cut = late.status == UNFINISHED
    sent = cut & np.isfinite(late.first_token)
    # Requests still running at the horizon whose first chunk went out before it carry
    # that chunk's time, not their prefill's; the rest carry none.
    assert sent.any()
    assert np.all(late.first_token[sent] > soon.first_token[sent])
    assert np.all(late.first_token[sent] <= 30.0)
