"""``servesim validate``: measured latencies against the simulator's, request for request.

Four ways in (docs/validation.md):

- ``--model M [--profile P] --trace T [--rate R | --load F] [--policy P] [--device D]``:
  replay the trace for real on the device (:mod:`calibrate.replay`, imported only
  here), then simulate the same requests with the profile and compare. With no
  ``--profile``, a quick calibration runs first and says so.
- ``--replay FILE... --profile P``: compare replays recorded elsewhere (a GPU machine
  without the simulator writes them with ``python -m calibrate.replay_cli``).
- ``--vllm-result FILE --scenario S``: compare a ``vllm bench serve`` result with the
  scenario's prediction for the same request lengths. Needs no torch.
- ``--replay A... --against B...``: two real runs of the same requests against each
  other, the floor under any validation error on that machine (:mod:`sim.validate.repeat`).

Each level writes ``real-LABEL.csv``, ``predicted-LABEL.csv`` and ``cdf-LABEL.png``;
all levels' tables go to ``validation.json``; the tables are printed. Everything is
written into a temporary folder that replaces ``--out`` whole at the end
(:mod:`sim.report.folder`); files the run read from inside ``--out`` (records, a
profile) are kept. A real run interrupted (SIGINT) keeps what it recorded, a quick
calibration's profile and each finished level's ``replay-LABEL.json``, in
``OUT.interrupted``, leaving ``OUT`` as it was.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from sim.cliargs import ArgParser
from sim.configtools import load_json, refuse_half_character
from sim.core.engine import build_cost
from sim.errors import ServesimError
from sim.files import read_text
from sim.report import outputs as report
from sim.report.folder import replaced_folder
from sim.validate.levelio import (
    common_args,
    finish_levels,
    print_level,
    unique_label,
    write_level,
    wrote,
)
from sim.validate.replayfile import model_mismatch, read_record
from sim.validate.validation import (
    BARS,
    VALIDATE_FILES,
    compare,
    probe_report,
    replay_run,
    scenario_for,
    sensitivity,
    simulate_requests,
    speed_matched,
    step_errors,
    verdict,
)

INTERRUPTED = ".interrupted"  # where an interrupted real run's records are kept


def evaluate_replay(record: dict[str, Any], source: str, profile: str,
                    bar: float | None) -> tuple[dict[str, Any], Any, Any, Any]:
    """Simulate a replay record's requests with ``profile``; (level summary, real, pred,
    the speed-matched prediction or None for a record without steps)."""
    from sim.cost.profilefile import load_profile, resolve

    rec = read_record(record, source)
    requests, cols, steps = rec.requests, rec.cols, rec.steps
    path = resolve(profile, Path.cwd()).resolve()
    prof = load_profile(str(path))
    why = model_mismatch(prof, rec.model)
    if why:
        raise ServesimError(f"profile {profile}: {why}", where="--profile")
    label = rec.label
    try:
        sc = scenario_for(dataclasses.asdict(prof.model), rec.serving, {"profile": str(path)},
                          label)
    except ServesimError as exc:  # the record's serving limits: name the record
        raise ServesimError(exc.message, source, exc.where) from None
    real = replay_run(sc, requests, cols, steps)
    cost = build_cost(sc)
    pred = simulate_requests(sc, requests, cost=cost)
    cmp = compare(real, pred)
    bar = BARS.get(str(rec.device.get("type", "cpu")), 0.15) if bar is None else bar
    summary = step_errors(steps, prof)
    judged = verdict(cmp, bar)
    left = cmp["real"]["unfinished"]
    if left:
        # An interrupted replay finished its short requests first: what it finished is
        # compared, but a verdict on that subset would say nothing of the level.
        judged = {**judged, "passed": None,
                  "why": f"the real run was interrupted with {left} of {cmp['requests']} "
                         "requests unfinished"}
    level = {"label": label, "level": rec.level, "rate_rps": rec.rate_rps, "load": rec.load,
             "device": rec.device, "profile": str(path), "policy": sc.serving.policy,
             "notes": rec.notes, "comparison": cmp, "verdict": judged, "steps": summary,
             "probe": probe_report(rec.probe, prof)}
    matched = None
    if summary:
        level["speed_matched"], matched = speed_matched(sc, requests, real, cost, summary, bar)
        level["sensitivity"] = sensitivity(sc, requests, cost)
    return level, real, pred, matched


def _replay_main(argv: list[str]) -> int:
    p = ArgParser(prog="servesim validate --replay",
                                description="Compare recorded replays with the simulator.")
    p.add_argument("--replay", nargs="+", action="extend", type=Path, required=True,
                   help="servesim-replay/1 JSON files (python -m calibrate.replay_cli; the "
                        "option may be repeated)")
    p.add_argument("--profile", required=True, help="the cost profile to predict with")
    common_args(p)
    a = p.parse_args(argv)
    levels: list[dict[str, Any]] = []
    with replaced_folder(a.out, VALIDATE_FILES, inputs=[*a.replay, a.profile]) as stage:
        for f in a.replay:
            text = read_text(f, "replay")
            try:
                record = load_json(text, unique=False)
            except json.JSONDecodeError as exc:
                raise ServesimError(f"cannot read replay: {exc}", source=str(f)) from None
            refuse_half_character(text, record, str(f))
            level, real, pred, matched = evaluate_replay(record, str(f), a.profile, a.bar)
            # Two runs of one level: keep both files' outputs.
            level["label"] = unique_label(level["label"], {lv["label"] for lv in levels})
            level["files"] = write_level(stage, a.out, level["label"], real, pred,
                                          not a.no_plots, matched)
            print_level(level)
            levels.append(level)
        finish_levels(levels, stage, {"mode": "replay"})
    return wrote(a.out, not a.no_plots)


def _real_main(argv: list[str]) -> int:
    try:
        from calibrate.replay_cli import add_replay_args, check_args, prepare_levels, run_levels
    except ImportError as exc:
        raise ServesimError(f"validate --model runs the model for real and needs torch "
                            f"(install servesim[calibrate]): {exc}") from None
    p = ArgParser(
        prog="servesim validate",
        description="Replay a trace on this device's model and compare with the simulator.",
        epilog="Other modes: --replay FILE... --profile P (compare recorded replays); "
               "--replay A... --against B... (two real runs of the same requests); "
               "--vllm-result FILE --scenario S (compare a vLLM benchmark result); "
               "--silicon [CSV] (public end-to-end runs: AIConfigurator's silicon_sample.csv).")
    add_replay_args(p)
    common_args(p)
    a = p.parse_args(argv)

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)
    check_args(a)
    kept: list[str] = []  # what this run wrote: an interrupt keeps it in OUT.interrupted
    try:
        with replaced_folder(a.out, VALIDATE_FILES, inputs=[a.profile] if a.profile else [],
                             salvage=INTERRUPTED) as stage:
            _real_levels(a, stage, log, kept, prepare_levels, run_levels)
    except KeyboardInterrupt:
        if kept:
            log(f"interrupted: what was recorded ({', '.join(kept)}) is in "
                f"{a.out}{INTERRUPTED}; compare its replay-LABEL.json with --replay")
        raise
    return wrote(a.out, not a.no_plots)


def _real_levels(a: argparse.Namespace, stage: Path, log: Any, kept: list[str],
                 prepare_levels: Any, run_levels: Any) -> None:
    """Calibrate (no --profile), replay each level, compare: all written into ``stage``,
    each level's record as soon as it exists (its name appended to ``kept``)."""
    shown_profile = None
    if a.profile is None:
        made = _calibrate(a, stage, log)
        kept.append(made.name)
        a.profile = str(made)
        shown_profile = a.out / made.name
    spec, w, serving, rates, loads, _ = prepare_levels(
        a, log, None if shown_profile is None else str(shown_profile))

    def name(rec: dict[str, Any]) -> str:
        return f"replay-{rec['label']}.json"

    def keep(rec: dict[str, Any]) -> None:
        report.write_atomic(stage / name(rec), (json.dumps(rec, allow_nan=False)
                                                + "\n").encode())
        kept.append(name(rec))
    records = run_levels(spec, w, serving, rates, loads, a.device, a.dtype, a.threads,
                         a.trace, log, a.level_s, keep)
    levels = []
    for rec in records:
        raw = a.out / name(rec)
        level, real, pred, matched = evaluate_replay(rec, str(raw), a.profile, a.bar)
        if shown_profile is not None:  # where the profile will be, not where it is now
            level["profile"] = str(shown_profile.resolve())
        level["files"] = [str(raw), *write_level(stage, a.out, level["label"], real, pred,
                                                  not a.no_plots, matched)]
        print_level(level)
        levels.append(level)
    if any(lv["verdict"]["passed"] is False and lv["verdict"]["worst"] is not None
           for lv in levels):
        print(f"a level over the bar: run this again with --profile "
              f"{shown_profile or a.profile} and another --out, then compare the two runs' "
              "replay-LABEL.json with --replay FIRST --against SECOND to see how far this "
              "machine repeats itself at that load (docs/validation.md, Repeatability)")
    finish_levels(levels, stage, {"mode": "real", "trace": a.trace, "requests": a.requests})


