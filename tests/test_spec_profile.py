"""Speculative heads priced from the target's profile: an EAGLE or MTP head under a
measured (or calibrated) profile drafts at the profile's own layer, LM head and
all-reduce prices, each draft step at its own context; a draft model and the roofline
keep the roofline's price."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import needs_tables, run_requests

from sim.config.scenario import from_dict
from sim.core.engine import build_cost
from sim.cost.drafter import Drafter
from sim.cost.gpus import GPUS
from sim.cost.models import unwrapped
from sim.cost.presets import MODELS
from sim.cost.profilecost import ProfileCost
from sim.cost.profilefile import load_profile
from sim.cost.roofline import RooflineParams
from sim.cost.shape import StepShape
from sim.report.summary import summarize

ROOT = Path(__file__).resolve().parents[1]


def decode(seqs: int, ctx: int) -> StepShape:
    """``seqs`` decode entries holding ``ctx`` tokens between them."""
    return StepShape(seqs, seqs, ctx, 0, 0, 0, ctx + seqs)


def test_a_head_is_the_profiles_mean_layer_and_its_lm_head() -> None:
    # Llama-3-70B on 4 H100s: 80 layers, all-reduces priced for the whole model.
    full = load_profile("h100-sxm-llama-3-70b-tp4-vllm")
    assert isinstance(full, ProfileCost)
    head = full.head(1)
    s = decode(16, 16 * 2000)
    whole, one = full.breakdown(s), head.breakdown(s)
    for name in ("linear", "decode_attention", "allreduce"):
        assert whole[name] > 0
        assert one[name] == pytest.approx(whole[name] / 80, rel=1e-12), name
    assert one["lm_head"] == pytest.approx(whole["lm_head"], rel=1e-12)
    # No per-step host work: the target's engine step pays it once.
    assert whole["step"] > 0 and one["step"] == 0
    assert head.step_time(s) == pytest.approx(sum(one.values()), rel=1e-12)
    # Two layers cost the per-layer terms twice, the LM head once.
    two = full.head(2).breakdown(s)
    assert two["linear"] == pytest.approx(2 * one["linear"], rel=1e-12)
    assert two["lm_head"] == pytest.approx(one["lm_head"], rel=1e-12)


def test_head_drafting_prices_each_step_at_its_own_context() -> None:
    full = load_profile("h100-sxm-llama-3-8b-tp1-vllm")
    assert isinstance(full, ProfileCost)
    head = full.head(1)
    d = Drafter(MODELS["llama-3-8b"], 3, GPUS["h100-sxm"], 1, RooflineParams(), head)
    want = sum(head.step_time(decode(8, 8 * 3000 + 8 * i)) for i in range(3))
    assert d.step_time(8, 8 * 3000) == pytest.approx(want, rel=1e-12)
    assert d.step_time(0, 0) == 0.0
    assert "from the profile (measured kernels: vLLM 0.24.0 on H100-SXM)" in d.source


def scenario(method: str, cost: Any = "measured", policy: str = "continuous") -> Any:
    spec = {"method": method, "num_tokens": 2, "acceptance": {"rate": 1.0}}
    if method == "draft":
        spec["draft_model"] = "llama-3-8b"
    model: Any = "llama-3-70b" if method == "draft" else "llama-3-8b"
    if method == "mtp":  # as if its checkpoint shipped an MTP module
        model = {"preset": model, "mtp_layers": 1}
    return from_dict({
        "name": "spec-profile", "model": model,
        "hardware": {"gpu": "h100-sxm", "tp": 4 if method == "draft" else 1},
        "cost": cost, "serving": {"policy": policy, "speculative": spec},
        "workload": {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 1,
                     "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                 "output": {"dist": "fixed", "value": 8}}},
    }, "<test>", ROOT)


def test_a_measured_run_drafts_from_its_profile_step_by_step() -> None:
    # One request, every draft accepted: each verify step costs the profile's price of its
    # shape (1 decode entry of k + 1 = 3 tokens reading its context once) plus two draft
    # steps of the profile's head.
    sc = scenario("eagle")
    cost = unwrapped(build_cost(sc))  # under the floor of steps past the capture size
    assert isinstance(cost, ProfileCost)
    head = cost.head(1)
    res = run_requests(sc, [0.0], [64], [8])
    verifies = [e for e in res.step_log if e[3][0][1] == 3]
    assert [e[3][0][2] for e in verifies] == [64, 67, 70]  # 1 + 3 + 3 + 1 (capped)
    for (_, t0, t1, ((_, q, ctx),)) in verifies:
        shape = StepShape(1, q, ctx, 0, 0, 0, ctx + 1)
        draft = head.step_time(decode(1, ctx)) + head.step_time(decode(1, ctx + 1))
        assert t1 - t0 == pytest.approx(cost.step_time(shape) + draft, rel=1e-9)
    spec = summarize(res)["speculative"]
    assert spec["draft_cost"].startswith("2 decode steps of llama-3-8b-eagle-head a verify, "
                                         "its layers and LM head from the profile")


def test_vllm_v1s_async_scheduling_drafts_from_the_profile_too() -> None:
    # chunked runs vLLM's async scheduling, whose cost model wraps the profile.
    res = run_requests(scenario("mtp", policy="chunked"), [0.0], [64], [8], log_steps=False)
    assert "from the profile" in summarize(res)["speculative"]["draft_cost"]


def test_a_draft_model_drafts_from_its_own_shipped_profile() -> None:
    # Llama-3-70B on 4 H100s drafting with Llama-3-8B: the 8B's shipped vLLM profile at
    # tp 4, all its layers, without its per-step host work.
    sc = scenario("draft")
    cost = unwrapped(build_cost(sc))  # under the floor of steps past the capture size
    assert isinstance(cost, ProfileCost)
    draft = load_profile("h100-sxm-llama-3-8b-tp4-vllm")
    assert isinstance(draft, ProfileCost)
    whole = draft.head(32)
    res = run_requests(sc, [0.0], [64], [8])
    verifies = [e for e in res.step_log if e[3][0][1] == 3]
    for (_, t0, t1, ((_, q, ctx),)) in verifies:
        shape = StepShape(1, q, ctx, 0, 0, 0, ctx + 1)
        want = cost.step_time(shape) + whole.decode_run(1, ctx, 2)
        assert t1 - t0 == pytest.approx(want, rel=1e-9)
    assert summarize(res)["speculative"]["draft_cost"] == (
        "2 decode steps of llama-3-8b a verify, from its own shipped profile (measured "
        "kernels: vLLM 0.24.0 on H100-SXM)")


def test_the_roofline_still_drafts_for_a_roofline_run() -> None:
    res = run_requests(scenario("eagle", "roofline"), [0.0], [64], [8], log_steps=False)
    assert "roofline decode steps" in summarize(res)["speculative"]["draft_cost"]


@needs_tables
def test_a_draft_model_without_a_shipped_profile_drafts_by_the_roofline(tmp_path: Path) -> None:
    # A TensorRT-LLM target profile (built, not shipped): no shipped TensorRT-LLM profile
    # of the draft model exists, so the roofline prices it.
    from sim.cost.tables.cli import main as profile_main

    out = tmp_path / "t.yaml"
    assert profile_main(["build", "--gpu", "h100-sxm", "--framework", "trtllm", "--model",
                         "llama-3-70b", "--tp", "4", "--out", str(out)]) == 0
    res = run_requests(scenario("draft", {"profile": str(out)}), [0.0], [64], [8],
                       log_steps=False)
    assert "roofline decode steps" in summarize(res)["speculative"]["draft_cost"]


def test_a_grids_run_of_points_is_their_sum() -> None:
    # Grid.run_at sums k points one column unit apart: at their mean where they share a
    # column interval (the grid is linear there), point by point where they straddle one.
    from sim.cost.curves import Grid

    g = Grid((1.0, 8.0, 64.0), (128.0, 1024.0, 4096.0),
             ((1.0, 2.0, 5.0), (1.5, 3.5, 9.0), (4.0, 9.0, 30.0)))
    for r in (0.5, 1.0, 3.0, 8.0, 20.0, 64.0, 200.0):
        for c in (1.0, 100.0, 126.5, 127.0, 128.0, 500.0, 1022.5, 1023.0, 1024.0, 4000.0,
                  4094.0, 4096.0, 9000.0):
            for k in (1, 2, 3, 5):
                want = sum(g.at(r, c + i) for i in range(k))
                assert g.run_at(r, c, k) == pytest.approx(want, rel=1e-12, abs=1e-15), (r, c, k)


@pytest.mark.parametrize("name", ["h100-sxm-llama-3-8b-tp1-vllm", "b200-deepseek-v3-tp8-vllm",
                                  "h200-llama-3-70b-tp4-sglang"])
def test_a_profiles_decode_run_is_its_steps_summed(name: str) -> None:
    head = load_profile(name)
    assert isinstance(head, ProfileCost)
    head = head.head(1)
    for seqs, ctx in ((1, 100), (7, 7 * 1500), (64, 64 * 4000), (300, 300 * 20000)):
        want = sum(head.step_time(decode(seqs, ctx + i * seqs)) for i in range(3))
        assert head.decode_run(seqs, ctx, 3) == pytest.approx(want, rel=1e-12)
