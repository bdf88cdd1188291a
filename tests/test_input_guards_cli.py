"""Inputs a fuzzing pass (2027-01) found accepted silently, blowing up, or refused with
an unclear message: each is now one error line naming the file, key and value, or
handled as the docs say.

Found: YAML aliases expanded by ``sweep``'s cache key until memory ran out (and an alias
cycle ending in a traceback); ``capacity --replicas`` dropped without ``--target-rate``;
``report --format md --out r.html`` writing Markdown into .html; a host-tier bandwidth
in bytes/s, or near zero, accepted; the latency table's columns running together; a
``vllm.config`` file's bad flag blamed on the scenario; a 300-digit mean rate;
``prefix_caching`` errors not saying null; "got inf, expected a number"; ``--set
hardware.gpu.flops`` on a table GPU asking for ``name``; "a list of a number"; and
``sweep --rates -1,2`` read as a flag.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.cli import main
from sim.config.scenario import from_dict, load
from sim.cost.profilefile import load_profile
from sim.errors import ServesimError
from sim.report.printed import class_table, table
from sim.report.stagereport import stage_table
from sim.report.texttable import right_columns

LENGTHS = {"prompt": {"dist": "fixed", "value": 8}, "output": {"dist": "fixed", "value": 2}}
WORKLOAD = {"arrivals": {"process": "poisson", "rate": 5.0}, "num_requests": 4,
            "lengths": LENGTHS}
TINY = {"name": "tiny", "model": "tiny", "cost": {"linear": {"step_s": 0.01}},
        "workload": WORKLOAD}
# Six levels of nine aliases: 9**6 = 531,441 values from a few hundred bytes, past the
# loader's bound of 100,000 added values, yet small enough to expand without it.
BOMB = ('a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n"
                  for p, n in zip("abcde", "bcdef", strict=True)))
BOMB_ERROR = ("aliases (*name) expand the document by more than 100,000 values (the "
              "anchor here is copied again and again), far beyond what any scenario holds; "
              "write the repeated parts out or use fewer aliases\n")


def line_of(path: Path, text: str) -> str:
    """``line N``, the first line of the file at ``path`` that holds ``text``."""
    lines = path.read_text().splitlines()
    return f"line {next(i for i, line in enumerate(lines, 1) if text in line)}"


def error_of(capsys: Any, *argv: str) -> str:
    """The one stderr line of a servesim command that must fail with status 2."""
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: error: "), err
    return err


def write(tmp_path: Path, raw: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw))
    return path


def bomb_scenario(tmp_path: Path) -> Path:
    """The tiny scenario with the alias bomb under a vLLM kernel flag (accepted, not
    priced), where the fuzzing put it."""
    path = tmp_path / "bomb.yaml"
    nested = "".join(f"    {line}\n" for line in BOMB.splitlines())
    path.write_text(yaml.safe_dump(TINY) + "vllm:\n  compilation-config:\n" + nested)
    return path


# -- A: YAML aliases ------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["simulate"], ["sweep", "--rates", "2", "--workers", "1",
                                                    "--no-cache"]])
def test_an_alias_bomb_is_refused_naming_the_file(tmp_path: Path, capsys: Any,
                                                  command: list[str]) -> None:
    path = bomb_scenario(tmp_path)
    err = error_of(capsys, command[0], str(path), *command[1:], "--no-plots",
                   "--out", str(tmp_path / "o"))
    # The line of the anchor whose copies cross the bound.
    assert err == f"servesim: error: {path}: {line_of(path, 'e: &e')}: {BOMB_ERROR}"
    assert not (tmp_path / "o").exists()


def test_an_alias_cycle_is_refused_not_a_traceback(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "cycle.yaml"
    path.write_text(yaml.safe_dump(TINY) + "vllm:\n  compilation-config: &c [1, *c]\n")
    err = error_of(capsys, "sweep", str(path), "--rates", "2", "--workers", "1", "--no-cache",
                   "--no-plots", "--out", str(tmp_path / "o"))
    assert err == (f"servesim: error: {path}: {line_of(path, '&c')}: an alias refers to the "
                   "list or mapping that holds it (a cycle with no end); write the values out\n")


def test_ordinary_aliases_still_load(tmp_path: Path) -> None:
    text = ("model: tiny\ncost: {linear: {step_s: 0.01}}\nworkload:\n  num_requests: 4\n"
            "  arrivals: {process: poisson, rate: 2.0}\n  classes:\n"
            "    a: {weight: 1, lengths: &len {prompt: {dist: fixed, value: 8},\n"
            "                                  output: {dist: fixed, value: 2}}}\n"
            "    b: {weight: 1, lengths: *len}\n")
    path = tmp_path / "aliases.yaml"
    path.write_text(text)
    classes = load(path).workload.classes
    assert classes is not None and classes["a"].lengths == classes["b"].lengths


def test_an_alias_bomb_in_a_vllm_config_file_names_that_file(tmp_path: Path,
                                                             capsys: Any) -> None:
    (tmp_path / "vllm.yaml").write_text(BOMB)
    path = write(tmp_path, {**TINY, "vllm": {"config": "vllm.yaml"}})
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert err == f"servesim: error: {tmp_path / 'vllm.yaml'}: line 5: {BOMB_ERROR}"


def test_an_alias_bomb_in_a_profile_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(BOMB)
    with pytest.raises(ServesimError) as info:
        load_profile("p.yaml", tmp_path)
    assert f"{info.value}\n" == f"{tmp_path / 'p.yaml'}: line 5: {BOMB_ERROR}"


# -- B: capacity --replicas ------------------------------------------------------------------

def test_capacity_replicas_without_a_target_rate_is_refused(tmp_path: Path,
                                                            capsys: Any) -> None:
    err = error_of(capsys, "capacity", str(write(tmp_path, TINY)), "--slo", "ttft_p99=0.5",
                   "--replicas", "2", "--out", str(tmp_path / "o"))
    assert err == ("servesim: error: --replicas 2: needs --target-rate (it bounds the replica "
                   "counts tried for the target; without one the search finds the rate of "
                   "one replica)\n")


# -- C: report --format and --out; a host tier's bandwidth in bytes/s -----------------------

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulate folder to report on."""
    tmp = tmp_path_factory.mktemp("run")
    assert main(["simulate", str(write(tmp, TINY)), "--no-plots", "--quiet",
                 "--out", str(tmp / "run")]) == 0
    return tmp / "run"


