"""``chunked`` under KV pressure, worked out by hand: exact iteration logs.

The rules under test (sim/policies/chunked.py, as vLLM v1's scheduler has them): when a running
request cannot grow, the newest running request not yet in this batch is preempted;
when the request being scheduled is itself the newest, it is preempted (v1 does not
shrink its chunk to the blocks it could still fill); no waiting request is admitted
in an iteration that preempted, so a victim does not walk straight back into the space
it just gave up; and from vLLM 0.19 a waiting request is admitted only when its whole
sequence's blocks fit.

Cost in every case: 10 ms per step + 1 ms per new token (linear), block size 4 (see
conftest.tiny_scenario), token budget 8. Step log entries: (replica, start_s, end_s,
((request id, new tokens, context before), ...)). Prefix caching is off here, so a victim
recomputes all it had (with the cache on, vLLM's default, it takes back the blocks still
cached: tests/test_preempt_cache.py and tests/test_kv_handworked.py).
"""

from __future__ import annotations

import numpy as np
from conftest import run_both_ways, tiny_scenario

NO_CACHE = {"policy": "chunked", "prefix_caching": False}


def steps(res):
    """The step log with times rounded to the nanosecond, for exact comparison."""
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def test_no_admission_in_an_iteration_that_preempted():
    # 6 blocks. A (8 tokens, 6 out) fills the first 8-token budget alone (2 blocks);
    # B (8, 6) joins with a 7-token chunk next to A's first decode (A grows to 3 blocks
    # at context 8, B takes 2). B's 8th prompt token emits its first token at 48 ms and
    # it grows to 3 blocks at context 8: all 6 blocks are held.
    # At 72 ms A (context 12) needs a 4th block: B, the newest and not yet in this batch,
    # is preempted (recompute: its 3 blocks are freed and its 3 tokens must be redone).
    # 2 blocks are then free and 7 tokens of budget are left, enough for a 7-token chunk
    # of B's 11-token re-prefill, yet none is admitted: A decodes alone (11 ms). A's
    # 6th token finishes it at 83 ms; B re-prefills 8 + 3 tokens in two chunks.
    sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 8, "num_kv_blocks": 6})
    res = run_both_ways(sc, [0.0, 0.0], [8, 8], [6, 6])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 8, 0),)),
        (0, 0.018, 0.036, ((0, 1, 8), (1, 7, 0))),
        (0, 0.036, 0.048, ((0, 1, 9), (1, 1, 7))),
        (0, 0.048, 0.06, ((0, 1, 10), (1, 1, 8))),
        (0, 0.06, 0.072, ((0, 1, 11), (1, 1, 9))),
        (0, 0.072, 0.083, ((0, 1, 12),)),  # B preempted; nothing admitted
        (0, 0.083, 0.101, ((1, 8, 0),)),
        (0, 0.101, 0.114, ((1, 3, 8),)),  # 8 + 3 = prompt + 3 generated: emits token 4
        (0, 0.114, 0.125, ((1, 1, 11),)),
        (0, 0.125, 0.136, ((1, 1, 12),)),
    ]
    assert res.preemptions.tolist() == [0, 1]
    np.testing.assert_allclose(res.first_token, [0.018, 0.048], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.083, 0.136], atol=1e-12)


