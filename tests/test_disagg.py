"""Disaggregated prefill/decode: hand-worked timings, the KV link, and bad layouts.

Linear cost 10 ms per step + 1 ms per new token, block size 4. The tiny model's KV is
2048 B per token, so an 8-token prompt moves 16384 B; over a 2.048 MB/s link that is
8 ms, plus 2 ms latency.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_requests, tiny_scenario

from sim.core.request import FINISHED, REJECTED
from sim.errors import ServesimError

LINK = {"kind": "pcie", "bandwidth_gb_s": 0.002048, "latency_s": 0.002}


def steps(res):
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def disagg(**pools):
    return tiny_scenario(serving={"policy": "disaggregated"},
                         disaggregated={"link": LINK, **pools})


def test_prefill_then_transfer_then_decode():
    # Replica 0 prefills A and B together and emits both first tokens at 26 ms. The
    # link sends A's KV 26-34 ms (lands 36), then B's 34-42 ms (lands 44). Decode
    # replica 1 starts A at 36 ms; B joins at A's next iteration boundary (47 ms).
    res = run_requests(disagg(), [0.0, 0.0], [8, 8], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0))),
        (1, 0.036, 0.047, ((0, 1, 8),)),
        (1, 0.047, 0.059, ((0, 1, 9), (1, 1, 8))),
    ]
    np.testing.assert_allclose(res.first_token, [0.026, 0.026], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.059, 0.059], atol=1e-12)
    assert res.replica.tolist() == [1, 1]
    assert res.prefill_replica is not None and res.prefill_replica.tolist() == [0, 0]
    # TPOT includes the transfer wait: B's 2nd token comes 33 ms after its 1st.
    assert res.itl.max == pytest.approx(0.033, rel=res.itl.rel_accuracy)


def test_decode_side_admits_only_what_its_kv_holds():
    # The decode replica has 3 blocks: A holds all of them, so B (landed at 44 ms)
    # waits for A to finish before it is admitted.
    res = run_requests(disagg(decode={"num_kv_blocks": 3}), [0.0, 0.0], [8, 8], [3, 2])
    assert steps(res)[1:] == [
        (1, 0.036, 0.047, ((0, 1, 8),)),
        (1, 0.047, 0.058, ((0, 1, 9),)),
        (1, 0.058, 0.069, ((1, 1, 8),)),
    ]


def test_single_token_requests_never_leave_the_prefill_pool():
    res = run_requests(disagg(), [0.0], [8], [1])
    assert steps(res) == [(0, 0.0, 0.018, ((0, 8, 0),))]
    assert res.replica.tolist() == [0] and res.status[0] == FINISHED


def test_pools_number_prefill_replicas_first_and_route_separately():
    sc = disagg(prefill={"replicas": 2}, decode={"replicas": 3, "router": "round_robin"})
    res = run_requests(sc, [0.0] * 4, [8] * 4, [2] * 4)
    assert res.prefill_replica.tolist() == [0, 1, 0, 1]
    # Replica 0 (A, C) hands off before replica 1 (B, D): decode replicas 2, 3, 4, 2.
    assert res.replica.tolist() == [2, 4, 3, 2]
    assert (res.status == FINISHED).all()


def test_chunked_prefill_pool():
    sc = disagg(prefill={"policy": "chunked", "token_budget": 8})
    res = run_requests(sc, [0.0], [12], [2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.032, ((0, 4, 8),)),
        # 12 tokens x 2048 B = 12 ms on the link + 2 ms: lands at 46 ms.
        (1, 0.046, 0.057, ((0, 1, 12),)),
    ]


def test_link_kinds_have_nominal_figures():
    from sim.config.disagg import LinkConfig

    assert LinkConfig().bandwidth == 450e9
    assert LinkConfig(kind="infiniband").bandwidth < LinkConfig(kind="pcie").bandwidth
    assert LinkConfig(kind="pcie", bandwidth_gb_s=10).bandwidth == 10e9


def test_transfers_queue_on_one_link():
    from sim.config.disagg import LinkConfig
    from sim.core.disagg import Link

    link = Link(LinkConfig(bandwidth_gb_s=1.0, latency_s=0.5))
    assert link.send(0.0, 10**9) == pytest.approx(1.5)
    assert link.send(0.2, 10**9) == pytest.approx(2.5)  # waits for the first to finish
    assert link.send(5.0, 0) == pytest.approx(5.5)


def test_request_larger_than_the_decode_cache_is_rejected_with_its_reason():
    res = run_requests(disagg(decode={"num_kv_blocks": 3}), [0.0, 0.0], [8, 8], [6, 2])
    assert res.status.tolist() == [REJECTED, FINISHED]
    assert res.reason[0] == "decode_exceeds_kv_capacity"


@pytest.mark.parametrize("section, where", [
    ({"prefill": {"replicas": 0}}, "disaggregated.prefill.replicas"),
    ({"link": {"bandwidth_gb_s": 0}}, "disaggregated.link.bandwidth_gb_s"),
    # A figure in bytes/s where GB/s is meant, and a link too slow for the clock.
    ({"link": {"bandwidth_gb_s": 50e9}}, "disaggregated.link.bandwidth_gb_s"),
    ({"link": {"bandwidth_gb_s": 1e-300}}, "disaggregated.link.bandwidth_gb_s"),
    ({"link": {"kind": "ethernet"}}, "disaggregated.link.kind"),
    ({"decode": {"policy": "static"}}, "disaggregated.decode.policy"),
    ({"decode": {"gpu": "h900"}}, "disaggregated.decode.gpu"),
    ({"prefill": {"policy": "chunked", "token_budget": 2}}, "disaggregated.prefill.token_budget"),
    ({"pools": {}}, "disaggregated.pools"),
])
def test_bad_layouts_are_one_line_errors_naming_the_key(section, where):
    with pytest.raises(ServesimError) as err:
        tiny_scenario(serving={"policy": "disaggregated"}, disaggregated=section)
    assert err.value.where == where
    assert "\n" not in str(err.value)


def test_receive_interval_with_pools_is_refused():
    """The interval counts decode steps, which a prefill pool never runs, and the decode
    pool's intake is not gated: a run with 30 had been identical to one with 1."""
    with pytest.raises(ServesimError, match=r"^<.*serving.scheduler_recv_interval: got 30 "
                                            r"with policy 'disaggregated'"):
        tiny_scenario(serving={"policy": "disaggregated", "scheduler_recv_interval": 30})