@pytest.mark.parametrize(("fmt", "name", "says"), [
    ("md", "r.html", "a name for an HTML page, with --format md (Markdown); name the file .md"),
    ("html", "r.md", "a name for Markdown, with --format html (an HTML page); name the file "
                     ".html"),
])
def test_report_refuses_a_format_the_file_name_contradicts(
        run_dir: Path, tmp_path: Path, capsys: Any, fmt: str, name: str, says: str) -> None:
    out = tmp_path / name
    err = error_of(capsys, "report", str(run_dir), "--format", fmt, "--out", str(out))
    assert err == (f"servesim: error: --out: got {out}, {says}, or leave --format out and the "
                   "ending picks it\n")
    assert not out.exists()


def test_report_takes_its_format_from_the_out_name(run_dir: Path, tmp_path: Path) -> None:
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").read_text().startswith("# ")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r.htm")]) == 0
    assert (tmp_path / "r.htm").read_text().startswith("<!doctype html>")
    assert main(["report", str(run_dir)]) == 0  # no --out: html, as before
    assert (run_dir / "report.html").read_text().startswith("<!doctype html>")


@pytest.mark.parametrize("bandwidth", [64e9, 1e-300, 2e4, 5e-4])
def test_a_host_tier_bandwidth_out_of_range_is_refused(tmp_path: Path, capsys: Any,
                                                       bandwidth: float) -> None:
    raw = {**TINY, "serving": {"policy": "continuous", "prefix_caching": True,
                               "kv_offload": {"cpu_gb": 1, "bandwidth_gb_s": bandwidth}}}
    path = write(tmp_path, raw)
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert err == (f"servesim: error: {path}: serving.kv_offload.bandwidth_gb_s: got "
                   f"{bandwidth:g}; bandwidth_gb_s is in GB/s of 1e9 bytes/s (for example 64, "
                   "a PCIe 5.0 x16 link), from 0.001 to 10000\n")


