"""The content of ``servesim report``: one document per output folder, of any command.

A folder is recognised by the files its command wrote: ``capacity.json`` (capacity),
``sweep.json`` (sweep), ``compare.json`` (compare) or ``summary.json`` (simulate). Each
document opens with a one-sentence answer to the question its command asks, names the
model, GPUs, tp and cost source in its title, gives its tables with numbers written for
people (:mod:`sim.report.human`), captions every plot in words, and ends with what was
simulated: the resolved scenario its command recorded (``simulated``).

A document is a plain mapping: ``title``, ``subtitle``, ``answer``, ``lines``, ``tables``
(name, (header, rows), rows to mark as saturated), ``plots`` (file, caption).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sim.errors import ServesimError
from sim.report import human as h
from sim.report import shapes
from sim.report.slospec import SLO

Row = dict[str, Any]
Doc = dict[str, Any]
# (header, rows, indices of saturated rows)
Table = tuple[list[str], list[list[str]], set[int]]

KINDS = (("capacity", "capacity.json"), ("sweep", "sweep.json"), ("compare", "compare.json"),
         ("simulate", "summary.json"))

CAPTIONS = {
    "ttft_tpot_cdf.png": "How long requests waited for their first token (left) and between "
                         "later tokens (right): the share of finished requests at or below "
                         "each time, in milliseconds on a log scale. Dots mark the median "
                         "and the 99th percentile, vertical lines the per-request SLO "
                         "targets; a workload with classes adds one dashed curve per class.",
    "latency_over_time.png": "Each request's time to first token and time per output token "
                             "against when it arrived, with a rolling median; red lines "
                             "mark where the offered load changes between stages.",
    "compare_cdf.png": "Time to first token (left) and time per output token (right) of "
                       "every policy on the same requests: the share of finished requests "
                       "at or below each time, in milliseconds on a log scale. Dots mark "
                       "each policy's median and 99th percentile, vertical lines the SLO.",
    "latency_vs_rate.png": "Median, 90th and 99th percentile time to first token, time per "
                           "output token and end-to-end latency as the offered rate grows, "
                           "one colour per configuration (bars: 95% confidence over "
                           "seeds). Crosses mark saturated points, red lines the targets.",
    "throughput_vs_rate.png": "Requests completed per second (solid) and those within the "
                              "per-request SLO (dashed) against the rate offered, and output "
                              "tokens per second; the grey diagonal is the offered load, "
                              "which a cluster that keeps up follows.",
    "frontier.png": "99th percentile time to first token and time per output token against "
                    "output tokens per second, one line per configuration: lower and "
                    "further right is better; the wide grey line is the best any "
                    "unsaturated configuration reached.",
    "capacity_search.png": "Every rate the search tried on one replica, per target: dots "
                           "passed, crosses missed a target or saturated. Vertical lines "
                           "mark each candidate's highest passing rate, shaded bands its "
                           "95% confidence interval over seeds.",
}


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def kind_of(folder: Path) -> tuple[str, dict[str, Any]]:
    """The command that wrote ``folder`` and its main JSON file, parsed."""
    for kind, name in KINDS:
        f = folder / name
        if f.is_file():
            try:
                return kind, json.loads(f.read_text())
            except (OSError, ValueError, RecursionError) as exc:
                raise ServesimError(f"cannot read {name}: {exc}", str(folder)) from None
    raise ServesimError("no summary.json, compare.json, sweep.json or capacity.json here; "
                        "give the --out folder of servesim simulate, compare, sweep or "
                        "capacity", str(folder))


def collect(folder: Path) -> Doc:
    """The document of the run in ``folder`` (see the module's docstring); a main file
    that is not what its command writes is one error naming it, the key and the value."""
    kind, blob = kind_of(folder)
    source = str(folder / dict(KINDS)[kind])
    shapes.check(blob, kind, source)
    try:
        doc = {"simulate": _simulate, "compare": _compare, "sweep": _sweep,
               "capacity": _capacity}[kind](folder, blob)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
            ArithmeticError) as exc:
        # What the shape check cannot say (a statistic one metric has and another
        # lacks) still ends as one line naming the file, not a traceback.
        raise shapes.unreadable(exc, kind, source) from None
    doc["plots"] = [(p, CAPTIONS.get(p, p)) for p in doc["plots"] if (folder / p).is_file()]
    for p, _ in doc["plots"]:
        with open(folder / p, "rb") as fh:
            head = fh.read(8)
        if head != PNG_SIGNATURE:  # a broken image would be embedded without a word
            raise ServesimError(f"not a PNG image (it starts {head!r}); run the command "
                                "again, or delete the file to report without it",
                                str(folder / p))
    return doc


def _heading(kind: str, name: str | None, sim: dict[str, Any] | None,
             tps: list[int] | None = None) -> tuple[str, str]:
    """Title (scenario, model, GPUs, tp) and subtitle (command, cost source)."""
    if sim is None:  # a folder written before runs recorded what they simulated
        return (f"servesim {kind}: {name or 'scenario'}",
                "model, GPU and cost source not recorded")
    title = f"{name or 'scenario'}: {h.setup_phrase(sim, tps)}, cost: {h.cost_phrase(sim)}"
    return title, f"servesim {kind} · scenario file {sim.get('file')}"


def _slo_text(slo: dict[str, Any]) -> str:
    parts = [f"{k[:-2].upper()} ≤ {v * 1e3:g} ms" for k, v in slo.items() if v is not None]
    return " and ".join(parts)


def _pick(d: dict[str, Any], want: str, last: bool) -> str:
    """``want`` (``p50``, ``p99``) when the summary has it, else its lowest or highest
    percentile (a run given other ``--percentiles``)."""
    if want in d:
        return want
    ps = [k for k in d if k.startswith("p")]
    return ps[-1] if last else ps[0]


# ---------------------------------------------------------------------- simulate
def simulate_answer(s: dict[str, Any]) -> str:
    """One sentence: setup, offered load, TTFT and TPOT tails, SLO attainment."""
    sim = s["simulated"]
    lat, tp, sat = s["latency_s"], s["throughput"], s["saturation"]
    hi = _pick(lat["ttft"], "p99", True)
    offered = sat.get("offered_rps")
    load = (f"at {h.req_s(offered)} offered" if offered is not None
            else f"at {h.req_s(tp['requests_per_s'])} served")
    slo = _slo_text(tp["slo"])
    if "classes" in s:
        meets = f"{h.pct(tp['slo_attainment'])} of requests meet their class's SLO"
    elif slo:
        meets = f"{h.pct(tp['slo_attainment'])} of requests meet the SLO ({slo})"
    else:
        meets = "no SLO is set"
    text = (f"{h.setup_with_cost(sim)}, {s['policy']} policy: {load}, "
            f"TTFT {hi} {h.ms(lat['ttft'][hi])} and TPOT {hi} {h.ms(lat['tpot'][hi])}; "
            f"{meets}")
    if sat.get("saturated"):
        text += (f"; saturated: the waiting queue grew by "
                 f"{h.req_s(sat.get('queue_growth_rps'))}")
    return text + "."


def _latency_table(lat: dict[str, Any]) -> Table:
    stats = list(lat["ttft"])
    names = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e": "E2E",
             "queueing": "queueing"}
    rows = [[names.get(m, m), *(h.ms(d[k]) for k in stats)] for m, d in lat.items()]
    return ["latency", *stats], rows, set()


def _run_table(s: dict[str, Any]) -> Table:
    rq, tp, b, kv = s["requests"], s["throughput"], s["batch"], s["kv"]
    ended = ", ".join(f"{h.count(rq[k])} {k.replace('_', ' ')}"
                      for k in ("rejected", "unfinished", "timed_out", "failed", "not_arrived")
                      if rq.get(k))
    rows = [
        ["requests", f"{h.count(rq['total'])} sent, {h.count(rq['finished'])} finished"
                     + (f"; {ended}" if ended else "")],
        ["throughput", f"{h.req_s(tp['requests_per_s'])}, "
                       f"{h.tok_s(tp['output_tokens_per_s'])} output"],
        ["goodput", f"{h.req_s(tp['goodput_requests_per_s'])} "
                    f"({h.pct(tp['slo_attainment'])} within the SLO)"],
        ["per-request SLO", "per class, below" if "classes" in s
         else _slo_text(tp["slo"]) or "none set"],
        ["iterations", f"{h.count(b['iterations'])}, mean {h.number(b['mean_seqs'])} "
                       f"sequences and {h.number(b['mean_tokens'])} tokens each"],
        ["KV cache", f"{h.count(kv['blocks_per_replica'][0])} blocks of "
                     f"{kv['block_size']} tokens per replica; mean use "
                     f"{h.pct(kv['mean_utilization'])}, peak {h.pct(kv['peak_utilization'])}"],
        ["preemptions", h.count(s["preemptions"])],
        ["simulated span", f"{h.number(s['span_s'])} s"],
    ]
    sat = s.get("saturation") or {}
    rows.append(["saturated", "yes: the waiting queue kept growing" if sat.get("saturated")
                 else "no"])
    return ["", "value"], rows, {len(rows) - 1} if sat.get("saturated") else set()


def _class_table(classes: dict[str, Any]) -> Table:
    head = ["class", "requests", "finished", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99",
            "goodput", "within SLO", "SLO"]
    rows = []
    for name, c in classes.items():
        lat, tp = c["latency_s"], c["throughput"]
        rows.append([name, h.count(c["requests"]["total"]), h.count(c["requests"]["finished"]),
                     h.ms(lat["ttft"]["p50"]), h.ms(lat["ttft"]["p99"]),
                     h.ms(lat["tpot"]["p50"]), h.ms(lat["tpot"]["p99"]),
                     h.req_s(tp["goodput_requests_per_s"]), h.pct(tp["slo_attainment"]),
                     _slo_text(tp["slo"]) or "none"])
    return head, rows, set()


def _simulate(folder: Path, s: dict[str, Any]) -> Doc:
    sim = s.get("simulated")
    title, sub = _heading("simulate", s.get("scenario"), sim)
    tables = [("Latency", _latency_table(s["latency_s"])), ("Requests and throughput",
                                                            _run_table(s))]
    if "classes" in s:
        tables.append(("Per workload class", _class_table(s["classes"])))
    if sim:
        tables.append(("What was simulated", setup_table(sim)))
    return {"title": title, "subtitle": sub,
            "answer": simulate_answer(s) if sim else "", "lines": [], "tables": tables,
            "plots": ["ttft_tpot_cdf.png", "latency_over_time.png"]}


# ---------------------------------------------------------------------- compare
def by_gpu(runs: dict[str, Any]) -> bool:
    """Whether a compare folder's runs differ by GPU (``compare --gpus``: one policy, a
    GPU, or a GPU and tensor-parallel degree, a run) rather than by policy."""
    sims = [s.get("simulated") for s in runs.values()]
    if len(sims) < 2 or any(sim is None for sim in sims):
        return False
    gpus = {tuple((str(p["gpu"]), p.get("tp")) for p in sim["pools"].values())
            for sim in sims}
    return len(gpus) == len(sims) and len({sim["policy"] for sim in sims}) == 1


def compare_answer(runs: dict[str, Any]) -> str:
    """One sentence: which policy (or GPU) serves the most within the SLO, which
    saturated."""
    first = next(iter(runs.values()))
    sim = first["simulated"]
    gpu = by_gpu(runs)
    hi = _pick(first["latency_s"]["ttft"], "p99", True)
    sat = [p for p, s in runs.items() if s["saturation"]["saturated"]]
    ok = {p: s for p, s in runs.items() if p not in sat} or runs

    def good(p: str) -> float:
        return ok[p]["throughput"]["goodput_requests_per_s"] or 0.0

    best = max(ok, key=good)
    b = ok[best]
    lead = (f"{h.model_name(str(sim['model']['name']))} under {sim['policy']} on "
            f"{len(runs)} GPUs, each priced by its own cost model," if gpu else
            f"{h.setup_with_cost(sim)}, {len(runs)} policies")
    text = (f"{lead} on the same {h.count(first['requests']['total'])} requests: {best} "
            f"serves the most within the SLO "
            f"({h.req_s(b['throughput']['goodput_requests_per_s'])}; TTFT {hi} "
            f"{h.ms(b['latency_s']['ttft'][hi])}, TPOT {hi} {h.ms(b['latency_s']['tpot'][hi])})")
    if len(sat) == len(runs):
        text += f"; every {'GPU' if gpu else 'policy'} saturated (none kept up with the load)"
    elif sat:
        text += f"; saturated (did not keep up): {', '.join(sat)}"
    return text + "."


def _compare_table(runs: dict[str, Any]) -> Table:
    first = next(iter(runs.values()))["latency_s"]["ttft"]
    lo, hi = _pick(first, "p50", False), _pick(first, "p99", True)
    head = ["GPU" if by_gpu(runs) else "policy", "GPUs", "finished", "rejected",
            f"TTFT {lo}", f"TTFT {hi}",
            f"TPOT {lo}", f"TPOT {hi}", f"ITL {hi}", f"E2E {hi}", "output", "goodput",
            "preemptions", "saturated"]
    rows, marked = [], set()
    for i, (policy, s) in enumerate(runs.items()):
        lat, tp, rq = s["latency_s"], s["throughput"], s["requests"]
        sat = bool(s["saturation"]["saturated"])
        if sat:
            marked.add(i)
        rows.append([policy, str(s.get("gpus", "")), h.count(rq["finished"]),
                     h.count(rq["rejected"]), h.ms(lat["ttft"][lo]), h.ms(lat["ttft"][hi]),
                     h.ms(lat["tpot"][lo]), h.ms(lat["tpot"][hi]), h.ms(lat["itl"][hi]),
                     h.ms(lat["e2e"][hi]), h.tok_s(tp["output_tokens_per_s"]),
                     h.req_s(tp["goodput_requests_per_s"]), h.count(s["preemptions"]),
                     "SATURATED" if sat else "no"])
    return head, rows, marked


def _compare(folder: Path, runs: dict[str, Any]) -> Doc:
    if not runs:
        raise ServesimError("compare.json holds no run", str(folder))
    first = next(iter(runs.values()))
    sim = first.get("simulated")
    title, sub = _heading("compare", first.get("scenario"), sim)
    if by_gpu(runs):
        title = (f"{first.get('scenario') or 'scenario'}: "
                 f"{h.model_name(str(sim['model']['name']))} on {', '.join(runs)}, "
                 f"policy {sim['policy']}")
        costs = [[g, h.cost_phrase(s["simulated"])] for g, s in runs.items()]
        tables = [("GPUs side by side", _compare_table(runs)),
                  ("Cost model of each GPU's run", (["GPU", "cost source"], costs, set())),
                  ("What was simulated (first GPU's run)", setup_table(sim))]
        return {"title": title, "subtitle": sub, "answer": compare_answer(runs),
                "lines": [], "tables": tables, "plots": ["compare_cdf.png"]}
    tables = [("Policies side by side", _compare_table(runs))]
    if sim:
        tables.append(("What was simulated (first policy's run)", setup_table(sim)))
    return {"title": title, "subtitle": sub, "answer": compare_answer(runs) if sim else "",
            "lines": [], "tables": tables, "plots": ["compare_cdf.png"]}


# ---------------------------------------------------------------------- sweep
def _slos(manifest: dict[str, Any]) -> list[SLO]:
    return [SLO(s["metric"], s["stat"], float(s["limit_s"]))
            for s in manifest.get("slo_targets", [])]


def _config(g: Row) -> str:
    n = int(g["replicas"])
    pp = int(g.get("pp") or 1)
    return (f"{g['policy']}, {n} replica{'s' if n != 1 else ''} × tp {int(g['tp'])}"
            + (f" × pp {pp}" if pp != 1 else ""))


def sweep_answer(manifest: dict[str, Any], grid: list[Row]) -> str:
    """One sentence: the highest rate any configuration served without saturating and
    within the ``--slo`` targets, and how many points saturated."""
    slos = _slos(manifest)
    ok = [g for g in grid if not g["saturated"] and all(s.met(g.get(s.column)) for s in slos)]
    goal = (f"met {' and '.join(_slo_label(s) for s in slos)} without saturating" if slos
            else "kept up without saturating")
    sim = manifest.get("simulated")
    lead = h.setup_with_cost(sim, manifest.get("tp")) if sim else str(manifest.get("scenario"))
    rates = manifest["rates"]
    span = f"{rates[0]:g} to {rates[-1]:g} req/s" if len(rates) > 1 else f"{rates[0]:g} req/s"
    if ok:
        best = max(ok, key=lambda g: (g["rate"], -g["replicas"] * g["tp"]))
        text = (f"{lead}, rates {span}: the highest rate that {goal} is "
                f"{best['rate']:g} req/s, with {_config(best)}")
    else:
        text = f"{lead}, rates {span}: no point {goal}"
    n_sat = sum(1 for g in grid if g["saturated"])
    return text + f"; {n_sat} of {len(grid)} points saturated."


def _slo_label(s: SLO) -> str:
    return f"{s.metric.upper()} {s.stat} ≤ {s.limit_s * 1e3:g} ms"


def _ms_ci(v: float | None, ci: float | None) -> str:
    return h.ms(v) if not ci else f"{h.ms(v)} ± {h.ms(ci)}"


def sweep_table(manifest: dict[str, Any], grid: list[Row]) -> Table:
    """The grid (one row per point, means ± 95% CI over seeds), saturated rows marked."""
    slos = _slos(manifest)
    head = ["policy", "replicas", "tp", "rate", "seeds", "TTFT p50", "TTFT p99",
            "TPOT p50", "TPOT p99", "E2E p99", "throughput", "goodput", "output",
            "saturated"]
    if slos:
        head.append("meets " + ", ".join(_slo_label(s) for s in slos))
    rows, marked = [], set()
    for i, g in enumerate(grid):
        cells = [str(g["policy"]), f"{g['replicas']:g}", f"{g['tp']:g}", f"{g['rate']:g} req/s",
                 f"{g['seeds']:g}"]
        cells += [_ms_ci(g[c], g.get(f"{c}_ci")) for c in ("ttft_p50", "ttft_p99", "tpot_p50",
                                                            "tpot_p99", "e2e_p99")]
        cells += [h.req_s(g["throughput_rps"]), h.req_s(g["goodput_rps"]),
                  h.tok_s(g["output_tps"])]
        if g["saturated"]:
            marked.add(i)
            cells.append("SATURATED" if g["saturated"] >= 1 else
                         f"SATURATED in {h.pct(g['saturated'])} of seeds")
        else:
            cells.append("no")
        if slos:
            met = not g["saturated"] and all(s.met(g.get(s.column)) for s in slos)
            cells.append("yes" if met else "no")
        rows.append(cells)
    return head, rows, marked


def _sweep(folder: Path, manifest: dict[str, Any]) -> Doc:
    from sim.study.sweep import csv_rows

    grid = csv_rows(shapes.read_sweep_csv(folder / "sweep.csv",
                                          [s.column for s in _slos(manifest)]))
    sim = manifest.get("simulated")
    title, sub = _heading("sweep", manifest.get("scenario"), sim, manifest.get("tp"))
    slos = ", ".join(_slo_label(s) for s in _slos(manifest)) or "none"
    lines = [f"Rates: {', '.join(f'{r:g}' for r in manifest['rates'])} req/s (whole "
             f"cluster); policies: {', '.join(manifest['policies'])}; replicas: "
             f"{', '.join(map(str, manifest['replicas']))}; tp: "
             f"{', '.join(map(str, manifest['tp']))}",
             f"Seeds: {', '.join(map(str, manifest['seeds']))}; targets: {slos}. "
             "Latencies are means over seeds ± the 95% confidence half-width."]
    tables = [("Sweep results", sweep_table(manifest, grid))]
    if sim:
        tables.append(("What was simulated (the base scenario; the sweep varies policy, "
                       "replicas, tp, rate and seed)", setup_table(sim)))
    return {"title": title, "subtitle": sub, "answer": sweep_answer(manifest, grid),
            "lines": lines, "tables": tables, "plots": manifest.get("plots", [])}


# ---------------------------------------------------------------------- capacity
def capacity_answer(blob: dict[str, Any]) -> str:
    """One sentence: the cheapest configuration for the target, or the highest rate one
    replica sustains within the targets."""
    sim = blob.get("simulated")
    what = h.setup_with_cost(sim) if sim else "This scenario"
    slos = " and ".join(_slo_label(s) for s in _slos(blob))
    gpu = h.gpu_name(next(iter(sim["pools"].values()))["gpu"]) if sim else "GPU"
    best, target = blob.get("best"), blob.get("target_rate")
    top = max(blob["max_rate_per_replica"], key=lambda m: m["max_rate_per_replica"] or 0.0,
              default=None)
    one = (f"one replica sustains at most {h.req_s(top['max_rate_per_replica'])} "
           f"({top['policy']}, tp {_tp(top)})" if top else "no candidate was searched")
    if target is not None and best:
        usd = (f", {h.number(best['usd_per_mtok'])} $ per million output tokens"
               if best.get("usd_per_mtok") else "")
        return (f"{what}: for {target:g} req/s within {slos}, the cheapest configuration "
                f"is {best['policy']} on {best['replicas']} replica(s) × tp {_tp(best)} = "
                f"{best['gpus']}× {gpu}{usd}; {one}.")
    if target is not None:
        return (f"{what}: no candidate met {slos} at {target:g} req/s within the replica "
                f"counts tried; {one}.")
    return f"{what}: within {slos}, {one}."


def _tp(row: Row) -> str:
    """A candidate's tensor-parallel degree, with its pipeline stages when it has some."""
    pp = int(row.get("pp") or 1)
    return str(row["tp"]) + (f" × pp {pp}" if pp != 1 else "")


