"""Bad input to ``servesim validate --silicon``: each is one line naming the file, the
column or option and the row where there is one, and what is allowed; nothing is written
(no traceback, no silent acceptance, no run that quietly produced nothing)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from conftest import SILICON_HEAD, needs_tables, one_line, silicon_csv

from sim.cli import main
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify, fits_context
from sim.validate.siliconrows import read_rows

# AIConfigurator's Qwen3-32B bf16 runs: the id "fit" hashes into the fit half, "test" out.
FIT = "fit,source_file=x.csv,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,154.2,18.0"
TEST = FIT.replace("fit,", "test,", 1)
# InferenceX's Llama-3.1-70B FP8 run: in the fit half, and its framework's only group is
# "vllm fp8" (no bf16 "vllm" group to take the errors from).
PLAIN = ("fit,source_file=2026-04-06.csv; model=Llama-3.1-70B,vllm,,meta-llama/Llama-3.1-70B,"
         "h200_sxm,fp8,agg,1024,1024,4,8,1,,73,7.9")


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line ``servesim validate --silicon ARGS`` refuses with (exit status 2)."""
    assert main(["validate", "--silicon", *args]) == 2
    return one_line(capsys)


@pytest.mark.parametrize(("cells", "where"), [
    # 10^8-token prompts had been simulated: every request refused, the means NaN.
    ({8: "1e8"}, "isl: got '1e8', expected a whole number from 0 to 1,048,576"),
    ({9: "2000000"}, "osl: got '2000000', expected a whole number from 0 to 1,048,576"),
    ({8: "-5"}, "isl: got '-5', expected a whole number from 0 to 1,048,576"),
    # 10^8 clients: 10^9 requests, a run that never ends.
    ({10: "1e8"}, "batch_size: got '1e8', expected a whole number from 0 to 65,536"),
    ({11: "5000"}, "tp_size: got '5000', expected a whole number from 0 to 1,024"),
    ({10: "2048", 13: "64"}, "batch_size: got '2048' clients per attention-data-parallel "
                             "rank, times 64 ranks: 131,072 clients, expected at most 65,536"),
    # Python's digit grouping had been read (1_024 as 1024): no CSV writer emits it.
    ({8: "1_024"}, "isl: got '1_024', expected a whole number from 0 to 1,048,576 written "
                   "in ASCII digits alone (0-9, no _ between them)"),
    ({14: "1_54.2"}, "silicon_ttft_ms: got '1_54.2', expected a number written in ASCII "
                     "digits alone (0-9, no _ between them)"),
    # Another script's digits had been read as numbers (float() takes them).
    ({9: "\u0665\u0661\u0662"}, "osl: got '\u0665\u0661\u0662', expected a whole number "
                                  "from 0 to 1,048,576 written in ASCII digits alone"),
    ({15: "\uff11\uff12"}, "silicon_tpot_ms: got '\uff11\uff12', expected a number "
                            "written in ASCII digits alone"),
])
def test_counts_out_of_range_are_refused_when_read(tmp_path: Path, cells: dict[int, str],
                                                   where: str) -> None:
    row = FIT.split(",")
    for i, value in cells.items():
        row[i] = value
    with pytest.raises(ServesimError, match=re.escape(f"s.csv: line 2, {where}")):
        read_rows(silicon_csv(tmp_path, [",".join(row)]))


@pytest.mark.parametrize("nan", ["nan", "NaN", "NAN", " nan "])
def test_a_nan_count_is_not_given_whatever_its_letter_case(tmp_path: Path, nan: str) -> None:
    """'nan' had been a count not given and 'NaN' an error: one cell, two readings."""
    row = FIT.split(",")
    row[10] = nan  # batch_size
    got = read_rows(silicon_csv(tmp_path, [",".join(row)]))[0]
    assert got.concurrency == 0


def test_a_row_longer_than_its_models_context_is_skipped_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Within the bound, but past Qwen3-32B's 40,960 tokens: the simulated server refuses
    # every request, and there is no latency to compare.
    long = FIT.replace(",1024,128,", ",40000,1000,")
    case = classify(read_rows(silicon_csv(tmp_path, [long]))[0])
    assert isinstance(case, Case)
    assert fits_context(case) == ("prompt plus output longer than the model's context "
                                  "(qwen3-32b: 40,960 tokens)")
    out = tmp_path / "out"
    line = refused(capsys, str(tmp_path / "s.csv"), "--out", str(out))
    assert line.endswith("s.csv: no row can be simulated; skipped: 1 prompt plus output "
                         "longer than the model's context (qwen3-32b: 40,960 tokens)")
    assert not out.exists()


