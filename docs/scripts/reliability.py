"""Regenerate the table of docs/reliability.md: run the shipped overload and fault
scenarios, print one markdown row each (counts, verdicts, peak memory).

Run: PYTHONPATH=. .venv/bin/python docs/scripts/reliability.py
Each case runs in its own process so its peak resident memory is its own.
"""

from __future__ import annotations

import json
import subprocess
import sys

CASES = [
    ("overload-10x.yaml", []),
    ("overload-admission.yaml", []),
    ("faults-n-plus-1.yaml", []),
    ("faults-n-plus-1.yaml", ["cluster.replicas=2"]),
    ("faults-n-plus-1.yaml", ["faults.on_failure=fail"]),
    ("faults-n-plus-1.yaml", ["faults.failures_per_hour=6", "faults.repair_s=120"]),
]

CHILD = """
import json, resource, sys, time
from sim.config import scenario
from sim.core.engine import simulate
from sim.report.summary import summarize
sc = scenario.load("scenarios/" + sys.argv[1], sys.argv[2:])
t = time.perf_counter()
s = summarize(simulate(sc))
s["wall_s"] = time.perf_counter() - t
s["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(s))
"""


def main() -> None:
    print("| scenario | overrides | requests | finished | rejected | timed out | failed | "
          "unfinished | lost | saturated (growth / offered req/s) | faults: outages, lost, "
          "retried | e2e p99 s (affected / others) | peak RSS MB | wall s |")
    print("|" + "---|" * 14)
    for name, sets in CASES:
        args = [sys.executable, "-c", CHILD, name]
        for s in sets:
            args.append(s)
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        s = json.loads(out)
        rq = s["requests"]
        lost = rq["total"] - sum(rq[k] for k in ("finished", "rejected", "timed_out", "failed",
                                                 "unfinished", "not_arrived"))
        sat = s["saturation"]
        growth = "-" if sat["queue_growth_rps"] is None else f"{sat['queue_growth_rps']:.2f}"
        f = s.get("faults")
        faults = (f"{f['outages']}, {f['requests_lost']}, {f['requests_retried']}" if f
                  else "-")
        e2e = "-"
        if f:
            a, b = (f["latency_s"][g]["e2e"]["p99"] for g in ("affected", "unaffected"))
            e2e = f"{'-' if a is None else f'{a:.1f}'} / {'-' if b is None else f'{b:.1f}'}"
        rej = rq["rejected"]
        if rq["rejected_by_reason"]:
            rej = f"{rej} ({', '.join(f'{k} {v}' for k, v in rq['rejected_by_reason'].items())})"
        print(f"| {name} | {' '.join(sets) or '-'} | {rq['total']} | {rq['finished']} | {rej} | "
              f"{rq['timed_out']} | {rq['failed']} | {rq['unfinished']} | {lost} | "
              f"{'yes' if sat['saturated'] else 'no'} ({growth} / {sat['offered_rps']:.2f}) | "
              f"{faults} | {e2e} | {s['peak_rss_mb']:.0f} | {s['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
