"""Plots of a sweep: latency against rate, throughput against rate, latency–throughput frontier.

Each function draws from the aggregated rows of ``sweep.csv`` (means over seeds with 95%
confidence intervals as error bars) and returns the data of every curve it drew, keyed
``panel|configuration|series``, read back from the matplotlib lines themselves, so tests
can check that what is on the page is what is in the CSV. Latencies are drawn in
milliseconds on a log axis (they span decades between light load and saturation);
saturated points are marked with a cross. Files are written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sim.figures import plain_text, pyplot
from sim.report.slospec import SLO

Row = dict[str, Any]
Curves = dict[str, tuple[list[float], list[float]]]

STAT_STYLES = {"p50": ":", "p90": "--", "p99": "-"}
LATENCIES = (("ttft", "TTFT (time to first token)"), ("tpot", "TPOT (time per output token)"),
             ("e2e", "E2E (end-to-end latency)"))


def config_label(row: Row) -> str:
    """``policy, N replica(s), tp T`` (and ``pp P`` with pipeline stages): one curve's
    name."""
    n = int(row["replicas"])
    return (f"{row['policy']}, {n} replica{'s' if n != 1 else ''}, tp {int(row['tp'])}"
            + stages_label(row))


def stages_label(row: Row) -> str:
    """``, pp P`` for a row of a pipeline-parallel shape, nothing for one stage (or a row
    written before stages were a column)."""
    pp = int(row.get("pp") or 1)
    return f", pp {pp}" if pp != 1 else ""


def by_config(grid: list[Row]) -> dict[str, list[Row]]:
    """Rows grouped per configuration (first-seen order), each sorted by rate."""
    out: dict[str, list[Row]] = {}
    for r in grid:
        out.setdefault(config_label(r), []).append(r)
    return {k: sorted(v, key=lambda r: r["rate"]) for k, v in out.items()}


def _finish_latency_axis(ax: Any, metric: str, xlabel: str, ylabel: str, title: str) -> None:
    """Empty-panel note, log latency axis, labels, title and grid of a latency panel."""
    _empty_note(ax, "TPOT needs requests of 2+ output tokens" if metric == "tpot"
                else "no request finished")
    _log_axis(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)


def _log_axis(ax: Any) -> None:
    """Log y axis labelled in plain numbers (50, 100, 200), not 5x10^1."""
    from matplotlib.ticker import FuncFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    # Label the 2x and 5x minor ticks too: latency often spans less than a decade.
    ax.yaxis.set_minor_formatter(FuncFormatter(
        lambda v, _: f"{v:g}" if f"{v:e}"[0] in "25" else ""))


def _empty_note(ax: Any, what: str) -> None:
    """Say why a panel is empty instead of leaving a blank frame."""
    if not any(line.get_gid() for line in ax.lines):
        ax.text(0.5, 0.5, f"no data: {what}", transform=ax.transAxes, ha="center",
                va="center", color="gray")


def save_png(fig: Any, path: Path) -> None:
    """Write ``fig`` to ``path`` atomically (a temporary file, then a rename), without
    the matplotlib version in its metadata, and close it."""
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110, metadata={"Software": None})
    pyplot().close(fig)
    os.replace(tmp, path)


def _curves(fig: Any) -> Curves:
    out: Curves = {}
    for ax in fig.axes:
        for line in ax.lines:
            gid = line.get_gid()
            if gid:
                out[gid] = ([float(x) for x in line.get_xdata()],
                            [float(y) for y in line.get_ydata()])
    return out


def _series(rows: list[Row], col: str, scale: float = 1.0) -> tuple[list[float], list[float],
                                                                   list[float]]:
    """x (rate), y and CI half-width of ``col`` over rows where it is defined."""
    xs, ys, es = [], [], []
    for r in rows:
        if r.get(col) is not None:
            xs.append(float(r["rate"]))
            ys.append(float(r[col]) * scale)
            es.append(float(r.get(f"{col}_ci") or 0.0) * scale)
    return xs, ys, es


def _line(ax: Any, gid: str, xs: list[float], ys: list[float], es: list[float], **kw: Any) -> None:
    # A confidence interval reaching below zero cannot be drawn on a log axis: its lower
    # arm is clipped at 5% of the value (the CSV keeps the true half-width).
    low = [min(e, 0.95 * y) if y > 0 else e for e, y in zip(es, ys, strict=True)]
    cont = ax.errorbar(xs, ys, yerr=[low, es] if any(es) else None, capsize=2, **kw)
    cont.lines[0].set_gid(gid)


def _mark_saturated(ax: Any, gid: str, rows: list[Row], col: str, scale: float,
                    color: Any) -> None:
    sat = [r for r in rows if r.get("saturated") and r.get(col) is not None]
    if sat:
        ax.plot([r["rate"] for r in sat], [r[col] * scale for r in sat], "x", color=color,
                markersize=9, mew=2, gid=gid)


@plain_text
def latency_vs_rate(grid: list[Row], slos: list[SLO], scenario_slo: dict[str, float],
                    path: Path) -> Curves:
    """p50/p90/p99 TTFT, TPOT and E2E (ms, log) against request rate, with SLO lines."""
    plt = pyplot()
    configs = by_config(grid)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (metric, title) in zip(axes, LATENCIES, strict=True):
        for i, (label, rows) in enumerate(configs.items()):
            c = colors[i % len(colors)]
            styles = dict(STAT_STYLES)
            if any(s.metric == metric and s.stat == "mean" for s in slos):
                styles["mean"] = "-."  # drawn only when a target is set on it
            for stat, style in styles.items():
                col = f"{metric}_{stat}"
                xs, ys, es = _series(rows, col, 1e3)
                if xs:
                    _line(ax, f"{metric}|{label}|{stat}", xs, ys, es, color=c, linestyle=style,
                          marker="o", markersize=3)
            _mark_saturated(ax, f"{metric}|{label}|saturated", rows, f"{metric}_p99", 1e3, c)
        for s in slos:
            if s.metric == metric:
                ax.axhline(s.limit_s * 1e3, color="red", linewidth=1.2,
                           linestyle={**STAT_STYLES, "mean": "-."}.get(s.stat, "-"),
                           label=f"SLO {s.stat} ≤ {s.limit_s * 1e3:g} ms")
        per_request = scenario_slo.get(f"{metric}_s")
        if per_request is not None:
            ax.axhline(per_request * 1e3, color="gray", linewidth=1, linestyle="-.",
                       label=f"per-request SLO {per_request * 1e3:g} ms (goodput)")
        _finish_latency_axis(ax, metric, "request rate (requests/s, whole cluster)",
                             f"{metric.upper()} (ms, log scale)", title)
    # Two legends: colours name configurations, line styles name percentiles.
    handles = [plt.Line2D([], [], color=colors[i % len(colors)], marker="o", label=lbl)
               for i, lbl in enumerate(configs)]
    handles += [plt.Line2D([], [], color="black", linestyle=st, label=stat)
                for stat, st in STAT_STYLES.items()]
    if any(s.stat == "mean" for s in slos):
        handles.append(plt.Line2D([], [], color="black", linestyle="-.", label="mean"))
    handles.append(plt.Line2D([], [], color="black", marker="x", linestyle="",
                              label="saturated (queue kept growing)"))
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=9,
               frameon=False)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    curves = _curves(fig)
    save_png(fig, path)
    return curves


@plain_text
def throughput_vs_rate(grid: list[Row], path: Path) -> Curves:
    """Throughput and goodput (req/s) and output tokens/s against offered request rate."""
    plt = pyplot()
    configs = by_config(grid)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rates = sorted({float(r["rate"]) for r in grid})
    ax1.plot(rates, rates, color="lightgray", linewidth=3, label="offered (y = x)")
    for i, (label, rows) in enumerate(configs.items()):
        c = colors[i % len(colors)]
        for col, style, what in (("throughput_rps", "-", "throughput"),
                                 ("goodput_rps", "--", "goodput")):
            xs, ys, es = _series(rows, col)
            if xs:
                _line(ax1, f"requests|{label}|{col}", xs, ys, es, color=c, linestyle=style,
                      marker="o", markersize=3, label=f"{label}: {what}")
        _mark_saturated(ax1, f"requests|{label}|saturated", rows, "throughput_rps", 1.0, c)
        xs, ys, es = _series(rows, "output_tps")
        if xs:
            _line(ax2, f"tokens|{label}|output_tps", xs, ys, es, color=c, marker="o",
                  markersize=3, label=label)
    ax1.set_ylabel("completed requests/s")
    ax1.set_title("Throughput (solid) and goodput within per-request SLO (dashed)")
    ax2.set_ylabel("output tokens/s")
    ax2.set_title("Output token throughput")
    # Every request rejected: no tokens to draw (and no legend for matplotlib to warn of).
    _empty_note(ax2, "no request finished")
    for ax in (ax1, ax2):
        ax.set_xlabel("offered request rate (requests/s, whole cluster)")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    curves = _curves(fig)
    save_png(fig, path)
    return curves


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points (throughput, latency) no other point beats on both, by throughput ascending."""
    best: list[tuple[float, float]] = []
    for x, y in sorted(points, key=lambda p: (-p[0], p[1])):
        if not best or y < best[-1][1]:
            best.append((x, y))
    return best[::-1]