def test_newest_request_preempts_itself_rather_than_shrinking_its_chunk():
    # 5 blocks. A (4 tokens, 3 out) and B (16, 2) share the first budget: 4 + 4 tokens,
    # a block each. At 18 ms A decodes (growing to 2 blocks at context 4) and B takes a
    # 7-token chunk (to 11 tokens: 3 blocks): all 5 blocks are held.
    # At 36 ms B's last 5 prompt tokens would need a 4th block and none is free. B is the
    # newest running request, so nobody else can be preempted, and its 3rd block's one
    # free slot is not used for a shrunken chunk: B is preempted (recompute: 3 blocks
    # freed) and A decodes alone (11 ms), its 3rd token finishing it at 47 ms. B then
    # re-prefills its 16 tokens in two 8-token chunks (18 ms each), its first token out
    # at 83 ms, and decodes once (11 ms).
    sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 8, "num_kv_blocks": 5})
    res = run_both_ways(sc, [0.0, 0.0], [4, 16], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 4, 0), (1, 4, 0))),
        (0, 0.018, 0.036, ((0, 1, 4), (1, 7, 4))),
        (0, 0.036, 0.047, ((0, 1, 5),)),  # B preempted itself; no admission
        (0, 0.047, 0.065, ((1, 8, 0),)),
        (0, 0.065, 0.083, ((1, 8, 8),)),
        (0, 0.083, 0.094, ((1, 1, 16),)),
    ]
    assert res.preemptions.tolist() == [0, 1]
    np.testing.assert_allclose(res.first_token, [0.018, 0.083], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.047, 0.094], atol=1e-12)


def test_a_request_preempted_twice_while_an_older_one_grows():
    # vLLM before 0.19 (--no-scheduler-reserve-full-isl), which admits a request whose
    # first chunk fits. As above, but A runs longer (6 out). At 47 ms A (context 6, 2
    # blocks) decodes and
    # B is admitted again with a 7-token chunk (2 of the 3 free blocks): 18 ms. At 65 ms
    # A still fits its 2 blocks (context 7), but B's next 7 tokens need 4 blocks and 1
    # is free: B, the newest, is preempted a second time and A decodes alone (11 ms).
    # At 76 ms A takes its 3rd block (context 8) and B a fresh 7-token chunk (2 blocks);
    # A's 6th token finishes it at 94 ms. B computes its other 9 tokens (8 + 1), its
    # first token at 123 ms, and decodes once.
    sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 8, "num_kv_blocks": 5,
                                "scheduler_reserve_full_isl": False})
    res = run_both_ways(sc, [0.0, 0.0], [4, 16], [6, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 4, 0), (1, 4, 0))),
        (0, 0.018, 0.036, ((0, 1, 4), (1, 7, 4))),
        (0, 0.036, 0.047, ((0, 1, 5),)),
        (0, 0.047, 0.065, ((0, 1, 6), (1, 7, 0))),
        (0, 0.065, 0.076, ((0, 1, 7),)),  # B preempted again
        (0, 0.076, 0.094, ((0, 1, 8), (1, 7, 0))),
        (0, 0.094, 0.112, ((1, 8, 7),)),
        (0, 0.112, 0.123, ((1, 1, 15),)),
        (0, 0.123, 0.134, ((1, 1, 16),)),
    ]
    assert res.preemptions.tolist() == [0, 2]
    np.testing.assert_allclose(res.first_token, [0.018, 0.123], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.094, 0.134], atol=1e-12)


def test_from_vllm_0_19_a_request_waits_until_its_whole_prompt_fits():
    # The same requests under vLLM's default from 0.19 (scheduler_reserve_full_isl): at
    # 0 ms B's 16 tokens need 4 of the 4 blocks A leaves, so it is admitted; at 36 ms it
    # preempts itself as above (a running request is not gated). From 47 ms A holds 2
    # blocks and B's whole prompt needs 4 of the 3 free: B waits, and A decodes alone
    # (11 ms a step) to its 6th token at 80 ms. B then prefills 8 + 8 tokens (18 ms
    # each) and decodes once: preempted once, not twice, and done 7 ms sooner.
    for serving in ({}, {"vllm_version": "0.19.0"}):
        sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 8, "num_kv_blocks": 5,
                                    **serving})
        res = run_both_ways(sc, [0.0, 0.0], [4, 16], [6, 2])
        assert steps(res) == [
            (0, 0.0, 0.018, ((0, 4, 0), (1, 4, 0))),
            (0, 0.018, 0.036, ((0, 1, 4), (1, 7, 4))),
            (0, 0.036, 0.047, ((0, 1, 5),)),
            (0, 0.047, 0.058, ((0, 1, 6),)),
            (0, 0.058, 0.069, ((0, 1, 7),)),
            (0, 0.069, 0.08, ((0, 1, 8),)),
            (0, 0.08, 0.098, ((1, 8, 0),)),
            (0, 0.098, 0.116, ((1, 8, 8),)),
            (0, 0.116, 0.127, ((1, 1, 16),)),
        ]
        assert res.preemptions.tolist() == [0, 1]
        np.testing.assert_allclose(res.finish, [0.08, 0.127], atol=1e-12)
    # A release before 0.19 admits on the first chunk (the test above).
    sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 8, "num_kv_blocks": 5,
                                "vllm_version": "0.18.0"})
    res = run_both_ways(sc, [0.0, 0.0], [4, 16], [6, 2])
    assert res.preemptions.tolist() == [0, 2]