def test_model_that_does_not_fit_a_pool_names_the_pool():
    with pytest.raises(ServesimError) as err:
        tiny_scenario(model="llama-3-70b", cost="roofline", serving={"policy": "disaggregated"},
                      hardware={"gpu": "h100-sxm", "tp": 4},
                      disaggregated={"prefill": {"tp": 1}})
    assert err.value.where == "disaggregated.prefill"
    assert "does not fit" in str(err.value)


def test_bad_serving_options_are_errors():
    with pytest.raises(ServesimError, match="at least block_size"):
        tiny_scenario(serving={"policy": "chunked", "token_budget": 2})
    with pytest.raises(ServesimError, match="at most max_num_batched_tokens"):
        tiny_scenario(serving={"policy": "chunked", "token_budget": 1024})
    with pytest.raises(ServesimError, match="preemption"):
        tiny_scenario(serving={"preemption": "drop"})
    with pytest.raises(ServesimError, match="router"):
        tiny_scenario(cluster={"router": "fastest"})


def test_each_prefill_gpu_sends_its_own_shard():
    # tp 2 on both sides: each GPU holds 1 of the tiny model's 2 KV heads, 1024 B per
    # token, and sends it over its own link while the other GPU sends the other head:
    # 8 tokens x 1024 B / 2.048 MB/s = 4 ms (not 8192 B x 2 over one link, 8 ms), + 2 ms.
    res = run_requests(disagg(prefill={"tp": 2}, decode={"tp": 2}), [0.0], [8], [2])
    assert steps(res) == [(0, 0.0, 0.018, ((0, 8, 0),)), (1, 0.024, 0.035, ((0, 1, 8),))]
    # A decode replica of tp 1 receives both heads on its one GPU: 2048 B a token, 8 ms.
    res = run_requests(disagg(prefill={"tp": 2}, decode={"tp": 1}), [0.0], [8], [2])
    assert steps(res)[1] == (1, 0.028, 0.039, ((0, 1, 8),))


def test_transfer_leaves_the_node_when_a_pool_spans_nodes():
    from sim.config.disagg import pools, transfer_bytes_per_token, transfer_link
    from sim.config.scenario import from_dict

    raw = {"model": "llama-3-70b", "serving": {"policy": "disaggregated"},
           "workload": {"arrivals": {"process": "poisson", "rate": 1.0},
                        "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                    "output": {"dist": "fixed", "value": 2}},
                        "num_requests": 1},
           "disaggregated": {"prefill": {"tp": 16}, "decode": {"tp": 8}}}
    sc = from_dict(raw)
    link = transfer_link(sc, *pools(sc))
    # 16 H100s are two nodes: no NVLink reaches, so the 400 Gb/s NIC of each GPU does.
    assert (link.bandwidth, link.latency) == (50e9, 20e-6)
    # Decode tp 8 holds 1 of 8 KV heads per GPU (80 x 2 x 128 x 2 B = 40960 B a token);
    # prefill tp 16 holds 1 replicated head per GPU (also 40960 B): the larger is sent.
    assert transfer_bytes_per_token(sc.model, *pools(sc)) == 40960
    within = from_dict({**raw, "disaggregated": {"prefill": {"tp": 8}, "decode": {"tp": 8}}})
    assert transfer_link(within, *pools(within)).bandwidth == 450e9
    given = from_dict({**raw, "disaggregated": {**raw["disaggregated"],
                                                "link": {"bandwidth_gb_s": 100}}})
    assert transfer_link(given, *pools(given)).bandwidth == 100e9


