"""GEMM latency tables as functions of (m, n, k): measured rows, interpolated shapes.

The public tables time ``m × k`` by ``k × n`` products on a grid: m (tokens) at
1..17, 32, 33, 48, 49, ..., 4352, 4353, 8192, 16384, 32768 (pairs m, m+1 straddle a
tile edge), n and k at 32 ... 16384, 51200, 65536. A model's projections have n and k
off that grid (14336, 28672, ...), so:

- **n and k**: bilinear interpolation of latency between the four surrounding grid
  points. At a fixed m a GEMM's time is close to ``a + b·n + c·k + d·n·k`` (launch,
  weight bytes or FLOPs ∝ n·k, activations ∝ m·k and m·n), which bilinear
  interpolation reproduces exactly; interpolating log-latency over log-sizes was
  measured worse (:func:`holdout_errors` compares them on grid lines left out).
- **past the grid** (n or k above 65536, e.g. a 128k-vocabulary LM head on one GPU):
  in proportion to the largest measured size (at such sizes a GEMM is saturated, so its
  time grows with its work); below the smallest (32): held at the smallest.
- **m**: the table's own grid is kept; a profile joins those times with straight lines
  (:class:`sim.cost.curves.Knots`), which only ever interpolates between like points (a
  tile edge and the next tile edge, one past an edge and the next edge). Under vLLM,
  whose steps of up to 512 tokens run as CUDA graphs padded to a multiple of 8, the
  rows one past an edge up to there are left out (:meth:`GemmTable.graph_padded`): the
  server never runs them, and some kernels time them far above the next edge (FP8: 257
  rows slower than 512). That holds at vLLM's defaults; a server whose largest graph is
  smaller (it is 2 x max_num_seqs when that is under 256) runs the steps between it and
  512 tokens at their exact count, which a profile, built per GPU and not per
  max_num_seqs, does not follow.

Missing cells (collections skip the largest n × k, some a few more) are filled in
proportion from the nearest measured n at the same m and k (else k, else m), before
anything else reads the cube.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from sim.cost.dtypes import weight_bytes_per
from sim.cost.tables.attntables import default_kernel
from sim.cost.tables.kerneltables import TABLE_DTYPES, Table, coverage, load_table
from sim.errors import ServesimError


def _bracket(axis: np.ndarray, x: float) -> tuple[int, int, float, float]:
    """Indices (i, j) of the grid values around ``x``, its weight towards j, and the
    proportional factor applied past the last value (1 inside)."""
    if x >= axis[-1]:
        return len(axis) - 1, len(axis) - 1, 0.0, x / axis[-1]
    if x <= axis[0]:
        return 0, 0, 0.0, 1.0
    j = int(np.searchsorted(axis, x, side="right"))
    i = j - 1
    return i, j, (x - axis[i]) / (axis[j] - axis[i]), 1.0


@dataclass(frozen=True)
class GemmTable:
    """Latencies (seconds) of one GEMM kernel over its measured (m, n, k) grid."""

    ms: np.ndarray  # tokens, increasing
    ns: np.ndarray
    ks: np.ndarray
    cube: np.ndarray  # seconds, shape (len(ms), len(ns), len(ks)), no gaps

    @classmethod
    def from_table(cls, table: Table) -> GemmTable:
        """Build from table rows of one dtype and kernel source (latency in ms)."""
        c = table.columns
        if len(table) == 0:
            raise ServesimError("no GEMM rows left to build from", source=str(table.path))
        ms, ns, ks = (np.unique(c[a]) for a in ("m", "n", "k"))
        cube = np.full((len(ms), len(ns), len(ks)), np.nan)
        cube[np.searchsorted(ms, c["m"]), np.searchsorted(ns, c["n"]),
             np.searchsorted(ks, c["k"])] = np.asarray(c["latency"], dtype=float) / 1e3
        for i, j, l in np.argwhere(np.isnan(cube)):
            cube[i, j, l] = cls._fill(ms, ns, ks, cube, i, j, l, table)
        return cls(ms.astype(float), ns.astype(float), ks.astype(float), cube)

    @staticmethod
    def _fill(ms: np.ndarray, ns: np.ndarray, ks: np.ndarray, cube: np.ndarray,
              i: int, j: int, l: int, table: Table) -> float:
        """A missing cell in proportion from the nearest measured n at the same m and k,
        else the nearest k at the same m and n, else the nearest m at the same n and k."""
        for axis, grid, idx in ((1, ns, j), (2, ks, l), (0, ms, i)):
            line = cube[:, j, l] if axis == 0 else cube[i, :, l] if axis == 1 else cube[i, j, :]
            have = np.flatnonzero(~np.isnan(line))
            if len(have):
                near = have[np.argmin(np.abs(np.log(grid[have] / grid[idx])))]
                return float(line[near] * grid[idx] / grid[near])
        raise ServesimError(f"GEMM table has no measurement near m={ms[i]}, n={ns[j]}, "
                            f"k={ks[l]} to fill a hole from", source=str(table.path))

    def graph_padded(self, limit: int) -> GemmTable:
        """This table without the rows a CUDA-graph server never runs: token counts above
        8 and up to ``limit`` that are not a multiple of 8 (such a server pads a step of
        up to ``limit`` tokens to a captured size, a multiple of 8 past 8)."""
        keep = (self.ms <= 8) | (self.ms > limit) | (self.ms % 8 == 0)
        return GemmTable(self.ms[keep], self.ns, self.ks, self.cube[keep])

    def one_grid(self, lo: int, hi: int) -> GemmTable:
        """This table with its rows from ``lo`` to ``hi`` tokens, which the kernel runs
        on one and the same grid of tiles (:data:`ONE_GRID`), each replaced by the median
        of those rows at the same (n, k): one time repeated, so a row far from the others
        is the collection's, not the kernel's."""
        same = (self.ms >= lo) & (self.ms <= hi)
        if not same.any():
            return self
        cube = self.cube.copy()
        cube[same] = np.median(self.cube[same], axis=0)
        return GemmTable(self.ms, self.ns, self.ks, cube)

    def times(self, n: float, k: float) -> np.ndarray:
        """Seconds of an (m × k)·(k × n) product at every m of :attr:`ms`."""
        return self._times(self.ns, self.ks, self.cube, n, k)

    @staticmethod
    def _times(ns: np.ndarray, ks: np.ndarray, cube: np.ndarray, n: float, k: float
               ) -> np.ndarray:
        i0, i1, wn, fn = _bracket(ns, n)
        j0, j1, wk, fk = _bracket(ks, k)
        lo = cube[:, i0, j0] * (1 - wk) + cube[:, i0, j1] * wk
        hi = cube[:, i1, j0] * (1 - wk) + cube[:, i1, j1] * wk
        return (lo * (1 - wn) + hi * wn) * fn * fk

    def at(self, m: float, n: float, k: float) -> float:
        """Seconds at one (m, n, k), m joined linearly between measured rows (and in
        proportion past the last)."""
        t = self.times(n, k)
        if m > self.ms[-1]:
            return float(t[-1] * m / self.ms[-1])
        return float(np.interp(m, self.ms, t))

    def holdout_errors(self, shapes: Sequence[tuple[float, float]],
                       log_space: bool = False) -> np.ndarray:
        """|relative error| of interpolating the interior grid lines around each needed
        n or k of ``shapes`` that is not itself measured, from their neighbours with that
        line left out, at every m (twice the real gap, so an upper estimate of the error
        at the shapes used); empty when every shape is on the grid."""
        errs: list[np.ndarray] = []
        for axis_name in ("n", "k"):
            axis = self.ns if axis_name == "n" else self.ks
            lines: set[int] = set()
            for n, k in shapes:
                x = n if axis_name == "n" else k
                if x in axis or x > axis[-1]:
                    continue  # measured (or scaled past the grid): nothing interpolated
                j = int(np.searchsorted(axis, x))
                lines.update(i for i in (j - 1, j) if 0 < i < len(axis) - 1)
            for i in sorted(lines):
                keep = np.ones(len(axis), dtype=bool)
                keep[i] = False
                if axis_name == "n":
                    truth = self.cube[:, i, :]
                    sub = self.cube[:, keep, :]
                    preds = [self._interp(self.ns[keep], self.ks, sub, self.ns[i], kk, log_space)
                             for kk in self.ks]
                    pred = np.stack(preds, axis=1)
                else:
                    truth = self.cube[:, :, i]
                    sub = self.cube[:, :, keep]
                    preds = [self._interp(self.ns, self.ks[keep], sub, nn, self.ks[i], log_space)
                             for nn in self.ns]
                    pred = np.stack(preds, axis=1)
                # Lines of the other axis at least 512 wide: what model projections use.
                other = self.ks if axis_name == "n" else self.ns
                errs.append(np.abs(pred / truth - 1.0)[:, other >= 512].ravel())
        return np.concatenate(errs) if errs else np.zeros(0)

    @classmethod
    def _interp(cls, ns: np.ndarray, ks: np.ndarray, cube: np.ndarray, n: float, k: float,
                log_space: bool) -> np.ndarray:
        if not log_space:
            return cls._times(ns, ks, cube, n, k)
        return np.exp(cls._times(np.log(ns), np.log(ks), np.log(cube), np.log(n), np.log(k)))


@dataclass(frozen=True)
class GemmSource:
    """A GEMM table as read: the table, its kernel (the one with most rows), the device
    name the collection reports, ``input_quant_s``: seconds taken off each call for
    the input's quantisation the rows time and the served model does not run
    (:data:`QUANT_IN_ROWS`), and ``one_grid``: the (first, last) token counts read as one
    time (:data:`ONE_GRID`; None: every row as published)."""

    table: GemmTable
    kernel: str
    device: str
    input_quant_s: float = 0.0
    one_grid: tuple[int, int] | None = None


# Token ranges a framework's kernel for a dtype runs on one grid of tiles on some GPUs:
# (framework, dtype) -> (GPUs, first and last token count). vLLM's per-tensor FP8 GEMM on
# sm100 GPUs (csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm100_fp8_dispatch.cuh) takes
# one configuration for 1-16 tokens, which swaps the operands and holds the tokens in a
# single 32-wide tile, so every count from 1 to 16 launches the same tiles over the same
# weights. Its rows say the same from 2 to 16 tokens (each a median 1.00 of the 16 rows'
# median over shapes of n x k >= 4096^2, on all four GPUs), but time 1 token at a median
# 1.63x (B200), 1.71x (B300), 1.88x (GB200) and 1.85x (GB300) of it; and B200's rows put
# scattered shapes 1.3-2.0x above it at 2-16 tokens (the 90th percentile of several
# counts). No other collection's rows show a 1-token excess (SGLang's and TensorRT-LLM's
# on the same GPUs, vLLM's on H100 and H200: 1 token a median 0.97-1.00 of 8 tokens).
ONE_GRID: dict[tuple[str, str], tuple[frozenset[str], int, int]] = {
    ("vllm", "fp8"): (frozenset({"b200", "b300", "gb200", "gb300"}), 1, 16)}


@lru_cache(maxsize=16)
def gemm_table(gpu: str, framework: str, version: str, dtype: str) -> GemmSource:
    """The GEMM table of ``dtype`` (servesim's name), read once per process; where
    :data:`ONE_GRID` says its kernel runs a range of token counts on one grid, those
    rows priced as one (:meth:`GemmTable.one_grid`)."""
    table = load_table(gpu, "gemm", framework, version, "gemm_perf")
    want = TABLE_DTYPES[dtype]
    rows = table.where(gemm_dtype=want)
    if not len(rows):
        raise ServesimError(f"{table.path}: no {want} GEMM rows; dtypes: "
                            f"{', '.join(table.values('gemm_dtype'))}")
    kernel = default_kernel(rows)
    dev = rows.columns.get("device")
    gemm = GemmTable.from_table(rows.where(kernel_source=kernel))
    device = str(dev[0]) if dev is not None and len(dev) else gpu
    gpus, lo, hi = ONE_GRID.get((framework, dtype), (frozenset(), 0, 0))
    if gpu in gpus:
        return GemmSource(gemm.one_grid(lo, hi), kernel, device, one_grid=(lo, hi))
    return GemmSource(gemm, kernel, device)


# Weight dtypes whose GEMM rows one framework's collection times unlike a served model,
# the framework whose rows of the same kernel library price them instead, and why (a
# profile's notes say it).
#
# fp8-block: vLLM's rows (DeepGemmFp8BlockScaledMMKernel) are 5-6x slower than SGLang's
# and TensorRT-LLM's DeepGEMM rows at 17-256 tokens on H100 and H200 and 15-21x on B200
# (medians over the shapes all three timed), and contradict vLLM's own MLA module rows:
# on one B200 its whole DeepSeek-V3 attention block at tp 8 takes 0.054 ms for one
# decode entry, where its GEMM rows price the block's three projections alone at 0.81
# ms (SGLang's: 0.031).
#
# bf16: both collections time the same call, torch's F.linear on bf16 tensors, but
# vLLM's leaves the layer's weights as allocated (never written), where SGLang's draws
# them at random, as trained weights look to the hardware. Values change the power a
# tensor-core GEMM draws and so the clock it holds under the power limit (zeros draw
# least), so only compute-bound rows differ: SGLang's over vLLM's, the median over the
# shapes both timed with n x k >= 4096^2, is 1.00-1.01 at 1-128 tokens on every GPU but
# H100 (1.04), and from 256 tokens 1.07 on A100 and H100, 1.09 H200, 1.05 B200, 1.06
# B300, 1.13 L40S, 1.02 RTX PRO 6000, 1.05 GB200 and 1.04 GB300.
BORROWED_GEMMS = {("vllm", "fp8-block"): ("sglang", "times them 5-6x slower than the same "
                                                    "library's rows of SGLang and "
                                                    "TensorRT-LLM"),
                  ("vllm", "bf16"): ("sglang", "times them with weights never written, "
                                               "which draw less power than trained ones")}


# Collections whose per-tensor FP8 GEMM rows time, inside each call, the quantisation of
# a bf16 input at a dynamic scale: AIConfigurator's TensorRT-LLM collector calls that
# framework's Linear module with an FP8 quantisation config and no input scale, so each
# row is an amax reduction, a cast and the product. TensorRT-LLM's served FP8 models hand
# their GEMMs FP8 activations: its gated MLP's SwiGLU writes FP8, and up to 128 tokens
# its fused all-reduce and RMSNorm do. On the tables the excess is a constant: at 1-4
# tokens the FP8 rows' time over weight bytes has the bf16 rows' slope and an intercept
# 8.6-11.2 us higher (H100, H200, B200, B300), where vLLM's and SGLang's FP8 rows (one
# static-scale cast) sit 4.0-7.4 us above their bf16 ones. Its NVFP4 rows the same way:
# the Linear module quantises the bf16 input to FP4 blocks each call, where the served
# model's fused SwiGLU and all-reduce+RMSNorm write FP4; their intercept is 11.1 us above
# the bf16 rows' on B200 and 8.8 us on B300 (their slope is lower too, which is the
# kernel's own and is kept).
QUANT_IN_ROWS = frozenset({("trtllm", "fp8"), ("trtllm", "nvfp4")})


def input_quant_seconds(table: Table, dtype: str = "fp8") -> float:
    """Seconds a call of ``table``'s ``dtype`` rows (servesim's name: per-tensor fp8 or
    nvfp4) spends beyond a bf16 GEMM of the same weight bytes: the difference of the two
    dtypes' intercepts of latency against weight bytes, fitted by least squares over the
    rows at 1-4 tokens whose weights are 4-128 Mi elements (a launch-bound range below
    that, a compute-bound one above), never below zero."""
    icpt = []
    for name, size in (("bfloat16", 2.0), (TABLE_DTYPES[dtype], weight_bytes_per(dtype))):
        rows = table.where(gemm_dtype=name)
        c = rows.columns
        m, n, k = (np.asarray(c[a], dtype=float) for a in ("m", "n", "k"))
        keep = (m <= 4) & (n * k >= 2.0 ** 22) & (n * k <= 2.0 ** 27)
        if keep.sum() < 3:
            raise ServesimError(f"too few {name} GEMM rows at 1-4 tokens to fit the "
                                "quantised rows' input quantisation", source=str(table.path))
        x = np.vstack([np.ones(int(keep.sum())), n[keep] * k[keep] * size]).T
        y = np.asarray(c["latency"], dtype=float)[keep] / 1e3
        icpt.append(float(np.linalg.lstsq(x, y, rcond=None)[0][0]))
    return max(icpt[1] - icpt[0], 0.0)


def projection_gemms(gpu: str, framework: str, version: str,
                     dtype: str) -> tuple[GemmSource, str, str]:
    """The GEMM table that prices ``dtype`` projections under ``framework``'s ``version``
    on ``gpu``: its own, or where :data:`BORROWED_GEMMS` says so the newest table of
    the named framework on the same GPU (when it times that dtype there); and the
    framework and version it came from. Rows of :data:`QUANT_IN_ROWS` come less their
    input quantisation (:func:`input_quant_seconds`), never below the fastest bf16 row."""
    donor = BORROWED_GEMMS.get((framework, dtype), (None, ""))[0]
    have = coverage().get(gpu, {}).get(donor, []) if donor else []
    if donor is not None and have:
        try:
            return gemm_table(gpu, donor, have[-1], dtype), donor, have[-1]
        except ServesimError:
            pass  # the donor times no such GEMM here either: the framework's own rows
    if (framework, dtype) in QUANT_IN_ROWS:
        return _without_input_quant(gpu, framework, version, dtype), framework, version
    return gemm_table(gpu, framework, version, dtype), framework, version


@lru_cache(maxsize=16)
def _without_input_quant(gpu: str, framework: str, version: str, dtype: str) -> GemmSource:
    """:func:`gemm_table`'s ``dtype`` rows less their input quantisation
    (:func:`input_quant_seconds`), never below the fastest bf16 row; built once per
    process, as the table itself is read."""
    source = gemm_table(gpu, framework, version, dtype)
    table = load_table(gpu, "gemm", framework, version, "gemm_perf")
    quant = input_quant_seconds(table, dtype)
    floor = float(np.min(table.where(gemm_dtype="bfloat16").columns["latency"])) / 1e3
    t = source.table
    return dataclasses.replace(
        source, table=GemmTable(t.ms, t.ns, t.ks, np.maximum(t.cube - quant, floor)),
        input_quant_s=quant)
