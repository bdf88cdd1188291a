"""The GPU table's figures hang together and match their datasheets, and a scenario may
describe its GPU inline: validated like any section, priced like a table GPU with the
same figures, refused where nothing exists for it (measured tables, host memory)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_tables

from sim.config.scenario import from_dict
from sim.core.engine import Engine, build_cost
from sim.cost.gpus import GPUS, NODE_HOST_MEMORY_GIB, weight_only
from sim.cost.presets import MODELS
from sim.errors import ServesimError
from sim.workload.requests import Requests

GIB = 2**30
# The memory each part is sold with (datasheets, GB as the vendors count HBM: GiB).
MARKETING_GIB = {"a100-80gb": 80, "h100-sxm": 80, "h200": 141, "l40s": 48, "b200": 180,
                 "mi300x": 192, "h100-pcie": 80, "h100-nvl": 94, "h20": 96, "gb200": 186,
                 "mi325x": 256, "l4": 24, "a10g": 24, "b300": 288,
                 "gb300": 288, "a100-40gb": 40, "rtx-pro-6000": 96}

@pytest.mark.parametrize("name", sorted(GPUS))
def test_every_gpu_has_consistent_figures(name: str) -> None:
    g = GPUS[name]
    assert g.name == name
    assert g.fp8_flops == 0 or g.fp8_flops >= g.flops
    assert g.fp4_flops == 0 or g.fp4_flops >= g.fp8_flops > 0
    # What the device reports is below what it is sold with, and not far below.
    assert 0.9 * MARKETING_GIB[name] * GIB < g.mem_bytes < MARKETING_GIB[name] * GIB
    assert g.link_bw > 0 and g.host_bw > 0 and g.net_bw > 0 and g.node_gpus >= 1
    assert NODE_HOST_MEMORY_GIB[name] > 0


def test_the_tables_list_the_same_gpus() -> None:
    assert set(NODE_HOST_MEMORY_GIB) == set(GPUS) == set(MARKETING_GIB)


def test_datasheet_figures_spot_checked() -> None:
    # Dense figures are half the datasheets' "with sparsity" headlines.
    assert (GPUS["h100-pcie"].flops, GPUS["h100-pcie"].fp8_flops) == (1513e12 / 2, 3026e12 / 2)
    assert (GPUS["h100-nvl"].flops, GPUS["h100-nvl"].fp8_flops) == (1671e12 / 2, 3341e12 / 2)
    assert (GPUS["h20"].flops, GPUS["h20"].fp8_flops) == (148e12, 296e12)
    assert GPUS["l4"].fp8_flops == 485e12 / 2
    # B200: HGX B200's 144 PFLOPS FP4 (sparse) over 8 GPUs; GB200: NVL72's 1,440 over 72.
    assert GPUS["b200"].fp4_flops == 144e15 / 2 / 8
    gb = GPUS["gb200"]
    assert gb.fp4_flops == 1440e15 / 2 / 72 == 2 * gb.fp8_flops == 4 * gb.flops
    assert gb.mem_bw == 576e12 / 72
    # Reported memory: deviceQuery's bytes and torch's MiB as printed.
    assert GPUS["h100-nvl"].mem_bytes == 99_861_594_112
    assert GPUS["l4"].mem_bytes == 23_570_219_008
    assert (GPUS["h20"].mem_bytes, GPUS["a10g"].mem_bytes) == (97_285 * 2**20, 22_587 * 2**20)
    # A100 40GB SXM: HBM2 at 1,555 GB/s, Paddle's print of the device's 40,536 MiB.
    a40 = GPUS["a100-40gb"]
    assert (a40.mem_bw, a40.mem_bytes, a40.flops, a40.fp8_flops) == (1.555e12, 40_536 * 2**20,
                                                                     312e12, 0.0)
    # Links, per GPU and direction: NVLink bridges pair H100 NVLs; NVL72 is one domain.
    assert (GPUS["h100-nvl"].link_bw, GPUS["h100-nvl"].node_gpus) == (300e9, 2)
    assert (GPUS["h20"].link_bw, GPUS["h100-pcie"].link_bw) == (450e9, 64e9)
    assert (gb.link_bw, gb.node_gpus, gb.host_bw) == (900e9, 72, 450e9)
    assert NODE_HOST_MEMORY_GIB["gb200"] == 72 // 2 * 480
    # B300 (HGX B300: 36 and 72 PFLOPS BF16 and FP8 with sparsity for 8 GPUs; Blackwell
    # Ultra: 14 PFLOPS dense FP4, 62 TB/s for 8): nvidia-smi's 275,040 MiB less the B200's
    # 717 MiB gap to what torch sees; a ConnectX-8 800 Gb/s NIC per GPU.
    b3 = GPUS["b300"]
    assert (b3.flops, b3.fp8_flops, b3.fp4_flops) == (36e15 / 2 / 8, 72e15 / 2 / 8, 14e15)
    assert b3.mem_bw == 62e12 / 8 and b3.mem_bytes == (275_040 - 717) * 2**20
    assert (b3.link_bw, b3.node_gpus, b3.net_bw) == (900e9, 8, 800e9 / 8)
    # GB300: the full part (nvidia-smi 284,208 MiB, as the tables' own system file records),
    # 15 PFLOPS dense FP4, one NVL72 NVLink domain, NVLink-C2C to its Grace.
    g3 = GPUS["gb300"]
    assert (g3.flops, g3.fp8_flops, g3.fp4_flops) == (2500e12, 5000e12, 15000e12)
    assert g3.mem_bytes == (284_208 - 717) * 2**20 and g3.mem_bw == 576e12 / 72
    assert (g3.node_gpus, g3.host_bw, g3.net_bw) == (72, 450e9, 100e9)
    # RTX PRO 6000 Blackwell: 4,000 FP4 TOPS with sparsity, each wider dtype half; 96 GB of
    # GDDR7 at 1,792 GB/s, torch's print of 97,250 MiB; no NVLink (PCIe Gen5 x16).
    rtx = GPUS["rtx-pro-6000"]
    assert (rtx.fp4_flops, rtx.fp8_flops, rtx.flops) == (4000e12 / 2, 4000e12 / 4, 4000e12 / 8)
    assert (rtx.mem_bw, rtx.mem_bytes) == (1.792e12, 97_250 * 2**20)
    assert (rtx.link_bw, rtx.host_bw, rtx.node_gpus) == (64e9, 64e9, 8)


def test_fp8_weights_run_weight_only_where_there_are_no_fp8_tensor_cores() -> None:
    fp8 = MODELS["llama-3.3-70b-fp8"]
    assert weight_only(fp8, GPUS["a10g"]) and not weight_only(fp8, GPUS["l4"])


WORKLOAD = {"arrivals": {"process": "poisson", "rate": 4.0}, "num_requests": 40, "seed": 3,
            "lengths": {"prompt": {"dist": "uniform", "low": 64, "high": 2048},
                        "output": {"dist": "uniform", "low": 8, "high": 200}}}


def as_inline(name: str, new_name: str) -> dict[str, Any]:
    """The table GPU ``name``'s figures as an inline mapping called ``new_name``."""
    fields = dataclasses.asdict(GPUS[name])
    return {**fields, "name": new_name}


