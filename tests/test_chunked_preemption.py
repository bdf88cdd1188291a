"""``chunked`` under KV pressure, worked out by hand: exact iteration logs.

The rules under test (sim/policies/chunked.py, as vLLM v1's scheduler has them): when a running
request cannot grow, the newest running request not yet in this batch is preempted;
when the request being scheduled is itself the newest, its chunk shrinks to the blocks
it can still fill, and only when not one token fits is it preempted; and no waiting
request is admitted in an iteration that preempted, so a victim does not walk straight
back into the space it just gave up.

Cost in every case: 10 ms per step + 1 ms per new token (linear), block size 4 (see
conftest.tiny_scenario), token budget 8. Step log entries: (replica, start_s, end_s,
((request id, new tokens, context before), ...)).
"""

from __future__ import annotations

import numpy as np
from conftest import run_both_ways, tiny_scenario


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
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 8, "num_kv_blocks": 6})
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


def test_newest_request_shrinks_its_chunk_rather_than_preempting_itself():
    # 5 blocks. A (4 tokens, 3 out) and B (16, 2) share the first budget: 4 + 4 tokens,
    # a block each. At 18 ms A decodes (growing to 2 blocks at context 4) and B takes a
    # 7-token chunk (to 11 tokens: 3 blocks): all 5 blocks are held.
    # At 36 ms B's last 5 prompt tokens would need a 4th block and none is free. B is the
    # newest running request, so nobody else can be preempted: its chunk shrinks to the
    # 1 token its 3rd block still holds (3 x 4 - 11), and B keeps its KV. A's 3rd token
    # finishes it at 48 ms (2 blocks freed); B's last 4 prompt tokens follow.
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 8, "num_kv_blocks": 5})
    res = run_both_ways(sc, [0.0, 0.0], [4, 16], [3, 2])
    assert steps(res) == [
        (0, 0.0, 0.018, ((0, 4, 0), (1, 4, 0))),
        (0, 0.018, 0.036, ((0, 1, 4), (1, 7, 4))),
        (0, 0.036, 0.048, ((0, 1, 5), (1, 1, 11))),  # B's chunk shrunk from 5 to 1
        (0, 0.048, 0.062, ((1, 4, 12),)),
        (0, 0.062, 0.073, ((1, 1, 16),)),
    ]
    assert res.preemptions.tolist() == [0, 0]
    np.testing.assert_allclose(res.first_token, [0.018, 0.062], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.048, 0.073], atol=1e-12)


def test_newest_request_with_no_token_of_room_preempts_itself():
    # As above, but A runs longer (6 out), so at 48 ms B (context 12, its 3 blocks full)
    # still shares the cache with A: any token of B's needs a 4th block, none is free
    # and no newer request exists. Not one token fits (3 x 4 - 12 = 0), so B is
    # preempted (recompute: 3 blocks freed) and A decodes alone, with no admission in
    # that iteration. At 59 ms B is admitted again with a 7-token chunk (2 of the 3 free
    # blocks) next to A's decode: 10 + 1 + 7 ms.
    sc = tiny_scenario(serving={"policy": "chunked", "token_budget": 8, "num_kv_blocks": 5})
    res = run_both_ways(sc, [0.0, 0.0], [4, 16], [6, 2])
    log = steps(res)
    assert log[:5] == [
        (0, 0.0, 0.018, ((0, 4, 0), (1, 4, 0))),
        (0, 0.018, 0.036, ((0, 1, 4), (1, 7, 4))),
        (0, 0.036, 0.048, ((0, 1, 5), (1, 1, 11))),
        (0, 0.048, 0.059, ((0, 1, 6),)),  # B preempted itself; no admission
        (0, 0.059, 0.077, ((0, 1, 7), (1, 7, 0))),
    ]
    assert res.preemptions.tolist() == [0, 1]
