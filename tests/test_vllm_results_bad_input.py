"""``servesim validate --vllm-result``: a result file vLLM could not have written is one
error line naming the file, the key (with the request's index), the value and the rule;
what vLLM does write (failed requests, ``"inf"``, fewer gaps than tokens) still reads."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from conftest import one_line
from test_validate import SCENARIO

from sim.cli import main
from sim.errors import ServesimError
from sim.validate import vllm_results

# The shape of tests/fixtures/vllm/bench_detailed.json: four requests sent 10 s apart,
# the last failed as vLLM writes it (output 0, ttft 0.0, no gaps, an error message).
VALID: dict[str, Any] = {
    "date": "20260101-120000", "backend": "vllm", "model_id": "hand-made/tiny",
    "num_prompts": 4, "request_rate": 0.2, "burstiness": 1.0, "max_concurrency": None,
    "duration": 25.4, "completed": 3, "median_ttft_ms": 150.0, "median_tpot_ms": 13.0,
    "input_lens": [100, 50, 200, 80],
    "output_lens": [5, 3, 2, 0],
    "ttfts": [0.150, 0.050, 0.300, 0.0],
    "itls": [[0.010, 0.012, 0.011, 0.011], [0.020, 0.010], [0.013], []],
    "start_times": [100.0, 110.0, 120.0, 125.0],
    "generated_texts": ["a b c d e", "f g h", "i j", ""],
    "errors": ["", "", "", "request timed out"],
}
TOKENS = "expected a whole number of tokens, 0 or more and below 2**53"
SECONDS = "expected a finite number of seconds, 0 or more and below 1e9"
DURATION = "expected null or a finite number of seconds above 0 and below 1e9"


DROP = object()  # as an edit: the key is left out of the file


def changed(**edits: Any) -> dict[str, Any]:
    """VALID with top-level keys replaced (``DROP`` leaves one out; None is JSON null)
    or, for ``key__i``, request ``i``'s entry replaced."""
    data = copy.deepcopy(VALID)
    for name, value in edits.items():
        key, _, index = name.partition("__")
        if index:
            data[key][int(index)] = value
        elif value is DROP:
            del data[key]
        else:
            data[key] = value
    return data


NO_STARTS = {"start_times": DROP}

