"""Tensor-parallel sharding (sim.cost.shard.shard) and what it prices: per-GPU KV bytes with
replicated KV heads, the roofline's decode KV read, and all-reduces across nodes."""

from __future__ import annotations

import pytest
from conftest import tiny_scenario

from sim.cost.gpus import GPUS
from sim.cost.memory import memory_budget
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


def test_split_and_padding() -> None:
    d = shard(MODELS["llama-3-8b"], 4)
    assert (d.heads, d.kv_heads, d.intermediate, d.hidden, d.vocab) == (8, 2, 3584, 4096,
                                                                        32064)
    # A vocabulary is padded to a multiple of 64 before it is split: 32001 -> 32064.
    odd = ModelSpec(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64,
                    intermediate=704, vocab=32001)
    assert shard(odd, 2).vocab == 16032


def test_kv_heads_replicate_at_tp16() -> None:
    m = MODELS["llama-3-70b"]  # 8 KV heads
    d = shard(m, 16)
    assert d.kv_heads == 1  # each GPU keeps one head; two GPUs hold each head
    naive = m.kv_bytes_per_token / 16  # half a head per GPU: 20480 B a token
    assert d.kv_bytes_per_token == 2 * 80 * 1 * 128 * 2 == 2 * naive == 40960
    b = memory_budget(m, GPUS["h100-sxm"], 16, 0.9, 16, 8192, 256)
    assert b.block_bytes == 40960 * 16
    # The roofline reads that per-GPU KV at decode: 40960 B a token at 0.5 x 3.35 TB/s.
    c = RooflineCost(m, GPUS["h100-sxm"], 16, RooflineParams(bandwidth_efficiency=0.5))
    assert c._kv_mem_s == 40960 / (3.35e12 * 0.5)


@pytest.mark.parametrize(("tp", "match"), [
    (3, "hardware.tp: the model's 4 query heads do not split over tp=3"),
    (8, "hardware.tp: the model's 4 query heads do not split over tp=8"),
])
def test_tp_that_cannot_shard_fails_at_load(tp: int, match: str) -> None:
    with pytest.raises(ServesimError, match=match):
        tiny_scenario(hardware={"tp": tp})


def test_kv_heads_neither_split_nor_replicate() -> None:
    m = ModelSpec(layers=2, hidden=768, heads=12, kv_heads=6, head_dim=64, intermediate=768,
                  vocab=1000)
    with pytest.raises(ServesimError, match="6 KV heads neither split over nor replicate "
                                            "evenly across tp=4"):
        shard(m, 4)
    assert shard(m, 12).kv_heads == 1 and shard(m, 3).kv_heads == 2


def test_pool_tp_error_names_the_pool() -> None:
    with pytest.raises(ServesimError, match="disaggregated.decode.tp: the model's 4 query "
                                            "heads do not split over tp=3"):
        tiny_scenario(serving={"policy": "disaggregated"}, disaggregated={"decode": {"tp": 3}})


def test_allreduce_across_nodes_is_priced_on_the_network() -> None:
    m, g, p = MODELS["llama-3-70b"], GPUS["h100-sxm"], RooflineParams()
    # tp 8 fits one HGX node: NVLink, 450 GB/s and 8 us a step.
    inside = RooflineCost(m, g, 8, p)
    assert inside._ar_fixed_s == pytest.approx(2 * 80 * 8e-6)
    assert inside._ar_token_s == pytest.approx(2 * 80 * 2 * 7 / 8 * 8192 * 2 / 450e9)
    # tp 16 spans two nodes: the ring is as slow as its slowest hop, a 400 Gb/s NIC
    # (50 GB/s) with 20 us a step: 2 x 80 x 20 us = 3.2 ms a step, and
    # 2 x 80 x 2 x 15/16 x 8192 x 2 B / 50e9 = 98.304 us per new token.
    across = RooflineCost(m, g, 16, p)
    assert across._ar_fixed_s == pytest.approx(3.2e-3)
    assert across._ar_token_s == pytest.approx(98.304e-6)
    assert g.tp_link(8) == (450e9, 8e-6) and g.tp_link(16) == (50e9, 20e-6)


def _roofline(tp: int):
    """The tiny model's roofline cost on ``tp`` H100s, built from a scenario as a run does."""
    from sim.config.scenario import from_dict
    from sim.cost.models import build_cost, unwrapped

    # The roofline itself, under the floor of steps past vLLM's largest capture size.
    return unwrapped(build_cost(from_dict({
        "model": "tiny", "hardware": {"gpu": "h100-sxm", "tp": tp},
        "cost": {"roofline": {}}, "serving": {"async_scheduling": False},
        "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                 "output": {"dist": "fixed", "value": 2}},
                     "num_requests": 1}})))


@pytest.mark.parametrize(("tp", "fixed_s", "per_token_s"), [
    # tiny: 2 layers, hidden 256, fp32 (4 B). H100 NVLink: 450e9 B/s, 8 us a step.
    # Fixed: 2 all-reduces a layer x 2 layers x 8 us = 32 us.
    # Per new token: 2 x 2 all-reduces x ring factor 2(tp - 1)/tp x 256 x 4 B / 450e9:
    # tp 2: factor 1, 4 x 1024 / 450e9 = 9.1022e-9 s; tp 4: factor 1.5, 6144 / 450e9 s.
    (2, 32e-6, 4 * 1024 / 450e9),
    (4, 32e-6, 4 * 1.5 * 1024 / 450e9),
    (1, 0.0, 0.0),  # one GPU: no all-reduce at all
])
def test_allreduce_term_grows_with_every_new_token(tp: int, fixed_s: float,
                                                   per_token_s: float) -> None:
    from sim.cost.shape import shape_of

    cost = _roofline(tp)
    for entries in ([(1000, 0)], [(2000, 0)], [(1, 40)] * 8, [(1000, 0), (1, 40), (1, 9)]):
        shape = shape_of(entries)
        new = sum(n for n, _ in entries)
        parts = cost.parts(shape)
        assert parts["allreduce"] == pytest.approx(fixed_s + per_token_s * new, rel=1e-12,
                                                   abs=1e-18)
        # The step time is the sum of its parts: the all-reduce is paid, not only reported.
        assert cost.step_time(shape) == pytest.approx(sum(parts.values()), rel=1e-12)
    # A 1000-token prefill at tp 2 pays 32 us + 1000 x 9.1022 ns = 41.1022 us.
    if tp == 2:
        assert cost.parts(shape_of([(1000, 0)]))["allreduce"] == pytest.approx(41.1022e-6,
                                                                                rel=1e-5)
