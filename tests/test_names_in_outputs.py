"""Names the user chose (a scenario's name, a file's name) reach the plots, the printed
table, summary.json and the report as written: dollar signs are not TeX, bytes of a file
name that are not UTF-8 are escaped, and a YAML escape that is half a character is
refused when the file loads, not met as a traceback when an output is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sim.cli import main

SCENARIO = """name: {name}
model: llama-3-8b
hardware: {{gpu: h100-sxm}}
cost: roofline
workload:
  arrivals: {{process: poisson, rate: 5}}
  lengths: {{prompt: {{dist: fixed, value: 100}}, output: {{dist: fixed, value: 20}}}}
  num_requests: 20
"""
PNG = b"\x89PNG\r\n\x1a\n"


def test_dollar_signs_in_a_name_are_drawn_as_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """matplotlib reads $...$ as math text: a run named so had stopped with a parse error
    when its plot was drawn (simulate and compare alike)."""
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO.format(name='"run_$USER_$"'))
    assert main(["simulate", str(sc), "--out", str(tmp_path / "a"), "--quiet"]) == 0
    assert (tmp_path / "a" / "ttft_tpot_cdf.png").read_bytes().startswith(PNG)
    assert main(["compare", str(sc), "--policies", "chunked,continuous",
                 "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "compare_cdf.png").read_bytes().startswith(PNG)
    trace = tmp_path / "a_$b_$.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,12,6\n")
    assert main(["trace", "plot", str(trace), "--out", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").read_bytes().startswith(PNG)
    capsys.readouterr()


@pytest.mark.parametrize("text, where", [
    ('name: "a\\ud800"\n', "line 1"),
    ('name: ok\nmodel: {preset: llama-3-8b, name: "\\udfff"}\n', "line 2"),
])
def test_half_a_character_in_a_yaml_string_is_refused_at_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str) -> None:
    """A \\uD800-\\uDFFF escape is half of a surrogate pair: loaded, it had stopped the
    printed table (UnicodeEncodeError) and every plot and report after the run."""
    sc = tmp_path / "s.yaml"
    sc.write_text(text)
    assert main(["simulate", str(sc), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"servesim: error: {sc}: {where}: ")
    assert "is half of a UTF-16 surrogate pair, not a character" in err
    assert not (tmp_path / "o").exists()


def test_a_file_name_that_is_not_utf8_is_escaped_in_the_outputs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Python keeps a file name's non-UTF-8 bytes as lone surrogates: written into
    summary.json, they had stopped `report` (and `trace plot`'s title) with a traceback."""
    folder = os.fsencode(tmp_path)
    sc = Path(os.fsdecode(folder + b"/sc\xff.yaml"))
    sc.write_text(SCENARIO.format(name="plain"))
    out = tmp_path / "o"
    assert main(["simulate", str(sc), "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["simulated"]["file"] == f"{tmp_path}/sc\\xff.yaml"
    assert main(["report", str(out)]) == 0
    assert "sc\\xff.yaml" in (out / "report.html").read_text(encoding="utf-8")
    trace = Path(os.fsdecode(folder + b"/t\xff.csv"))
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,12,6\n")
    assert main(["trace", "plot", str(trace), "--out", str(tmp_path / "t.png")]) == 0
    capsys.readouterr()


def test_a_drafter_too_large_for_the_gpu_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A 70B draft model for an 8B target: the weights that do not fit are mostly the
    drafter's, and the error says so with the key that set it."""
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO.format(name="spec") + "serving: {speculative: {method: draft, "
                  "num_tokens: 3, draft_model: llama-3-70b, acceptance: {rate: 0.7}}}\n")
    assert main(["simulate", str(sc), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model llama-3-8b does not fit on h100-sxm" in err
    assert " of them the drafter's, serving.speculative.draft_model llama-3-70b)" in err
