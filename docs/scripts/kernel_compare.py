"""Kernel times measured on a GPU at hand against the public kernel tables.

Run from the repository root, with the `measured` extra installed, on the CSV that
`scripts/kernel_check.py` wrote on the GPU (scripts/gpu_check.sh runs it last):
    .venv/bin/python docs/scripts/kernel_compare.py OUT/kernels-cuda.csv \
        [--gpu h200] [--framework vllm] [--version 0.24.0]
It prints two Markdown tables and a summary:

* each GEMM row against the table's time for the same (m, n, k) and dtype, read the
  way measured profiles read it (:meth:`sim.cost.tables.gemmtable.GemmTable.at`:
  bilinear in n and k off the grid, the table's own m rows), and the measured and
  tabled fp8 speed-up over bf16 at each shape and m;
* each prefill-attention row (batch 1, 32 query and 8 KV heads of 128, causal, bf16)
  against the table's full-attention row of the same prompt length. The tables time
  vLLM's FlashAttention-3 kernel; the GPU side times torch's scaled-dot-product
  attention, another kernel, so that row compares kernel families, not one kernel;
* each decode-attention row (``m`` sequences of ``n`` KV tokens, the same heads) against
  the table's generation row of that batch at ``step`` = n − 1 (the step counts the
  cached tokens before the new one), again kernel families: vLLM's paged FA3 kernel
  against torch's over a contiguous cache.

Errors are (measured - table) / table. The GEMM rows of the tables are vLLM's
``torch.nn.functional.linear`` (cuBLAS, as the check's ``torch.matmul``) for bf16 and
vLLM's CUTLASS kernel for per-tensor fp8 (the check's ``torch._scaled_mm`` is cuBLASLt's).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.gpus import GPUS, gpu_of_device  # noqa: E402
from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.tables.gemmtable import gemm_table  # noqa: E402
from sim.cost.tables.kerneltables import load_table  # noqa: E402
from sim.cost.tables.profilebuild import BuildSpec, resolve_version  # noqa: E402
from sim.errors import ServesimError  # noqa: E402


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a kernel_check CSV; a clear error when it is not one."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    need = {"device", "memory_bytes", "op", "dtype", "m", "n", "k", "ms", "how", "error"}
    if not rows or not need <= set(rows[0]):
        raise ServesimError(f"not a kernel_check CSV: expected columns "
                            f"{', '.join(sorted(need))}", source=str(path))
    for line, r in enumerate(rows, start=2):
        for col, kind in (("memory_bytes", int), ("m", int), ("n", int), ("k", int),
                          ("ms", float)):
            try:
                if r[col] or col == "memory_bytes":
                    kind(r[col])
            except (TypeError, ValueError):
                raise ServesimError(f"column {col}: got {r[col]!r}, expected "
                                    f"{'a whole number' if kind is int else 'a number'}",
                                    source=str(path), where=f"line {line}") from None
    return rows


def gemm_lines(rows: list[dict[str, str]], gpu: str, framework: str, version: str
               ) -> tuple[list[str], dict[str, list[float]]]:
    """Markdown rows comparing each timed GEMM with the table, and |errors| per dtype."""
    tables = {d: gemm_table(gpu, framework, version, d).table for d in ("bf16", "fp8")}
    timed = {(r["op"], r["dtype"], int(r["m"]), int(r["n"]), int(r["k"])): float(r["ms"])
             for r in rows if not r["op"].endswith("_attention") and r["ms"]}
    out: list[str] = []
    errors: dict[str, list[float]] = {"bf16": [], "fp8": []}
    for (op, dtype, m, n, k), ms in timed.items():
        table_ms = tables[dtype].at(m, n, k) * 1e3
        err = (ms - table_ms) / table_ms
        errors[dtype].append(abs(err))
        bf16 = (op, "bf16", m, n, k)
        if dtype == "fp8" and bf16 in timed:
            table_x = tables["bf16"].at(m, n, k) * 1e3 / table_ms
            speed = f"{timed[bf16] / ms:.2f}x | {table_x:.2f}x"
        else:
            speed = "- | -"
        out.append(f"| {op} | {dtype} | {m} | {n} | {k} | {ms:.4f} | {table_ms:.4f} "
                   f"| {err:+.1%} | {speed} |")
    return out, errors


def attention_lines(rows: list[dict[str, str]], gpu: str, framework: str, version: str
                    ) -> list[str]:
    """Markdown rows comparing the timed prefill attention with the table's."""
    table = load_table(gpu, "attention", framework, version, "context_attention_perf")
    full = table.where(batch_size=1, num_heads=32, num_key_value_heads=8, head_dim=128,
                       kv_cache_dtype="bfloat16", window_size=0)
    by_isl = dict(zip(full.columns["isl"].tolist(), full.columns["latency"].tolist(),
                      strict=True))
    out = []
    for r in rows:
        if r["op"] != "prefill_attention" or not r["ms"]:
            continue
        isl, ms = int(r["m"]), float(r["ms"])
        t = by_isl.get(isl)
        if t is None:
            out.append(f"| {isl} | {ms:.4f} | - | - |")
        else:
            out.append(f"| {isl} | {ms:.4f} | {t:.4f} | {(ms - t) / t:+.1%} |")
    return out


