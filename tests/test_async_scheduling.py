"""vLLM's async scheduling: a step costs the longer of its host and its device work.

Host work is the roofline's step and per-sequence overheads (vLLM's fitted priors:
1.14194 ms + 50.0589 µs a sequence) and a measured profile's step priors; it is on by
default for vLLM v1's scheduler, as in vLLM since 0.14, and off where vLLM turns it off.
"""

from __future__ import annotations

from typing import Any

import pytest

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.cost.gpus import GPUS
from sim.cost.models import build_cost, unwrapped
from sim.cost.overlap import HostOverlap, async_scheduling
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.errors import ServesimError

HOST_S, PER_SEQ_S = 0.00101736, 5.18994e-05
WORKLOAD = {"arrivals": {"process": "constant", "rate": 1.0},
            "lengths": {"prompt": {"dist": "fixed", "value": 64},
                        "output": {"dist": "fixed", "value": 4}},
            "num_requests": 1}


def scenario(model: str = "tiny", **sections: Any) -> Any:
    raw = {"model": model, "cost": {"roofline": {}}, "hardware": {"gpu": "h100-sxm"},
           "workload": WORKLOAD, **sections}
    return from_dict(raw, "<test>")


def test_host_time_is_the_rooflines_overheads() -> None:
    cost = RooflineCost(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, RooflineParams())
    assert HostOverlap(cost).host_time(decode_shape(10, 5000)) == pytest.approx(
        HOST_S + 10 * PER_SEQ_S, rel=1e-12)


def test_the_longer_of_host_and_device_work_sets_the_step() -> None:
    cost = RooflineCost(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, RooflineParams())
    both = HostOverlap(cost)
    # A long prefill: the device's 8,192 tokens dwarf the host's work, which is hidden.
    long = shape_of([(8192, 0)])
    assert both.step_time(long) == pytest.approx(cost.step_time(long) - HOST_S - PER_SEQ_S,
                                                 rel=1e-12)
    # A tiny model's decode of 200 sequences: the host's 6.5 ms outlast the device.
    tiny = RooflineCost(MODELS["tiny"], GPUS["h100-sxm"], 1, RooflineParams())
    d = decode_shape(200, 200 * 64)
    assert tiny.step_time(d) - HostOverlap(tiny).host_time(d) < HostOverlap(tiny).host_time(d)
    assert HostOverlap(tiny).step_time(d) == pytest.approx(HOST_S + 200 * PER_SEQ_S, rel=1e-12)
    assert HostOverlap(tiny).device_time(d) == pytest.approx(
        tiny.step_time(d) - HOST_S - 200 * PER_SEQ_S, rel=1e-12)


def test_a_decode_step_of_the_tiny_model_costs_its_host_work_alone() -> None:
    # One request of 64 prompt tokens and 4 outputs: a prefill, then 3 decode steps. The
    # tiny model's device work per decode is well under the host's 0.860182 ms, so under
    # async scheduling each decode step lasts exactly that; synchronous, host + device.
    on = simulate(scenario(), log_steps=True)
    off = simulate(scenario(serving={"async_scheduling": False}), log_steps=True)
    host = HOST_S + PER_SEQ_S
    on_d = [s[2] - s[1] for s in on.step_log]
    off_d = [s[2] - s[1] for s in off.step_log]
    assert len(on_d) == len(off_d) == 4
    for d in on_d[1:]:
        assert d == pytest.approx(host, rel=1e-9)
    device = RooflineCost(MODELS["tiny"], GPUS["h100-sxm"], 1, RooflineParams()).step_time(
        decode_shape(1, 64)) - host
    assert off_d[1] == pytest.approx(host + device, rel=1e-9)
    assert on.first_token[0] < off.first_token[0]