def _calibrate(a: argparse.Namespace, stage: Path, log: Any) -> Path:
    """No --profile: a quick calibration of this model on this device, written to
    ``stage`` (OUT's temporary folder)."""
    from calibrate.arch import resolve_model
    from calibrate.run import CalibrationConfig, calibrate

    spec = resolve_model(a.model, a.hf_config)
    out = stage / f"profile-{a.device}-{spec.name}.yaml"
    log(f"no --profile given: calibrating {spec.name} on {a.device} first (quick grid) "
        f"into {a.out / out.name}")
    calibrate(CalibrationConfig(model=spec, out=out, device=a.device, dtype=a.dtype,
                                budget_s=120.0, quick=True, threads=a.threads, progress=False))
    return out


def main(argv: list[str]) -> int:
    """Dispatch on the mode; a :class:`ServesimError` propagates to ``sim.cli`` (exit 2)."""
    if any(x == "--silicon" or x.startswith("--silicon=") for x in argv):
        from sim.validate import siliconcli

        return siliconcli.main(argv)
    if any(x == "--vllm-result" or x.startswith("--vllm-result=") for x in argv):
        from sim.validate import vllmcli

        return vllmcli.main(argv)
    if any(x == "--against" or x.startswith("--against=") for x in argv):
        from sim.validate import repeat

        return repeat.main(argv)
    if any(x == "--replay" or x.startswith("--replay=") for x in argv):
        return _replay_main(argv)
    return _real_main(argv)
