"""Inputs an audit (2026-12-05) found ending in a traceback, accepted silently or blamed
on the wrong key: each is now one error line naming the file and key, or a note.

Found: lists nested ~1,000 deep in any parsed file (RecursionError), /dev/zero as a
scenario (read until memory ran out), an --out name longer than the file system takes
(OSError), calibration CSV rows with empty, NaN or negative timings or an unknown
component (a traceback, or a profile fitted to nothing), ep_imbalance above ep, an
hf_config head_dim of 0 (replaced without a word), ``2e-5`` in a profile read as text,
an unknown top-level profile key, an inline GPU's figures in TFLOP/s or GB/s (a run
10**12 times too slow), and a vLLM result's max_concurrency of 1e15 (out of memory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from test_vllm_results_bad_input import VALID

from calibrate.grids import Point
from calibrate.output import CSV_COLUMNS, read_csv, write_csv
from calibrate.records import Measurement, Timing
from sim.cli import main
from sim.config.scenario import from_dict
from sim.cost.profilefile import load_profile
from sim.errors import ServesimError
from sim.files import check_readable
from sim.validate import vllm_results

DEEP = "[" * 1200 + "]" * 1200
LENGTHS = {"prompt": {"dist": "fixed", "value": 8}, "output": {"dist": "fixed", "value": 2}}
WORKLOAD = {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 3,
            "lengths": LENGTHS}


def error_of(capsys: Any, *argv: str) -> str:
    """The one stderr line of a servesim command that must fail with status 2."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: error: "), err
    return err


def scenario(tmp_path: Path, raw: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_deep_nesting_is_one_line_naming_the_file(tmp_path: Path, capsys: Any) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text(f"model: tiny\nworkload: {DEEP}\n")
    err = error_of(capsys, "simulate", str(deep), "--out", str(tmp_path / "o"))
    assert f"{deep}: invalid YAML: lists or mappings nested about 1,000 levels deep" in err
    ok = scenario(tmp_path, {"model": "tiny", "workload": WORKLOAD})
    err = error_of(capsys, "simulate", str(ok), "--out", str(tmp_path / "o"), "--set",
                   f"workload.seed={DEEP}")
    assert "workload.seed: cannot parse value '[[[" in err and "...': lists or mappings" in err
    hf = tmp_path / "config.json"
    hf.write_text('{"a": ' * 1200 + "1" + "}" * 1200)
    err = error_of(capsys, "simulate", str(scenario(tmp_path, {
        "model": {"hf_config": str(hf)}, "workload": WORKLOAD})), "--out", str(tmp_path / "o"))
    assert f"model.hf_config: {hf}: nested too deeply to read" in err
    result = tmp_path / "result.json"
    result.write_text(json.dumps(VALID)[:-1] + ', "x": ' + DEEP + "}")
    with pytest.raises(ServesimError, match="result.json: nested too deeply to read"):
        vllm_results.load(result)
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 8, "output_length": 2, "x": '
                     + DEEP + "}\n")
    err = error_of(capsys, "trace", "stats", str(trace), "--format", "mooncake")
    assert f"{trace}: line 1: nested too deeply to read" in err


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_device_is_not_read_as_a_scenario() -> None:
    # The check every reader makes before it reads (were it gone, a test reading
    # /dev/zero would fill memory rather than fail).
    with pytest.raises(ServesimError, match="^/dev/zero: is a device or socket, not a "
                                            "scenario file$"):
        check_readable(Path("/dev/zero"), "scenario")


def test_an_out_folder_the_file_system_refuses(tmp_path: Path, capsys: Any) -> None:
    ok = str(scenario(tmp_path, {"model": "tiny", "workload": WORKLOAD}))
    long = tmp_path / ("b" * 300)
    err = error_of(capsys, "simulate", ok, "--out", str(long))
    assert err.endswith(": a name of 300 bytes (bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb...) in "
                        "the path; file systems take 255 bytes a name, and the last one here "
                        "at most 240 (the run writes a temporary name beside it first)\n")
    (tmp_path / "afile").write_text("x")
    err = error_of(capsys, "simulate", ok, "--out", str(tmp_path / "afile" / "sub"))
    assert err.endswith("afile/sub: a folder on its path is a file\n")


@pytest.mark.parametrize(("cells", "reason"), [
    ({"samples_s": ""}, "status ok but no samples_s"),
    ({"samples_s": "nan nan"}, "samples_s holds nan, expected seconds above 0"),
    ({"samples_s": "0.001 -0.002"}, "samples_s holds -0.002, expected seconds above 0"),
    ({"samples_s": "0 0 0"}, "samples_s holds 0.0, expected seconds above 0"),
    ({"component": "bogus"}, "component 'bogus', expected one of step, linear,"),
    ({"status": "fine"}, "status 'fine', expected one of ok, oom, error"),
])
def test_a_calibration_row_no_run_writes(tmp_path: Path, cells: dict[str, str],
                                         reason: str) -> None:
    path = tmp_path / "m.csv"
    write_csv(path, [Measurement(Point("step", ((1, 0),), "decode seqs=1"), "ok",
                                 Timing((0.001, 0.0011), False), split="train")])
    head, row = path.read_text().splitlines()
    cols = row.split(",")
    for key, value in cells.items():
        cols[CSV_COLUMNS.index(key)] = value
    path.write_text(f"{head}\n{','.join(cols)}\n")
    with pytest.raises(ServesimError, match=f"m.csv: line 2: not a measurement row .*{reason}"):
        read_csv(path)


