"""Data-parallel attention: ranks of one replica that share a mixture of experts.

Each rank (``hardware.dp`` of them, ``tp`` GPUs each) schedules its own batch; an
iteration lasts as long as the slowest rank's own work plus the routed experts over every
rank's new tokens, and all ranks run it together (sim/core/dpgroup.py).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import lazy_and_eager, run_requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.core.request import FINISHED, REJECTED
from sim.cost.gpus import GPUS
from sim.cost.memory import weight_bytes
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import decode_shape, shape_of
from sim.errors import ServesimError
from sim.report.printed import table
from sim.report.summary import summarize
from sim.workload.requests import Requests

MOE = MODELS["qwen3-30b-a3b"]
H100 = GPUS["h100-sxm"]


def scenario(serving: dict[str, Any] | None = None, **hardware: Any) -> Any:
    """tiny-moe on two H100 ranks of tp 1 sharing its experts, priced synchronously (no
    async scheduling), vLLM v0's prefill-first policy, a round-robin router; ``serving``
    replaces that policy section."""
    raw = {"model": "tiny-moe", "cost": {"roofline": {}},
           "hardware": {"gpu": "h100-sxm", "tp": 1, "dp": 2, "ep": 2, **hardware},
           "serving": serving or {"policy": "continuous", "async_scheduling": False},
           "cluster": {"router": "round_robin"},
           "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}},
                        "num_requests": 1}}
    return from_dict(raw, "<test>")


def test_two_ranks_step_together_for_the_slowest_plus_the_shared_experts() -> None:
    sc = scenario()
    cost = RooflineCost(MODELS["tiny-moe"], H100, 1, RooflineParams(), ep=2, dp=2)
    res = run_requests(sc, [0.0, 0.0], [8, 24], [3, 3])
    log = sorted(res.step_log or [], key=lambda e: (e[1], e[0]))
    # Three iterations (both prompts, then two decodes), each logged by both ranks.
    assert [e[0] for e in log] == [0, 1, 0, 1, 0, 1]
    start = log[0][1]
    steps = [
        ([(8, 0)], [(24, 0)]),              # each rank prefills its own prompt
        ([(1, 8)], [(1, 24)]),              # then decodes one token a step
        ([(1, 9)], [(1, 25)]),
    ]
    now = start
    for k, (a, b) in enumerate(steps):
        tokens = sum(n for n, _ in a + b)
        dt = max(cost.step_time(shape_of(a)), cost.step_time(shape_of(b))) + \
            cost.experts_time(tokens)
        end = now + dt
        for rank in (0, 1):
            assert log[2 * k + rank][1:3] == (now, end)
        now = end
    # A decode step: the larger context's rank sets the local part.
    assert cost.step_time(decode_shape(1, 24)) > cost.step_time(decode_shape(1, 8))
    np.testing.assert_array_equal(res.finish, [now, now])


def test_an_idle_rank_takes_an_arrival_at_the_groups_next_iteration() -> None:
    sc = scenario()
    # Rank 0 prefills 3,000 tokens from the start; rank 1's request arrives 1 ms later,
    # mid-iteration, and waits for its end (vLLM's idle rank is then running a dummy pass).
    res = run_requests(sc, [0.0, 0.001], [3000, 8], [2, 2])
    log = sorted(res.step_log or [], key=lambda e: (e[1], e[0]))
    first = log[0]
    assert first[0] == 0 and len(first[3]) == 1
    rank1 = [e for e in log if e[0] == 1]
    assert rank1[0][1] == first[2]
    assert res.first_sched[1] == first[2] > 0.001 + sc.cost.roofline.frontend.request_s


def test_requests_reaching_idle_ranks_together_share_their_first_iteration() -> None:
    # Under async scheduling, four prompts reach the idle group at one instant, two a rank
    # (round robin): the group wakes on the first, and every rank reads its whole queue
    # before it schedules, so all four prefill in the first iteration, none held a step.
    sc = scenario(serving={"policy": "chunked", "async_scheduling": True})
    res = run_requests(sc, [0.0] * 4, [8] * 4, [2] * 4)
    log = sorted(res.step_log or [], key=lambda e: (e[1], e[0]))
    assert [(e[0], sorted(x[0] for x in e[3])) for e in log[:2]] == [(0, [0, 2]), (1, [1, 3])]
    assert log[0][1] == log[1][1]
    np.testing.assert_array_equal(res.first_sched, [log[0][1]] * 4)


def test_lazy_and_eager_decodes_give_the_same_run() -> None:
    sc = scenario()
    rng = np.random.default_rng(3)
    n = 60
    req = Requests(np.sort(rng.uniform(0, 2.0, n)), rng.integers(4, 400, n),
                   rng.integers(1, 40, n))
    lazy, eager = lazy_and_eager(sc, req)
    assert lazy.step_log == eager.step_log
    np.testing.assert_array_equal(lazy.finish, eager.finish)
    assert (lazy.status == eager.status).all() and np.isfinite(lazy.finish).all()


def test_a_rank_holds_the_whole_attention_and_its_share_of_the_experts() -> None:
    # Qwen3-30B-A3B: 48 MoE layers of 128 experts, each 3 x 2048 x 768 bf16 weights.
    experts = 48 * 128 * 3 * 2048 * 768 * 2
    assert weight_bytes(MOE, 1) - weight_bytes(MOE, 1, ep=2, dp=2) == experts // 2
    assert weight_bytes(MOE, 1) - weight_bytes(MOE, 1, ep=4, dp=4) == experts * 3 // 4
    # With tp 2 a rank's attention is split as well: ep is then 2 x 2.
    assert weight_bytes(MOE, 2, ep=4, dp=2) == weight_bytes(MOE, 2, ep=2) - experts // 4


def test_experts_time_is_the_routed_experts_and_their_dispatch_by_hand() -> None:
    p = RooflineParams()
    cost = RooflineCost(MOE, H100, 1, p, ep=4, dp=4)
    n = 64
    k, e, h, i, layers = 8, 128, 2048, 768, 48
    flops = layers * k * 3 * h * i * 2 / 4 * n / (H100.flops * p.moe_flops_efficiency)
    touched = 1 - (1 - k / e) ** n
    reads = layers * (e // 4) * 3 * h * i * 2 * touched / (H100.mem_bw * p.bandwidth_efficiency)
    # An all-gather and a reduce-scatter of n tokens' hidden states (bf16) a MoE layer.
    comm = 2 * layers * (H100.link_latency_s + 3 / 4 * n * h * 2 / H100.link_bw)
    assert cost.experts_time(n) == pytest.approx(max(flops, reads) + comm, rel=1e-12)
    # The rank's own step leaves the routed experts out: a decode of one token costs
    # less than the same decode with them (one rank alone, ep 4 inside one replica).
    alone = RooflineCost(MOE, H100, 4, p, ep=4)
    assert cost.step_time(decode_shape(1, 100)) < alone.step_time(decode_shape(1, 100)) + 1


def test_summary_counts_one_replica_of_ranks_and_each_ranks_blocks() -> None:
    raw = {"model": "qwen3-30b-a3b", "cost": {"roofline": {}},
           "hardware": {"gpu": "h100-sxm", "dp": 4, "ep": 4},
           "workload": {"arrivals": {"process": "poisson", "rate": 40.0},
                        "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                    "output": {"dist": "fixed", "value": 32}},
                        "num_requests": 200, "seed": 2}}
    res = simulate(from_dict(raw, "<test>"))
    s = summarize(res)
    assert (s["replicas"], s["data_parallel_ranks"], s["gpus"]) == (1, 4, 4)
    pool = s["simulated"]["pools"]["both"]
    assert pool["dp"] == 4 and len(pool["kv_blocks_per_replica"]) == 4
    text = table(s)
    assert "1 replica(s) of 4 data-parallel ranks on 4 GPU(s)" in text
    assert "blocks/rank" in text and "data-parallel attention dp=4" in text
    assert s["requests"]["finished"] == 200
    # Every rank took a share of the requests (the router balances over ranks).
    assert sorted(set(res.replica.tolist())) == [0, 1, 2, 3]


@pytest.mark.parametrize("change, where, text", [
    ({"hardware": {"gpu": "h100-sxm", "dp": 2, "ep": 2}, "model": "tiny"}, "hardware.dp",
     "is dense"),
    ({"hardware": {"gpu": "h100-sxm", "dp": 2}}, "hardware.ep", "ep must be dp x tp (2)"),
    ({"cost": {"linear": {"step_s": 0.01}}}, "hardware.dp", "use cost: roofline, measured"),
    # No shipped profile prices tiny-moe's ranks: the list of those that ship.
    ({"cost": "measured"}, "cost.measured", "no measured profile for tiny-moe"),
    ({"hardware": {"gpu": "h100-sxm", "dp": 2, "ep": 4, "pp": 2}}, "hardware.dp",
     "without pipeline stages"),
    ({"serving": {"policy": "disaggregated"}}, "hardware.dp", "co-located replicas"),
    ({"serving": {"speculative": {"method": "ngram", "num_tokens": 2,
                                  "acceptance": {"rate": 0.5}}}},
     "hardware.dp", "without speculative decoding"),
    ({"faults": {"failures_per_hour": 1.0}}, "hardware.dp", "without faults"),
])
def test_what_data_parallel_attention_does_not_model_is_one_line(
        change: dict[str, Any], where: str, text: str) -> None:
    raw: dict[str, Any] = {"model": "tiny-moe", "cost": {"roofline": {}},
                           "hardware": {"gpu": "h100-sxm", "dp": 2, "ep": 2},
                           "workload": {"concurrency": 1, "num_requests": 1,
                                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                                    "output": {"dist": "fixed", "value": 2}}}}
    raw.update(change)
    with pytest.raises(ServesimError) as exc:
        from_dict(raw, "s.yaml")
    assert exc.value.where == where and text in exc.value.message


def test_shipped_dp_profile_equals_a_rebuild_and_is_picked() -> None:
    pytest.importorskip("pyarrow")
    from sim.cost.profilefile import PROFILE_DIR, load_profile
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    spec = BuildSpec(MOE, "h100-sxm", "vllm", 1, ep=2, dp=2)
    text = profile_text(build_profile(spec))
    assert "\ndp: 2\n" in text and "\nep: 2\n" in text
    stem = "h100-sxm-qwen3-30b-a3b-tp1-dp2-ep2-vllm"
    assert (PROFILE_DIR / f"{stem}.yaml").read_text() == text
    prof = load_profile(stem)
    knots = prof.experts
    assert knots is not None
    # The knots exactly at their counts, a straight line between, in proportion past.
    assert prof.experts_time(int(knots.xs[3])) == knots.ys[3]
    mid = (knots.xs[3] + knots.xs[4]) / 2
    assert min(knots.ys[3:5]) <= prof.experts_time(int(mid)) <= max(knots.ys[3:5])
    assert prof.experts_time(int(2 * knots.xs[-1])) == pytest.approx(2 * knots.ys[-1])
    # cost: measured picks it by dp; another dp lists what ships.
    raw = {"model": "qwen3-30b-a3b", "cost": "measured",
           "hardware": {"gpu": "h100-sxm", "dp": 2, "ep": 2},
           "workload": {"concurrency": 4, "num_requests": 12,
                        "lengths": {"prompt": {"dist": "fixed", "value": 256},
                                    "output": {"dist": "fixed", "value": 8}}}}
    s = summarize(simulate(from_dict(raw, "<test>")))
    assert "data-parallel attention dp=2" in s["cost_source"]
    assert s["requests"]["finished"] == 12
    raw["hardware"] = {"gpu": "h100-sxm", "dp": 8, "ep": 8}
    with pytest.raises(ServesimError, match="tp 1 dp 2 ep 2, vllm tp 1 dp 4 ep 4") as exc:
        from_dict(raw, "<test>")
    assert exc.value.where == "cost.measured"


def test_a_profile_without_its_shared_experts_is_refused(tmp_path: Any) -> None:
    import yaml

    from sim.cost.profilefile import PROFILE_DIR, load_profile

    data = yaml.safe_load((PROFILE_DIR / "h100-sxm-qwen3-30b-a3b-tp1-dp2-ep2-vllm.yaml")
                          .read_text())
    del data["components"]["experts"]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ServesimError, match="prices their shared experts") as exc:
        load_profile(str(path))
    assert exc.value.where == "dp"


def test_silicon_rows_of_data_parallel_attention(tmp_path: Any) -> None:
    from conftest import silicon_csv

    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrecipes import scenario_raw
    from sim.validate.siliconrows import read_rows

    # InferenceX's vLLM MiniMax-M2.5 runs labelled dp-attn on 2 B200s: batch_size is one
    # rank's clients. Its NVFP4 script launches 2 ranks of one GPU; its FP8 script
    # ignores the label and runs tp 2 with expert parallelism. TensorRT-LLM's
    # attention-data-parallel rows stay out.
    path = silicon_csv(tmp_path, [
        "a,db-dump,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp4,agg,1024,1024,64,2,1,2,"
        "189,16.9,nvfp4,1,4",
        "b,db-dump,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,8,2,1,2,"
        "99,13.7,fp8_block,1,4",
        "c,db-dump,trtllm,1.1.0,deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,1024,1024,4,1,1,8,"
        "300,20,fp8_block,1,8"], ("gemm_quant_mode", "moe_tp_size", "moe_ep_size"))
    a, b, c = (classify(r) for r in read_rows(path))
    assert isinstance(a, Case) and (a.dp, a.ep, a.tp, a.row.concurrency) == (2, 2, 1, 128)
    assert a.expert_dtype == "nvfp4"
    hw = scenario_raw(a)["hardware"]
    assert (hw["tp"], hw["dp"], hw["ep"]) == (1, 2, 2)
    assert scenario_raw(a)["workload"]["concurrency"] == 128
    assert isinstance(b, Case) and (b.dp, b.ep, b.tp, b.row.concurrency) == (1, 2, 2, 16)
    assert "dp" not in scenario_raw(b)["hardware"]
    assert c == "pipeline (1) or attention-data (8) parallelism"


def test_latent_attention_ranks_each_cache_only_their_own_tokens() -> None:
    from sim.cost.memory import memory_budget

    ds, h200 = MODELS["deepseek-v3"], GPUS["h200"]
    tp8 = memory_budget(ds, h200, 8, 0.9, 16, 8192, 1024)
    dp8 = memory_budget(ds, h200, 1, 0.9, 16, 8192, 1024, ep=8, dp=8)
    # A token's whole latent on every GPU either way (one KV head a GPU under tp) ...
    assert dp8.block_bytes == tp8.block_bytes
    # ... but under tp all 8 GPUs cache the same tokens, while each rank caches its own:
    # the group holds 8 ranks' blocks, each GPU with less room beside its whole attention.
    assert dp8.weights > tp8.weights and dp8.blocks < tp8.blocks < 8 * dp8.blocks
    raw = {"model": "deepseek-v3", "cost": "measured",
           "hardware": {"gpu": "h200", "tp": 1, "dp": 8, "ep": 8, "memory_utilization": 0.9},
           "workload": {"concurrency": 16, "num_requests": 32,
                        "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                    "output": {"dist": "fixed", "value": 4}}}}
    s = summarize(simulate(from_dict(raw, "<test>")))
    assert s["kv"]["blocks_per_replica"] == [dp8.blocks] * 8


def test_a_pasted_data_parallel_flag_set_runs() -> None:
    flags = {"data-parallel-size": 4, "tensor-parallel-size": 1,
             "enable-expert-parallel": True, "all2all-backend": "allgather_reducescatter",
             "data-parallel-backend": "mp", "data-parallel-rpc-port": 13345}
    raw: dict[str, Any] = {"model": "qwen3-30b-a3b", "cost": {"roofline": {}},
                           "hardware": {"gpu": "h100-sxm"}, "vllm": flags,
                           "workload": {"concurrency": 8, "num_requests": 16,
                                        "lengths": {"prompt": {"dist": "fixed", "value": 64},
                                                    "output": {"dist": "fixed", "value": 4}}}}
    hw = from_dict(raw, "<test>").hardware
    assert (hw.tp, hw.dp, hw.ep) == (1, 4, 4)
    raw["vllm"] = {**flags, "all2all-backend": "deepep_low_latency"}
    with pytest.raises(ServesimError, match="models only allgather_reducescatter") as exc:
        from_dict(raw, "<test>")
    assert exc.value.where == "vllm.all2all-backend"


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(("continuous", "chunked")), st.sampled_from((2, 4)),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 60), st.integers(1, 30)),
                min_size=1, max_size=16),
       st.integers(12, 60), st.booleans())
def test_ranks_share_every_iteration_and_lose_no_request(
        policy: str, dp: int, rows: list[tuple], blocks: int, swap: bool) -> None:
    # Small per-rank KV caches force preemptions inside a group.
    rows = sorted(rows)
    sc = from_dict({"model": "tiny-moe", "cost": {"roofline": {}},
                    "hardware": {"gpu": "h100-sxm", "dp": dp, "ep": dp},
                    "serving": {"policy": policy, "block_size": 4, "num_gpu_blocks": blocks,
                                "max_num_seqs": 4,
                                "preemption": "swap" if swap else "recompute"},
                    "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                                 "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                             "output": {"dist": "fixed", "value": 2}},
                                 "num_requests": 1}}, "<fuzz>")
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert lazy.step_log == eager.step_log
    np.testing.assert_array_equal(lazy.finish, eager.finish)
    log = lazy.step_log or []
    # Every iteration's ranks start and end together: one end per start time ...
    ends: dict[float, float] = {}
    for _, start, end, _ in log:
        assert ends.setdefault(start, end) == end
    # ... and a rank never runs two iterations at once.
    by_rank: dict[int, list[tuple[float, float]]] = {}
    for rank, start, end, _ in log:
        by_rank.setdefault(rank, []).append((start, end))
    for spans in by_rank.values():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))
    # Every request ends: finished, or refused as too long for a rank's cache.
    done = lazy.status == FINISHED
    assert np.isfinite(lazy.finish[done]).all()
    assert set(lazy.reason[~done].tolist()) <= {"exceeds_kv_capacity"}
    assert ((lazy.status == FINISHED) | (lazy.status == REJECTED)).all()


def test_profile_builds_of_ranks_refused_in_one_line() -> None:
    pytest.importorskip("pyarrow")
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    with pytest.raises(ServesimError, match="is dense") as exc:
        build_profile(BuildSpec(MODELS["llama-3-8b"], "h100-sxm", "vllm", 1, ep=2, dp=2))
    assert exc.value.where == "--dp"
    # 16 ranks of one GPU: the collective tables time NCCL over 2, 4 and 8 GPUs only.
    with pytest.raises(ServesimError, match="span 16 GPUs") as exc:
        build_profile(BuildSpec(MOE, "h100-sxm", "vllm", 1, ep=16, dp=16))
    assert exc.value.where == "--dp"
