"""A run that finished no request is no result: ``simulate`` writes its outputs (so
requests.csv can say why) and then fails with one line giving the counts and reasons."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.cli import main
from sim.report.printed import nothing_finished

SCENARIO = """\
name: t
model: tiny
cost: {{linear: {{step_s: 0.01}}}}
serving: {{policy: continuous, max_num_batched_tokens: {budget}}}
workload:
  arrivals: {{process: constant, rate: 1}}
  lengths: {{prompt: {{dist: fixed, value: 64}}, output: {{dist: fixed, value: 2}}}}
  num_requests: 3
"""


def run(tmp_path: Path, budget: int, capsys: pytest.CaptureFixture[str],
        *extra: str) -> tuple[int, str]:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(budget=budget))
    rc = main(["simulate", str(path), "--out", str(tmp_path / "o"), "--quiet", *extra])
    return rc, capsys.readouterr().err


def test_a_run_that_rejects_every_request_fails_after_writing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 64-token prompts can never fit a 32-token iteration under continuous batching.
    rc, err = run(tmp_path, 32, capsys)
    assert rc == 2  # first for the share rejected, naming the limit to raise
    assert ("raise serving.max_num_batched_tokens (now 32; vLLM's --max-num-batched-tokens) "
            "to at least 64" in err)
    rc, err = run(tmp_path, 32, capsys, "--allow-rejections")
    assert rc == 2  # allowed, but still no result
    assert ("no request finished: 3 of 3 rejected (prompt_exceeds_max_num_batched_tokens 3)"
            in err)
    assert "UserWarning" not in err  # the empty CDF plot says so instead of warning
    lines = (tmp_path / "o" / "requests.csv").read_text().splitlines()
    assert len(lines) == 4 and all("prompt_exceeds_max_num_batched_tokens" in x
                                   for x in lines[1:])


def test_a_run_that_finishes_requests_succeeds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = run(tmp_path, 128, capsys)
    assert rc == 0 and err == ""


def test_the_reasons_given() -> None:
    base = {"total": 5, "finished": 0, "rejected": 2, "unfinished": 3,
            "rejected_by_reason": {"exceeds_kv_capacity": 2}}
    assert nothing_finished({"requests": base}) == (
        "no request finished: 2 of 5 rejected (exceeds_kv_capacity 2), 3 unfinished; the "
        "outputs were written, requests.csv gives each request's reason")
    none_sent = {**base, "total": 0, "rejected": 0, "unfinished": 0, "rejected_by_reason": {}}
    assert nothing_finished({"requests": none_sent}) == "the workload sent no request"
    assert nothing_finished({"requests": {**base, "finished": 1}}) is None
