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
same profile (:func:`sim.validate.validation.speed_factors`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sim.cliargs import ArgParser
from sim.configtools import load_json, refuse_half_character
from sim.core.engine import RunResult
from sim.errors import ServesimError
from sim.files import read_text, shown
from sim.report import outputs as report
from sim.report.metrics import clean
from sim.validate.levelio import unique_label, wrote
from sim.validate.replayfile import ReplayRecord, model_mismatch, read_record
from sim.validate.validation import (
    BARS,
    bar_value,
    compare,
    counts_text,
    replay_run,
    rows_text,
    scenario_for,
    speed_factors,
    step_errors,
    verdict,
)

# The scenario of a recorded run needs a cost section; nothing is simulated here.
_UNUSED_COST = {"linear": {"step_s": 1.0}}


def load_record(path: Path) -> Any:
    """A replay file's JSON (:func:`sim.validate.replayfile.read_record` checks it);
    unreadable files are errors."""
    text = read_text(path, "replay")
    try:
        record = load_json(text, unique=False)
    except json.JSONDecodeError as exc:
        raise ServesimError(f"cannot read replay: {exc}", source=str(path)) from None
    refuse_half_character(text, record, str(path))
    return record


def recorded_run(record: Any, source: str) -> tuple[RunResult, ReplayRecord]:
    """A replay record as a :class:`RunResult`, with the checked record
    (:func:`sim.validate.replayfile.read_record`)."""
    rec = read_record(record, source)
    try:
        sc = scenario_for(dict(rec.model), rec.serving, _UNUSED_COST, rec.label)
    except ServesimError as exc:  # name the record, not the scenario built from it
        raise ServesimError(exc.message, source, exc.where) from None
    return replay_run(sc, rec.requests, rec.cols, rec.steps), rec


def check_same(first: ReplayRecord, second: ReplayRecord, names: tuple[str, str]) -> None:
    """Raise unless both records ran the same requests on the same model under the same
    serving limits."""
    where = f"{names[0]} and {names[1]}"
    a, b = first.requests, second.requests
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
        sa, sb = getattr(first, part), getattr(second, part)
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                raise ServesimError(f"{where} ran under different {part}.{key} "
                                    f"({sa.get(key)!r} vs {sb.get(key)!r})", where="--against")


def against(first: RunResult, second: RunResult) -> dict[str, Any]:
    """Percentiles of both runs over the requests finished in both (seconds), the
    relative difference ``(second - first) / first`` and the percentile rank of the
    first run's value among the second's (percent, :func:`sim.validate.validation.compare`);
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
    return "\n".join([
        title,
        f"requests: {cmp['requests']}, compared {cmp['compared']} (finished in both runs); "
        f"first {counts_text(cmp['first'])}; second {counts_text(cmp['second'])}",
        *rows_text(cmp["metrics"], ("first", "second", "rel_diff", "second_rank"),
                   ("first ms", "second ms", "rel diff", "2nd rank")),
        "2nd rank: where the first run's value falls among the second run's"])


def speeds(steps: list[dict[str, np.ndarray]], prof: Any) -> list[dict[str, float] | None]:
    """Each run's steps against the profile ``prof``: its with-prefill and decode-only
    factors (measured over priced seconds), None for a record without steps."""
    out: list[dict[str, float] | None] = []
    for st in steps:
        if not len(st.get("start_s", ())):
            out.append(None)
            continue
        pre, dec = speed_factors(step_errors(st, prof))
        out.append({"prefill_factor": pre, "decode_factor": dec})
    return out


def judge(cmp: dict[str, Any], bar: float) -> tuple[bool | None, str]:
    """(whether the runs are within ``bar`` of each other, or None when not judged; the
    line that says so)."""
    left = cmp["first"]["unfinished"] + cmp["second"]["unfinished"]
    worst = cmp["worst"]
    if worst is None:
        return None, ("TTFT/TPOT p50+p90: not compared (no request finished in both runs "
                      "with a TTFT and a TPOT: outputs of one token have none)")
    if left:
        # An interrupted run finished its short requests first: the percentiles of what
        # it finished are not the level's.
        return None, (f"TTFT/TPOT p50+p90 differ by up to {worst:.1%} over the requests "
                      f"finished in both, not judged: {left} requests were left unfinished")
    within = worst <= bar
    return within, (f"TTFT/TPOT p50+p90: the two runs differ by up to {worst:.1%} "
                    f"({'within' if within else 'more than'} the {bar:.0%} bar)")


def _compare_pair(fa: Path, fb: Path, prof: Any, bar: float | None, out: Path,
                  taken: list[str], plots: bool, stage: Path | None = None) -> dict[str, Any]:
    """Compare the records in ``fa`` and ``fb``, write their CSVs (and plot) under the
    first record's label (numbered when ``taken`` already has it) into ``stage`` (the
    temporary folder that becomes ``out``; ``out`` itself when None), print the table;
    the level's entry for validation.json."""
    first, ra = recorded_run(load_record(fa), str(fa))
    second, rb = recorded_run(load_record(fb), str(fb))
    check_same(ra, rb, (str(fa), str(fb)))
    # One first run against several second runs: keep every pair's files.
    label = unique_label(ra.label, taken)
    if prof is not None:
        why = model_mismatch(prof, ra.model)
        if why:
            raise ServesimError(f"profile: {why}", where="--profile")
    bar = BARS.get(str(ra.device.get("type", "cpu")), 0.15) if bar is None else bar
    cmp = against(first, second)
    factors = speeds([ra.steps, rb.steps], prof) if prof is not None else []
    # Two runs of one level are usually files of one name in two folders.
    curves = {f"first run ({shown(fa.parent.name)}/{shown(fa.name)})": first,
              f"second run ({shown(fb.parent.name)}/{shown(fb.name)})": second}
    files = report.write_compared(out if stage is None else stage, label,
                                  {"first": first, "second": second}, curves if plots else None)
    print(table(cmp, f"== {label}: {fa} against {fb}"))
    for name, f in zip(("first", "second"), factors, strict=False):  # none without a profile
        print(f"{name} run: " + ("no steps recorded" if f is None else
                                 f"prefill steps at {f['prefill_factor']:.3f}x, decode-only "
                                 f"steps at {f['decode_factor']:.3f}x the profile's price"))
    within, line = judge(cmp, bar)
    print(line)
    return {"label": label, "level": ra.level, "rate_rps": ra.rate_rps,
            "first": str(fa), "second": str(fb), "comparison": cmp, "bar": bar,
            "within": within, "speeds": factors, "files": [str(out / f.name) for f in files]}


