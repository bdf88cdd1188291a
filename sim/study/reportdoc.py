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

from pathlib import Path
from typing import Any

from sim.errors import ServesimError
from sim.report import human as h
from sim.report import shapes
from sim.report.rejections import REFUSED, refusal_headline
from sim.study.docparts import Doc, Table, heading, pick, setup_table, slo_text
from sim.study.studydocs import capacity_doc, sweep_doc

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
                return kind, shapes.load_json(f.read_text())
            except (OSError, ValueError, RecursionError) as exc:
                raise ServesimError(f"cannot read it: {exc}", str(f)) from None
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
        doc = {"simulate": _simulate, "compare": _compare, "sweep": sweep_doc,
               "capacity": capacity_doc}[kind](folder, blob)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
            ArithmeticError) as exc:
        # What the shape check cannot say (a statistic one metric has and another
        # lacks) still ends as one line naming the file, not a traceback.
        raise shapes.unreadable(exc, kind, source) from None
    refusals = ([str(v[REFUSED]) for v in blob.values()
                 if isinstance(v, dict) and v.get(REFUSED)] if kind == "compare"
                else [str(blob[REFUSED])] if blob.get(REFUSED) else [])
    if refusals:  # the figures would otherwise read as a valid result
        doc["answer"] = " ".join(x for x in (refusal_headline(refusals), doc["answer"]) if x)
    doc["plots"] = [(p, CAPTIONS.get(p, p)) for p in doc["plots"] if (folder / p).is_file()]
    for p, _ in doc["plots"]:
        with open(folder / p, "rb") as fh:
            head = fh.read(8)
        if head != PNG_SIGNATURE:  # a broken image would be embedded without a word
            raise ServesimError(f"not a PNG image (it starts {head!r}); run the command "
                                "again, or delete the file to report without it",
                                str(folder / p))
    return doc


# ---------------------------------------------------------------------- simulate
def simulate_answer(s: dict[str, Any]) -> str:
    """One sentence: setup, offered load, TTFT and TPOT tails, SLO attainment."""
    sim = s["simulated"]
    lat, tp, sat = s["latency_s"], s["throughput"], s["saturation"]
    hi = pick(lat["ttft"], "p99", True)
    offered = sat.get("offered_rps")
    load = (f"at {h.req_s(offered)} offered" if offered is not None
            else f"at {h.req_s(tp['requests_per_s'])} served")
    slo = slo_text(tp["slo"])
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
        text += f"; saturated: {_backlog(sat)}"
    return text + "."


def _backlog(sat: dict[str, Any]) -> str:
    """What grew in a saturated run, in words: the requests paced clients held (when they
    fell behind their due rate) or the engine's waiting queue."""
    if sat.get("clients_behind"):
        return (f"the requests held at the clients grew by "
                f"{h.req_s(sat['client_backlog_growth_rps'])} at {h.req_s(sat['due_rps'])} due")
    return f"the waiting queue grew by {h.req_s(sat.get('queue_growth_rps'))}"


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
        # What building the workload left out or changed (a trace's dropped rows, a
        # transform), as the printed summary says it.
        *(["workload", note] for note in s.get("workload_notes", ())),
        ["throughput", f"{h.req_s(tp['requests_per_s'])}, "
                       f"{h.tok_s(tp['output_tokens_per_s'])} output"],
        ["goodput", f"{h.req_s(tp['goodput_requests_per_s'])} "
                    f"({h.pct(tp['slo_attainment'])} within the SLO)"],
        ["per-request SLO", "per class, below" if "classes" in s
         else slo_text(tp["slo"]) or "none set"],
        ["iterations", f"{h.count(b['iterations'])}, mean {h.number(b['mean_seqs'])} "
                       f"sequences and {h.number(b['mean_tokens'])} tokens each"],
        ["KV cache", f"{h.count(kv['blocks_per_replica'][0])} blocks of "
                     f"{kv['block_size']} tokens per replica; mean use "
                     f"{h.pct(kv['mean_utilization'])}, peak {h.pct(kv['peak_utilization'])}"],
        ["preemptions", h.count(s["preemptions"]) + _swap_split(s.get("swap"))],
        ["simulated span", f"{h.number(s['span_s'])} s"],
    ]
    sat = s.get("saturation") or {}
    rows.append(["saturated", f"yes: {_backlog(sat)}" if sat.get("saturated") else "no"])
    return ["", "value"], rows, {len(rows) - 1} if sat.get("saturated") else set()


def _swap_split(sw: dict[str, Any] | None) -> str:
    """Under ``preemption: swap``, how the preemptions went ("" otherwise)."""
    if not sw or sw["swapped"] is None or sw["recomputed"] is None:
        return ""
    return (f" ({h.count(sw['swapped'])} swapped to host memory, "
            f"{h.count(sw['recomputed'])} recomputed)")


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
                     slo_text(tp["slo"]) or "none"])
    return head, rows, set()


def _simulate(folder: Path, s: dict[str, Any]) -> Doc:
    sim = s.get("simulated")
    title, sub = heading("simulate", s.get("scenario"), sim)
    tables = [("Latency", _latency_table(s["latency_s"])), ("Requests and throughput",
                                                            _run_table(s))]
    if "classes" in s:
        tables.append(("Per workload class", _class_table(s["classes"])))
    if sim:
        tables.append(("What was simulated", setup_table(sim, s.get("memory"))))
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