def test_ep_imbalance_is_at_most_ep(tmp_path: Path, capsys: Any) -> None:
    raw = {"model": "qwen3-30b-a3b", "hardware": {"gpu": "h100-sxm", "tp": 2, "ep": 2,
                                                  "ep_imbalance": 2.5},
           "cost": "roofline", "workload": WORKLOAD}
    err = error_of(capsys, "simulate", str(scenario(tmp_path, raw)), "--out",
                   str(tmp_path / "o"))
    assert "hardware.ep_imbalance: got 2.5: the busiest of ep = 2 GPUs gets at most every " \
           "routed token, 2 times the mean share; expected 1 to 2" in err
    raw["hardware"]["ep_imbalance"] = 2  # every token on one GPU: the bound itself
    assert from_dict(raw).hardware.ep_imbalance == 2


def test_an_hf_config_head_dim_of_zero_is_refused(tmp_path: Path) -> None:
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
           "vocab_size": 1000, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    for head_dim, want in ((None, 64), (32, 32)):
        path.write_text(json.dumps({**cfg, "head_dim": head_dim}))
        got = from_dict({"model": {"hf_config": str(path)}, "workload": WORKLOAD})
        assert got.model.head_dim == want
    path.write_text(json.dumps({**cfg, "head_dim": 0}))
    with pytest.raises(ServesimError, match="head_dim: got 0, expected a whole number of at "
                                            "least 1"):
        from_dict({"model": {"hf_config": str(path)}, "workload": WORKLOAD})


def test_a_profile_reads_2e_5_as_a_number_and_refuses_unknown_keys(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parent.parent / "sim" / "data" / "profiles" / \
        "h100-sxm-llama-3-8b-tp1-vllm.yaml"
    text = shipped.read_text()
    step = yaml.safe_load(text)["components"]["step"]["coef"]["const_s"]
    assert f"const_s: {step}" in text
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(f"const_s: {step}", "const_s: 2e-5", 1))
    assert load_profile(str(path)).coefs["step"]["const_s"] == 2e-5
    path.write_text(text.replace("\ndtype:", "\ndtpye: bf16\ndtype:", 1))
    with pytest.raises(ServesimError, match="p.yaml: dtpye: unknown key; allowed: schema, "):
        load_profile(str(path))


def test_a_profile_refuses_a_key_given_twice_and_reads_numbers_as_a_scenario_does(
        tmp_path: Path) -> None:
    """A profile's loader kept the last of two equal keys silently (a dropped step
    coefficient changes every latency) and read 040 as octal 32, where a scenario reads
    forty."""
    shipped = Path(__file__).resolve().parent.parent / "sim" / "data" / "profiles" / \
        "h100-sxm-llama-3-8b-tp1-vllm.yaml"
    text = shipped.read_text()
    step = yaml.safe_load(text)["components"]["step"]["coef"]["const_s"]
    path = tmp_path / "p.yaml"
    path.write_text(text.replace(f"const_s: {step}", f"const_s: {step}, const_s: 5.0", 1))
    line = 1 + text[:text.index(f"const_s: {step}")].count("\n")
    with pytest.raises(ServesimError, match=rf"p.yaml: line {line}: not valid YAML: key "
                                            "'const_s' given twice in one mapping"):
        load_profile(str(path))
    path.write_text(text.replace("layers: 32", "layers: 040", 1))
    assert load_profile(str(path)).model.layers == 40


@pytest.mark.parametrize(("key", "value", "message"), [
    ("flops", 989, "flops: got 989; flops is in FLOP/s (for example 989e12), at least 1e+09"),
    ("mem_bw", 3350, "mem_bw: got 3350; mem_bw is in bytes/s (for example 3.35e12), at "
                     "least 1e+06"),
    ("fp8_flops", 1979, "fp8_flops: got 1979; fp8_flops is in FLOP/s (for example 1979e12), "
                        "at least 1e+09, or 0 for none"),
])
def test_an_inline_gpu_figure_in_the_wrong_unit(tmp_path: Path, capsys: Any, key: str,
                                                value: float, message: str) -> None:
    gpu = {"name": "mine", "flops": 989e12, "mem_bw": 3.35e12, "link_bw": 450e9,
           "host_bw": 55e9, "node_gpus": 8, "mem_gb": 80}
    raw = {"model": "tiny", "hardware": {"gpu": {**gpu, key: value}}, "workload": WORKLOAD}
    err = error_of(capsys, "simulate", str(scenario(tmp_path, raw)), "--out",
                   str(tmp_path / "o"))
    assert f"hardware.gpu.{message}\n" in err
    assert from_dict({**raw, "hardware": {"gpu": {**gpu, "fp8_flops": 0}}})


def test_a_client_cap_above_the_request_count_is_the_request_count() -> None:
    data = {**VALID, "max_concurrency": 10**15}
    run = vllm_results.parse(data, "r.json")
    assert run.concurrency == 4 and run.meta["max_concurrency"] == 10**15
    assert ("max_concurrency 1000000000000000 is more than the 4 requests: it never holds "
            "one back, so the run is predicted with 4 clients") in run.notes
    same = vllm_results.parse({**VALID, "max_concurrency": 4}, "r.json")
    np.testing.assert_array_equal(run.arrival_s, same.arrival_s)


@pytest.mark.parametrize("key", ["arrivals", "lengths"])
def test_a_partial_arrivals_beside_a_trace_names_the_trace(tmp_path: Path, capsys: Any,
                                                           key: str) -> None:
    # --set workload.arrivals.rate=10 on a trace scenario (a user changing its rate) was
    # "workload.arrivals.process: required key is missing".
    quick = Path(__file__).resolve().parent.parent / "scenarios" / "quickstart.yaml"
    rc = main(["simulate", str(quick), "--set", f"workload.{key}.rate=10",
               "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert (f"workload.{key}: a trace brings its own {key}; remove workload.{key} or the "
            "trace (a trace replays faster or slower with workload.trace.time_scale, or at a "
            "rate with workload.trace.target_rate)") in err
