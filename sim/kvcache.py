"""Paged KV-cache accounting: how many blocks a replica has and who holds them.

The allocator is integer-only: it counts blocks, it does not name them, because block
identity does not change any timing. Each request records how many blocks it holds;
the allocator guarantees 0 <= used <= total.
"""

from __future__ import annotations

from typing import Any

from sim.errors import ServesimError
from sim.specs import GPUSpec, ModelSpec


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``tokens`` tokens (ceil division)."""
    return -(-tokens // block_size)


class BlockAllocator:
    """Counts free and used KV blocks of one replica.

    ``watermark_blocks`` are kept free when admitting new work (vLLM's watermark) so a
    freshly admitted prompt does not immediately force running requests out. With prefix
    caching, a ``reclaimer`` (:class:`sim.prefix.PrefixCache`) holds blocks that no
    request references: they count as available and are evicted on demand.
    """

    __slots__ = ("total", "block_size", "watermark", "used", "reclaimer")

    def __init__(self, total_blocks: int, block_size: int, watermark_blocks: int = 0):
        if total_blocks < 1 or block_size < 1 or not 0 <= watermark_blocks <= total_blocks:
            raise ValueError("bad allocator sizes")
        self.total = total_blocks
        self.block_size = block_size
        self.watermark = watermark_blocks
        self.used = 0
        self.reclaimer: Any = None

    @property
    def num_free(self) -> int:
        """Blocks not held by any request."""
        return self.total - self.used

    @property
    def available(self) -> int:
        """Free blocks plus cached blocks that may be evicted."""
        rc = self.reclaimer
        return self.total - self.used + (rc.evictable if rc is not None else 0)

    def can_allocate(self, n: int, keep_watermark: bool = False) -> bool:
        """Whether ``n`` more blocks fit (leaving the watermark free if asked)."""
        reserve = self.watermark if keep_watermark else 0
        rc = self.reclaimer
        evictable = rc.evictable if rc is not None else 0
        return self.total - self.used + evictable - n >= reserve

    def allocate(self, n: int) -> None:
        """Take ``n`` blocks (evicting cached ones if needed); the caller must have
        checked :meth:`can_allocate`."""
        if self.reclaimer is not None and self.total - self.used < n:
            self.reclaimer.reclaim(n)
        if n < 0 or self.used + n > self.total:
            raise AssertionError(f"KV over-allocation: used {self.used} + {n} > {self.total}")
        self.used += n

    def free(self, n: int) -> None:
        """Return ``n`` blocks."""
        if n < 0 or n > self.used:
            raise AssertionError(f"KV double free: freeing {n} of {self.used} used")
        self.used -= n


def kv_capacity_blocks(
    model: ModelSpec, gpu: GPUSpec, tp: int, memory_utilization: float, block_size: int
) -> int:
    """KV blocks one replica of ``tp`` GPUs holds after the weights are loaded.

    Per GPU: usable = mem_bytes·memory_utilization − weight_bytes/tp, divided by the
    per-GPU KV bytes of a block (kv_bytes_per_token/tp · block_size). A model that does
    not fit is an error stating the numbers.
    """
    usable = gpu.mem_bytes * memory_utilization
    weights = model.weight_bytes / tp
    left = usable - weights
    block_bytes = model.kv_bytes_per_token / tp * block_size
    blocks = int(left // block_bytes) if left > 0 else 0
    if blocks < 1:
        raise ServesimError(
            f"model {model.name} does not fit: {weights / 1e9:.1f} GB of weights per GPU "
            f"(tp={tp}) against {usable / 1e9:.1f} GB usable on {gpu.name} "
            f"({gpu.mem_bytes / 1e9:.0f} GB x memory_utilization {memory_utilization}); "
            f"raise tp or choose a larger GPU",
            where="hardware",
        )
    return blocks
