"""A calibration's own operator timings against a profile built from the public tables.

Run from the repository root (no tables needed: the profile is a shipped file):
    .venv/bin/python docs/scripts/own_vs_tables.py docs/data/h200-2026-12-04/cuda-llama-3-8b.csv \
        [--profile h200-llama-3-8b-tp1-vllm]

`servesim calibrate` times servesim's own torch model operator by operator (the linear
stack and attention per layer, the LM head per step) and writes every point to its CSV.
This prices each of those points with the profile's component of the same name, at the
same batch shape (`entries`, as the CSV records them), and prints, per component, the
points and their error (own − profile) / profile, then the median |error| and the signed
median. The two time different code: the torch model runs RMSNorm, rotary embedding,
SiLU and the residual adds as separate kernels and attention through torch's
scaled-dot-product attention, where vLLM (whose kernels the tables time) fuses some of
them and runs FlashAttention-3 over a paged cache. The difference is what a profile
calibrated on servesim's model would carry over to a vLLM server.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from calibrate.output import read_csv  # noqa: E402
from sim.cost.profile import FORMS  # noqa: E402
from sim.cost.profilefile import load_profile  # noqa: E402
from sim.errors import ServesimError  # noqa: E402

COMPONENTS = ("linear", "prefill_attention", "decode_attention", "lm_head")


def compare(csv_path: Path, profile: str
            ) -> tuple[str, dict[str, list[tuple[str, float, float]]]]:
    """What the profile is (its model, tp and cost source), and per component (label, own
    seconds, profile seconds) for every timed point (per layer for per-layer components,
    as the CSV records them). The CSV does not name its model: the header line is there
    for the reader to check the two are the same model."""
    cost = load_profile(profile)
    what = f"profile {profile}: {cost.model.name} at tp {cost.tp}, {cost.source}"
    layers = cost.model.layers
    out: dict[str, list[tuple[str, float, float]]] = {c: [] for c in COMPONENTS}
    for m in read_csv(csv_path):
        name = m.point.component
        if name not in out or m.status != "ok" or m.timing is None:
            continue
        priced = cost.breakdown(m.shape)[name]
        out[name].append((m.point.label, m.timing.median_s,
                          priced / layers if FORMS[name].per_layer else priced))
    return what, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", type=Path, help="a calibration's measurements (NAME.csv)")
    p.add_argument("--profile", default="h200-llama-3-8b-tp1-vllm",
                   help="a profile's path or shipped name (default: %(default)s)")
    a = p.parse_args(argv)
    try:
        what, rows = compare(a.csv, a.profile)
    except (ServesimError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{a.csv}: its operators against {what}")
    summary = []
    for name, points in rows.items():
        if not points:
            continue
        per = " per layer" if FORMS[name].per_layer else ""
        print(f"\n| {name} point | own ms{per} | profile ms{per} | error |")
        print("|---|---:|---:|---:|")
        errs = []
        for label, own, priced in sorted(points, key=lambda r: r[2]):
            err = (own - priced) / priced
            errs.append(err)
            print(f"| {label} | {own * 1e3:.4f} | {priced * 1e3:.4f} | {err:+.1%} |")
        summary.append(f"{name}: median |error| {statistics.median(map(abs, errs)):.1%}, "
                       f"signed median {statistics.median(errs):+.1%} over {len(errs)} points")
    print()
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
