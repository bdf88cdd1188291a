"""Prefix caching: KV blocks kept by content hash, shared by requests with equal prefixes.

Requests may carry the hashes of their leading prompt blocks (a trace's ``hash_ids`` /
``prefix_hash_ids``, or a generated shared prefix), each hash naming ``hash_tokens``
tokens. A replica's :class:`PrefixCache` maps hashes to reference counts:

- at admission, the longest run of leading hashes already cached is *hit*: the request
  references those entries and its prefill starts after them (never covering the
  prompt's last token, whose logits are needed, as vLLM does);
- when its prefill completes, the request's remaining full prompt blocks join the cache
  (an entry another request made meanwhile is shared instead, and the duplicate freed);
- entries no running request references stay cached, least recently used first out,
  and are evicted only when an allocation needs their blocks (down to the host tier,
  :mod:`sim.core.hosttier`, when ``serving.kv_offload`` gives one).

Blocks stay counted by the replica's :class:`~sim.core.kvmanager.KVCacheManager`, which owns
this cache: a cached entry holds ``hash_tokens / block_size`` blocks of its ``used``
count; unreferenced entries are ``evictable`` and count as available for admission.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from sim.errors import ServesimError


class PrefixCache:
    """Hash-addressed KV blocks of one replica, reference-counted, LRU-evicted; entries of
    ``hash_tokens`` tokens, blocks of ``block_size`` tokens. The block counts it implies
    are kept by its :class:`~sim.core.kvmanager.KVCacheManager`."""

    def __init__(self, hash_tokens: int, block_size: int, retain: bool = True) -> None:
        if hash_tokens % block_size:
            raise ValueError("hash_tokens must be a multiple of block_size")
        # False: the GPU keeps no entry (vLLM's --no-enable-prefix-caching under a
        # write-through host tier, which then holds every prefix; sim.core.kvmanager).
        self.retain = retain
        self.hash_tokens = hash_tokens
        self.per_hash = hash_tokens // block_size  # KV blocks per cached entry
        self.refs: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()  # unreferenced, oldest first
        self.evictions = 0

    @property
    def evictable(self) -> int:
        """Blocks held by entries no request references (free for the taking)."""
        return len(self.lru) * self.per_hash

    def limit(self, hashes: Sequence[int], tokens: int) -> int:
        """The most leading entries a request whose prefill would cover ``tokens`` tokens
        may hit: its hashes, short of its last token."""
        return min(len(hashes), (tokens - 1) // self.hash_tokens)

    def match(self, hashes: Sequence[int], tokens: int) -> tuple[int, int]:
        """(entries hit, blocks among them that are unreferenced now) for a request whose
        prefill would cover ``tokens`` tokens; hits stop short of its last token."""
        limit = min(len(hashes), (tokens - 1) // self.hash_tokens)
        refs = self.refs
        k = unref = 0
        while k < limit:
            n = refs.get(hashes[k])
            if n is None:
                break
            if n == 0:
                unref += self.per_hash
            k += 1
        return k, unref

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference these cached entries (a hit)."""
        for h in hashes:
            n = self.refs[h]
            if n == 0:
                del self.lru[h]
            self.refs[h] = n + 1

    def release(self, hashes: Sequence[int]) -> None:
        """Drop one reference to each entry; unreferenced ones become evictable (newest
        last in LRU order, the prefix's head last so tails go first)."""
        for h in reversed(hashes):
            n = self.refs[h] - 1
            self.refs[h] = n
            if n == 0:
                self.lru[h] = None

    def publish(self, h: int) -> bool:
        """Register a freshly computed block run under ``h``, referenced once by its
        request. False when ``h`` is cached already: the caller shares that one."""
        if h in self.refs:
            self.acquire((h,))
            return False
        self.refs[h] = 1
        return True

    def evict_oldest(self) -> int:
        """Drop the least recently used unreferenced entry and return its hash (its
        ``per_hash`` blocks are the manager's to free, or to move to the host tier)."""
        h, _ = self.lru.popitem(last=False)
        del self.refs[h]
        self.evictions += 1
        return h

    def clear(self) -> None:
        """Forget every entry (a fault emptied the GPU); evictions stay counted."""
        self.refs.clear()
        self.lru.clear()


def block_hashes(hashes: np.ndarray, hash_tokens: int, block_size: int,
                 source: str = "<scenario>") -> tuple[int, ...]:
    """A request's prefix hashes at KV-block granularity, as vLLM hashes its prompt: each
    hash naming ``hash_tokens`` tokens (a Mooncake trace's 512) becomes
    ``hash_tokens / block_size`` block hashes, ``h * k + j`` for its j-th block (distinct
    for distinct (h, j)). Two requests that share a coarse block then share each of its
    blocks, and a prompt's full blocks inside a partly filled coarse block are cached."""
    if hash_tokens % block_size:
        raise ServesimError(f"prefix blocks of {hash_tokens} tokens are not a multiple of "
                            f"block_size {block_size}", source, "serving.block_size")
    k = hash_tokens // block_size
    if k == 1:
        return tuple(hashes.tolist())
    if hashes.size and int(np.abs(hashes).max()) < (2**62) // k:
        return tuple((hashes[:, None] * k + np.arange(k)).ravel().tolist())
    return tuple(h * k + j for h in hashes.tolist() for j in range(k))  # beyond int64
