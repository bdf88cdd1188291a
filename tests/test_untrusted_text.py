"""Text servesim did not write (a JSON input's strings, a cached point, a file's name)
either reads as whole characters and finite numbers or is refused where it is read:
half a UTF-16 surrogate pair is named by file and key, a file name's non-UTF-8 bytes
reach JSON outputs as ``\\xNN`` escapes, and a damaged sweep cache entry is run again
instead of carried into the tables."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from sim.cli import main
from sim.configtools import half_character
from sim.cost.hfconfig import from_hf_config
from sim.errors import ServesimError
from sim.report.metrics import clean
from sim.validate import vllm_results

ROOT = Path(__file__).resolve().parent.parent
HALF = ("a \\uD800-\\uDFFF escape here is half of a UTF-16 surrogate pair, not a "
        "character; write the character itself or its pair of escapes")
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
         "vocab_size": 128256, "max_position_embeddings": 8192, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("doc, where", [
    ({"a": "x\ud800"}, "a"),
    ({"a": [1, {"b": "\udfff"}]}, "a[1].b"),
    ("\ud800", ""),
    ({"a": "\U0001F600", "b": "plain"}, None),  # a pair, as json.dumps escapes an emoji
])
def test_half_character_finds_the_key(doc: object, where: str | None) -> None:
    assert half_character(json.dumps(doc), doc) == where


def test_an_hf_config_string_with_half_a_character_is_named(tmp_path: Path) -> None:
    """_name_or_path names the model in every title: loaded, it had stopped the plots
    and the report, and profile build had written a profile it cannot read back."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA, "_name_or_path": "ab\ud800cd"}))
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == f"{path}: _name_or_path: {HALF}"


@pytest.mark.parametrize("key", ["model_id", "backend", "date"])
def test_a_vllm_result_string_with_half_a_character_is_named(tmp_path: Path, key: str) -> None:
    """model_id and backend head the printed table (a UnicodeEncodeError there), date
    went into validation.json as read."""
    data = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "bench_detailed.json").read_text())
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**data, key: "m\ud800"}))
    with pytest.raises(ServesimError) as err:
        vllm_results.load(path)
    assert str(err.value) == f"{path}: {key}: {HALF}"


def test_clean_escapes_a_file_names_bytes_in_keys_and_values() -> None:
    """A path with a 0xff byte (kept by Python as \\udcff) had gone into
    validation.json and trace stats --json as a lone \\udcff escape."""
    assert clean({"f\udcff": ["x/\udcffy.json", 1.5, float("nan")], "g": "é"}) == {
        "f\\xff": ["x/\\xffy.json", 1.5, None], "g": "é"}


def test_trace_stats_json_names_a_non_utf8_file_with_escapes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = Path(os.fsdecode(os.fsencode(tmp_path) + b"/t\xff.csv"))
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,12,6\n")
    assert main(["trace", "stats", str(trace), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == f"{tmp_path}/t\\xff.csv"


@pytest.mark.parametrize("edit", [
    lambda row: {**row, "ttft_p99": "x"},     # had stopped the sweep with a ValueError
    lambda row: {**row, "ttft_p99": "NaN"},   # had left the point's cell empty
    lambda row: {**row, "finished": -5},      # had been written to points.csv as is
])
def test_a_damaged_cache_entry_is_run_again(tmp_path: Path, edit: object,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sweep", str(ROOT / "scenarios" / "capacity-md1.yaml"), "--rates", "20,30",
            "--set", "workload.num_requests=200", "--no-plots", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "good")]) == 0
    shutil.copytree(tmp_path / "good", tmp_path / "bad")
    entry = sorted((tmp_path / "bad" / "cache").glob("*.json"))[0]
    blob = json.loads(entry.read_text())
    blob["row"] = edit(blob["row"])  # type: ignore[operator]
    entry.write_text(json.dumps(blob).replace('"NaN"', "NaN"))
    assert main([*args, "--out", str(tmp_path / "bad")]) == 0
    for name in ("sweep.csv", "points.csv"):
        assert (tmp_path / "bad" / name).read_bytes() == (tmp_path / "good" / name).read_bytes()
    assert json.loads(entry.read_text())["row"] == json.loads(
        (tmp_path / "good" / "cache" / entry.name).read_text())["row"]
    capsys.readouterr()


