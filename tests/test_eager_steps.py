"""Steps run without CUDA graphs cost at least the host's dispatch of their kernels
(sim/cost/eager.py): which steps, per framework and flag, and the floor's arithmetic."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.cost.eager import (
    DENSE_LAYER_S,
    LATENT_EXPERT_LAYER_S,
    EagerSteps,
    Graphs,
    default_graphs,
    dispatch_s,
    sglang_decode_cap,
    sglang_graphs_prefill,
    vllm_capture_tokens,
)
from sim.cost.gpus import GPUS
from sim.cost.models import LinearCost, build_cost
from sim.cost.overlap import HostOverlap
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape, decode_shape, shape_of

LINEAR = LinearCost(step_s=1e-3, per_new_token_s=1e-5)


def test_dispatch_is_the_measured_eager_steps_over_their_layers() -> None:
    # Llama-3-8B's eager step at one sequence (8.23 ms over 32 layers), DeepSeek-V3's
    # one-token forward (82.64 ms: 3 dense layers, 58 of latent attention and experts).
    assert dispatch_s(MODELS["llama-3-8b"]) == pytest.approx(8.23e-3, rel=1e-12)
    assert dispatch_s(MODELS["deepseek-v3"]) == pytest.approx(82.64e-3, rel=1e-12)
    assert pytest.approx(1.4115e-3, rel=1e-4) == LATENT_EXPERT_LAYER_S
    # Experts without latent attention, for want of a measurement: dense layers.
    qwen = MODELS["qwen3-30b-a3b"]
    assert dispatch_s(qwen) == pytest.approx(qwen.layers * DENSE_LAYER_S, rel=1e-12)


def test_a_step_without_graphs_costs_the_longer_of_its_work_and_the_dispatch() -> None:
    eager = EagerSteps(LINEAR, Graphs("none"), 5e-3)
    # Four decodes (1.04 ms of work) and a 100-token prefill (2 ms) wait on the dispatch;
    # a 1,000-token prefill's 11 ms hide it.
    assert eager.step_time(decode_shape(4, 400)) == 5e-3
    assert eager.step_time(shape_of([(100, 0)])) == 5e-3
    assert eager.step_time(shape_of([(1000, 0)])) == pytest.approx(11e-3, rel=1e-12)
    decode_only = EagerSteps(LINEAR, Graphs("decode"), 5e-3)
    assert decode_only.step_time(decode_shape(4, 400)) == pytest.approx(1.04e-3, rel=1e-12)
    assert decode_only.step_time(shape_of([(100, 0), (1, 50)])) == 5e-3
    capped = EagerSteps(LINEAR, Graphs("all", max_decode_seqs=3), 5e-3)
    assert capped.step_time(decode_shape(3, 300)) == pytest.approx(1.03e-3, rel=1e-12)
    assert capped.step_time(decode_shape(4, 400)) == 5e-3
    assert capped.step_time(shape_of([(100, 0)])) == pytest.approx(2e-3, rel=1e-12)


def test_a_step_past_the_largest_capture_size_waits_on_the_dispatch() -> None:
    # vLLM graphs steps of up to 512 tokens (decode-only whole, mixed piecewise); a
    # larger one, of any kind, runs without a graph: 1 ms + 10 us a token, or 10 ms.
    eager = EagerSteps(LINEAR, Graphs("all", max_tokens=512), 10e-3)
    assert eager.step_time(shape_of([(500, 0), (1, 9)])) == pytest.approx(6.01e-3, rel=1e-12)
    assert eager.step_time(shape_of([(511, 0), (1, 9)])) == pytest.approx(6.12e-3, rel=1e-12)
    assert eager.step_time(shape_of([(512, 0), (1, 9)])) == 10e-3  # 513 tokens
    assert eager.step_time(decode_shape(512, 512)) == pytest.approx(6.12e-3, rel=1e-12)
    assert eager.step_time(decode_shape(600, 600)) == 10e-3
    assert eager.step_time(shape_of([(2000, 0)])) == pytest.approx(21e-3, rel=1e-12)
    assert eager.graphs.phrase == "steps over 512 tokens without CUDA graphs"


@pytest.mark.parametrize(("seqs", "batched", "k", "tokens"), [
    (1024, 8192, 0, 512), (256, 8192, 0, 512), (128, 8192, 0, 256), (4, 8192, 0, 8),
    (64, 8192, 3, 512), (16, 8192, 3, 128), (1024, 256, 0, 256)])
def test_vllms_largest_capture_size(seqs: int, batched: int, k: int, tokens: int) -> None:
    # min(2 x max_num_seqs x (1 + k), 512, max_num_batched_tokens), as
    # vllm/config/vllm.py sets it when no capture size is given.
    assert vllm_capture_tokens(seqs, batched, k) == tokens


def test_arrays_price_as_the_steps_one_by_one() -> None:
    shapes = [decode_shape(4, 400), decode_shape(600, 6000), shape_of([(100, 0)]),
              shape_of([(1000, 0), (1, 10)])]
    arrays = StepShape(*(np.array(v) for v in zip(*shapes, strict=True)))
    for graphs in (Graphs("none"), Graphs("decode"), Graphs("all", 500),
                   Graphs("all", max_tokens=512), Graphs("decode", 0, 600)):
        eager = EagerSteps(LINEAR, graphs, 5e-3)
        assert list(eager.step_time(arrays)) == [eager.step_time(s) for s in shapes]


def test_the_serving_loops_host_work_stays_outside_the_floor() -> None:
    cost = RooflineCost(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, RooflineParams())
    eager = EagerSteps(cost, Graphs("none"), 8.23e-3)
    d = decode_shape(1, 100)
    host = HostOverlap(cost).host_time(d)
    assert cost.step_time(d) - host < 8.23e-3  # one decode's device work: under the floor
    assert eager.step_time(d) == pytest.approx(host + 8.23e-3, rel=1e-12)
    # Async scheduling overlaps that host work with the floored device step.
    assert HostOverlap(eager).step_time(d) == pytest.approx(max(host, 8.23e-3), rel=1e-12)
    assert eager.host_terms() == cost.host_terms()


def test_a_data_parallel_ranks_experts_sit_under_the_same_floor() -> None:
    # Four decodes (1.04 ms) and 2 ms of the group's experts: 3.04 ms of device work,
    # under the 5 ms dispatch, which they are issued within; 4 ms more of experts go past.
    d = decode_shape(4, 400)
    for eager in (EagerSteps(LINEAR, Graphs("none"), 5e-3),
                  HostOverlap(EagerSteps(LINEAR, Graphs("none"), 5e-3))):
        assert eager.step_time_plus(d, 2e-3) == 5e-3
        assert eager.step_time_plus(d, 6e-3) == pytest.approx(7.04e-3, rel=1e-12)


@pytest.mark.parametrize("gpu, tp, cap", [("h200", 1, 256), ("h200", 8, 512),
                                          ("h100-sxm", 2, 256), ("b200", 1, 512),
                                          ("l40s", 1, 32), ("l40s", 4, 160),
                                          ("a10g", 1, 24), ("a10g", 4, 80)])
def test_sglang_captures_decode_batches_by_memory_and_tp(gpu: str, tp: int, cap: int) -> None:
    assert sglang_decode_cap(GPUS[gpu], tp) == cap


@pytest.mark.parametrize("version, graphs", [
    ("0.5.9", False), ("0.5.8.post1", False), ("0.5.10", True), ("0.5.10.post1", True),
    ("0.6.0", True), ("nightly-dev-20260216-d3bae71e", False),
    ("nightly-dev-20260402-d7256eb6", True), (None, True)])
def test_sglang_graphs_prefills_from_0_5_10(version: str | None, graphs: bool) -> None:
    assert sglang_graphs_prefill(version, MODELS["llama-3-8b"]) is graphs
    assert sglang_graphs_prefill(version, MODELS["gpt-oss-120b"]) is False


def test_each_frameworks_default() -> None:
    llama, h200 = MODELS["llama-3-8b"], GPUS["h200"]
    assert default_graphs(None, None, llama, h200, 1) == Graphs("all")
    assert default_graphs("vllm", "0.24.0", llama, h200, 1) == Graphs("all")
    assert default_graphs("vllm", "0.24.0", llama, h200, 1, 512) == Graphs("all", 0, 512)
    assert default_graphs("sglang", "0.5.10", llama, h200, 1, 512) == Graphs("all", 256)
    assert default_graphs("trtllm", "1.2.0", llama, h200, 8) == Graphs("decode")
    assert default_graphs("sglang", "0.5.9", llama, h200, 8) == Graphs("decode", 512)
    assert default_graphs("sglang", "0.5.10", llama, h200, 1) == Graphs("all", 256)
    assert not Graphs("all").floored


WORKLOAD = {"arrivals": {"process": "constant", "rate": 1.0},
            "lengths": {"prompt": {"dist": "fixed", "value": 64},
                        "output": {"dist": "fixed", "value": 5}},
            "num_requests": 1}


def steps(serving: dict[str, Any]) -> list[float]:
    """Seconds of each step of one request of 64 prompt tokens and 5 outputs."""
    raw = {"model": "tiny", "cost": {"linear": {"step_s": 1e-4, "per_new_token_s": 1e-6}},
           "workload": WORKLOAD, "serving": serving}
    return [s[2] - s[1] for s in simulate(from_dict(raw, "<test>"), log_steps=True).step_log]


def test_one_request_without_graphs_steps_at_the_dispatch() -> None:
    """The tiny preset's 2 layers dispatch in 2 x 8.23 / 32 ms = 0.514375 ms; its steps
    (0.164 ms the prefill, 0.101 ms a decode) all wait on it; with graphs, none do."""
    floor = 2 * DENSE_LAYER_S
    assert steps({"cuda_graphs": "none"}) == pytest.approx([floor] * 5, rel=1e-9)
    assert steps({}) == pytest.approx([1.64e-4] + [1.01e-4] * 4, rel=1e-9)
    # Decode-only graphs: the prefill waits on the dispatch, the decodes do not.
    assert steps({"cuda_graphs": "decode"}) == pytest.approx([floor] + [1.01e-4] * 4,
                                                             rel=1e-9)


def test_the_cost_names_what_runs_without_graphs() -> None:
    def built(serving: dict[str, Any], **more: Any) -> Any:
        raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"}, "cost": "measured",
               "workload": WORKLOAD, "serving": serving, **more}
        return build_cost(from_dict(raw, "<test>"))

    assert built({}).source == ("measured kernels: vLLM 0.24.0 on H100-SXM; steps over 512 "
                                "tokens without CUDA graphs; async scheduling")
    assert built({"cuda_graphs": "none"}).source == (
        "measured kernels: vLLM 0.24.0 on H100-SXM; no CUDA graphs (eager steps); async "
        "scheduling")
    sgl = built({"cuda_graph_max_bs": 64}, cost={"measured": {"framework": "sglang"}})
    assert isinstance(sgl, EagerSteps) and sgl.graphs == Graphs("all", 64)
    assert sgl.source.endswith("; decode batches over 64 without CUDA graphs")


def test_a_graph_mode_servesim_does_not_know_is_refused() -> None:
    from sim.errors import ServesimError

    with pytest.raises(ServesimError, match="cuda_graphs"):
        steps({"cuda_graphs": "piecewise"})


def test_a_server_without_graphs_sets_no_graph_memory_aside() -> None:
    """vLLM's --enforce-eager captures no graph, so the 0.73 GiB estimate a release with
    one sets aside (0.21 on its V1 model runner) goes to the KV cache."""
    from sim.config.disagg import pool_memory, pools
    from sim.cost.memory import CUDA_GRAPH_BYTES

    def budget(serving: dict[str, Any]) -> Any:
        raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"}, "cost": "measured",
               "workload": WORKLOAD, "serving": {"vllm_version": "0.21.0", **serving}}
        sc = from_dict(raw, "<test>")
        return pool_memory(sc.model, pools(sc)[0])

    graphed, eager = budget({}), budget({"cuda_graphs": "none"})
    assert (graphed.cuda_graph, eager.cuda_graph) == (CUDA_GRAPH_BYTES, 0)
    assert eager.kv - graphed.kv == CUDA_GRAPH_BYTES
    assert eager.blocks == (graphed.kv + CUDA_GRAPH_BYTES) // graphed.block_bytes
    assert budget({"cuda_graphs": "decode"}).cuda_graph == CUDA_GRAPH_BYTES


def test_a_linear_cost_without_graphs_stays_synchronous() -> None:
    """The linear model has no host work to overlap: wrapping it for eager steps must not
    turn async scheduling's overlap (and its one-step wait) on."""
    def built(graphs: str) -> Any:
        raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.02}}, "workload": WORKLOAD,
               "serving": {"cuda_graphs": graphs}}
        return build_cost(from_dict(raw, "<test>"))

    assert not isinstance(built("none"), HostOverlap) and isinstance(built("none"), EagerSteps)
    assert built("all") == LinearCost(step_s=0.02)


