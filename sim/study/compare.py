"""``servesim compare``: one workload through several batching policies, or on several
GPUs, side by side.

Each policy runs the same scenario file with only ``serving.policy`` changed (after any
``--set`` overrides), so the workload, model, hardware and limits are identical. With
``--gpus`` it is ``hardware.gpu`` that changes instead, each GPU priced by its own cost
model (a measured scenario takes each GPU's own shipped profile) and limited by its own
memory and vLLM defaults, the scenario's policy kept. The GPU count is printed because
``disaggregated`` uses its own prefill and decode pools.
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

from sim.config.flagaxes import axis_key as _axis_key
from sim.config.flagaxes import policy_setting
from sim.configtools import ArgParser, comma_items
from sim.errors import ServesimError
from sim.report.rejections import add_rejection_args, max_share, verdict

DEFAULT_POLICIES = "static,continuous,orca,chunked,disaggregated"
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


def gpus(scenario: Any) -> int:
    """GPUs the scenario's cluster uses (replicas x tp x pp over its pools)."""
    from sim.config.disagg import pools

    return sum(p.replicas * p.gpus_per_replica for p in pools(scenario))


def run_variants(path: str | Path, variants: dict[str, list[str]],
                 overrides: list[str] | None = None,
                 percentiles: tuple[float, ...] | None = None, force: bool = False,
                 flag: str = "--policies", replaceable: frozenset[str] = frozenset(),
                 ) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per variant, its ``KEY=VALUE`` settings applied
    after the ``overrides`` (:func:`variant_overrides`; ``flag`` names the option the
    variants come from, ``replaceable`` the keys a variant may take over from an
    override), all loaded before any runs (:func:`_run_loaded`)."""
    from sim.config import scenario

    return _run_loaded({label: scenario.load(path, variant_overrides(overrides or [], settings,
                                                                     flag, replaceable))
                        for label, settings in variants.items()}, percentiles, force)


def _run_loaded(loaded: dict[str, Any], percentiles: tuple[float, ...] | None,
                force: bool) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run each loaded scenario, its memory estimate checked first (``force``: not
    refused): {label: (RunResult, summary)}, ``percentiles`` those of each summary's
    latencies (default: the summary's own)."""
    from sim.core.budget import check
    from sim.core.engine import simulate
    from sim.report.metrics import PERCENTILES
    from sim.report.summary import summarize

    out = {}
    for label, sc in loaded.items():
        check(sc, force)
        res = simulate(sc)
        summary = summarize(res, percentiles or PERCENTILES)
        summary["gpus"] = gpus(sc)
        out[label] = (res, summary)
    return out


def variant_overrides(overrides: list[str], settings: list[str], flag: str,
                      replaceable: frozenset[str] = frozenset()) -> list[str]:
    """The ``--set`` ``overrides``, then one variant's ``settings`` (from ``flag``): a key
    in ``replaceable`` the variant sets replaces the override's (``--gpus h100-sxm:8``
    runs tp 8 whatever ``--set hardware.tp`` says); another it sets, or one inside it,
    is refused in an override, as the variant would drop it."""
    keys = [s.split("=", 1)[0].strip() for s in settings]
    kept = []
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in keys and key in replaceable:
            continue
        if key in keys:
            raise ServesimError(f"--set {o}: {flag} sets {key} for each run; leave it out",
                                where=flag)
        inside = next((k for k in keys if key.startswith(k + ".")), None)
        if inside is not None:
            raise ServesimError(f"--set {o} sets a key inside {inside}, which {flag} "
                                "replaces whole in each run, so it would be dropped; leave "
                                "it out", where=flag)
        kept.append(o)
    return [*kept, *settings]


