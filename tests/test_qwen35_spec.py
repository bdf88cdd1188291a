"""Speculative decoding of a model with Gated DeltaNet layers (Qwen3.5's MTP layer):
the 1 + k states a sequence holds, the verify's k extra state writes, the head's
full-attention shape and price, vLLM's ``qwen3_next_mtp`` flag, and what is still
refused with these layers."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest

from sim.config.disagg import pool_memory, pools
from sim.config.scenario import Scenario, from_dict
from sim.config.speculative import draft_memory, drafter_model
from sim.core.batch import Batch
from sim.core.cluster import speculation
from sim.core.engine import simulate
from sim.core.request import Request
from sim.cost.gpus import GPUS
from sim.cost.memory import STATE_SHARE
from sim.cost.memorybudget import GIB
from sim.cost.models import build_cost, unwrapped
from sim.cost.presets import MODELS
from sim.cost.profilecost import ProfileCost
from sim.cost.roofline import RooflineParams
from sim.cost.shard import shard
from sim.errors import ServesimError
from sim.report.summary import summarize

MTP = {"method": "mtp", "num_tokens": 2, "acceptance": {"rate": 0.7}}
# One GPU's state of one sequence of Qwen3.5-27B: 48 Gated DeltaNet layers, each 48 value
# heads' 128 x 128 fp32 matrices and the last 3 of 10,240 convolution channels (bf16).
STATE_27B = 48 * (48 * 128 * 128 * 4 + 10_240 * 3 * 2)


def _raw(model: str = "qwen3.5-27b", cost: str = "roofline",
         speculative: dict[str, Any] | None = None, **serving: Any) -> dict[str, Any]:
    return {"name": "q", "model": model, "hardware": {"gpu": "h200", "tp": 1}, "cost": cost,
            "serving": {"policy": "chunked",
                        "speculative": copy.deepcopy(MTP if speculative is None
                                                     else speculative), **serving},
            "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                         "num_requests": 12, "seed": 0,
                         "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                     "output": {"dist": "fixed", "value": 64}}}}


def _scenario(**kw: Any) -> Scenario:
    return from_dict(_raw(**kw))


@pytest.mark.parametrize("cost", ["roofline", "measured"])
@pytest.mark.parametrize("model", ["qwen3.5-27b", "qwen3.5-35b-a3b"])
def test_mtp_on_h200_simulates(model: str, cost: str) -> None:
    res = simulate(_scenario(model=model, cost=cost))
    s = summarize(res)
    assert s["requests"]["finished"] == 12
    spec = s["speculative"]
    assert spec["verifies"] > 0 and 1 < spec["mean_tokens_per_verify"] <= 3
    assert f"2 roofline decode steps of {model}-mtp-head" in spec["draft_cost"]
    assert "2 Gated DeltaNet state writes a verifying sequence" in spec["draft_cost"]
    if cost == "measured":
        # The head is not the profile's mean layer, and the phrase says so.
        assert "the profile's mean layer averages the target's Gated DeltaNet" in \
            spec["draft_cost"]
    # Speculation shortens the time per output token at this light load.
    plain = summarize(simulate(from_dict({**_raw(model=model, cost=cost),
                                          "serving": {"policy": "chunked"}})))
    assert s["latency_s"]["tpot"]["mean"] < plain["latency_s"]["tpot"]["mean"]


def test_each_sequence_holds_one_state_a_verified_position() -> None:
    assert shard(MODELS["qwen3.5-27b"], 1).linear_state_bytes == STATE_27B == 153_944_064
    # States set aside (SGLang's pool; vLLM pages them: test_state_pool.py).
    sc = _scenario(max_num_seqs=16, linear_state_pool="reserved")
    (pool,) = pools(sc)
    b = pool_memory(sc.model, pool)
    # 16 sequences fit: each holds 1 + k = 3 states (vLLM's speculative state pages).
    assert (b.state_seqs, b.state_copies) == (16, 3)
    assert b.linear_state == 3 * STATE_27B * 16
    m = b.summary()
    assert m["linear_state_gib"] == 3 * STATE_27B * 16 / GIB
    assert (m["linear_state_seqs"], m["linear_state_copies"]) == (16, 3)
    # Without speculation: one state a sequence, and no copies key.
    plain = from_dict({**_raw(), "serving": {"policy": "chunked", "max_num_seqs": 16,
                                             "linear_state_pool": "reserved"}})
    b0 = pool_memory(plain.model, pools(plain)[0])
    assert b0.linear_state == STATE_27B * 16 and "linear_state_copies" not in b0.summary()
    # The head's weights load beside the target's, and its one attention layer's KV
    # joins each block.
    weights, kv = draft_memory(sc.serving.speculative, sc.model, 1)  # type: ignore[arg-type]
    assert b.weights == b0.weights + weights
    assert b.block_bytes == b0.block_bytes + kv * b.block_size


def test_states_past_the_share_cap_the_sequences_after_the_head_weights() -> None:
    sc = _scenario(max_num_seqs=1024, linear_state_pool="reserved")
    b = pool_memory(sc.model, pools(sc)[0])
    # The room the states are set aside from is what the drafter's weights leave.
    room = b.budget - b.weights - b.activation - b.non_torch - b.cuda_graph
    seqs = int(room * STATE_SHARE // (3 * STATE_27B))
    assert b.state_seqs == seqs < 1024
    assert b.linear_state == 3 * STATE_27B * seqs


def _verify_batch(n: int) -> Batch:
    """A batch of ``n`` verifies of 3 tokens (a pending one and 2 drafted), each after
    512 prompt tokens and 1 generated."""
    batch = Batch()
    for i in range(n):
        r = Request(i, 0.0, 512, 64)
        r.computed, r.generated = 512, 1
        batch[r] = 3
    return batch


@pytest.mark.parametrize("method", ["mtp", "ngram"])
def test_verify_state_writes_by_hand(method: str) -> None:
    sc = _scenario(speculative={**MTP, "method": method})
    gpu = GPUS["h200"]
    sp = speculation(sc, gpu, 1, build_cost(sc, gpu, 1))
    assert sp is not None
    d = sp.drafter
    # k = 2 more writes of a sequence's state than a decode's, at the roofline's bandwidth.
    per_seq = 2 * STATE_27B / (gpu.mem_bw * RooflineParams().bandwidth_efficiency)
    assert d.verify_state_s == pytest.approx(per_seq, rel=1e-12)
    assert d.verify_state_time(8) == pytest.approx(8 * per_seq, rel=1e-12)
    assert d.step_time(8, 8 * 513) == pytest.approx(
        d.draft_time(8, 8 * 513) + 8 * per_seq, rel=1e-12)
    # The engine's inlined price of an iteration of 8 verifies carries the term too.
    assert sp.draft_time(_verify_batch(8)) == pytest.approx(d.step_time(8, 8 * 512),
                                                            rel=1e-12)
    if method == "ngram":
        # Lookup drafts for free, but its verifies still write the states.
        assert not sp.free and d.draft_time(8, 8 * 512) == 0.0
        assert sp.draft_time(_verify_batch(8)) == pytest.approx(8 * per_seq, rel=1e-12)


def test_verify_state_writes_at_a_measured_profiles_bandwidth() -> None:
    sc = _scenario(cost="measured")
    gpu = GPUS["h200"]
    cost = build_cost(sc, gpu, 1)
    sp = speculation(sc, gpu, 1, cost)
    assert sp is not None
    base = unwrapped(cost)
    assert isinstance(base, ProfileCost)
    bw = base.meta["source"]["derived"]["bandwidth_bytes_s"]
    assert sp.drafter.verify_state_s == pytest.approx(2 * STATE_27B / bw, rel=1e-12)
    # The head is priced by the roofline: the profile's layer is no head's.
    assert sp.drafter.head is None
    with pytest.raises(ValueError, match="averages Gated DeltaNet and attention layers"):
        base.head(1)


def test_models_without_the_layers_add_nothing() -> None:
    sc = from_dict({**_raw(model="llama-3-8b"),
                    "serving": {"policy": "chunked", "speculative":
                                {**MTP, "method": "ngram"}}})
    sp = speculation(sc, GPUS["h200"], 1, build_cost(sc, GPUS["h200"], 1))
    assert sp is not None and sp.free and sp.drafter.verify_state_s == 0.0
    assert sp.drafter.source == "n-gram drafting, free"


def test_the_head_is_full_attention() -> None:
    target = MODELS["qwen3.5-35b-a3b"]
    spec = _scenario(model="qwen3.5-35b-a3b").serving.speculative
    assert spec is not None
    head = drafter_model(spec, target)
    assert head is not None
    assert (head.layers, head.linear_layers, head.attention_layers) == (1, 0, 1)
    assert head.attn_output_gate and head.experts == target.experts
    assert head.linear_state_bytes == 0
    # One attention layer's KV: its KV heads' keys and values.
    assert head.kv_bytes_per_token == target.kv_bytes_per_token // target.attention_layers


def test_vllm_qwen3_next_mtp_flag_runs() -> None:
    raw = _raw(speculative={"acceptance": {"rate": 0.7}})
    raw["vllm"] = {"speculative-config":
                   '{"method": "qwen3_next_mtp", "num_speculative_tokens": 2}'}
    sc = from_dict(raw)
    spec = sc.serving.speculative
    assert spec is not None and (spec.method, spec.num_tokens) == ("mtp", 2)
    s = summarize(simulate(sc))
    assert s["requests"]["finished"] == 12 and s["speculative"]["verifies"] > 0


@pytest.mark.parametrize(("serving", "where", "what"), [
    ({"preemption": "swap"}, "serving.preemption", "swap preemption"),
])
def test_the_rest_is_still_refused_with_speculation(serving: dict[str, Any], where: str,
                                                    what: str) -> None:
    # Speculation alone is lifted: the scenario loads without the other key.
    assert _scenario().serving.speculative is not None
    with pytest.raises(ServesimError, match=rf"{where}: model qwen3.5-27b has 48 "
                                            r"linear-attention \(Gated DeltaNet\) layers, "
                                            rf"whose per-sequence state is not modelled "
                                            rf"with {what} yet"):
        _scenario(**serving)
    # Prefix caching with them is modelled (vLLM's align mode, tests/test_state_prefix.py)
    # when asked for; off by default, as vLLM leaves it for these models.
    assert _scenario().serving.prefix_caching is False
    assert _scenario(prefix_caching=True).serving.prefix_caching is True


def test_the_verify_state_term_is_small_beside_the_head() -> None:
    # A sanity bound, not a measurement: at 8 sequences the two extra state writes
    # (2 x 147 MiB each) take well under a millisecond on an H200.
    sc = _scenario()
    sp = speculation(sc, GPUS["h200"], 1, build_cost(sc, GPUS["h200"], 1))
    assert sp is not None
    assert 0 < sp.drafter.verify_state_time(8) < 1e-3
    assert np.isfinite(sp.drafter.draft_time(8, 8 * 512))


def _with_mtp_layers(tmp_path: Any, n: int) -> dict[str, Any]:
    """A scenario of Qwen3.5-27B's config with ``n`` MTP modules (mtp_num_hidden_layers)."""
    import json
    from pathlib import Path

    src = Path(__file__).resolve().parents[1] / "sim/data/models/qwen3.5-27b/config.json"
    cfg = json.loads(src.read_text())
    cfg["text_config"]["mtp_num_hidden_layers"] = n
    path = tmp_path / f"mtp{n}.json"
    path.write_text(json.dumps(cfg))
    return {**_raw(max_num_seqs=16), "model": {"hf_config": str(path)}}