@pytest.mark.parametrize("command", [
    ["sweep", str(ROOT / "scenarios" / "capacity-md1.yaml"), "--rates", "20", "--quiet"],
    ["report", "RUN"],
    ["trace", "plot", "azure_2023_code"],
])
def test_an_output_name_too_long_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    """A 250-byte folder name is legal, but the run's .tmp-<pid> folder beside it is not:
    the sweep had run every point (and filled a cache) before failing; a 300-byte report
    or plot name had ended in an OSError traceback."""
    if command == ["report", "RUN"]:
        run = tmp_path / "run"
        assert main(["simulate", str(ROOT / "scenarios" / "capacity-md1.yaml"), "--set",
                     "workload.num_requests=50", "--no-plots", "--quiet", "--out",
                     str(run)]) == 0
        command = ["report", str(run)]
    name = "Q" * (250 if command[0] == "sweep" else 300)
    out = tmp_path / "o" / (name + {"report": ".html", "trace": ".png"}.get(command[0], ""))
    out.parent.mkdir()
    capsys.readouterr()
    assert main([*command, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"a name of {len(out.name)} bytes (QQQ" in err
    assert "file systems take 255 bytes a name, and the last one here at most 240" in err
    assert not any(out.parent.iterdir())


def test_sweep_policies_are_checked_against_the_registry(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown policy had been found when points were built, named by the scenario
    key; a name holding a line break had split the error over two lines."""
    md1 = str(ROOT / "scenarios" / "capacity-md1.yaml")
    for given, bad in (("chunked,nope", "'nope'"), ("chunked\ncontinuous", None)):
        assert main(["sweep", md1, "--rates", "20", "--policies", given,
                     "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        bad = bad or repr(given)
        assert err == (f"servesim: error: --policies: got {given!r}: unknown policy {bad}; "
                       "valid: chunked, continuous, disaggregated, orca, static\n")


def test_a_long_vllm_result_name_gives_a_label_that_names_files() -> None:
    """Level labels name output files (predicted-LABEL.csv): a 240-byte file name had run
    every level and then failed to write them."""
    from sim.validate.vllmcli import labels

    got = labels([Path("V" * 240 + ".json"), Path("V" * 240 + ".json"), Path("ok.json")])
    assert got == ["vllm-" + "V" * 100, "vllm-" + "V" * 100 + "~2", "vllm-ok"]


@pytest.mark.parametrize("name", ["a\x7fb", "a\x85b", "a\u2028b", "run\u202eflow"])
def test_a_name_with_control_or_format_characters_names_no_default_folder(name: str) -> None:
    """The check said "no control characters" and let DEL, NEL, a line separator and
    a right-to-left override (a listing that reads backwards) name folders under out/."""
    from sim.report.outputs import default_out

    with pytest.raises(ServesimError, match="control or format characters"):
        default_out(name)
    assert default_out("plain name é") == Path("out") / "plain name é"


@pytest.mark.parametrize("args, flag", [
    (["--gpus", "h100-sxm:\u0662"], "--gpus"),       # Arabic-Indic 2
    (["--slo", "ttft_p99=\uff15"], "--slo"),          # full-width 5
])
def test_digits_of_other_scripts_are_refused_by_every_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    """--rates, --tp and traces refuse them; --gpus NAME:TP and --slo had read them."""
    command = ["compare"] if flag == "--gpus" else ["sweep", "--rates", "20"]
    cmd = [command[0], str(ROOT / "scenarios" / "capacity-md1.yaml"), *command[1:], "--set",
           "workload.num_requests=20", *args, "--out", str(tmp_path / "o")]
    assert main(cmd) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err
    assert not (tmp_path / "o").exists()


def test_a_sweep_whose_every_request_is_rejected_plots_without_warnings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No request finished: the token panel had no line, and matplotlib printed its own
    UserWarning (no artists for the legend) into the command's output."""
    import warnings

    sc = tmp_path / "s.yaml"
    sc.write_text("name: rej\nmodel: llama-3-8b\nhardware: {gpu: h100-sxm}\ncost: roofline\n"
                  "vllm: {max-model-len: 1000}\nworkload:\n  arrivals: {process: poisson, "
                  "rate: 2}\n  lengths: {prompt: {dist: fixed, value: 2000}, output: "
                  "{dist: fixed, value: 100}}\n  num_requests: 20\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert main(["sweep", str(sc), "--rates", "1,2", "--quiet", "--allow-rejections",
                     "--workers", "1", "--out", str(tmp_path / "o")]) == 0
    assert [str(w.message) for w in seen if issubclass(w.category, UserWarning)] == []
    assert (tmp_path / "o" / "throughput_vs_rate.png").read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
