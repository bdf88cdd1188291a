"""What every ``servesim validate`` mode does with a level once it is compared: the
options they share, the level's CSVs and CDF plot, its printed table with what explains
it, and ``validation.json`` (:mod:`sim.validate.command` runs the modes).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection
from pathlib import Path
from typing import Any

from sim.report import outputs as report
from sim.report.metrics import clean
from sim.validate.validation import bar_value, table

# Below this share of a core during the steps, a CPU replay was slowed by other processes.
BUSY_SHARE = 0.9


def unique_label(label: str, taken: Collection[str]) -> str:
    """``label``, or where a level already has it ``label~2``, ``label~3``... (the first
    free), so two levels of one name keep both their files."""
    k = 2
    free = label
    while free in taken:
        free, k = f"{label}~{k}", k + 1
    return free


def common_args(p: argparse.ArgumentParser) -> None:
    """The options every mode shares: ``--out``, ``--bar`` and ``--no-plots``."""
    p.add_argument("--out", type=Path, default=Path("out") / "validate", help="output folder")
    p.add_argument("--bar", type=bar_value, default=None,
                   help="relative-error bar for TTFT and TPOT at p50 and p90 "
                        "(default 0.15 on CPU, 0.10 on GPU)")
    p.add_argument("--no-plots", action="store_true", help="skip the CDF plots")


def write_level(stage: Path, out: Path, label: str, real: Any, pred: Any, plots: bool,
                 matched: Any = None) -> list[str]:
    """Write a level's CSVs (and plot) into ``stage``; their paths once it is ``out``."""
    runs = {"real": real, "predicted": pred}
    curves = dict(runs)
    if matched is not None:
        curves["predicted at the level's measured speed"] = matched
    return [str(out / p.name)
            for p in report.write_compared(stage, label, runs, curves if plots else None)]


def _title(level: dict[str, Any]) -> str:
    load = level.get("load")
    where = {"below": "below saturation", "near": "near saturation"}.get(
        str(level.get("level")), "at a given rate")
    dev = level.get("device") or {}
    rate = level.get("rate_rps")
    return (f"== {level['label']}: {where}, "
            f"{'rate not recorded' if rate is None else f'{rate:.3g} req/s'}"
            f"{f' (load {load:.2f} of predicted saturation)' if load is not None else ''}, "
            f"policy {level['policy']}, {dev.get('name', '?')} ({dev.get('type', '?')}, "
            f"threads {dev.get('threads', '?')})")


def print_level(level: dict[str, Any]) -> None:
    """Print a level's comparison table and what explains it: step times, probes, the
    verdict, the sensitivity to device prices and the speed-matched prediction."""
    print(table(level["comparison"], _title(level)))
    st = level.get("steps") or {}
    if st:
        parts = [f"{k.replace('_', ' ')} {v['iterations']} steps: {v['real_s']:.2f} s real, "
                 f"{v['predicted_s']:.2f} s predicted" for k in ("with_prefill", "decode_only")
                 if (v := st[k])["iterations"]]
        if st.get("wake"):
            parts.append(f"waking from idle priced on {st['wake']['steps']} steps "
                         f"({st['wake']['predicted_s']:.3f} s, included above)")
        if st.get("host"):
            parts.append(f"host work between steps {st['host']['real_s']:.3f} s real, "
                         f"{st['host']['predicted_s']:.3f} s predicted")
        print("iterations: " + "; ".join(parts))
        share = st.get("cpu_share")
        if (level.get("device") or {}).get("type") == "cpu" and share is not None:
            busy = share < BUSY_SHARE
            print(f"replay thread on a core {share:.0%} of its step time"
                  + (": the machine was busy, real times are inflated" if busy else ""))
    probes = level.get("probe") or {}
    if probes:
        print("probe steps, median ms before / after the level, profile's price: " + "; ".join(
            f"{k} {p['before_s'] * 1e3:.2f} / {p['after_s'] * 1e3:.2f}, "
            f"{p['predicted_s'] * 1e3:.2f}" for k, p in probes.items()))
    v = level["verdict"]
    worst = "-" if v["worst"] is None else f"{v['worst']:.1%}"
    if v["passed"] is None:
        print(f"TTFT/TPOT p50+p90 worst |error| {worst} over the requests finished in both: "
              f"not judged ({v['why']})")
    else:
        print(f"TTFT/TPOT p50+p90 worst |error| {worst}: "
              f"{'within' if v['passed'] else 'OVER'} the {v['bar']:.0%} bar")
    sens = level.get("sensitivity")
    if sens:
        lo, hi = sens["factors"]
        cmp = level["comparison"]["metrics"]

        def ms(x: float | None) -> str:
            return "-" if x is None else f"{x * 1e3:.3g}"
        print(f"sensitivity: device prices x{lo:g} / x{hi:g} give " + "; ".join(
            f"{m.upper()} {q} {ms(v[0])} / {ms(v[1])} ms (real {ms(cmp[m][q]['real'])})"
            for m, rows in sens["metrics"].items() for q, v in rows.items()))
    sm = level.get("speed_matched")
    if sm:
        errs = ", ".join(
            f"{m.upper()} p{q} " + ("-" if (e := sm["comparison"]["metrics"][m][f"p{q}"]
                                         ["rel_err"]) is None else f"{e:+.1%}")
            for m in ("ttft", "tpot") for q in (50, 90))
        w = sm["verdict"]["worst"]
        print(f"speed-matched (diagnostic, not the verdict): the level ran prefill steps at "
              f"{sm['prefill_factor']:.3f}x and decode-only steps at {sm['decode_factor']:.3f}x "
              f"the profile's price; priced so: {errs}; worst "
              f"{'-' if w is None else f'{w:.1%}'}")


def finish_levels(levels: list[dict[str, Any]], stage: Path, extra: dict[str, Any]) -> None:
    """Write every level, with ``extra`` (the mode), to ``validation.json`` in ``stage``."""
    report.write_atomic(stage / "validation.json", (json.dumps(
        clean({**extra, "levels": levels}), indent=2, allow_nan=False) + "\n").encode())


def wrote(out: Path, plots: bool) -> int:
    """Say what was written in ``out`` (the plots only where ``plots``: --no-plots
    writes none); the command's exit status (0)."""
    print(f"wrote {out / 'validation.json'} and per-level CSVs{' and plots' if plots else ''} "
          f"in {out}")
    return 0
