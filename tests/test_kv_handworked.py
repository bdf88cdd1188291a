"""KV-block accounting and preemption order, worked out by hand: exact iteration logs.

Cost in every case: 10 ms per step + 1 ms per new token (linear), block size 4, no
watermark (see conftest.tiny_scenario). Step log entries: (replica, start_s, end_s,
((request id, new tokens, context before), ...)).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_both_ways, tiny_scenario

POLICIES = ["continuous", "chunked"]


def steps(res):
    """The step log with times rounded to the nanosecond, for exact comparison."""
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


@pytest.mark.parametrize("policy", POLICIES)
def test_prompts_that_fill_their_last_block_exactly_share_a_full_cache(policy):
    # 4 blocks. Two 8-token prompts need ceil(8 / 4) = 2 blocks each: together exactly
    # the cache, so both prefill in one step (10 + 16 ms). With one output token each
    # they finish there, never needing a block for a 9th token.
    sc = tiny_scenario(serving={"policy": policy, "num_kv_blocks": 4})
    res = run_both_ways(sc, [0.0, 0.0], [8, 8], [1, 1])
    assert steps(res) == [(0, 0.0, 0.026, ((0, 8, 0), (1, 8, 0)))]
    np.testing.assert_allclose(res.finish, [0.026, 0.026], atol=1e-12)


# Three requests that fill 9 blocks until the newest is preempted (the two tests below).
UNTIL_PREEMPTION = [
    (0, 0.0, 0.034, ((0, 8, 0), (1, 8, 0), (2, 8, 0))),
    *[(0, round(0.034 + 0.013 * k, 9), round(0.047 + 0.013 * k, 9),
       tuple((i, 1, 8 + k) for i in range(3))) for k in range(4)],
    (0, 0.086, 0.098, ((0, 1, 12), (1, 1, 12))),
]


@pytest.mark.parametrize("policy", POLICIES)
def test_the_newest_running_request_is_preempted_first(policy):
    # 9 blocks. A, B, C (8 tokens, 6 out, in that order) prefill together: 10 + 24 ms,
    # 2 blocks each. Their first decode (context 8) takes a 3rd block each: all 9 held.
    # Decodes at contexts 8 to 11 take 13 ms each (34, 47, 60, 73 -> 86 ms). At 86 ms
    # (context 12) A needs a 4th block and none is free: C, the newest, is preempted
    # (not B, though B is the next one after A), and its 3 blocks give A and B one each.
    # A and B emit their 6th token at 98 ms and finish; C re-prefills 8 + 5 tokens (10 +
    # 13 ms), which emits its last token. (Prefix caching off: C keeps nothing. With it
    # on, the next test.)
    sc = tiny_scenario(serving={"policy": policy, "num_kv_blocks": 9, "prefix_caching": False})
    res = run_both_ways(sc, [0.0, 0.0, 0.0], [8, 8, 8], [6, 6, 6])
    assert steps(res) == [*UNTIL_PREEMPTION, (0, 0.098, 0.121, ((2, 13, 0),))]
    assert res.preemptions.tolist() == [0, 0, 1]
    np.testing.assert_allclose(res.finish, [0.098, 0.098, 0.121], atol=1e-12)


def test_a_victim_takes_back_what_the_cache_kept_under_v1_defaults():
    # The previous test under chunked with nothing said of prefix caching: on, as in vLLM
    # v1. At 86 ms C (8 prompt tokens + 4 generated, 3 full blocks) is preempted and its
    # 3 blocks stay cached, unreferenced, under hashes of its own. A and B each take a 4th
    # block: no block is free, so each evicts one of C's, tail first, leaving C's first
    # block (tokens 0-3). At 98 ms A and B finish; C is admitted again, finds that block
    # and prefills the other 9 of its 13 tokens (10 + 9 ms), which emits its last token.
    sc = tiny_scenario(serving={"policy": "chunked", "num_kv_blocks": 9})
    assert sc.serving.prefix_caching is True
    res = run_both_ways(sc, [0.0, 0.0, 0.0], [8, 8, 8], [6, 6, 6])
    assert steps(res) == [*UNTIL_PREEMPTION, (0, 0.098, 0.117, ((2, 9, 4),))]
    assert res.preemptions.tolist() == [0, 0, 1]
    np.testing.assert_allclose(res.finish, [0.098, 0.098, 0.117], atol=1e-12)
