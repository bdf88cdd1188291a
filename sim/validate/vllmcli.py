"""``servesim validate --vllm-result FILE... --scenario S``: vLLM benchmark results
(``vllm bench serve --save-result --save-detailed``) against the scenario's prediction
for the same requests, one level per file (docs/validation.md, "vLLM benchmark results").

A file's requests are predicted as its client sent them (:func:`vllm_level`): at their
send times, or under a ``max_concurrency`` cap each when it fell due and a client was
free on the predicted server. One file is level ``vllm``; several (a sweep of rates or
caps) are ``vllm-STEM`` each, after the file's name, in the order given, and
``validation.json`` holds them all.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from sim.cliargs import ArgParser, int_arg
from sim.config.scenario import Scenario
from sim.core.engine import RunResult
from sim.core.request import FINISHED, REJECTED
from sim.errors import ServesimError
from sim.report.folder import check_replaceable, replaced_folder
from sim.report.metrics import distribution
from sim.validate import vllm_results
from sim.validate.levelio import common_args, finish_levels, unique_label, write_level, wrote
from sim.validate.validation import (
    BARS,
    VALIDATE_FILES,
    compare,
    real_result,
    simulate_requests,
    table,
    verdict,
    with_clients,
)
from sim.workload.requests import Requests


def vllm_parser() -> ArgParser:
    """The ``servesim validate --vllm-result`` command line."""
    p = ArgParser(prog="servesim validate --vllm-result",
                  description="Compare vLLM benchmark results with servesim.")
    p.add_argument("--vllm-result", type=Path, nargs="+", action="extend", required=True,
                   help="JSON of vllm bench serve --save-result --save-detailed (one or more: "
                        "a level each; the option may also be repeated)")
    p.add_argument("--scenario", required=True,
                   help="scenario YAML: model, hardware, cost and serving of that server")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="KEY=VALUE", help="override a scenario key")
    p.add_argument("--seed", type=int_arg(ge=0), default=0,
                   help="the benchmark's --seed (vLLM's default 0), to rebuild its send "
                        "times when the file has none")
    common_args(p)
    return p


# The most bytes of a file's name a level's label keeps: the label names the level's
# output files (predicted-LABEL.csv), which a file system caps at 255 bytes.
LABEL_BYTES = 100


def labels(paths: list[Path]) -> list[str]:
    """Each file's level label: ``vllm`` for one file; ``vllm-STEM`` for several (the
    file's name without ``.json``, its first :data:`LABEL_BYTES` bytes: each level's
    ``source`` keeps the whole path), ``~2``, ``~3``... after a name already taken."""
    if len(paths) == 1:
        return ["vllm"]
    out: list[str] = []
    for p in paths:
        stem = p.name.removesuffix(".json")
        while len(stem.encode("utf-8", "surrogateescape")) > LABEL_BYTES:
            stem = stem[:-1]
        out.append(unique_label(f"vllm-{stem}", out))
    return out


def vllm_level(path: Path, sc: Scenario, seed: int, bar: float | None, label: str
               ) -> tuple[dict[str, Any], RunResult, RunResult, vllm_results.VllmRun]:
    """Read one result file and predict its requests as its client sent them; (level
    summary, real run, predicted run, the file as read)."""
    run = vllm_results.load(path, seed)
    ok = ~run.failed
    reqs = Requests(run.arrival_s[ok], run.prompt_tokens[ok], run.output_tokens[ok])
    n = int(ok.sum())
    # The benchmark's client: its requests at their send times, or under a concurrency
    # cap each when it was due and a slot was free (the predicted server's, not vLLM's).
    sent = reqs if run.earliest_s is None else dataclasses.replace(
        reqs, arrival_s=run.earliest_s[ok])
    pred = simulate_requests(with_clients(sc, run.concurrency, n), sent, sc.workload.seed)
    if (pred.status == REJECTED).all():
        # Nothing would be compared: an empty table is no validation.
        reasons, counts = np.unique(pred.reason.astype(str), return_counts=True)
        raise ServesimError(
            f"scenario {sc.name} rejected all {n} requests that completed in vLLM "
            f"({', '.join(f'{r} {c}' for r, c in zip(reasons, counts, strict=True))}; longest "
            f"prompt {int(reqs.prompt_tokens.max())} tokens, prompt + output "
            f"{int((reqs.prompt_tokens + reqs.output_tokens).max())}): nothing to compare; "
            "check input_lens and output_lens against the scenario's model.max_context and "
            "serving limits", source=str(path))
    real = real_result(sc, reqs, reqs.arrival_s + run.ttft_s[ok],
                       reqs.arrival_s + run.e2e_s[ok], np.full(n, FINISHED, np.int8),
                       itls=[g for g, f in zip(run.itls_s, ok, strict=True) if f])
    cmp = compare(real, pred)
    cmp["failed_in_vllm"] = int(run.failed.sum())
    # Cross-check: our TTFT median from the per-request list against vLLM's own.
    ours = distribution(real.first_token - reqs.arrival_s)["p50"]
    agg = run.meta.get("aggregates_ms", {})
    check = {"median_ttft_ms": {"vllm": agg.get("median_ttft_ms"),
                                "from_requests": None if ours is None else ours * 1e3}}
    level: dict[str, Any] = {
        "label": label, "source": str(path), "scenario": sc.name,
        "arrivals": run.arrivals_note, "notes": list(run.notes), "vllm": run.meta,
        "comparison": cmp, "verdict": verdict(cmp, BARS["cuda"] if bar is None else bar),
        "cross_check": check}
    disagree = median_disagreement(agg.get("median_ttft_ms"), run.ttft_s[ok])
    if disagree:
        level["notes"].append(disagree)
    if (pred.status == REJECTED).any():
        level["notes"].append(f"{int((pred.status == REJECTED).sum())} requests rejected by "
                              f"the scenario's limits (see predicted-{label}.csv)")
    return level, real, pred, run


# How far (fraction) vLLM's median TTFT may sit from the lists' before it is said: the
# file's figure is a float of the same values, so only another run's (or another unit's)
# figure lands past it.
MEDIAN_TOLERANCE = 0.01


def median_disagreement(vllm_ms: float | None, ttft_s: np.ndarray) -> str | None:
    """A note when the file's ``median_ttft_ms`` (ms) is not the median of its completed
    requests' TTFTs (``ttft_s``, seconds) as vLLM takes it, else None. A note, not an
    error: a request vLLM counted apart from servesim's reading (an empty error text,
    an output of 0) moves the median innocently; a file stitched from two runs, or
    written in other units, moves it far, and the comparison uses the lists."""
    if vllm_ms is None or not len(ttft_s):
        return None
    ours = float(np.median(ttft_s)) * 1e3
    if abs(ours - vllm_ms) <= MEDIAN_TOLERANCE * max(ours, vllm_ms) + 1e-6:
        return None
    return (f"the file's median_ttft_ms {vllm_ms:g} is not the median of its completed "
            f"requests' ttfts ({ours:.4g} ms): the summary and the per-request lists "
            "disagree (another run's summary, or other units?); the lists are compared")


def print_vllm_level(level: dict[str, Any], run: vllm_results.VllmRun) -> None:
    """A level's comparison table, counts, notes and verdict, as printed."""
    cmp = level["comparison"]
    rate = run.meta.get("request_rate")
    print(table(cmp, f"== vLLM {run.meta.get('backend') or ''} {run.meta.get('model_id') or ''}"
                     f" at request_rate {rate} vs scenario {level['scenario']}"))
    print(f"failed in vLLM: {cmp['failed_in_vllm']} (kept out of both sides)")
    for note in [run.arrivals_note, *level["notes"]]:
        print(f"note: {note}")
    v = level["verdict"]
    if v["worst"] is not None:
        print(f"TTFT/TPOT p50+p90 worst |error| {v['worst']:.1%}")
    else:
        print(f"TTFT/TPOT p50+p90: not judged ({v['why']})")


