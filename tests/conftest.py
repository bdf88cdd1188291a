"""Shared helpers for the test suite."""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.engine import Engine, RunResult, build_cost
from sim.scenario import from_dict
from sim.workload import Requests


def tiny_scenario(**sections: Any) -> Any:
    """A validated scenario on the tiny model with a linear cost, overridable per section."""
    raw: dict[str, Any] = {
        "model": "tiny",
        "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
        "serving": {"block_size": 4, "max_num_batched_tokens": 256, "watermark": 0.0},
        "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                 "output": {"dist": "fixed", "value": 2}},
                     "num_requests": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return from_dict(raw)


def run_requests(scenario: Any, arrivals: list[float], prompts: list[int], outputs: list[int],
                 log_steps: bool = True, lazy_decodes: bool = True) -> RunResult:
    """Run ``scenario`` on exactly these requests (seconds, tokens)."""
    req = Requests(np.array(arrivals, dtype=float), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    return Engine(scenario, req, build_cost(scenario), np.random.default_rng(0), log_steps,
                  lazy_decodes=lazy_decodes).run()


def run_both_ways(scenario: Any, arrivals: list[float], prompts: list[int],
                  outputs: list[int]) -> RunResult:
    """Run with lazily advanced decodes (sim/decodeset.py) and request by request, assert
    identical outputs, return the first."""
    from sim.report import requests_csv

    runs = [run_requests(scenario, arrivals, prompts, outputs, lazy_decodes=lazy)
            for lazy in (True, False)]
    assert requests_csv(runs[0]) == requests_csv(runs[1])
    logs = [sorted(r.step_log or [], key=lambda e: (e[0], e[1])) for r in runs]
    assert logs[0] == logs[1]
    return runs[0]
