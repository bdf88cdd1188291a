"""``servesim report DIR``: one self-contained HTML (or Markdown) page of a sweep or capacity run.

The folder is recognised by the manifest its command wrote: ``sweep.json`` (servesim
sweep) or ``capacity.json`` (servesim capacity). HTML embeds every PNG as a data URI,
so the single file can be mailed or attached; Markdown links the PNGs next to it.
Tables show latencies in milliseconds with the 95% confidence half-width over seeds.
"""

from __future__ import annotations

import base64
import html
import json
import os
from pathlib import Path
from typing import Any

from sim.configtools import ArgParser
from sim.errors import ServesimError
from sim.files import read_text
from sim.report.outputs import write_atomic
from sim.report.slospec import SLO

Row = dict[str, Any]
Table = tuple[list[str], list[list[str]]]


def _ms(v: Any, ci: Any = None) -> str:
    if v is None:
        return "–"
    return f"{v * 1e3:.1f} ± {ci * 1e3:.1f}" if ci else f"{v * 1e3:.1f}"


def _num(v: Any, fmt: str = ".3g") -> str:
    return "–" if v is None else format(v, fmt)


def _slos(manifest: dict[str, Any]) -> list[SLO]:
    return [SLO(s["metric"], s["stat"], float(s["limit_s"]))
            for s in manifest.get("slo_targets", [])]


def sweep_tables(folder: Path, manifest: dict[str, Any]) -> list[tuple[str, Table]]:
    """The grid table of a sweep (one row per point, means ± 95% CI over seeds)."""
    from sim.study.sweep import read_csv

    slos = _slos(manifest)
    grid = read_csv(folder / "sweep.csv")
    head = ["policy", "replicas", "tp", "rate (req/s)", "seeds", "TTFT p50 (ms)", "TTFT p99 (ms)",
            "TPOT p50 (ms)", "TPOT p99 (ms)", "E2E p99 (ms)", "throughput (req/s)",
            "goodput (req/s)", "output tok/s", "saturated"]
    if slos:
        head.append("meets " + ", ".join(str(s) for s in slos))
    rows = []
    for g in grid:
        cells = [str(g["policy"]), f"{g['replicas']:g}", f"{g['tp']:g}", f"{g['rate']:g}",
                 f"{g['seeds']:g}"]
        cells += [_ms(g[c], g.get(f"{c}_ci")) for c in ("ttft_p50", "ttft_p99", "tpot_p50",
                                                          "tpot_p99", "e2e_p99")]
        cells += [_num(g["throughput_rps"]), _num(g["goodput_rps"]), _num(g["output_tps"]),
                  "yes" if g["saturated"] else ""]
        if slos:
            ok = not g["saturated"] and all(s.met(g.get(s.column)) for s in slos)
            cells.append("yes" if ok else "no")
        rows.append(cells)
    return [("Sweep results", (head, rows))]


def capacity_tables(folder: Path, blob: dict[str, Any]) -> list[tuple[str, Table]]:
    """Maximum rate per replica per candidate, and the configurations checked at the target."""
    out: list[tuple[str, Table]] = []
    head = ["policy", "tp", "max rate per replica (req/s)", "95% CI", "seeds", "per seed"]
    rows = [[str(m["policy"]), str(m["tp"]), _num(m["max_rate_per_replica"], ".4g"),
             "–" if m["ci_low"] is None else f"{m['ci_low']:.4g} – {m['ci_high']:.4g}",
             str(m["seeds"]), str(m["per_seed"])] for m in blob["max_rate_per_replica"]]
    out.append(("Highest rate per replica meeting the SLOs", (head, rows)))
    if blob.get("target_rate") is not None:
        head = ["policy", "replicas", "tp", "GPUs", "meets SLOs", "TTFT p99 (ms)",
                "TPOT p99 (ms)", "output tok/s", "GPU-h per M output tokens",
                "$ per M output tokens"]
        rows = [[str(c["policy"]), str(c["replicas"]), str(c["tp"]), str(c["gpus"]),
                 "yes" if c["passed"] else "no", _ms(c["ttft_p99"]), _ms(c["tpot_p99"]),
                 _num(c["output_tps"]), _num(c["gpu_hours_per_mtok"]),
                 _num(c["usd_per_mtok"])] for c in blob["checked"]]
        out.append((f"Configurations checked at {blob['target_rate']:g} req/s", (head, rows)))
    return out


def _load(folder: Path) -> tuple[str, dict[str, Any]]:
    for name in ("sweep.json", "capacity.json"):
        f = folder / name
        if f.is_file():
            try:
                return name.split(".")[0], json.loads(read_text(f, name))
            except ValueError as exc:
                raise ServesimError(f"cannot read {name}: {exc}", str(folder)) from None
    raise ServesimError("no sweep.json or capacity.json here; give the --out folder of "
                        "servesim sweep or servesim capacity", str(folder))