def scenario(gpu: Any, **more: Any) -> Any:
    raw = {"model": "llama-3-8b", "hardware": {"gpu": gpu, "tp": 2}, "cost": {"roofline": {}},
           "workload": WORKLOAD, **more}
    return from_dict(raw, "<test>")


def test_an_inline_gpu_prices_as_the_table_gpu_with_its_figures() -> None:
    from sim.report.outputs import requests_csv

    table, inline = scenario("h200"), scenario(as_inline("h200", "my-h200"))
    assert inline.hardware.gpu_spec == dataclasses.replace(GPUS["h200"], name="my-h200")
    assert inline.serving == table.serving  # vLLM's batch limits follow the figures
    runs = []
    for sc in (table, inline):
        rng = np.random.default_rng(0)
        req = Requests(rng.uniform(0, 10, 40).cumsum() / 4, rng.integers(64, 2048, 40),
                       rng.integers(8, 200, 40))
        runs.append(Engine(sc, req, build_cost(sc), np.random.default_rng(0)).run())
    assert requests_csv(runs[0]) == requests_csv(runs[1])
    assert runs[0].replica_stats[0].kv_total == runs[1].replica_stats[0].kv_total


def test_the_summary_names_the_inline_gpu() -> None:
    from sim.report.human import setup_phrase
    from sim.report.setup import describe_scenario

    sc = scenario(as_inline("l4", "my-l4"))
    sim = describe_scenario(sc, "roofline")
    assert sim["pools"]["both"]["gpu"] == "my-l4"
    assert setup_phrase(sim) == "Llama-3-8B on 2× MY-L4 (tp 2)"