@needs_tables
def test_a_row_that_finishes_nothing_is_null_in_the_json(tmp_path: Path) -> None:
    from sim.validate.siliconcli import main as silicon

    # Llama-3.1-70B on two 80 GB A100s under SGLang: 0.88 of memory less the weights
    # leaves about 26,000 tokens of KV cache a GPU, less than one 30,000 + 2,000-token
    # request: no request finishes, no mean latency: null, where NaN (not JSON) was
    # written.
    starved = FIT.replace(",vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,", ",sglang,0.5,"
                          "meta-llama/Llama-3.1-70B,a100_sxm,").replace(
                              ",1024,128,8,2,1,", ",30000,2000,1,2,1,")
    csv = silicon_csv(tmp_path, [starved])
    assert silicon(["--silicon", str(csv), "--out", str(tmp_path / "o")]) == 0
    text = (tmp_path / "o" / "silicon.json").read_text()
    assert "NaN" not in text
    record = json.loads(text)["records"][0]
    assert record["ttft_pred_ms"] is None and "not finished" in record["note"]
    # Fitting priors to it has nothing to fit to: refused, and nothing written.
    with pytest.raises(ServesimError, match=r"none of the 1 sglang rows to fit on finished"):
        silicon(["--silicon", str(csv), "--out", str(tmp_path / "o2"),
                 "--fit-priors", str(tmp_path / "p.yaml")])
    assert not (tmp_path / "o2").exists() and not (tmp_path / "p.yaml").exists()
    # On one A100 its 131 GiB of weights leave no room at all: no server ran that, and
    # the row is named as one that cannot be simulated.
    impossible = starved.replace(",30000,2000,1,2,1,", ",30000,2000,1,1,1,")
    with pytest.raises(ServesimError, match=r"s\.csv: line 2: cannot simulate the row: "
                       r"serving\.num_gpu_blocks: got 1 blocks .* beside the weights"):
        silicon(["--silicon", str(silicon_csv(tmp_path, [impossible])),
                 "--out", str(tmp_path / "o3")])


def test_a_column_named_twice_is_refused(tmp_path: Path) -> None:
    path = silicon_csv(tmp_path, [FIT + ",2048"], extra=("isl",))
    with pytest.raises(ServesimError, match=re.escape(
            "s.csv: line 1: column 'isl' is named twice (columns 9 and 17)")):
        read_rows(path)


def test_a_malformed_csv_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    # An unclosed quote swallowed the rest of the file into one cell, and the row was
    # skipped as "disaggregated serving" (its mode cell gone).
    path.write_text("\n".join([SILICON_HEAD, FIT, FIT.replace(",vllm,", ',"vllm,'), FIT]))
    with pytest.raises(ServesimError, match=re.escape(
            "s.csv: line 3: malformed CSV line: a quote opened here is never closed")):
        read_rows(path)
    # One closed lines later: the lines between had been read as one cell.
    path.write_text("\n".join([SILICON_HEAD, FIT.replace(",vllm,", ',"vllm,'), FIT,
                               FIT.replace(",vllm,", ',vllm",')]))
    with pytest.raises(ServesimError, match=re.escape(
            "s.csv: line 2: malformed CSV line: a quoted cell runs on to line 4")):
        read_rows(path)
    # A row of more cells than the header (a comma not quoted) had its extra ones dropped.
    path.write_text("\n".join([SILICON_HEAD, FIT, FIT.replace("x.csv", "x.csv,y")]))
    with pytest.raises(ServesimError, match=re.escape(
            "s.csv: line 3: malformed CSV line: 17 cells where the header names 16 columns")):
        read_rows(path)


def test_rows_keep_their_own_line_past_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text("\n".join([SILICON_HEAD, FIT, "", TEST, FIT + ",,"]) + "\n")
    assert [r.line for r in read_rows(path)] == [2, 4, 5]
    path.write_text("\n".join([SILICON_HEAD, FIT, "", TEST.replace(",1024,", ",x,")]))
    with pytest.raises(ServesimError, match=r"s\.csv: line 4, isl: got 'x'"):
        read_rows(path)


def test_a_fit_with_every_row_held_out_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv, out, priors = silicon_csv(tmp_path, [TEST, TEST]), tmp_path / "o", tmp_path / "p.yaml"
    line = refused(capsys, str(csv), "--out", str(out), "--fit-priors", str(priors))
    assert f"s.csv: --fit-priors {priors}: nothing to fit the priors of vllm (2 rows) on: " \
           "all its rows are held out" in line
    assert "leave it out with --framework" in line
    assert not out.exists() and not priors.exists()


