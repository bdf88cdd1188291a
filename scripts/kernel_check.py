"""Time the kernels a measured profile prices, on this machine's GPU, for a cross-check.

usage: python3 scripts/kernel_check.py OUT.csv [--device cuda|cpu] [--quick]

Measured profiles are composed from public kernel tables (docs/cost-model.md); this
script times the same operations with torch on the GPU at hand so the tables can be
checked against a GPU we ran ourselves (docs/scripts/kernel_compare.py does the
comparison, with no GPU and with the tables installed):

* GEMMs at Llama-3-8B's tensor-parallel-1 shapes (fused QKV, attention output, gate+up,
  down, LM head) and at three shapes that lie on the tables' own (n, k) grid, in bf16 and
  in fp8 with per-tensor scales (``torch._scaled_mm``, the kernel family vLLM uses for
  per-tensor fp8 on Hopper), at m from 1 to 8192 tokens;
* causal prefill attention (``scaled_dot_product_attention``) with 32 query heads and 8
  KV heads of 128, batch 1, at 512 to 8192 tokens, bf16;
* decode attention, one new token per sequence over a contiguous KV cache (the same
  function, the 8 KV heads shared by groups of 4 query heads in the call), at 1 to 128
  sequences of 512 to 8192 cached tokens, bf16; its rows give the batch as ``m``, the
  KV tokens per sequence as ``n`` and the KV heads as ``k``;
* the memory the device reports to torch (bytes), a column of every row.

Each GEMM reads its weight from one of several copies in turn, together several times
the GPU's L2 cache, so a repeat does not find its weight cached; a sequence of calls is
captured in a CUDA graph so launch overhead is not counted (vLLM's decode steps run from
CUDA graphs too; calibrate/timing.py does the timing); where capture fails the calls are
timed eagerly and the row says so. Rows are medians of several replays, in milliseconds.
A shape the device refuses is written with its error, never dropped. Needs torch and
this repository (no simulator). On the CPU (``--device cpu``, a smoke test of this
script) fp8 rows are written as refused.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from calibrate.timing import Timer, TimingConfig  # noqa: E402

# Llama-3-8B at tp 1: hidden 4096, 32 query heads and 8 KV heads of 128, MLP 14336,
# vocabulary 128256. (name, n, k): the GEMM reads an (m, k) activation and a (k, n) weight.
MODEL_GEMMS = [("qkv", 6144, 4096), ("attn_out", 4096, 4096), ("gate_up", 28672, 4096),
               ("down", 4096, 14336), ("lm_head", 128256, 4096)]
GRID_GEMMS = [("grid", 8192, 8192), ("grid", 16384, 4096), ("grid", 4096, 16384)]
TOKENS = [1, 16, 64, 256, 1024, 4096, 8192]
PREFILL = [512, 1024, 2048, 4096, 8192]
# (sequences, KV tokens each) of the decode-attention rows.
DECODE = [(b, c) for b in (1, 8, 32, 128) for c in (512, 2048, 8192)]
L2_FLUSH_BYTES = 256 * 2**20   # H200's L2 is 60 MiB: copies add up to over four times it
CALLS = 16                     # GEMM calls per captured graph
# Warm-up, then 7 timed replays of the graph (or of the eager calls).
TIMING = TimingConfig(warmup=2, min_repeats=7, max_repeats=7)


def _per_call_ms(body: Callable[[], object], device: torch.device, calls: int
                 ) -> tuple[float, str]:
    """Median time of one of the ``calls`` calls ``body`` makes, in ms, timed from a CUDA
    graph where ``body`` can be captured (:meth:`calibrate.timing.Timer.measure`)."""
    timing = Timer(device, TIMING).measure(body, graph=True)
    return timing.median_s * 1e3 / calls, "graph" if timing.graph else "eager"


def time_gemm(m: int, n: int, k: int, dtype: str, device: torch.device, quick: bool
              ) -> tuple[float, str]:
    """Median time of one (m, k) x (k, n) GEMM in ms, and how it was timed."""
    copies = max(1, min(8, -(-L2_FLUSH_BYTES // (n * k * (1 if dtype == "fp8" else 2)))))
    if quick:
        copies = 1
    if dtype == "fp8" and device.type != "cuda":
        raise RuntimeError("fp8 GEMMs are timed on CUDA only")
    x = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    # Weights stored (n, k) row-major, as checkpoints store them; the GEMM reads w.t().
    ws = [torch.randn(n, k, device=device, dtype=torch.bfloat16) / k**0.5 for _ in range(copies)]
    if dtype == "fp8":
        xq = x.to(torch.float8_e4m3fn)
        wq = [w.to(torch.float8_e4m3fn) for w in ws]
        one = torch.ones((), device=device, dtype=torch.float32)

        def body() -> None:
            for i in range(CALLS):
                torch._scaled_mm(xq, wq[i % copies].t(), scale_a=one, scale_b=one,
                                 out_dtype=torch.bfloat16)
    else:
        def body() -> None:
            for i in range(CALLS):
                torch.matmul(x, ws[i % copies].t())
    return _per_call_ms(body, device, CALLS)


def time_prefill(isl: int, device: torch.device) -> tuple[float, str]:
    """Median time of one causal prefill attention of ``isl`` tokens in ms (32 q heads
    and 8 KV heads of 128, the KV heads repeated to 32 outside the timed call)."""
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.randn(1, 32, isl, 128, device=device, dtype=dt)
    kv = [torch.randn(1, 8, isl, 128, device=device, dtype=dt).repeat_interleave(4, dim=1)
          for _ in range(2)]
    calls = 4

    def body() -> None:
        for _ in range(calls):
            torch.nn.functional.scaled_dot_product_attention(q, kv[0], kv[1], is_causal=True)
    return _per_call_ms(body, device, calls)


def time_decode(batch: int, context: int, device: torch.device) -> tuple[float, str]:
    """Median time of one decode attention step in ms: ``batch`` sequences, each one new
    query token over ``context`` cached tokens, 32 query and 8 KV heads of 128. Each
    call reads another copy of the cache, the copies together over four times the L2
    cache (at most 64 of them), so small caches are read from memory as in serving."""
    dt = torch.bfloat16 if device.type == "cuda" else torch.float32
    q = torch.randn(batch, 32, 1, 128, device=device, dtype=dt)
    cache_bytes = 2 * batch * 8 * context * 128 * q.element_size()
    copies = max(1, min(64, -(-L2_FLUSH_BYTES // cache_bytes)))
    caches = [(torch.randn(batch, 8, context, 128, device=device, dtype=dt),
               torch.randn(batch, 8, context, 128, device=device, dtype=dt))
              for _ in range(copies)]

    def body() -> None:
        for k, v in caches:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return _per_call_ms(body, device, copies)


def _timed(row: dict[str, object], run: Callable[[], tuple[float, str]]) -> dict[str, object]:
    """``row`` with ``run``'s time (ms) and how it was timed, or with the one line of the
    error the device raised instead: a refused shape is written, never dropped."""
    try:
        ms, how = run()
        row.update(ms=f"{ms:.6f}", how=how)
    except Exception as exc:  # noqa: BLE001 - recorded in the row
        lines = str(exc).splitlines() or [""]
        row.update(error=f"{type(exc).__name__}: {lines[0][:200]}")
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", help="CSV file to write")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--quick", action="store_true", help="few small shapes (a smoke test)")
    a = p.parse_args(argv)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("kernel_check: no CUDA device", file=sys.stderr)
        return 2
    device = torch.device(a.device)
    torch.manual_seed(0)
    gemms = MODEL_GEMMS + GRID_GEMMS
    tokens, prefill, decode = TOKENS, PREFILL, DECODE
    if a.quick:
        gemms, tokens, prefill, decode = [("small", 256, 512)], [1, 16], [64], [(2, 64)]
    cuda = a.device == "cuda"
    # The device's own figures go on every row: the memory it reports to torch (bytes).
    meta = {"device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "memory_bytes": torch.cuda.mem_get_info(device)[1] if cuda else 0}
    fields = [*meta, "op", "dtype", "m", "n", "k", "ms", "how", "error"]
    # Rows are written as they are timed, so a run stopped by a timeout keeps its rows.
    with open(a.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()

        def put(row: dict[str, object], label: str) -> None:
            w.writerow(row)
            f.flush()
            print(label, row["ms"], row["how"], row["error"], flush=True)

        for op, n, k in gemms:
            for dtype in ("bf16", "fp8"):
                for m in tokens:
                    row: dict[str, object] = {**meta, "op": op, "dtype": dtype, "m": m,
                                              "n": n, "k": k, "ms": "", "how": "", "error": ""}
                    put(_timed(row, partial(time_gemm, m, n, k, dtype, device, a.quick)),
                        f"{op} {dtype} m={m} n={n} k={k}")
        for isl in prefill:
            row = {**meta, "op": "prefill_attention", "dtype": "bf16" if cuda else "fp32",
                   "m": isl, "n": 32, "k": 8, "ms": "", "how": "", "error": ""}
            put(_timed(row, partial(time_prefill, isl, device)), f"prefill_attention isl={isl}")
        for b, c in decode:
            row = {**meta, "op": "decode_attention", "dtype": "bf16" if cuda else "fp32",
                   "m": b, "n": c, "k": 8, "ms": "", "how": "", "error": ""}
            put(_timed(row, partial(time_decode, b, c, device)),
                f"decode_attention b={b} ctx={c}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
