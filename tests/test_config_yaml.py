"""Scenario files as a user writes them: a key given twice is an error naming its line,
numbers with an exponent (``1e9``, ``5e-1``) are numbers, and a scenario name that is
not one plain folder name cannot send the outputs outside ``out/``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sim.cli import main
from sim.config.scenario import load
from sim.configtools import parse_yaml
from sim.errors import ServesimError
from sim.report.outputs import default_out
from sim.study.sweeppoint import read_raw

SCENARIO = """\
name: {name}
model: tiny
cost: {{linear: {{step_s: 0.01}}}}
workload:
  arrivals: {{process: poisson, rate: {rate}}}
  lengths: {{prompt: {{dist: fixed, value: 8}}, output: {{dist: fixed, value: 2}}}}
  num_requests: 5
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, line, key", [
    ("model: tiny\nmodel: tiny\nworkload: {}\n", 2, "model"),
    ("model: tiny\nworkload:\n  seed: 1\n  num_requests: 4\n  seed: 2\n", 5, "seed"),
    ("a: {x: 1, x: 2}\n", 1, "x"),
])
def test_a_key_given_twice_is_an_error_naming_its_line(tmp_path: Path, text: str, line: int,
                                                       key: str) -> None:
    with pytest.raises(ServesimError) as exc:
        load(write(tmp_path, text))
    assert f"line {line}: invalid YAML: key '{key}' given twice" in str(exc.value)
    with pytest.raises(ServesimError, match=f"line {line}: invalid YAML: key '{key}'"):
        read_raw(write(tmp_path, text))  # sweep and capacity read files this way


@pytest.mark.parametrize("text, line, message", [
    ("? [a, b]\n: 1\nmodel: tiny\n", 1, "key ['a', 'b'] is a list; keys are names"),
    ("workload: {? {x: 1}: 2}\n", 1, "key {'x': 1} is a dict; keys are names"),
    ("base: &b {name: x}\nmodel: tiny\n<<: *b\n", 3, "merge keys (<<) are not supported"),
])
def test_keys_that_are_not_names_are_errors_naming_their_line(tmp_path: Path, text: str,
                                                              line: int, message: str) -> None:
    with pytest.raises(ServesimError) as exc:
        load(write(tmp_path, text))
    assert f"line {line}: invalid YAML: {message}" in str(exc.value)


def test_numbers_with_an_exponent_are_numbers(tmp_path: Path) -> None:
    assert parse_yaml("a: 1e9\nb: 5e-1\nc: -2E+3\nd: '1e3'\ne: x1e5\nf: 12\ng: 1.5e3") == {
        "a": 1e9, "b": 0.5, "c": -2000.0, "d": "1e3", "e": "x1e5", "f": 12, "g": 1500.0}
    sc = load(write(tmp_path, SCENARIO.format(name="ok", rate="1e9")), ["slo.ttft_s=5e-1"])
    assert sc.workload.arrivals is not None and sc.workload.arrivals.rate == 1e9
    assert sc.slo.ttft_s == 0.5


def test_a_name_too_long_for_a_folder_is_blamed_on_name_not_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """A 300-character name had failed as '--out out/aaa...: File name too long', an
    option the user never gave."""
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SCENARIO.format(name="a" * 300, rate=1))
    assert main(["simulate", str(path), "--no-plots", "--quiet"]) == 2
    assert capsys.readouterr().err == (
        f"servesim: error: {path}: name: scenario name '{'a' * 40}\u2026' (300 characters) is "
        "too long to name a folder under out/: at most 240 bytes, as file systems take 255 "
        "and the run's .tmp-<pid> folder beside it adds 15; rename the scenario or give "
        "--out DIR\n")
    assert default_out("a" * 240) == Path("out") / ("a" * 240)
    with pytest.raises(ServesimError, match="at most 240 bytes with '-sweep'"):
        default_out("a" * 235, "-sweep")


