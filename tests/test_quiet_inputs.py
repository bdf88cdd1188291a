"""Inputs a second audit (2026-12-05) found accepted without a word, or read wrongly:
each is now one error line naming the file and key (or line and column), or a note.

Found: a lengths file's classes, priorities and prefix hashes dropped by a length draw;
a profile whose framework is misspelt (async scheduling silently off), whose dtype is
not its model's, or that was built for another GPU than the scenario's; a Mooncake row
with a misspelt key (hash_id: no prefix sharing at all) or a key given twice (the last
kept), as in a vLLM benchmark result; a silicon CSV's 'nan' or 'inf' latency (read as a
cell left empty), a mode neither agg nor disagg (skipped as
disaggregated), a header with no rows ("skipped: " and nothing); an FP8
weight_block_size other than 128 x 128 (priced as 128 x 128); an Azure UTC offset
past +14:00 or -12:00 by its minutes; prefix hashes with caching off, a trace's
prefix_block_tokens with no hashes to size, a class whose arrivals start after the run
or that num_requests cuts out (no word on any); AIPerf's extra mooncake fields (refused
at first by the unknown-key rule above, now read past with a note); a calibrated
profile of another GPU; a summary recording two models alike that differ in their
sliding window; percentile labels wider than a table column running together; and a
device given as a trace reported "not found".
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import one_line, silicon_csv
from test_vllm_results_bad_input import VALID

from sim.cli import main
from sim.config.scenario import from_dict
from sim.core.engine import build_cost, simulate
from sim.cost.hfquant import weights_dtype
from sim.cost.profilefile import load_profile
from sim.errors import ServesimError
from sim.report.summary import summarize
from sim.validate import vllm_results
from sim.validate.siliconrows import read_rows
from sim.workload import traces

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "sim" / "data" / "profiles" / "h100-sxm-llama-3-8b-tp1-vllm.yaml"
LENGTHS_ONLY = "prompt_tokens,output_tokens\n100,10\n2000,20\n"
FULL = ("arrival_s,prompt_tokens,output_tokens,class,priority,prefix_hash_ids\n"
        "0,100,10,chat,0,1 2\n1,2000,20,summarize,1,3\n")


@pytest.mark.parametrize(("text", "said"), [
    (FULL, "classes, priorities, prefix hashes are not used"),
    (LENGTHS_ONLY, None),
])
def test_a_lengths_file_says_what_a_draw_leaves_unused(tmp_path: Path, text: str,
                                                      said: str | None) -> None:
    (tmp_path / "L.csv").write_text(text)
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": {"arrivals": {"process": "poisson", "rate": 5.0}, "num_requests": 20,
                        "lengths": {"empirical": "L.csv"}}}
    notes = summarize(simulate(from_dict(raw, "<test>", tmp_path)))["workload_notes"]
    mine = [n for n in notes if n.startswith("workload.lengths.empirical")]
    if said is None:
        assert mine == []
    else:
        assert len(mine) == 1 and said in mine[0] and "workload.trace" in mine[0]


def _profile(tmp_path: Path, **edits: Any) -> Path:
    data = yaml.safe_load(SHIPPED.read_text())
    for dotted, value in edits.items():
        *up, last = dotted.split("__")
        node = data
        for k in up:
            node = node[k]
        node[last] = value
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize(("edits", "where", "why"), [
    # 'vLLM' had turned vLLM's async scheduling off without a word.
    ({"source__framework": "vLLM"}, "source.framework", "got 'vLLM'; allowed: vllm, "
                                                        "sglang, trtllm"),
    ({"dtype": "banana"}, "dtype", "got 'banana', but the profile's model has dtype 'bf16'; "
                                   "they must be the same"),
    ({"device__name": "h999"}, "device.name", "got 'h999', not a GPU of the table"),
    ({"source__gpu": "h200"}, "source.gpu", "got 'h200', but device.name is 'h100-sxm'"),
    # Any kind had loaded as measured kernels, its phrase printed as the cost's source.
    ({"source__kind": "guesswork"}, "source.kind", "got 'guesswork'; allowed: "
                                                   "measured-kernels"),
])
def test_a_profiles_source_and_dtype_are_checked(tmp_path: Path, edits: dict[str, Any],
                                                 where: str, why: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(f"p.yaml: {where}: {why}")):
        load_profile(str(_profile(tmp_path, **edits)))
    assert load_profile(str(_profile(tmp_path))).device == "h100-sxm"


def test_a_profile_built_for_another_gpu_is_refused() -> None:
    raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
           "cost": {"profile": "a100-80gb-llama-3-8b-tp1-vllm"},
           "workload": {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 2,
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}}}}
    with pytest.raises(ServesimError, match=r"cost\.profile: profile a100-80gb-llama-3-8b-"
                       r"tp1-vllm was measured for another setup: gpu 'a100-80gb' != "
                       r"'h100-sxm'"):
        build_cost(from_dict(raw, "<test>"))
    raw["hardware"]["gpu"] = "a100-80gb"
    assert "A100" in build_cost(from_dict(raw, "<test>")).source


def test_a_named_profile_takes_a_shorter_context_as_cost_measured_does() -> None:
    """A profile named outright had refused a max_context other than its own (a server
    limit, not a shape the kernels were timed on), while cost: measured accepted it."""
    raw = {"model": {"preset": "llama-3-8b", "max_context": 4096, "name": "mine"},
           "hardware": {"gpu": "h100-sxm"},
           "cost": {"profile": "h100-sxm-llama-3-8b-tp1-vllm"},
           "workload": {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 2,
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}}}}
    named = build_cost(from_dict(raw, "<test>"))
    raw["cost"] = "measured"
    assert named.source == build_cost(from_dict(raw, "<test>")).source
    raw["cost"] = {"profile": "h100-sxm-llama-3-8b-tp1-vllm"}
    raw["model"] = {"preset": "llama-3-8b", "max_context": 4096, "layers": 16}
    with pytest.raises(ServesimError, match=r"measured for another setup: model \(layers 32 "
                                            r"!= 16\)$"):
        build_cost(from_dict(raw, "<test>"))


@pytest.mark.parametrize(("line", "why"), [
    ('{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_id": [1]}',
     "line 1: unknown key 'hash_id'; allowed: timestamp, input_length, output_length, "
     "hash_ids"),
    ('{"timestamp": 0, "timestamp": 9, "input_length": 100, "output_length": 5}',
     "line 1: names timestamp twice"),
])
def test_a_mooncake_row_with_an_odd_key_is_refused(tmp_path: Path, line: str,
                                                   why: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ServesimError, match=re.escape(f"t.jsonl: {why}")):
        traces.load_trace(path, "mooncake")


def test_a_vllm_result_naming_a_key_twice_is_refused(tmp_path: Path) -> None:
    body = json.dumps(VALID)[:-1] + ', "completed": 4}'
    path = tmp_path / "r.json"
    path.write_text(body)
    with pytest.raises(ServesimError, match=r"r\.json: an object names completed twice"):
        vllm_results.load(path)


ROW = "r1,src,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,154.2,18.0"


@pytest.mark.parametrize(("rows", "why"), [
    ([ROW.replace(",154.2,", ",nan,")],
     "line 2, silicon_ttft_ms: got 'nan', expected a positive time (ms); leave the cell "
     "empty for one not measured"),
    ([ROW.replace(",18.0", ",inf")], "line 2, silicon_tpot_ms: got 'inf'"),
])
def test_silicon_rows_that_are_not_runs_are_refused(tmp_path: Path, rows: list[str],
                                                    why: str) -> None:
    with pytest.raises(ServesimError, match=re.escape(f"s.csv: {why}")):
        read_rows(silicon_csv(tmp_path, rows))


def test_silicon_file_without_rows_or_with_an_odd_mode_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--silicon", str(silicon_csv(tmp_path, [])),
                 "--out", str(tmp_path / "o")]) == 2
    assert one_line(capsys).endswith("s.csv: the file has no rows")
    odd = ROW.replace(",agg,", ",weird,")
    assert main(["validate", "--silicon", str(silicon_csv(tmp_path, [odd])),
                 "--out", str(tmp_path / "o")]) == 2
    assert one_line(capsys).endswith("skipped: 1 mode 'weird': neither agg (one pool) nor "
                                     "disagg")


@pytest.mark.parametrize("block", [[64, 64], [128, 0], "128"])
def test_fp8_blocks_other_than_128_are_refused(block: Any) -> None:
    with pytest.raises(ServesimError, match=r"quantization_config\.weight_block_size: got "):
        weights_dtype({"quant_method": "fp8", "weight_block_size": block}, "config.json")
    assert weights_dtype({"quant_method": "fp8", "weight_block_size": [128, 128]},
                         "config.json") == "fp8-block"
    assert weights_dtype({"quant_method": "fp8"}, "config.json") == "fp8"


@pytest.mark.parametrize("offset", ["+14:59", "-12:30"])
def test_azure_offsets_past_the_worlds_are_refused(tmp_path: Path, offset: str) -> None:
    path = tmp_path / "az.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    f"2023-11-16 18:15:46.1{offset},374,44\n")
    with pytest.raises(ServesimError, match=re.escape(f"has UTC offset {offset}; offsets run "
                                                      "from -12:00 to +14:00")):
        traces.load_trace(path, "azure")
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.1+14:00,374,44\n2023-11-16 18:15:50-12:00,396,9\n")
    assert len(traces.load_trace(path, "azure")) == 2


def _run(tmp_path: Path, workload: dict[str, Any], **more: Any) -> dict[str, Any]:
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": workload, **more}
    return summarize(simulate(from_dict(raw, "<test>", tmp_path)))


def test_inputs_that_change_nothing_say_so(tmp_path: Path) -> None:
    (tmp_path / "h.csv").write_text("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n"
                                    "0,100,10,1 2\n1,100,10,1 2\n")
    (tmp_path / "p.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    notes = _run(tmp_path, {"trace": {"path": "h.csv"}},
                 serving={"prefix_caching": False})["workload_notes"]
    assert notes == ["the requests' prefix hashes are not used: prefix caching is off "
                     "(serving.prefix_caching, vLLM's --enable-prefix-caching)"]
    assert _run(tmp_path, {"trace": {"path": "h.csv"}},
                serving={"prefix_caching": True})["workload_notes"] == []
    notes = _run(tmp_path, {"trace": {"path": "p.csv", "prefix_block_tokens": 64}})[
        "workload_notes"]
    assert len(notes) == 1 and "prefix_block_tokens" in notes[0] and "p.csv" in notes[0]


@pytest.mark.parametrize(("bound", "start", "why"), [
    ({"duration_s": 2.0}, 3.0, "its arrivals start at 3 s, at or past workload.duration_s "
                               "(2 s)"),
    ({"num_requests": 10}, 100.0, "num_requests (10) is reached before its first arrival "
                                  "(100 s)"),
])
def test_a_class_that_sends_nothing_says_why(tmp_path: Path, bound: dict[str, float],
                                             start: float, why: str) -> None:
    lengths = {"prompt": {"dist": "fixed", "value": 20}, "output": {"dist": "fixed", "value": 2}}
    s = _run(tmp_path, {"lengths": lengths, **bound, "classes": {
        "a": {"arrivals": {"process": "poisson", "rate": 5.0}},
        "b": {"arrivals": {"process": "poisson", "rate": 5.0, "start_s": start}}}})
    assert s["workload_notes"] == [f"workload.classes.b sends no request: {why}"]


def test_models_differing_in_their_window_are_recorded_apart() -> None:
    from sim.cost.presets import MODELS
    from sim.report.setup import model_keys

    base = MODELS["mistral-7b"]
    windowed = model_keys(dataclasses.replace(base, sliding_window=4096, sliding_layers=32))
    assert (windowed["sliding_window"], windowed["sliding_layers"]) == (4096, 32)
    assert "sliding_window" not in model_keys(dataclasses.replace(base, sliding_window=0,
                                                                  sliding_layers=0))
    assert model_keys(MODELS["gpt-oss-20b"])["expert_dtype"] == "mxfp4"


def test_aiperf_mooncake_fields_are_read_past_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 5, "session_id": "a"}\n'
        '{"timestamp": 9, "input_length": 100, "output_length": 5, "hash_ids": [1]}\n')
    assert traces.load_trace(tmp_path / "t.jsonl", "mooncake").unused == {"session_id": 1}
    notes = _run(tmp_path, {"trace": {"path": "t.jsonl", "format": "mooncake"}})[
        "workload_notes"]
    assert any("1 rows carry session_id, which servesim does not read" in n for n in notes)


@pytest.mark.parametrize(("device", "refused"), [("NVIDIA A100-SXM4-80GB", True),
                                                 ("cpu", False)])
def test_a_calibrated_profile_of_another_gpu_is_refused(tmp_path: Path, device: str,
                                                        refused: bool) -> None:
    data = yaml.safe_load(SHIPPED.read_text())
    del data["source"]  # as `servesim calibrate` writes it: the device torch reported
    data["device"] = {"name": device}
    (tmp_path / "cal.yaml").write_text(yaml.safe_dump(data))
    raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
           "cost": {"profile": "cal.yaml"},
           "workload": {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 2,
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}}}}
    sc = from_dict(raw, "<test>", tmp_path)
    if refused:
        with pytest.raises(ServesimError, match=r"gpu 'a100-80gb' != 'h100-sxm'$"):
            build_cost(sc)
    else:
        # A CPU (or a GPU the table lacks) is not compared: the run is priced as asked.
        assert build_cost(sc).source.startswith("calibrated profile: cpu")


def test_long_percentile_labels_keep_their_columns_apart(tmp_path: Path) -> None:
    from sim.report.printed import table

    lengths = {"prompt": {"dist": "fixed", "value": 20}, "output": {"dist": "fixed", "value": 2}}
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
           "workload": {"arrivals": {"process": "poisson", "rate": 5.0}, "num_requests": 20,
                        "lengths": lengths}}
    s = summarize(simulate(from_dict(raw, "<test>", tmp_path)),
                  percentiles=(0.1, 33.333333333))
    head = next(line for line in table(s).splitlines() if line.startswith("metric (ms)"))
    assert head.split() == ["metric", "(ms)", "p0.1", "p33.33333333", "mean", "max"]


def test_a_device_as_trace_is_named_as_one() -> None:
    with pytest.raises(ServesimError, match=r"trace '/dev/null' \('/dev/null'\) is not a regular "
                       r"file; name a trace file"):
        traces.find_trace("/dev/null", None)
