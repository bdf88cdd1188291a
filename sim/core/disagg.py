"""Disaggregated prefill and decode (DistServe, OSDI'24; Splitwise, ISCA'24).

Two replica pools, each with its own GPU type, tensor-parallel degree, KV cache and
inner batching policy. A request is routed to a prefill replica, which computes its
prompt and emits the first token; then its prompt KV is sent to a decode replica picked
by the decode pool's router. Every GPU of the prefill replica sends its own shard of the
KV over its own link, all at once, so a transfer takes one rank's bytes over one GPU's
link: ``prompt x`` the larger of the two sides' per-GPU KV bytes per token
(:func:`sim.cost.shard.shard`; a decode replica of lower tp receives more per GPU) ``/
bandwidth``. ``link`` gives that per-GPU bandwidth; the default, NVLink, is impossible
when either pool's tp exceeds one node's GPUs, and then the GPU's inter-node network
(``GPUSpec.net_bw``, ``net_latency_s``) prices it instead, unless the link's figures are
given explicitly. Each prefill replica's links form a FIFO transfer queue: a transfer
starts when they are free, occupies them for its time and lands ``latency`` later. The
decode replica queues the arrival and admits it (allocating its blocks) only when its KV
cache can hold it; there it decodes as if it had prefilled the prompt itself.

The prefill replica frees the request's blocks when the transfer starts: the KV is
streamed out layer by layer while the prompt is computed (Splitwise's layer-wise
transfer), so it never holds prefill memory waiting for the decode side.

YAML (every key optional; see docs/policies.md)::

    serving: {policy: disaggregated}
    disaggregated:
      prefill: {replicas: 1, gpu: h100-sxm, tp: 1, policy: continuous}
      decode:  {replicas: 1, gpu: h100-sxm, tp: 1, policy: continuous}
      link: {kind: nvlink, bandwidth_gb_s: 450, latency_s: 1.0e-5}   # per GPU
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.config.disagg import LinkConfig

if TYPE_CHECKING:
    from sim.core.replica import Replica
    from sim.core.request import Request


class Link:
    """One prefill replica's outgoing KV links (one per GPU, sending in parallel): a FIFO
    queue of transfers (bytes per GPU, seconds)."""

    __slots__ = ("bandwidth", "latency", "free_at", "bytes_sent", "busy_s")

    def __init__(self, cfg: LinkConfig):
        self.bandwidth = cfg.bandwidth
        self.latency = cfg.latency
        self.free_at = 0.0
        self.bytes_sent = 0
        self.busy_s = 0.0

    def send(self, now: float, nbytes: int) -> float:
        """Queue a transfer of ``nbytes`` at ``now``; return the time it lands."""
        start = self.free_at if self.free_at > now else now
        dt = nbytes / self.bandwidth
        self.free_at = start + dt
        self.bytes_sent += nbytes
        self.busy_s += dt
        return self.free_at + self.latency


class Handoff:
    """Moves a request whose prefill finished from a prefill replica to a decode replica.

    ``kv_bytes_per_token`` is what one GPU's link carries per prompt token
    (:func:`transfer_bytes_per_token`); all of a replica's GPUs send at once, so one
    :class:`Link` per prefill replica stands for its GPUs' links together."""

    def __init__(self, decode: list[Replica], router: Any, link: LinkConfig, n_prefill: int,
                 kv_bytes_per_token: int):
        self.decode = decode
        self.router = router
        self.links = [Link(link) for _ in range(n_prefill)]
        self.kv_bytes_per_token = kv_bytes_per_token

    def __call__(self, src: Replica, r: Request, now: float) -> None:
        """Send ``r``'s prompt KV (its blocks already freed on ``src``) to a decode replica."""
        dst = self.decode[self.router.pick(self.decode)]
        landed = self.links[src.index].send(now, r.computed * self.kv_bytes_per_token)
        dst.engine.replica_of[r.id] = dst.index
        dst.receive(r, landed)