def sweep_table(levels: list[dict[str, Any]]) -> str:
    """One line per level of several: its label, the client's rate and cap, TTFT and
    TPOT p50 (real and predicted, ms) and the verdict, for a sweep read at a glance."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.1f}"

    head = (f"{'level':<24}{'rate':>8}{'cap':>6}{'ttft p50':>18}{'tpot p50':>16}"
            f"{'worst':>8}  verdict")
    lines = ["levels (real / predicted, ms):", head, "-" * len(head)]
    for lv in levels:
        m = lv["comparison"]["metrics"]
        v = lv["verdict"]
        judged = ("not judged" if v["passed"] is None else
                  "within" if v["passed"] else "OVER") + f" the {v['bar']:.0%} bar"
        rate, cap = lv["vllm"].get("request_rate"), lv["vllm"].get("max_concurrency")
        lines.append(
            f"{lv['label']:<24}{rate if rate is not None else '-':>8}"
            f"{cap if cap else '-':>6}"
            f"{ms(m['ttft']['p50']['real']) + ' / ' + ms(m['ttft']['p50']['predicted']):>18}"
            f"{ms(m['tpot']['p50']['real']) + ' / ' + ms(m['tpot']['p50']['predicted']):>16}"
            f"{'-' if v['worst'] is None else format(v['worst'], '.1%'):>8}  {judged}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``servesim validate --vllm-result FILE... --scenario S``."""
    from sim.config import scenario as scenario_mod

    a = vllm_parser().parse_args(argv)
    sc = scenario_mod.load(a.scenario, a.overrides)
    files: list[Path] = a.vllm_result
    seen: dict[Path, Path] = {}
    for f in files:
        # One file twice would be two levels of one run, weighing it twice in the sweep.
        key = f.resolve()
        if key in seen:
            raise ServesimError(f"got {f} twice" + (f" (also as {seen[key]})"
                                                    if str(seen[key]) != str(f) else "")
                                + "; give each result file once", where="--vllm-result")
        seen[key] = f
    # --out is checked before the runs too, not only when their outputs are written.
    check_replaceable(a.out, VALIDATE_FILES, [*files, a.scenario])
    # Every file is read and predicted before anything is written.
    done = [vllm_level(f, sc, a.seed, a.bar, label)
            for f, label in zip(files, labels(files), strict=True)]
    for level, _, _, run in done:
        print_vllm_level(level, run)
    if len(done) > 1:
        print(sweep_table([lv for lv, _, _, _ in done]))
    with replaced_folder(a.out, VALIDATE_FILES, inputs=[*files, a.scenario]) as stage:
        for level, real, pred, _ in done:
            level["files"] = write_level(stage, a.out, level["label"], real, pred,
                                         not a.no_plots)
        finish_levels([lv for lv, _, _, _ in done], stage, {"mode": "vllm"})
    return wrote(a.out, not a.no_plots)
