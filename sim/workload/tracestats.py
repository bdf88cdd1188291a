"""Summary statistics and a diagnostic plot of a :class:`~sim.workload.traces.Trace`.

Definitions match ``sim/data/traces/README.md``: span = last - first arrival (s); mean
rate = rows / span (req/s); burstiness = coefficient of variation (population standard
deviation / mean) of the inter-arrival gaps, 1 for a Poisson process; percentiles use
numpy's default linear interpolation. matplotlib is imported only inside
:func:`plot_trace`, so loading this module stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from sim.figures import plain_text, pyplot
from sim.files import shown
from sim.workload.traces import Trace

PERCENTILES = (50, 90, 99)


def length_stats(tokens: np.ndarray) -> dict[str, float]:
    """Mean, p50/p90/p99, min and max of a token-count array (tokens)."""
    x = tokens.astype(np.float64)
    out = {"mean": float(x.mean())}
    for q, v in zip(PERCENTILES, np.percentile(x, PERCENTILES), strict=True):
        out[f"p{q}"] = float(v)
    out["min"], out["max"] = float(x.min()), float(x.max())
    return out


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Rows, span (s), mean rate (req/s), inter-arrival CV and token-length summaries.

    Time figures are None for a length-only trace, or when every row shares one time.
    """
    a = trace.arrival_s
    span = rate = cv = None
    if a is not None and len(a) >= 2:
        span = float(a[-1] - a[0])
        gaps = np.diff(a)
        if span > 0:
            rate = len(a) / span
            cv = float(gaps.std() / gaps.mean())
    return {
        "source": shown(trace.source),
        "format": trace.fmt,
        "rows": len(trace),
        "span_s": span,
        "mean_rate_rps": rate,
        "interarrival_cv": cv,
        "prompt_tokens": length_stats(trace.prompt_tokens),
        "output_tokens": length_stats(trace.output_tokens),
        "dropped": dict(trace.dropped),
    }


def format_stats(stats: dict[str, Any]) -> str:
    """Human-readable multi-line rendering of :func:`trace_stats`' result."""
    def num(v: float | None, fmt: str, unit: str = "") -> str:
        return "-" if v is None else f"{v:{fmt}}{unit}"

    lines = [
        f"trace      {stats['source']} (format {stats['format']})",
        f"rows       {stats['rows']:,}",
        f"span       {num(stats['span_s'], ',.1f', ' s')}",
        f"mean rate  {num(stats['mean_rate_rps'], '.3f', ' req/s')}",
        f"burstiness {num(stats['interarrival_cv'], '.2f')} (inter-arrival CV; Poisson = 1)",
        f"{'tokens':<10} {'mean':>9} {'p50':>8} {'p90':>8} {'p99':>8} {'min':>7} {'max':>8}",
    ]
    for key in ("prompt_tokens", "output_tokens"):
        s = stats[key]
        lines.append(f"{key.split('_')[0]:<10} {s['mean']:>9.1f} {s['p50']:>8.1f} "
                     f"{s['p90']:>8.1f} {s['p99']:>8.1f} {s['min']:>7.0f} {s['max']:>8.0f}")
    for reason, count in stats["dropped"].items():
        lines.append(f"dropped    {count:,} rows: {reason}")
    return "\n".join(lines)


def rate_bins(arrival_s: np.ndarray, target_bin_s: float = 60.0, min_bins: int = 20,
              max_bins: int = 5000) -> tuple[np.ndarray, np.ndarray, float]:
    """Arrival rate over time: ``(bin starts s, rate req/s, bin width s)``.

    Bins are ``target_bin_s`` wide unless that would give fewer than ``min_bins`` bins
    over the span, in which case the span is split into ``min_bins`` bins, or more than
    ``max_bins`` (a plot shows no more; a trace spanning years would need billions),
    in which case it is split into ``max_bins``.
    """
    start = float(arrival_s[0])
    span = float(arrival_s[-1]) - start
    width = target_bin_s if span >= target_bin_s * min_bins else max(span / min_bins, 1e-9)
    width = max(width, span / max_bins)
    nbins = max(1, int(np.ceil(span / width)) or 1)
    counts, edges = np.histogram(arrival_s, bins=nbins, range=(start, start + nbins * width))
    return edges[:-1], counts / width, width


# Per format, the metadata a plot leaves out (None drops a key matplotlib would write).
_FIXED_METADATA: dict[str, dict[str, None]] = {
    ".png": {"Software": None},
    ".pdf": {"Creator": None, "Producer": None, "CreationDate": None},
    ".svg": {"Creator": None, "Date": None},
}


@plain_text
def plot_trace(trace: Trace, out: str | Path, title: str | None = None) -> Path:
    """Write a PNG: arrival rate over time, and prompt / output length histograms."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    if trace.arrival_s is not None and len(trace) >= 2 and trace.arrival_s[-1] > trace.arrival_s[0]:
        t, r, width = rate_bins(trace.arrival_s)
        ax.step(t, r, where="post")
        ax.set_xlabel("time since trace start (s)")
        ax.set_ylabel(f"arrival rate (req/s, {width:.3g} s bins)")
        ax.set_title("arrivals over time")
    else:
        ax.text(0.5, 0.5, "no arrival times\n(length-only trace)", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
    for ax, key, colour in ((axes[1], "prompt_tokens", "C1"), (axes[2], "output_tokens", "C2")):
        x = getattr(trace, key)
        ax.hist(x, bins=60, color=colour)
        ax.set_xlabel(f"{key.split('_')[0]} length (tokens)")
        ax.set_ylabel("requests")
        ax.set_title(f"{key.split('_')[0]} lengths: mean {x.mean():.0f}, "
                     f"p99 {np.percentile(x, 99):.0f}")
    fig.suptitle(title or f"{shown(Path(trace.source).name)}: {len(trace):,} requests")
    fig.tight_layout()
    path = Path(out)
    # No dates, versions or random ids in the file: the same trace gives the same bytes.
    with plt.rc_context({"svg.hashsalt": "servesim"}):
        fig.savefig(path, dpi=100, metadata=_FIXED_METADATA.get(path.suffix.lower()))
    plt.close(fig)
    return path