def main(argv: list[str]) -> int:
    """Compare each ``--replay`` record with the ``--against`` record in its place."""
    p = ArgParser(
        prog="servesim validate --replay A --against B",
        description="Compare two real runs of the same requests: the repeatability floor.")
    p.add_argument("--replay", nargs="+", action="extend", type=Path, required=True,
                   help="first runs: servesim-replay/1 JSON files (the option may be repeated)")
    p.add_argument("--against", nargs="+", action="extend", type=Path, required=True,
                   help="second runs of the same requests, one per --replay file, in order")
    p.add_argument("--profile", default=None,
                   help="a cost profile: also say how fast each run's steps ran against it")
    p.add_argument("--out", type=Path, default=Path("out") / "repeat", help="output folder")
    p.add_argument("--bar", type=bar_value, default=None,
                   help="the validation bar the difference is set against (default 0.15 "
                        "on CPU, 0.10 on GPU, by the first run's device)")
    p.add_argument("--no-plots", action="store_true", help="skip the CDF plots")
    a = p.parse_args(argv)
    if len(a.replay) != len(a.against):
        raise ServesimError(f"got {len(a.replay)} --replay and {len(a.against)} --against "
                            "files; give one second run per first run", where="--against")
    for fa, fb in zip(a.replay, a.against, strict=True):
        if fa.resolve() == fb.resolve():  # it would differ from itself by 0%, always
            raise ServesimError(f"got {fb}, the --replay file itself; give a second run "
                                "of the same requests", where="--against")
    prof = None
    if a.profile is not None:
        from sim.cost.profilefile import load_profile

        prof = load_profile(a.profile, Path.cwd())
    levels: list[dict[str, Any]] = []
    from sim.report.folder import replaced_folder
    from sim.validate.validation import VALIDATE_FILES

    inputs = [*a.replay, *a.against, *([a.profile] if a.profile else [])]
    with replaced_folder(a.out, VALIDATE_FILES, inputs=inputs) as stage:
        for fa, fb in zip(a.replay, a.against, strict=True):
            levels.append(_compare_pair(fa, fb, prof, a.bar, a.out,
                                        [lv["label"] for lv in levels], not a.no_plots, stage))
        report.write_atomic(stage / "validation.json", (json.dumps(
            clean({"mode": "repeat", "levels": levels}), indent=2, allow_nan=False)
            + "\n").encode())
    return wrote(a.out, not a.no_plots)