def capacity_tables(blob: dict[str, Any]) -> list[tuple[str, Table]]:
    """Maximum rate per replica per candidate, and the configurations checked at the target."""
    out: list[tuple[str, Table]] = []
    head = ["policy", "tp", "max rate per replica", "95% CI", "seeds", "per seed (req/s)"]
    rows = [[str(m["policy"]), _tp(m), h.req_s(m["max_rate_per_replica"]),
             h.DASH if m["ci_low"] is None
             else f"{h.number(m['ci_low'])} – {h.number(m['ci_high'])} req/s",
             str(m["seeds"]), str(m["per_seed"]).replace(" ", ", ")]
            for m in blob["max_rate_per_replica"]]
    out.append(("Highest rate per replica meeting the targets", (head, rows, set())))
    if blob.get("target_rate") is not None:
        head = ["policy", "replicas", "tp", "GPUs", "meets targets", "TTFT p99", "TPOT p99",
                "output", "GPU-hours per M output tokens", "$ per M output tokens",
                "saturated"]
        rows, marked = [], set()
        for i, c in enumerate(blob["checked"]):
            if c.get("saturated"):
                marked.add(i)
            rows.append([str(c["policy"]), str(c["replicas"]), _tp(c), str(c["gpus"]),
                         "yes" if c["passed"] else "no", h.ms(c["ttft_p99"]),
                         h.ms(c["tpot_p99"]), h.tok_s(c["output_tps"]),
                         h.number(c["gpu_hours_per_mtok"]), h.number(c["usd_per_mtok"]),
                         "SATURATED" if c.get("saturated") else "no"])
        out.append((f"Configurations checked at {blob['target_rate']:g} req/s",
                    (head, rows, marked)))
    return out


