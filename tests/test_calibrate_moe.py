"""calibrate's mixture-of-experts layer: the forward against a per-token reference, the
layers a MoE decoder builds, how its linear stack is timed and fitted, FP8 refused on a
CPU, and a quick CPU calibration of `tiny-moe` that `servesim simulate` runs."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import e2e

from calibrate.cli import main as calibrate_main
from calibrate.executor import check_timeable
from calibrate.fitsteps import layer_mean, sweep_knots
from calibrate.grids import DENSE_LINEAR, Point, grid_for, operator_points, whole_step_points
from calibrate.model import MoE, SwiGLU, build_decoder, spread_ids
from calibrate.records import Measurement, Timing
from calibrate.refit import refit
from calibrate.rounds import RoundsConfig
from calibrate.run import CalibrationConfig, _step_layer_bytes, calibrate
from calibrate.sweeps import Bench
from calibrate.timing import Timer, TimingConfig
from sim.cost.presets import MODELS
from sim.cost.profilefile import load_profile
from sim.cost.profilefit import FitResult
from sim.cost.shape import shape_of
from sim.cost.shard import shard
from sim.errors import ServesimError

CPU = torch.device("cpu")
TINY_MOE = MODELS["tiny-moe"]


def naive_moe(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """Token by token: softmax over every expert, the top k renormalised (Qwen3-MoE's
    rule), each chosen expert's SwiGLU weighted, plus the shared experts."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        xt = x[t]
        probs = torch.softmax(moe.router.weight.float() @ xt.float(), dim=0)
        top = torch.topk(probs, moe.k).indices
        for e in top.tolist():
            gate, up = (moe.w_gate_up[e] @ xt).chunk(2)
            out[t] += probs[e] / probs[top].sum() * (moe.w_down[e] @ (torch.nn.functional.silu(
                gate) * up))
        if moe.shared is not None:
            out[t] += moe.shared(xt[None])[0]
    return out


@pytest.mark.parametrize("shared", [0, 1])
@torch.inference_mode()
def test_moe_forward_equals_a_per_token_reference(shared: int) -> None:
    spec = dataclasses.replace(TINY_MOE, shared_experts=shared)
    model = build_decoder(shard(spec, 1), 1, 16, "fp32", CPU, seed=3)
    moe = model.layers[0].mlp
    assert isinstance(moe, MoE)
    # Large router weights spread the logits, so near-ties cannot flip a top-k choice.
    moe.router.weight.normal_(std=1.0)
    x = torch.randn(53, spec.hidden, generator=torch.Generator().manual_seed(1))
    got = moe(x)
    torch.testing.assert_close(got, naive_moe(moe, x), atol=1e-5, rtol=1e-4)
    ids, weights = moe.route(x)
    assert ids.shape == (53, 2) and bool((ids[:, 0] != ids[:, 1]).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(53))
    # Many tokens routed at random reach every expert; one token reaches exactly k.
    assert len(set(ids.flatten().tolist())) == spec.experts
    assert len(set(moe.route(x[:1])[0].flatten().tolist())) == 2


@torch.inference_mode()
def test_moe_decoder_keeps_dense_layers_first_and_its_weights_are_the_specs() -> None:
    spec = dataclasses.replace(TINY_MOE, layers=3, dense_layers=1, shared_experts=2)
    d = shard(spec, 1)
    model = build_decoder(d, spec.layers, 16, "fp32", CPU)
    kinds = [type(layer.mlp) for layer in model.layers]
    assert kinds == [SwiGLU, MoE, MoE]
    # Projection weights (matrices), routers apart: what sim's memory model counts.
    layer_weights = [sum(p.numel() for n, p in layer.named_parameters()
                         if p.dim() > 1 and "router" not in n) for layer in model.layers]
    assert sum(layer_weights) == d.stack_params
    assert layer_weights[1] == (d.attention_params_per_layer
                                + (8 + 2) * 3 * 256 * 352)
    routers = sum(layer.mlp.router.weight.numel() for layer in model.layers[1:])
    assert routers == spec.router_params == 2 * 256 * 8


def test_spread_ids_are_distinct_within_a_vocabulary() -> None:
    ids = spread_ids(2048, 2048, start=5)
    assert sorted(ids) == list(range(2048))  # an odd stride walks all of a power of two
    assert spread_ids(3, 2048) == [0, 40503 % 2048, 81006 % 2048]