def test_mem_gb_is_gib_and_defaults_are_the_documented_ones() -> None:
    sc = scenario({"name": "x", "flops": 1e15, "mem_bw": 4e12, "mem_gb": 96, "link_bw": 4e11,
                   "host_bw": 6.4e10, "node_gpus": 8})
    g = sc.hardware.gpu_spec
    assert g.mem_bytes == 96 * GIB
    assert (g.link_latency_s, g.net_bw, g.net_latency_s) == (8e-6, 50e9, 20e-6)
    assert (g.fp8_flops, g.fp4_flops) == (0.0, 0.0)


def test_a_disaggregated_pool_may_describe_its_own_gpu() -> None:
    from sim.config.disagg import pools

    sc = scenario("h100-sxm", serving={"policy": "disaggregated"},
                  disaggregated={"decode": {"gpu": as_inline("h200", "big")}})
    pre, dec = pools(sc)
    assert (pre.gpu, pre.gpu_spec) == ("h100-sxm", GPUS["h100-sxm"])
    assert (dec.gpu, dec.gpu_spec.mem_bytes) == ("big", GPUS["h200"].mem_bytes)


def test_vllm_flags_take_the_batch_limits_of_an_inline_gpu() -> None:
    small = as_inline("l4", "small")
    big = scenario(as_inline("h200", "big"), vllm={"port": 1})
    little = scenario(small, vllm={"port": 1})
    assert (big.serving.max_num_batched_tokens, big.serving.max_num_seqs) == (8192, 1024)
    assert (little.serving.max_num_batched_tokens, little.serving.max_num_seqs) == (2048, 256)


GOOD = {"name": "x", "flops": 1e15, "mem_bw": 4e12, "mem_bytes": 10**11, "link_bw": 4e11,
        "host_bw": 6.4e10, "node_gpus": 8}


@pytest.mark.parametrize(("gpu", "more", "match"), [
    ({**GOOD, "tflops": 1}, {}, r"^<test>: hardware\.gpu\.tflops: unknown key 'tflops'; "
     r"allowed: flops, fp4_flops, fp8_flops, host_bw, link_bw, link_latency_s, mem_bw, "
     r"mem_bytes, mem_gb, name, net_bw, net_latency_s, node_gpus$"),
    ({k: v for k, v in GOOD.items() if k != "flops"}, {},
     r"^<test>: hardware\.gpu\.flops: required key is missing$"),
    ({**GOOD, "mem_bw": -1}, {}, r"^<test>: hardware\.gpu\.mem_bw: got -1.0, must be greater "
     r"than 0$"),
    ({**GOOD, "mem_gb": 80}, {}, r"^<test>: hardware\.gpu\.mem_gb: give exactly one of "
     r"mem_bytes \(bytes\) or mem_gb \(GiB\)"),
    ({**GOOD, "name": "h200"}, {}, r"^<test>: hardware\.gpu\.name: got 'h200', the name of "
     r"a GPU of the table"),
    ("h999", {}, r"^<test>: hardware\.gpu: unknown gpu 'h999'; valid: a100-40gb, a100-80gb, "
                 r"a10g, "),
    (7, {}, r"^<test>: hardware\.gpu: got 7, expected a string or a mapping$"),
    (GOOD, {"cost": {"measured": {}}}, r"^<test>: cost\.measured: the inline GPU 'x' has no "
     r"measured kernel tables; use cost: roofline"),
    (GOOD, {"serving": {"preemption": "swap", "kv_offload": {"cpu_gb": 10}}},
     r"^<test>: hardware\.host_memory_gb: the inline GPU 'x' has no installed host memory "
     r"on record"),
])
def test_bad_inline_gpus_are_one_clear_line(gpu: Any, more: dict, match: str) -> None:
    with pytest.raises(ServesimError, match=match):
        scenario(gpu, **more)


