"""A public end-to-end row simulated: the mean TTFT and TPOT (ms) of the scenario that
stands for its benchmark run (:func:`sim.validate.siliconrecipes.scenario_raw`) under a
given cost model, with a note when some of its requests did not finish.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sim.core.request import FINISHED
from sim.report.metrics import per_request
from sim.validate.silicon import Case
from sim.validate.siliconrecipes import scenario_raw


def predict(case: Case, cost: Any, seed: int = 0) -> tuple[float, float, str]:
    """(mean TTFT ms, mean TPOT ms, note) of ``case`` simulated with ``cost``."""
    return predict_raw(scenario_raw(case, seed), cost, f"<silicon line {case.row.line}>")


def predict_raw(raw: dict[str, Any], cost: Any, source: str = "<silicon row>"
                ) -> tuple[float, float, str]:
    """(mean TTFT ms, mean TPOT ms, note) of the scenario mapping ``raw`` (a row's, as
    :func:`scenario_raw` gives it, changed or not) simulated with ``cost``; errors name
    ``source``."""
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate

    res = simulate(from_dict(raw, source), cost=cost)
    lat = per_request(res)
    done = res.status == FINISHED
    note = "" if done.all() else f"{int((~done).sum())} of {len(done)} requests not finished"
    ttft = lat["ttft"][done]
    tpot = lat["tpot"][done & np.isfinite(lat["tpot"])]
    return _mean_ms(ttft), _mean_ms(tpot), note


def _mean_ms(x: np.ndarray) -> float:
    """The mean of ``x`` (s) in ms; NaN for no values."""
    return float(np.mean(x)) * 1e3 if x.size else math.nan