# (edits, the error expected: its whole text after "<t>: ")
BAD = [
    # the fuzzing run's findings
    (dict(request_rate="fast", **NO_STARTS),
     'request_rate: got \'fast\', expected a number of requests per second above 0, or "inf"'),
    (dict(request_rate="fast"),  # refused even where start_times make it unused
     'request_rate: got \'fast\', expected a number of requests per second above 0, or "inf"'),
    (dict(burstiness="x", **NO_STARTS),
     "burstiness: got 'x', expected a number above 0 (1 = Poisson; Infinity = evenly spaced)"),
    (dict(input_lens__0=-10, ttfts__0=-0.1), f"input_lens[0]: got -10, {TOKENS}"),
    (dict(ttfts__0=-0.1),
     f"ttfts[0]: got -0.1, {SECONDS} (vLLM writes 0.0 for a request that failed)"),
    (dict(input_lens__1=10.5), f"input_lens[1]: got 10.5, {TOKENS}"),
    (dict(start_times=[100.0, 110.0, 120.0]),
     "start_times: got a list of 3, expected a list of 4 entries, one per request "
     "(as many as input_lens)"),
    (dict(start_times__2="12:00"),
     "start_times[2]: got '12:00', expected a finite number (a send time in seconds)"),
    (dict(median_ttft_ms="150"),
     "median_ttft_ms: got '150', expected a finite number of milliseconds, 0 or more"),
    (dict(ttfts__0=math.nan),
     f"ttfts[0]: got nan, {SECONDS} (vLLM writes 0.0 for a request that failed)"),
    # the other per-request values
    (dict(ttfts__1=None),
     f"ttfts[1]: got None, {SECONDS} (vLLM writes 0.0 for a request that failed)"),
    (dict(ttfts__2=math.inf),
     f"ttfts[2]: got inf, {SECONDS} (vLLM writes 0.0 for a request that failed)"),
    (dict(output_lens__0=2.5), f"output_lens[0]: got 2.5, {TOKENS}"),
    (dict(output_lens__0=-1), f"output_lens[0]: got -1, {TOKENS}"),
    (dict(output_lens__0=True), f"output_lens[0]: got True, {TOKENS}"),
    (dict(input_lens__0="100"), f"input_lens[0]: got '100', {TOKENS}"),
    (dict(input_lens__0=2**53), f"input_lens[0]: got 9007199254740992, {TOKENS}"),
    (dict(input_lens__0=1e300), f"input_lens[0]: got 1e+300, {TOKENS}"),
    (dict(itls__0=[0.010, -0.012, 0.011, 0.011]), f"itls[0][1]: got -0.012, {SECONDS}"),
    (dict(itls__1=[0.02, "0.01"]), f"itls[1][1]: got '0.01', {SECONDS}"),
    (dict(itls__1=0.03),
     "itls[1]: got 0.03, expected a list of seconds (empty for a request that failed)"),
    (dict(errors__1=5),
     "errors[1]: got 5, expected a string (\"\" when the request succeeded) or null"),
    (dict(errors=["", ""]),
     "errors: got a list of 2, expected a list of 4 entries, one per request "
     "(as many as input_lens)"),
    (dict(ttfts=[0.15, 0.05, 0.3]),
     "ttfts: got a list of 3, expected a list of 4 entries, one per request "
     "(as many as input_lens)"),
    (dict(itls="none"),
     "itls: got 'none', expected a list of 4 entries, one per request (as many as input_lens)"),
    (dict(ttfts=None),
     "ttfts: got None, expected a list of 4 entries, one per request (as many as input_lens)"),
    (dict(input_lens="100"), "input_lens: got '100', expected a list of prompt lengths"),
    # Text heading the printed table and copied into validation.json: a NaN date had
    # become null there, a line break had split the table's title.
    (dict(date=math.nan), "date: got nan, expected text on one line (or null)"),
    (dict(model_id="a\nb"), "model_id: got 'a\\nb', expected text on one line (or null)"),
    (dict(backend={"x": 1}), "backend: got {'x': 1}, expected text on one line (or null)"),
    (dict(input_lens=[]), "input_lens: the result holds no requests"),
    (dict(input_lens__1=0), "input_lens[1]: got 0 for a request that completed, expected "
                            "at least 1 prompt token"),
    (dict(itls__0=[1e308, 1e308, 0.01, 0.01]), f"itls[0][0]: got 1e+308, {SECONDS}"),
    (dict(start_times=[0.0, 1e300, 2e300, 3e300]),
     "start_times: the requests' send times span 3e+300 s, expected less than 1e+09 s (a "
     "float second no longer resolves a latency there)"),
    (dict(request_rate=1e-300, **NO_STARTS),
     "request_rate: the requests' send times span 2.98e+300 s, expected less than 1e+09 s "
     "(a float second no longer resolves a latency there)"),
    (dict(request_rate=1e-308, **NO_STARTS),
     "request_rate: the requests' send times span inf s, expected less than 1e+09 s "
     "(a float second no longer resolves a latency there)"),
    (dict(duration=math.nan, **NO_STARTS), f"duration: got nan, {DURATION}"),
    (dict(duration="25 s", **NO_STARTS), f"duration: got '25 s', {DURATION}"),
    # duration is checked whether or not start_times make it unused, and 0 is no run
    (dict(duration="abc"), f"duration: got 'abc', {DURATION}"),
    (dict(duration=0), f"duration: got 0, {DURATION}"),
    (dict(duration=-3.0), f"duration: got -3.0, {DURATION}"),
    (dict(duration=True), f"duration: got True, {DURATION}"),
    # more completed than the lists hold cannot be
    (dict(completed=99), "completed: got 99, more than the 4 requests in the per-request "
                         "lists; expected a whole number from 0 to 4"),
    (dict(completed=2.5), "completed: got 2.5, expected null or a whole number of requests, "
                          "0 or more"),
    (dict(num_prompts="4"), "num_prompts: got '4', expected null or a whole number of "
                            "requests, 0 or more"),
    # run facts
    (dict(request_rate=0, **NO_STARTS),
     'request_rate: got 0, expected a number of requests per second above 0, or "inf"'),
    (dict(request_rate=-2.0),
     'request_rate: got -2.0, expected a number of requests per second above 0, or "inf"'),
    (dict(request_rate=math.nan),
     'request_rate: got nan, expected a number of requests per second above 0, or "inf"'),
    (dict(request_rate="Infinity"),
     'request_rate: got \'Infinity\', expected a number of requests per second above 0, '
     'or "inf"'),
    (dict(request_rate=DROP, **NO_STARTS),
     "request_rate: missing, and so are start_times: the arrivals cannot be rebuilt; "
     'expected a number of requests per second above 0, or "inf"'),
    (dict(request_rate=None, start_times=None),
     "request_rate: missing, and so are start_times: the arrivals cannot be rebuilt; "
     'expected a number of requests per second above 0, or "inf"'),
    (dict(burstiness=0),
     "burstiness: got 0, expected a number above 0 (1 = Poisson; Infinity = evenly spaced)"),
    (dict(max_concurrency="8"),
     "max_concurrency: got '8', expected null or a whole number of requests, 0 (no cap) "
     "or more"),
    (dict(max_concurrency=-1),
     "max_concurrency: got -1, expected null or a whole number of requests, 0 (no cap) "
     "or more"),
    (dict(ramp_up_strategy="steep", request_rate="inf", **NO_STARTS),
     "ramp_up_strategy: got 'steep', expected one of linear, exponential (vLLM's "
     "--ramp-up-strategy)"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=8, **NO_STARTS),
     'request_rate: got 0.2 with a linear ramp-up, expected "inf": vLLM\'s client refuses a '
     "request rate beside a ramp-up"),
    (dict(ramp_up_strategy="linear", request_rate="inf", ramp_up_end_rps=8, **NO_STARTS),
     "ramp_up_start_rps: got None, expected a number of requests per second, 0 or more "
     "(a linear ramp-up needs it)"),
    (dict(ramp_up_strategy="linear", request_rate="inf", ramp_up_start_rps=1,
          ramp_up_end_rps=math.inf, **NO_STARTS),
     "ramp_up_end_rps: got inf, expected a number of requests per second, 0 or more "
     "(a linear ramp-up needs it)"),
    (dict(ramp_up_strategy="exponential", request_rate="inf", ramp_up_start_rps=0,
          ramp_up_end_rps=8, **NO_STARTS),
     "ramp_up_start_rps: got 0 with exponential ramp-up, expected a start above 0 "
     "(vLLM's client cannot pace request 0 at 0 req/s)"),
    (dict(ramp_up_strategy="linear", request_rate="inf", ramp_up_start_rps=8,
          ramp_up_end_rps=8, **NO_STARTS),
     "ramp_up_end_rps: got 8 with a start of 8 req/s, expected an end above the start, "
     "as vLLM's client requires"),
    (dict(median_ttft_ms=-1.0),
     "median_ttft_ms: got -1.0, expected a finite number of milliseconds, 0 or more"),
    (dict(p99_e2el_ms=math.nan),
     "p99_e2el_ms: got nan, expected a finite number of milliseconds, 0 or more"),
    # nothing to compare
    (dict(output_lens=[0, 0, 0, 0], errors=["", "", "", "boom"]),
     "all 4 requests failed in vLLM (an error or no output), nothing to compare; "
     "errors[3]: boom"),
    (dict(output_lens=[0, 0, 0, 0], errors=["", " \n", "", ""]),
     "all 4 requests failed in vLLM (an error or no output), nothing to compare; "
     "errors[1]: ' \\n'"),
    (dict(output_lens=[0, 0, 0, 0], errors=DROP),
     "all 4 requests failed in vLLM (an error or no output), nothing to compare"),
]


