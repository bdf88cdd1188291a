"""``servesim report DIR``: one self-contained HTML (or Markdown) page of any run's folder.

The folder may be the ``--out`` of ``simulate``, ``compare``, ``sweep`` or ``capacity``;
:mod:`sim.study.reportdoc` recognises it and builds the content: a title naming the
model, GPUs, tp and cost source, a one-sentence answer, tables with numbers written for
people, plots captioned in words and the resolved scenario. HTML embeds every PNG as a
data URI, so the single file can be mailed or attached; Markdown links the PNGs next
to it. Saturated rows are highlighted.
"""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path
from typing import Any

from sim.cliargs import ArgParser
from sim.errors import ServesimError
from sim.files import check_name_length
from sim.report.outputs import write_atomic
from sim.study.reportdoc import collect

STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1400px;color:#222}"
         "h1{font-size:1.5em;margin-bottom:.2em}.sub{color:#555;margin-top:0}"
         ".answer{font-size:1.15em;background:#eef5ff;border-left:4px solid #3a7bd5;"
         "padding:.6em 1em}"
         "table{border-collapse:collapse;font-size:13px;margin:1em 0}"
         "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}"
         "th{background:#f2f2f2}tr.saturated td{background:#fde2e1}"
         "table.settings td{text-align:left}"
         "figure{margin:1.5em 0}img{max-width:100%}"
         "figcaption{color:#444;max-width:900px;font-size:14px}")


def to_html(folder: Path, doc: dict[str, Any]) -> str:
    """A standalone HTML page; PNGs inlined as base64 data URIs."""
    e = html.escape
    parts = ["<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>{e(doc['title'])}</title>", f"<style>{STYLE}</style></head><body>",
             f"<h1>{e(doc['title'])}</h1>", f'<p class="sub">{e(doc["subtitle"])}</p>']
    if doc["answer"]:
        parts.append(f'<p class="answer">{e(doc["answer"])}</p>')
    parts += [f"<p>{e(line)}</p>" for line in doc["lines"]]
    for name, (head, rows, marked) in doc["tables"]:
        cls = ' class="settings"' if len(head) == 2 else ""
        parts.append(f"<h2>{e(name)}</h2><table{cls}><tr>"
                     + "".join(f"<th>{e(c)}</th>" for c in head) + "</tr>")
        parts += [("<tr class=\"saturated\">" if i in marked else "<tr>")
                  + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>"
                  for i, r in enumerate(rows)]
        parts.append("</table>")
    if doc["plots"]:
        parts.append("<h2>Plots</h2>")
    for p, caption in doc["plots"]:
        data = base64.b64encode((folder / p).read_bytes()).decode()
        parts.append(f'<figure><img alt="{e(caption)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{e(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def to_markdown(doc: dict[str, Any], folder: Path, out: Path) -> str:
    """The same content as Markdown; images link to the PNGs (relative to ``out``)."""
    parts = [f"# {doc['title']}", "", f"_{doc['subtitle']}_", ""]
    if doc["answer"]:
        parts += [f"**{doc['answer']}**", ""]
    parts += [f"- {line}" for line in doc["lines"]]
    for name, (head, rows, marked) in doc["tables"]:
        parts += ["", f"## {name}", "", "| " + " | ".join(head) + " |",
                  "|" + "---|" * len(head)]
        parts += ["| " + " | ".join((f"**{c}**" if i in marked else c).replace("|", "\\|")
                                    for c in r) + " |" for i, r in enumerate(rows)]
    if doc["plots"]:
        parts += ["", "## Plots", ""]
    for p, caption in doc["plots"]:
        link = Path(os.path.relpath(folder / p, out.parent)).as_posix()
        parts += [f"![{caption}]({link})", "", f"_{caption}_", ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def _check_out(out: Path, folder: Path) -> None:
    """Refuse a report path that is one of the run's own files (a summary, a CSV, a
    plot) in ``folder`` or below: writing there would destroy what the report reads.
    A report written before (.html, .md) may be replaced."""
    check_name_length(out, "--out")
    try:
        target, root = out.resolve(), folder.resolve()
    except OSError as exc:
        raise ServesimError(f"cannot resolve the path: {exc.strerror}", where="--out") from None
    if target.is_dir():
        raise ServesimError(f"got {out}, a folder; expected a report file (.html or .md)",
                            where="--out")
    if (root == target.parent or root in target.parents) and target.exists() \
            and target.suffix not in (".html", ".md"):
        raise ServesimError(f"got {out}, one of the run's own files in {folder}: the report "
                            "would overwrite what it reads; name a new file (.html or .md)",
                            where="--out")
    if out.suffix.lower() not in (".html", ".htm", ".md"):
        # An HTML page written over base.yaml (a scenario) had been accepted.
        raise ServesimError(f"got {out}, expected a report file name ending .html or .md",
                            where="--out")


# What each report file ending holds: ``--out``'s ending picks the format, and a
# --format that says otherwise is refused (a .html file of Markdown opens as a wall of
# text in a browser).
SUFFIX_FORMATS = {".html": "html", ".htm": "html", ".md": "md"}
FORMAT_WORDS = {"html": "an HTML page", "md": "Markdown"}


def report_format(given: str | None, out: Path | None) -> str:
    """The report's format: ``given`` (``--format``), else the one ``out``'s ending
    names, else html. ``--format`` and an ending that disagree are an error."""
    implied = SUFFIX_FORMATS.get(out.suffix.lower()) if out is not None else None
    if given is not None and implied is not None and given != implied:
        raise ServesimError(f"got {out}, a name for {FORMAT_WORDS[implied]}, with --format "
                            f"{given} ({FORMAT_WORDS[given]}); name the file .{given}, or "
                            "leave --format out and the ending picks it", where="--out")
    return given or implied or "html"


def main(argv: list[str]) -> int:
    """``servesim report DIR [--format html|md] [--out FILE]``; ``--out r.md`` alone
    writes Markdown."""
    p = ArgParser(prog="servesim report", description=__doc__.split("\n")[0])
    p.add_argument("folder", type=Path,
                   help="the --out folder of servesim simulate, compare, sweep or capacity")
    p.add_argument("--format", choices=("html", "md"), default=None,
                   help="html (self-contained) or md (default: what --out's ending says, "
                        "else html)")
    p.add_argument("--out", type=Path, default=None,
                   help="report file (default: DIR/report.html or DIR/report.md)")
    a = p.parse_args(argv)
    if not a.folder.is_dir():
        raise ServesimError("not a folder" if a.folder.exists() else "no such folder",
                            str(a.folder))
    doc = collect(a.folder)
    fmt = report_format(a.format, a.out)
    out = a.out if a.out is not None else a.folder / f"report.{fmt}"
    _check_out(out, a.folder)
    text = to_html(a.folder, doc) if fmt == "html" else to_markdown(doc, a.folder, out)
    try:
        write_atomic(out, text.encode())
    except OSError as exc:
        raise ServesimError(f"cannot write report: {exc.strerror}", str(out)) from None
    print(f"wrote {out}")
    return 0
