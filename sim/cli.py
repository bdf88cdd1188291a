"""The ``servesim`` command line.

Subcommands: ``simulate``, ``calibrate`` (needs the ``calibrate`` extra: torch) and
``trace``. User errors print one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from sim.cliargs import ArgParser
from sim.errors import ServesimError


def _simulate(argv: list[str]) -> int:
    from sim.report.rejections import REFUSED, add_rejection_args, max_share, verdict

    p = ArgParser(prog="servesim simulate",
                                description="Simulate one scenario file and report latencies.")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key, e.g. --set workload.num_requests=500")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: out/<scenario name>)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    p.add_argument("--percentiles", default=None, metavar="P,P,...",
                   help="latency percentiles of the table and summary.json, e.g. "
                        "50,90,99,99.9 (default 50,90,95,99)")
    p.add_argument("--json", action="store_true",
                   help="print summary.json on stdout instead of the table")
    p.add_argument("--force", action="store_true",
                   help="run even when the estimated memory is over what this machine has free")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal and "
                        "the run takes more than a few seconds)")
    add_rejection_args(p)
    a = p.parse_args(argv)
    limit = max_share(a)

    from sim.config import scenario
    from sim.core.budget import check
    from sim.core.engine import simulate
    from sim.report import outputs as report
    from sim.report import printed
    from sim.report.folder import check_replaceable
    from sim.report.metrics import PERCENTILES, parse_percentiles
    from sim.report.summary import summarize

    pcts = PERCENTILES if a.percentiles is None else parse_percentiles(a.percentiles)
    sc = scenario.load(a.scenario, a.overrides)
    # Before simulating: a name that cannot be a folder, or an --out that is not ours to
    # replace, fails at once; so does a run that would not fit in memory.
    out = a.out if a.out is not None else report.default_out(sc.name, "", sc.source)
    check_replaceable(out, report.RUN_FILES, scenario.input_files(sc))
    est = check(sc, a.force)
    show = a.progress if a.progress is not None else (not a.quiet and sys.stderr.isatty())
    if show and est.seconds > LONG_RUN_S:
        print(f"servesim: about {est.requests:,.0f} requests; estimated time up to "
              f"{est.seconds:,.0f} s", file=sys.stderr)
    with _progress_bar(show, a.progress is not None) as tick:
        res = simulate(sc, progress=tick)
    summary = summarize(res, pcts)
    refused = verdict(res, limit)
    nothing = printed.nothing_finished(summary)
    if refused is not None or nothing:  # so that `report` on the folder says so too
        summary[REFUSED] = str(refused) if refused is not None else nothing
    try:
        paths = report.write_run(res, summary, out, plots=not a.no_plots)
    except OSError as exc:
        raise ServesimError(f"cannot write outputs: {exc.strerror}", str(out)) from None
    if a.json:  # the summary alone on stdout, for a program to read
        sys.stdout.write(report.summary_json(summary).decode())
    elif not a.quiet:
        print(printed.table(summary))
        print("wrote " + ", ".join(str(x) for x in paths))
    # The outputs are written (requests.csv says why), but this is no result: first for
    # the limit that rejected too many requests, then for a run that finished none.
    if refused is not None:
        raise refused
    if nothing and not summary["requests"]["total"]:
        # Say what left the workload empty: a trace window's or a rate's notes.
        notes = "; ".join(res.requests.notes)
        raise ServesimError(f"{nothing}{f' ({notes})' if notes else ''}: raise num_requests, "
                            "duration_s or the rate (a rate x duration below one request "
                            "sends none)", sc.source, "workload")
    if nothing:
        raise ServesimError(nothing, sc.source)
    return 0


LONG_RUN_S = 10.0  # estimated seconds above which simulate says how long it expects
BAR_DELAY_S = 3.0  # a run shorter than this shows no bar at all


@contextlib.contextmanager
def _progress_bar(show: bool, asked: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress callback drawing a bar on stderr when ``show``; unless ``asked`` for
    (--progress) it appears only once the run has taken a few seconds. None when off.
    The bar never touches stdout or the outputs."""
    if not show:
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(total=0, unit="req", desc="simulate", file=sys.stderr, leave=False,
               dynamic_ncols=True, delay=0.0 if asked else BAR_DELAY_S)

    def tick(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh() if asked else bar.update(0)

    try:
        yield tick
    finally:
        bar.close()


def _calibrate(argv: list[str]) -> int:
    # calibrate's own command says when torch is missing: a --refit does not need it.
    from calibrate.cli import main as calibrate_main

    return calibrate_main(argv)


# Each command's module is imported only when that command runs, so the CLI starts fast
# and `simulate` never imports torch. Values: (callable or "module:function", help).
COMMANDS: dict[str, tuple[Callable[[list[str]], int] | str, str]] = {
    "simulate": (_simulate, "simulate a scenario file"),
    "compare": ("sim.study.compare:main",
                "run one workload through several batching policies, GPUs or named variants"),
    "sweep": ("sim.study.sweepcli:main",
              "grid of simulations over rates, policies, cluster shapes"),
    "capacity": ("sim.study.capacitycli:main", "highest load meeting SLOs; cheapest configuration"),
    "report": ("sim.study.html:main",
               "self-contained report of a simulate, compare, sweep or capacity folder"),
    "calibrate": (_calibrate, "time a model on this machine's device and write a cost profile"),
    "validate": ("sim.validate.command:main",
                 "compare predictions with a real run or vLLM results"),
    "profile": ("sim.cost.tables.cli:main",
                "build cost profiles from public kernel tables; list, ship"),
    "trace": ("sim.workload.cli:main", "statistics and plots of a request trace"),
}


def _resolve(target: Callable[[list[str]], int] | str) -> Callable[[list[str]], int]:
    if callable(target):
        return target
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def _available(name: str) -> bool:
    target = COMMANDS[name][0]
    if callable(target):
        return True
    return importlib.util.find_spec(target.split(":")[0]) is not None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``servesim`` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print("usage: servesim COMMAND [ARGS]\n\ncommands:")
        for name, (_, text) in COMMANDS.items():
            if _available(name):
                print(f"  {name:<10} {text}")
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from sim import __version__

        print(f"servesim {__version__}")
        return 0
    name = args[0]
    if name not in COMMANDS or not _available(name):
        valid = ", ".join(n for n in COMMANDS if _available(n))
        print(f"servesim: unknown command {name!r}; valid: {valid}",
              file=sys.stderr)
        return 2
    try:
        rc = _resolve(COMMANDS[name][0])(args[1:])
    except ServesimError as exc:
        print(f"servesim: error: {exc}", file=sys.stderr)
        rc = 2
    except KeyboardInterrupt:
        print("servesim: interrupted", file=sys.stderr)
        rc = 130
    except MemoryError:
        # Past the memory check (its estimate, or --force): say so rather than dump a trace.
        print(f"servesim: error: {name} ran out of memory; make the workload smaller "
              "(num_requests, duration_s, rate, trace repeat) or the cluster fewer replicas",
              file=sys.stderr)
        rc = 2
    except BrokenPipeError:
        return _closed_pipe(f"{name} stopped before it finished: its standard output was "
                            "closed (files it had still to write were not written)")
    try:
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
    except BrokenPipeError:
        return _closed_pipe(f"{name}: its standard output was closed before all of it was "
                            "read")
    return rc


def _closed_pipe(what: str) -> int:
    """The reader of our output went away (``servesim ... | head``): point stdout at
    devnull so that no later flush raises, say ``what`` on stderr if it is still open,
    and give the status a shell reports for a process ended by SIGPIPE."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    try:
        print(f"servesim: {what}", file=sys.stderr, flush=True)
    except OSError:  # stderr went into the same pipe (2>&1 | head)
        os.dup2(devnull, sys.stderr.fileno())
    os.close(devnull)
    return 141


def entry() -> None:
    """The ``servesim`` console script and ``python -m sim.cli``: :func:`main`'s status
    becomes the process's. An interrupted run leaves through ``os._exit(130)`` once its
    output is flushed: when the KeyboardInterrupt passed through a nested interpreter call
    on its way up (CPython's PyRun_* functions, which some libraries use), CPython ends the
    process as killed by SIGINT even though main() handled it (seen as exit -2 in
    tests/test_atomic_outputs.py), and a caller must see 130."""
    rc = main()
    if rc == 130:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(130)
    sys.exit(rc)


if __name__ == "__main__":
    entry()