def run_policies(path: str | Path, policies: list[str], overrides: list[str] | None = None,
                 percentiles: tuple[float, ...] | None = None, force: bool = False,
                 ) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per policy: {policy: (RunResult, summary)}, as
    :func:`run_variants` of ``serving.policy``; an unknown name lists the valid ones."""
    from sim.policies.registry import POLICIES

    if len(set(policies)) < len(policies):
        raise ServesimError(f"got {','.join(policies)!r}: each policy once", where="--policies")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ServesimError(f"unknown policy {unknown[0] if unknown else ''!r}; valid: "
                            f"{', '.join(sorted(POLICIES))}", where="--policies")
    from sim.config.scenario import load_raw

    raw = load_raw(path, overrides)
    try:
        sets = {p: [policy_setting(raw, p)] for p in policies}
    except ServesimError as exc:
        raise exc.located(str(path)) from None
    return run_variants(path, sets, overrides,
                        percentiles, force, "--policies")


def gpu_variants(names: list[str], raw: Any) -> dict[str, list[str]]:
    """Each ``GPU`` of the table or ``GPU:TP`` of ``--gpus`` as the settings of its run
    (``hardware.gpu``, and the tp where the scenario ``raw`` gives it when a degree is
    given: ``hardware.tp``, or a pasted vLLM flag); an unknown GPU, a bad degree or a
    repeated name is refused in one line."""
    from sim.cost.gpus import GPUS

    tp_key = _axis_key(raw, "tp")
    if not names:
        raise ServesimError(f"got no GPU; give one or more of {', '.join(sorted(GPUS))}",
                            where="--gpus")
    if len(set(names)) < len(names):
        raise ServesimError(f"got {','.join(names)!r}: each GPU once", where="--gpus")
    variants = {}
    for name in names:
        gpu, colon, tp = name.partition(":")
        if gpu not in GPUS:
            raise ServesimError(f"unknown gpu {gpu!r}; valid: {', '.join(sorted(GPUS))}",
                                where="--gpus")
        if colon and not (tp.isdigit() and int(tp) >= 1):
            raise ServesimError(f"got {name!r}: after a GPU, ':' takes its tensor-parallel "
                                "degree, a whole number from 1 (e.g. h100-sxm:2)",
                                where="--gpus")
        variants[name] = [f"hardware.gpu={gpu}", *([f"{tp_key}={int(tp)}"] if tp else [])]
    return variants


def run_gpus(path: str | Path, names: list[str], overrides: list[str] | None = None,
             percentiles: tuple[float, ...] | None = None, force: bool = False,
             ) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per ``GPU`` of the table or ``GPU:TP`` (its
    tensor-parallel degree too), setting ``hardware.gpu`` (and the tp): {name:
    (RunResult, summary)}. Each configuration is loaded before any runs (the scenario's
    own GPU and tp need not fit: ``h100-sxm:4`` for a 70B model in a scenario of one
    GPU); two names that run the same GPU at the same tp are refused."""
    from sim.config import scenario
    from sim.study.studyargs import refuse_pinned

    raw = scenario.load_raw(path, overrides)
    variants = gpu_variants(names, raw)
    tp = frozenset((_axis_key(raw, "tp"),))
    loaded = {name: scenario.load(path, variant_overrides(overrides or [], sets, "--gpus", tp))
              for name, sets in variants.items()}
    # h100-sxm and h100-sxm:1 are one configuration when the scenario's tp is 1.
    seen: dict[tuple[str, int], str] = {}
    for name, sc in loaded.items():
        key = (name.partition(":")[0], sc.hardware.tp)
        if key in seen:
            raise ServesimError(f"got {seen[key]!r} and {name!r}: both run {key[0]} at tp "
                                f"{key[1]}; each configuration once", where="--gpus")
        seen[key] = name
    sc = next(iter(loaded.values()))
    if sc.serving.policy == "disaggregated":
        # Each GPU's run would otherwise be the same pools under another name.
        tps = ",".join(n.partition(":")[2] for n in names if ":" in n)
        refuse_pinned(sc, "--gpus", ",".join(names), "gpu")
        refuse_pinned(sc, "--gpus", tps, "tp")
    return _run_loaded(loaded, percentiles, force)


def _runnable(path: str, overrides: list[str] | None, policies: list[str]) -> list[str]:
    """Those of ``policies`` the scenario at ``path`` accepts; each one left out is named
    on stderr with the reason; none accepted is the first one's error."""
    from sim.config import scenario

    ok: list[str] = []
    first: ServesimError | None = None
    raw = scenario.load_raw(path, overrides)
    for p in policies:
        try:
            scenario.load(path, [*(overrides or []), policy_setting(raw, p)])
        except ServesimError as exc:
            first = first or exc
            print(f"compare: left out {p}: {exc.message}", file=sys.stderr)
        else:
            ok.append(p)
    if not ok and first is not None:
        raise first
    return ok


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
                  description="Run one workload through several batching policies, or on "
                              "several GPUs, and compare latencies side by side.")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--policies", default=None,
                   help=f"comma-separated policy names (default {DEFAULT_POLICIES})")
    p.add_argument("--gpus", default=None,
                   help="comma-separated GPUs of the table, each with an optional :TP "
                        "(e.g. h100-sxm:2,b300): one run on each with the scenario's own "
                        "policy, instead of the policies")
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
           values: list[str], label: str, key: str, plots: bool) -> tuple[list[str], bytes]:
    """Write compare.csv (with its description), compare.json and the CDF plot into
    ``out`` (replaced whole); the names written and compare.json's bytes."""
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
            stage / names[0], f"one row per {'GPU' if by_gpu else 'batching policy'}, every "
            "run on the same requests", list(table_rows[0]), first["simulated"],
            {key: values,
             "note": f"simulated describes the first {label}'s run; compare.json holds each "
                     "run's own"}).name)
        write_atomic(stage / names[1], blob)
        if plots:
            names.append("compare_cdf.png")
            title = (f"{name}: {len(runs)} GPUs ({', '.join(values)}), policy "
                     f"{first['simulated']['policy']}" if by_gpu else
                     f"{name}: {setup_phrase(first['simulated'])}, {len(runs)} policies; "
                     f"cost: {cost_phrase(first['simulated'])}")
            plot_cdfs({k: r for k, (r, _) in runs.items()}, stage / names[-1], title)
    return names, blob


