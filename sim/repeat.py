"""``servesim validate --replay A --against B``: two real runs of the same requests,
compared with each other as a validation compares a real run with the simulator.

A validation's verdict holds the simulator to one real run. Run the same requests
again on the same machine a few minutes later and the latencies move too: the device's
speed wanders (a shared host's cache and memory bus), and near saturation queueing
multiplies a few percent of step time into tens of percent of TTFT and TPOT. The
difference between two real runs is what a simulator that reproduced the first run
exactly would be charged against the second: a floor under any validation error on
that machine at that load. Where it exceeds the bar, a miss says little about the
simulator (docs/validation.md, "Repeatability").

Both records must hold the same requests (arrival, prompt and output tokens) under the
same serving limits; anything else is an error naming the field. With ``--profile``,
each run's steps are also priced, so the output says how fast each ran against the
same profile (:func:`sim.validation.speed_factors`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from sim import report
from sim.engine import RunResult
from sim.errors import ServesimError
from sim.metrics import clean
from sim.validate import BARS
from sim.validation import (
    compare,
    read_replay,
    real_result,
    scenario_for,
    speed_factors,
    step_errors,
    verdict,
)
from sim.workload import Requests

# The scenario of a recorded run needs a cost section; nothing is simulated here.
_UNUSED_COST = {"linear": {"step_s": 1.0}}


def load_record(path: Path) -> dict[str, Any]:
    """A replay record (``servesim-replay/1`` JSON) as a dict; unreadable files are errors."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, TypeError, ValueError) as exc:
        raise ServesimError(f"cannot read replay: {exc}", source=str(path)) from None


def recorded_run(record: dict[str, Any], source: str
                 ) -> tuple[RunResult, Requests, dict[str, np.ndarray]]:
    """A replay record as a :class:`RunResult`: (run, its requests, its step columns)."""
    requests, cols, steps = read_replay(record, source)
    label = str(record.get("label", "level"))
    sc = scenario_for(dict(record.get("model") or {}), record.get("serving") or {},
                      _UNUSED_COST, label)
    run = real_result(sc, requests, cols["first_token"], cols["finish"], cols["status"],
                      cols["reason"], cols["first_sched"], cols["preemptions"], steps=steps)
    return run, requests, steps


def check_same(first: dict[str, Any], second: dict[str, Any], a: Requests, b: Requests,
               names: tuple[str, str]) -> None:
    """Raise unless both records ran the same requests on the same model under the same
    serving limits."""
    where = f"{names[0]} and {names[1]}"
    if len(a) != len(b):
        raise ServesimError(f"{where} hold {len(a)} and {len(b)} requests; --against needs "
                            "two runs of the same requests", where="--against")
    for field in ("arrival_s", "prompt_tokens", "output_tokens"):
        x, y = getattr(a, field), getattr(b, field)
        diff = np.flatnonzero(x != y)
        if diff.size:
            i = int(diff[0])
            raise ServesimError(f"{where} differ in requests.{field} at row {i} ({x[i]} vs "
                                f"{y[i]}); --against needs two runs of the same requests",
                                where="--against")
    for part in ("model", "serving"):
        sa, sb = first.get(part) or {}, second.get(part) or {}
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                raise ServesimError(f"{where} ran under different {part}.{key} "
                                    f"({sa.get(key)!r} vs {sb.get(key)!r})", where="--against")


def against(first: RunResult, second: RunResult) -> dict[str, Any]:
    """Percentiles of both runs over the requests finished in both (seconds), the
    relative difference ``(second - first) / first`` and the percentile rank of the
    first run's value among the second's (percent, :func:`sim.validation.compare`);
    each run's counts."""
    cmp = compare(first, second)
    metrics = {m: {q: {"first": row["real"], "second": row["predicted"],
                       "rel_diff": row["rel_err"], "second_rank": row["predicted_rank"]}
                   for q, row in rows.items()}
               for m, rows in cmp["metrics"].items()}
    return {"requests": cmp["requests"], "compared": cmp["compared"],
            "first": cmp["real"], "second": cmp["predicted"], "metrics": metrics,
            "worst": verdict(cmp, 1.0)["worst"]}


