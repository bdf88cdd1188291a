"""Pipeline parallelism (``hardware.pp``): stage split, stage prices, the micro-batch
step log worked out by hand, latency and throughput against closed forms, KV memory,
GPU counts, bad input, and invariants of random runs.

Hand-worked cost: 10 ms per step + 1 ms per new token (linear; a linear model's whole
step counts as layer work, so each of 2 stages of the 2-layer tiny model costs half),
block size 4 (tests/conftest.py). Step log entries of a pipelined replica:
(replica, scheduled_s, end_s, ((request id, new tokens, context before), ...),
((stage 0 start, end), (stage 1 start, end), ...)).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_both_ways, run_requests, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.config.scenario import from_dict
from sim.core.engine import Engine, build_cost
from sim.core.request import FINISHED, REJECTED
from sim.cost.gpus import GPUS
from sim.cost.memory import memory_budget, stage_weight_bytes, weight_bytes
from sim.cost.pipeline import StageCost, stage_layers, stage_links
from sim.cost.presets import MODELS
from sim.cost.shape import decode_shape, shape_of
from sim.errors import ServesimError
from sim.report.summary import summarize
from sim.workload.requests import Requests

H100 = GPUS["h100-sxm"]


def x_tiny(tokens: int) -> float:
    """Seconds of one tiny-model stage send on one H100's NVLink: 8 µs latency plus
    hidden state and residual, 2 x 256 fp32 elements (2,048 bytes) a token, at 450 GB/s."""
    return 8e-6 + tokens * 2048 / 450e9


def rounded(log: list[Any]) -> list[Any]:
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3],
             tuple((round(a, 9), round(b, 9)) for a, b in s[4])) for s in log]


def test_layers_split_as_vllm_splits_them() -> None:
    assert stage_layers(32, 2) == (16, 16)
    assert stage_layers(80, 3) == (27, 27, 26)  # 80 = 3 x 26 + 2: the two before the last
    assert stage_layers(10, 4) == (2, 3, 3, 2)
    assert stage_layers(7, 3) == (2, 3, 2)
    assert stage_layers(2, 2) == (1, 1)
    with pytest.raises(ServesimError, match="at most 2 stages"):
        stage_layers(2, 3)


def test_stage_links_cross_nodes_at_node_edges() -> None:
    nvlink, net = (450e9, 8e-6), (50e9, 20e-6)
    assert stage_links(H100, 4, 2) == (nvlink,)
    assert stage_links(H100, 4, 4) == (nvlink, net, nvlink)  # stages 0-1 | 2-3 per node
    assert stage_links(H100, 8, 3) == (net, net)


def test_stage_prices_add_up_to_the_step_plus_sends() -> None:
    model = MODELS["llama-3-8b"]
    # Synchronous, as a pipeline's stages run (vLLM 0.14 turns async scheduling off there).
    sc = from_dict({"model": "llama-3-8b", "serving": {"async_scheduling": False},
                    "workload": {"trace": {"path": "azure_2023_conv"}}})
    whole = build_cost(sc)
    stages = StageCost(whole, model, H100, 1, 2)
    for shape in (shape_of([(1000, 0)]), decode_shape(64, 64 * 500)):
        layer, last, shared = whole.stage_split(shape)
        t0, t1 = stages.stage_times(shape)
        send = 8e-6 + shape.new_tokens * 2 * 4096 * 2 / 450e9
        assert t0 == pytest.approx(layer / 2 + shared / 2 + send, rel=1e-12)
        assert t1 == pytest.approx(layer / 2 + shared / 2 + last, rel=1e-12)
        assert t0 + t1 == pytest.approx(whole.step_time(shape) + send, rel=1e-12)


def test_two_stage_step_log_by_hand() -> None:
    # Token budget 16, A and B (prompt 16, output 2) both waiting at 0. A whole stage of a
    # 16-token batch is (10 + 16) / 2 = 13 ms, of a decode (10 + 1) / 2 = 5.5 ms; stage 0
    # adds its send, x(16) or x(1).
    # - A's prompt fills the budget: batch 1 on stage 0 from 0, stage 1 from 13 ms + x16.
    # - The queue has a second slot, so B (A is in flight) is scheduled at 0 too, and
    #   enters stage 0 when A's batch leaves it.
    # - Batch 1 out (26 ms + x16): A's first token; A's decode goes in, behind B's batch
    #   on each stage. Batch 2 out: B's first token; B's decode follows A's.
    # - Each request's next token waited for its previous micro-batch.
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 16}, hardware={"pp": 2})
    res = run_both_ways(sc, [0.0, 0.0], [16, 16], [2, 2])
    a, b = x_tiny(16), x_tiny(1)
    expected = [
        (0, 0.0, 0.026 + a, ((0, 16, 0),), ((0.0, 0.013 + a), (0.013 + a, 0.026 + a))),
        (0, 0.0, 0.039 + 2 * a, ((1, 16, 0),),
         ((0.013 + a, 0.026 + 2 * a), (0.026 + 2 * a, 0.039 + 2 * a))),
        (0, 0.026 + a, 0.0445 + 2 * a, ((0, 1, 16),),
         ((0.026 + 2 * a, 0.0315 + 2 * a + b), (0.039 + 2 * a, 0.0445 + 2 * a))),
        (0, 0.039 + 2 * a, 0.05 + 2 * a + b, ((1, 1, 16),),
         ((0.039 + 2 * a, 0.0445 + 2 * a + b), (0.0445 + 2 * a + b, 0.05 + 2 * a + b))),
    ]
    assert rounded(sorted(res.step_log, key=lambda s: (s[1], s[2]))) == rounded(expected)
    np.testing.assert_allclose(res.first_token, [0.026 + a, 0.039 + 2 * a], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.0445 + 2 * a, 0.05 + 2 * a + b], atol=1e-12)
    assert (res.status == FINISHED).all()
    s = summarize(res)
    assert s["gpus"] == 2 and s["simulated"]["pools"]["both"]["pp"] == 2
    assert s["cost_source"].endswith("; 2 pipeline stages")


def test_lone_request_ttft_grows_by_the_stage_send() -> None:
    # One request through an empty pipeline: the stages' compute adds up to the whole
    # step, so pp=2 adds exactly one send of the prompt's activations (Llama-3-8B: 2 x
    # 4096 bf16 elements a token over one NVLink, 8 µs + 1000 x 16,384 B / 450 GB/s).
    # Both synchronous: a pipeline runs so, and one stage is compared like for like.
    ttft = {}
    for pp in (1, 2):
        sc = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "pp": pp},
                        "serving": {"policy": "chunked", "async_scheduling": False},
                        "workload": {"trace": {"path": "azure_2023_conv"}}})
        res = run_requests(sc, [0.0], [1000], [4], log_steps=False)
        ttft[pp] = res.first_token[0] - res.requests.arrival_s[0]
    assert ttft[2] - ttft[1] == pytest.approx(8e-6 + 1000 * 16384 / 450e9, abs=1e-12)


def decode_rate(res: Any, t0: float, t1: float) -> float:
    """Decode tokens of the micro-batches that left the pipeline in (t0, t1], per second."""
    return sum(len(s[3]) for s in res.step_log if t0 < s[2] <= t1) / (t1 - t0)


def test_saturated_decode_throughput_is_twice_one_stage_less_the_send() -> None:
    # 2 x 64 requests at once, prompt 32, output 300; each micro-batch's token budget
    # admits 64 prompts (64 x 32 tokens), max_num_seqs 128: then two micro-batches of 64
    # decodes each, always in flight.
    # Each stage is busy all the time, so a batch leaves every max-stage seconds: the
    # rate is 64 decodes per slowest stage (send included) - against 64 per whole step
    # on one stage, nearly twice.
    n, prompt = 64, 32
    raw = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm"},
           "serving": {"policy": "chunked", "max_num_seqs": 2 * n,
                       "max_num_batched_tokens": n * prompt, "async_scheduling": False},
           "workload": {"trace": {"path": "azure_2023_conv"}}}
    sc2 = from_dict({**raw, "hardware": {"gpu": "h100-sxm", "pp": 2}})
    res = run_requests(sc2, [0.0] * 2 * n, [prompt] * 2 * n, [300] * 2 * n)
    t0 = res.step_log[4][2]  # both cohorts decoding
    t1 = res.step_log[-3][2]
    stages = StageCost(build_cost(sc2), sc2.model, H100, 1, 2)
    mid = decode_shape(n, n * (prompt + 150))
    closed = n / max(stages.stage_times(mid))
    assert decode_rate(res, t0, t1) == pytest.approx(closed, rel=0.10)
    one = build_cost(from_dict(raw))
    assert closed == pytest.approx(2 * n / (one.step_time(mid) + 2 * stages.transfer_s(n, 0)),
                                   rel=0.10)


def test_pipeline_holds_more_kv_per_replica() -> None:
    model, tp = MODELS["llama-3-70b"], 4
    rotary = model.max_context * model.head_dim * model.act_bytes
    # Stage weights: every shard weight once, the rotary table on each stage.
    assert (stage_weight_bytes(model, tp, 2, 0) + stage_weight_bytes(model, tp, 2, 1)
            == weight_bytes(model, tp) + rotary)
    one = memory_budget(model, H100, tp, 0.9, 16, 8192, 256)
    two = memory_budget(model, H100, tp, 0.9, 16, 8192, 256, pp=2)
    assert two.block_bytes * 2 == one.block_bytes  # 40 of 80 layers' KV per GPU
    assert two.blocks > 2 * one.blocks  # and half the weights: more than twice the tokens
    assert two.summary()["pp"] == 2 and "pp" not in one.summary()


def test_vllm_pipeline_flag_sets_pp() -> None:
    sc = from_dict({"model": "tiny", "vllm": {"pipeline-parallel-size": 2},
                    "cost": {"linear": {"step_s": 0.01}},
                    "workload": {"trace": {"path": "azure_2023_conv"}}})
    assert sc.hardware.pp == 2


BAD = {
    "below_one": ("hardware: {pp: 0}", ["hardware.pp", "got 0", "at least 1"]),
    "over_layers": ("hardware: {pp: 3}", ["hardware.pp", "got 3", "2 layers", "at most 2"]),
    "across_nodes": ("hardware: {pp: 2, tp: 16}",
                     ["hardware.pp", "tp=16", "one node of 8", "tp must divide 8"]),
    "policy": ("hardware: {pp: 2}\nserving: {policy: continuous}",
               ["hardware.pp", "'continuous'", "policy chunked"]),
    "vllm_flag": ("vllm: {pipeline_parallel_size: 0}", ["hardware.pp", "got 0"]),
    "speculative": ("hardware: {pp: 2}\nserving: {speculative: {method: ngram, num_tokens: 2,"
                    " acceptance: {rate: 0.5}}}",
                    ["hardware.pp", "serving.speculative", "without speculative"]),
    "kv_offload": ("hardware: {pp: 2}\nserving: {prefix_caching: true, kv_offload: "
                   "{cpu_gb: 1}}", ["hardware.pp", "serving.kv_offload", "without kv offload"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_pipeline_is_one_clear_line(case: str, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    text, needles = BAD[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(f"model: tiny\n{text}\nworkload: {{trace: {{path: azure_2023_conv}}}}\n")
    rc = main(["simulate", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err and str(path) in err
    for needle in needles:
        assert needle in err, err


def test_fault_empties_the_pipeline() -> None:
    # Replica 0 fails at 20 ms with micro-batches in flight: their requests are lost and
    # retried on replica 1; replica 0's stages restart empty once repaired.
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 16}, hardware={"pp": 2},
                       cluster={"replicas": 2},
                       faults={"outages": [{"replica": 0, "at_s": 0.02, "duration_s": 0.5}],
                               "detection_s": 0.05})
    res = run_both_ways(sc, [0.0, 0.0, 0.001, 1.0], [16, 16, 16, 8], [3, 2, 2, 2])
    assert (res.status == FINISHED).all()
    assert res.retries.tolist()[:2] == [1, 0] and res.replica.tolist()[3] == 0


EXAMPLES = int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40"))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pp=st.integers(2, 3),
       blocks=st.integers(8, 40), seqs=st.integers(1, 6), budget=st.sampled_from([8, 16, 64]),
       reqs=st.lists(st.tuples(st.sampled_from([0.0, 0.001, 0.02]), st.integers(1, 40),
                               st.integers(1, 12)), min_size=1, max_size=14))
def test_pipeline_invariants(pp: int, blocks: int, seqs: int, budget: int,
                             reqs: list[Any]) -> None:
    # Tiny with 3 layers, so that pp=3 splits it.
    sc = tiny_scenario(model={"preset": "tiny", "layers": 3}, hardware={"pp": pp},
                       serving={"policy": "chunked", "num_kv_blocks": blocks,
                                "max_num_seqs": seqs, "token_budget": min(budget, 64),
                                "max_num_batched_tokens": 64})
    gaps, prompts, outputs = (list(x) for x in zip(*reqs, strict=True))
    req = Requests(np.cumsum(gaps), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    runs = [Engine(sc, req, build_cost(sc), np.random.default_rng(0), log_steps=True,
                   lazy_decodes=lazy) for lazy in (True, False)]
    res = [e.run() for e in runs]
    assert res[0].step_log == res[1].step_log  # decode sets per slot change nothing
    np.testing.assert_array_equal(res[0].finish, res[1].finish)
    log = res[0].step_log
    assert set(res[0].status.tolist()) <= {FINISHED, REJECTED}
    rep = runs[0].replicas[0]
    assert rep.kv.in_use == 0 and rep.kv.available == rep.kv.total  # cached blocks are free
    assert not rep.running and rep.in_flight == 0
    generated = [0] * len(prompts)
    for k in range(pp):  # each stage takes micro-batches one at a time, in order
        spans = [s[4][k] for s in log]
        assert all(b0 <= b1 + 1e-12 and e0 <= b1 + 1e-12
                   for (b0, e0), (b1, _) in zip(spans, spans[1:], strict=False))
    for i, s in enumerate(log):
        assert s[1] <= s[4][0][0] and s[4][-1][1] == s[2]
        live = [t for t in log[:i] if t[2] > s[1]]  # batches in flight when it was scheduled
        assert len(live) < pp
        ids = {e[0] for e in s[3]}
        assert not ids & {e[0] for t in live for e in t[3]}  # never in two at once
        assert len(s[3]) + sum(len(t[3]) for t in live) <= seqs
        for rid, new, ctx in s[3]:
            if ctx + new == prompts[rid] + generated[rid]:
                generated[rid] += 1
    done = res[0].status == FINISHED
    assert [g for g, d in zip(generated, done, strict=True) if d] == \
        [o for o, d in zip(outputs, done, strict=True) if d]


def test_capacity_counts_every_stage_gpu() -> None:
    from sim.report.slospec import parse_slos
    from sim.study.capacity import Config, run_capacity
    from sim.study.pointrun import PointCache
    from sim.study.ratesearch import Search
    from sim.study.sweeppoint import read_raw

    md1 = Path(__file__).resolve().parents[1] / "scenarios" / "capacity-md1.yaml"
    raw = read_raw(md1, ["hardware.pp=2", "serving.policy=chunked"])
    s = Search(raw, str(md1), md1.parent, parse_slos(["ttft_mean=0.05"]), [0], PointCache(None))
    assert s.pp == 2
    assert Config("chunked", 3, 1, True, {}, s.pp).gpus == 6
    # Without candidate stage counts, the search keeps the scenario's own two stages.
    res = run_capacity(s, ["chunked"], [1], start=20.0, tol=0.2)
    assert [m.pp for m in res.max_rates] == [2] and {r["pp"] for r in res.search} == {2}


def test_measured_profile_split_adds_up_to_its_step() -> None:
    sc = from_dict({"model": "llama-3-8b", "cost": "measured",
                    "serving": {"async_scheduling": False},
                    "workload": {"trace": {"path": "azure_2023_conv"}}})
    prof = build_cost(sc)
    for shape in (shape_of([(1000, 0)]), decode_shape(64, 64 * 500),
                  shape_of([(1, 300), (1, 40), (512, 100)])):
        layer, last, shared = prof.stage_split(shape)
        assert last > 0 and shared > 0 and layer > last
        assert layer + last + shared == pytest.approx(prof.step_time(shape), rel=1e-12)


@pytest.mark.parametrize("pp, blocks, seqs, budget, reqs", [
    # Two long prompts that the 12 blocks cannot hold together: each came back from a
    # micro-batch ahead of the other and preempted it, for ever, before preemption
    # picked the newest by admission.
    (3, 12, 5, 16, [(0.001, 34, 1), (0.02, 38, 2), (0.0, 37, 9), (0.0, 7, 6),
                    (0.001, 24, 9), (0.0, 24, 10), (0.0, 32, 11)]),
    # The newest yielding while an older one sat behind it left nothing scheduled.
    (2, 12, 3, 8, [(0.001, 31, 11), (0.001, 14, 2), (0.001, 2, 7), (0.001, 39, 1),
                   (0.02, 29, 5), (0.02, 15, 10), (0.0, 21, 1), (0.0, 2, 11)]),
])
def test_a_pipeline_under_kv_pressure_finishes(pp: int, blocks: int, seqs: int, budget: int,
                                               reqs: list[Any]) -> None:
    sc = tiny_scenario(model={"preset": "tiny", "layers": 3}, hardware={"pp": pp},
                       serving={"policy": "chunked", "num_kv_blocks": blocks,
                                "max_num_seqs": seqs, "token_budget": budget,
                                "max_num_batched_tokens": 64})
    gaps, prompts, outputs = (list(x) for x in zip(*reqs, strict=True))
    req = Requests(np.cumsum(gaps), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    for lazy in (True, False):
        res = Engine(sc, req, build_cost(sc), np.random.default_rng(0),
                     lazy_decodes=lazy).run()
        assert (res.status == FINISHED).all()  # every one fits the cache alone
        assert res.preemptions.sum() > 0  # under pressure all the same


def general_path(fast: bool) -> Any:
    """``fast``: the pipeline as it is; else every micro-batch with its own SimPy event
    and every batch the policy's (no early delivery, no relayed decode set)."""
    from contextlib import ExitStack
    from unittest import mock

    from sim.core.pipeline import Pipeline

    stack = ExitStack()
    if not fast:
        stack.enter_context(mock.patch.object(Pipeline, "_limits",
                                              lambda self: (-np.inf, -np.inf)))
        stack.enter_context(mock.patch.object(Pipeline, "_relay", lambda self, f, now: False))
    return stack