def test_whole_step_memory_estimate_is_what_reserve_builds_for_moe() -> None:
    points = whole_step_points(TINY_MOE, grid_for("cpu", True))
    meta = torch.device("meta")
    bench = Bench(shard(TINY_MOE, 1), TINY_MOE.layers, TINY_MOE.max_context, "fp32", meta,
                  Timer(meta, TimingConfig()))
    bench.reserve(points)
    built = bench.reserved()
    assert built is not None
    model, caches = built
    layer = model.layers[0]
    weights = sum(p.numel() * p.element_size() for p in layer.parameters() if p.dim() > 1)
    kv = 2 * caches[0].k.numel() * caches[0].k.element_size()
    assert _step_layer_bytes(TINY_MOE, 1, points) == weights + kv


def test_dense_layers_of_a_moe_model_get_their_own_linear_points() -> None:
    grid = grid_for("cpu", True)
    plain = operator_points(TINY_MOE, grid)
    assert not [p for p in plain if p.component == DENSE_LINEAR]
    mixed = operator_points(dataclasses.replace(TINY_MOE, dense_layers=1), grid)
    linear = [p.entries for p in mixed if p.component == "linear"]
    dense = [p.entries for p in mixed if p.component == DENSE_LINEAR]
    assert sorted(linear) == sorted(dense) and len(linear) == len(
        [p for p in plain if p.component == "linear"])


def timed(component: str, n: int, seconds: float) -> Measurement:
    return Measurement(Point(component, ((n, 0),), f"n={n}"), "ok", Timing((seconds,) * 3, False))


def test_layer_mean_weighs_expert_and_dense_layers() -> None:
    spec = dataclasses.replace(TINY_MOE, layers=4, dense_layers=1)
    moe = [timed("linear", n, t) for n, t in ((1, 4e-3), (2, 8e-3), (3, 6e-3))]
    dense = [timed(DENSE_LINEAR, n, t) for n, t in ((1, 2e-3), (3, 10e-3))]  # none at 2
    kept, ys = layer_mean(spec, moe, moe + dense)
    assert [m.point.entries for m in kept] == [((1, 0),), ((3, 0),)]
    # 3/4 of the layers are MoE: 0.75·4 + 0.25·2 = 3.5 ms; 0.75·6 + 0.25·10 = 7 ms.
    assert ys == pytest.approx([3.5e-3, 7e-3], rel=1e-12)
    same, plain = layer_mean(TINY_MOE, moe, moe + dense)
    assert same == moe and plain == [4e-3, 8e-3, 6e-3]


def test_moe_linear_knots_leave_out_the_held_out_points_and_score_them() -> None:
    ns = [1, 2, 10, 20, 30, 40]
    ys = [1e-3, 2e-3, 5e-3, 5e-3, 6e-3, 8e-3]
    good = [timed("linear", n, t) for n, t in zip(ns, ys, strict=True)]
    fit = FitResult("linear", {"const_s": 0.0, "weight_s": 1.0, "per_token_s": 0.0}, 0.1,
                    0.1, 0.1, 3, 1, table=(1e-3, 2e-3),
                    roles=("table", "table", "train", "test", "train", "train"))
    out = sweep_knots(fit, good, ys)
    assert out.table_at == (1.0, 2.0, 10.0, 30.0, 40.0)
    assert out.table == (1e-3, 2e-3, 5e-3, 6e-3, 8e-3)
    # n=20 between the knots at 10 (5 ms) and 30 (6 ms): 5.5 ms against 5 measured.
    assert out.mape_test == pytest.approx(0.1, rel=1e-12)
    assert out.max_err_test == pytest.approx(0.1, rel=1e-12) and out.mape_train == 0.0


def fp8(name: str, **kw: str):
    return dataclasses.replace(MODELS[name], **kw)  # type: ignore[arg-type]


def test_fp8_on_a_cpu_is_refused_naming_the_key() -> None:
    with pytest.raises(ServesimError, match=r"^model\.dtype: got fp8-block: FP8 cannot be "
                                            r"timed on a CPU.*profile build --dtype fp8"):
        check_timeable(MODELS["qwen3-235b-a22b-fp8"], "cpu")
    with pytest.raises(ServesimError, match=r"^model\.kv_dtype: got fp8: FP8 cannot be timed "
                                            r"on a CPU"):
        check_timeable(fp8("tiny", kv_dtype="fp8"), "cpu")
    # On CUDA the torch model has no FP8 path either: the refusal it always gave.
    with pytest.raises(ServesimError, match=r"^model\.dtype: calibrate times bf16, fp16"):
        check_timeable(fp8("tiny-moe", dtype="fp8"), "cuda")


