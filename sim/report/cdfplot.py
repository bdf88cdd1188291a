"""TTFT and TPOT CDFs of one or more runs: the plot of ``simulate``, ``compare`` and
``validate``.

Each run is one step curve per panel (milliseconds on a log axis), with dots at its
p50 and p99 labelled with their values. A single run of a mixed workload adds one
dashed curve per class. The scenario's per-request SLO (``slo.ttft_s``, ``slo.tpot_s``;
each class's own targets in a mixed workload) is a vertical line. The figure's title
names what was simulated when given. Every drawn series carries a ``gid``
(``panel|label|what``) and :func:`plot_cdfs` returns their data, so tests can check
what is on the page.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from sim.core.engine import RunResult
from sim.figures import plain_text, pyplot
from sim.report.human import ms
from sim.report.metrics import class_targets, per_request
from sim.report.plots import save_png

Curves = dict[str, tuple[list[float], list[float]]]
PANELS = (("ttft", "TTFT (time to first token)", 0),
          ("tpot", "TPOT (time per output token)", 1))
MARKS = (50, 99)  # percentiles marked on each curve
TITLE_CHARS = 125  # characters of a title line that fit the figure's width at its font


def _curve(ax: Any, v_ms: np.ndarray, gid: str, **kw: Any) -> bool:
    """A step CDF of the finite values of ``v_ms``; False when there are none."""
    v = np.sort(v_ms[np.isfinite(v_ms)])
    if not v.size:
        return False
    ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", gid=gid, **kw)
    return True


def _marks(ax: Any, v_ms: np.ndarray, gid: str, color: Any, label: bool) -> None:
    """Dots at the p50 and p99 of ``v_ms`` (as the summary computes them), with their
    values written beside them when ``label`` (one run: several would overlap)."""
    v = v_ms[np.isfinite(v_ms)]
    if not v.size:
        return
    qs = [float(q) for q in np.percentile(v, MARKS)]
    ys = [p / 100 for p in MARKS]
    ax.plot(qs, ys, "o", color=color, markersize=5, gid=gid, zorder=3)
    if label:
        for p, q, y in zip(MARKS, qs, ys, strict=True):
            ax.annotate(f"p{p} {ms(q / 1e3)}", (q, y), xytext=(7, -13),
                        textcoords="offset points", fontsize=7, color=color)


def _slo_lines(ax: Any, key: str, res: RunResult, colors: dict[str, Any]) -> None:
    """Vertical lines at the per-request SLO on ``key``: the scenario's, or each class's."""
    col = 0 if key == "ttft" else 1  # a class's targets are (TTFT, TPOT)
    drawn: set[tuple[float, str]] = set()
    if res.requests.klass is not None:
        for name, targets in zip(res.requests.class_names, class_targets(res), strict=True):
            t = targets[col]
            if t is not None and (t, name) not in drawn:
                drawn.add((t, name))
                ax.axvline(t * 1e3, color=colors.get(name, "red"), linestyle=":", linewidth=1.3,
                           label=f"SLO {name}: {t * 1e3:g} ms", gid=f"{key}|{name}|slo")
        return
    t = res.scenario.slo.ttft_s if key == "ttft" else res.scenario.slo.tpot_s
    if t is not None:
        # Black and dashed: the fourth curve of the default colour cycle is red.
        ax.axvline(t * 1e3, color="black", linestyle="--", linewidth=1.3,
                   label=f"SLO {t * 1e3:g} ms", gid=f"{key}|all|slo")


def _finish(ax: Any, title: str, drew: bool) -> None:
    from matplotlib.ticker import FuncFormatter, LogFormatter

    ax.set_xscale("log")
    # Plain numbers (0.5, 2, 30) rather than 2x10^0; minor ticks labelled only on short
    # ranges, as matplotlib's own log formatter decides.
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
    ax.set_xlabel("milliseconds (log scale)")
    ax.set_ylabel("fraction of requests")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.set_ylim(0, 1.01)
    if drew:
        ax.legend(loc="lower right", fontsize=7)
    else:  # no request finished (or none had two tokens, for TPOT): say so
        ax.text(0.5, 0.5, "no finished request has this value", transform=ax.transAxes,
                ha="center", va="center", color="gray")


@plain_text
def plot_cdfs(runs: dict[str, RunResult], path: Path, title: str | None = None) -> Curves:
    """TTFT and TPOT CDFs (log time axis, ms) of ``runs`` (legend label -> run), overlaid,
    with p50/p99 dots, SLO lines and (one run of a mixed workload) per-class curves, as a
    PNG at ``path``; ``title`` (what was simulated) heads the figure. Returns each drawn
    series' data by gid."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6 if title else 4.2))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    one = next(iter(runs.values())) if len(runs) == 1 else None
    classes = (list(one.requests.class_names) if one is not None
               and one.requests.klass is not None else [])
    class_colors = {c: palette[(i + 1) % len(palette)] for i, c in enumerate(classes)}
    drew = [False, False]
    for i, (label, res) in enumerate(runs.items()):
        lat = per_request(res)
        color = palette[i % len(palette)]
        name = "all requests" if classes else label
        for ax, (key, _, col) in zip(axes, PANELS, strict=True):
            v = lat[key] * 1e3
            if _curve(ax, v, f"{key}|{label}|cdf", color=color, label=name):
                drew[col] = True
                _marks(ax, v, f"{key}|{label}|marks", color, len(runs) == 1)
    if one is not None:
        lat = per_request(one)
        for k, cname in enumerate(classes):
            m = one.requests.klass == k
            for ax, (key, _, _) in zip(axes, PANELS, strict=True):
                _curve(ax, lat[key][m] * 1e3, f"{key}|{cname}|cdf", color=class_colors[cname],
                       linestyle="--", linewidth=1.1, label=f"class {cname}")
        for ax, (key, _, _) in zip(axes, PANELS, strict=True):
            _slo_lines(ax, key, one, class_colors)
    elif runs:
        # The runs of a comparison share their scenario's SLO.
        for ax, (key, _, _) in zip(axes, PANELS, strict=True):
            _slo_lines(ax, key, next(iter(runs.values())), {})
    for ax, (_, text, col) in zip(axes, PANELS, strict=True):
        _finish(ax, text, drew[col])
    if title:
        # A long setup and cost source (parallel layouts, async scheduling) would run off
        # the figure's edges: wrapped onto lines that fit its width.
        text = textwrap.fill(title, TITLE_CHARS, break_on_hyphens=False)
        fig.suptitle(text + ("" if len(runs) == 1 else "\ndots: each curve's p50 and p99"),
                     fontsize=10)
    fig.tight_layout()
    curves: Curves = {}
    for ax in fig.axes:
        for line in ax.lines:
            gid = line.get_gid()
            if gid:
                curves[gid] = ([float(x) for x in line.get_xdata()],
                               [float(y) for y in line.get_ydata()])
    save_png(fig, path)
    return curves