@pytest.mark.parametrize("bandwidth", [1e-3, 64, 1e4])
def test_a_host_tier_bandwidth_in_range_loads(bandwidth: float) -> None:
    raw = {**TINY, "serving": {"policy": "continuous", "prefix_caching": True,
                               "kv_offload": {"cpu_gb": 1, "bandwidth_gb_s": bandwidth}}}
    tier = from_dict(raw).serving.kv_offload
    assert tier is not None and tier.bandwidth_gb_s == bandwidth


# -- D: the printed tables keep their columns apart ---------------------------------------

def test_right_columns_widen_for_a_wide_cell() -> None:
    head, rows = right_columns(["p50", "p99"], [["1.0", "2.0"], ["7153086.5", "15714971.4"]])
    assert head == "       p50        p99"
    assert rows == ["       1.0        2.0", " 7153086.5 15714971.4"]


def test_the_latency_table_keeps_huge_values_apart(run_dir: Path) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    ordinary = table(summary)
    for dist in summary["latency_s"].values():
        for k, v in dist.items():
            dist[k] = None if v is None else 15714.9714 + v  # s: 15714971.4 ms and up
    lines = table(summary).splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("metric (ms)"))
    stats = lines[head].split()[2:]
    for line in lines[head + 2:head + 7]:
        assert len(line.split()) == 1 + len(stats), line
    assert "metric (ms)          p50" in ordinary  # ordinary values: the columns as before


def test_the_class_and_stage_tables_keep_huge_values_apart() -> None:
    lat = {m: {"p50": 1e5, "p99": 2e5} for m in ("ttft", "tpot", "e2e")}
    klass = {"latency_s": lat, "requests": {"total": 3, "finished": 3},
             "throughput": {"goodput_requests_per_s": 1e7, "slo_attainment": 1.0,
                            "slo": {"ttft_s": 0.5, "tpot_s": None}}}
    head, _, row = class_table({"chat": klass})
    assert row.split() == ["chat", "3", "3", "100000000.0", "200000000.0", "100000000.0",
                           "200000000.0", "200000000.0", "10000000.000", "100.0%", "ttft<=0.5"]
    assert len(head) == len(row.partition("  ttft")[0]) + len("  SLO (s)")
    stage = {"stage": 1, "start_s": 0.0, "end_s": 1e9, "rate_rps": 2.5, "offered_rps": 2.5,
             "finished_rps": 1.0, "latency_s": lat, "slo_attainment": 0.5, "drain_s": 1e9}
    _, _, row = stage_table([stage])
    assert row.split() == ["1", "0.0", "1000000000.0", "2.5", "2.500", "1.000",
                           "100000000.0", "200000000.0", "100000000.0", "200000000.0", "50.0%",
                           "1000000000.0"]


# -- E: a vllm.config file's own flags -------------------------------------------------------

@pytest.mark.parametrize(("text", "says"), [
    ("max-num-seqs: 64\nfoo: 1\n", "foo: unknown or not modelled vLLM flag 'foo'; understood:"),
    ("max-num-seqs: 64\nmax_num_seqs: 32\n",
     "max_num_seqs: given twice (as 'max-num-seqs' and 'max_num_seqs')\n"),
    ("no-enable-prefix-caching: 1\n", "no-enable-prefix-caching: got 1, expected true or false\n"),
])
def test_a_bad_flag_in_a_vllm_config_file_names_that_file(tmp_path: Path, capsys: Any,
                                                          text: str, says: str) -> None:
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "vllm.yaml").write_text(text)
    path = write(tmp_path, {**TINY, "vllm": {"config": "cfg/vllm.yaml"}})
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert err.startswith(f"servesim: error: {tmp_path / 'cfg' / 'vllm.yaml'}: {says}")


