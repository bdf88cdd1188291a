"""The KV hint of a run refused for its rejections names the pool's own key and the exact
block count: at that count every request is admitted, one block fewer rejects them.

Each pool's count is what its KV manager can ever hold: a prefill replica of a
disaggregated scenario holds only the prompt; a sliding-window model (gpt-oss) also
holds its window's pages; the watermark stays free (sim/report/rejections.py)."""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest

from sim.config.scenario import from_dict
from sim.core.engine import simulate
from sim.core.request import REJECTED
from sim.report.rejections import verdict

LENGTHS = {"prompt": {"dist": "fixed", "value": 600}, "output": {"dist": "fixed", "value": 32}}


def scenario(model: str, serving: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"model": model, "hardware": {"gpu": "h100-sxm"}, "cost": "roofline",
            "serving": serving, **more,
            "workload": {"arrivals": {"process": "poisson", "rate": 5}, "lengths": LENGTHS,
                         "num_requests": 4}}


def disaggregated(model: str, pool: str, blocks: int) -> dict[str, Any]:
    pools = {"prefill": {"replicas": 1, "policy": "chunked"},
             "decode": {"replicas": 1, "policy": "chunked"}}
    pools[pool]["num_gpu_blocks"] = blocks
    return scenario(model, {"policy": "disaggregated"},
                    disaggregated={**pools, "link": {"kind": "nvlink"}})


CASES = [
    # key, blocks, scenario with too few; 600 + 32 - 1 = 631 tokens: 40 blocks of 16.
    ("serving.num_gpu_blocks", 40, scenario("llama-3-8b", {"num_gpu_blocks": 30})),
    # A watermark of 0.1 of the blocks is kept free: 44 - int(4.4) = 40, 43 - 4 = 39.
    ("serving.num_gpu_blocks", 44,
     scenario("llama-3-8b", {"policy": "continuous", "watermark": 0.1, "num_gpu_blocks": 30})),
    # gpt-oss: 40 blocks of full layers and, of its one sliding group a full group, a
    # page a block up to its 128-token window's ceil(128 / 16) + 1 = 9.
    ("serving.num_gpu_blocks", 49, scenario("gpt-oss-20b", {"num_gpu_blocks": 30})),
    # A prefill replica holds the 600-token prompt alone: 38 blocks.
    ("disaggregated.prefill.num_gpu_blocks", 38, disaggregated("llama-3-8b", "prefill", 30)),
    ("disaggregated.decode.num_gpu_blocks", 49, disaggregated("gpt-oss-20b", "decode", 30)),
]


@pytest.mark.parametrize(("key", "blocks", "raw"), CASES)
def test_the_hint_is_the_least_that_admits_every_request(key: str, blocks: int,
                                                          raw: dict[str, Any]) -> None:
    res = simulate(from_dict(raw))
    err = verdict(res, 0.01)
    assert err is not None and err.where == key
    assert re.search(rf"raise {re.escape(key)} \(now 30[;)].* to at least {blocks} blocks of 16 "
                     r"tokens", err.message), err.message
    for n, rejected in ((blocks, False), (blocks - 1, True)):
        raw = copy.deepcopy(raw)
        node = raw
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = n
        run = simulate(from_dict(raw))
        assert bool(np.any(run.status == REJECTED)) is rejected, n
