"""Checks on a run that need its requests or its end: classes a speculative acceptance
names that no request carries (a trace's class column is known only once it is read),
prefix hashes naming more blocks than a prompt fills (the block size is known only at
run time), and a simulated clock run past the range where float64 seconds resolve a
step."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from sim.configtools import MAX_TIME_S
from sim.errors import ServesimError
from sim.workload.requests import Requests

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.core.result import RunResult


def check_acceptance_classes(scenario: Scenario, names: tuple[str, ...]) -> None:
    """Every class a speculative acceptance names is one the requests carry (a trace's
    class column names its classes only once it is read)."""
    spec = scenario.serving.speculative
    if spec is None or not spec.classes:
        return
    missing = sorted(set(spec.classes) - set(names))
    if missing:
        have = ", ".join(names) if names else "none"
        raise ServesimError(f"no requests of class {', '.join(map(repr, missing))}; the "
                            f"workload's classes: {have}",
                            where="serving.speculative.classes").located(
                                source=scenario.source)


# How far the simulated clock may run: twice the bound workload times are held below at
# load (MAX_TIME_S, 1e9 s), so a request that arrives just inside it still has as long
# again to be served, and only a run whose steps are priced out of any real range ends
# past it. float64 seconds still resolve 2.4e-7 s there; far past it a step added to the
# clock rounds away, and latencies would come out as zero rather than visibly wrong.
CLOCK_LIMIT_S = 2 * MAX_TIME_S


def within_clock(res: RunResult) -> RunResult:
    """``res``, or an error when its clock ran past :data:`CLOCK_LIMIT_S` or to infinity:
    an arrival time, think time or cost coefficient out of any real range."""
    end = res.end_s
    if math.isfinite(end) and end <= CLOCK_LIMIT_S:
        return res
    busy = [r.busy_s for r in res.replica_stats]
    finite, top = all(map(math.isfinite, busy)), max(busy, default=0.0)
    priced = not finite or top > MAX_TIME_S
    why = ("steps were priced at infinite or NaN seconds" if not finite
           else f"the busiest replica computed for {top:.3g} s")
    # Name the cost model (and its file) when the steps themselves ran the clock out: the
    # scenario is often fine and the profile it reads is not.
    cost = res.cost_source or "the cost model"
    if res.scenario.cost.profile is not None:
        cost += f", read from {res.scenario.cost.profile}"
    cause = (f"a GPU figure or a cost coefficient of the cost model ({cost}) is out of range"
             if priced else "an arrival time (start_s, think_time_s, a trace's arrival_s), "
             f"a GPU figure or a cost coefficient ({cost}) is out of range")
    raise ServesimError(f"the simulated clock reached {end:.3g} s, past {CLOCK_LIMIT_S:.0e} s "
                        f"(63 years), where time stops resolving a step ({why}): {cause}",
                        res.scenario.source)


def check_hash_counts(requests: Requests, hash_tokens: int, source: str) -> None:
    """Refuse a request whose prefix hashes name more blocks of ``hash_tokens`` tokens
    than its prompt fills (a servesim trace's ``prefix_hash_ids``, blocks of the KV
    block size unless the trace says): the extra ids would be dropped without a word."""
    hashes = requests.prefix_hashes
    assert hashes is not None
    counts = np.fromiter((len(h) for h in hashes), dtype=np.int64, count=len(hashes))
    room = -(-requests.prompt_tokens // hash_tokens)
    over = np.flatnonzero(counts > room)
    if over.size:
        i = int(over[0])
        raise ServesimError(f"request {i} (row {i + 1} of the workload) names {counts[i]} "
                            f"prefix blocks of {hash_tokens} tokens, more than its "
                            f"{requests.prompt_tokens[i]}-token prompt fills "
                            f"({room[i]}); a trace's {requests.hash_column} lists the "
                            "prompt's leading blocks", source, "workload.trace")