@pytest.mark.parametrize("sections, want", [
    ({}, True),  # vLLM v1's scheduler, vLLM >= 0.14
    ({"serving": {"policy": "continuous"}}, False),  # vLLM v0's loop
    ({"serving": {"async_scheduling": False}}, False),
    ({"serving": {"policy": "continuous", "async_scheduling": True}}, True),
    ({"hardware": {"gpu": "h100-sxm", "tp": 2, "pp": 2}}, False),  # vLLM 0.14: off with pp
    ({"serving": {"speculative": {"method": "ngram", "num_tokens": 3,
                                  "acceptance": {"rate": 0.5}}}}, False),
    ({"serving": {"speculative": {"method": "eagle", "num_tokens": 3,
                                  "acceptance": {"rate": 0.5}}}}, True),
    ({"vllm": {"no-async-scheduling": True}}, False),
    ({"vllm": {"async-scheduling": False}}, False),
])
def test_defaults_follow_vllm(sections: dict[str, Any], want: bool) -> None:
    sc = scenario("llama-3-8b", **sections)
    assert async_scheduling(sc) is want
    assert isinstance(build_cost(sc), HostOverlap) is want or sc.hardware.pp > 1


def test_measured_profiles_of_other_frameworks_stay_synchronous() -> None:
    sc = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                    "cost": {"measured": {"framework": "sglang"}}, "workload": WORKLOAD})
    assert not async_scheduling(sc)
    # The same profile named by name or path: its framework read from the file.
    named = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                       "cost": {"profile": "h100-sxm-llama-3-8b-tp1-sglang"},
                       "workload": WORKLOAD})
    assert not isinstance(build_cost(named), HostOverlap)
    assert build_cost(named).step_time(shape_of([(1, 100)])) == \
        build_cost(sc).step_time(shape_of([(1, 100)]))
    # Asked for, it is on whatever the profile's framework.
    forced = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                        "cost": {"profile": "h100-sxm-llama-3-8b-tp1-sglang"},
                        "serving": {"async_scheduling": True}, "workload": WORKLOAD})
    assert isinstance(build_cost(forced), HostOverlap)
    vllm = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
                      "cost": "measured", "workload": WORKLOAD})
    cost = build_cost(vllm)
    assert isinstance(cost, HostOverlap)
    assert cost.source == ("measured kernels: vLLM 0.24.0 on H100-SXM; steps over 512 tokens "
                           "without CUDA graphs; async scheduling")
    # A measured profile's host work is its step priors (the embedding read is device work).
    coef = unwrapped(cost).coefs["step"]
    d = decode_shape(7, 700)
    assert cost.host_time(d) == pytest.approx(coef["const_s"] + 7 * coef["per_seq_s"],
                                              rel=1e-12)


@pytest.mark.parametrize("sections, msg", [
    ({"hardware": {"gpu": "h100-sxm", "tp": 2, "pp": 2},
      "serving": {"async_scheduling": True}},
     r"serving.async_scheduling: got true with hardware.pp 2: overlapping host work across "
     r"pipeline stages is not modelled"),
    ({"cost": {"linear": {"step_s": 0.01}}, "serving": {"async_scheduling": True}},
     r"serving.async_scheduling: got true with cost: linear"),
    ({"serving": {"async_scheduling": "yes"}}, r"serving.async_scheduling"),
    ({"vllm": {"no-async-scheduling": 1}}, r"vllm.no-async-scheduling: got 1, expected true "
                                           r"or false"),
    ({"vllm": {"async-scheduling": True}, "serving": {"async_scheduling": False}},
     r"vllm.async-scheduling: sets serving.async_scheduling, which the scenario sets too"),
])
def test_what_cannot_be_priced_is_one_line(sections: dict[str, Any], msg: str) -> None:
    raw = {"model": "llama-3-8b", "cost": {"roofline": {}}, "hardware": {"gpu": "h100-sxm"},
           "workload": WORKLOAD, **sections}
    with pytest.raises(ServesimError, match=msg):
        from_dict(raw, "<test>")