def test_mtp_modules_load_whole_and_run_one_a_step(tmp_path: Any) -> None:
    """vLLM builds every MTP module a checkpoint ships and runs one a drafted token (module
    step % modules): three modules take three modules' weights and KV, and a draft step
    still costs one module's."""
    one, three = (from_dict(_with_mtp_layers(tmp_path, n)) for n in (1, 3))
    assert (one.model.mtp_layers, three.model.mtp_layers) == (1, 3)
    spec = three.serving.speculative
    assert spec is not None
    w1, kv1 = draft_memory(spec, one.model, 1)
    w3, kv3 = draft_memory(spec, three.model, 1)
    assert (w3, kv3) == (3 * w1, 3 * kv1)
    b1, b3 = (pool_memory(sc.model, pools(sc)[0]) for sc in (one, three))
    assert b3.weights - b1.weights == 2 * w1
    head1, head3 = drafter_model(spec, one.model), drafter_model(spec, three.model)
    assert head1 is not None and head3 is not None
    assert head3.layers == head1.layers == 1
    assert dataclasses.replace(head3, mtp_layers=1) == head1
    # The presets (one module each) price as before: the head of one layer.
    assert MODELS["qwen3.5-27b"].mtp_layers == 1
    assert drafter_model(spec, MODELS["qwen3.5-27b"]).layers == 1  # type: ignore[union-attr]


