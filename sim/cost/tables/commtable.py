"""Collective latencies from the public tables: tensor-parallel all-reduce and gather.

A serving framework all-reduces a layer's activations with its own custom kernel
while the message is small (vLLM and SGLang up to 8 MiB, and not at all over more than
two GPUs joined by PCIe alone; TensorRT-LLM's plugin at any size) and with NCCL above;
inside a CUDA graph (decode-sized steps) the custom kernel is cheaper than when launched
eagerly (prefill-sized steps). The tables time both:
``custom_allreduce_perf`` per framework (``backend`` ``*_graph`` / ``*_eager``) and
``nccl_perf`` (``all_reduce``, ``all_gather``) per NCCL version, over 2, 4 or 8 GPUs
of one node, in milliseconds. Their ``message_size`` counts elements, not bytes: the
collector all-reduces a tensor of that many elements of the row's dtype (and divides
nccl-tests' byte sizes by the element size), so a row is read at message_size × the
dtype's bytes (bf16 and half: 2). Read as bytes, H100's 8-GPU NCCL all-reduce would move
223 GB/s of bus bandwidth at 512 MiB, half what nccl-tests reports on that part; read as
elements it is 445 GB/s, and A100's 222 GB/s. Between measured sizes latency is
interpolated linearly in bytes (a collective costs a fixed latency plus bytes over
bandwidth); past the largest, in proportion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.cost.tables.kerneltables import Table, load_table, version_key, versions
from sim.errors import ServesimError

MIB = 2**20
# Largest message a framework's custom all-reduce takes; above it NCCL runs (None: the
# custom kernel at every size).
CUSTOM_MAX_BYTES: dict[str, int | None] = {"vllm": 8 * MIB, "sglang": 8 * MIB, "trtllm": None}
# GPUs (servesim's names) whose servers join them by PCIe alone, with no NVLink between
# every pair (sim.cost.gpus). vLLM's custom all-reduce turns itself off over more than
# two such GPUs ("not supported on more than two PCIe-only GPUs", custom_all_reduce.py),
# and SGLang's, taken from it, does the same: their all-reduces then run on NCCL at
# every size.
PCIE_ONLY = frozenset({"l40s", "rtx-pro-6000", "h100-pcie", "l4", "a10g"})
PCIE_CUSTOM_OFF = frozenset({"vllm", "sglang"})


@dataclass(frozen=True)
class Curve:
    """Latency (seconds) against a size measured at ``sizes`` (a collective's message
    bytes; a batched GEMM's tokens, :mod:`sim.cost.tables.mlaattn`): linear between
    them, held at the first below them, in proportion past the last."""

    sizes: np.ndarray
    seconds: np.ndarray

    def at(self, size: np.ndarray | float) -> np.ndarray:
        """Seconds at ``size`` (array or number)."""
        x = np.asarray(size, dtype=float)
        inside = np.interp(np.clip(x, self.sizes[0], self.sizes[-1]), self.sizes, self.seconds)
        return np.where(x > self.sizes[-1], self.seconds[-1] * x / self.sizes[-1], inside)


# Bytes per element of each dtype the collective tables time.
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "int8": 1}


def _curve(table: Table, gpus: int, dtype_column: str) -> Curve:
    """Latency against bytes over ``gpus`` GPUs from ``table``'s rows of one dtype (named
    in ``dtype_column``; the table's rows must all share it)."""
    if not table.has(dtype_column):
        raise ServesimError(f"{table.path}: no {dtype_column} column, so its message sizes "
                            "(elements) cannot be read as bytes")
    t = table.where(num_gpus=gpus)
    if not len(t):
        have = ", ".join(map(str, table.values("num_gpus")))
        raise ServesimError(f"{table.path}: no rows for {gpus} GPUs; measured: {have}")
    dtypes = t.values(dtype_column)
    if len(dtypes) != 1 or dtypes[0] not in ELEMENT_BYTES:
        raise ServesimError(f"{table.path}: expected one {dtype_column} of "
                            f"{sorted(ELEMENT_BYTES)}, found {dtypes}")
    c = t.columns
    order = np.argsort(c["message_size"], kind="stable")
    return Curve(np.asarray(c["message_size"], dtype=float)[order] * ELEMENT_BYTES[dtypes[0]],
                 np.asarray(c["latency"], dtype=float)[order] / 1e3)


def pick_version(have: list[str], target: str) -> str:
    """The newest of ``have`` not newer than ``target``, else the oldest of ``have``."""
    older = [v for v in have if version_key(v) <= version_key(target)]
    return older[-1] if older else have[0]


@dataclass(frozen=True)
class Collectives:
    """All-reduce and all-gather latency over ``gpus`` GPUs for one framework.

    ``graph`` and ``eager`` are the custom all-reduce inside and outside a CUDA graph
    (the same curve when the table does not tell them apart); ``nccl`` NCCL's
    all-reduce, ``gather`` NCCL's all-gather (message = the gathered total),
    ``scatter`` NCCL's reduce-scatter (message = the total reduced). ``custom_max``: the
    largest message (bytes) the custom kernel takes, NCCL above it (None: the custom
    kernel at every size; 0: NCCL at every size)."""

    framework: str
    gpus: int
    custom_max: int | None
    graph: Curve
    eager: Curve
    nccl: Curve
    gather: Curve
    scatter: Curve
    sources: dict[str, str]

    def allreduce(self, nbytes: np.ndarray, in_graph: np.ndarray) -> np.ndarray:
        """Seconds of one all-reduce of each message (bytes), graph-captured where
        ``in_graph``."""
        custom = np.where(in_graph, self.graph.at(nbytes), self.eager.at(nbytes))
        limit = self.custom_max
        if limit is None:
            return custom
        return np.where(np.asarray(nbytes) <= limit, custom, self.nccl.at(nbytes))


def load_collectives(gpu: str, framework: str, version: str, gpus: int) -> Collectives:
    """The collective curves for ``gpus`` GPUs: the framework's custom all-reduce table
    of the newest version not newer than ``version`` and the newest NCCL table."""
    custom_have = versions(gpu, "comm", framework)
    nccl_have = versions(gpu, "comm", "nccl")
    if not custom_have or not nccl_have:
        raise ServesimError(f"no collective tables for {framework} on {gpu} "
                            f"(custom: {custom_have or 'none'}, nccl: {nccl_have or 'none'})")
    cv, nv = pick_version(custom_have, version), nccl_have[-1]
    custom = load_table(gpu, "comm", framework, cv, "custom_allreduce_perf")
    nccl = load_table(gpu, "comm", "nccl", nv, "nccl_perf").where(nccl_dtype="half")
    if custom.has("allreduce_dtype") and "bfloat16" in custom.values("allreduce_dtype"):
        custom = custom.where(allreduce_dtype="bfloat16")
    if custom.has("backend"):
        backends = custom.values("backend")
        graph_name = next((b for b in backends if b.endswith("graph")), backends[0])
        eager_name = next((b for b in backends if b.endswith("eager")), backends[0])
        graph = _curve(custom.where(backend=graph_name), gpus, "allreduce_dtype")
        eager = _curve(custom.where(backend=eager_name), gpus, "allreduce_dtype")
    else:
        graph = eager = _curve(custom, gpus, "allreduce_dtype")
    limit = CUSTOM_MAX_BYTES.get(framework)
    custom_source = f"{framework} {custom.version}"
    if gpu in PCIE_ONLY and gpus > 2 and framework in PCIE_CUSTOM_OFF:
        limit = 0
        custom_source = (f"none ({framework} keeps its custom all-reduce off over more than "
                         "two PCIe-only GPUs: NCCL at every size)")
    return Collectives(framework, gpus, limit, graph, eager,
                       _curve(nccl.where(op_name="all_reduce"), gpus, "nccl_dtype"),
                       _curve(nccl.where(op_name="all_gather"), gpus, "nccl_dtype"),
                       _curve(nccl.where(op_name="reduce_scatter"), gpus, "nccl_dtype"),
                       {"custom_allreduce": custom_source,
                        "nccl": f"nccl {nccl.version}"})