def _capacity(folder: Path, blob: dict[str, Any]) -> Doc:
    sim = blob.get("simulated")
    name = Path(str(sim["file"])).stem if sim else None
    title, sub = _heading("capacity", name, sim)
    slos = ", ".join(_slo_label(s) for s in _slos(blob)) or "none"
    lines = [f"Targets: {slos}; seeds: {', '.join(map(str, blob['seeds']))}; search "
             f"tolerance {blob['tol']:.0%} of the rate"]
    if blob.get("redundancy") and blob.get("best_with_redundancy"):
        r = blob["best_with_redundancy"]
        lines.append(f"With N+{blob['redundancy']} redundancy: {r['replicas']} replicas = "
                     f"{r['gpus']} GPUs")
    tables = capacity_tables(blob)
    if sim:
        tables.append(("What was simulated (the base scenario; the search varies policy, "
                       "tp, replicas and rate)", setup_table(sim)))
    return {"title": title, "subtitle": sub, "answer": capacity_answer(blob), "lines": lines,
            "tables": tables, "plots": ["capacity_search.png"]}


# ---------------------------------------------------------------------- setup
def _settings(section: dict[str, Any]) -> str:
    """A section's settings as ``key value`` pairs; nested ones in braces."""
    def one(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} {one(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + "; ".join(one(x) for x in v) + "]"
        return f"{v:g}" if isinstance(v, float) else str(v)
    return ", ".join(f"{k} {one(v)}" for k, v in section.items())


def _features(pool: dict[str, Any]) -> str:
    """A pool's serving features beyond plain batching (a ``simulated`` pool's optional
    keys), in words; "" when it has none."""
    keys = ("speculative", "prefix_caching", "preemption", "priority", "kv_offload",
            "scheduler_recv_interval")
    parts = []
    for k in keys:
        if k not in pool:
            continue
        v = pool[k]
        parts.append(k.replace("_", " ") if v is True else
                     f"{k.replace('_', ' ')} {_settings(v) if isinstance(v, dict) else v}")
    return "; ".join(parts)


def setup_table(sim: dict[str, Any]) -> Table:
    """The resolved scenario (a ``simulated`` section) as rows of setting and value."""
    m = sim["model"]
    dims = ", ".join(f"{k} {m[k]}" for k in ("layers", "hidden", "heads", "kv_heads",
                                             "head_dim", "intermediate", "vocab") if k in m)
    rows = [["model", f"{h.model_name(str(m['name']))} ({dims}; weights {m.get('dtype')}, "
                      f"KV {m.get('kv_dtype')}; context {h.count(m.get('max_context'))})"]]
    for role, p in sim["pools"].items():
        pool = "" if role == "both" else f" ({role})"
        budget = "none" if p["token_budget"] is None else p["token_budget"]
        limits = (f"max_num_seqs {p['max_num_seqs']}, max_num_batched_tokens "
                  f"{p['max_num_batched_tokens']}, token budget {budget}, "
                  f"block size {p['block_size']}, watermark {p['watermark']:g}")
        if p.get("long_prefill_token_threshold"):
            limits += f", long_prefill_token_threshold {p['long_prefill_token_threshold']}"
        if p.get("stream_interval"):  # ITL is then one gap a streamed chunk
            limits += f", stream_interval {p['stream_interval']} (ITL per chunk)"
        rows.append([f"cluster{pool}", f"{p['replicas']} replica(s) × tp {p['tp']} on "
                                       f"{h.gpu_name(str(p['gpu']))}, router {p['router']}"])
        rows.append([f"serving{pool}", f"{p['policy']}: {limits}"])
        features = _features(p)
        if features:
            rows.append([f"serving features{pool}", features])
        if p.get("kv_blocks_per_replica"):
            blocks = sorted(set(p["kv_blocks_per_replica"]))
            rows.append([f"KV blocks per replica{pool}", ", ".join(h.count(b) for b in blocks)])
    for key in ("admission", "faults"):
        if sim.get(key):
            rows.append([key, _settings(sim[key])])
    rows += [["cost source", h.cost_phrase(sim)],
             ["workload seed", str(sim.get("seed"))],
             ["horizon", "none" if sim.get("horizon_s") is None
              else f"{h.number(sim['horizon_s'])} s"],
             ["scenario file", str(sim.get("file"))],
             ["--set overrides", "; ".join(sim.get("overrides") or []) or "none"],
             ["scenario digest (SHA-256)", str(sim.get("sha256"))],
             ["servesim version", str(sim.get("servesim_version"))]]
    return ["setting", "value"], rows, set()