def collect(folder: Path) -> dict[str, Any]:
    """Title, summary lines, tables and plot files of the run in ``folder``."""
    kind, blob = _load(folder)
    slos = ", ".join(str(s) for s in _slos(blob)) or "none"
    if kind == "sweep":
        lines = [f"Scenario {blob['scenario']} ({blob['source']})",
                 f"Rates (req/s): {', '.join(f'{r:g}' for r in blob['rates'])}",
                 f"Policies: {', '.join(blob['policies'])}; replicas: "
                 f"{', '.join(map(str, blob['replicas']))}; tp: {', '.join(map(str, blob['tp']))}",
                 f"Seeds: {', '.join(map(str, blob['seeds']))}; SLO targets: {slos}"]
        tables = sweep_tables(folder, blob)
        plots = blob.get("plots", [])
        title = f"servesim sweep: {blob['scenario']}"
    else:
        lines = [f"SLO targets: {slos}; seeds: {', '.join(map(str, blob['seeds']))}; "
                 f"search tolerance {blob['tol']:.0%}"]
        best = blob.get("best")
        if blob.get("target_rate") is not None:
            if best:
                usd = (f", ${best['usd_per_mtok']:.3g} per million output tokens"
                       if best.get("usd_per_mtok") else "")
                lines.append(f"Cheapest for {blob['target_rate']:g} req/s: {best['policy']}, "
                             f"{best['replicas']} replica(s) × tp {best['tp']} = "
                             f"{best['gpus']} GPU(s){usd}")
            else:
                lines.append(f"No candidate met the SLOs at {blob['target_rate']:g} req/s.")
        tables = capacity_tables(folder, blob)
        plots = ["capacity_search.png"]
        title = "servesim capacity"
    plots = [p for p in plots if (folder / p).is_file()]
    if blob.get("cost_source"):
        lines.insert(0, f"Cost: {blob['cost_source']}")
    return {"title": title, "lines": lines, "tables": tables, "plots": plots}


def to_html(folder: Path, doc: dict[str, Any]) -> str:
    """A standalone HTML page; PNGs inlined as base64 data URIs."""
    e = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{e(doc['title'])}</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
             "th{background:#f2f2f2}img{max-width:100%;margin:1em 0}</style></head><body>",
             f"<h1>{e(doc['title'])}</h1>"]
    parts += [f"<p>{e(line)}</p>" for line in doc["lines"]]
    for name, (head, rows) in doc["tables"]:
        parts.append(f"<h2>{e(name)}</h2><table><tr>"
                     + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows]
        parts.append("</table>")
    if doc["plots"]:
        parts.append("<h2>Plots</h2>")
    for p in doc["plots"]:
        data = base64.b64encode((folder / p).read_bytes()).decode()
        parts.append(f'<figure><img alt="{e(p)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{e(p)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def to_markdown(doc: dict[str, Any], folder: Path, out: Path) -> str:
    """The same content as Markdown; images link to the PNGs (relative to ``out``)."""
    parts = [f"# {doc['title']}", ""]
    parts += [f"- {line}" for line in doc["lines"]]
    for name, (head, rows) in doc["tables"]:
        parts += ["", f"## {name}", "", "| " + " | ".join(head) + " |",
                  "|" + "---|" * len(head)]
        parts += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    if doc["plots"]:
        parts += ["", "## Plots", ""]
        parts += [f"![{p}]({Path(os.path.relpath(folder / p, out.parent)).as_posix()})"
                  for p in doc["plots"]]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    """``servesim report DIR [--format html|md] [--out FILE]``."""
    p = ArgParser(prog="servesim report", description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path, help="the --out folder of a sweep or capacity run")
    p.add_argument("--format", choices=("html", "md"), default="html",
                   help="html (self-contained, default) or md")
    p.add_argument("--out", type=Path, default=None,
                   help="report file (default: DIR/report.html or DIR/report.md)")
    a = p.parse_args(argv)
    if not a.folder.is_dir():
        raise ServesimError("not a folder", str(a.folder))
    doc = collect(a.folder)
    out = a.out if a.out is not None else a.folder / f"report.{a.format}"
    text = to_html(a.folder, doc) if a.format == "html" else to_markdown(doc, a.folder, out)
    try:
        write_atomic(out, text.encode())
    except OSError as exc:
        raise ServesimError(f"cannot write report: {exc.strerror}", str(out)) from None
    print(f"wrote {out}")
    return 0