def test_a_scenario_prices_its_steps_past_vllms_capture_size() -> None:
    """Kernel-priced models (the tables, the roofline) take vLLM's largest capture size
    from the scenario's limits; a linear model times no kernels and keeps every step."""
    def built(model: str, cost: Any, **serving: Any) -> Any:
        raw = {"model": model, "hardware": {"gpu": "h100-sxm"}, "cost": cost,
               "workload": WORKLOAD, "serving": {"async_scheduling": False, **serving}}
        return build_cost(from_dict(raw, "<test>"))

    roof = built("tiny", "roofline")  # vLLM v1 on an H100: 1,024 sequences, 512 tokens
    assert isinstance(roof, EagerSteps) and roof.graphs == Graphs("all", 0, 512)
    assert built("tiny", "roofline", max_num_seqs=100).graphs == Graphs("all", 0, 200)
    spec = built("tiny", "roofline", max_num_seqs=16,
                 speculative={"method": "ngram", "num_tokens": 3,
                              "acceptance": {"rate": 0.5}})
    assert spec.graphs == Graphs("all", 0, 128)  # 16 sequences verifying 4 tokens, x2
    assert built("tiny", "roofline", cuda_graph_max_tokens=64).graphs == Graphs("all", 0, 64)
    assert built("tiny", "roofline", policy="continuous").graphs == Graphs("all", 0, 512)
    # The tiny model's 2 layers dispatch in 0.514375 ms: a 600-token step of its
    # microseconds of device work waits on it; a 512-token one does not.
    base = roof.cost
    host = roof.host_time(shape_of([(600, 0)]))
    assert roof.step_time(shape_of([(600, 0)])) == pytest.approx(host + 2 * DENSE_LAYER_S,
                                                                rel=1e-12)
    assert roof.step_time(shape_of([(512, 0)])) == base.step_time(shape_of([(512, 0)]))
    assert built("tiny", {"linear": {"step_s": 1e-3}}) == LinearCost(step_s=1e-3)
    # A linear model floors steps past a capture size the scenario gives.
    capped = built("tiny", {"linear": {"step_s": 1e-4}}, cuda_graph_max_tokens=32)
    assert capped.step_time(shape_of([(64, 0)])) == pytest.approx(2 * DENSE_LAYER_S)
    assert capped.step_time(shape_of([(32, 0)])) == pytest.approx(1e-4)


def test_each_disaggregated_pool_takes_the_capture_size_of_its_own_limits() -> None:
    import numpy as np

    from sim.core.engine import Engine, entry_cost
    from sim.workload.build import build_requests

    raw = {"model": "tiny", "hardware": {"gpu": "h100-sxm"}, "cost": "roofline",
           "workload": WORKLOAD, "serving": {"policy": "disaggregated"},
           "disaggregated": {"prefill": {"replicas": 1, "max_num_seqs": 64},
                             "decode": {"replicas": 1, "max_num_seqs": 200}}}
    sc = from_dict(raw, "<test>")
    reqs = build_requests(sc.workload, None, np.random.default_rng(0))
    eng = Engine(sc, reqs, entry_cost(sc), np.random.default_rng(1))

    def graphs(cost: Any) -> Graphs:
        while not isinstance(cost, EagerSteps):
            cost = cost.cost
        return cost.graphs

    # 2 x 64 and 2 x 200 tokens (under 512): each pool's own max_num_seqs.
    assert [(r.role, graphs(r.cost)) for r in eng.replicas] == [
        ("prefill", Graphs("all", 0, 128)), ("decode", Graphs("all", 0, 400))]
    assert graphs(entry_cost(sc)) == Graphs("all", 0, 128)
