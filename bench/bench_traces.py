"""Benchmark the trace loaders: rows per second and peak memory on a large generated file.

Usage::

    .venv/bin/python bench/bench_traces.py [--rows 1000000] [--formats servesim,azure,...]

For each format it writes a seeded synthetic file of ``--rows`` rows to a temporary
folder, then loads it in a fresh child process (so the figure is the loader's own peak
resident set, not the generator's) and prints rows, seconds, rows/s and peak RSS (MiB,
from ``resource.getrusage``). The bar is 1,000,000 rows in < 10 s and < 500 MiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 100_000  # rows written per block, to keep the generator's own memory small


def _write(path: Path, fmt: str, rows: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    t0 = np.datetime64("2023-11-16T18:17:03.9799600", "ns")
    header = {
        "servesim": "arrival_s,prompt_tokens,output_tokens",
        "azure": "TIMESTAMP,ContextTokens,GeneratedTokens",
        "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
        "lengths": "prompt_tokens,output_tokens",
    }
    now = 0.0
    with open(path, "w") as fh:
        if fmt in header:
            fh.write(header[fmt] + "\n")
        for start in range(0, rows, BLOCK):
            n = min(BLOCK, rows - start)
            arr = now + np.cumsum(rng.exponential(0.2, n))
            now = float(arr[-1])
            p = rng.integers(1, 8000, n)
            o = rng.integers(1, 2000, n)
            if fmt == "servesim":
                lines = [f"{a:.6f},{x},{y}\n" for a, x, y in zip(arr, p, o, strict=True)]
            elif fmt == "azure":
                ts = (t0 + (arr * 1e9).astype("timedelta64[ns]")).astype(str)
                # Azure writes 7 fractional digits: trim nanoseconds to 100 ns.
                lines = [f"{t[:10]} {t[11:27]},{x},{y}\n" for t, x, y in zip(ts, p, o, strict=True)]
            elif fmt == "burstgpt":
                lines = [f"{a:.0f},ChatGPT,{x},{y},{x + y},Conversation log\n"
                         for a, x, y in zip(arr, p, o, strict=True)]
            elif fmt == "mooncake":
                lines = [json.dumps({"timestamp": int(a * 1000), "input_length": int(x),
                                     "output_length": int(y), "hash_ids": list(range(x // 512))})
                         + "\n" for a, x, y in zip(arr, p, o, strict=True)]
            else:
                lines = [f"{x},{y}\n" for x, y in zip(p, o, strict=True)]
            fh.writelines(lines)


def _load_child(path: str, fmt: str) -> None:
    sys.path.insert(0, str(ROOT))
    from sim.workload.traces import load_trace

    t = time.perf_counter()
    trace = load_trace(path, fmt)
    dt = time.perf_counter() - t
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    print(json.dumps({"rows": len(trace), "seconds": dt, "peak_rss_mib": peak_mib}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--formats", default="servesim,azure,burstgpt,lengths,mooncake")
    ap.add_argument("--child", nargs=2, metavar=("FILE", "FORMAT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _load_child(*args.child)
        return 0
    print(f"{'format':<10} {'rows':>9} {'MiB file':>9} {'load s':>7} {'rows/s':>10} "
          f"{'peak RSS MiB':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            path = Path(tmp) / f"bench_{fmt}.{'jsonl' if fmt == 'mooncake' else 'csv'}"
            _write(path, fmt, args.rows)
            out = subprocess.run([sys.executable, __file__, "--child", str(path), fmt],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            size = path.stat().st_size / 2**20
            print(f"{fmt:<10} {r['rows']:>9,} {size:>9.1f} {r['seconds']:>7.2f} "
                  f"{r['rows'] / r['seconds']:>10,.0f} {r['peak_rss_mib']:>13.0f}")
            path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
