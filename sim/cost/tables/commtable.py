"""Collective latencies from the public tables: tensor-parallel all-reduce and gather.

A serving framework all-reduces a layer's activations with its own custom kernel
while the message is small (vLLM and SGLang up to 8 MiB; TensorRT-LLM's plugin at any
size) and with NCCL above; inside a CUDA graph (decode-sized steps) the custom kernel
is cheaper than when launched eagerly (prefill-sized steps). The tables time both:
``custom_allreduce_perf`` per framework (``backend`` ``*_graph`` / ``*_eager``) and
``nccl_perf`` (``all_reduce``, ``all_gather``) per NCCL version, at message sizes of
128 B to 512 MiB over 2, 4 or 8 GPUs of one node, in milliseconds. Between measured
sizes latency is interpolated linearly in bytes (a collective costs a fixed latency
plus bytes over bandwidth); past the largest, in proportion.
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


@dataclass(frozen=True)
class Curve:
    """Latency (seconds) against message bytes, measured at ``sizes``."""

    sizes: np.ndarray
    seconds: np.ndarray

    def at(self, nbytes: np.ndarray | float) -> np.ndarray:
        """Seconds for messages of ``nbytes`` (array or number)."""
        x = np.asarray(nbytes, dtype=float)
        inside = np.interp(np.clip(x, self.sizes[0], self.sizes[-1]), self.sizes, self.seconds)
        return np.where(x > self.sizes[-1], self.seconds[-1] * x / self.sizes[-1], inside)


def _curve(table: Table, gpus: int) -> Curve:
    t = table.where(num_gpus=gpus)
    if not len(t):
        have = ", ".join(map(str, table.values("num_gpus")))
        raise ServesimError(f"{table.path}: no rows for {gpus} GPUs; measured: {have}")
    c = t.columns
    order = np.argsort(c["message_size"], kind="stable")
    return Curve(np.asarray(c["message_size"], dtype=float)[order],
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
    all-reduce, ``gather`` NCCL's all-gather (message = the gathered total)."""

    framework: str
    gpus: int
    graph: Curve
    eager: Curve
    nccl: Curve
    gather: Curve
    sources: dict[str, str]

    def allreduce(self, nbytes: np.ndarray, in_graph: np.ndarray) -> np.ndarray:
        """Seconds of one all-reduce of each message (bytes), graph-captured where
        ``in_graph``."""
        custom = np.where(in_graph, self.graph.at(nbytes), self.eager.at(nbytes))
        limit = CUSTOM_MAX_BYTES.get(self.framework)
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
    if custom.has("backend"):
        backends = custom.values("backend")
        graph_name = next((b for b in backends if b.endswith("graph")), backends[0])
        eager_name = next((b for b in backends if b.endswith("eager")), backends[0])
        graph = _curve(custom.where(backend=graph_name), gpus)
        eager = _curve(custom.where(backend=eager_name), gpus)
    else:
        graph = eager = _curve(custom, gpus)
    return Collectives(framework, gpus, graph, eager,
                       _curve(nccl.where(op_name="all_reduce"), gpus),
                       _curve(nccl.where(op_name="all_gather"), gpus),
                       {"custom_allreduce": f"{framework} {custom.version}",
                        "nccl": f"nccl {nccl.version}"})