def test_long_prefill_token_threshold_caps_each_request_per_iteration():
    # Budget 8, threshold 3, plenty of blocks. A (5 tokens, 2 out) and B (7, 2) arrive
    # together. 0 ms: each takes 3 prompt tokens (6 tokens, 16 ms), 2 of the budget idle.
    # 16 ms: A its last 2 (first token), B 3 more (15 ms). 31 ms: A decodes, B its last
    # token (first token): 12 ms, A finished at 43 ms. 43 ms: B decodes (11 ms).
    sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 8,
                                "long_prefill_token_threshold": 3})
    res = run_both_ways(sc, [0.0, 0.0], [5, 7], [2, 2])
    assert steps(res) == [
        (0, 0.0, 0.016, ((0, 3, 0), (1, 3, 0))),
        (0, 0.016, 0.031, ((0, 2, 3), (1, 3, 3))),
        (0, 0.031, 0.043, ((0, 1, 5), (1, 1, 6))),
        (0, 0.043, 0.054, ((1, 1, 7),)),
    ]
    np.testing.assert_allclose(res.first_token, [0.031, 0.043], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.043, 0.054], atol=1e-12)


def test_threshold_lets_a_later_prompt_decode_before_an_earlier_one_finishes():
    # Budget 16, threshold 4; A (12 tokens, 2 out), B (3, 4), C (12, 2), D (5, 3) arrive
    # together; 10 ms a step + 1 ms a token. 0 ms: A 4, B 3 (first token), C 4, D 4: 25 ms.
    # 25 ms: A 4, B decodes, C 4, D its last 1 (first token): 20 ms. 45 ms: A and C their
    # last 4 (first tokens), B and D decode: 20 ms. 65 ms: all four decode; each has its
    # last token at 79 ms. At 45 ms the running list is A, B, C, D with B and D decoding
    # and A and C still prefilling: decodes no longer lead it (a decode set reading B and
    # D as its leading members had scheduled D twice and skipped A).
    sc = tiny_scenario(serving={**NO_CACHE, "token_budget": 16,
                                "long_prefill_token_threshold": 4})
    res = run_both_ways(sc, [0.0] * 4, [12, 3, 12, 5], [2, 4, 2, 3])
    assert steps(res) == [
        (0, 0.0, 0.025, ((0, 4, 0), (1, 3, 0), (2, 4, 0), (3, 4, 0))),
        (0, 0.025, 0.045, ((0, 4, 4), (1, 1, 3), (2, 4, 4), (3, 1, 4))),
        (0, 0.045, 0.065, ((0, 4, 8), (1, 1, 4), (2, 4, 8), (3, 1, 5))),
        (0, 0.065, 0.079, ((0, 1, 12), (1, 1, 5), (2, 1, 12), (3, 1, 6))),
    ]
    np.testing.assert_allclose(res.first_token, [0.065, 0.025, 0.065, 0.045], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.079] * 4, atol=1e-12)