def test_horizon_in_a_disaggregated_run_counts_backlog_and_not_arrived_apart():
    from sim.core.request import NOT_ARRIVED, UNFINISHED
    from sim.report.summary import summarize

    # Prefill replica 0: A 0-18 ms, B (sent at 10 ms) 18-36 ms. A's KV lands at 28 ms and
    # decodes 28-39-50 ms: finished. B's lands at 46 ms and joins at 50 ms; its decode
    # ends at 61 ms, past the horizon (55 ms): unfinished. C is due at 60 ms: never arrived.
    sc = tiny_scenario(serving={"policy": "disaggregated"}, disaggregated={"link": LINK},
                       horizon_s=0.055)
    res = run_requests(sc, [0.0, 0.01, 0.06], [8, 8, 8], [3, 2, 2])
    assert steps(res)[-1] == (1, 0.05, 0.061, ((1, 1, 8),))
    assert res.status.tolist() == [FINISHED, UNFINISHED, NOT_ARRIVED]
    s = summarize(res)
    assert (s["requests"]["unfinished"], s["requests"]["not_arrived"]) == (1, 1)
    assert s["throughput"]["slo_attainment"] == 0.5  # no SLO set: A meets it, B is cut
    assert s["saturation"]["offered_rps"] == pytest.approx(1 / 0.01)


PINNED = {"name": "pinned", "model": "tiny",
          "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
          "serving": {"policy": "disaggregated", "block_size": 4},
          "disaggregated": {"prefill": {"replicas": 1, "gpu": "h100-sxm", "tp": 1},
                            "decode": {"replicas": 2, "gpu": "h100-sxm", "tp": 1},
                            "link": LINK},
          "workload": {"arrivals": {"process": "poisson", "rate": 20},
                       "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                   "output": {"dist": "fixed", "value": 3}},
                       "num_requests": 20, "seed": 1}}


