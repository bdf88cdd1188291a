"""Shipped measured profiles: `cost: measured` picks the right one or says what exists,
every output names the cost source, a rebuild from the installed tables equals the
shipped file, and a missing wheel is one line naming the extra."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import needs_tables

from sim.config.scenario import from_dict
from sim.core.engine import build_cost, simulate
from sim.cost.measured import find, shipped
from sim.cost.models import unwrapped
from sim.cost.presets import MODELS
from sim.errors import ServesimError
from sim.report.printed import table
from sim.report.summary import summarize

ROOT = Path(__file__).resolve().parents[1]

def scenario(**over: object) -> dict:
    raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"}, "cost": "measured",
           "workload": {"arrivals": {"process": "poisson", "rate": 4.0}, "num_requests": 40,
                        "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                    "output": {"dist": "fixed", "value": 32}}}}
    raw.update(over)
    return raw


def test_every_shipped_profile_loads_and_is_indexed() -> None:
    from sim.cost.profilefile import load_profile

    rows = shipped()
    assert len(rows) >= 200
    assert {r.framework for r in rows} == {"vllm", "sglang"}
    assert {r.gpu for r in rows} == {"a100-80gb", "h100-sxm", "h200", "b200", "b300", "l40s",
                                      "rtx-pro-6000"}
    for r in rows[::17]:
        cost = load_profile(r.stem)
        assert cost.tp == r.tp and cost.model == r.spec
        assert cost.source.startswith("measured kernels: ")


def test_measured_matches_by_architecture_and_names_its_source() -> None:
    # Llama 3.1 8B runs Llama 3 8B's kernels: the same profile prices it.
    assert find(MODELS["llama-3.1-8b"], "h100-sxm", 1, "vllm") == "h100-sxm-llama-3-8b-tp1-vllm"
    res = simulate(from_dict(scenario(model="llama-3.1-8b")))
    s = summarize(res)
    phrase = ("measured kernels: vLLM 0.24.0 on H100-SXM; steps over 512 tokens without CUDA "
              "graphs; async scheduling")
    assert s["cost_source"] == phrase
    assert f"cost: {phrase}" in table(s)
    sg = from_dict(scenario(cost={"measured": {"framework": "sglang"}},
                            hardware={"gpu": "h200", "tp": 2}))
    assert build_cost(sg).source == ("measured kernels: SGLang 0.5.14 on H200-SXM; decode "
                                     "batches over 256 without CUDA graphs")
    roof = summarize(simulate(from_dict(scenario(cost="roofline"))))
    assert roof["cost_source"].startswith("analytic roofline")


@pytest.mark.parametrize(("over", "match"), [
    ({"hardware": {"gpu": "mi300x"}},
     "cost.measured: no measured profile for llama-3-8b at tp=1 under vllm on mi300x; GPUs "
     "with one: a100-80gb, b200, b300, h100-sxm, h200, l40s, rtx-pro-6000"),
    # A GPU the public tables time, though none of its profiles ships: how to build one.
    ({"hardware": {"gpu": "gb200"}}, re.escape(
        "on gb200; GPUs with one: a100-80gb, b200, b300, h100-sxm, h200, l40s, rtx-pro-6000; the "
        "public kernel tables time gb200: build a profile with `servesim profile build --gpu gb200 "
        "--model llama-3-8b --tp 1 --framework vllm --out FILE` (the measured extra) and set "
        "cost: {profile: FILE}")),
    ({"model": "tiny"}, "no measured profile for model tiny: measured profiles cover"),
    ({"model": {"preset": "llama-3-8b", "kv_dtype": "fp8"}}, "KV cache fp8: FP8 profiles "
     "ship for .*; build one with `servesim profile build`, or use cost: roofline$"),
    ({"model": {"preset": "llama-3-8b", "layers": 7, "dtype": "int4"}},
     r"cost.measured: no measured profile for llama-3-8b with layers 7 \(the preset's 32\), "
     r"dtype 'int4' \(the preset's 'bf16'\): the shipped llama-3-8b profiles price the preset"),
    ({"model": "llama-3-70b"},
     "hardware: model llama-3-70b does not fit on h100-sxm with tp=1"),
    ({"cost": {"measured": {"framework": "tgi"}}}, "cost.measured.framework: got 'tgi'"),
    ({"cost": "meassured"}, "cost: got 'meassured'; give measured, roofline, or a mapping"),
])
def test_measured_errors_say_what_exists(over: dict, match: str) -> None:
    with pytest.raises(ServesimError, match=match):
        from_dict(scenario(**over))


def test_measured_tp_lists_the_degrees_shipped() -> None:
    with pytest.raises(ServesimError, match=r"tp=16 under vllm on h100-sxm; shipped on "
                                            r"h100-sxm: vllm tp 2, 4, 8; sglang tp 2, 4, 8; or use "
                                            r"cost: roofline$"):
        find(MODELS["llama-3-70b"], "h100-sxm", 16, "vllm")


@needs_tables
@pytest.mark.parametrize("framework", ["vllm", "sglang"])
@pytest.mark.parametrize(("gpu", "tp"), [("a100-80gb", 1), ("h100-sxm", 2), ("h200", 4),
                                          ("b200", 8), ("l40s", 2)])
def test_a_rebuild_from_the_installed_tables_equals_the_shipped_file(
        gpu: str, tp: int, framework: str) -> None:
    """One shipped profile per GPU and framework, rebuilt from the installed wheel and the
    shipped priors, byte for byte (`servesim profile ship --check` does all of them)."""
    from sim.cost.profilefile import PROFILE_DIR
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile, profile_name

    spec = BuildSpec(MODELS["llama-3-8b"], gpu, framework, tp)
    shipped_text = (PROFILE_DIR / f"{profile_name(spec)}.yaml").read_text(encoding="utf-8")
    assert profile_text(build_profile(spec)) == shipped_text


def test_missing_wheel_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['aiconfigurator_core'] = None; from sim.cli import main; "
            "sys.exit(main(['profile', 'build', '--gpu', 'h100-sxm', '--model', "
            f"'llama-3-8b', '--out', {str(tmp_path / 'p.yaml')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'servesim[measured]'" in lines[0], out.stderr


def test_vllm_result_compares_with_a_measured_profile(tmp_path: Path) -> None:
    from sim.validate.command import main

    raw = scenario()
    raw["workload"] = {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 1,
                       "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                   "output": {"dist": "fixed", "value": 2}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    fixture = ROOT / "tests" / "fixtures" / "vllm" / "bench_detailed.json"
    assert main(["--vllm-result", str(fixture), "--scenario", str(path), "--out",
                 str(tmp_path / "o"), "--no-plots"]) == 0
    level = json.loads((tmp_path / "o" / "validation.json").read_text())["levels"][0]
    pred = level["comparison"]["metrics"]["tpot"]["p50"]["predicted"]
    # One H100 decoding a handful of Llama-3-8B sequences: about 7 ms a token.
    assert 0.005 < pred < 0.01 and np.isfinite(level["verdict"]["worst"])


def test_sweep_cache_key_follows_the_profile_bytes(tmp_path: Path) -> None:
    """A point's cache key changes when the profile it prices with changes, with the
    scenario unchanged: a regenerated profile is not served from an old cache."""
    from sim.cost.profilefile import PROFILE_DIR
    from sim.study.sweeppoint import PointKey, make_task

    path = tmp_path / "p.yaml"
    text = (PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text()
    path.write_text(text)
    raw = scenario(cost={"profile": "p.yaml"})
    key = PointKey("continuous", 1, 1, 2.0, 0)
    one = make_task(raw, "s.yaml", tmp_path, key).digest
    assert make_task(raw, "s.yaml", tmp_path, key).digest == one
    path.write_text(text.replace("const_s: 0.00101736", "const_s: 0.00111736", 1))
    assert make_task(raw, "s.yaml", tmp_path, key).digest != one
    # The shipped profile's bytes key a measured cost the same way.
    measured = make_task(scenario(), "s.yaml", tmp_path, key).digest
    assert measured not in (one, make_task(scenario(cost="roofline"), "s.yaml", tmp_path,
                                           key).digest)


def test_disaggregated_pools_each_price_with_their_own_measured_profile() -> None:
    """Pools at tp 4 (H100) and tp 2 (H200) of a model that does not fit hardware's tp 1:
    each pool loads its own shipped profile, and the run names the prefill pool's."""
    from sim.core.engine import Engine, entry_cost
    from sim.core.request import FINISHED
    from sim.workload.build import build_requests

    raw = scenario(model="llama-3-70b", serving={"policy": "disaggregated"},
                   disaggregated={"prefill": {"replicas": 1, "tp": 4},
                                  "decode": {"replicas": 1, "gpu": "h200", "tp": 2}})
    sc = from_dict(raw)
    reqs = build_requests(sc.workload, None, np.random.default_rng(0))
    eng = Engine(sc, reqs, entry_cost(sc), np.random.default_rng(1))
    res = eng.run()
    assert (res.status == FINISHED).all()
    eager = "; steps over 512 tokens without CUDA graphs"
    assert [(r.role, unwrapped(r.cost).tp, r.cost.source) for r in eng.replicas] == [
        ("prefill", 4, "measured kernels: vLLM 0.24.0 on H100-SXM" + eager),
        ("decode", 2, "measured kernels: vLLM 0.24.0 on H200-SXM" + eager)]
    assert res.cost_source == "measured kernels: vLLM 0.24.0 on H100-SXM" + eager


def test_sweep_cache_key_follows_an_input_file_edited_in_place(tmp_path: Path) -> None:
    """A trace (and an hf_config) edited in place changes a point's cache key, with the
    scenario unchanged: a sweep rerun after the edit simulates the new file."""
    from sim.study.sweeppoint import PointKey, make_task

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n1,8,2\n2,8,2\n")
    raw = {"model": "tiny", "cost": "roofline",
           "workload": {"trace": {"path": "t.csv"}}}
    key = PointKey("continuous", 1, 1, 2.0, 0)
    one = make_task(raw, "s.yaml", tmp_path, key).digest
    assert make_task(raw, "s.yaml", tmp_path, key).digest == one
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,8,2\n1,80,2\n2,8,2\n")
    assert make_task(raw, "s.yaml", tmp_path, key).digest != one
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
           "vocab_size": 1000, "max_position_embeddings": 4096}
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(cfg))
    raw = {**raw, "model": {"hf_config": "config.json"}}
    two = make_task(raw, "s.yaml", tmp_path, key).digest
    hf.write_text(json.dumps({**cfg, "num_hidden_layers": 4}))
    assert make_task(raw, "s.yaml", tmp_path, key).digest != two
