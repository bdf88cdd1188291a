"""``servesim compare``: one workload through several batching policies, side by side.

Each policy runs the same scenario file with only ``serving.policy`` changed (after any
``--set`` overrides), so the workload, model, hardware and limits are identical. The
GPU count is printed because ``disaggregated`` uses its own prefill and decode pools.
Outputs: a printed table, ``compare.csv``, ``compare.json`` (every run's summary) and
``compare_cdf.png`` (TTFT and TPOT CDFs overlaid), written into a temporary folder that
then replaces ``--out`` whole (:mod:`sim.report.folder`).
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from sim.configtools import ArgParser
from sim.errors import ServesimError
from sim.report.rejections import add_rejection_args, max_share, verdict

DEFAULT_POLICIES = "static,continuous,orca,chunked,disaggregated"
COMPARE_FILES = ("compare.json", "compare.csv")  # what marks a folder as compare's outputs

# (column header, path into the summary, scale): latencies are printed in ms.
COLUMNS: tuple[tuple[str, tuple[str, ...], float], ...] = (
    ("finished", ("requests", "finished"), 1),
    ("rejected", ("requests", "rejected"), 1),
    ("ttft_p50_ms", ("latency_s", "ttft", "p50"), 1e3),
    ("ttft_p99_ms", ("latency_s", "ttft", "p99"), 1e3),
    ("tpot_p50_ms", ("latency_s", "tpot", "p50"), 1e3),
    ("tpot_p99_ms", ("latency_s", "tpot", "p99"), 1e3),
    ("itl_p99_ms", ("latency_s", "itl", "p99"), 1e3),
    ("e2e_p99_ms", ("latency_s", "e2e", "p99"), 1e3),
    ("out_tok_s", ("throughput", "output_tokens_per_s"), 1),
    ("goodput_rps", ("throughput", "goodput_requests_per_s"), 1),
    ("preemptions", ("preemptions",), 1),
)


def gpus(scenario: Any) -> int:
    """GPUs the scenario's cluster uses (replicas x tp over its pools)."""
    from sim.config.disagg import pools

    return sum(p.replicas * p.tp for p in pools(scenario))


def run_policies(path: str | Path, policies: list[str], overrides: list[str] | None = None,
                 force: bool = False) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per policy: {policy: (RunResult, summary)}; each
    run's memory estimate is checked first (``force``: not refused)."""
    from sim.config import scenario
    from sim.core.budget import check
    from sim.core.engine import simulate
    from sim.policies.registry import POLICIES
    from sim.report.metrics import summarize

    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ServesimError(f"unknown policy {unknown[0] if unknown else ''!r}; valid: "
                            f"{', '.join(sorted(POLICIES))}", where="--policies")
    out = {}
    for policy in policies:
        sc = scenario.load(path, [*(overrides or []), f"serving.policy={policy}"])
        check(sc, force)
        res = simulate(sc)
        summary = summarize(res)
        summary["gpus"] = gpus(sc)
        out[policy] = (res, summary)
    return out


def _cell(summary: dict[str, Any], keys: tuple[str, ...], scale: float) -> float | None:
    v: Any = summary
    for k in keys:
        v = v[k]
    return None if v is None else v * scale


def rows(runs: dict[str, tuple[Any, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per policy: policy, gpus, then :data:`COLUMNS`."""
    return [{"policy": name, "gpus": s["gpus"],
             **{col: _cell(s, keys, scale) for col, keys, scale in COLUMNS}}
            for name, (_, s) in runs.items()]


def table(table_rows: list[dict[str, Any]]) -> str:
    """The rows as an aligned text table."""
    heads = ["policy", "gpus", *(c[0] for c in COLUMNS)]

    def fmt(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    cells = [[fmt(r[h]) for h in heads] for r in table_rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(heads, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """``servesim compare FILE --policies a,b,c``."""
    p = ArgParser(prog="servesim compare",
                  description="Run one workload through several batching policies and "
                              "compare latencies side by side.")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--policies", default=DEFAULT_POLICIES,
                   help=f"comma-separated policy names (default {DEFAULT_POLICIES})")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key for every run")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default: out/<scenario name>-compare)")
    p.add_argument("--no-plots", action="store_true", help="skip the CDF plot")
    p.add_argument("--force", action="store_true",
                   help="run even when the estimated memory is over what this machine has free")
    add_rejection_args(p)
    a = p.parse_args(argv)
    limit = max_share(a)

    from sim.report.folder import check_replaceable, replaced_folder
    from sim.report.outputs import default_out, plot_cdfs, summary_json, write_atomic

    policies = [x.strip() for x in a.policies.split(",") if x.strip()]
    if a.out is not None:
        check_replaceable(a.out, COMPARE_FILES, [a.scenario])  # before the runs
    runs = run_policies(a.scenario, policies, a.overrides, a.force)
    table_rows = rows(runs)
    name = next(iter(runs.values()))[1]["scenario"]
    out = a.out if a.out is not None else default_out(name, "-compare", a.scenario)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(table_rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table_rows)
    names = ["compare.csv", "compare.json"]
    with replaced_folder(out, COMPARE_FILES, inputs=[a.scenario]) as stage:
        write_atomic(stage / names[0], buf.getvalue().encode())
        summaries = {k: json.loads(summary_json(s)) for k, (_, s) in runs.items()}
        write_atomic(stage / names[1], (json.dumps(summaries, indent=2) + "\n").encode())
        if not a.no_plots:
            names.append("compare_cdf.png")
            plot_cdfs({k: r for k, (r, _) in runs.items()}, stage / names[-1])
    paths = [out / n for n in names]
    print(f"scenario {name}: {len(next(iter(runs.values()))[0].requests)} requests; "
          "latencies in ms")
    print(table(table_rows))
    print("wrote " + ", ".join(str(x) for x in paths))
    # Each policy's run is judged as `simulate` judges it, once all are written.
    for policy, (res, _) in runs.items():
        refused = verdict(res, limit)
        if refused is not None:
            raise ServesimError(f"policy {policy}: {refused.message}", refused.source,
                                refused.where)
    return 0