@pytest.mark.parametrize(("target", "why"), [
    ("folder", "is a folder; give the path of a YAML file"),
    ("nowhere/p.yaml", "its folder {tmp}/nowhere does not exist"),
    ("s.csv/p.yaml", "its folder {tmp}/s.csv is not a folder"),
    ("s.csv", "is the input CSV; writing the priors there would overwrite the measurements"),
    ("link.csv", "is the input CSV"),
])
def test_a_priors_path_that_cannot_take_them_is_refused_before_any_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str, why: str) -> None:
    csv, out = silicon_csv(tmp_path, [FIT]), tmp_path / "o"
    before = csv.read_bytes()
    (tmp_path / "folder").mkdir()
    os.symlink(csv, tmp_path / "link.csv")
    line = refused(capsys, str(csv), "--out", str(out), "--fit-priors", str(tmp_path / target))
    assert line.startswith(f"servesim: error: --fit-priors {tmp_path / target}: "
                           + why.format(tmp=tmp_path))
    assert not out.exists() and csv.read_bytes() == before


def test_a_priors_file_may_go_in_the_out_folder_the_run_makes(tmp_path: Path) -> None:
    from sim.validate.siliconcli import check_priors_path

    csv = silicon_csv(tmp_path, [FIT])
    check_priors_path(tmp_path / "o" / "p.yaml", csv, tmp_path / "o")
    with pytest.raises(ServesimError, match="does not exist"):
        check_priors_path(tmp_path / "o" / "p.yaml", csv, tmp_path / "other")


@needs_tables
def test_fitted_priors_name_the_csv_they_were_fitted_on(tmp_path: Path) -> None:
    import yaml

    from sim.validate.siliconcli import main as silicon

    csv, priors = silicon_csv(tmp_path, [PLAIN]), tmp_path / "p.yaml"
    assert silicon(["--silicon", str(csv), "--out", str(tmp_path / "o"),
                    "--fit-priors", str(priors)]) == 0
    doc = yaml.safe_load(priors.read_text())
    assert "silicon_sample.csv" not in priors.read_text()
    assert doc["note"].startswith(f"fitted by `servesim validate --silicon --fit-priors` on "
                                  f"rows of {csv};")
    vllm = doc["frameworks"]["vllm"]
    assert vllm["source"].endswith(f"on 1 InferenceX rows of {csv}") and vllm["rows"] == 1
    # Its rows are all FP8: no bf16 "vllm" group in the errors (a KeyError had followed
    # the written silicon.json).
    assert vllm["errors"] == {}


@needs_tables
def test_a_row_its_model_cannot_be_split_over_names_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = silicon_csv(tmp_path, [FIT.replace(",8,2,1,", ",8,3,1,")])
    line = refused(capsys, str(csv), "--out", str(tmp_path / "o"))
    assert f"{csv}: line 2, tp_size: cannot simulate the row: " in line and "tp=3" in line


def test_filters_matching_no_row_name_the_filters_and_the_rows_there(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = str(silicon_csv(tmp_path, [FIT, TEST, PLAIN]))
    line = refused(capsys, csv, "--framework", "bogus")
    assert "--framework: invalid choice: 'bogus' (choose from 'sglang', 'trtllm', 'vllm')" \
        in line
    line = refused(capsys, csv, "--framework", "trtllm", "--framework", "sglang")
    assert line.endswith("s.csv: no row matches --framework trtllm --framework sglang; the "
                         "rows servesim can simulate here are vllm (2 bf16, 1 fp8)")
    line = refused(capsys, csv, "--framework", "vllm", "--weights", "4bit")
    assert line.endswith("no row matches --framework vllm --weights 4bit; the rows servesim "
                         "can simulate here are vllm (2 bf16, 1 fp8)")
    # Selected, but past the model's context: the filter and the reason.
    long = str(silicon_csv(tmp_path, [FIT.replace(",1024,128,", ",40000,1000,"), PLAIN]))
    line = refused(capsys, long, "--weights", "bf16")
    assert line.endswith("no row matching --weights bf16 can be simulated; skipped: 1 prompt "
                         "plus output longer than the model's context (qwen3-32b: 40,960 "
                         "tokens)")


def test_a_gemm_mode_beside_an_empty_or_bf16_precision_prices_those_weights(
        tmp_path: Path) -> None:
    # AIConfigurator's rows may leave precision empty and say fp8 in gemm_quant_mode: the
    # mode is what the GEMMs ran; a mode servesim does not model is kept out, named.
    cases = []
    for precision, mode in (("", "fp8"), ("bf16", "fp8_block"), ("", "xx"), ("", "")):
        row = FIT.replace(",h100_sxm,,agg,", f",h100_sxm,{precision},agg,") + f",{mode}"
        cases.append(classify(read_rows(silicon_csv(tmp_path, [row],
                                                    ("gemm_quant_mode",)))[0]))
    assert [c.dtype for c in cases[:2]] == ["fp8", "fp8-block"]
    assert isinstance(cases[2], str) and cases[2].startswith("unlabelled weights (xx): ")
    assert isinstance(cases[3], Case) and cases[3].dtype == "bf16"