def test_mtp_token_counts_vllm_refuses_are_refused(tmp_path: Any) -> None:
    raw = _with_mtp_layers(tmp_path, 2)
    raw["serving"]["speculative"]["num_tokens"] = 3
    with pytest.raises(ServesimError, match=r"serving.speculative.num_tokens: got 3 with 2 MTP "
                                            r"modules in .*: more tokens than modules must be "
                                            r"a multiple of 2"):
        from_dict(raw)
    raw["serving"]["speculative"]["num_tokens"] = 4
    assert from_dict(raw)
    with pytest.raises(ServesimError, match=r"serving.speculative.method: got method mtp, but "
                                            r"kimi-k2.5 has no multi-token-prediction module "
                                            r"a server drafts with \(model.mtp_layers 0"):
        from_dict({**_raw(), "model": "kimi-k2.5", "hardware": {"gpu": "h200", "tp": 8}})


def test_a_draft_model_with_gated_deltanet_layers_is_refused() -> None:
    draft = {"method": "draft", "draft_model": "qwen3.5-27b", "num_tokens": 2,
             "acceptance": {"rate": 0.7}}
    raw = {**_raw(speculative=draft), "model": "qwen3.5-397b-a17b-fp8",
           "hardware": {"gpu": "h200", "tp": 8}}
    with pytest.raises(ServesimError, match=r"serving.speculative.draft_model: draft model "
                                            r"qwen3.5-27b has 48 linear-attention \(Gated "
                                            r"DeltaNet\) layers, whose per-sequence states a "
                                            r"draft model keeps are not modelled"):
        from_dict(raw)