@plain_text
def frontier(grid: list[Row], slos: list[SLO], path: Path) -> Curves:
    """p99 TTFT and TPOT (ms, log) against output tokens/s, one curve per configuration,
    and the Pareto frontier over every unsaturated point of every configuration."""
    plt = pyplot()
    configs = by_config(grid)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        col = f"{metric}_p99"
        everyone: list[tuple[float, float]] = []
        for i, (label, rows) in enumerate(configs.items()):
            pts = [(float(r["output_tps"]), float(r[col]) * 1e3) for r in rows
                   if r.get(col) is not None and r.get("output_tps") is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", markersize=3,
                        color=colors[i % len(colors)], label=label, gid=f"{metric}|{label}|p99")
            everyone += [(float(r["output_tps"]), float(r[col]) * 1e3) for r in rows
                         if not r.get("saturated") and r.get(col) is not None
                         and r.get("output_tps") is not None]
        front = pareto(everyone)
        if front:
            ax.plot([p[0] for p in front], [p[1] for p in front], color="black",
                    linewidth=5, alpha=0.2, label="frontier (best of all, unsaturated)",
                    gid=f"{metric}|frontier|p99", zorder=0)
        for s in slos:
            if s.metric == metric and s.stat == "p99":
                ax.axhline(s.limit_s * 1e3, color="red", linewidth=1.2,
                           label=f"SLO p99 ≤ {s.limit_s * 1e3:g} ms")
        _finish_latency_axis(ax, metric, "output throughput (tokens/s, whole cluster)",
                             f"p99 {metric.upper()} (ms, log scale)",
                             f"Latency–throughput frontier: p99 {metric.upper()}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    curves = _curves(fig)
    save_png(fig, path)
    return curves


def sweep_plots(grid: list[Row], slos: list[SLO], scenario_slo: dict[str, float],
                out: Path) -> list[Path]:
    """Write the three sweep plots into ``out``; return their paths."""
    paths = [out / "latency_vs_rate.png", out / "throughput_vs_rate.png", out / "frontier.png"]
    latency_vs_rate(grid, slos, scenario_slo, paths[0])
    throughput_vs_rate(grid, paths[1])
    frontier(grid, slos, paths[2])
    return paths


@plain_text
def capacity_plot(search: list[Row], slos: list[SLO], max_rates: list[Row], path: Path) -> Curves:
    """Each SLO's metric (ms, log) at every rate the search tried on one replica (dots pass,
    crosses fail), the target, and each candidate's maximum rate with its 95% CI band."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(slos), figsize=(6.5 * len(slos), 6.2), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    one = [r for r in search if int(r["replicas"]) == 1]
    def shape(r: Row) -> tuple[str, int, int]:
        return str(r["policy"]), int(r["tp"]), int(r.get("pp") or 1)

    cands = list(dict.fromkeys(shape(r) for r in max_rates))
    for ax, slo in zip(axes[0], slos, strict=True):
        for i, cand in enumerate(cands):
            c = colors[i % len(colors)]
            label = f"{cand[0]}, tp {cand[1]}" + (f", pp {cand[2]}" if cand[2] != 1 else "")
            rows = sorted((r for r in one if shape(r) == cand
                           and r.get(slo.column) is not None), key=lambda r: r["rate"])
            for ok, marker in ((True, "o"), (False, "x")):
                pts = [r for r in rows if bool(r["pass"]) == ok]
                if pts:
                    ax.plot([r["rate"] for r in pts], [r[slo.column] * 1e3 for r in pts],
                            marker, color=c, linestyle="", gid=f"{slo.column}|{label}|{ok}",
                            label=f"{label}: " + ("passes" if ok
                                                   else "fails (a target, or saturated)"))
            m = next(r for r in max_rates if shape(r) == cand)
            ax.axvline(m["max_rate_per_replica"], color=c, linewidth=1.5,
                       label=f"{label}: max {m['max_rate_per_replica']:.3g} req/s")
            if m.get("ci_low") is not None:
                ax.axvspan(m["ci_low"], m["ci_high"], color=c, alpha=0.15,
                           label=f"{label}: 95% CI of max")
        ax.axhline(slo.limit_s * 1e3, color="red", linewidth=1.2,
                   label=f"SLO {slo.stat} ≤ {slo.limit_s * 1e3:g} ms")
        _empty_note(ax, f"{slo.column} undefined at every rate tried")
        _log_axis(ax)
        ax.set_xlabel("request rate per replica (requests/s)")
        ax.set_ylabel(f"{slo.metric.upper()} {slo.stat} (ms, log scale)")
        ax.set_title(f"Capacity search: {slo.metric.upper()} {slo.stat} (one point per seed)")
        ax.grid(True, which="both", alpha=0.3)
        # Below the axes: the search crowds its points where the legend would go.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8,
                  frameon=False)
    fig.tight_layout()
    curves = _curves(fig)
    save_png(fig, path)
    return curves
