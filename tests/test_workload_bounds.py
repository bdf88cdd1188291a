"""Workload settings far outside any real range: each is one error line naming the key,
never a hang, a traceback or a run that quietly mis-simulates.

An audit found a NaN arrival time from a target rate of 1e-308 (the arrival loop never
reached it: the run hung), a staged rate of 1e20 req/s that never finished drawing its
arrivals under --force, a think time of 1e308 s that ended in an IndexError, and two
class weights of 1e308 whose probabilities came out NaN.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sim.cli import main
from sim.core.runchecks import check_hash_counts
from sim.errors import ServesimError
from sim.workload.requests import Requests

TRACE = Path(__file__).parent / "fixtures" / "traces" / "servesim_full.csv"
LENGTHS = {"prompt": {"dist": "fixed", "value": 16}, "output": {"dist": "fixed", "value": 2}}
COST = {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}}


def run(tmp_path: Path, workload: dict[str, Any], *args: str) -> int:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", "cost": COST, "workload": workload}))
    return main(["simulate", str(path), "--quiet", "--no-plots", "--out", str(tmp_path / "o"),
                 *args])


CASES = [
    ({"trace": {"path": str(TRACE), "target_rate": 1e-308}},
     r"workload\.trace\.target_rate: arrival times reach nan s, expected finite times below "
     r"1e\+09 s .*: the target rate is too low for the trace"),
    ({"trace": {"path": str(TRACE), "time_scale": 1e10}},
     r"workload\.trace\.time_scale: arrival times reach 5e\+09 s, .*: the time scale "
     r"stretches the trace that far"),
    # Past a float's range it is refused as the factor is applied, whatever duration_s
    # would have kept (with one, it had replayed the first row and printed an inf span).
    ({"trace": {"path": str(TRACE), "time_scale": 1e308}},
     r"workload\.trace\.time_scale: x1e\+308 takes the arrival times past a float's "
     r"range \(the trace's run to 2\.0 s\)"),
    ({"arrivals": {"process": "poisson", "rate": 1e-300}, "lengths": LENGTHS,
      "num_requests": 5},
     r"workload\.arrivals: arrival times reach .* s, expected finite times below 1e\+09 s"),
    ({"arrivals": {"process": "poisson"}, "lengths": LENGTHS,
      "stages": [{"rate": 1e20, "duration_s": 1}]},
     r"workload\.stages\[0\]\.rate: rate 1e\+20 req/s from 0 to 1 s would send about "
     r"1e\+20 requests, more than any run holds"),
    ({"arrivals": {"process": "poisson"}, "lengths": LENGTHS,
      "stages": [{"rate": 1, "duration_s": 1e-300}]},
     r"workload\.stages\[0\]\.duration_s: got 1e-300, must be at least 0\.001"),
    ({"concurrency": 2, "think_time_s": 1e308, "lengths": LENGTHS, "num_requests": 4},
     r"workload\.think_time_s: got 1e\+308, must be less than 1e\+09"),
]


@pytest.mark.parametrize(("workload", "message"), CASES)
def test_an_out_of_range_workload_is_one_error_line(tmp_path: Path, capsys: Any,
                                                    workload: dict[str, Any],
                                                    message: str) -> None:
    # --force: the memory estimate must not be what stops a runaway rate.
    assert run(tmp_path, workload, "--force") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"servesim: error: {tmp_path}/s.yaml: "), err
    assert re.search(message, err), err


def test_a_trace_of_epoch_times_is_told_to_rebase(tmp_path: Path, capsys: Any) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n1700000000.0,10,2\n"
                     "1700000001.5,20,2\n")
    assert run(tmp_path, {"trace": {"path": str(trace)}}) == 2
    assert "workload.trace: arrival times reach 1.7e+09 s" in capsys.readouterr().err
    # The same trace rebased runs.
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,10,2\n1.5,20,2\n")
    assert run(tmp_path, {"trace": {"path": str(trace)}}) == 0


def test_class_weights_whose_sum_overflows_still_draw(tmp_path: Path) -> None:
    from sim.workload.requests import probabilities

    assert probabilities([1e308, 1e308, 0.0]).tolist() == [0.5, 0.5, 0.0]
    assert probabilities([3.0, 1.0]).tolist() == [0.75, 0.25]
    classes = {"a": {"weight": 1e308, "lengths": LENGTHS},
               "b": {"weight": 1e308, "lengths": LENGTHS}}
    assert run(tmp_path, {"arrivals": {"process": "poisson", "rate": 4.0}, "num_requests": 20,
                          "classes": classes}) == 0


def test_prefix_hashes_past_the_prompt_are_refused(tmp_path: Path, capsys: Any) -> None:
    """A servesim trace's prefix_hash_ids naming more blocks than the prompt fills had
    been accepted (the extra ids dropped); a Mooncake trace's were already refused."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n"
                     "0,40,2,1 2\n1,10,2,1 2 3 4 5 6 7 8 9\n")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", "cost": COST,
                                    "serving": {"prefix_caching": True, "block_size": 4},
                                    "workload": {"trace": {"path": str(trace)}}}))
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out",
                 str(tmp_path / "o")]) == 2
    # The trace's file and line are named (it had been "request 1 (row 2 of the workload)",
    # counted after start_row, sorting and sampling, which cannot be found in the file).
    assert (f"{trace}: line 3: prefix_hash_ids names 9 blocks of 4 tokens, more than its "
            "10-token prompt fills (3); prefix_hash_ids lists the prompt's leading blocks "
            "(of serving.block_size tokens each unless workload.trace.prefix_block_tokens "
            "says otherwise)") in capsys.readouterr().err
    raw = yaml.safe_load(path.read_text())
    raw["workload"]["trace"]["start_row"] = 1
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out",
                 str(tmp_path / "o")]) == 2
    assert f"{trace}: line 3: prefix_hash_ids names 9 blocks" in capsys.readouterr().err
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n"
                     "0,40,2,1 2\n1,10,2,1 2 3\n")
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out",
                 str(tmp_path / "o")]) == 0


