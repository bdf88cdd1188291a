"""``servesim validate --silicon``: its command line, the selection of rows (framework,
weights, what the tables price), the output files and the printed table. What is
simulated and fitted: :mod:`sim.validate.siliconfit`."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from sim.cliargs import ArgParser, int_arg
from sim.cost.priors import PRIORS_FILE, framework_priors
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify, fits_context, tables_cover
from sim.validate.siliconfit import (
    DATA,
    evaluate,
    fit_framework,
    summary,
    weights,
    with_lengths,
    write_priors,
)
from sim.validate.siliconrecipes import SCHEDULERS
from sim.validate.siliconrows import Row, default_path, read_rows


def _parser() -> ArgParser:
    """The options of ``servesim validate --silicon``."""
    p = ArgParser(prog="servesim validate --silicon",
                  description="Simulate public end-to-end serving runs and compare with their "
                              "measurements.")
    p.add_argument("--silicon", nargs="?", const="", default="", metavar="CSV",
                   help="silicon_sample.csv (default: the installed aiconfigurator-core's)")
    p.add_argument("--framework", action="append", default=None, choices=sorted(SCHEDULERS),
                   help="only these frameworks (repeatable)")
    p.add_argument("--fit-priors", type=Path, default=None, metavar="YAML",
                   help=f"fit the priors on the rows not held out and write them here "
                        f"(the shipped ones: {PRIORS_FILE.relative_to(PRIORS_FILE.parents[2])})")
    p.add_argument("--out", type=Path, default=Path("out/silicon"), help="output folder")
    p.add_argument("--limit", type=int_arg(ge=1), default=None, help="at most this many rows per "
                                                           "framework (quick looks)")
    p.add_argument("--weights", choices=("all", "bf16", "fp8", "4bit"), default="all",
                   help="only rows with bf16 or FP8 weights, or with 4-bit experts or "
                        "projections (default: all)")
    return p


def main(argv: list[str]) -> int:
    """Entry point of ``servesim validate --silicon``."""
    a = _parser().parse_args(argv)
    path = Path(a.silicon) if a.silicon else default_path()
    data = str(path) if a.silicon else DATA
    check_priors_path(a.fit_priors, path, a.out)
    from sim.report.folder import check_replaceable
    from sim.validate.validation import VALIDATE_FILES

    # --out is checked before the minutes of simulation, not only when they are written.
    check_replaceable(a.out, VALIDATE_FILES, [path])
    rows = read_rows(path)
    cases, skipped = select(rows, a.framework, a.weights, path)
    if a.limit is not None:
        cases = [c for fw in sorted({c.framework for c in cases})
                 for c in [c for c in cases if c.framework == fw][:a.limit]]
    fws = sorted({c.framework for c in cases})
    if a.fit_priors is not None:
        check_fit_rows(cases, path, a.fit_priors)
        fitted = {fw: fit_framework([c for c in cases
                                     if c.framework == fw and not c.held_out], fw, data)
                  for fw in fws}
        priors = {fw: fitted[fw][0] for fw in fws}
        lengths = {fw: fitted[fw][2] for fw in fws}
    else:
        priors = {fw: framework_priors(fw) for fw in fws}
        lengths = {fw: priors[fw].aic_client_lengths for fw in fws}
    cases = [c2 for fw in fws for c2 in with_lengths([c for c in cases if c.framework == fw],
                                                      lengths[fw])]
    records = evaluate(cases, priors)
    stats = summary(records)
    from sim.report.folder import replaced_folder
    from sim.report.metrics import clean
    from sim.report.outputs import write_atomic

    with replaced_folder(a.out, VALIDATE_FILES, inputs=[path]) as stage:
        # A row none of whose requests finished has no mean: null, not NaN (not JSON).
        write_atomic(stage / "silicon.json", (json.dumps(clean(
            {"source": str(path), "rows": len(rows), "simulated": len(cases),
             "skipped": skipped, "priors": {fw: dataclasses.asdict(p)
                                            for fw, p in priors.items()},
             "aic_client_lengths": lengths,
             "errors": stats, "records": records}), indent=1, allow_nan=False) + "\n").encode())
        if a.fit_priors is not None:  # inside: a failed write leaves --out as it was
            write_priors(a.fit_priors, fitted, {fw: stats.get(fw, {}) for fw in fws}, data)
    _print(records, stats, skipped, len(rows), path)
    print(f"wrote {a.out / 'silicon.json'}" + (f" and {a.fit_priors}" if a.fit_priors else ""))
    return 0


def check_priors_path(target: Path | None, csv_path: Path, out: Path) -> None:
    """Refuse, before any work, a ``--fit-priors`` path that cannot take the priors: a
    folder, a file in a folder that does not exist (but ``out``, which the run makes), or
    the CSV the priors are fitted on."""
    if target is None:
        return
    where = f"--fit-priors {target}"
    if target.is_dir():
        raise ServesimError("is a folder; give the path of a YAML file to write the "
                            "fitted priors to", where=where)
    folder = target.parent
    if not folder.is_dir() and folder.resolve() != out.resolve():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise ServesimError(f"its folder {folder} {why}; the priors are written to a file "
                            "in an existing folder", where=where)
    if target.exists() and csv_path.exists() and target.samefile(csv_path):
        raise ServesimError("is the input CSV; writing the priors there would overwrite the "
                            "measurements they are fitted on", where=where)


def select(rows: list[Row], frameworks: list[str] | None, weight: str,
           path: Path) -> tuple[list[Case], dict[str, int]]:
    """The cases of ``rows`` of the ``frameworks`` (None: all) and ``--weights`` selection
    ``weight`` that fit their model's context and the installed tables price, and how many
    rows each reason kept out. None is one error: naming the filters and what rows the
    file holds where they match none, the reasons otherwise."""
    modelled: list[Case] = []
    skipped: dict[str, int] = {}
    for r in rows:
        got = classify(r)
        if isinstance(got, str):
            skipped[got] = skipped.get(got, 0) + 1
        else:
            modelled.append(got)
    kept = [c for c in modelled if (frameworks is None or c.framework in frameworks)
            and weight in ("all", weights(c))]
    if modelled and not kept:
        raise ServesimError(f"no row matches {_filters(frameworks, weight)}; the rows "
                            f"servesim can simulate here are {_kinds(modelled)}",
                            source=str(path))
    cases = []
    for c in kept:
        got = fits_context(c)
        got = tables_cover(got) if isinstance(got, Case) else got
        if isinstance(got, str):
            skipped[got] = skipped.get(got, 0) + 1
        else:
            cases.append(got)
    if not cases:
        which = f" matching {_filters(frameworks, weight)}" if kept and (
            frameworks or weight != "all") else ""
        raise ServesimError(f"no row{which} can be simulated; skipped: {_skipped(skipped)}"
                            if skipped else "the file has no rows", source=str(path))
    return cases, skipped


def _filters(frameworks: list[str] | None, weight: str) -> str:
    """The filters given, as typed."""
    given = [f"--framework {f}" for f in frameworks or ()]
    return " ".join(given + ([f"--weights {weight}"] if weight != "all" else []))


def _kinds(cases: list[Case]) -> str:
    """How many of ``cases`` each framework has, by ``--weights`` selection."""
    count: dict[str, dict[str, int]] = {}
    for c in cases:
        by = count.setdefault(c.framework, {})
        by[weights(c)] = by.get(weights(c), 0) + 1
    return "; ".join(f"{fw} (" + ", ".join(f"{n} {w}" for w, n in sorted(by.items())) + ")"
                     for fw, by in sorted(count.items()))


def check_fit_rows(cases: list[Case], path: Path, target: Path) -> None:
    """Refuse a fit, before any simulation, where a framework of ``cases`` has no row
    to fit its priors on (all held out, :attr:`sim.validate.silicon.Case.held_out`)."""
    fws = sorted({c.framework for c in cases})
    bare = {fw: sum(c.framework == fw for c in cases) for fw in fws
            if all(c.held_out for c in cases if c.framework == fw)}
    if bare:
        what = " and ".join(f"{fw} ({n} row{'s' * (n != 1)})" for fw, n in bare.items())
        raise ServesimError(
            f"nothing to fit the priors of {what} on: all {'its' if len(bare) == 1 else 'their'} "
            "rows are held out (mixtures of experts, FP8 weights outside InferenceX's dense "
            "rows, InferenceX rows on B200 and B300, and the hash's test half of the rest); "
            f"leave {'it' if len(bare) == 1 else 'them'} out with --framework, or give rows "
            "to fit",
            source=str(path), where=f"--fit-priors {target}")


def _print(records: list[dict[str, Any]], stats: dict[str, Any], skipped: dict[str, int],
           total: int, path: Path) -> None:
    head = (f"{'line':>5} {'framework':<8} {'model':<23} {'gpu':<9} {'tp':>2} {'isl':>5} "
            f"{'osl':>5} {'conc':>4} {'set':<4} {'TTFT ms':>9} {'pred':>9} {'err':>7} "
            f"{'TPOT ms':>8} {'pred':>8} {'err':>7}")
    print(head)
    for r in records:
        model = r["model"] + ("" if r.get("dtype", "bf16") == "bf16" else f" {r['dtype']}") \
            + (" nvfp4-exp" if r.get("expert_dtype") == "nvfp4" else "")
        print(f"{r['line']:>5} {r['framework']:<8} {model:<23} {r['gpu']:<9} {r['tp']:>2} "
              f"{r['isl']:>5} {r['osl']:>5} {r['concurrency']:>4} {r['split']:<4} "
              f"{r['ttft_ms']:>9.1f} {_ms(r['ttft_pred_ms'], 9, 1)} {_err(r['ttft_err'])} "
              f"{r['tpot_ms']:>8.2f} {_ms(r['tpot_pred_ms'], 8, 2)} {_err(r['tpot_err'])}"
              + (f"  ({r['note']})" if r["note"] else ""))
    print(f"{len(records)} of {total} rows of {path} simulated"
          + (f"; skipped: {_skipped(skipped)}" if skipped else ""))
    for fw, by in stats.items():
        for split, m in by.items():
            if m["ttft"]["rows"]:
                rows, runs = m["ttft"]["rows"], m["ttft"]["runs"]
                counted = "" if runs == rows else f" ({runs} runs)"
                print(f"{fw:<7} {split:<4} rows {rows:>3}{counted}: median |err| TTFT "
                      f"{_pct(m['ttft']['median'])}, TPOT {_pct(m['tpot']['median'])}; p90 "
                      f"TTFT {_pct(m['ttft']['p90'])}, TPOT {_pct(m['tpot']['p90'])}")


def _ms(x: float | None, width: int, places: int) -> str:
    """A predicted time (ms) in its column; '-' where there is none (no request finished,
    or a TPOT of one output token)."""
    return f"{x:>{width}.{places}f}" if x is not None and math.isfinite(x) else f"{'-':>{width}}"


def _err(x: float | None) -> str:
    return f"{x:>+7.1%}" if x is not None and math.isfinite(x) else f"{'-':>7}"


def _skipped(skipped: dict[str, int]) -> str:
    """The rows left out, by reason, most first."""
    return "; ".join(f"{n} {why}" for why, n in sorted(skipped.items(), key=lambda x: -x[1]))


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1%}"


__all__ = ["Row", "main"]