@pytest.mark.parametrize("name", ["../../tmp/evil", "a/b", "..", "a\\b", " ", " a"])
def test_a_name_that_is_not_one_folder_cannot_choose_where_outputs_go(
        tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ServesimError, match="cannot name a folder under out/"):
        default_out(name)
    path = write(tmp_path, SCENARIO.format(name=f"'{name}'", rate=1))
    assert main(["simulate", str(path)]) != 0
    err = capsys.readouterr().err
    assert f"{path}: name: scenario name" in err and "give --out DIR" in err
    assert not (tmp_path / "tmp").exists()
    # With --out the name is only a label.
    assert main(["simulate", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 0


def test_a_plain_name_gives_out_slash_name() -> None:
    assert default_out("quickstart") == Path("out") / "quickstart"
    assert default_out("step-load", "-sweep") == Path("out") / "step-load-sweep"


@pytest.mark.parametrize("serving, key, got", [
    ("{max_num_batched_tokens: 1}", "max_num_batched_tokens", 1),
    ("{token_budget: 8, max_num_batched_tokens: 64}", "token_budget", 8),
])
def test_a_chunk_budget_below_a_block_names_the_key_that_set_it(
        tmp_path: Path, serving: str, key: str, got: int) -> None:
    text = SCENARIO.format(name="b", rate=1) + f"serving: {serving}\n"
    with pytest.raises(ServesimError) as exc:
        load(write(tmp_path, text))
    assert f"serving.{key}: got {got}: chunked's per-iteration token budget must be at " \
           "least block_size 16" in str(exc.value)


@pytest.mark.parametrize("more, why", [
    ("cost: {linear: {step_s: 1.0e308, per_new_token_s: 1.0e308}}",
     "the simulated clock reached inf s, past 2e+09 s (63 years), where time stops "
     "resolving a step (steps were priced at infinite or NaN seconds)"),
    # Refused at load since 2026-12-04, before anything runs.
    ("workload: {arrivals: {process: constant, rate: 5, start_s: 1.0e300}, lengths: "
     "{prompt: {dist: fixed, value: 8}, output: {dist: fixed, value: 2}}, num_requests: 3}",
     "workload.arrivals.start_s: got 1e+300, must be at most 1e+09"),
    # A horizon past it had idled a 5-second run's clock out of range, then blamed
    # arrival times, GPU figures or cost coefficients.
    ("horizon_s: 1.0e10", "horizon_s: got 1e+10, must be greater than 0 and at most 1e+09 s "
                          "(31 years, the most the simulated clock resolves, as for every "
                          "workload time)"),
])
def test_a_clock_past_a_billion_seconds_is_refused_not_rounded_to_zero_latencies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], more: str, why: str) -> None:
    # start_s 1e300 once gave every TTFT and TPOT 0.000: a 10 ms step added to 1e300 s
    # rounds away.
    base = SCENARIO.format(name="clock", rate=1)
    if more.startswith("cost"):
        text = base.replace("cost: {linear: {step_s: 0.01}}", more)
    elif more.startswith("horizon_s"):
        text = base + more + "\n"
    else:
        text = base.split("workload:")[0] + more + "\n"
    path = write(tmp_path, text)
    assert main(["simulate", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err, err
    assert not (tmp_path / "o").exists()


def test_a_later_set_of_a_whole_section_cannot_drop_an_earlier_ones_key(tmp_path: Path) -> None:
    path = write(tmp_path, SCENARIO.format(name="s", rate=1))
    sc = load(path, ["model=llama-3-8b", "model.dtype=fp8"])  # a key on the new section
    assert (sc.model.name, sc.model.dtype) == ("llama-3-8b", "fp8")
    with pytest.raises(ServesimError, match=r"--set model=llama-3-8b replaces model, which "
                                            r"--set model.dtype=fp8 changed before it"):
        load(path, ["model.dtype=fp8", "model=llama-3-8b"])


def test_a_linear_cost_of_all_zeros_is_refused(tmp_path: Path) -> None:
    text = SCENARIO.format(name="z", rate=1).replace("cost: {linear: {step_s: 0.01}}",
                                                      "cost: {linear: {}}")
    with pytest.raises(ServesimError, match=r"cost.linear: every coefficient is 0 \(steps "
                                            r"would take no time\)"):
        load(write(tmp_path, text))


@pytest.mark.parametrize("serving, key", [
    ("{policy: chunked, batch_wait_timeout_iters: 5}", "batch_wait_timeout_iters"),
    ("{policy: continuous, batch_wait_max_tokens_ratio: 0.5}", "batch_wait_max_tokens_ratio"),
])
def test_batch_waiting_is_tensorrt_llms_and_needs_policy_orca(tmp_path: Path, serving: str,
                                                              key: str) -> None:
    text = SCENARIO.format(name="w", rate=1) + f"serving: {serving}\n"
    with pytest.raises(ServesimError, match=rf"serving.{key}: TensorRT-LLM's batch waiting "
                                            r"applies to policy orca"):
        load(write(tmp_path, text))
    bad = SCENARIO.format(name="w", rate=1) + \
        "serving: {policy: orca, batch_wait_max_tokens_ratio: 1.5}\n"
    with pytest.raises(ServesimError, match="serving.batch_wait_max_tokens_ratio: got 1.5"):
        load(write(tmp_path, bad))


@pytest.mark.parametrize("serving, key, message", [
    ("{policy: continuous, token_budget: 64}", "token_budget",
     "got 64; a per-iteration token budget applies to policy chunked only, not 'continuous' "
     "(its iterations are bounded by max_num_batched_tokens)"),
    ("{policy: disaggregated, token_budget: 64}", "token_budget",
     "got 64; a per-iteration token budget applies to policy chunked only, not "
     "'disaggregated' (a chunked pool takes its own, "
     "disaggregated.ROLE.token_budget)"),
    ("{policy: chunked, static_batch_size: 5}", "static_batch_size",
     "got 5; requests per batch apply to policy static only, not 'chunked' (max_num_seqs "
     "bounds the running requests)"),
])
def test_a_policys_own_key_under_another_policy_is_refused(tmp_path: Path, serving: str,
                                                           key: str, message: str) -> None:
    """token_budget and static_batch_size had done nothing under another policy, without
    a word, while their siblings (long_prefill_token_threshold, batch waiting) were
    refused."""
    text = SCENARIO.format(name="k", rate=1) + f"serving: {serving}\n"
    with pytest.raises(ServesimError, match=re.escape(f"serving.{key}: {message}")):
        load(write(tmp_path, text))


@pytest.mark.parametrize("serving, message", [
    ("{policy: orca, batch_wait_timeout_iters: 20}",
     r"serving.batch_wait_timeout_iters: got 20 with batch_wait_max_tokens_ratio 0, which "
     r"waits never: .* set batch_wait_max_tokens_ratio above 0 as well, or both to 0"),
    ("{policy: orca, batch_wait_max_tokens_ratio: 0.9}",
     r"serving.batch_wait_max_tokens_ratio: got 0.9 with batch_wait_timeout_iters 0, which "
     r"waits never"),
])
def test_batch_waiting_with_one_limit_alone_is_refused(tmp_path: Path, serving: str,
                                                       message: str) -> None:
    """Either limit reached ends the wait, and a 0 limit is reached at once: one alone had
    been accepted and held nothing back, without a word."""
    text = SCENARIO.format(name="w", rate=1) + f"serving: {serving}\n"
    with pytest.raises(ServesimError, match=message):
        load(write(tmp_path, text))
    both = SCENARIO.format(name="w", rate=1) + \
        "serving: {policy: orca, batch_wait_timeout_iters: 20, batch_wait_max_tokens_ratio: 0.9}\n"
    assert load(write(tmp_path, both)).serving.batch_wait_timeout_iters == 20


@pytest.mark.parametrize("name", ["a\x1b[31mred", "two\nlines", "tab\there", "rtl\u202eevil"])
def test_a_name_that_would_reach_the_terminal_raw_is_refused_with_out_too(
        tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # It titles the printed summary, reports and plots: with --out it once printed as is
    # (an escape sequence recoloured the terminal), without --out it was refused.
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(name=json_quoted(name), rate=1))
    assert main(["simulate", str(path), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: name: got {name!r}: it titles printed output" in err
    assert not (tmp_path / "o").exists()


def json_quoted(text: str) -> str:
    """``text`` as a YAML double-quoted scalar (JSON's escapes are YAML's)."""
    import json

    return json.dumps(text)
