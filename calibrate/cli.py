"""Command line: ``servesim calibrate`` (also ``python -m calibrate``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.cliargs import ArgParser, float_arg, int_arg
from sim.errors import ServesimError

# The flags that set what a run measures; a refit takes them from the run's settings.
MEASURING = ("model", "hf_config", "device", "dtype", "tp", "gpu", "budget_s", "quick",
             "threads", "passes")


def parser() -> argparse.ArgumentParser:
    """The calibrate argument parser."""
    p = ArgParser(
        prog="servesim calibrate",
        description="Time prefill and decode on this device with torch, fit the cost model, "
                    "and write a profile the simulator reads with cost: {profile: FILE}.")
    p.add_argument("--model", default=None,
                   help="model preset (see sim/cost/presets.py), e.g. llama-3-8b")
    p.add_argument("--hf-config", type=Path, default=None,
                   help="HuggingFace config.json (llama, mistral, qwen2, qwen3, mixtral, "
                        "qwen3_moe); overrides --model")
    p.add_argument("--device", default="cuda", help="cuda or cpu (default: cuda)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None,
                   help="default: the model's dtype on cuda, fp32 on cpu")
    p.add_argument("--tp", type=int_arg(ge=1, le=1024), default=1,
                   help="tensor-parallel degree to model")
    p.add_argument("--gpu", default=None,
                   help="hardware-table entry whose interconnect sets the tp all-reduce cost")
    p.add_argument("--budget-s", type=float_arg(gt=0), default=600.0,
                   help="wall-clock budget; the sweep stops early and fits what it measured")
    p.add_argument("--quick", action="store_true", help="a coarse grid and fewer repeats")
    p.add_argument("--threads", type=int_arg(ge=1, le=1024), default=1,
                   help="CPU threads (default 1, see docs)")
    p.add_argument("--passes", type=int_arg(ge=1, le=100), default=2,
                   help="sweeps over every point, each point keeping its fastest median "
                        "(default 2; guards against a busy neighbour on a shared machine)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", type=Path, required=True,
                   help="profile YAML to write; the measurements CSV goes beside it (an "
                        "existing file is replaced only when calibrate wrote it)")
    p.add_argument("--refit", type=Path, default=None, metavar="CSV",
                   help="fit a profile again, without a device, from a calibration's "
                        "measurements CSV and the CSV.meta.json beside it (the model and "
                        "settings are the run's own)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the command; a :class:`ServesimError` prints one line on stderr and returns 2."""
    try:
        args = parser().parse_args(argv)
        if args.budget_s <= 0:
            raise ServesimError(f"got {args.budget_s}, must be greater than 0", where="--budget-s")
        if args.passes < 1:
            raise ServesimError(f"got {args.passes}, must be at least 1", where="--passes")
        if args.out.suffix not in (".yaml", ".yml"):
            raise ServesimError(f"got {str(args.out)!r}, expected a .yaml file", where="--out")
        # A refit times nothing, so its folder is made only when it writes: one that fails
        # on its CSV leaves no empty folder behind.
        _check_writable(args.out, make=args.refit is None)
        _check_replaceable(args.out, args.refit)
        if args.refit is not None:
            # Every measuring flag a refit would ignore is refused, not dropped in silence.
            defaults = parser().parse_args(["--out", "x.yaml"])
            given = [f"--{k.replace('_', '-')}" for k in MEASURING
                     if getattr(args, k) != getattr(defaults, k)]
            if given:
                raise ServesimError(f"{', '.join(given)}: a refit takes the model and the "
                                    "run's settings from CSV.meta.json", where="--refit")
            # Fitting needs numpy and scipy only: a CSV timed on a GPU machine can be
            # fitted again on any machine with servesim installed, torch or not.
            from calibrate.refit import refit
            print(summary(refit(args.refit, args.out)))
            return 0
        # torch is imported only now, so that --help and --refit work without it and a
        # missing torch is one line.
        try:
            from calibrate.arch import resolve_model
            from calibrate.run import CalibrationConfig, calibrate
        except ImportError as exc:
            raise ServesimError(f"timing on a device needs torch: install servesim[calibrate] "
                                f"({exc}); --refit of a saved CSV does not") from None
        cfg = CalibrationConfig(
            model=resolve_model(args.model, args.hf_config), out=args.out, device=args.device,
            dtype=args.dtype, tp=args.tp, budget_s=args.budget_s, quick=args.quick, gpu=args.gpu,
            threads=args.threads, progress=not args.no_progress, passes=args.passes)
        res = calibrate(cfg)
    except ServesimError as exc:
        print(f"servesim calibrate: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("servesim calibrate: interrupted", file=sys.stderr)
        return 130
    print(summary(res))
    if res.interrupted:
        print("servesim calibrate: interrupted; the profile is fitted on what was measured",
              file=sys.stderr)
        return 130
    return 0


def summary(res: object) -> str:
    """Human-readable lines: per-component held-out error, whole-step error, files written."""
    from calibrate.calresult import CalibrationResult

    assert isinstance(res, CalibrationResult)
    bar = res.bar

    def verdict(x: float) -> str:
        return "ok" if x <= bar else f"above the {bar:.0%} bar"
    lines = [f"{'component':<18} {'held-out MAPE':>13} {'worst':>7} {'train+test':>11}"]
    for name, f in res.fits.items():
        lines.append(f"{name:<18} {f.mape_test:>12.1%} {f.max_err_test:>8.1%} "
                     f"{f.n_train:>6}+{f.n_test:<4} {verdict(f.mape_test)}")
    lines.append(f"whole steps: mean error {res.step_mape:.1%}, worst {res.step_max_err:.1%}"
                 f" ({verdict(res.step_mape)})")
    if res.cost.wake and res.wake_fit is not None:
        w, fit = res.cost.wake, res.wake_fit
        lines.append(f"waking from idle: up to +{w['max_s'] * 1e3:.3g} ms a step, time "
                     f"constant {w['tau_s'] * 1e3:.3g} ms (fit off by "
                     f"{fit['mean_abs_err_s'] * 1e6:.0f} us on average over "
                     f"{int(fit['points'])} points)")
    lines += [f"note: {n}" for n in res.notes]
    lines.append(f"wrote {res.profile_path} and {res.csv_path.name} " + (
        f"(refitted from {res.refit_of})"
        if res.refit_of else f"in {res.elapsed_s:.1f} s"))
    return "\n".join(lines)


def _check_replaceable(out: Path, refit: Path | None) -> None:
    """Refuse, before any timing, an ``--out`` whose profile or measurements files would
    replace files calibrate did not write (a scenario, a trace of the same stem), or a
    refit whose measurements would be written over the CSV it reads."""
    from calibrate.output import (
        is_calibration_file,
        measurements_path,
        meta_path,
        staging_path,
    )
    from sim.cost.profilefile import profile_kind
    from sim.files import check_replaceable_file

    check_replaceable_file(out, lambda p: profile_kind(p) == "calibrate",
                           "a profile calibrate wrote")
    for csv_path in (measurements_path(out), staging_path(out)):
        for path in (csv_path, meta_path(csv_path)):
            check_replaceable_file(path, is_calibration_file,
                                   "a calibration's measurements or their settings",
                                   where=f"--out (its {path.name} beside it)")
    if refit is not None and refit.exists() and \
            refit.resolve() == staging_path(out).resolve():
        raise ServesimError(f"got {str(out)!r}: its measurements would be written over "
                            f"the --refit CSV being read; give another --out", where="--out")


def _check_writable(out: Path, make: bool = True) -> None:
    """Make ``--out``'s folder now (where ``make``), so that one that cannot be made or
    written is refused before the minutes of timing rather than after them (the profile
    and its CSV go there; a file is created and removed to prove the folder takes
    writes). A file on its path is refused either way."""
    for above in (out.parent, *out.parent.parents):
        if above.exists() and not above.is_dir():
            raise ServesimError(f"got {str(out)!r}: {above} is a file, not a folder",
                                where="--out")
    if not make:
        return
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.parent / f".{out.name}.probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ServesimError(f"got {str(out)!r}: cannot write into {out.parent} "
                            f"({exc.strerror or exc})", where="--out") from None