@pytest.mark.parametrize(("edits", "message"), BAD,
                         ids=[f"{i}-{m.split(':')[0]}" for i, (_, m) in enumerate(BAD)])
def test_bad_value_is_one_error_naming_key_value_and_rule(edits: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(ServesimError) as info:
        vllm_results.parse(changed(**edits), "<t>")
    assert str(info.value) == f"<t>: {message}"


def test_traceback_of_every_failed_request_shows_as_its_last_line() -> None:
    trace = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
             "aiohttp.ClientConnectorError: Cannot connect to host 127.0.0.1:8000\n")
    with pytest.raises(ServesimError, match=r"^<t>: all 4 requests failed in vLLM .*; "
                       r"errors\[0\]: aiohttp.ClientConnectorError: Cannot connect to host "
                       r"127.0.0.1:8000$"):
        vllm_results.parse(changed(output_lens=[0, 0, 0, 0], errors=[trace] * 4), "<t>")


def test_what_vllm_writes_for_failed_requests_still_reads() -> None:
    """Failed (vLLM's success False): output 0 always; ttft 0.0 or the first chunk's time;
    the gaps streamed before the failure; an error message that may be empty (an HTTP
    status without a reason), or no errors key at all in old files."""
    data = changed(output_lens=[5, 0, 2, 0], ttfts=[0.15, 0.4, 0.3, 0.0],
                   itls=[[0.01, 0.012, 0.011, 0.011], [0.02, 0.02], [0.013], []],
                   errors=["", "Traceback ...\nTimeoutError", "", ""])
    run = vllm_results.parse(data, "<t>")
    assert run.failed.tolist() == [False, True, False, True]
    assert np.isnan(run.ttft_s[[1, 3]]).all() and np.isnan(run.e2e_s[[1, 3]]).all()
    assert "2 of 4 requests failed" in run.notes[0]
    del data["errors"]
    assert vllm_results.parse(data, "<t>").failed.tolist() == [False, True, False, True]