def decode_lines(rows: list[dict[str, str]], gpu: str, framework: str, version: str
                 ) -> tuple[list[str], list[float]]:
    """Markdown rows comparing the timed decode attention with the table's generation
    rows (32 query, 8 KV heads of 128, bf16 cache, dense), and their |errors|."""
    table = load_table(gpu, "attention", framework, version, "generation_attention_perf")
    dense = table.where(num_heads=32, num_key_value_heads=8, head_dim=128,
                        kv_cache_dtype="bfloat16", window_size=0, beam_width=1,
                        optional=("window_size", "beam_width"))
    by_shape = {(int(b), int(st) + 1): float(ms) for b, st, ms in zip(
        dense.columns["batch_size"].tolist(), dense.columns["step"].tolist(),
        dense.columns["latency"].tolist(), strict=True)}
    out, errors = [], []
    for r in rows:
        if r["op"] != "decode_attention" or not r["ms"]:
            continue
        b, ctx, ms = int(r["m"]), int(r["n"]), float(r["ms"])
        t = by_shape.get((b, ctx))
        if t is None:
            out.append(f"| {b} | {ctx} | {ms:.4f} | - | - |")
        else:
            errors.append(abs(ms - t) / t)
            out.append(f"| {b} | {ctx} | {ms:.4f} | {t:.4f} | {(ms - t) / t:+.1%} |")
    return out, errors


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv", type=Path)
    p.add_argument("--gpu", help="servesim GPU name (default: from the CSV's device)")
    p.add_argument("--framework", default="vllm")
    p.add_argument("--version", help="table version (default: the newest installed)")
    a = p.parse_args(argv)
    try:
        rows = read_rows(a.csv)
        device = rows[0]["device"]
        gpu = a.gpu or gpu_of_device(device)
        if gpu is None:
            raise ServesimError(f"device {device!r} is not in the GPU table; pass --gpu "
                                f"({', '.join(sorted(GPUS))})")
        # The check times Llama-3-8B's GEMMs: the model only names the build.
        version = resolve_version(BuildSpec(MODELS["llama-3-8b"], gpu, a.framework,
                                            version=a.version))
        refused = [r for r in rows if r["error"]]
        gemms, errors = gemm_lines(rows, gpu, a.framework, version)
        attention = attention_lines(rows, gpu, a.framework, version)
        decode, decode_errors = decode_lines(rows, gpu, a.framework, version)
    except ServesimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    memory = int(rows[0]["memory_bytes"])
    print(f"device {device} (torch {rows[0]['torch']}), tables: {a.framework} {version} "
          f"on {gpu}")
    print(f"memory the device reports: {memory:,} bytes ({memory / 2**20:,.0f} MiB)")
    print("\n| GEMM | dtype | m | n | k | measured ms | table ms | error | fp8 speed-up "
          "measured | table |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(gemms))
    print("\n| prefill attention tokens | measured ms | table ms | error |")
    print("|---:|---:|---:|---:|")
    print("\n".join(attention))
    if decode:
        print("\n| decode attention sequences | KV tokens | measured ms | table ms | error |")
        print("|---:|---:|---:|---:|---:|")
        print("\n".join(decode))
    for dtype, errs in errors.items():
        if errs:
            print(f"{dtype} GEMMs: median |error| {statistics.median(errs):.1%}, "
                  f"worst {max(errs):.1%} over {len(errs)} rows")
    if decode_errors:
        print(f"decode attention: median |error| {statistics.median(decode_errors):.1%}, "
              f"worst {max(decode_errors):.1%} over {len(decode_errors)} rows")
    for r in refused:
        print(f"refused on the device: {r['op']} {r['dtype']} m={r['m']}: {r['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
