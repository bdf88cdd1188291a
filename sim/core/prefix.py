"""Prefix caching: KV blocks kept by content hash, shared by requests with equal prefixes.

Requests may carry the hashes of their leading prompt blocks (a trace's ``hash_ids`` /
``prefix_hash_ids``, or a generated shared prefix), each hash naming ``hash_tokens``
tokens. A replica's :class:`PrefixCache` maps hashes to reference counts:

- at admission, the longest run of leading hashes already cached is *hit*: the request
  references those entries and its prefill starts after them (never covering the
  prompt's last token, whose logits are needed, as vLLM does);
- when its prefill completes, the request's remaining full prompt blocks join the cache
  (an entry another request made meanwhile is shared instead, and the duplicate freed);
  under vLLM v1's scheduler (``chunked``) they join as they are scheduled instead
  (:meth:`~sim.core.kvmanager.KVCacheManager.cache_scheduled`);
- entries no running request references stay cached, least recently used first out,
  and are evicted only when an allocation needs their blocks (down to the host tier,
  :mod:`sim.core.hosttier`, when ``serving.kv_offload`` gives one);
- a finished request's other blocks (its prompt past its hashes, its output, its last
  partial block) are *retired* as one run: they wait their turn in the same LRU order
  though no other request can hit them, as vLLM's block pool puts every freed block in
  one free queue, a request's tail first, and takes the oldest. Without runs, blocks no
  hash names would be reused before any cached entry, and cached prefixes would outlive
  those of a real server.

Blocks stay counted by the replica's :class:`~sim.core.kvmanager.KVCacheManager`, which owns
this cache: a cached entry holds ``hash_tokens / block_size`` blocks of its ``used``
count, as does a run; unreferenced entries and runs are ``evictable`` and count as
available for admission.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from sim.core.request import Request
from sim.errors import ServesimError


class PrefixHit(NamedTuple):
    """A waiting request's leading tokens found cached: ``tokens`` (a multiple of the
    hash size), ``pinned``, the GPU blocks among them no request references now (not
    available once it takes them), and ``loaded``, the last of those tokens, found in
    the host tier (they need GPU blocks and a load over the host link)."""

    tokens: int
    pinned: int
    loaded: int = 0


NO_HIT = PrefixHit(0, 0)

# Hashes of blocks only one request holds (own_keys), 2**32 of them a request: above
# every block hash a trace or a generated prefix gives, a 64-bit hash split into at most
# 2**63 block hashes (block_hashes) staying under 2**127.
OWN_HASHES = 1 << 128
# Keys of retired runs, counting up from here: above every entry hash, a request's own
# among them (under 2**161).
RUNS = 1 << 192
# A Gated DeltaNet model's state snapshot at the end of the block an entry hash names:
# this plus the hash, above every run's key.
STATES = 1 << 256
# Speculative methods whose hits drop their last block (vLLM's full-attention manager
# pops it for an EAGLE-style drafter, which must recompute that block's hidden states).
HEADS = ("eagle", "mtp")


class PrefixCache:
    """Hash-addressed KV blocks of one replica, reference-counted, LRU-evicted; entries of
    ``hash_tokens`` tokens, blocks of ``block_size`` tokens. The block counts it implies
    are kept by its :class:`~sim.core.kvmanager.KVCacheManager`."""

    def __init__(self, hash_tokens: int, block_size: int, retain: bool = True,
                 state_pages: int = 0, drop_last: bool = False) -> None:
        if hash_tokens % block_size or state_pages < 0:
            raise ValueError("hash_tokens must be a multiple of block_size")
        # A model with Gated DeltaNet layers: a hit must end where a snapshot of the
        # recurrent states is kept (STATES + the hash of the block it ends), each
        # ``state_pages`` blocks, unreferenced from the start (add_state).
        self.state_pages = state_pages
        # An EAGLE or MTP drafter (HEADS): a hit gives up its last matched entry.
        self.drop_last = drop_last
        # False: the GPU keeps no entry (vLLM's --no-enable-prefix-caching under a
        # write-through host tier, which then holds every prefix; sim.core.kvmanager).
        self.retain = retain
        self.hash_tokens = hash_tokens
        self.per_hash = hash_tokens // block_size  # KV blocks per cached entry
        self.refs: dict[int, int] = {}
        # Unreferenced entries and retired runs, oldest first.
        self.lru: OrderedDict[int, None] = OrderedDict()
        # A retired run's blocks left and the keys of the full blocks among them (only
        # where a write-back host tier stores what the GPU evicts; else empty).
        self.runs: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._next_run = RUNS
        self.evictable = 0  # blocks of unreferenced entries and of runs (for the taking)
        # Unreferenced entries and keyed runs: what a retired run must wait behind.
        self.held = 0
        self.evictions = 0  # entries evicted (runs' blocks not counted)

    def limit(self, hashes: Sequence[int], tokens: int) -> int:
        """The most leading entries a request whose prefill would cover ``tokens`` tokens
        may hit: its hashes, short of its last token."""
        return min(len(hashes), (tokens - 1) // self.hash_tokens)

    def match(self, hashes: Sequence[int], tokens: int) -> tuple[int, int]:
        """(entries hit, blocks among them that are unreferenced now) for a request whose
        prefill would cover ``tokens`` tokens; hits stop short of its last token."""
        limit = min(len(hashes), (tokens - 1) // self.hash_tokens)
        refs = self.refs
        states, drop = self.state_pages, self.drop_last
        k = unref = before = 0
        best = (0, 0)
        while k < limit:
            n = refs.get(hashes[k])
            if n is None:
                break
            before = unref
            if n == 0:
                unref += self.per_hash
            k += 1
            if states:
                # A Gated DeltaNet model resumes a hit's recurrence from a snapshot: the
                # hit ends at the last entry with one, one entry short of the run under
                # an EAGLE or MTP head (vLLM's hybrid coordinator settles on the longest
                # prefix every group of layers holds).
                j, u = (k - 1, before) if drop else (k, unref)
                if j and STATES + hashes[j - 1] in refs:
                    best = (j, u)
        if states:
            return best
        return (k - 1, before) if drop and k else (k, unref)

    def has_state(self, h: int) -> bool:
        """Whether the state snapshot at the end of the block ``h`` names is kept."""
        return STATES + h in self.refs

    def add_state(self, h: int) -> None:
        """Keep the state snapshot at the end of the block ``h`` names (not kept yet),
        unreferenced (the request that wrote it has moved on to a page of its own), the
        newest in LRU order. The caller counts its ``state_pages`` blocks as used."""
        key = STATES + h
        self.refs[key] = 0
        self.lru[key] = None
        self.evictable += self.state_pages
        self.held += 1

    def touch_state(self, h: int) -> None:
        """A hit resumed from the snapshot at the end of the block ``h`` names: the newest
        in LRU order now."""
        self.lru.move_to_end(STATES + h)

    def acquire(self, hashes: Sequence[int]) -> None:
        """Reference these cached entries (a hit)."""
        for h in hashes:
            n = self.refs[h]
            if n == 0:
                del self.lru[h]
                self.evictable -= self.per_hash
                self.held -= 1
            self.refs[h] = n + 1

    def release(self, hashes: Sequence[int]) -> None:
        """Drop one reference to each entry; unreferenced ones become evictable (newest
        last in LRU order, the prefix's head last so tails go first)."""
        for h in reversed(hashes):
            n = self.refs[h] - 1
            self.refs[h] = n
            if n == 0:
                self.lru[h] = None
                self.evictable += self.per_hash
                self.held += 1

    def publish(self, h: int) -> bool:
        """Register a freshly computed block run under ``h``, referenced once by its
        request. False when ``h`` is cached already: the caller shares that one."""
        if h in self.refs:
            self.acquire((h,))
            return False
        self.refs[h] = 1
        return True

    def retire(self, blocks: int, keys: tuple[int, ...] = ()) -> bool:
        """Keep a freed request's ``blocks`` blocks no entry names, as one run after every
        other unreferenced block in LRU order; ``keys`` name its full blocks (those a
        write-back host tier would store when they are evicted, ``per_hash`` blocks
        each), the rest being its partial and window blocks. False, keeping nothing,
        for a run without keys with no entry or keyed run in the LRU order: every block
        it could wait behind is unkeyed, so freeing it now changes no later eviction."""
        if not keys and not self.held:
            return False
        key = self._next_run
        self._next_run = key + 1
        self.lru[key] = None
        self.runs[key] = (blocks, keys)
        self.evictable += blocks
        self.held += bool(keys)
        return True

    def evict_oldest(self, want: int) -> tuple[tuple[int, ...], int]:
        """Evict the least recently used unreferenced entry, or the oldest run: at least
        ``want`` of its blocks (its partial and window blocks first, then its keyed full
        blocks last to first, as a request's tail leaves first), all of them when none
        is keyed (free, they are taken before anything cached: the same order); returns
        (the hashes of what was evicted, blocks freed): the blocks are the manager's to
        free, and the hashes' entries to move to the host tier."""
        h = next(iter(self.lru))
        run = self.runs.get(h)
        if run is None:
            del self.lru[h]
            del self.refs[h]
            self.held -= 1
            if h >= STATES - (1 << 63):  # a state snapshot (of any hash): no host tier keeps one
                self.evictable -= self.state_pages
                return (), self.state_pages
            self.evictable -= self.per_hash
            self.evictions += 1
            return (h,), self.per_hash
        blocks, keys = run
        per = self.per_hash
        extra = blocks - len(keys) * per
        gone: tuple[int, ...] = ()
        if not keys:  # all of it: the blocks not wanted now are the next to be taken anyway
            take = blocks
        elif want <= extra:
            take = want
        else:  # whole entries' blocks, its last first
            n = min(len(keys), -(-(want - extra) // per))
            take, gone, keys = extra + n * per, keys[len(keys) - n:][::-1], keys[:len(keys) - n]
        self.evictable -= take
        if take < blocks:
            self.runs[h] = (blocks - take, keys)
        else:
            del self.lru[h]
            del self.runs[h]
            self.held -= bool(run[1])
        return gone, take

    def clear(self) -> None:
        """Forget every entry and run (a fault emptied the GPU); evictions stay counted."""
        self.refs.clear()
        self.lru.clear()
        self.runs.clear()
        self.evictable = 0
        self.held = 0


def block_hashes(hashes: np.ndarray, hash_tokens: int, block_size: int,
                 source: str = "<scenario>", combine: bool = False) -> tuple[int, ...]:
    """A request's prefix hashes at KV-block granularity, as vLLM hashes its prompt: each
    hash naming ``hash_tokens`` tokens (a Mooncake trace's 512) becomes
    ``hash_tokens / block_size`` block hashes, ``h * k + j`` for its j-th block (distinct
    for distinct (h, j)). Two requests that share a coarse block then share each of its
    blocks, and a prompt's full blocks inside a partly filled coarse block are cached.
    ``combine``: blocks that are not a whole part of a hash (a Gated DeltaNet model's,
    hundreds of tokens under vLLM) are named by :func:`chained_blocks` instead of
    refused."""
    if hash_tokens % block_size:
        if combine:
            return chained_blocks(hashes.tolist(), hash_tokens, block_size)
        raise ServesimError(f"prefix blocks of {hash_tokens} tokens are not a multiple of "
                            f"block_size {block_size}", source, "serving.block_size")
    k = hash_tokens // block_size
    if k == 1:
        return tuple(hashes.tolist())
    if hashes.size and int(np.abs(hashes).max()) < (2**62) // k:
        return tuple((hashes[:, None] * k + np.arange(k)).ravel().tolist())
    return tuple(h * k + j for h in hashes.tolist() for j in range(k))  # beyond int64


def chained_blocks(hashes: list[int], hash_tokens: int, block_size: int) -> tuple[int, ...]:
    """Keys of the KV blocks of ``block_size`` tokens that prefix hashes of
    ``hash_tokens`` tokens each cover whole: block j's key is Python's hash of block j -
    1's key and the hashes of every span its tokens overlap, so two prompts share block j
    exactly when they share every span up to its last token, as vLLM's chained block
    hashes do (a span two prompts share only in part counts as differing). Deterministic:
    an int tuple's hash does not depend on the interpreter's hash seed."""
    out: list[int] = []
    key = 0
    j = 0
    while True:
        last = ((j + 1) * block_size - 1) // hash_tokens
        if last >= len(hashes):
            return tuple(out)
        key = hash((key, *hashes[j * block_size // hash_tokens:last + 1]))
        out.append(key)
        j += 1


def own_keys(r: Request, start: int, stop: int) -> tuple[int, ...]:
    """Keys unique to ``r`` for its block entries ``start`` to ``stop`` (past its prefix
    hashes): :data:`OWN_HASHES` + ``r.id`` * 2**32 + the entry's index. No other
    request names them."""
    base = OWN_HASHES + (r.id << 32)
    return tuple(range(base + start, base + stop))
