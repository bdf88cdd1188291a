"""How well a quick CPU calibration predicts: the figures the test suite does not assert.

Usage::

    .venv/bin/python bench/bench_calibrate.py [--budget-s 300] [--passes 2] [--out DIR]

Runs a quick calibration of the ``tiny`` preset on this machine's CPU (one thread bound
to one core, as ``python -m calibrate --quick`` does), then prints:

* how long the calibration took, and whether its budget cut it short;
* each component's fit: held-out MAPE (the profile's 10% bar is per component) and the
  training MAPE;
* the whole steps' cross-validated error (the profile's ``validation`` block);
* a step timed directly here, after the calibration (one 96-token prefill and six
  decodes at contexts 150-350, the same step in every run): the profile's prediction,
  the median of ``--samples`` timed runs in each of ``--phases`` phases, and the
  relative error of the prediction against each phase and their median.

Every figure depends on what else shares the machine (a 2-core VM with other tenants
moves a small step's speed by tens of percent within a minute): quote them with the
machine, the date and the load (``uptime``) they were taken at, as docs/performance.md
does. The test suite checks what a calibration writes, never these figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from calibrate.model import build_decoder, prepare  # noqa: E402
from calibrate.run import CalibrationConfig, calibrate  # noqa: E402
from calibrate.timing import pin_cores  # noqa: E402
from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.profilefile import load_profile  # noqa: E402
from sim.cost.shape import shape_of  # noqa: E402
from sim.cost.shard import shard  # noqa: E402

#: The directly timed step: (cache slot, new tokens, context before).
STEP = [(0, 96, 0)] + [(1 + i, 1, 150 + 40 * i) for i in range(6)]


def time_step(samples: int, phases: int) -> list[float]:
    """Median seconds of ``STEP`` on the tiny model (full depth, fp32, one thread), per
    phase of ``samples`` timed runs after three warm-up runs."""
    device = torch.device("cpu")
    with torch.inference_mode():
        model = build_decoder(shard(MODELS["tiny"], 1), MODELS["tiny"].layers, 4096, "fp32",
                              device)
        caches = model.caches(8, 512)
        tokens = torch.tensor([3] * sum(n for _, n, _ in STEP))

        def step() -> object:
            return model(tokens, caches, prepare(STEP, device)).cpu()
        for _ in range(3):
            step()
        out = []
        for _ in range(phases):
            times = []
            for _ in range(samples):
                t0 = time.perf_counter()
                step()
                times.append(time.perf_counter() - t0)
            out.append(statistics.median(times))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--phases", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None,
                    help="directory for the profile and its CSV (default: a temporary one)")
    a = ap.parse_args(argv)
    tmp = tempfile.TemporaryDirectory() if a.out is None else None
    out = Path(tmp.name) if tmp else a.out
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    threads = torch.get_num_threads()
    mask = os.sched_getaffinity(0)
    try:
        t0 = time.perf_counter()
        res = calibrate(CalibrationConfig(model=MODELS["tiny"], out=out / "cpu-tiny.yaml",
                                          device="cpu", quick=True, budget_s=a.budget_s,
                                          progress=False, passes=a.passes))
        wall = time.perf_counter() - t0
        # Timed as the calibration timed: one thread, bound to the same core.
        torch.set_num_threads(1)
        pin_cores(1)
        phases = time_step(a.samples, a.phases)
    finally:
        os.sched_setaffinity(0, mask)
        torch.set_num_threads(threads)
    print(f"calibration: {wall:.1f} s wall (budget {a.budget_s:g} s, {a.passes} passes), "
          f"stopped early: {res.stopped_early}")
    print(f"{'component':<18} {'held-out MAPE':>13} {'max':>7} {'train MAPE':>10} "
          f"{'n test':>6} {'n train':>7}")
    for name, fit in res.fits.items():
        print(f"{name:<18} {fit.mape_test:>13.1%} {fit.max_err_test:>7.1%} "
              f"{fit.mape_train:>10.1%} {fit.n_test:>6} {fit.n_train:>7}")
    print(f"whole steps (cross-validated): mean error {res.step_mape:.1%}, "
          f"worst {res.step_max_err:.1%} (bar {res.bar:.0%})")
    predicted = load_profile(str(res.profile_path)).step_time(
        shape_of([(n, c) for _, n, c in STEP]))
    errs = [(predicted - m) / m for m in phases]
    measured = statistics.median(phases)
    print("direct step (96-token prefill + 6 decodes): predicted "
          f"{predicted * 1e3:.3f} ms; measured medians "
          f"{' '.join(f'{m * 1e3:.3f}' for m in phases)} ms "
          f"(median {measured * 1e3:.3f} ms); error of the prediction "
          f"{' '.join(f'{e:+.1%}' for e in errs)} "
          f"(against the median {(predicted - measured) / measured:+.1%})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
