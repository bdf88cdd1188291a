"""``servesim compare``: one workload through several batching policies, on several
GPUs, or under several named variants of the scenario, side by side.

Each policy runs the same scenario file with only ``serving.policy`` changed (after any
``--set`` overrides), so the workload, model, hardware and limits are identical. With
``--gpus`` it is ``hardware.gpu`` that changes instead, each GPU priced by its own cost
model (a measured scenario takes each GPU's own shipped profile) and limited by its own
memory and vLLM defaults, the scenario's policy kept. With ``--variant NAME KEY=VALUE
...`` (repeated) each run changes the keys its variant names: a layout of tensor, data
and expert parallelism, speculative decoding on and off, another memory limit
(:mod:`sim.study.variants`). The GPU count is printed because layouts and
``disaggregated`` differ in it.
Outputs: a printed table (saturated runs marked), ``compare.csv`` (latencies in seconds,
a ``saturated`` column) with its description ``compare.csv.meta.json``
(:mod:`sim.report.csvmeta`), ``compare.json`` (every run's summary) and
``compare_cdf.png`` (TTFT and TPOT CDFs overlaid), written into a temporary folder that
then replaces ``--out`` whole (:mod:`sim.report.folder`).
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from sim.cliargs import ArgParser, comma_items
from sim.config.flagaxes import axis_key as _axis_key
from sim.errors import ServesimError
from sim.report.rejections import REFUSED, add_rejection_args, max_share, verdict
from sim.study.variants import (
    gpu_variants,
    load_named,
    named_variants,
    run_gpus,
    run_loaded,
    run_policies,
    runnable,
    variant_overrides,
)

DEFAULT_POLICIES = "static,continuous,orca,chunked,disaggregated"
# What one row of compare.csv is, by what the runs vary.
ROW_WORDS = {"policy": "batching policy", "gpu": "GPU", "variant": "named variant"}
COMPARE_FILES = ("compare.json", "compare.csv")  # what marks a folder as compare's outputs

# Percentiles of TTFT and TPOT in the table and CSV unless --percentiles says otherwise;
# ITL and E2E are given at the highest of them.
TABLE_PERCENTILES: tuple[float, ...] = (50, 99)


def columns(percentiles: tuple[float, ...] = TABLE_PERCENTILES,
            ) -> list[tuple[str, tuple[str, ...]]]:
    """(CSV column, path into a run's summary) of every measured column: latencies in
    seconds (``_s``), as in every CSV servesim writes; the printed table shows them in ms."""
    from sim.report.metrics import stat_key

    keys = [stat_key(p) for p in percentiles]
    cols: list[tuple[str, tuple[str, ...]]] = [("finished", ("requests", "finished")),
                                               ("rejected", ("requests", "rejected"))]
    cols += [(f"{m}_{k}_s", ("latency_s", m, k)) for m in ("ttft", "tpot") for k in keys]
    cols += [(f"{m}_{keys[-1]}_s", ("latency_s", m, keys[-1])) for m in ("itl", "e2e")]
    cols += [("output_tps", ("throughput", "output_tokens_per_s")),
             ("output_tps_per_gpu", ("throughput", "output_tokens_per_s_per_gpu")),
             ("goodput_rps", ("throughput", "goodput_requests_per_s")),
             ("preemptions", ("preemptions",))]
    return cols


def _cell(summary: dict[str, Any], keys: tuple[str, ...]) -> Any:
    v: Any = summary
    for k in keys:
        v = v[k]
    return v


def rows(runs: dict[str, tuple[Any, dict[str, Any]]],
         percentiles: tuple[float, ...] = TABLE_PERCENTILES,
         label: str = "policy") -> list[dict[str, Any]]:
    """One row per run: its ``label`` column (the policy, or the GPU), gpus, then
    :func:`columns`, then ``saturated`` (1 when the run's waiting queue kept growing: the
    server did not keep up with the load)."""
    return [{label: name, "gpus": s["gpus"],
             **{col: _cell(s, keys) for col, keys in columns(percentiles)},
             "saturated": int(bool(s["saturation"]["saturated"]))}
            for name, (_, s) in runs.items()]


def table(table_rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table, latencies in ms; saturated rows marked."""
    heads = list(table_rows[0]) if table_rows else ["policy"]

    def head(h: str) -> str:
        return f"{h[:-2]}_ms" if h.endswith("_s") else h

    def fmt(h: str, v: Any) -> str:
        if h == "saturated":
            return "SATURATED" if v else ""
        if v is None:
            return "-"
        if h.endswith("_s"):
            v = v * 1e3
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [[fmt(h, r[h]) for h in heads] for r in table_rows]
    widths = [max(len(head(h)), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(head(h).rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    if any(r["saturated"] for r in table_rows):
        lines.append("SATURATED: the waiting queue kept growing (the server did not keep up); "
                     "its latencies cover only the requests that got through")
    return "\n".join(lines)


def compare_parser() -> ArgParser:
    """The ``servesim compare`` command line."""
    p = ArgParser(prog="servesim compare",
                  description="Run one workload through several batching policies, on "
                              "several GPUs, or under several named variants of the "
                              "scenario, and compare latencies side by side.")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--policies", default=None,
                   help=f"comma-separated policy names (default {DEFAULT_POLICIES})")
    p.add_argument("--gpus", default=None,
                   help="comma-separated GPUs of the table, each with an optional :TP "
                        "(e.g. h100-sxm:2,b300): one run on each with the scenario's own "
                        "policy, instead of the policies")
    p.add_argument("--variant", dest="variants", action="append", nargs="+", default=None,
                   metavar=("NAME", "KEY=VALUE"),
                   help="a run named NAME with these scenario keys set (none: the scenario "
                        "as it is); repeat for each run, e.g. --variant tp8 hardware.tp=8 "
                        "--variant dp8 hardware.tp=1 hardware.dp=8 hardware.ep=8")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key for every run")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: out/<scenario name>-compare)")
    p.add_argument("--no-plots", action="store_true", help="skip the CDF plot")
    p.add_argument("--percentiles", default=None, metavar="P,P,...",
                   help="TTFT/TPOT percentiles of the table and CSV (ITL, E2E: the highest), "
                        "and of compare.json's latencies, e.g. 50,90,99,99.9")
    p.add_argument("--json", action="store_true",
                   help="print compare.json (every run's summary) on stdout, not the table")
    p.add_argument("--force", action="store_true",
                   help="run even when the estimated memory is over what this machine has free")
    add_rejection_args(p)
    return p


def _write(out: Path, inputs: list[Path], runs: dict[str, Any], table_rows: list[dict[str, Any]],
           varied: dict[str, Any], label: str, plots: bool) -> tuple[list[str], bytes]:
    """Write compare.csv (with its description, ``varied``: what the runs varied),
    compare.json and the CDF plot into ``out`` (replaced whole); the names written and
    compare.json's bytes."""
    from sim.report.folder import replaced_folder
    from sim.report.human import cost_phrase, setup_phrase
    from sim.report.outputs import plot_cdfs, summary_json, write_atomic, write_meta

    by_gpu = label == "gpu"
    first = next(iter(runs.values()))[1]
    name = first["scenario"]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(table_rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table_rows)
    names = ["compare.csv", "compare.json"]
    summaries = {k: json.loads(summary_json(s)) for k, (_, s) in runs.items()}
    blob = (json.dumps(summaries, indent=2) + "\n").encode()
    with replaced_folder(out, COMPARE_FILES, inputs=inputs) as stage:
        write_atomic(stage / names[0], buf.getvalue().encode())
        names.append(write_meta(
            stage / names[0], f"one row per {ROW_WORDS[label]}, every run on the same "
            "requests", list(table_rows[0]), first["simulated"],
            {**varied,
             "note": f"simulated describes the first {label}'s run; compare.json holds each "
                     "run's own"}).name)
        write_atomic(stage / names[1], blob)
        if plots:
            names.append("compare_cdf.png")
            title = (f"{name}: {len(runs)} GPUs ({', '.join(runs)}), policy "
                     f"{first['simulated']['policy']}" if by_gpu else
                     f"{name}: {len(runs)} variants ({', '.join(runs)})" if label == "variant"
                     else f"{name}: {setup_phrase(first['simulated'])}, {len(runs)} "
                     f"policies; cost: {cost_phrase(first['simulated'])}")
            plot_cdfs({k: r for k, (r, _) in runs.items()}, stage / names[-1], title)
    return names, blob


def main(argv: list[str]) -> int:
    """``servesim compare FILE --policies a,b,c`` (or ``--gpus g,h``, or ``--variant NAME
    KEY=VALUE ...`` repeated)."""
    a = compare_parser().parse_args(argv)
    limit = max_share(a)

    from sim.report.folder import check_replaceable
    from sim.report.metrics import parse_percentiles
    from sim.report.outputs import default_out

    pcts = None if a.percentiles is None else parse_percentiles(a.percentiles)
    given = [f for f, v in (("--policies", a.policies), ("--gpus", a.gpus),
                            ("--variant", a.variants)) if v is not None]
    if len(given) > 1:
        raise ServesimError(f"give one of --policies, --gpus or --variant, not "
                            f"{' and '.join(given)}: a comparison varies one thing (set the "
                            "rest with --set)", where=given[-1])
    from sim.config import scenario

    if a.variants is not None:
        label, variants = "variant", named_variants(a.variants)
        loaded = load_named(a.scenario, variants, a.overrides)
        inputs = sorted({f for sc in loaded.values() for f in scenario.input_files(sc)})
        varied: dict[str, Any] = {"variants": variants}
    else:
        label, loaded = ("gpu" if a.gpus is not None else "policy"), None
        listed = a.gpus if label == "gpu" else (DEFAULT_POLICIES if a.policies is None
                                                  else a.policies)
        # An empty item is a value left out, not one to skip (as --rates and --tp say).
        values = comma_items(listed, f"--{label}s" if label == "gpu" else "--policies",
                             "a comma list of GPUs (GPU or GPU:TP)" if label == "gpu" else
                             "a comma list of policies")
        if label == "gpu":
            # A --set inside hardware.gpu, which each run replaces, is refused as such
            # before reading the scenario with it (where a table GPU's figure is refused).
            variant_overrides(a.overrides, ["hardware.gpu=-"], "--gpus")
        # The scenario as the first GPU runs it: its own GPU and tp need not fit.
        raw = scenario.load_raw(a.scenario, a.overrides)
        # An override of what the runs vary is refused before anything runs.
        as_run = (variant_overrides(a.overrides, gpu_variants(values, raw)[values[0]],
                                    "--gpus", frozenset((_axis_key(raw, "tp"),)))
                  if label == "gpu" else
                  variant_overrides(a.overrides, ["serving.policy=chunked"], "--policies")[:-1])
        inputs = scenario.input_files(scenario.load(a.scenario, as_run))
        if label == "policy" and a.policies is None:
            # The default list may hold policies the scenario's settings refuse (static
            # with speculative decoding, say): those are left out, and said to be.
            values = runnable(a.scenario, a.overrides, values)
        varied = ({"hardware.gpu[:hardware.tp]": values} if label == "gpu"
                  else {"serving.policy": values})
    if a.out is not None:
        check_replaceable(a.out, COMPARE_FILES, inputs)  # before the runs
    if loaded is not None:
        runs = run_loaded(loaded, pcts, a.force)
    else:
        run = run_gpus if label == "gpu" else run_policies
        runs = run(a.scenario, values, a.overrides, pcts, a.force)
    table_rows = rows(runs, pcts or TABLE_PERCENTILES, label)
    first = next(iter(runs.values()))[1]
    name = first["scenario"]
    out = a.out if a.out is not None else default_out(name, "-compare", a.scenario)
    # Each run is judged as `simulate` judges it; the verdicts go into compare.json
    # (so that `report` on the folder says so) and the first is raised once all are written.
    refusals = []
    for value, (res, summary) in runs.items():
        refused = verdict(res, limit)
        if refused is not None:
            refusals.append(ServesimError(f"{label} {value}: {refused.message}",
                                          refused.source, refused.where))
            summary[REFUSED] = str(refusals[-1])
    names, blob = _write(out, inputs, runs, table_rows, varied, label, not a.no_plots)
    if a.json:  # every run's summary alone on stdout, for a program to read
        sys.stdout.write(blob.decode())
    else:
        paths = [out / n for n in names]
        print(f"scenario {name}: {len(next(iter(runs.values()))[0].requests)} requests; "
              "latencies in ms")
        print(table(table_rows))
        if label == "variant":
            for v, sets in varied["variants"].items():
                print(f"{v}: {' '.join(sets) or 'the scenario as it is'}")
        costs = {v: s["simulated"]["cost_source"] for v, (_, s) in runs.items()}
        if label == "gpu" or len(set(costs.values())) > 1:
            # Each GPU (or a variant that changed it) is priced by its own cost model.
            for v, source in costs.items():
                print(f"{v}: cost: {source}")
        for note in dict.fromkeys(n for _, s in runs.values()
                                  for n in s["simulated"].get("notes", ())):
            print(f"note: {note}")  # settings accepted without being priced
        print("wrote " + ", ".join(str(x) for x in paths))
    if refusals:
        raise refusals[0]
    return 0