def test_a_host_tier_fits_the_host_memory_given_for_an_inline_gpu() -> None:
    sc = scenario(GOOD, serving={"preemption": "swap", "kv_offload": {"cpu_gb": 10}},
                  hardware={"gpu": GOOD, "tp": 2, "host_memory_gb": 64})
    assert sc.serving.kv_offload.cpu_gb == 10


def test_the_command_line_runs_an_inline_gpu(tmp_path: Path, capsys: Any) -> None:
    import json

    from sim.cli import main

    path = tmp_path / "inline.yaml"
    path.write_text("model: llama-3-8b\ncost: {roofline: {}}\n"
                    "hardware:\n  tp: 2\n  gpu: {name: lab-gpu, flops: 989e12, mem_bw: 3.35e12,"
                    " mem_gb: 79,\n    link_bw: 450e9, host_bw: 64e9, node_gpus: 8,"
                    " fp8_flops: 1.98e15}\n"
                    "workload: {arrivals: {process: poisson, rate: 2}, num_requests: 6,\n"
                    "  lengths: {prompt: {dist: fixed, value: 100},\n"
                    "            output: {dist: fixed, value: 5}}}\n")
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out",
                 str(tmp_path / "o")]) == 0
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["simulated"]["pools"]["both"]["gpu"] == "lab-gpu"
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("flops: 989e12", "flop: 989e12"))
    assert main(["simulate", str(bad), "--quiet", "--out", str(tmp_path / "p")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servesim: error: {bad}: hardware.gpu.flop: unknown key 'flop'; ")
    assert err.count("\n") == 1


@pytest.mark.parametrize(("device", "key"), [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"), ("NVIDIA H200", "h200"), ("NVIDIA H20", "h20"),
    ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"), ("NVIDIA L40S", "l40s"),
    ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA GB300", "gb300"),
    ("NVIDIA L4", "l4"), ("NVIDIA A10G", "a10g"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
    # A family's part named by its memory: the 40 GB A100 is not the 80 GB one.
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-PCIE-40GB", "a100-40gb"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb"),
    # A name that goes on in digits is another part: the L40 (48 GB) is not the L4.
    ("NVIDIA L40", None), ("NVIDIA GH200 480GB", None), ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI325X", "mi325x"), ("NVIDIA GeForce RTX 4090", None),
    # RTX PRO 6000 Blackwell in either edition; another RTX part is not one.
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "rtx-pro-6000"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "rtx-pro-6000"),
    ("NVIDIA RTX PRO 4500 Blackwell", None), ("NVIDIA RTX 6000 Ada Generation", None),
])
def test_calibration_matches_a_device_name_to_its_gpu(device: str, key: str | None) -> None:
    pytest.importorskip("torch")
    from calibrate.run import CalibrationConfig, _gpu_entry

    assert _gpu_entry(CalibrationConfig(MODELS["tiny"], Path("unused")), device) == key


@needs_tables
@pytest.mark.parametrize(("gpu", "label", "reported"), [
    ("gb200", "GB200", "NVIDIA GB200"), ("b300", "B300-SXM", "NVIDIA B300 SXM6 AC"),
    ("gb300", "GB300", "NVIDIA GB300"),
    ("rtx-pro-6000", "RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition")])
def test_a_newer_gpus_profile_builds_from_its_own_tables(gpu: str, label: str,
                                                        reported: str) -> None:
    import yaml

    from sim.cost.profilefile import parse_profile
    from sim.cost.shape import decode_shape
    from sim.cost.tables.cli import profile_text, shipped_specs
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    data = build_profile(BuildSpec(MODELS["llama-3-8b"], gpu, "vllm", 1))
    cost = parse_profile(yaml.safe_load(profile_text(data)), "built")
    assert cost.source == f"measured kernels: vLLM 0.24.0 on {label}"
    assert data["device"]["reported"] == reported
    assert 0 < cost.step_time(decode_shape(1, 1000)) < cost.step_time(decode_shape(64, 64000))
    # gb200 builds, but nothing of it ships; b300's and rtx-pro-6000's profiles ship (out
    # of the roofline's fit: tests/test_roofline_fit.py).
    assert any(s.gpu == gpu for s in shipped_specs()) == (gpu in ("b300", "rtx-pro-6000"))