def table(cmp: dict[str, Any], title: str) -> str:
    """The comparison as text, milliseconds, one row per metric and percentile."""
    lines = [title, f"requests: {cmp['requests']}, compared {cmp['compared']} "
                    "(finished in both runs)",
             f"{'metric':<8}{'pct':>5}{'first ms':>12}{'second ms':>12}{'rel diff':>10}"
             f"{'2nd rank':>10}"]
    for m, rows in cmp["metrics"].items():
        for q, row in rows.items():
            if row["first"] is None:
                lines.append(f"{m:<8}{q:>5}{'-':>12}{'-':>12}{'-':>10}{'-':>10}")
                continue
            diff = "-" if row["rel_diff"] is None else f"{row['rel_diff']:+.1%}"
            lines.append(f"{m:<8}{q:>5}{row['first'] * 1e3:>12.1f}"
                         f"{row['second'] * 1e3:>12.1f}{diff:>10}"
                         f"{'p' + format(row['second_rank'], '.0f'):>10}")
    lines.append("2nd rank: where the first run's value falls among the second run's")
    return "\n".join(lines)


def _speeds(steps: list[dict[str, np.ndarray]], profile: str | None) -> list[dict[str, float]]:
    """Each run's steps against ``profile``: (with-prefill, decode-only) factors."""
    if profile is None:
        return []
    from sim.profilefile import load_profile

    prof = load_profile(profile, Path.cwd())
    out = []
    for st in steps:
        pre, dec = speed_factors(step_errors(st, prof)) if len(st["start_s"]) else (1.0, 1.0)
        out.append({"prefill_factor": pre, "decode_factor": dec})
    return out


def main(argv: list[str]) -> int:
    """Compare each ``--replay`` record with the ``--against`` record in its place."""
    p = argparse.ArgumentParser(
        prog="servesim validate --replay A --against B",
        description="Compare two real runs of the same requests: the repeatability floor.")
    p.add_argument("--replay", nargs="+", type=Path, required=True,
                   help="first runs: servesim-replay/1 JSON files")
    p.add_argument("--against", nargs="+", type=Path, required=True,
                   help="second runs of the same requests, one per --replay file, in order")
    p.add_argument("--profile", default=None,
                   help="a cost profile: also say how fast each run's steps ran against it")
    p.add_argument("--out", type=Path, default=Path("out") / "repeat", help="output folder")
    p.add_argument("--bar", type=float, default=None,
                   help="the validation bar the difference is set against (default 0.15 "
                        "on CPU, 0.10 on GPU, by the first run's device)")
    p.add_argument("--no-plots", action="store_true", help="skip the CDF plots")
    a = p.parse_args(argv)
    if len(a.replay) != len(a.against):
        raise ServesimError(f"got {len(a.replay)} --replay and {len(a.against)} --against "
                            "files; give one second run per first run", where="--against")
    levels = []
    for fa, fb in zip(a.replay, a.against, strict=True):
        ra, rb = load_record(fa), load_record(fb)
        first, qa, sa = recorded_run(ra, str(fa))
        second, qb, sb = recorded_run(rb, str(fb))
        check_same(ra, rb, qa, qb, (str(fa), str(fb)))
        label = str(ra.get("label", "level"))
        bar = a.bar or BARS.get((ra.get("device") or {}).get("type", "cpu"), 0.15)
        cmp = against(first, second)
        speeds = _speeds([sa, sb], a.profile)
        a.out.mkdir(parents=True, exist_ok=True)
        files = [a.out / f"first-{label}.csv", a.out / f"second-{label}.csv"]
        report.write_atomic(files[0], report.requests_csv(first))
        report.write_atomic(files[1], report.requests_csv(second))
        if not a.no_plots:
            files.append(a.out / f"cdf-{label}.png")
            # Two runs of one level are usually files of one name in two folders.
            report.plot_cdfs({f"first run ({fa.parent.name}/{fa.name})": first,
                              f"second run ({fb.parent.name}/{fb.name})": second}, files[-1])
        print(table(cmp, f"== {label}: {fa} against {fb}"))
        for name, s in zip(("first", "second"), speeds, strict=False):  # none without a profile
            print(f"{name} run: prefill steps at {s['prefill_factor']:.3f}x, decode-only "
                  f"steps at {s['decode_factor']:.3f}x the profile's price")
        worst = cmp["worst"]
        if worst is not None:
            print(f"TTFT/TPOT p50+p90: the two runs differ by up to {worst:.1%} "
                  f"({'within' if worst <= bar else 'more than'} the {bar:.0%} bar)")
        levels.append({"label": label, "level": ra.get("level"), "rate_rps": ra.get("rate_rps"),
                       "first": str(fa), "second": str(fb), "comparison": cmp,
                       "bar": bar, "speeds": speeds, "files": [str(f) for f in files]})
    path = a.out / "validation.json"
    report.write_atomic(path, (json.dumps(clean({"mode": "repeat", "levels": levels}), indent=2,
                                          allow_nan=False) + "\n").encode())
    print(f"wrote {path} and per-level CSVs and plots in {a.out}")
    return 0