def test_run_facts_vllm_writes_still_read() -> None:
    data = changed(start_times=DROP, request_rate="inf", max_concurrency=0,
                   input_lens=[100.0, 50, 200, 80])  # a whole number written as a float
    run = vllm_results.parse(data, "<t>")
    assert run.arrival_s.tolist() == [0.0] * 4 and run.prompt_tokens[0] == 100
    assert not any("max_concurrency" in n for n in run.notes)
    # burstiness Infinity (json.dumps writes it bare): vLLM sends at even gaps of 1/rate
    run = vllm_results.parse(json.loads(json.dumps(changed(start_times=DROP,
                                                           burstiness=math.inf))), "<t>")
    np.testing.assert_allclose(run.arrival_s, [0.0, 5.0, 10.0, 15.0])
    assert "evenly spaced at 0.2 req/s" in run.arrivals_note
    assert run.meta["burstiness"] == "inf"
    # old vLLM, before --burstiness: Poisson; null aggregates are absent ones
    run = vllm_results.parse(changed(start_times=DROP, burstiness=None,
                                     median_ttft_ms=None), "<t>")
    assert "Poisson at 0.2 req/s" in run.arrivals_note
    assert "median_ttft_ms" not in run.meta["aggregates_ms"]


def test_fewer_gaps_than_tokens_read_and_are_noted() -> None:
    """One gap per streamed chunk: a chunk of several tokens (speculative decoding, a
    stream interval) gives fewer than output - 1; vLLM's ITL is per chunk, so kept."""
    run = vllm_results.parse(changed(itls__0=[0.022, 0.022]), "<t>")
    assert math.isclose(run.e2e_s[0], 0.194)
    assert ("1 of 3 completed requests streamed other than one chunk per token (e.g. "
            "request 0: 2 gaps for 5 tokens): ITL compares per chunk, as vLLM measures it "
            "(a server's --stream-interval is the scenario's serving.stream_interval)"
            ) in " ".join(run.notes)
    assert not any("chunk" in n for n in vllm_results.parse(VALID, "<t>").notes)


def test_more_gaps_than_tokens_are_refused() -> None:
    """A chunk carries at least one token: up to one gap a token reads (the chat
    endpoint's role-only first chunk gives output, not output - 1), one more is refused."""
    run = vllm_results.parse(changed(itls__0=[0.01] * 5), "<t>")
    assert "request 0: 5 gaps for 5 tokens" in " ".join(run.notes)
    with pytest.raises(ServesimError, match=r"<t>: itls\[0\]: 6 gaps for 5 output tokens "
                                            r"\(output_lens\[0\]\); a streamed chunk carries "
                                            r"at least one token"):
        vllm_results.parse(changed(itls__0=[0.01] * 6), "<t>")


def test_a_whole_number_of_more_than_100_digits_is_bad_json(tmp_path: Path) -> None:
    """Python reads no integer past 4,300 digits (a ValueError naming no place) and none
    past 308 converts to a float (an OverflowError): refused as bad JSON, with its place."""
    for digits in (101, 400, 5000):
        path = tmp_path / "r.json"
        path.write_text(json.dumps(VALID).replace('"ttfts": [0.15', f'"ttfts": [{"9" * digits}'))
        with pytest.raises(ServesimError, match=rf"not valid JSON: a whole number of "
                                                rf"{digits:,} digits; no value servesim reads "
                                                r"needs more than 100: line 1 column \d+"):
            vllm_results.load(path)


def _cli(tmp_path: Path, data: dict[str, Any]) -> tuple[int, Path]:
    result = tmp_path / "result.json"
    result.write_text(json.dumps(data))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    return main(["validate", "--vllm-result", str(result), "--scenario", str(scenario),
                 "--out", str(out), "--no-plots"]), out


def test_valid_file_still_validates(tmp_path: Path) -> None:
    rc, out = _cli(tmp_path, VALID)
    assert rc == 0
    level = json.loads((out / "validation.json").read_text())["levels"][0]
    assert level["comparison"]["compared"] == 3 and level["comparison"]["failed_in_vllm"] == 1


