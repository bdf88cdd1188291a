"""What a staged workload (``workload.stages``) adds to a run's outputs: a per-stage
block in the printed table and ``latency_over_time.png``, each request's TTFT and TPOT
against its arrival time with the stage boundaries drawn, so a burst's queue and how
long it takes to drain can be seen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.core.result import RunResult
from sim.figures import plain_text, pyplot
from sim.report.metrics import per_request
from sim.report.plots import save_png
from sim.report.texttable import cell, left_width, ms_cell, right_columns


def stage_table(stages: list[dict[str, Any]]) -> list[str]:
    """Lines of the per-stage block: window (s), rates asked, offered and finished
    (req/s), TTFT/TPOT percentiles (ms), SLO attainment and drain time (s)."""
    cols = ("from s", "to s", "asked", "offered", "finished", "ttft p50", "ttft p99",
            "tpot p50", "tpot p99", "attain", "drain s")
    # A missing rate: the horizon ended the run before the stage (or before it drained).
    cells = []
    for s in stages:
        lat = s["latency_s"]
        cells.append([f"{s['start_s']:.1f}", f"{s['end_s']:.1f}", f"{s['rate_rps']:.3g}",
                      cell(s["offered_rps"], ".3f"), cell(s["finished_rps"], ".3f"),
                      ms_cell(lat["ttft"], "p50"), ms_cell(lat["ttft"], "p99"),
                      ms_cell(lat["tpot"], "p50"), ms_cell(lat["tpot"], "p99"),
                      cell(s["slo_attainment"], ".1%"), cell(s["drain_s"], ".1f", "never")])
    names = [str(s["stage"]) for s in stages]
    width = left_width(7, names)
    head, rows = right_columns(cols, cells)
    lines = [f"{'stage':<{width}}{head}"]
    lines.append("-" * len(lines[0]))
    lines += [f"{name:<{width}}{row}" for name, row in zip(names, rows, strict=True)]
    return lines


@plain_text
def plot_over_time(res: RunResult, path: Path) -> None:
    """Each request's TTFT and TPOT (ms, log scale) against its arrival time (s), with
    a rolling median and the stage boundaries labelled by their rate, as a PNG."""
    from matplotlib.ticker import FuncFormatter

    plt = pyplot()

    lat = per_request(res)
    arr = res.requests.arrival_s
    wins = res.requests.stage_windows or ()
    rates = [s.rate for s in res.scenario.workload.stages or ()]
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.4), sharex=True)
    for ax, key, title in zip(axes, ("ttft", "tpot"),
                              ("TTFT (time to first token)", "TPOT (time per output token)"),
                              strict=True):
        v = lat[key] * 1e3
        ok = np.isfinite(v) & (v > 0)
        ax.scatter(arr[ok], v[ok], s=3, alpha=0.35, linewidths=0, label="one request")
        if ok.sum() >= 20:
            # Median over a window of about 1/50 of the requests, in arrival order.
            w = max(5, int(ok.sum()) // 50)
            xs, ys = arr[ok], v[ok]
            med = [float(np.median(ys[i:i + w])) for i in range(0, len(ys) - w + 1, w)]
            mid = [float(np.median(xs[i:i + w])) for i in range(0, len(xs) - w + 1, w)]
            ax.plot(mid, med, color="black", linewidth=1.2, label="rolling median")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        ax.set_ylabel("milliseconds (log scale)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        for (lo, _hi), rate in zip(wins, rates, strict=True):
            ax.axvline(lo, color="tab:red", linewidth=0.8, alpha=0.7)
            ax.annotate(f"{rate:g} req/s", (lo, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(3, -12), textcoords="offset points", fontsize=8,
                        color="tab:red")
        if wins:
            ax.axvline(wins[-1][1], color="tab:red", linewidth=0.8, alpha=0.7)
        ax.legend(loc="lower right", fontsize=8)
    axes[-1].set_xlabel("arrival time (s)")
    fig.tight_layout()
    save_png(fig, path)