def test_a_bad_flag_in_the_section_still_names_the_scenario(tmp_path: Path,
                                                            capsys: Any) -> None:
    (tmp_path / "vllm.yaml").write_text("max-num-seqs: 64\n")
    path = write(tmp_path, {**TINY, "vllm": {"config": "vllm.yaml", "foo": 1}})
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert err.startswith(f"servesim: error: {path}: vllm.foo: unknown or not modelled")


# -- F: messages -----------------------------------------------------------------------------

def test_a_tiny_time_scale_prints_readable_numbers(tmp_path: Path, capsys: Any) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n"
                                    "0,100,10\n0.5,200,20\n1.0,50,5\n")
    raw = {**TINY, "workload": {"trace": {"path": "t.csv", "time_scale": 1e-300}}}
    assert main(["simulate", str(write(tmp_path, raw)), "--no-plots",
                 "--out", str(tmp_path / "o")]) == 0
    assert ("workload: time_scale x1e-300: span 1.0 s -> 1e-300 s, mean rate 3.000 -> "
            "3e+300 req/s\n") in capsys.readouterr().out


@pytest.mark.parametrize(("key", "value", "says"), [
    ("serving.prefix_caching", '"on"', "got 'on', expected true, false or null"),
    ("serving.kv_offload.cpu_gb", ".inf", "got inf, expected a finite number"),
    ("slo.ttft_s", ".inf", "got inf, expected a finite number or null"),
    ("workload.arrivals.rate", "fast", "got 'fast', expected a finite number or null"),
    ("serving.preemption", "later", "got 'later', expected one of 'recompute', 'swap'"),
    ("hardware.gpu.flops", "1",
     "hardware.gpu is 'h100-sxm', a GPU of the table, whose figures --set does not change "
     "one by one; give an inline GPU whole instead (--set 'hardware.gpu={...}' or in the "
     "file), with all its fields: name, flops, mem_bw, mem_gb (or mem_bytes), link_bw, "
     "host_bw, node_gpus (docs/scenarios.md#a-gpu-described-inline)"),
])
def test_set_errors_say_what_is_allowed(tmp_path: Path, capsys: Any, key: str, value: str,
                                        says: str) -> None:
    path = write(tmp_path, {**TINY, "hardware": {"gpu": "h100-sxm"}})
    err = error_of(capsys, "simulate", str(path), "--set", f"{key}={value}",
                   "--out", str(tmp_path / "o"))
    assert err == f"servesim: error: {path}: {key}: {says}\n"


def test_the_default_gpu_is_named_when_set_reaches_into_it(tmp_path: Path,
                                                           capsys: Any) -> None:
    path = write(tmp_path, TINY)
    err = error_of(capsys, "simulate", str(path), "--set", "hardware.gpu.mem_bw=1e12",
                   "--out", str(tmp_path / "o"))
    assert f"{path}: hardware.gpu.mem_bw: hardware.gpu is unset, so 'h100-sxm', a GPU" in err


def test_set_into_a_list_item_says_to_give_the_whole_list(tmp_path: Path,
                                                         capsys: Any) -> None:
    # The list had been replaced by a mapping {'0': {...}}, refused as a value the file
    # never had ("faults.outages: got {'0': {'at_s': 3}}").
    raw = {**TINY, "cluster": {"replicas": 2},
           "faults": {"outages": [{"replica": 1, "at_s": 1, "duration_s": 2}]}}
    path = write(tmp_path, raw)
    err = error_of(capsys, "simulate", str(path), "--set", "faults.outages.0.at_s=3",
                   "--out", str(tmp_path / "o"))
    assert err == (f"servesim: error: {path}: faults.outages.0.at_s: faults.outages is a "
                   "list, whose items --set does not reach one by one; give the whole list "
                   "instead (--set 'faults.outages=[...]')\n")
    assert main(["simulate", str(path), "--set",
                 "faults.outages=[{replica: 1, at_s: 3, duration_s: 2}]", "--quiet",
                 "--no-plots", "--out", str(tmp_path / "o")]) == 0


def test_a_list_key_given_a_number_says_a_list_of_numbers(tmp_path: Path,
                                                         capsys: Any) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n")
    raw = {**TINY, "workload": {"trace": {"path": "t.csv", "window_s": 5}}}
    path = write(tmp_path, raw)
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert err == (f"servesim: error: {path}: workload.trace.window_s: got 5, expected a list "
                   "of finite numbers or null\n")


