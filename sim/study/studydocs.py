"""The ``servesim report`` documents of the two studies: a sweep (:func:`sweep_doc`) and
a capacity search (:func:`capacity_doc`); the others and the dispatch are
:mod:`sim.study.reportdoc`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.report import human as h
from sim.report import shapes
from sim.report.slospec import SLO
from sim.study.docparts import Doc, Row, Table, heading, setup_table


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


def memory_table(shapes_memory: list[dict[str, Any]]) -> Table:
    """One row a (policy, tp, pp, pool) of a sweep: its GPU memory terms and KV cache, as
    the printed summary's memory line gives them (sweep.json files written before
    2026-12-05 carry none, and the table is left out)."""
    rows = [[str(e["policy"]), str(e["tp"]), str(e.get("pp", 1)), role,
             h.memory_terms(m)]
            for e in shapes_memory for role, m in e["memory"].items()]
    return (["policy", "tp", "pp", "pool", "GPU memory and KV cache"], rows, set())


def sweep_doc(folder: Path, manifest: dict[str, Any]) -> Doc:
    from sim.study.sweep import csv_rows

    grid = csv_rows(shapes.read_sweep_csv(folder / "sweep.csv",
                                          [s.column for s in _slos(manifest)]))
    sim = manifest.get("simulated")
    title, sub = heading("sweep", manifest.get("scenario"), sim, manifest.get("tp"))
    slos = ", ".join(_slo_label(s) for s in _slos(manifest)) or "none"
    lines = [f"Rates: {', '.join(f'{r:g}' for r in manifest['rates'])} req/s (whole "
             f"cluster); policies: {', '.join(manifest['policies'])}; replicas: "
             f"{', '.join(map(str, manifest['replicas']))}; tp: "
             f"{', '.join(map(str, manifest['tp']))}",
             f"Seeds: {', '.join(map(str, manifest['seeds']))}; targets: {slos}. "
             "Latencies are means over seeds ± the 95% confidence half-width."]
    tables = [("Sweep results", sweep_table(manifest, grid))]
    if manifest.get("memory"):
        tables.append(("GPU memory of each replica shape", memory_table(manifest["memory"])))
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
    head = ["policy", "tp", "max rate per replica", "95% CI", "seeds", "per seed (req/s)",
            "KV tokens per replica"]
    # capacity.json files written before 2026-12-05 carry no KV figure: a dash.
    rows = [[str(m["policy"]), _tp(m), h.req_s(m["max_rate_per_replica"]),
             h.DASH if m["ci_low"] is None
             else f"{h.number(m['ci_low'])} – {h.number(m['ci_high'])} req/s",
             str(m["seeds"]), str(m["per_seed"]).replace(" ", ", "),
             h.count(m.get("kv_tokens_per_replica"))]
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


def capacity_doc(folder: Path, blob: dict[str, Any]) -> Doc:
    sim = blob.get("simulated")
    name = Path(str(sim["file"])).stem if sim else None
    title, sub = heading("capacity", name, sim)
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