def test_calibrate_cli_refuses_fp8_on_cpu_in_one_line(tmp_path: Path, capsys) -> None:
    rc = calibrate_main(["--model", "llama-3.3-70b-fp8", "--device", "cpu", "--quick",
                         "--no-progress", "--out", str(tmp_path / "p.yaml")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "Traceback" not in err
    assert err.startswith("servesim calibrate: error: model.dtype: got fp8: FP8 cannot be "
                          "timed on a CPU")
    assert not list(tmp_path.iterdir())


@e2e
def test_quick_cpu_calibration_of_tiny_moe_is_simulated(tmp_path: Path) -> None:
    # The smallest run that still fits every component: quick grid, one pass, three
    # rounds of whole steps. Idle, the sweep ends well inside the budget; on a loaded
    # machine the budget may cut it short (the profile then says so), which the fit and
    # this test allow (at a 60 s budget and a load of 8 on 2 cores it stopped after 176
    # operator points and still fitted). Nothing about speed is asserted.
    out = tmp_path / "cpu-tiny-moe.yaml"
    threads = torch.get_num_threads()
    try:
        res = calibrate(CalibrationConfig(model=TINY_MOE, out=out, device="cpu", quick=True,
                                          budget_s=120.0, progress=False, passes=1,
                                          rounds=RoundsConfig(rounds=3)))
    finally:
        torch.set_num_threads(threads)
    cost = load_profile(str(out))
    assert cost.model == TINY_MOE
    data = yaml.safe_load(out.read_text())
    linear = data["components"]["linear"]
    # Knots at every kept count, as the public-table MoE profiles have them.
    at, secs = linear["table_at"], linear["table_s"]
    assert at[0] == 1 and len(at) == len(secs) and at == sorted(at) and at[-1] > 64
    rows = {int(float(r["new_tokens"])): (r["split"], float(r["median_s"]))
            for r in csv.DictReader(res.csv_path.open())
            if r["component"] == "linear" and r["status"] == "ok"}
    assert sorted(n for n, (split, _) in rows.items() if split in ("table", "train")) == at
    assert [rows[n][1] for n in at] == pytest.approx(secs, rel=1e-5)
    assert any("mixture of experts" in n for n in data["calibration"]["notes"])
    # Fitted again from its CSV and settings (calibrate --refit), with its knots and any
    # dense layers' points: the same components.
    again = refit(res.csv_path, tmp_path / "again.yaml")
    assert yaml.safe_load(again.profile_path.read_text())["components"] == data["components"]
    # The profile prices a step inside the knots with them: 40 tokens, per layer.
    shape_40 = cost.breakdown(shape_of([(40, 0)]))
    want = float(np.interp(40, at, secs)) * TINY_MOE.layers
    assert shape_40["linear"] == pytest.approx(want, rel=1e-5)
    scenario = tmp_path / "sc.yaml"
    scenario.write_text(yaml.safe_dump({
        "model": "tiny-moe", "hardware": {"gpu": "h100-sxm"}, "cost": {"profile": out.name},
        "serving": {"policy": "chunked", "max_num_seqs": 16, "max_num_batched_tokens": 512},
        "workload": {"arrivals": {"process": "poisson", "rate": 5.0}, "num_requests": 30,
                     "lengths": {"prompt": {"dist": "fixed", "value": 100},
                                 "output": {"dist": "fixed", "value": 8}}}}))
    from sim.cli import main as sim_main

    assert sim_main(["simulate", str(scenario), "--out", str(tmp_path / "run"), "--no-plots",
                     "--quiet"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["cost_source"].startswith("calibrated profile:")
    rows_out = list(csv.DictReader((tmp_path / "run" / "requests.csv").open()))
    assert len(rows_out) == 30 and {r["status"] for r in rows_out} == {"finished"}


def test_gpt_oss_layers_the_torch_model_lacks_are_refused_naming_the_key() -> None:
    # gpt-oss is bf16 outside its experts, so the dtype checks alone would let it through
    # and time a model without its windows, sinks or 4-bit experts.
    with pytest.raises(ServesimError, match="sliding-window") as exc:
        check_timeable(MODELS["gpt-oss-20b"], "cuda")
    assert exc.value.where == "model.sliding_layers"
    no_window = dataclasses.replace(MODELS["gpt-oss-20b"], sliding_window=0, sliding_layers=0,
                                    attention_sinks=False)
    with pytest.raises(ServesimError, match="got mxfp4") as exc:
        check_timeable(no_window, "cuda")
    assert exc.value.where == "model.expert_dtype"
