"""No silent failure and no traceback: runs that rejected too many requests exit non-zero
naming the limit to raise; every numeric scenario key and command-line option refuses
bad values in one line; every input file that is compressed, binary, empty, a folder or
not UTF-8 is one line; YAML 1.2 numbers; the memory estimate refuses what would not fit;
the progress bar changes no output."""

from __future__ import annotations

import bz2
import copy
import dataclasses
import gzip
import json
import lzma
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
import yaml
from conftest import one_line

from sim.cli import main
from sim.config.scenario import Scenario, load
from sim.configtools import parse_yaml
from sim.core import budget
from sim.core.engine import simulate
from sim.errors import ServesimError

ROOT = Path(__file__).resolve().parent.parent
FIX = {"dist": "fixed", "value": 8}


def tiny(**sections: Any) -> dict[str, Any]:
    """A scenario mapping on the tiny model that runs in milliseconds."""
    raw: dict[str, Any] = {
        "name": "t", "model": "tiny", "cost": {"linear": {"step_s": 0.01,
                                                          "per_new_token_s": 0.001}},
        "serving": {"policy": "continuous", "block_size": 4, "max_num_batched_tokens": 256},
        "workload": {"arrivals": {"process": "constant", "rate": 10.0},
                     "lengths": {"prompt": {"dist": "uniform", "low": 4, "high": 40},
                                 "output": FIX},
                     "num_requests": 12, "seed": 3},
    }
    raw.update(sections)
    return raw