def main(argv: list[str]) -> int:
    """``servesim compare FILE --policies a,b,c`` (or ``--gpus g,h``)."""
    a = compare_parser().parse_args(argv)
    limit = max_share(a)

    from sim.report.folder import check_replaceable
    from sim.report.metrics import parse_percentiles
    from sim.report.outputs import default_out

    pcts = None if a.percentiles is None else parse_percentiles(a.percentiles)
    if a.gpus is not None and a.policies is not None:
        raise ServesimError("give --policies or --gpus, not both: a comparison varies one "
                            "thing (set the other with --set)", where="--gpus")
    by_gpu = a.gpus is not None
    label, key = ("gpu", "hardware.gpu[:hardware.tp]") if by_gpu else ("policy", "serving.policy")
    given = a.gpus if by_gpu else DEFAULT_POLICIES if a.policies is None else a.policies
    # An empty item is a value left out, not one to skip (as --rates and --tp say).
    values = comma_items(given, f"--{label}s" if by_gpu else "--policies",
                         "a comma list of GPUs (GPU or GPU:TP)" if by_gpu else
                         "a comma list of policies")
    from sim.config import scenario

    # The scenario as the first GPU runs it: its own GPU and tp need not fit.
    raw = scenario.load_raw(a.scenario, a.overrides)
    # An override of what the runs vary is refused before anything runs.
    as_run = (variant_overrides(a.overrides, gpu_variants(values, raw)[values[0]], "--gpus",
                                frozenset((_axis_key(raw, "tp"),))) if by_gpu else
              variant_overrides(a.overrides, ["serving.policy=chunked"], "--policies")[:-1])
    inputs = scenario.input_files(scenario.load(a.scenario, as_run))
    if not by_gpu and a.policies is None:
        # The default list may hold policies the scenario's settings refuse (static with
        # speculative decoding, say): those are left out, and said to be, not an error.
        values = _runnable(a.scenario, a.overrides, values)
    if a.out is not None:
        check_replaceable(a.out, COMPARE_FILES, inputs)  # before the runs
    run = run_gpus if by_gpu else run_policies
    runs = run(a.scenario, values, a.overrides, pcts, a.force)
    table_rows = rows(runs, pcts or TABLE_PERCENTILES, label)
    first = next(iter(runs.values()))[1]
    name = first["scenario"]
    out = a.out if a.out is not None else default_out(name, "-compare", a.scenario)
    names, blob = _write(out, inputs, runs, table_rows, values, label, key, not a.no_plots)
    if a.json:  # every run's summary alone on stdout, for a program to read
        sys.stdout.write(blob.decode())
    else:
        paths = [out / n for n in names]
        print(f"scenario {name}: {len(next(iter(runs.values()))[0].requests)} requests; "
              "latencies in ms")
        print(table(table_rows))
        if by_gpu:  # each GPU is priced by its own cost model: say which
            for g, (_, s) in runs.items():
                print(f"{g}: cost: {s['simulated']['cost_source']}")
        for note in dict.fromkeys(n for _, s in runs.values()
                                  for n in s["simulated"].get("notes", ())):
            print(f"note: {note}")  # settings accepted without being priced
        print("wrote " + ", ".join(str(x) for x in paths))
    # Each run is judged as `simulate` judges it, once all are written.
    for value, (res, _) in runs.items():
        refused = verdict(res, limit)
        if refused is not None:
            raise ServesimError(f"{label} {value}: {refused.message}", refused.source,
                                refused.where)
    return 0