def variants_of(folder: Path) -> dict[str, list[str]] | None:
    """The named variants of a ``compare --variant`` folder ({name: KEY=VALUE settings},
    from ``compare.csv.meta.json``), or None for a comparison of policies or GPUs."""
    path = folder / "compare.csv.meta.json"
    if not path.is_file():
        return None
    try:
        meta = shapes.load_json(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ServesimError(f"cannot read it: {exc}", str(path)) from None
    varied = meta.get("varied") if isinstance(meta, dict) else None
    found = varied.get("variants") if isinstance(varied, dict) else None
    if found is None:
        return None
    if not (isinstance(found, dict) and all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in found.values())):
        raise ServesimError(f"varied.variants: got {found!r}, expected each variant's name "
                            "with its list of KEY=VALUE settings", str(path))
    return found


def _models(runs: dict[str, Any]) -> str:
    """The model the runs share, in words; "several models" when variants change it."""
    names = {str(s["simulated"]["model"]["name"]) for s in runs.values()}
    return h.model_name(names.pop()) if len(names) == 1 else "several models"


def compare_answer(runs: dict[str, Any], variants: bool = False) -> str:
    """One sentence: which policy (or GPU, or named variant) serves the most within the
    SLO, which saturated."""
    first = next(iter(runs.values()))
    sim = first["simulated"]
    gpu = by_gpu(runs) and not variants
    hi = pick(first["latency_s"]["ttft"], "p99", True)
    sat = [p for p, s in runs.items() if s["saturation"]["saturated"]]
    ok = {p: s for p, s in runs.items() if p not in sat} or runs

    def good(p: str) -> float:
        return ok[p]["throughput"]["goodput_requests_per_s"] or 0.0

    best = max(ok, key=good)
    b = ok[best]
    lead = (f"{h.model_name(str(sim['model']['name']))} under {sim['policy']} on "
            f"{len(runs)} GPUs, each priced by its own cost model," if gpu else
            f"{_models(runs)} in {len(runs)} variants of the scenario" if variants
            else f"{h.setup_with_cost(sim)}, {len(runs)} policies")
    text = (f"{lead} on the same {h.count(first['requests']['total'])} requests: {best} "
            f"serves the most within the SLO "
            f"({h.req_s(b['throughput']['goodput_requests_per_s'])}; TTFT {hi} "
            f"{h.ms(b['latency_s']['ttft'][hi])}, TPOT {hi} {h.ms(b['latency_s']['tpot'][hi])})")
    if len(sat) == len(runs):
        what = "GPU" if gpu else "variant" if variants else "policy"
        text += f"; every {what} saturated (none kept up with the load)"
    elif sat:
        text += f"; saturated (did not keep up): {', '.join(sat)}"
    return text + "."


def _compare_table(runs: dict[str, Any], label: str) -> Table:
    first = next(iter(runs.values()))["latency_s"]["ttft"]
    lo, hi = pick(first, "p50", False), pick(first, "p99", True)
    head = [label, "GPUs", "finished", "rejected",
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
    title, sub = heading("compare", first.get("scenario"), sim)
    variants = variants_of(folder)
    if variants is not None and sim:
        title = (f"{first.get('scenario') or 'scenario'}: {_models(runs)} in {len(runs)} "
                 f"variants ({', '.join(runs)})")
        settings = [[v, " ".join(variants.get(v, [])) or "the scenario as it is",
                     h.cost_phrase(s["simulated"])] for v, s in runs.items()]
        tables = [("Variants side by side", _compare_table(runs, "variant")),
                  ("What each variant changed", (["variant", "settings", "cost source"],
                                                 settings, set())),
                  ("What was simulated (first variant's run)",
                   setup_table(sim, first.get("memory")))]
        return {"title": title, "subtitle": sub, "answer": compare_answer(runs, True),
                "lines": [], "tables": tables, "plots": ["compare_cdf.png"]}
    if by_gpu(runs):
        title = (f"{first.get('scenario') or 'scenario'}: "
                 f"{h.model_name(str(sim['model']['name']))} on {', '.join(runs)}, "
                 f"policy {sim['policy']}")
        costs = [[g, h.cost_phrase(s["simulated"])] for g, s in runs.items()]
        tables = [("GPUs side by side", _compare_table(runs, "GPU")),
                  ("Cost model of each GPU's run", (["GPU", "cost source"], costs, set())),
                  ("What was simulated (first GPU's run)", setup_table(sim, first.get("memory")))]
        return {"title": title, "subtitle": sub, "answer": compare_answer(runs),
                "lines": [], "tables": tables, "plots": ["compare_cdf.png"]}
    tables = [("Policies side by side", _compare_table(runs, "policy"))]
    if sim:
        tables.append(("What was simulated (first policy's run)",
                       setup_table(sim, first.get("memory"))))
    return {"title": title, "subtitle": sub, "answer": compare_answer(runs) if sim else "",
            "lines": [], "tables": tables, "plots": ["compare_cdf.png"]}