def test_bad_value_from_the_command_is_one_line_exit_2(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _cli(tmp_path, changed(request_rate="fast", start_times=DROP))
    assert rc == 2 and not out.exists()
    line = one_line(capsys)
    assert "result.json: request_rate: got 'fast', expected a number of requests per second" \
           in line, line


def test_every_request_rejected_by_the_scenario_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _cli(tmp_path, changed(input_lens=[1e12] * 4))
    assert rc == 2 and not (out / "validation.json").exists()
    line = one_line(capsys)
    assert ("result.json: scenario vllm-check rejected all 3 requests that completed in "
            "vLLM (exceeds_context 3; longest prompt 1000000000000 tokens, prompt + output "
            "1000000000005): nothing to compare") in line, line


def test_start_times_out_of_order_are_taken_in_send_order_and_said() -> None:
    """Sends stamped out of order had been clamped to the previous time without a word
    (a request sent 10 s early was simulated 10 s late); now each request arrives at its
    own send time, the requests reordered with everything measured about them."""
    run = vllm_results.parse(changed(start_times=[100.0, 120.0, 110.0, 125.0]), "<t>")
    np.testing.assert_allclose(run.arrival_s, [0.0, 10.0, 20.0, 25.0])
    assert run.prompt_tokens.tolist() == [100, 200, 50, 80]
    assert run.output_tokens.tolist() == [5, 2, 3, 0]
    np.testing.assert_allclose(run.ttft_s[:3], [0.15, 0.3, 0.05])
    assert run.itls_s[1] == [0.013] and run.failed.tolist() == [False, False, False, True]
    assert "1 start_times earlier than the one before (at most 1e+04 ms): requests taken " \
           "in the order they were sent" in run.notes
    in_order = vllm_results.parse(changed(), "<t>")
    assert not any("earlier than" in n for n in in_order.notes)


def test_counts_that_disagree_with_the_lists_are_noted() -> None:
    """completed and num_prompts that disagree with the per-request lists have innocent
    causes (a dataset with fewer prompts than asked for): a note, and the lists count."""
    run = vllm_results.parse(changed(completed=2, num_prompts=7), "<t>")
    assert ("the file's completed is 2, but 3 of its 4 requests completed by the "
            "per-request lists (the lists are compared)") in run.notes
    assert ("the file's num_prompts is 7, but its per-request lists hold 4 requests (the "
            "lists are compared)") in run.notes
    assert not any("the file's" in n for n in vllm_results.parse(VALID, "<t>").notes)
    assert vllm_results.parse(changed(duration=None), "<t>").meta["duration"] is None


def test_a_median_ttft_far_from_the_lists_is_noted(tmp_path: Path) -> None:
    """vLLM's median_ttft_ms against the median of the lists' ttfts: 99999 ms where the
    lists give 150 ms is said in the printed notes and validation.json."""
    from sim.validate.vllmcli import median_disagreement

    ttfts = np.array([0.15, 0.05, 0.3])
    assert median_disagreement(150.0, ttfts) is None
    assert median_disagreement(150.9, ttfts) is None  # within 1%: rounding
    assert median_disagreement(None, ttfts) is None
    assert median_disagreement(99999.0, ttfts) == (
        "the file's median_ttft_ms 99999 is not the median of its completed requests' "
        "ttfts (150 ms): the summary and the per-request lists disagree (another run's "
        "summary, or other units?); the lists are compared")
    rc, out = _cli(tmp_path, changed(median_ttft_ms=99999))
    assert rc == 0
    notes = json.loads((out / "validation.json").read_text())["levels"][0]["notes"]
    assert any(n.startswith("the file's median_ttft_ms 99999 is not the median") for n in notes)
    rc, out = _cli(tmp_path, VALID)
    notes = json.loads((out / "validation.json").read_text())["levels"][0]["notes"]
    assert not any("median_ttft_ms" in n for n in notes)


def test_one_result_file_given_twice_is_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    # It had become two levels of one run ("vllm-ok" and "vllm-ok~2"), weighing it twice.
    _cli(tmp_path, VALID)
    capsys.readouterr()
    result, scenario = tmp_path / "result.json", tmp_path / "s.yaml"
    other = tmp_path / "sub" / ".." / "result.json"
    (tmp_path / "sub").mkdir()
    out = tmp_path / "out2"
    assert main(["validate", "--vllm-result", str(result), str(other), "--scenario",
                 str(scenario), "--out", str(out), "--no-plots"]) == 2
    line = one_line(capsys)
    assert f"--vllm-result: got {other} twice (also as {result}); give each result file " \
           "once" in line, line
    assert not out.exists()
