"""Speculative decoding (serving.speculative): the acceptance arithmetic, verifies run
request by request equal to the decode set's aggregate, hand-worked step times and
TPOT, KV slots for the drafted tokens, and one clear line for each bad setting."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import assert_equivalent, chunk_budget, lazy_and_eager, run_requests, tiny_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.cli import main
from sim.config.speculative import (
    AcceptanceConfig,
    SpeculativeConfig,
    drafter_model,
    mean_for_rate,
    rate_for_mean,
)
from sim.core.engine import simulate
from sim.core.request import Request
from sim.core.speculation import Speculation
from sim.cost.drafter import Drafter
from sim.cost.gpus import gpu
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape, batch_shape
from sim.errors import ServesimError
from sim.report.metrics import per_request
from sim.report.outputs import requests_csv
from sim.report.printed import table
from sim.report.summary import summarize
from sim.workload.requests import Requests


def spec_scenario(policy: str = "continuous", method: str = "ngram", k: int = 3,
                  acceptance: dict[str, Any] | None = None,
                  workload: dict[str, Any] | None = None, **serving: Any) -> Any:
    """The tiny model under a linear cost, speculating with ``method`` (with ``mtp``, a
    tiny model whose checkpoint ships one MTP module)."""
    spec = {"method": method, "num_tokens": k, "acceptance": acceptance or {"rate": 0.6}}
    more: dict[str, Any] = {} if workload is None else {"workload": workload}
    if method == "mtp":
        more["model"] = {"preset": "tiny", "mtp_layers": 1}
    return tiny_scenario(serving={"policy": policy, "speculative": spec, **serving}, **more)


# -- acceptance ---------------------------------------------------------------------------
@pytest.mark.parametrize(("a", "k"), [(0.0, 1), (0.5, 1), (0.6, 3), (0.8, 5), (1.0, 4)])
def test_rate_gives_the_closed_form_mean(a: float, k: int) -> None:
    acc = AcceptanceConfig(rate=a)
    probs = acc.emit_probabilities(k)
    assert sum(probs) == pytest.approx(1.0)
    expected = float(k + 1) if a == 1 else (1 - a ** (k + 1)) / (1 - a)
    assert acc.mean_tokens(k) == pytest.approx(expected, rel=1e-12)
    assert mean_for_rate(a, k) == pytest.approx(expected, rel=1e-12)


def test_mean_length_solves_for_the_rate() -> None:
    # (1 - 0.6^4) / 0.4 = 2.176 at k = 3; solving back gives 0.6.
    assert rate_for_mean(2.176, 3) == pytest.approx(0.6, abs=1e-9)
    assert AcceptanceConfig(mean_length=2.176).mean_tokens(3) == pytest.approx(2.176, rel=1e-9)
    assert rate_for_mean(4.0, 3) == 1.0 and rate_for_mean(1.0, 3) == pytest.approx(0.0, abs=1e-9)


def test_draws_follow_the_acceptance() -> None:
    # 400,000 draws: the standard error of their mean is under 0.1% of it.
    spec = SpeculativeConfig(method="ngram", acceptance=AcceptanceConfig(rate=0.6), num_tokens=3)
    sp = Speculation(spec, Drafter(None, 3, gpu("h100-sxm"), 1, RooflineParams()),
                     np.random.default_rng(7))
    r = Request(0, 0.0, 10, 400_001)
    sp.attach(r, Requests(np.zeros(1), np.array([10]), np.array([400_001])))
    tokens, _, first = r.draws
    draws = tokens[first:first + 400_000]
    counts = np.bincount(draws, minlength=5)[1:] / len(draws)
    np.testing.assert_allclose(counts, [0.4, 0.24, 0.144, 0.216], atol=0.003)
    assert draws.mean() == pytest.approx((1 - 0.6 ** 4) / 0.4, rel=0.01)
    # It takes only the draws its 400,000 tokens after the first need: the next request
    # starts where their sum first reaches 400,000 (about 400,000 / 2.176 of them).
    end = sp.chunks[id(sp.cuts)][2]
    assert tokens[first:end - 1].sum() < 400_000 <= tokens[first:end].sum()
    assert end - first == pytest.approx(400_000 / ((1 - 0.6 ** 4) / 0.4), rel=0.01)


@pytest.mark.parametrize("policy", ["continuous", "orca", "chunked"])
@pytest.mark.parametrize(("a", "k"), [(0.6, 3), (0.8, 5)])
def test_long_run_mean_tokens_per_verify_is_the_closed_form(policy: str, a: float,
                                                            k: int) -> None:
    # 40 requests of 2,000 output tokens, several at once: the run's own count of tokens
    # per verify (the last verify of each request capped) within 1% of the formula.
    sc = spec_scenario(policy, k=k, acceptance={"rate": a}, max_num_seqs=8,
                       max_num_batched_tokens=4096)
    n = 40
    res = run_requests(sc, [0.05 * i for i in range(n)], [16] * n, [2000] * n,
                       log_steps=False)
    sp = summarize(res)["speculative"]
    expected = (1 - a ** (k + 1)) / (1 - a)
    assert sp["expected_tokens_per_verify"] == pytest.approx(expected, rel=1e-12)
    assert sp["mean_tokens_per_verify"] == pytest.approx(expected, rel=0.01)
    assert sp["verify_tokens"] == n * 1999  # every token after the first, none beyond
    from sim.report.printed import table

    line = table(summarize(res))
    assert f"verifies (acceptance rate {a:g} expects {expected:.3f}); drafting:" in line
    # No class has an acceptance of its own: no per-class breakdown.
    assert "classes" not in sp and "expected_tokens_per_verify_of_classes" not in sp


def test_only_checkpoints_that_ship_mtp_modules_draft_with_them(tmp_path: Path) -> None:
    # The presets' configs: DeepSeek's and GLM-5's num_nextn_predict_layers 1, Qwen3.5's
    # mtp_num_hidden_layers 1, Kimi-K2.5's 0; Llama, Qwen3, Mixtral, gpt-oss name none, and
    # MiniMax-M2.5's num_mtp_modules has no vLLM drafter.
    with_mtp = {name for name, m in MODELS.items() if m.mtp_layers}
    assert with_mtp == {"deepseek-v3", "deepseek-r1", "deepseek-v3.2", "glm-5", "qwen3.5-27b",
                        "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b",
                        "qwen3.5-397b-a17b-fp8"}
    assert all(MODELS[n].mtp_layers == 1 for n in with_mtp)
    from sim.cost.hfconfig import from_hf_config

    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
             "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
             "vocab_size": 1000, "max_position_embeddings": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(llama))
    assert from_hf_config(path).mtp_layers == 0
    path.write_text(json.dumps({**llama, "num_nextn_predict_layers": 2}))
    assert from_hf_config(path).mtp_layers == 2
    with pytest.raises(ServesimError, match=r"serving.speculative.method: got method mtp, but "
                                            r"llama-3-8b has no multi-token-prediction"):
        tiny_scenario(model="llama-3-8b", serving={"speculative": {
            "method": "mtp", "num_tokens": 1, "acceptance": {"rate": 0.5}}})


# -- verifies request by request equal the aggregate ---------------------------------------
@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "orca", "chunked"]),
       st.sampled_from(["ngram", "mtp", "eagle"]),
       st.integers(1, 5), st.floats(0, 1), st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 60)),
                min_size=1, max_size=14),
       st.integers(12, 60), st.booleans(), st.integers(6, 24))
def test_lazy_verifies_equal_eager(policy: str, method: str, k: int, a: float, block: int,
                                   rows: list[tuple[float, int, int]], blocks: int,
                                   swap: bool, budget: int) -> None:
    # Small caches force preemptions (the set flushes); small budgets cut verifies short
    # (chunked) or hold prompts back behind verifies counted whole (orca, whose reserved
    # set never flushes: it never preempts).
    rows = sorted(rows)
    budgets = ({"max_num_batched_tokens": 2 * budget} if policy == "orca"
               else chunk_budget(policy, max(budget, block, k + 1)))
    sc = tiny_scenario(model={"preset": "tiny", "mtp_layers": 1}, serving={
        "policy": policy, "block_size": block, "num_kv_blocks": blocks, "max_num_seqs": 5,
        **budgets, "preemption": "swap" if swap else "recompute",
        "speculative": {"method": method, "num_tokens": k, "acceptance": {"rate": a}}})
    req = Requests(np.array([r[0] for r in rows]), np.array([r[1] for r in rows]),
                   np.array([r[2] for r in rows]))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    s = summarize(lazy)
    # Verifies emit at most every output token but each request's first (a decode the
    # budget cut to one token is a plain one; a recompute's prefill emits one too).
    assert s["speculative"]["verify_tokens"] <= int((req.output_tokens - 1).sum())


@settings(max_examples=int(os.environ.get("SERVESIM_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["continuous", "chunked"]), st.integers(1, 4), st.floats(0, 1),
       st.integers(1, 8),
       st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 40), st.integers(1, 40)),
                min_size=1, max_size=14),
       st.integers(8, 40), st.integers(6, 24))
def test_lazy_verifies_equal_eager_with_shared_prefixes(policy: str, k: int, a: float,
                                                        block: int,
                                                        rows: list[tuple[float, int, int]],
                                                        blocks: int, budget: int) -> None:
    # Prefix caching (chunked's default) under speculation: half the requests share
    # leading blocks, small caches evict them and preempt verifying requests, which take
    # back what the cache kept when they resume.
    rows = sorted(rows)
    sc = tiny_scenario(serving={
        "policy": policy, "block_size": block, "num_kv_blocks": blocks, "max_num_seqs": 5,
        **chunk_budget(policy, max(budget, block, k + 1)), "prefix_caching": True,
        "speculative": {"method": "eagle", "num_tokens": k, "acceptance": {"rate": a}}})
    prompts = np.array([r[1] for r in rows])
    hashes = tuple(np.arange(-(-int(p) // block) // 2, dtype=np.int64) + 1000 * (i % 2)
                   for i, p in enumerate(prompts))
    req = Requests(np.array([r[0] for r in rows]), prompts, np.array([r[2] for r in rows]),
                   prefix_hashes=hashes, prefix_block_tokens=block)
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    counts = summarize(lazy)["requests"]
    assert counts["finished"] + counts["rejected"] == len(rows)
    # Every request that ran finished: its own counts add up to the replicas' totals.
    assert lazy.verifies is not None and lazy.verify_tokens is not None
    assert int(lazy.verifies.sum()) == sum(s.spec_verifies for s in lazy.replica_stats)
    assert int(lazy.verify_tokens.sum()) == sum(s.spec_tokens for s in lazy.replica_stats)


def test_shipped_scenario_lazy_equal_eager() -> None:
    from conftest import eager_run

    from sim.config import scenario

    root = Path(__file__).resolve().parent.parent
    sc = scenario.load(root / "scenarios" / "speculative-eagle.yaml",
                       ["workload.num_requests=300"])
    ref = simulate(sc)
    assert_equivalent(ref, eager_run(sc))
    assert summarize(ref)["speculative"]["verifies"] > 1000


def test_a_crash_on_an_emptied_speculating_set_keeps_lazy_equal_eager() -> None:
    # Replica 0's set verifies A (7 tokens, 2 out) and empties when A finishes; the
    # outage at 0.1 s flushes it empty. B (14 tokens) reaches replica 0 after the repair
    # and verifies there. The flush restarted the set's per-tick sums at its tick: kept
    # as they were, A's past ticks were read as B's coming ones: B's verify counted 3
    # tokens for the 1 it emitted, and the replica's KV peaked at 8 blocks against 5 (a
    # review found it).
    sc = tiny_scenario(serving={"policy": "continuous", "speculative": {
        "method": "ngram", "num_tokens": 2, "acceptance": {"rate": 0.5}}},
        cluster={"replicas": 2}, faults={"outages": [{"replica": 0, "at_s": 0.1,
                                                      "duration_s": 0.2}], "detection_s": 0.02})
    lazy, eager = lazy_and_eager(sc, Requests(np.array([0.0, 0.0, 0.45]), np.array([7, 7, 14]),
                                              np.array([2, 2, 2])))
    assert [s[3] for s in lazy.step_log if s[0] == 0] == [
        ((0, 7, 0),), ((0, 3, 7),), ((2, 14, 0),), ((2, 3, 14),)]
    assert_equivalent(lazy, eager)
    assert summarize(lazy)["speculative"]["verify_tokens"] == 3


def test_same_seed_same_bytes_other_seed_other_draws() -> None:
    sc = spec_scenario("chunked", acceptance={"rate": 0.5},
                       workload={"arrivals": {"process": "poisson", "rate": 20.0},
                                 "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                             "output": {"dist": "uniform", "low": 2,
                                                        "high": 80}},
                                 "num_requests": 200, "seed": 3})
    a, b = simulate(sc), simulate(sc)
    assert requests_csv(a) == requests_csv(b) and summarize(a) == summarize(b)
    other = dataclasses.replace(sc, workload=dataclasses.replace(sc.workload, seed=4))
    assert summarize(simulate(other))["speculative"]["verifies"] != summarize(a)[
        "speculative"]["verifies"]


# -- hand-worked steps -----------------------------------------------------------------------
def test_step_log_of_one_request_every_draft_accepted() -> None:
    # Rate 1, k = 3: prompt 8 then verifies of 4 tokens (the pending one and 3 drafted),
    # each emitting 4, the last capped: output 10 = 1 (prefill) + 4 + 4 + 1.
    sc = spec_scenario(acceptance={"rate": 1.0})
    res = run_requests(sc, [0.0], [8], [10])
    entries = [e[3] for e in res.step_log]
    assert entries == [((0, 8, 0),), ((0, 4, 8),), ((0, 4, 12),), ((0, 4, 16),)]
    # step_s + per_new_token_s x tokens: 0.018 for the prefill, 0.014 each verify.
    assert [round(e[2] - e[1], 12) for e in res.step_log] == [0.018, 0.014, 0.014, 0.014]
    assert res.finish[0] == pytest.approx(0.018 + 3 * 0.014)
    # No overshoot: the last verify emitted only the one token still owed.
    assert summarize(res)["speculative"]["verify_tokens"] == 9


def test_orca_reserves_the_last_verifys_slots_and_counts_verifies_whole() -> None:
    # Orca, rate 1, k = 2, budget 12 tokens, blocks of 4. A (prompt 8, output 5) is
    # admitted with prompt + output - 1 + k = 14 tokens' slots: 4 blocks (its last verify
    # writes position 13), where 12 tokens (3 blocks) would do without speculation. B
    # (prompt 10, output 2) arrives during A's prefill: each of A's verifies counts 3
    # tokens against the budget, leaving 9, so B waits until A is gone. A's verifies
    # emit 3, then the 1 still owed; B's one verify the 1 it owes.
    sc = spec_scenario("orca", k=2, acceptance={"rate": 1.0}, max_num_batched_tokens=12)
    runs = [run_requests(sc, [0.0, 0.001], [8, 10], [5, 2], lazy_decodes=lazy)
            for lazy in (True, False)]
    for res in runs:
        assert [(round(e[1], 9), round(e[2], 9), e[3]) for e in res.step_log] == [
            (0.0, 0.018, ((0, 8, 0),)),          # 10 + 8 ms
            (0.018, 0.031, ((0, 3, 8),)),        # 10 + 3 ms: B's 10 > 12 - 3
            (0.031, 0.044, ((0, 3, 11),)),       # still 3 counted, 1 emitted
            (0.044, 0.064, ((1, 10, 0),)),
            (0.064, 0.077, ((1, 3, 10),))]
        np.testing.assert_allclose(res.first_token, [0.018, 0.064], atol=1e-12)
        np.testing.assert_allclose(res.finish, [0.044, 0.077], atol=1e-12)
        assert res.verify_tokens.tolist() == [4, 1] and res.verifies.tolist() == [2, 1]
        # Blocks are booked as each iteration starts, after its admissions: 4 held from
        # A's prefill on (B's 10 + 2 - 1 + 2 = 13 tokens: 4 blocks too), none ever taken
        # while verifying.
        stats = res.replica_stats[0]
        assert stats.kv_peak == 4
        assert stats.kv_block_s == pytest.approx(4 * 0.077, rel=1e-12)
    assert requests_csv(runs[0]) == requests_csv(runs[1])
    # Without speculation A's decode counts 1: B's 10 tokens fit beside it at once, and
    # each request holds 3 blocks.
    plain = tiny_scenario(serving={"policy": "orca", "max_num_batched_tokens": 12})
    res = run_requests(plain, [0.0, 0.001], [8, 10], [5, 2])
    assert res.step_log[1][3] == ((0, 1, 8), (1, 10, 0))
    assert res.replica_stats[0].kv_peak == 6


def test_orca_verifies_past_the_token_budget_are_counted_and_said() -> None:
    # Orca, k = 3, a budget of 16 tokens: five 1-token prompts fit it at once (5 tokens),
    # then each iteration verifies all five (5 x 4 = 20 tokens), where TensorRT-LLM would
    # leave one out. At acceptance 1 each 9-token output takes two verifies of 4 after
    # its prompt's token: two iterations over the budget, counted and said.
    sc = spec_scenario("orca", k=3, acceptance={"rate": 1.0}, max_num_batched_tokens=16)
    res = run_requests(sc, [0.0] * 5, [1] * 5, [9] * 5)
    assert [sum(e[1] for e in step[3]) for step in res.step_log] == [5, 20, 20]
    batch = summarize(res)["batch"]
    assert (batch["over_budget_iterations"], batch["token_budget"]) == (2, 16)
    assert "note: 2 iterations computed more than the 16-token budget" in table(summarize(res))
    # Within the budget (four requests: 16 tokens a verify iteration), nothing is said.
    fits = summarize(run_requests(sc, [0.0] * 4, [1] * 4, [9] * 4))
    assert "over_budget_iterations" not in fits["batch"]


def test_light_load_tpot_falls_by_the_mean_accepted_length_net_of_verify_cost() -> None:
    # Ten requests one at a time (30 s apart), output 2,001: a request's TPOT is its
    # verifies x the verify step / 2,000. With the linear cost a plain decode step is
    # 0.01 + 0.001 = 0.011 s and a verify of k + 1 = 4 tokens 0.014 s; n-gram drafting
    # is free. Tokens per verify at a = 0.7: (1 - 0.7^4) / 0.3 = 2.533, so TPOT falls
    # by 2.533 x 0.011 / 0.014 = 1.990 (within 2%: ~7,900 verifies, sd of their mean 0.6%).
    out, n = 2001, 10
    limits = {"max_num_batched_tokens": 4096}
    arrivals = [30.0 * i for i in range(n)]
    plain = run_requests(tiny_scenario(serving={"policy": "continuous", **limits}), arrivals,
                         [8] * n, [out] * n, log_steps=False)
    spec = run_requests(spec_scenario(acceptance={"rate": 0.7}, **limits), arrivals,
                        [8] * n, [out] * n, log_steps=False)
    tpot_plain = per_request(plain)["tpot"]
    tpot_spec = per_request(spec)["tpot"]
    np.testing.assert_allclose(tpot_plain, 0.011, rtol=1e-9)
    sp = summarize(spec)["speculative"]
    assert tpot_spec.sum() * (out - 1) == pytest.approx(sp["verifies"] * 0.014, rel=1e-9)
    mean_len = (1 - 0.7 ** 4) / 0.3
    assert sp["mean_tokens_per_verify"] == pytest.approx(mean_len, rel=0.02)
    assert tpot_plain.mean() / tpot_spec.mean() == pytest.approx(mean_len * 0.011 / 0.014,
                                                                 rel=0.02)


def test_head_drafting_is_k_steps_of_one_target_layer() -> None:
    # MTP on the tiny model: each verify step costs the linear price of its shape plus
    # k = 2 decode steps of a one-layer tiny (its LM head kept, no host overheads),
    # at the context the sequence holds plus the tokens drafted before each step.
    sc = spec_scenario(method="mtp", k=2, acceptance={"rate": 1.0})
    res = run_requests(sc, [0.0], [8], [7])
    head = RooflineCost(dataclasses.replace(sc.model, layers=1), gpu("h100-sxm"), 1,
                        dataclasses.replace(RooflineParams(), step_overhead_s=0.0,
                                            per_seq_overhead_s=0.0))
    cut = drafter_model(sc.serving.speculative, sc.model)
    assert cut is not None and dataclasses.replace(cut, name="tiny") == head.model
    steps = [e for e in res.step_log if e[3][0][1] == 3]
    assert [e[3][0][2] for e in steps] == [8, 11]  # 6 tokens after the prefill's one
    for (_, t0, t1, ((_, q, ctx),)) in steps:
        draft = sum(head.step_time(decode(1, ctx + i)) for i in range(2))
        assert t1 - t0 == pytest.approx(0.01 + 0.001 * q + draft, rel=1e-9)
        assert draft > 0


@pytest.mark.parametrize("cost", ["roofline", "measured"])
def test_a_head_on_a_sliding_window_model_attends_to_the_whole_context(cost: str) -> None:
    # gpt-oss alternates sliding-window and full layers; its EAGLE-3 heads are one
    # full-attention layer. Cutting the target to one layer kept its 12 sliding layers
    # ("sliding_layers: got 12, must be at most layers (1)"): no gpt-oss run could speculate.
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate

    sc = from_dict({"model": "gpt-oss-20b", "hardware": {"gpu": "h100-sxm"}, "cost": cost,
                    "serving": {"speculative": {"method": "eagle", "num_tokens": 3,
                                                "acceptance": {"rate": 0.7}}},
                    "workload": {"arrivals": {"process": "poisson", "rate": 2.0},
                                 "lengths": {"prompt": {"dist": "fixed", "value": 256},
                                             "output": {"dist": "fixed", "value": 32}},
                                 "num_requests": 10, "seed": 0}})
    assert sc.model.sliding_layers == 12
    head = drafter_model(sc.serving.speculative, sc.model)
    assert head is not None and (head.layers, head.sliding_layers) == (1, 0)
    sp = summarize(simulate(sc))["speculative"]
    assert sp["verifies"] > 0 and sp["draft_cost"].startswith("3 ")


def decode(seqs: int, ctx: int) -> Any:
    from sim.cost.shape import decode_shape

    return decode_shape(seqs, ctx)


def test_draft_model_prices_its_own_decode_steps() -> None:
    # Llama-3-70B drafted by Llama-3-8B (same tokenizer) on 4 H100s: drafting k = 4
    # tokens for 32 sequences costs 4 of the 8B's decode steps at tp 4.
    dr = Drafter(drafter_model(SpeculativeConfig(
        method="draft", acceptance=AcceptanceConfig(rate=0.5), num_tokens=4,
        draft_model="llama-3-8b"), _model("llama-3-70b")), 4, gpu("h100-sxm"), 4,
        RooflineParams())
    small = RooflineCost(_model("llama-3-8b"), gpu("h100-sxm"), 4,
                         dataclasses.replace(RooflineParams(), step_overhead_s=0.0,
                                             per_seq_overhead_s=0.0))
    expected = sum(small.step_time(decode(32, 32 * 1000 + 32 * i)) for i in range(4))
    assert dr.step_time(32, 32 * 1000) == pytest.approx(expected, rel=1e-12)
    assert dr.step_time(0, 0) == 0.0


def _model(name: str) -> Any:
    from sim.cost.presets import model_preset

    return model_preset(name)


def test_verify_takes_kv_slots_for_its_drafted_tokens() -> None:
    # Block size 4, prompt 8 (2 blocks), k = 3: the first verify holds the pending token
    # and 3 drafted ones at positions 8..11: a third block. Rejected drafts' slots stay.
    sc = spec_scenario(acceptance={"rate": 0.0}, num_kv_blocks=100)
    res = run_requests(sc, [0.0], [8], [3], lazy_decodes=False)
    assert [e[3] for e in res.step_log] == [((0, 8, 0),), ((0, 4, 8),), ((0, 4, 9),)]
    # The second verify's slots reach position 12: a fourth block, the peak.
    assert summarize(res)["kv"]["peak_utilization"] == 0.04
    # A request whose last verify's slots (prompt + output - 1 + k) cannot fit is refused.
    tight = spec_scenario(num_kv_blocks=4)
    res = run_requests(tight, [0.0, 0.0], [8, 8], [6, 9], log_steps=False)
    assert res.status.tolist() == [1, 2] and res.reason[1] == "exceeds_kv_capacity"


def class_spec_scenario(rate: float, classes: dict[str, Any], output: int,
                        num_requests: int, arrival_rate: float = 1.0) -> Any:
    """Chunked n-gram speculation (k = 3) at top-level ``rate`` with per-class
    acceptances ``classes``, on a workload of classes chat and code (equal weights),
    8-token prompts and ``output``-token outputs, constant arrivals."""
    spec = {"method": "ngram", "num_tokens": 3, "acceptance": {"rate": rate},
            "classes": classes}
    lengths = {"prompt": {"dist": "fixed", "value": 8},
               "output": {"dist": "fixed", "value": output}}
    return tiny_scenario(serving={"policy": "chunked", "speculative": spec,
                                  "max_num_batched_tokens": 4096},
                         workload={"arrivals": {"process": "constant", "rate": arrival_rate},
                                   "lengths": lengths, "num_requests": num_requests,
                                   "classes": {"code": {"weight": 1}, "chat": {"weight": 1}},
                                   "seed": 1})


@pytest.mark.parametrize("given", [{"rate": 1.0}, {"mean_length": 4.0},
                                   {"distribution": [0.0, 0.0, 0.0, 1.0]}])
def test_per_class_acceptance(given: dict[str, Any]) -> None:
    # Each way of giving code every drafted token accepted: 40 tokens after the first in
    # 10 verifies of 4; chat at rate 0 takes 40 verifies of 1.
    res = simulate(class_spec_scenario(0.0, {"code": given}, 41, 20))
    sp = summarize(res)["speculative"]
    code = int((res.requests.klass == res.requests.class_names.index("code")).sum())
    chat = 20 - code
    assert 0 < code < 20
    assert sp["verifies"] == code * 10 + chat * 40
    # As summary.json writes it (a distribution's tuple as a list).
    assert json.loads(json.dumps(sp["classes"])) == {
        "code": {**given, "acceptance_from": "class", "expected_tokens_per_verify": 4.0,
                 "verifies": code * 10, "verify_tokens": code * 40,
                 "mean_tokens_per_verify": 4.0},
        "chat": {"rate": 0.0, "acceptance_from": "scenario", "expected_tokens_per_verify": 1.0,
                 "verifies": chat * 40, "verify_tokens": chat * 40,
                 "mean_tokens_per_verify": 1.0}}
    # Set against the classes' own expectations, weighted by their verifies.
    mixed = (code * 10 * 4.0 + chat * 40 * 1.0) / sp["verifies"]
    assert sp["expected_tokens_per_verify_of_classes"] == pytest.approx(mixed, rel=1e-12)
    assert sp["mean_tokens_per_verify"] == pytest.approx(mixed, rel=1e-12)


def test_each_class_meets_its_own_closed_form() -> None:
    # Rates 0.5 (the scenario's, chat) and 0.9 (code's own), k = 3: a verify emits
    # (1 - 0.5^4) / 0.5 = 1.875 and (1 - 0.9^4) / 0.1 = 3.439 tokens on average. 40
    # requests of 2,000 output tokens, one at a time: each class's mean within 1% of its
    # own formula, every token after the first emitted by a verify.
    from sim.report.printed import table

    res = simulate(class_spec_scenario(0.5, {"code": {"rate": 0.9}}, 2000, 40, 0.05))
    s = summarize(res)
    assert s["latency_s"]["e2e"]["max"] < 20  # each request alone (arrivals 20 s apart)
    sp = s["speculative"]
    chat, code = sp["classes"]["chat"], sp["classes"]["code"]
    assert chat["expected_tokens_per_verify"] == pytest.approx(1.875, rel=1e-12)
    assert code["expected_tokens_per_verify"] == pytest.approx(3.439, rel=1e-12)
    assert chat["mean_tokens_per_verify"] == pytest.approx(1.875, rel=0.01)
    assert code["mean_tokens_per_verify"] == pytest.approx(3.439, rel=0.01)
    codes = int((res.requests.klass == res.requests.class_names.index("code")).sum())
    assert code["verify_tokens"] == codes * 1999
    assert chat["verify_tokens"] == (40 - codes) * 1999
    assert chat["verifies"] + code["verifies"] == sp["verifies"]
    # The run's mixed mean is far from the scenario rate's 1.875, close to the classes'.
    assert sp["mean_tokens_per_verify"] > 1.875 * 1.1
    assert sp["mean_tokens_per_verify"] == pytest.approx(
        sp["expected_tokens_per_verify_of_classes"], rel=0.01)
    line = next(x for x in table(s).splitlines() if x.startswith("speculative:"))
    assert (f"chat {chat['mean_tokens_per_verify']:.3f} over {chat['verifies']} verifies "
            "(acceptance rate 0.5 expects 1.875)") in line
    assert (f"code {code['mean_tokens_per_verify']:.3f} over {code['verifies']} verifies "
            "(acceptance rate 0.9 expects 3.439)") in line
    # The run's mean is set against the classes' expectation, not the scenario rate's.
    assert (f"{sp['verifies']} verifies (the classes' acceptances expect "
            f"{sp['expected_tokens_per_verify_of_classes']:.3f})") in line
    assert f"{sp['verifies']} verifies (acceptance rate" not in line


# -- bad input ------------------------------------------------------------------------------
BASE = ("model: tiny\ncost: {linear: {step_s: 0.01}}\nworkload: {arrivals: {process: constant, "
        "rate: 1}, lengths: {prompt: {dist: fixed, value: 8}, output: {dist: fixed, value: 4}}, "
        "num_requests: 2}\nserving:\n  policy: %s\n  speculative: %s\n")
BAD = {
    "k_zero": ("continuous", "{method: ngram, num_tokens: 0, acceptance: {rate: 0.5}}",
               ["serving.speculative.num_tokens", "got 0", "at least 1"]),
    "rate_above_one": ("continuous", "{method: ngram, num_tokens: 2, acceptance: {rate: 1.5}}",
                       ["serving.speculative.acceptance.rate", "1.5", "at most 1"]),
    "rate_negative": ("chunked", "{method: ngram, num_tokens: 2, acceptance: {rate: -0.1}}",
                      ["serving.speculative.acceptance.rate", "-0.1", "at least 0"]),
    "mean_too_long": ("continuous",
                      "{method: ngram, num_tokens: 2, acceptance: {mean_length: 3.5}}",
                      ["acceptance.mean_length", "3.5", "at most num_tokens + 1 = 3"]),
    "mean_below_one": ("continuous",
                       "{method: ngram, num_tokens: 2, acceptance: {mean_length: 0.5}}",
                       ["acceptance.mean_length", "0.5", "at least 1"]),
    "two_ways": ("continuous",
                 "{method: ngram, num_tokens: 2, acceptance: {rate: 0.5, mean_length: 2}}",
                 ["serving.speculative.acceptance", "exactly one of", "rate, mean_length"]),
    "no_acceptance": ("continuous", "{method: ngram, num_tokens: 2}",
                      ["serving.speculative.acceptance", "required key is missing"]),
    "distribution_length": ("continuous",
                            "{method: ngram, num_tokens: 2, acceptance: "
                            "{distribution: [0.5, 0.5]}}",
                            ["acceptance.distribution", "got 2 probabilities", "need"]),
    "distribution_sum": ("continuous",
                         "{method: ngram, num_tokens: 1, acceptance: {distribution: [0.5, 0.6]}}",
                         ["acceptance.distribution", "sum to 1.1", "must sum to 1"]),
    "unknown_method": ("continuous", "{method: medusa, num_tokens: 2, acceptance: {rate: 0.5}}",
                       ["serving.speculative.method", "medusa", "'eagle'"]),
    "draft_without_model": ("continuous",
                            "{method: draft, num_tokens: 2, acceptance: {rate: 0.5}}",
                            ["serving.speculative.draft_model", "needs draft_model"]),
    "unknown_draft_model": ("continuous", "{method: draft, num_tokens: 2, acceptance: "
                            "{rate: 0.5}, draft_model: gpt-2}",
                            ["serving.speculative.draft_model", "gpt-2", "llama-3-8b"]),
    "draft_vocab": ("continuous", "{method: draft, num_tokens: 2, acceptance: {rate: 0.5}, "
                    "draft_model: llama-3-8b}",
                    ["serving.speculative.draft_model", "vocab", "tokenizer"]),
    "layers_for_ngram": ("continuous", "{method: ngram, num_tokens: 2, acceptance: "
                         "{rate: 0.5}, draft_layers: 2}",
                         ["serving.speculative.draft_layers", "eagle and mtp"]),
    # A head deeper than its target had been blamed on the hardware's memory.
    "layers_past_the_target": ("continuous", "{method: eagle, num_tokens: 2, acceptance: "
                               "{rate: 0.5}, draft_layers: 1000}",
                               ["serving.speculative.draft_layers: got 1000, more than the 2 "
                                "layers of the target tiny", "give 1 to 2"]),
    # A model whose checkpoint ships no MTP module (the tiny preset's config names none).
    "mtp_without_modules": ("continuous", "{method: mtp, num_tokens: 2, acceptance: "
                            "{rate: 0.5}}",
                            ["serving.speculative.method: got method mtp, but tiny has no "
                             "multi-token-prediction module", "deepseek-v3, deepseek-v3.2, "
                             "glm-5", "use eagle, draft or ngram"]),
    "unknown_key": ("continuous", "{method: ngram, num_tokens: 2, acceptance: {rate: 0.5}, "
                    "tokens: 3}", ["serving.speculative", "unknown key 'tokens'"]),
    "static_policy": ("static", "{method: ngram, num_tokens: 2, acceptance: {rate: 0.5}}",
                      ["serving.speculative", "continuous, orca and chunked", "'static'"]),
    # An orca iteration counts every verify whole against max_num_batched_tokens.
    "orca_budget_under_a_verify": ("orca\n  max_num_batched_tokens: 8",
                                   "{method: ngram, num_tokens: 8, acceptance: {rate: 0.5}}",
                                   ["serving.speculative.num_tokens: got num_tokens 8: a "
                                    "verify of 9 tokens exceeds the token budget 8"]),
    "unknown_class": ("chunked", "{method: ngram, num_tokens: 2, acceptance: {rate: 0.5}, "
                      "classes: {code: {rate: 0.9}}}",
                      ["serving.speculative.classes", "code"]),
    "classes_without_any": ("chunked", "{method: ngram, num_tokens: 2, acceptance: "
                            "{rate: 0.5}, classes: {code: {rate: 0.9}}}",
                            ["serving.speculative.classes", "names classes (code) but the "
                             "workload has none"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_speculative_setting_is_one_clear_line(case: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    policy, spec, needles = BAD[case]
    text = BASE % (policy, spec)
    if case == "unknown_class":
        text = text.replace("num_requests: 2}", "num_requests: 2, classes: {chat: {weight: 1}}}")
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    rc = main(["simulate", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"servesim: error: {path}: ")
    for needle in needles:
        assert needle in err, err


def test_light_load_tpot_counts_the_drafting() -> None:
    # MTP, k = 3, every draft accepted: output 13 = the prefill's token + 3 verifies of 4.
    # Each verify costs 0.01 + 4 x 0.001 s (linear) plus drafting, 3 decode steps of the
    # one-layer head at the request's context then (8, 12, 16) plus the drafted tokens;
    # TPOT = the three verifies / 12 tokens, against 0.011 s a token without speculation.
    sc = spec_scenario(method="mtp", k=3, acceptance={"rate": 1.0})
    res = run_requests(sc, [0.0], [8], [13], log_steps=False)
    head = RooflineCost(dataclasses.replace(sc.model, layers=1), gpu("h100-sxm"), 1,
                        dataclasses.replace(RooflineParams(), step_overhead_s=0.0,
                                            per_seq_overhead_s=0.0))
    draft = [sum(head.step_time(decode(1, ctx + i)) for i in range(3)) for ctx in (8, 12, 16)]
    tpot = sum(0.014 + d for d in draft) / 12
    assert per_request(res)["tpot"][0] == pytest.approx(tpot, rel=1e-9)
    assert tpot < 0.011


def test_small_chunks_and_cut_verifies_lazy_equal_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    # Chunks of 64 draws and a token budget that cuts verifies short: requests start
    # fresh chunks often, and a cut request reads on past its own draws (never past its
    # chunk's end); the set and the request-by-request run still agree.
    import sim.core.speculation as speculation

    monkeypatch.setattr(speculation, "CHUNK", 64)
    sc = tiny_scenario(serving={
        "policy": "chunked", "block_size": 4, "num_kv_blocks": 60, "max_num_seqs": 6,
        "token_budget": 6, "speculative": {"method": "ngram", "num_tokens": 3,
                                           "acceptance": {"rate": 0.8}}})
    rng = np.random.default_rng(5)
    n = 40
    req = Requests(np.sort(rng.uniform(0, 2, n)), rng.integers(2, 30, n),
                   rng.integers(1, 60, n))
    lazy, eager = lazy_and_eager(sc, req)
    assert_equivalent(lazy, eager)
    s = summarize(lazy)
    assert s["requests"]["finished"] == n
    assert s["speculative"]["verify_tokens"] <= int((req.output_tokens - 1).sum())
    # Cut verifies ran: fewer tokens a verify than the uncut mean (1 - 0.8^4) / 0.2.
    assert s["speculative"]["mean_tokens_per_verify"] < (1 - 0.8 ** 4) / 0.2


def test_a_class_the_traces_rows_never_carry_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens,class\n"
                                    "0.0,8,4,chat\n0.5,8,4,chat\n")
    text = ("model: tiny\ncost: {linear: {step_s: 0.01}}\nworkload: {trace: {path: t.csv}}\n"
            "serving: {speculative: {method: ngram, num_tokens: 2, acceptance: {rate: 0.5}, "
            "classes: {code: {rate: 0.9}}}}\n")
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert main(["simulate", str(path), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err == (f"servesim: error: {path}: serving.speculative.classes: no requests of "
                   "class 'code'; the workload's classes: chat\n")


def test_a_verify_is_a_decode_entry_reading_its_context_once() -> None:
    # A steady decode (one pending token) verifying k + 1 = 4 tokens is a decode entry: its
    # 4 tokens go through the projections, and it attends to its context as a decode does
    # (engines run verifies on their decode kernels). A 4-token chunk of a prompt stays a
    # prefill entry: pairs 4 * 40 + 4 * 5 / 2.
    verify = Request(0, 0.0, 100, 50)
    verify.computed, verify.generated = 120, 21
    chunk = Request(1, 0.0, 100, 50)
    chunk.computed = 40
    assert batch_shape({verify: 4, chunk: 4}) == StepShape(2, 8, 160, 1, 4, 170, 121)
    assert batch_shape({verify: 1}) == StepShape(1, 1, 120, 0, 0, 0, 121)
    # DeepSeek-V3 on 8 H200s (roofline), 32 sequences of 4,000 tokens: the verify step's
    # attention is the decode step's, not the prefill chunk's (which up-projects every
    # cached latent), but for writing 3 more tokens' KV each; its projections carry the 4
    # tokens of each.
    cost = RooflineCost(MODELS["deepseek-v3"], gpu("h200"), 8, RooflineParams())
    ctx = 32 * 4000
    plain = cost.parts(StepShape(32, 32, ctx, 0, 0, 0, ctx + 32))
    verifies = cost.parts(StepShape(32, 128, ctx, 0, 0, 0, ctx + 32))
    as_chunks = cost.parts(StepShape(32, 128, ctx, 32, 128, 4 * ctx + 32 * 10, 0))
    assert verifies["attention"] == pytest.approx(plain["attention"], rel=1e-3)
    assert verifies["attention"] < as_chunks["attention"] / 5
    assert verifies["linear"] == as_chunks["linear"] > plain["linear"]
