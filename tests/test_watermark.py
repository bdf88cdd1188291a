"""The KV watermark, worked out by hand: admission is refused exactly because of it.

vLLM keeps ``watermark`` x (KV blocks) free when it admits a new prefill, so a prompt
admitted now does not force running requests out on their next decode; a request is
admitted when free blocks minus the blocks it needs is at least the watermark (equal
is enough). Decode growth may use the watermark's blocks.

Cost in every case: 10 ms per step + 1 ms per new token (linear), block size 4 (see
conftest.tiny_scenario); 10 KV blocks, watermark 0.2: int(0.2 x 10) = 2 blocks.
Requests A, B, C arrive at 0 s with prompts of 16, 16 and 8 tokens (4, 4 and 2 blocks)
and 2, 4 and 2 output tokens. Step log entries: (replica, start_s, end_s, ((request
id, new tokens, context before), ...)).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_both_ways, tiny_scenario

ARGS = ([0.0, 0.0, 0.0], [16, 16, 8], [2, 4, 2])


def steps(res):
    """The step log with times rounded to the nanosecond, for exact comparison."""
    return [(s[0], round(s[1], 9), round(s[2], 9), s[3]) for s in res.step_log]


def scenario(policy: str, watermark: float):
    """10 blocks of 4 tokens under ``policy`` with this watermark fraction."""
    return tiny_scenario(serving={"policy": policy, "num_kv_blocks": 10,
                                  "watermark": watermark})


def test_continuous_holds_back_the_prompt_that_would_eat_the_watermark():
    # A: 10 - 4 = 6 free >= 2, admitted. B: 6 - 4 = 2 >= 2, admitted (exactly at the
    # watermark). C: 2 - 2 = 0 < 2, refused: it waits although its 2 blocks are free.
    # At 42 ms C still does not fit (2 free), so A and B decode, each growing into a 5th
    # block at context 16 (the watermark's 2 blocks: decodes may use them). A's 2nd
    # token finishes it at 54 ms and frees 5 blocks: C (5 - 2 = 3 >= 2) is prefilled
    # alone (prefill-first), then B and C decode together.
    res = run_both_ways(scenario("continuous", 0.2), *ARGS)
    assert steps(res) == [
        (0, 0.0, 0.042, ((0, 16, 0), (1, 16, 0))),
        (0, 0.042, 0.054, ((0, 1, 16), (1, 1, 16))),
        (0, 0.054, 0.072, ((2, 8, 0),)),
        (0, 0.072, 0.084, ((1, 1, 17), (2, 1, 8))),
        (0, 0.084, 0.095, ((1, 1, 18),)),
    ]
    np.testing.assert_allclose(res.first_sched, [0.0, 0.0, 0.054], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.054, 0.095, 0.084], atol=1e-12)
    assert res.preemptions.tolist() == [0, 0, 0]


def test_chunked_holds_back_the_prompt_that_would_eat_the_watermark():
    # The same admissions as continuous in the first two iterations (budget 256: every
    # prompt fits whole). At 54 ms A has finished (5 blocks free): C is admitted with its
    # whole prompt next to B's decode (10 + 1 + 8 ms), and grows into a 3rd block at
    # its first decode.
    res = run_both_ways(scenario("chunked", 0.2), *ARGS)
    assert steps(res) == [
        (0, 0.0, 0.042, ((0, 16, 0), (1, 16, 0))),
        (0, 0.042, 0.054, ((0, 1, 16), (1, 1, 16))),
        (0, 0.054, 0.073, ((1, 1, 17), (2, 8, 0))),
        (0, 0.073, 0.085, ((1, 1, 18), (2, 1, 8))),
    ]
    np.testing.assert_allclose(res.first_sched, [0.0, 0.0, 0.054], atol=1e-12)
    np.testing.assert_allclose(res.finish, [0.054, 0.085, 0.085], atol=1e-12)
    assert res.preemptions.tolist() == [0, 0, 0]


@pytest.mark.parametrize("policy", ["continuous", "chunked"])
def test_without_the_watermark_the_same_prompt_is_admitted_and_later_preempted(policy):
    # Watermark 0: C's 2 blocks fit (2 - 2 = 0 >= 0), so all three prefill at once
    # (10 + 40 ms). At 50 ms A and B each need a 5th block and none is free: C, the
    # newest, is preempted. This is what the watermark prevents.
    res = run_both_ways(scenario(policy, 0.0), *ARGS)
    assert steps(res)[0] == (0, 0.0, 0.05, ((0, 16, 0), (1, 16, 0), (2, 8, 0)))
    assert steps(res)[1] == (0, 0.05, 0.062, ((0, 1, 16), (1, 1, 16)))
    assert res.preemptions.tolist() == [0, 0, 1]
