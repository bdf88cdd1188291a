"""``servesim trace ...``: inspect a request trace from the command line.

    servesim trace stats FILE [--format F] [--json] [load options]
    servesim trace plot  FILE [--format F] --out PNG|PDF|SVG [load options]

FILE is a path or a shipped trace's name (see :func:`sim.workload.traces.find_trace`). Load
options: ``--sort``, ``--model M`` / ``--log-type T`` (burstgpt), ``--spread --seed N``
(mooncake). Any error is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from sim.cliargs import ArgParser, int_arg
from sim.configtools import MAX_TIME_S
from sim.errors import ServesimError
from sim.files import check_name_length
from sim.workload.traces import FORMATS, Trace, find_trace, load_trace


class _Parser(ArgParser):
    """argparse that raises instead of printing usage, so errors stay one line (an option
    of one value given twice among them)."""

    def error(self, message: str) -> NoReturn:
        raise ServesimError(f"{message} (see servesim trace --help)", source="servesim trace")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="servesim trace", description="Inspect LLM request traces.")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    for name, text in (("stats", "print summary statistics"),
                       ("plot", "write a PNG of arrival rate and length histograms")):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("file", help="trace path, or the name of a shipped trace")
        p.add_argument("--format", choices=list(FORMATS), help="file format (default: sniffed)")
        p.add_argument("--sort", action="store_true", help="sort rows by arrival time")
        p.add_argument("--model", help="burstgpt: keep only this Model (e.g. ChatGPT)")
        p.add_argument("--log-type", help="burstgpt: keep only this Log Type")
        p.add_argument("--spread", action="store_true",
                       help="mooncake: spread requests within each timestamp bucket")
        p.add_argument("--seed", type=int_arg(ge=0), default=None,
                       help="seed for --spread (default 0); only with --spread")
        if name == "stats":
            p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        else:
            p.add_argument("--out", required=True,
                           help="plot file to write: .png, .pdf or .svg (no extension: .png)")
    return ap


# What `trace plot --out` may end in: the formats matplotlib's Agg backend writes without
# a LaTeX install or an optional image library.
PLOT_FORMATS = ("png", "pdf", "svg")


def plot_path(text: str) -> Path:
    """The file ``trace plot --out TEXT`` writes: TEXT, or TEXT.png when it has no extension
    (as matplotlib would name it). Checked before the trace is loaded, so a folder, a
    missing folder or an extension matplotlib cannot write is one error naming --out."""
    out = Path(text)
    check_name_length(out, "--out")
    if out.is_dir():
        raise ServesimError(f"--out is a folder; give a file in it, e.g. {out / 'trace.png'}",
                            source=str(out))
    ext = os.path.splitext(text)[1][1:]
    if not ext:
        out = Path(text.rstrip(".") + ".png")
    elif ext.lower() not in PLOT_FORMATS:
        raise ServesimError(f"--out has extension .{ext}; allowed: "
                            f"{', '.join('.' + f for f in PLOT_FORMATS)}", source=str(out))
    if not out.parent.is_dir():
        state = "is not a folder" if out.parent.exists() else "does not exist"
        raise ServesimError(f"the folder for --out, {out.parent}, {state}", source=str(out))
    return out


def _write_plot(trace: Trace, out: Path) -> None:
    """Draw ``trace`` into a temporary file beside ``out``, then rename it: a failed
    write (a full disk, a folder we may not write) leaves no half-written plot."""
    from sim.workload.tracestats import plot_trace

    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    try:
        plot_trace(trace, tmp)
        os.replace(tmp, out)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ServesimError(f"cannot write --out into the folder {out.parent}: "
                            f"{exc.strerror or exc}", source=str(out)) from None


def _load(args: argparse.Namespace) -> Trace:
    path = find_trace(args.file, Path.cwd())
    opts: dict[str, Any] = {}
    if args.model is not None:
        opts["model"] = args.model
    if args.log_type is not None:
        opts["log_type"] = args.log_type
    rng = None
    if args.seed is not None and not args.spread:
        # Nothing else is random here: a seed without --spread would change nothing.
        raise ServesimError(f"got {args.seed}: it seeds --spread, which is not given; "
                            "add --spread or leave --seed out", where="--seed")
    if args.spread:
        opts["spread"] = True
        rng = np.random.default_rng(args.seed or 0)
    try:
        trace = load_trace(path, args.format, sort=args.sort, rng=rng, **opts)
    except ServesimError as exc:
        if exc.where in opts:  # an option this file's format lacks: name its flag
            flag = "--" + exc.where.replace("_", "-")
            takers = [f for f, spec in FORMATS.items() if exc.where in spec.options]
            raise ServesimError(f"applies to {' and '.join(takers)} traces only, and {path} "
                                "is not one (give --format if it is)", where=flag) from None
        raise
    t = trace.arrival_s
    span = float(np.ptp(t)) if t is not None and len(t) else 0.0
    if not span < MAX_TIME_S:
        # simulate refuses such a trace; its statistics and plot would be of no run.
        raise ServesimError(f"arrival times span {span:.3g} s, past the "
                            f"{MAX_TIME_S:.0e} s (31 years) a run reads", source=str(path))
    return trace


def main(argv: list[str]) -> int:
    """Run ``servesim trace`` with ``argv`` (without the ``trace`` word); return exit status."""
    from sim.workload.tracestats import format_stats, trace_stats

    try:
        args = _parser().parse_args(argv)
        out = plot_path(args.out) if args.cmd == "plot" else None
        trace = _load(args)
        if args.cmd == "stats":
            stats = trace_stats(trace)
            print(json.dumps(stats, indent=2) if args.json else format_stats(stats))
        elif out is not None:
            _write_plot(trace, out)
            print(f"wrote {out}")
    except ServesimError as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help exits through argparse; report it as a status
        return exc.code if isinstance(exc.code, int) else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