def test_a_rate_list_that_starts_with_a_minus_says_how_to_write_it(tmp_path: Path,
                                                                   capsys: Any) -> None:
    path = str(write(tmp_path, TINY))
    err = error_of(capsys, "sweep", path, "--rates", "-1,2", "--out", str(tmp_path / "o"))
    assert err == ("servesim: error: --rates -1,2: a value that begins with '-' reads as a "
                   "flag; write it --rates=-1,2 (see servesim sweep --help)\n")
    err = error_of(capsys, "sweep", path, "--rates=-1,2", "--out", str(tmp_path / "o"))
    assert err.startswith("servesim: error: --rates -1,2: rate -1 must be greater than 0")
    err = error_of(capsys, "sweep", path, "--out", str(tmp_path / "o"), "--rates")
    assert err == ("servesim: error: argument --rates: expected one argument (see servesim "
                   "sweep --help)\n")


ROOF = {"model": "tiny", "cost": "roofline",
        "workload": {"arrivals": {"process": "poisson", "rate": 5},
                     "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                 "output": {"dist": "fixed", "value": 4}},
                     "num_requests": 3}}


def test_set_reaches_into_a_cost_given_as_its_kind() -> None:
    from sim.config.overrides import apply_overrides

    # `cost: roofline` is the roofline with its defaults: --set changes one of them.
    sc = from_dict(apply_overrides(ROOF, ["cost.roofline.flops_efficiency=0.7"]))
    assert sc.cost.roofline is not None and sc.cost.roofline.flops_efficiency == 0.7
    # Setting another kind's key beside it is two cost models, refused as in a file.
    with pytest.raises(ServesimError, match=r"cost: give exactly one cost model .*got "
                                            r"measured, roofline"):
        from_dict(apply_overrides(ROOF, ["cost.measured.framework=vllm"]))


def test_set_into_a_gpu_given_as_a_list_is_one_error() -> None:
    from sim.config.overrides import apply_overrides

    raw = {**ROOF, "hardware": {"gpu": ["h100-sxm"]}}
    with pytest.raises(ServesimError, match="hardware.gpu"):
        from_dict(apply_overrides(raw, ["hardware.gpu.flops=1e15"]))


def test_a_first_column_without_names_is_its_least_width() -> None:
    from sim.report.texttable import left_width

    assert left_width(7, []) == 7 and left_width(7, ["a-long-name"]) == 12


def test_a_key_with_a_line_break_is_shown_escaped_on_one_line() -> None:
    # A key as the file spells it ("\n" here, from a fuzzed inline GPU) is part of the
    # error's location: escaped, the error stays one line.
    raw = {**ROOF, "hardware": {"gpu": {"\n": 0}}}
    with pytest.raises(ServesimError) as exc:
        from_dict(raw)
    text = str(exc.value)
    assert "\n" not in text and "hardware.gpu.\\n: unknown key" in text


def test_a_long_value_or_key_is_shortened_in_its_error(tmp_path: Path, capsys: Any) -> None:
    """A 200,000-character value had been echoed whole (the allowed values at the end of
    a 200 KB line), and a key past YAML's 1,024 had got PyYAML's bare message."""
    path = write(tmp_path, {**TINY, "serving": {"policy": "x" * 200_000}})
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert err == (f"servesim: error: {path}: serving.policy: unknown policy '{'x' * 60}"
                   "\u2026' (200,000 characters); valid: chunked, continuous, disaggregated, "
                   "orca, static\n")
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(TINY) + f"slo: {{{'k' * 2000}: 1}}\n")
    err = error_of(capsys, "simulate", str(path), "--out", str(tmp_path / "o"))
    assert "invalid YAML: a mapping key of 2,000 characters, more than the 1,024 YAML reads " \
           "as a plain key (the parser then says: " in err and err.endswith("shorten the key\n")
    assert str(ServesimError("m", "f", "a." + "b" * 300)) == \
        f"f: a.{'b' * 58}\u2026 (302 characters): m"