def same_both_paths(sc: Any, req: Requests) -> list[Any]:
    """Run ``sc`` on ``req`` with the fast paths and without (and fast without a step
    log); assert every output the same, to the bit: per-request CSV, summary, step log,
    end time, replica totals."""
    import json

    from sim.report.outputs import requests_csv

    runs = []
    for fast, log in ((True, True), (False, True), (True, False)):
        with general_path(fast):
            runs.append(Engine(sc, req, build_cost(sc), np.random.default_rng(0),
                               log_steps=log).run())
    a, b, c = runs  # c: without a step log, which takes shorter paths
    assert a.end_s == c.end_s
    assert requests_csv(a) == requests_csv(b) == requests_csv(c)
    assert json.dumps(summarize(a)) == json.dumps(summarize(b)) == json.dumps(summarize(c))
    assert a.step_log == b.step_log and a.end_s == b.end_s
    fields = type(a.replica_stats[0]).__slots__
    assert [[getattr(s, k) for k in fields] for s in a.replica_stats] == \
        [[getattr(s, k) for k in fields] for s in b.replica_stats]
    return runs


def test_fast_paths_change_nothing_on_a_busy_replica() -> None:
    # Llama-3-8B, 400 Azure conversations at 17 req/s on a 2-stage replica (roofline):
    # most micro-batches are a decode set alone, delivered without an event and sent on
    # without the policy; the outputs match the general path's to the bit.
    from sim.core.pipeline import Pipeline

    sc = from_dict({"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "pp": 2},
                    "serving": {"policy": "chunked"},
                    "workload": {"arrivals": {"process": "poisson", "rate": 17.0},
                                 "lengths": {"empirical": "azure_2023_conv"},
                                 "num_requests": 400, "seed": 3}})
    from sim.workload.build import build_requests

    req = build_requests(sc.workload, None, np.random.default_rng(0), sc.source)
    relayed = [0]
    relay = Pipeline._relay

    def counting(self: Pipeline, f: Any, now: float) -> bool:
        done = relay(self, f, now)
        relayed[0] += done
        return done

    from unittest import mock

    with mock.patch.object(Pipeline, "_relay", counting):
        fast = Engine(sc, req, build_cost(sc), np.random.default_rng(0)).run()
    assert relayed[0] > 0.5 * fast.replica_stats[0].iterations
    runs = same_both_paths(sc, req)
    assert runs[0].end_s == fast.end_s


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(pp=st.integers(2, 3), blocks=st.integers(8, 40), seqs=st.integers(1, 6),
       budget=st.sampled_from([8, 16, 64]),
       horizon=st.sampled_from([None, 0.05, 0.2]),
       reqs=st.lists(st.tuples(st.sampled_from([0.0, 0.001, 0.02, 0.3]), st.integers(1, 40),
                               st.integers(1, 30)), min_size=1, max_size=14))
def test_fast_paths_change_nothing(pp: int, blocks: int, seqs: int, budget: int,
                                   horizon: float | None, reqs: list[Any]) -> None:
    # Random arrivals (some after idle spells), KV pressure and horizons: the outputs
    # with early deliveries and relayed decode sets equal the general path's.
    sc = tiny_scenario(model={"preset": "tiny", "layers": 3}, hardware={"pp": pp},
                       serving={"policy": "chunked", "num_kv_blocks": blocks,
                                "max_num_seqs": seqs, "token_budget": min(budget, 64),
                                "max_num_batched_tokens": 64},
                       **({} if horizon is None else {"horizon_s": horizon}))
    gaps, prompts, outputs = (list(x) for x in zip(*reqs, strict=True))
    req = Requests(np.cumsum(gaps), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    same_both_paths(sc, req)
