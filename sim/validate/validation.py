"""Measured against predicted: per-request latencies of a real run and of the simulator's
run of the same requests, compared percentile by percentile.

A real run (a replay on the device, or a vLLM benchmark) becomes a
:class:`sim.core.engine.RunResult`, so the report module writes its per-request CSV and
plots its CDFs like any simulation. :func:`compare` takes requests that finished in
both runs and gives, for TTFT, TPOT and E2E at p50/p90/p99, the real and predicted
values and the relative error ``(predicted - real) / real``.

No torch and no calibrate imports: this module reads what a replay wrote.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from sim.cliargs import ascii_float
from sim.config.scenario import Scenario, from_dict
from sim.configtools import build
from sim.core.engine import Engine, RunResult, build_cost
from sim.core.histogram import LogHistogram
from sim.core.replicastats import ReplicaStats
from sim.core.request import FINISHED, REJECTED, UNFINISHED
from sim.cost.frontend import Frontend
from sim.cost.shape import StepShape, shape_of
from sim.report.metrics import per_request
from sim.workload.requests import Requests, WorkloadConfig

METRICS = ("ttft", "tpot", "e2e")
QUANTILES = (50, 90, 99)
# Percentiles and metrics the bars apply to (docs/validation.md).
BAR_METRICS = ("ttft", "tpot")
BAR_QUANTILES = (50, 90)
# Relative-error bars (fractions) by the real run's device type (docs/validation.md).
BARS = {"cpu": 0.15, "cuda": 0.10}
# What marks a folder as ``servesim validate``'s outputs, in any mode (its ``--out`` is
# replaced whole only when it holds one of these, or nothing).
VALIDATE_FILES = ("validation.json", "silicon.json", "replay-*.json", "real-*.csv",
                  "predicted-*.csv", "first-*.csv", "cdf-*.png")

# A placeholder workload: validation hands the engine its own requests.
_NO_WORKLOAD = {"arrivals": {"process": "constant", "rate": 1.0},
                "lengths": {"prompt": {"dist": "fixed", "value": 1},
                            "output": {"dist": "fixed", "value": 1}},
                "num_requests": 1}


def scenario_for(model: dict[str, Any], serving: dict[str, Any], cost: dict[str, Any],
                 name: str, base_dir: Path | None = None,
                 hardware: dict[str, Any] | None = None) -> Scenario:
    """A scenario of one replica with this model, serving limits and cost section, for
    the requests of a replay (:mod:`calibrate.replay`), which keeps no prefix cache: nor
    does the scenario, whatever a record written without the key would default to.
    ``serving`` is checked as a scenario's serving section is: an unknown key, or a null
    where the field takes none, is an error naming ``serving.KEY`` (the callers add the
    record's file), not a limit dropped for its default."""
    raw = {"name": name, "model": model, "cost": cost, "workload": _NO_WORKLOAD,
           "serving": {**serving, "prefix_caching": False}}
    if hardware:
        raw["hardware"] = hardware
    return from_dict(raw, f"<validate {name}>", base_dir)


def simulate_requests(scenario: Scenario, requests: Requests, seed: int = 0,
                      cost: Any = None) -> RunResult:
    """The simulator's run of exactly ``requests`` under ``scenario`` (of its workload only
    the clients count: :func:`with_clients`), priced by ``cost`` when given, else by the
    scenario's own cost model."""
    return Engine(scenario, requests, build_cost(scenario) if cost is None else cost,
                  np.random.default_rng(seed)).run()


def with_clients(scenario: Scenario, concurrency: int | None, n: int) -> Scenario:
    """``scenario`` with a measured run's client in place of its own workload, for
    :func:`simulate_requests` over that run's ``n`` requests: ``concurrency`` clients
    without think time, each sending the next request when one is free and not before
    the request's arrival time (:mod:`sim.core.clients`); None: every request sent at its
    arrival time. The lengths written here are never drawn: the run's requests are given."""
    wl = scenario.workload
    if concurrency is None and wl.concurrency is None:
        return scenario
    raw = {**_NO_WORKLOAD, "num_requests": n, "seed": wl.seed}
    if concurrency is not None:
        del raw["arrivals"]  # clients send, not an arrival process
        raw["concurrency"] = concurrency
    return dataclasses.replace(scenario, workload=build(WorkloadConfig, raw, "workload"))


def real_result(scenario: Scenario, requests: Requests, first_token: np.ndarray,
                finish: np.ndarray, status: np.ndarray, reason: np.ndarray | None = None,
                first_sched: np.ndarray | None = None, preemptions: np.ndarray | None = None,
                itls: list[list[float]] | None = None,
                steps: dict[str, np.ndarray] | None = None) -> RunResult:
    """A measured run as a :class:`RunResult` (times in seconds; status codes of
    :mod:`sim.core.request`). ``steps`` (iteration start/end times and shapes) fills the
    busy time and batch statistics; ``itls`` (seconds, per request) the ITL histogram."""
    n = len(requests)
    itl = LogHistogram()
    for gaps in itls or []:
        if gaps:
            itl.add_many(np.asarray(gaps, dtype=float))
    stats = ReplicaStats(scenario.serving.num_gpu_blocks or 1)  # KV capacity, blocks
    if steps is not None and len(steps["start_s"]):
        stats.iterations = len(steps["start_s"])
        stats.busy_s = float(np.sum(steps["end_s"] - steps["start_s"]))
        stats.batch_seqs = int(np.sum(steps["seqs"]))
        stats.batch_tokens = int(np.sum(steps["new_tokens"]))
    done = np.concatenate([finish[np.isfinite(finish)], [0.0]])
    return RunResult(
        scenario=scenario, requests=requests,
        first_sched=np.full(n, np.nan) if first_sched is None else first_sched,
        first_token=first_token, finish=finish,
        preemptions=np.zeros(n, np.int64) if preemptions is None else preemptions,
        replica=np.where(status == REJECTED, -1, 0), status=status,
        reason=np.full(n, "", dtype=object) if reason is None else reason, itl=itl,
        replica_stats=[stats],
        end_s=float(done.max()), step_log=None, cost_source="a real run, measured")


def rank(values: np.ndarray, x: float) -> float:
    """Percentile rank of ``x`` among ``values`` (percent, 0-100; ``values`` not empty):
    the inverse of ``np.percentile``'s linear interpolation, so that a set's own p-th
    percentile ranks p in it. Equal values share the mean of their positions."""
    u, count = np.unique(np.asarray(values, dtype=float), return_counts=True)
    n = int(count.sum())
    if n == 1:
        return 50.0 if x == u[0] else (0.0 if x < u[0] else 100.0)
    pos = np.cumsum(count) - (count + 1) / 2.0  # mean 0-based position of each value
    return float(100.0 * np.interp(x, u, pos) / (n - 1))


def compare(real: RunResult, pred: RunResult) -> dict[str, Any]:
    """Percentiles of TTFT, TPOT and E2E (seconds) over requests finished in both runs,
    with relative errors; counts of what each side finished, rejected or left unfinished.

    Each row also has ``predicted_rank``: the percentile rank of the real value among
    the predicted ones. A large relative error at a rank near the row's own percentile
    means the percentile fell on a flat stretch of the CDF (few requests there), where
    a request or two crossing it moves the value a long way; the CDFs then agree
    better than the error says."""
    both = (real.status == FINISHED) & (pred.status == FINISHED)
    lr, lp = per_request(real), per_request(pred)
    rows: dict[str, dict[str, dict[str, float | None]]] = {}
    for m in METRICS:
        ok = both & np.isfinite(lr[m]) & np.isfinite(lp[m])
        rows[m] = {}
        for q in QUANTILES:
            r = float(np.percentile(lr[m][ok], q)) if ok.any() else None
            p = float(np.percentile(lp[m][ok], q)) if ok.any() else None
            err = (p - r) / r if r and p is not None else None
            at = rank(lp[m][ok], r) if r is not None else None
            rows[m][f"p{q}"] = {"real": r, "predicted": p, "rel_err": err,
                                "predicted_rank": at}

    def counts(res: RunResult) -> dict[str, int]:
        return {"finished": int((res.status == FINISHED).sum()),
                "rejected": int((res.status == REJECTED).sum()),
                "unfinished": int((res.status == UNFINISHED).sum())}
    return {"requests": len(real.status), "compared": int(both.sum()),
            "real": counts(real), "predicted": counts(pred), "metrics": rows}


def bar_value(text: str) -> float:
    """``--bar``'s value: a relative error above 0 (0.15 is 15%); argparse's type."""
    try:
        bar = ascii_float(text)
    except ValueError:
        bar = float("nan")
    if not bar > 0 or not np.isfinite(bar):
        raise argparse.ArgumentTypeError(f"got {text!r}, must be a number > 0 (0.15 is 15%)")
    return bar


def verdict(cmp: dict[str, Any], bar: float) -> dict[str, Any]:
    """Worst |relative error| over the bar's metrics and percentiles, and pass or fail;
    ``passed`` None, with ``why``, where there is nothing to judge (no request finished
    in both runs, or a real percentile of zero, against which no error is relative)."""
    if not cmp["compared"]:
        return {"bar": bar, "worst": None, "passed": None,
                "why": "no request finished in both runs"}
    for m in BAR_METRICS:
        for q in BAR_QUANTILES:
            row = cmp["metrics"][m][f"p{q}"]
            if row["rel_err"] is None:
                why = (f"the real {m.upper()} p{q} is 0, no error is relative to it"
                       if row["real"] is not None else
                       f"no compared request has a {m.upper()} (a TPOT needs two output "
                       "tokens or more)")
                return {"bar": bar, "worst": None, "passed": None, "why": why}
    errs = [cmp["metrics"][m][f"p{q}"]["rel_err"] for m in BAR_METRICS for q in BAR_QUANTILES]
    worst = max(abs(e) for e in errs)
    return {"bar": bar, "worst": worst, "passed": worst <= bar}


def table(cmp: dict[str, Any], title: str) -> str:
    """The comparison as text: one row per metric and percentile, milliseconds."""
    return "\n".join([
        title,
        f"requests: {cmp['requests']}, compared {cmp['compared']} (finished in both); "
        f"real {counts_text(cmp['real'])}; predicted {counts_text(cmp['predicted'])}",
        *rows_text(cmp["metrics"], ("real", "predicted", "rel_err", "predicted_rank"),
                   ("real ms", "predicted ms", "rel err", "pred rank")),
        "pred rank: where the real value falls among the predicted ones (near the "
        "row's own percentile: the CDFs agree there whatever the error)"])


def rows_text(metrics: dict[str, dict[str, dict[str, float | None]]],
              keys: tuple[str, str, str, str], headers: tuple[str, str, str, str]
              ) -> list[str]:
    """A comparison's rows as text under a header line: per metric and percentile, the
    two sides' values (milliseconds), their relative difference and the rank, read
    from each row's ``keys`` (in that order) and headed ``headers``."""
    width = [max(12, len(headers[0]) + 2), max(12, len(headers[1]) + 2),
             max(10, len(headers[2]) + 2), max(10, len(headers[3]) + 2)]
    lines = [f"{'metric':<8}{'pct':>5}"
             + "".join(f"{h:>{w}}" for h, w in zip(headers, width, strict=True))]
    for m, rows in metrics.items():
        for q, row in rows.items():
            va, vb, d, r = (row[k] for k in keys)
            if va is None or vb is None:  # both are, where no request finished in both
                lines.append(f"{m:<8}{q:>5}" + "".join(f"{'-':>{w}}" for w in width))
                continue
            lines.append(f"{m:<8}{q:>5}{va * 1e3:>{width[0]}.1f}{vb * 1e3:>{width[1]}.1f}"
                         f"{'-' if d is None else f'{d:+.1%}':>{width[2]}}"
                         f"{'-' if r is None else f'p{r:.0f}':>{width[3]}}")
    return lines


def counts_text(c: dict[str, int]) -> str:
    """What one side finished, rejected or left unfinished, as text (counts)."""
    return ", ".join(f"{v} {k}" for k, v in c.items() if v or k == "finished")


def replay_run(scenario: Scenario, requests: Requests, cols: dict[str, np.ndarray],
               steps: dict[str, np.ndarray]) -> RunResult:
    """The measured run of a replay record (:func:`read_replay`'s requests, columns and
    steps) as a :class:`RunResult` under ``scenario``."""
    return real_result(scenario, requests, cols["first_token"], cols["finish"],
                       cols["status"], cols["reason"], cols["first_sched"],
                       cols["preemptions"], steps=steps)


def _device_time(cost: Any, shape: StepShape) -> Any:
    """What an executor's timer sees: a profile's step without its ``host`` part (other
    cost models price the step alone)."""
    return cost.device_time(shape) if hasattr(cost, "device_time") else cost.step_time(shape)


def idle_before(steps: dict[str, np.ndarray]) -> np.ndarray:
    """Seconds each recorded iteration's loop sat idle before it (0 when it followed
    another step): the gap since the previous step ended (the first: since the replay
    began), less the loop's own host work in it where the record has ``host_s``."""
    start = np.asarray(steps["start_s"], dtype=float)
    prev_end = np.concatenate([[0.0], np.asarray(steps["end_s"], dtype=float)[:-1]])
    host = np.asarray(steps["host_s"], dtype=float) if "host_s" in steps else 0.0
    return np.maximum(start - prev_end - host, 0.0)


def _wake_prices(cost: Any, idle: np.ndarray) -> np.ndarray:
    """A profile's ``wake`` seconds for each idle spell (0 for other cost models)."""
    wake = getattr(cost, "wake_time", None)
    if wake is None:
        return np.zeros(len(idle))
    return np.array([wake(float(x)) for x in idle], dtype=float)


def step_errors(steps: dict[str, np.ndarray], cost: Any) -> dict[str, Any]:
    """Each measured iteration against the cost model's price for its shape (and, after
    an idle spell, the profile's ``wake`` term): relative errors of the executor's
    seconds (``exec_s``) by kind, busy time on both sides, and the loop's host seconds
    between steps (records that have ``host_s``) against the profile's ``host`` price."""
    if not len(steps["start_s"]):
        return {}
    shape = StepShape(*(np.asarray(steps[f], dtype=float) for f in StepShape._fields))
    wake = _wake_prices(cost, idle_before(steps))
    device = np.asarray(_device_time(cost, shape), dtype=float)
    pred = device + wake
    real = np.asarray(steps["exec_s"], dtype=float)
    rel = (pred - real) / real
    prefill = np.asarray(steps["prefill_seqs"]) > 0
    out: dict[str, Any] = {
        "iterations": int(real.size),
        "busy_real_s": float(np.sum(steps["end_s"] - steps["start_s"])),
        "exec_real_s": float(real.sum()), "exec_predicted_s": float(pred.sum()),
    }
    if "cpu_s" in steps:
        # Share of the steps' wall time the replay thread was on a core (CPU devices).
        out["cpu_share"] = float(np.sum(steps["cpu_s"]) / max(real.sum(), 1e-12))
    if "host_s" in steps:
        total = np.asarray(cost.step_time(shape), dtype=float)
        out["host"] = {"real_s": float(np.sum(steps["host_s"])),
                       "predicted_s": float(np.sum(total - device))}
    if wake.any():
        out["wake"] = {"steps": int((wake > 0).sum()), "predicted_s": float(wake.sum())}
    for kind, mask in (("with_prefill", prefill), ("decode_only", ~prefill)):
        out[kind] = {"iterations": int(mask.sum()),
                     "real_s": float(real[mask].sum()), "predicted_s": float(pred[mask].sum()),
                     "median_rel_err": float(np.median(rel[mask])) if mask.any() else None}
    return out


@dataclasses.dataclass(frozen=True)
class SpeedMatched:
    """A cost model whose device prices are scaled to a device's measured speed: steps
    with a prefill by ``prefill``, decode-only steps by ``decode`` (dimensionless
    factors), the price of waking from idle (paid by a prefill step) by ``prefill``;
    a profile's ``host`` part is left as priced."""

    cost: Any
    prefill: float
    decode: float

    def step_time(self, shape: StepShape) -> Any:
        """Seconds: the cost model's step time plus (factor - 1) x its device time."""
        factor = np.where(np.asarray(shape.prefill_seqs) > 0, self.prefill, self.decode)
        out = self.cost.step_time(shape) + (factor - 1.0) * _device_time(self.cost, shape)
        return float(out) if np.ndim(out) == 0 else out

    @property
    def source(self) -> str:
        """The wrapped cost model's source, speed-matched."""
        return f"{self.cost.source}, speed-matched to the measured run"

    @property
    def frontend(self) -> Frontend:
        """The wrapped cost model's frontend latency, unscaled (it is not device time)."""
        return self.cost.frontend

    def wake_time(self, idle_s: float) -> float:
        """The cost model's price of waking from ``idle_s`` seconds idle, times
        ``prefill`` (the factor was measured on prefill steps with that price in)."""
        wake = getattr(self.cost, "wake_time", None)
        return 0.0 if wake is None else self.prefill * float(wake(idle_s))


def speed_factors(summary: dict[str, Any]) -> tuple[float, float]:
    """(with-prefill, decode-only) factors of a level: measured over priced executor
    seconds in :func:`step_errors`' summary; 1.0 for a kind the level did not run."""
    def ratio(kind: str) -> float:
        part = summary.get(kind) or {}
        pred = part.get("predicted_s") or 0.0
        return float(part["real_s"] / pred) if part.get("iterations") and pred > 0 else 1.0
    return ratio("with_prefill"), ratio("decode_only")


def speed_matched(scenario: Scenario, requests: Requests, real: RunResult, cost: Any,
                  summary: dict[str, Any], bar: float) -> tuple[dict[str, Any], RunResult]:
    """The simulator's run again with ``cost`` scaled by the level's own measured speed
    (:func:`speed_factors`), compared with the real run: what is left once the device's
    speed during the level is taken as measured is the model's and the schedule's error.
    (factors, comparison and verdict; that run)."""
    prefill, decode = speed_factors(summary)
    pred = simulate_requests(scenario, requests, cost=SpeedMatched(cost, prefill, decode))
    cmp = compare(real, pred)
    return {"prefill_factor": prefill, "decode_factor": decode, "comparison": cmp,
            "verdict": verdict(cmp, bar)}, pred


def sensitivity(scenario: Scenario, requests: Requests, cost: Any,
                factors: tuple[float, ...] = (0.95, 1.05)) -> dict[str, Any]:
    """The prediction again with every step's device price (and waking) times each of
    ``factors``: p50 and p90 of TTFT and TPOT (seconds) per factor, over the requests
    finished in that run. How far a level's percentiles move for a few percent of step
    time: near saturation several times as far, which bounds what any cost model can
    promise there on a device whose speed moves that much."""
    rows: dict[str, dict[str, list[float | None]]] = {
        m: {f"p{q}": [] for q in BAR_QUANTILES} for m in BAR_METRICS}
    for k in factors:
        run = simulate_requests(scenario, requests, cost=SpeedMatched(cost, k, k))
        lat = per_request(run)
        for m in BAR_METRICS:
            v = lat[m][(run.status == FINISHED) & np.isfinite(lat[m])]
            for q in BAR_QUANTILES:
                rows[m][f"p{q}"].append(float(np.percentile(v, q)) if v.size else None)
    return {"factors": list(factors), "metrics": rows}


def probe_report(probe: dict[str, Any] | None, cost: Any) -> dict[str, dict[str, float]]:
    """Per probe step of a replay record: its median seconds just before and just after
    the level, and the cost model's price for it (seconds); {} for records without."""
    if not probe:
        return {}
    out = {}
    for label, entries in probe.get("entries", {}).items():
        shape = shape_of((int(n), int(c)) for n, c in entries)
        out[label] = {"before_s": float(probe["before_s"][label]),
                      "after_s": float(probe["after_s"][label]),
                      "predicted_s": float(_device_time(cost, shape))}
    return out
