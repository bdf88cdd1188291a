"""Inputs a second fuzzing pass (2026-12-06, about 2,700 cases over scenarios, traces,
config.json files, profiles and every command's flags) found blowing up, accepted
silently, or refused with a message that did not name what was wrong: each is now one
error line naming the file, key and value, or handled as the docs say.

Found: ``--flag=--`` (argparse hands the flag an empty list: a traceback in every
command, and ``validate --rate=--`` dropped), and an empty argument (``--out ""`` and
an empty scenario path read as the folder "."); a top-level section given 0, "", [] or
false read as absent (the defaults, without a word); a one-row trace's ``time_scale``
note printing "mean rate nan"; ``repeat`` stacking every copy of a trace whose rows
share one time at that instant; a bad human-readable integer in the ``vllm`` section
blamed on the scenario key, which does not take vLLM's suffixes; an arrival rate too
low for the clock not saying what rate was given; and a profile whose coefficient ran
the clock out blamed on arrival times first, naming neither the cost model nor its file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from test_input_guards_cli import TINY, WORKLOAD, error_of, write

from sim.cli import main
from sim.config.scenario import from_dict
from sim.errors import ServesimError


@pytest.mark.parametrize(("command", "flag"), [
    ("simulate", "--percentiles"), ("simulate", "--out"), ("sweep", "--rates"),
    ("sweep", "--seeds"), ("compare", "--variant"), ("capacity", "--tp"),
    ("simulate", "--percent"),  # argparse takes a unique prefix of a flag
])
def test_a_flag_given_double_dash_is_refused_not_a_traceback(
        tmp_path: Path, capsys: Any, command: str, flag: str) -> None:
    path = str(write(tmp_path, TINY))
    err = error_of(capsys, command, path, f"{flag}=--")
    assert err == (f"servesim: error: {flag}=--: '--' is not a value for {flag}; it marks the "
                   f"end of the flags (see servesim {command} --help)\n")


def test_the_spaced_double_dash_does_not_advise_the_form_that_fails(
        tmp_path: Path, capsys: Any) -> None:
    path = str(write(tmp_path, TINY))
    err = error_of(capsys, "simulate", path, "--percentiles", "--")
    assert err == ("servesim: error: --percentiles --: '--' marks the end of the flags, so "
                   "--percentiles has no value (see servesim simulate --help)\n")


def test_validate_does_not_drop_a_rate_given_double_dash(capsys: Any) -> None:
    # Before, argparse's empty list left --rate unset: a full replay at the default load.
    err = error_of(capsys, "validate", "--device", "cpu", "--model", "tiny", "--rate=--")
    assert "--rate=--: '--' is not a value for --rate" in err


@pytest.mark.parametrize("section", ["hardware", "serving", "cluster", "slo", "admission",
                                     "faults", "disaggregated"])
@pytest.mark.parametrize("value", [0, "", [], False])
def test_a_section_of_the_wrong_kind_is_refused_even_when_empty(section: str,
                                                               value: Any) -> None:
    with pytest.raises(ServesimError) as info:
        from_dict({**TINY, section: value}, "s.yaml")
    assert str(info.value) == f"s.yaml: {section}: got {value!r}, expected a mapping"


def test_an_empty_section_still_means_its_defaults() -> None:
    # `serving:` with every key commented out is YAML's null: the defaults, as before.
    a = from_dict({**TINY, "serving": None, "hardware": None, "slo": None})
    b = from_dict(TINY)
    assert (a.serving, a.hardware, a.slo) == (b.serving, b.hardware, b.slo)


def test_time_scale_of_a_trace_at_one_instant_prints_no_nan(tmp_path: Path,
                                                             capsys: Any) -> None:
    (tmp_path / "one.csv").write_text("arrival_s,prompt_tokens,output_tokens\n2,8,2\n")
    raw = {**TINY, "workload": {"trace": {"path": "one.csv", "time_scale": 5}}}
    out = tmp_path / "o"
    assert main(["simulate", str(write(tmp_path, raw)), "--out", str(out), "--no-plots"]) == 0
    printed = capsys.readouterr().out
    want = ("time_scale x5: span 0.0 s -> 0.0 s, every arrival at one time, 2.0 s -> 10.0 s "
            "(no mean rate)")
    assert want in printed and "nan" not in printed
    assert "nan" not in (out / "summary.json").read_text()


def test_repeat_of_a_trace_at_one_instant_is_refused(tmp_path: Path, capsys: Any) -> None:
    trace = tmp_path / "same.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n0,8,2\n0,8,2\n")
    raw = {**TINY, "workload": {"trace": {"path": "same.csv", "repeat": 3}}}
    err = error_of(capsys, "simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "o"))
    # At the scenario's key, the trace in words (it had named the trace file alone).
    assert err == (f"servesim: error: {tmp_path}/s.yaml: workload.trace.repeat: got 3: every "
                   f"arrival of {trace} is at the same time (0.0 s), so a copy's shift (the "
                   "trace's span plus a mean gap) is 0 and the copies would all arrive at that "
                   "instant; give the rows distinct times\n")
    raw["workload"]["trace"]["repeat"] = 1  # one copy: nothing to shift
    assert main(["simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "o1"),
                 "--no-plots"]) == 0


@pytest.mark.parametrize(("flag", "value"), [("max-model-len", "32q"),
                                             ("kv-cache-memory-bytes", "10X"),
                                             ("max-num-batched-tokens", "8kk")])
def test_a_bad_human_readable_integer_names_the_vllm_flag(flag: str, value: str) -> None:
    raw = {**TINY, "vllm": {flag: value}}
    with pytest.raises(ServesimError) as info:
        from_dict(raw, "s.yaml")
    text = str(info.value)
    assert text.startswith(f"s.yaml: vllm.{flag}: got {value!r}, expected an integer, "
                           "optionally with vLLM's suffix k, m or g"), text
    assert text.endswith(", or auto") == (flag == "max-model-len")


def test_an_arrival_rate_too_low_for_the_clock_says_the_rate(tmp_path: Path,
                                                            capsys: Any) -> None:
    raw = {**TINY, "workload": {**WORKLOAD, "arrivals": {"process": "poisson",
                                                         "rate": 1e-300}}}
    err = error_of(capsys, "simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "o"))
    assert err.endswith("the arrival rate (1e-300 req/s) is too low or start_s (0 s) too "
                        "late\n"), err


def test_a_profile_priced_out_of_range_is_named_by_the_clock_error(tmp_path: Path,
                                                                  capsys: Any) -> None:
    shipped = Path(__file__).resolve().parent.parent / "sim/data/profiles"
    text = (shipped / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text()
    # The step's fixed cost (the profile's first const_s) priced at 1e30 s.
    text, n = re.subn(r"const_s: [0-9.e+-]+,", "const_s: 1.0e+30,", text, count=1)
    assert n == 1
    (tmp_path / "p.yaml").write_text(text)
    raw = {**TINY, "model": "llama-3-8b", "cost": {"profile": "p.yaml"}}
    err = error_of(capsys, "simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "o"))
    # Before, it listed arrival times first and named neither the cost model nor its file.
    assert err.endswith("a GPU figure or a cost coefficient of the cost model (measured "
                        "kernels: vLLM 0.24.0 on H100-SXM; steps over 512 tokens without CUDA "
                        "graphs; async scheduling, read from p.yaml) is out of range\n"), err


@pytest.mark.parametrize("argv", [["--out", ""], ["--out="], ["--percentiles", ""]])
def test_an_empty_flag_value_is_refused_by_name(tmp_path: Path, capsys: Any,
                                                argv: list[str]) -> None:
    # `--out ""` had been read as the path "." (the working folder).
    flag = argv[0].rstrip("=")
    err = error_of(capsys, "simulate", str(write(tmp_path, TINY)), *argv)
    assert err == (f"servesim: error: {flag}: got an empty value; give {flag} a value (see "
                   "servesim simulate --help)\n")


def test_an_empty_positional_argument_is_refused(capsys: Any) -> None:
    # An empty scenario path had been read as the folder '.': "is a directory".
    err = error_of(capsys, "simulate", "--no-plots", "")
    assert err == ("servesim: error: got an empty argument (''), where a file, folder or "
                   "value belongs (see servesim simulate --help)\n")


# float() and int() read any script's digits: Arabic-Indic 1 (U+0661) and 50 (U+0665
# U+0660), full-width 1 (U+FF11). No one types them meaning a number; they had been read
# as 1 and 50 by every numeric flag, and by vLLM's human-readable integers.
@pytest.mark.parametrize(("command", "argv", "message"), [
    ("sweep", ["--seeds", "\u0661"], "--seeds \u0661: expected a whole number"),
    ("sweep", ["--rates", "\u0661,2"], "--rates \u0661,2: expected START:STOP:STEP or a "
                                       "comma list of rates"),
    ("sweep", ["--rates", "1:\uff11:1"], "--rates 1:\uff11:1: expected START:STOP:STEP"),
    ("simulate", ["--percentiles", "\u0665\u0660,99"],
     "--percentiles \u0665\u0660,99: expected a comma list of percentiles"),
])
def test_a_flag_refuses_another_scripts_digits(tmp_path: Path, capsys: Any, command: str,
                                               argv: list[str], message: str) -> None:
    err = error_of(capsys, command, str(write(tmp_path, TINY)), *argv)
    assert err.startswith(f"servesim: error: {message}"), err


def test_a_human_readable_integer_refuses_another_scripts_digits() -> None:
    raw = {**TINY, "vllm": {"max-model-len": "\u0663\u0662k"}}  # Arabic-Indic 32k
    with pytest.raises(ServesimError, match=r"^s\.yaml: vllm\.max-model-len: got "
                                            "'\u0663\u0662k', expected an integer"):
        from_dict(raw, "s.yaml")


@pytest.mark.parametrize(("edit", "message"), [
    # A TensorRT-LLM profile runs its prefill steps eagerly while the phrase said vLLM.
    (("  framework: vllm", "  framework: trtllm"),
     "source.phrase: got 'measured kernels: vLLM 0.24.0 on H100-SXM', but source.framework "
     "'trtllm' and source.version '0.24.0' make it begin 'measured kernels: TensorRT-LLM "
     "0.24.0'"),
    # vLLM 0.12 sizes memory and schedules unlike 0.24, which the phrase still named.
    (("  version: 0.24.0", "  version: 0.12.0"),
     "source.phrase: got 'measured kernels: vLLM 0.24.0 on H100-SXM', but source.framework "
     "'vllm' and source.version '0.12.0' make it begin 'measured kernels: vLLM 0.12.0'"),
])
def test_a_profile_whose_phrase_names_another_framework_is_refused(
        tmp_path: Path, capsys: Any, edit: tuple[str, str], message: str) -> None:
    shipped = Path(__file__).resolve().parent.parent / "sim/data/profiles"
    text = (shipped / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text()
    assert text.count(edit[0] + "\n") == 1
    (tmp_path / "p.yaml").write_text(text.replace(edit[0] + "\n", edit[1] + "\n"))
    raw = {**TINY, "model": "llama-3-8b", "cost": {"profile": "p.yaml"}}
    err = error_of(capsys, "simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "o"))
    assert err.endswith(f"p.yaml: {message}\n"), err


def test_an_optimization_level_flag_takes_ascii_digits_alone() -> None:
    # -O followed by an Arabic-Indic 3 had been read as optimization level 3.
    raw = {**TINY, "vllm": {"O\u0663": True}}
    with pytest.raises(ServesimError, match="^s\\.yaml: vllm\\.O\u0663: unknown or not "
                                            "modelled vLLM flag 'O\u0663'"):
        from_dict(raw, "s.yaml")
    from_dict({**TINY, "vllm": {"O3": True}}, "s.yaml")  # the ASCII level still reads