def write(tmp: Path, raw: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp / name
    path.write_text(yaml.safe_dump(raw))
    return path


def simulate_cli(path: Path, tmp: Path, *extra: str) -> int:
    return main(["simulate", str(path), "--out", str(tmp / "out"), "--no-plots", "--quiet",
                 *extra])


# -- rejections ----------------------------------------------------------------------------
def test_run_rejecting_over_the_share_names_the_limit_and_the_value_needed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Prompts of 4..40 tokens plus 8 out against a 30-token context: the rejected ones
    need prompt + output up to the longest drawn; the error names model.max_context, its
    value now, the value needed, and the outputs are still written."""
    raw = tiny(model={"preset": "tiny", "max_context": 30})
    path = write(tmp_path, raw)
    sc = load(path)
    res = simulate(sc)
    rejected = res.status == 2  # REJECTED
    need = int((res.requests.prompt_tokens + res.requests.output_tokens)[rejected].max())
    n_rej = int(rejected.sum())
    assert 0 < n_rej < 12
    assert simulate_cli(path, tmp_path) == 2
    line = one_line(capsys)
    assert line.startswith(f"servesim: error: {path}: model.max_context: {n_rej} of 12 "
                           "arrived requests rejected")
    assert (f"raise model.max_context (now 30; vLLM's --max-model-len) to at least {need} "
            in line)
    assert "exceeds_context" in line and "--allow-rejections" in line
    assert (tmp_path / "out" / "requests.csv").is_file()
    # The flag accepts the run; a share at or above the one rejected does too.
    assert simulate_cli(path, tmp_path, "--allow-rejections") == 0
    share = n_rej / 12
    assert simulate_cli(path, tmp_path, "--max-rejected-share", f"{share:.6f}") == 0
    assert simulate_cli(path, tmp_path, "--max-rejected-share", f"{share - 0.01:.6f}") == 2
    capsys.readouterr()
    # Both at once had let the share be ignored without a word.
    assert simulate_cli(path, tmp_path, "--max-rejected-share", "0.5",
                        "--allow-rejections") == 2
    assert "--allow-rejections: not allowed with argument --max-rejected-share" in \
        one_line(capsys)


def test_all_rejected_run_exits_non_zero(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, tiny(model={"preset": "tiny", "max_context": 8}))
    assert simulate_cli(path, tmp_path, "--allow-rejections") == 2
    assert "no request finished: 12 of 12 rejected" in one_line(capsys)


def test_rejections_under_the_default_share_pass(tmp_path: Path) -> None:
    """One request in 200 over the context (0.5%) is under the default 1%."""
    raw = tiny()
    raw["workload"] = {"arrivals": {"process": "constant", "rate": 100.0},
                       "lengths": {"prompt": {"dist": "fixed", "value": 8}, "output": FIX},
                       "num_requests": 200}
    trace = tmp_path / "t.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"{i * 0.01:.2f},{300 if i == 7 else 8},8" for i in range(200)]
    trace.write_text("\n".join(rows) + "\n")
    raw["workload"] = {"trace": {"path": "t.csv"}}
    raw["model"] = {"preset": "tiny", "max_context": 256}
    path = write(tmp_path, raw)
    assert simulate_cli(path, tmp_path) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["requests"]["rejected_by_reason"] == {"exceeds_context": 1}


def test_kv_and_token_budget_limits_are_named(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    # 12 requests of 40 + 8 tokens against 10 blocks of 4 tokens: 47 tokens need 12 blocks.
    raw = tiny(serving={"policy": "continuous", "block_size": 4, "num_gpu_blocks": 10,
                        "max_num_batched_tokens": 256})
    raw["workload"]["lengths"]["prompt"] = {"dist": "fixed", "value": 40}
    assert simulate_cli(write(tmp_path, raw), tmp_path, "--max-rejected-share", "0.5") == 2
    line = one_line(capsys)
    assert "exceeds_kv_capacity 12" in line
    assert ("raise serving.num_gpu_blocks (now 10; vLLM's --num-gpu-blocks-override) to at "
            "least 12 blocks of 4 tokens" in line)
    # A cache sized as SGLang sizes it has no vLLM override behind the key: the advice
    # names SGLang's memory fraction instead of vLLM's flag.
    sg = {"name": "g", "model": "llama-3-8b", "cost": {"measured": {"framework": "sglang"}},
          "hardware": {"gpu": "h100-sxm", "memory_utilization": 0.19},
          "workload": {"arrivals": {"process": "constant", "rate": 10.0},
                       "lengths": {"prompt": {"dist": "fixed", "value": 1000},
                                   "output": {"dist": "fixed", "value": 8}},
                       "num_requests": 4}}
    assert simulate_cli(write(tmp_path, sg), tmp_path) == 2
    line = one_line(capsys)
    assert ("raise serving.num_gpu_blocks to at least 63 blocks of 16 tokens (1007 tokens, "
            "the longest request; or raise hardware.memory_utilization (SGLang's "
            "--mem-fraction-static) or hardware.tp)") in line and "vLLM" not in line
    raw = tiny(serving={"policy": "chunked", "block_size": 4, "max_num_batched_tokens": 16})
    raw["workload"]["lengths"]["prompt"] = {"dist": "fixed", "value": 20}
    raw["serving"]["policy"] = "continuous"
    assert simulate_cli(write(tmp_path, raw), tmp_path) == 2
    line = one_line(capsys)
    assert "serving.max_num_batched_tokens: 12 of 12" in line
    assert ("raise serving.max_num_batched_tokens (now 16; vLLM's --max-num-batched-tokens) "
            "to at least 20" in line)


def test_sweep_flags_rejecting_points_after_writing_them_all(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, tiny(model={"preset": "tiny", "max_context": 30}))
    out = tmp_path / "sw"
    rc = main(["sweep", str(path), "--rates", "5,10", "--workers", "1", "--out", str(out),
               "--quiet", "--no-plots"])
    line = one_line(capsys)
    assert rc == 2
    assert "2 of 2 points rejected more than 1.0%" in line
    assert f"`servesim simulate {path} --set serving.policy=continuous" in line
    assert "--set workload.arrivals.rate=" in line
    assert len((out / "points.csv").read_text().splitlines()) == 3  # header + both points
    assert main(["sweep", str(path), "--rates", "5,10", "--workers", "1", "--out", str(out),
                 "--quiet", "--no-plots", "--allow-rejections"]) == 0


def test_sweeps_command_for_the_worst_point_can_be_pasted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The command the refusal names is quoted for a shell: a --set value with spaces
    had been joined bare, and the pasted command failed to parse."""
    import shlex

    (tmp_path / "a dir").mkdir()
    path = write(tmp_path / "a dir", tiny(model={"preset": "tiny", "max_context": 30}))
    sets = "workload.lengths.output={dist: uniform, low: 2, high: 10}"
    assert main(["sweep", str(path), "--rates", "5", "--workers", "1", "--out",
                 str(tmp_path / "sw"), "--quiet", "--no-plots", "--set", sets]) == 2
    command = one_line(capsys).split("`")[1]
    argv = shlex.split(command)
    assert argv[:3] == ["servesim", "simulate", str(path)] and sets in argv
    assert main([*argv[1:], "--out", str(tmp_path / "one"), "--quiet"]) == 2
    assert "model.max_context" in one_line(capsys)


def test_compare_names_the_policy_whose_run_rejected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, tiny(model={"preset": "tiny", "max_context": 30}))
    rc = main(["compare", str(path), "--policies", "continuous,chunked", "--out",
               str(tmp_path / "c"), "--no-plots"])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "policy continuous: " in err and "model.max_context" in err
    assert (tmp_path / "c" / "compare.csv").is_file()