@pytest.mark.parametrize(("args", "message"), [
    (["compare", "--gpus", "h200,b200"],
     "--gpus: got h200,b200: the disaggregated pools set their own gpu "
     "(disaggregated.prefill.gpu: h100-sxm, disaggregated.decode.gpu: h100-sxm), so the flag "
     "would change no pool"),
    (["sweep", "--rates", "5", "--tp", "1,2"],
     "--tp: got 1,2: the disaggregated pools set their own tp"),
    (["sweep", "--rates", "5", "--replicas", "1,2"],
     "--replicas: got 1,2: the disaggregated pools set their own replicas "
     "(disaggregated.prefill.replicas: 1, disaggregated.decode.replicas: 2)"),
    (["capacity", "--slo", "ttft_p99=1", "--tp", "1,2"],
     "--tp: got 1,2: the disaggregated pools set their own tp"),
    (["capacity", "--slo", "ttft_p99=1", "--target-rate", "50"],
     "--target-rate: got 50.0: the disaggregated pools set their own replicas"),
])
def test_axes_that_would_change_no_pool_are_refused(tmp_path, capsys, args, message):
    # Every point would run the same pools under another label: a study that lies.
    import yaml

    from sim.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(PINNED))
    cmd, *rest = args
    assert main([cmd, str(path), "--no-plots", "--out", str(tmp_path / "o"), *rest]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    # A pool left to the scenario's value follows the flag: the decode pool's tp here.
    loose = {**PINNED, "disaggregated": {**PINNED["disaggregated"],
                                         "decode": {"replicas": 2, "gpu": "h100-sxm"}}}
    path.write_text(yaml.safe_dump(loose))
    if "--tp" in rest:
        assert main([cmd, str(path), "--no-plots", "--out", str(tmp_path / "o2"), *rest]) == 0


def test_a_chunked_pool_takes_vllm_v1_defaults():
    """A chunked pool is a vLLM v1 server: its GPU's sequence limit and no watermark
    unless the pool or serving sets them (it had taken the disaggregated policy's v0
    defaults, 256 sequences and a 1% watermark); a continuous pool keeps v0's. (The
    tiny scenario's serving sets a 256-token budget, which every pool takes, and a
    watermark, unset here.)"""
    from sim.config.disagg import pools

    unset = {"policy": "disaggregated", "watermark": None}
    sc = tiny_scenario(hardware={"gpu": "h100-sxm"}, serving=unset,
                       disaggregated={"prefill": {"policy": "chunked"},
                                      "decode": {"policy": "continuous"}})
    pre, dec = (p.serving for p in pools(sc))
    assert (pre.policy, pre.max_num_seqs, pre.max_num_batched_tokens, pre.watermark) == \
        ("chunked", 1024, 256, 0.0)
    assert (dec.policy, dec.max_num_seqs, dec.max_num_batched_tokens, dec.watermark) == \
        ("continuous", 256, 256, 0.01)
    # A pool on an A100 gets that GPU's limit; what serving or the pool sets wins.
    sc = tiny_scenario(hardware={"gpu": "h100-sxm"}, serving=unset,
                       disaggregated={"prefill": {"policy": "chunked", "gpu": "a100-80gb"},
                                      "decode": {"policy": "chunked", "watermark": 0.05,
                                                 "max_num_batched_tokens": 128}})
    pre, dec = (p.serving for p in pools(sc))
    assert (pre.max_num_seqs, pre.watermark) == (256, 0.0)
    assert (dec.max_num_seqs, dec.max_num_batched_tokens, dec.watermark) == (1024, 128, 0.05)
    sc = tiny_scenario(hardware={"gpu": "h100-sxm"},
                       serving={"policy": "disaggregated", "max_num_seqs": 64,
                                "watermark": 0.02},
                       disaggregated={"prefill": {"policy": "chunked"}})
    pre, _ = (p.serving for p in pools(sc))
    assert (pre.max_num_seqs, pre.watermark) == (64, 0.02)


def test_a_disaggregated_section_under_another_policy_is_noted() -> None:
    # Without serving.policy: disaggregated the pools are not run: one co-located
    # replica serves, and the summary says the section went unused.
    from sim.core.engine import simulate
    from sim.report.printed import table
    from sim.report.summary import summarize

    sc = tiny_scenario(serving={"policy": "chunked"},
                       disaggregated={"prefill": {"replicas": 2}, "decode": {"replicas": 3}})
    assert sc.notes == ("disaggregated: not used under policy chunked; its pools run under "
                        "serving.policy: disaggregated",)
    res = simulate(sc)
    assert len(res.replica_stats) == 1
    assert "note: disaggregated: not used under policy chunked" in table(summarize(res))
    assert tiny_scenario(serving={"policy": "disaggregated"},
                         disaggregated={"prefill": {"replicas": 2}}).notes == ()


INLINE = {"name": "slowlink", "flops": 989e12, "mem_bw": 3.35e12, "mem_gb": 80,
          "link_bw": 450e9, "host_bw": 55e9, "node_gpus": 8}


@pytest.mark.parametrize("sections, where, got", [
    ({"serving": {"policy": "disaggregated"}, "disaggregated": {"link": {"latency_s": 1e9}}},
     "disaggregated.link.latency_s", "got 1e+09; latency_s is in seconds (for example "
                                     "2e-05, InfiniBand), from 0 to 10"),
    ({"hardware": {"gpu": {**INLINE, "link_latency_s": 1e9}}}, "hardware.gpu.link_latency_s",
     "got 1e+09; link_latency_s is in seconds (for example 8e-06, NVLink), from 0 to 10"),
    ({"hardware": {"gpu": {**INLINE, "net_latency_s": 1e5}}}, "hardware.gpu.net_latency_s",
     "got 100000; net_latency_s is in seconds (for example 2e-05, InfiniBand), from 0 to 10"),
])
def test_link_latencies_past_ten_seconds_are_refused(sections, where, got):
    """A 31-year link had run to nonsense results, or failed after the run naming other
    keys."""
    with pytest.raises(ServesimError) as err:
        tiny_scenario(**sections)
    assert str(err.value).endswith(f"{where}: {got}")


def test_a_prefill_pool_does_not_refuse_a_request_for_its_decode_recompute():
    """A prefill replica emits the first token and hands the request on: it never decodes,
    so never recomputes prompt + output - 1 tokens. Under continuous its pool had refused
    every request whose prompt and output passed its token budget (17 > 12 here); the
    decode pool, which may preempt and recompute, still checks."""
    pools = {"prefill": {"policy": "continuous", "max_num_batched_tokens": 12},
             "decode": {"policy": "chunked"}}
    res = run_requests(disagg(**pools), [0.0], [8], [10])
    assert res.status.tolist() == [FINISHED]
    assert res.prefill_replica is not None and res.prefill_replica.tolist() == [0]
    pools["decode"] = {"policy": "continuous", "max_num_batched_tokens": 12}
    res = run_requests(disagg(**pools), [0.0], [8], [10])
    assert res.status.tolist() == [REJECTED]
    assert res.reason.tolist() == ["decode_recompute_exceeds_max_num_batched_tokens"]