def test_truncate_cuts_prefix_hashes_and_an_error_names_the_traces_column(
        tmp_path: Path, capsys: Any) -> None:
    """truncate: true had kept each row's hashes whole, so the hash check refused a valid
    trace on a shorter-context model; its message named prefix_hash_ids for a Mooncake
    trace, whose column is hash_ids."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n"
                     "0,40,2,1 2 3 4 5 6 7 8 9 10\n1,10,2,1 2 3\n")
    path = tmp_path / "s.yaml"
    scenario = {"model": {"preset": "tiny", "max_context": 16}, "cost": COST,
                "serving": {"prefix_caching": True, "block_size": 4},
                "workload": {"trace": {"path": str(trace), "truncate": True}}}
    path.write_text(yaml.safe_dump(scenario))
    out = tmp_path / "o"
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out", str(out)]) == 0
    notes = json.loads((out / "summary.json").read_text())["workload_notes"]
    assert any("1 rows' prefix hashes cut to the blocks" in n for n in notes)
    moon = tmp_path / "m.jsonl"
    moon.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 2, '
                    '"hash_ids": [1, 2, 3]}\n')
    scenario["workload"] = {"trace": {"path": str(moon), "truncate": True}}
    scenario["model"] = {"preset": "tiny", "max_context": 600}
    path.write_text(yaml.safe_dump(scenario))
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out", str(out)]) == 0
    reqs = Requests(np.zeros(1), np.array([10]), np.array([2]),
                    prefix_hashes=(np.arange(4),), prefix_block_tokens=4,
                    hash_column="hash_ids")
    with pytest.raises(ServesimError, match="a trace's hash_ids lists the prompt's leading"):
        check_hash_counts(reqs, 4, "m.yaml")


@pytest.mark.parametrize("last", ["1e9", "999999999.99"])
def test_a_trace_arrival_at_the_time_bound_is_refused_at_load_and_one_inside_it_runs(
        tmp_path: Path, capsys: Any, last: str) -> None:
    """An arrival at 1e9 s passed the load check (<=), and one just below it ran the clock
    past the same bound: both ended in the engine's message, naming no trace or key."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n1,16,2\n{last},16,2\n")
    code = run(tmp_path, {"trace": {"path": str(trace)}})
    err = capsys.readouterr().err
    if last == "1e9":
        assert code == 2 and "workload.trace: arrival times reach 1e+09 s, expected finite " \
            "times below 1e+09 s" in err and "the trace's own arrival times are that late" in err
    else:
        assert code == 0, err


def test_an_empty_workload_says_what_left_it_empty(tmp_path: Path, capsys: Any) -> None:
    """"the workload sent no request" had named no key and no cause."""
    assert run(tmp_path, {"trace": {"path": str(TRACE), "target_rate": 0.01},
                          "duration_s": 30}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {tmp_path}/s.yaml: workload: the workload sent "
                          "no request (target_rate 0.01 req/s: no request arrives before "
                          "duration_s): raise num_requests, duration_s or the rate"), err


def test_a_whole_number_of_more_than_100_digits_is_refused_where_it_is_written(
        tmp_path: Path, capsys: Any) -> None:
    """A 400-digit rate had ended in an OverflowError (no float holds it), a 5,000-digit
    seed in Python's ValueError for integers past 4,300 digits: tracebacks both."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"model": "tiny", "cost": COST, "workload": {
        "arrivals": {"process": "poisson", "rate": 5}, "lengths": LENGTHS,
        "num_requests": 4}}).replace("rate: 5", "rate: 1" + "0" * 400))
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"servesim: error: {path}: line \d+: invalid YAML: a whole number "
                        r"of 401 digits; no value servesim reads needs more than 100\n", err), err
    assert run(tmp_path, {"arrivals": {"process": "poisson", "rate": 5}, "lengths": LENGTHS,
                          "num_requests": 4}, "--set", "workload.seed=" + "9" * 5000) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 400, err
    assert "workload.seed: cannot parse value '999" in err
    assert "a whole number of 5,000 digits; no value servesim reads needs more than 100" in err
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 16, "output_length": 2})
                     + "\n" + '{"timestamp": ' + "9" * 400 + ', "input_length": 16, '
                     '"output_length": 2}\n')
    assert run(tmp_path, {"trace": {"path": str(trace), "format": "mooncake"}}) == 2
    err = capsys.readouterr().err
    assert f"{trace}: line 2: not a JSON object (a whole number of 400 digits" in err, err
    # A hundred digits still read, and meet the key's own rule.
    assert run(tmp_path, {"arrivals": {"process": "poisson", "rate": 5}, "lengths": LENGTHS,
                          "num_requests": 4, "seed": int("9" * 100)}) == 2
    assert "workload.seed: got 999" in capsys.readouterr().err


def test_trace_tools_refuse_a_span_no_run_reads(tmp_path: Path, capsys: Any) -> None:
    """simulate refuses arrivals past 1e9 s; trace stats had printed a 300-digit span."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n1e300,20,2\n")
    assert main(["trace", "stats", str(trace)]) == 2
    assert capsys.readouterr().err == (f"servesim: error: {trace}: arrival times span 1e+300 "
                                       "s, past the 1e+09 s (31 years) a run reads\n")
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n999999999,20,2\n")
    assert main(["trace", "stats", str(trace)]) == 0