# -- every numeric key of the scenario, with bad values ---------------------------------------
def numeric_paths(tp: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every int/float field reachable from dataclass ``tp`` (``[0]`` for
    an item of a list, ``{}`` for a value of a mapping)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return [p for a in get_args(tp) if a is not type(None) for p in numeric_paths(a, prefix)]
    if origin is tuple:
        return numeric_paths(get_args(tp)[0], prefix + "[0]")
    if origin is dict:
        return numeric_paths(get_args(tp)[1], prefix + ".{}")
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        return [p for f in dataclasses.fields(tp)
                if f.init and f.name not in ("base_dir", "source", "overrides")
                for p in numeric_paths(hints[f.name], f"{prefix}.{f.name}" if prefix else f.name)]
    return [prefix] if tp in (int, float) else []


LN = {"dist": "lognormal", "median": 12, "sigma": 0.5, "min": 4, "max": 60}
UNI = {"dist": "uniform", "low": 4, "high": 40}
SMALL = {"arrivals": {"process": "gamma", "rate": 20, "cv": 1.5},
         "lengths": {"prompt": LN, "output": UNI}, "num_requests": 12, "seed": 1}
INLINE_GPU = {"name": "test-gpu", "flops": 1e14, "mem_bw": 1e12, "mem_gb": 24,
              "link_bw": 3.2e10, "host_bw": 3.2e10, "node_gpus": 8}
BASES: dict[str, dict[str, Any]] = {
    "": tiny(model={"preset": "tiny"}, cost={"roofline": {}}, workload=SMALL,
             slo={"ttft_s": 0.5, "tpot_s": 0.05}),
    "cost.linear": tiny(cost={"linear": {"step_s": 0.01, "frontend": {"request_s": 0.001}}}),
    "workload.lengths.output": tiny(workload={
        "arrivals": {"process": "constant", "rate": 20},
        "lengths": {"prompt": UNI, "output": LN}, "num_requests": 12}),
    "workload.classes": tiny(workload={
        "arrivals": {"process": "poisson", "rate": 20}, "num_requests": 12,
        "classes": {"a": {"weight": 1, "lengths": {"prompt": LN, "output": LN},
                          "priority": 1, "slo": {"ttft_s": 1, "tpot_s": 1}},
                    "b": {"weight": 2, "lengths": {"prompt": UNI, "output": FIX}}}}),
    "workload.classes.{}.arrivals": tiny(workload={
        "num_requests": 12, "lengths": {"prompt": UNI, "output": FIX},
        "classes": {"a": {"arrivals": {"process": "gamma", "rate": 10, "cv": 1.5}},
                    "b": {"arrivals": {"process": "poisson", "rate": 10}}}}),
    "workload.stages": tiny(workload={
        "arrivals": {"process": "poisson"}, "lengths": {"prompt": FIX, "output": FIX},
        "stages": [{"rate": 10, "duration_s": 0.5}, {"rate": 20, "duration_s": 0.5}]}),
    "workload.trace": tiny(workload={"trace": {"path": "azure_2023_conv", "sample_n": 12,
                                               "window_s": [0, 100], "truncate": True}}),
    "workload.concurrency": tiny(workload={"concurrency": 3, "think_time_s": 0.1,
                                           "num_requests": 12,
                                           "lengths": {"prompt": FIX, "output": FIX}}),
    "workload.priority": tiny(workload={
        "arrivals": {"process": "poisson", "rate": 20}, "num_requests": 12,
        "lengths": {"prompt": FIX, "output": FIX},
        "priority": {"classes": [0, 1], "weights": [1, 2]}}),
    "workload.shared_prefix": tiny(
        workload={"arrivals": {"process": "poisson", "rate": 20}, "num_requests": 12,
                  "lengths": {"prompt": FIX, "output": FIX},
                  "shared_prefix": {"tokens": 8, "groups": 2, "block_tokens": 4}},
        serving={"policy": "continuous", "prefix_caching": True, "block_size": 4}),
    "disaggregated": tiny(serving={"policy": "disaggregated", "block_size": 4},
                          disaggregated={"prefill": {"replicas": 1}, "decode": {"replicas": 1},
                                         "link": {"bandwidth_gb_s": 50, "latency_s": 0.001}}),
    "faults": tiny(faults={"outages": [{"replica": 0, "at_s": 0.2, "duration_s": 0.5}],
                           "failures_per_hour": 1, "repair_s": 10, "detection_s": 1,
                           "max_retries": 2}, cluster={"replicas": 2}),
    "admission": tiny(admission={"max_waiting": 5, "timeout_s": 5,
                                 "rate_limit": {"rate": 50, "burst": 5}}),
    # A GPU described inline: every figure it needs, so each one can be spoiled alone.
    "hardware.gpu": tiny(hardware={"gpu": INLINE_GPU}),
    **{f"disaggregated.{role}.gpu": tiny(
        serving={"policy": "disaggregated", "block_size": 4},
        disaggregated={"prefill": {"replicas": 1}, "decode": {"replicas": 1},
                       role: {"replicas": 1, "gpu": INLINE_GPU},
                       "link": {"bandwidth_gb_s": 50, "latency_s": 0.001}})
       for role in ("prefill", "decode")},
    "serving": tiny(serving={"policy": "chunked", "block_size": 4,
                             "max_num_batched_tokens": 256}),
    "serving.static_batch_size": tiny(serving={"policy": "static", "block_size": 4}),
    "serving.swap_space_gib": tiny(serving={"policy": "continuous", "preemption": "swap",
                                            "num_gpu_blocks": 40, "block_size": 4}),
    "serving.kv_offload": tiny(
        workload={"arrivals": {"process": "poisson", "rate": 20}, "num_requests": 12,
                  "lengths": {"prompt": FIX, "output": FIX},
                  "shared_prefix": {"tokens": 8, "groups": 2, "block_tokens": 4}},
        serving={"policy": "chunked", "prefix_caching": True, "block_size": 4,
                 "kv_offload": {"cpu_gb": 1, "bandwidth_gb_s": 10}}),
    "serving.speculative": tiny(serving={"policy": "chunked", "block_size": 4, "speculative": {
        "method": "eagle", "num_tokens": 2, "draft_layers": 1, "acceptance": {"rate": 0.5}}}),
    "serving.speculative.classes": tiny(
        workload={"arrivals": {"process": "poisson", "rate": 20}, "num_requests": 12,
                  "classes": {"a": {"weight": 1, "lengths": {"prompt": UNI, "output": FIX}}}},
        serving={"policy": "chunked", "block_size": 4, "speculative": {
            "method": "ngram", "num_tokens": 2, "acceptance": {"rate": 0.5},
            "classes": {"a": {"rate": 0.6}}}}),
    "serving.speculative.acceptance.mean_length": tiny(serving={
        "policy": "chunked", "block_size": 4,
        "speculative": {"method": "ngram", "num_tokens": 2, "acceptance": {"mean_length": 1.5}}}),
    "serving.speculative.acceptance.distribution": tiny(serving={
        "policy": "chunked", "block_size": 4, "speculative": {
            "method": "ngram", "num_tokens": 2, "acceptance": {"distribution": [0.5, 0.3, 0.2]}}}),
}
# Values no numeric key takes: the wrong type, or not finite.
ALWAYS_BAD: list[Any] = ["abc", True, math.nan, math.inf, -math.inf, [1]]
# Values some keys take (an integer key none past 2**53): each must give a result or one
# line, never a traceback, a hang or a machine out of memory.
MAYBE_BAD: list[Any] = [-1, 0, 1.5, 1e300, 10**9, 10**15, 10**30, 2**63]


def base_for(path: str) -> dict[str, Any]:
    best = max((k for k in BASES if k == "" or path == k or path.startswith((k + ".", k + "["))),
               key=len)
    return BASES[best]


def set_path(raw: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    parts = path.replace("[0]", ".[0]").split(".")
    node: Any = raw
    for i, part in enumerate(parts):
        key: Any = 0 if part == "[0]" else next(iter(node)) if part == "{}" else part
        if i == len(parts) - 1:
            node[key] = value
        else:
            if isinstance(node, dict) and not isinstance(node.get(key), dict | list):
                node[key] = [{}] if parts[i + 1] == "[0]" else {}
            node = node[key]
    return raw


PATHS = sorted(set(numeric_paths(Scenario)))


def test_the_walk_covers_every_section() -> None:
    tops = {p.split(".")[0].split("[")[0] for p in PATHS}
    assert tops == {"admission", "cluster", "cost", "disaggregated", "faults", "hardware",
                    "horizon_s", "model", "serving", "slo", "workload"}
    assert len(PATHS) > 120


def test_every_base_scenario_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, raw in BASES.items():
        assert simulate_cli(write(tmp_path, raw), tmp_path, "--allow-rejections") == 0, name
    capsys.readouterr()


@pytest.mark.parametrize("path", PATHS)
def test_fuzz_every_numeric_key_refuses_bad_values_in_one_line(
        path: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = base_for(path)
    for value in ALWAYS_BAD + MAYBE_BAD:
        f = write(tmp_path, set_path(base, path, value))
        rc = simulate_cli(f, tmp_path, "--allow-rejections")
        err = capsys.readouterr().err
        assert "Traceback" not in err, (path, value, err)
        if value in MAYBE_BAD and not isinstance(value, bool) and rc == 0:
            continue  # a value this key takes, and a run that finished
        assert rc == 2 and err.count("\n") == 1, (path, value, err)
        if value in ALWAYS_BAD:
            assert err.startswith(f"servesim: error: {f}: "), (path, value, err)
            assert path.replace("[0]", "").split(".")[-1] in err, (path, value, err)


def test_seed_below_zero_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["simulate", str(ROOT / "scenarios" / "quickstart.yaml"), "--set",
               "workload.seed=-1", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert one_line(capsys).endswith("quickstart.yaml: workload.seed: got -1, must be at "
                                     "least 0")


# -- command-line options -----------------------------------------------------------------
# (command, option, values it must refuse); the other arguments are valid or never read.
CLI_BAD: list[tuple[list[str], str, list[str]]] = [
    (["simulate", "S"], "--max-rejected-share", ["-0.1", "1.5", "nan", "inf", "x"]),
    (["sweep", "S", "--rates", "1"], "--seeds", ["0", "-1", "10001", "1e3", "x"]),
    (["sweep", "S", "--rates", "1"], "--workers", ["0", "-2", "100000", "x"]),
    (["sweep", "S", "--rates", "1"], "--horizon-factor", ["0", "-1", "nan", "inf", "x"]),
    (["sweep", "S", "--rates", "1"], "--max-rejected-share", ["2", "nan"]),
    (["sweep", "S"], "--rates", ["0", "-1", "nan", "inf", "1:0:1", "x", "1e400",
                                "1:1e9:1e-9", "1,,2"]),
    # An empty list is refused, not read as "the scenario's own value".
    (["sweep", "S", "--rates", "1"], "--policies", ["", ","]),
    (["sweep", "S", "--rates", "1"], "--tp", ["", "0"]),
    (["sweep", "S", "--rates", "1"], "--pp", [""]),
    (["sweep", "S", "--rates", "1"], "--replicas", ["", "1,1"]),
    (["capacity", "S", "--slo", "ttft_p99=1", "--target-rate", "5"], "--replicas", [""]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--seeds", ["0", "-3", "x"]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--tol", ["0", "1", "-0.1", "nan", "x"]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--target-rate", ["0", "-1", "inf", "nan"]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--rate-start", ["0", "-1", "inf", "x", "1e300"]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--gpu-cost-per-hour", ["0", "-2", "nan"]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--redundancy", ["-1", "x", "1e9", "2"]),
    (["capacity", "S", "--slo", "ttft_p99=1"], "--workers", ["0", "x"]),
    (["capacity", "S"], "--slo", ["ttft_p99=-1", "ttft_p99=nan", "ttft_p99=x", "foo=1"]),
    (["compare", "S"], "--max-rejected-share", ["-1", "x"]),
    (["trace", "stats", "azure_2023_conv", "--spread"], "--seed", ["-1", "x", "1.5"]),
    (["validate", "--vllm-result", "R", "--scenario", "S"], "--seed", ["-1", "x"]),
    (["validate", "--vllm-result", "R", "--scenario", "S"], "--bar", ["-1", "0", "x", "nan"]),
    (["validate", "--silicon"], "--limit", ["0", "-1", "x"]),
    (["profile", "build", "--gpu", "h100-sxm", "--out", "P"], "--tp", ["0", "-1", "x"]),
]


@pytest.mark.parametrize("case", range(len(CLI_BAD)),
                         ids=[f"{c[0][0]}{c[1]}" for c in CLI_BAD])
def test_fuzz_every_numeric_option_refuses_bad_values_in_one_line(
        case: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args, option, values = CLI_BAD[case]
    scen = write(tmp_path, tiny())
    subs = {"S": str(scen), "R": str(tmp_path / "r.json"), "P": str(tmp_path / "p.yaml")}
    for value in values:
        argv = [subs.get(a, a) for a in args] + [f"{option}={value}"]
        if args[0] not in ("trace", "profile"):
            argv += ["--out", str(tmp_path / "o")]
        rc = main(argv)
        line = one_line(capsys)
        assert rc == 2, (argv, line)
        assert option in line and value.split("=")[-1] in line, (argv, line)


# -- files --------------------------------------------------------------------------------
SCENARIO_TEXT = yaml.safe_dump(tiny()).encode()
BAD_FILES: dict[str, tuple[bytes | None, str]] = {
    "gzip": (gzip.compress(SCENARIO_TEXT), "gzip-compressed file, expected "),
    "bzip2": (bz2.compress(SCENARIO_TEXT), "bzip2-compressed"),
    "xz": (lzma.compress(SCENARIO_TEXT), "xz-compressed"),
    "zstd": (b"\x28\xb5\x2f\xfd" + b"\x00" * 20, "zstd-compressed"),
    "zip": (b"PK\x03\x04" + b"\x00" * 20, "zip-compressed"),
    "binary": (b"model: tiny\x00\x01\x02", "binary content (NUL bytes)"),
    "latin1": ("name: caf\xe9\n".encode("latin-1") + SCENARIO_TEXT,
               "not UTF-8 text: byte 0xe9 at offset 9"),
    "utf16": ("model: tiny\n".encode("utf-16"), "UTF-16 text, expected UTF-8"),
    "empty": (b"", "file is empty"),
    "blank": (b"\n  \n", "file is empty"),
    "directory": (None, "is a directory"),
}


def _bad_file(tmp: Path, kind: str, suffix: str) -> Path:
    data, _ = BAD_FILES[kind]
    path = tmp / f"{kind}{suffix}"
    if data is None:
        path.mkdir()
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_scenario_files_are_one_line(kind: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad_file(tmp_path, kind, ".yaml")
    for argv in (["simulate", str(path)], ["sweep", str(path), "--rates", "1"],
                 ["capacity", str(path), "--slo", "ttft_p99=1"],
                 ["compare", str(path)]):
        assert main([*argv, "--out", str(tmp_path / "o")]) == 2
        line = one_line(capsys)
        assert f"servesim: error: {path}: " in line and BAD_FILES[kind][1] in line, line
        if kind == "gzip":
            assert line.endswith(f"expected scenario text; decompress it first (gunzip {path})")


@pytest.mark.parametrize("kind", sorted(set(BAD_FILES) - {"gzip"}))
def test_bad_trace_files_are_one_line(kind: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = _bad_file(tmp_path, kind, ".csv")
    scen = write(tmp_path, tiny(workload={"trace": {"path": path.name}}))
    assert simulate_cli(scen, tmp_path) == 2
    line = one_line(capsys)
    assert str(path) in line, line
    assert main(["trace", "stats", str(path)]) == 2
    assert str(path) in one_line(capsys)


def test_gzip_trace_is_read_with_or_without_its_suffix(tmp_path: Path) -> None:
    text = "arrival_s,prompt_tokens,output_tokens\n0.0,8,4\n0.5,9,4\n"
    for name in ("t.csv.gz", "t2.csv"):
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
        scen = write(tmp_path, tiny(workload={"trace": {"path": name}}))
        assert simulate_cli(scen, tmp_path) == 0


def test_non_utf8_byte_deep_in_a_trace_names_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = "".join(f"{i * 0.1:.1f},8,4\n" for i in range(3000))
    (tmp_path / "t.csv").write_bytes(b"arrival_s,prompt_tokens,output_tokens\n"
                                     + rows.encode() + b"9.9,\xff8,4\n")
    assert simulate_cli(write(tmp_path, tiny(workload={"trace": {"path": "t.csv"}})),
                        tmp_path) == 2
    line = one_line(capsys)
    # The line itself (3,002 with the header), the byte and where it sits in the line.
    assert "t.csv: line 3002: not UTF-8 text: byte 0xff at byte 5 of the line" in line


@pytest.mark.parametrize("kind", ["gzip", "binary", "latin1", "empty", "directory"])
def test_other_input_files_are_one_line(kind: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """A HuggingFace config.json, a cost profile, a vLLM result and a replay file."""
    bad = _bad_file(tmp_path, kind, ".json")
    for raw in (tiny(model={"hf_config": bad.name}), tiny(cost={"profile": str(bad)})):
        assert simulate_cli(write(tmp_path, raw), tmp_path) == 2
        line = one_line(capsys)
        assert bad.name in line and BAD_FILES[kind][1] in line, line
    scen = write(tmp_path, tiny())
    for argv in (["validate", "--vllm-result", str(bad), "--scenario", str(scen)],
                 ["validate", "--replay", str(bad), "--profile", "x"]):
        assert main([*argv, "--out", str(tmp_path / "v")]) == 2
        line = one_line(capsys)
        assert bad.name in line and BAD_FILES[kind][1] in line, line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_scenario_is_one_line(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, tiny())
    path.chmod(0)
    assert simulate_cli(path, tmp_path) == 2
    assert "Permission denied" in one_line(capsys)


# -- YAML 1.2 numbers ---------------------------------------------------------------------
@pytest.mark.parametrize(("text", "value"), [
    ("1e9", 1e9), ("5e-1", 0.5), (".5", 0.5), ("1_000", 1000), ("1.5e3", 1500.0),
    (".5e3", 500.0), ("1E9", 1e9), ("-2.5E-3", -0.0025), ("+1e3", 1000.0), ("010", 10),
    ("0o17", 15), ("0x1F", 31), ("1:30", "1:30"), ("0b101", "0b101"), ("12e", "12e"),
])
def test_numbers_parse_as_yaml_1_2(text: str, value: Any) -> None:
    got = parse_yaml(text)
    assert got == value and type(got) is type(value)


def test_yaml_1_2_numbers_in_files_and_overrides(tmp_path: Path) -> None:
    raw = tiny()
    text = yaml.safe_dump(raw).replace("rate: 10.0", "rate: 1e1").replace(
        "num_requests: 12", "num_requests: 1.2e1")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    sc = load(path, ["workload.seed=5e0", "horizon_s=1_000", "slo.ttft_s=5e-1"])
    assert sc.workload.arrivals is not None and sc.workload.arrivals.rate == 10.0
    assert sc.workload.num_requests == 12 and sc.workload.seed == 5
    assert sc.horizon_s == 1000.0 and sc.slo.ttft_s == 0.5


# -- memory and time estimate, progress ---------------------------------------------------
def test_estimate_is_the_fitted_line(tmp_path: Path) -> None:
    sc = load(write(tmp_path, tiny()))
    est = budget.estimate(sc)
    assert est.requests == 12 and est.replicas == 1
    assert est.peak_bytes == budget.BASE_BYTES + 12 * budget.BYTES_PER_REQUEST \
        + budget.BYTES_PER_REPLICA
    raw = tiny()
    raw["workload"] = {"arrivals": {"process": "poisson", "rate": 100.0},
                       "lengths": {"prompt": FIX, "output": FIX}, "duration_s": 100.0}
    n = budget.expected_requests(load(write(tmp_path, raw)))
    assert n == 10_000 + 6 * 100 + 16  # rate x span, six standard deviations, 16
    raw["workload"]["trace"] = None
    raw["workload"] = {"trace": {"path": "azure_2023_conv", "repeat": 3, "sample_fraction": 0.5}}
    trace = ROOT / "sim" / "data" / "traces" / "azure_2023_conv.csv"
    lines = trace.read_bytes().count(b"\n") + 1
    assert budget.expected_requests(load(write(tmp_path, raw))) == lines * 0.5 * 3


def test_run_over_free_memory_is_refused_with_the_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, tiny())
    sc = load(path)
    with pytest.raises(ServesimError, match=r"needs about 0\.1 GiB .* has 0\.0 GiB available"):
        budget.check(sc, False, free=1000)
    assert budget.check(sc, True, free=1000).requests == 12  # --force
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 100 kB\nMemAvailable:       2048 kB\n")
    assert budget.available_bytes(meminfo) == 2048 * 1024
    assert budget.available_bytes(tmp_path / "none") is None
    monkeypatch.setattr(budget, "available_bytes", lambda: 1000)
    assert simulate_cli(path, tmp_path) == 2
    line = one_line(capsys)
    assert f"{path}: workload: this run needs about" in line and "--force" in line
    assert not (tmp_path / "out").exists()
    assert simulate_cli(path, tmp_path, "--force") == 0


def test_requests_no_prefill_replica_took_name_the_pools_own_count(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The prefill pool sets its replicas: the advice had been "raise cluster.replicas
    # (now 1; vLLM's --data-parallel-size)", which reaches no pool.
    raw = tiny(serving={"policy": "disaggregated"},
               disaggregated={"prefill": {"replicas": 1, "policy": "continuous"},
                              "decode": {"replicas": 1, "policy": "continuous"}},
               faults={"outages": [{"replica": 0, "at_s": 0, "duration_s": 1e6}],
                       "on_failure": "fail"})
    raw["workload"]["num_requests"] = 100  # 10 s: past the 5 s the router takes to notice
    assert simulate_cli(write(tmp_path, raw), tmp_path) == 2
    line = one_line(capsys)
    assert ": disaggregated.prefill.replicas: " in line and "no_replica_up" in line
    assert "raise disaggregated.prefill.replicas (now 1) " in line and "cluster" not in line


@pytest.mark.parametrize(("layout", "key"), [
    ({"cluster": {"replicas": 10**6}}, "cluster.replicas"),
    # A disaggregated pool's own count had been blamed on cluster.replicas, unset there.
    ({"serving": {"policy": "disaggregated"}, "disaggregated": {
        "prefill": {"replicas": 1, "policy": "continuous"},
        "decode": {"replicas": 10**6, "policy": "continuous"}}}, "disaggregated.decode.replicas"),
    ({"serving": {"policy": "disaggregated"}, "cluster": {"replicas": 10**6},
      "disaggregated": {"prefill": {"policy": "continuous"},
                        "decode": {"policy": "continuous"}}}, "cluster.replicas"),
])
def test_replicas_past_memory_are_blamed_on_the_key_that_set_them(
        tmp_path: Path, layout: dict[str, Any], key: str) -> None:
    raw = tiny()
    raw.update(layout)
    sc = load(write(tmp_path, raw))
    with pytest.raises(ServesimError) as info:
        budget.check(sc, False, free=2**30)
    assert info.value.where == key and "replicas x 40000 B" in info.value.message


def test_a_trace_repeat_built_past_memory_is_refused_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every repeated copy is built before num_requests applies: the estimate had counted
    the 100 requests alone, and the run ran out of memory naming no key."""
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n1,8,2\n")
    raw = tiny()
    raw["workload"] = {"trace": {"path": "t.csv", "repeat": 10**7}, "num_requests": 100}
    sc = load(write(tmp_path, raw))
    assert budget.estimate(sc).trace_rows == 4 * 10**7  # 3 lines, + 1: an upper bound
    with pytest.raises(ServesimError) as info:
        budget.check(sc, False, free=2**30)
    assert str(info.value) == (
        f"{tmp_path / 's.yaml'}: workload.trace.repeat: got 10,000,000: the trace is built "
        "in full before num_requests applies, about 4 rows x 10,000,000 = 40,000,000 rows x "
        "200 B + 128 MiB = 7.6 GiB, and this machine has 1.0 GiB available; num_requests "
        "(100) needs 25 copies; lower repeat, or pass --force to run it anyway")
    # Past any run's rows the build refuses it, --force or not.
    raw["workload"]["trace"]["repeat"] = 2**52 - 1
    assert simulate_cli(write(tmp_path, raw), tmp_path, "--force") == 2
    line = one_line(capsys)
    assert ("s.yaml: workload.trace.repeat: got 4,503,599,627,370,495: 2 rows x "
            "4,503,599,627,370,495 = 9,007,199,254,740,990 rows, more than any run holds "
            "(2,147,483,647)") in line


def test_huge_workloads_and_clusters_are_refused_before_they_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for sets in (["workload.num_requests=4000000000000"], ["cluster.replicas=100000000"],
                 ["workload.arrivals.rate=1e12", "workload.num_requests=null",
                  "workload.duration_s=1e6"]):
        argv = [a for s in sets for a in ("--set", s)]
        assert simulate_cli(write(tmp_path, tiny()), tmp_path, *argv) == 2
        line = one_line(capsys)
        assert "of memory" in line and "--force" in line, line


def test_progress_bar_changes_no_output(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """With a horizon (the clock stopped in slices) and without one (stepped), the bar on
    stderr leaves stdout, requests.csv and summary.json as they are without it."""
    for horizon in (None, 0.7):
        raw = tiny()
        raw["workload"]["num_requests"] = 40
        if horizon is not None:
            raw["horizon_s"] = horizon
        path = write(tmp_path, raw)
        outs = []
        for flag in ("--no-progress", "--progress"):
            out = tmp_path / flag
            assert main(["simulate", str(path), "--out", str(out), "--no-plots", flag]) == 0
            cap = capsys.readouterr()
            outs.append((cap.out.replace(str(out), "OUT"),
                         (out / "requests.csv").read_bytes(),
                         (out / "summary.json").read_bytes()))
            assert ("simulate" in cap.err) == (flag == "--progress")
        assert outs[0] == outs[1]


def test_a_setting_that_cannot_act_is_said(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A prefix-affinity router without a prefix cache, and a planned outage set after the
    run's end, had run without a word ("faults: 0 outage(s)")."""
    raw = tiny(cluster={"replicas": 2, "router": "prefix_affinity"},
               faults={"outages": [{"replica": 0, "at_s": 1e5, "duration_s": 1}]})
    raw["serving"] = {**raw.get("serving", {}), "prefix_caching": False}
    assert main(["simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "out"),
                 "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert ("note: cluster.router: prefix_affinity finds no prefix cache (prefix caching is "
            "off), so it routes each request to the replica with the fewest outstanding "
            "tokens, as least_outstanding does") in out
    assert "faults: 0 outage(s) (1 planned to begin after the run ended: none happened)" in out
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["faults"]["planned_after_run"] == 1


def test_the_named_value_admits_every_request_its_key_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Under vLLM v0's rules a request is refused for its prompt, and once that fits for
    its recompute (prompt + output - 1): both reasons name max_num_batched_tokens. The
    error had asked for the longest prompt (95 here), which still refused 12 of 40."""
    raw = tiny(serving={"policy": "continuous", "block_size": 4, "max_num_batched_tokens": 64,
                        "max_num_seqs": 4})
    raw["workload"] = {**raw["workload"], "num_requests": 40,
                       "lengths": {"prompt": {"dist": "uniform", "low": 10, "high": 100},
                                   "output": {"dist": "fixed", "value": 20}}}
    path = write(tmp_path, raw)
    assert simulate_cli(path, tmp_path) == 2
    line = one_line(capsys)
    assert "prompt_exceeds_max_num_batched_tokens" in line
    assert "recompute_exceeds_max_num_batched_tokens" in line
    need = int(line.split("to at least ")[1].split()[0])
    assert "(the longest prompt + output - 1" in line
    assert simulate_cli(path, tmp_path, "--set", f"serving.max_num_batched_tokens={need}") == 0
    assert simulate_cli(path, tmp_path, "--set",
                        f"serving.max_num_batched_tokens={need - 1}") == 2


def test_a_table_of_the_few_that_finished_says_so(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """97 of 100 requests abandoned by their clients (or cut by a horizon) had left a
    latency table of the 3 that finished, printed as any other."""
    raw = tiny(serving={"policy": "chunked", "max_num_seqs": 1},
               admission={"timeout_s": 0.05})
    raw["workload"] = {**raw["workload"], "num_requests": 100,
                       "arrivals": {"process": "poisson", "rate": 200.0}}
    path = write(tmp_path, raw)
    assert main(["simulate", str(path), "--out", str(tmp_path / "out"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    finished = json.loads((tmp_path / "out" / "summary.json").read_text())["requests"]["finished"]
    assert 0 < finished < 50
    assert (f"note: only {finished} of the 100 arrived requests finished; the latencies "
            "below are theirs alone") in out
    raw["admission"] = {}
    assert main(["simulate", str(write(tmp_path, raw)), "--out", str(tmp_path / "out"),
                 "--no-plots"]) == 0
    assert "latencies below are theirs alone" not in capsys.readouterr().out
