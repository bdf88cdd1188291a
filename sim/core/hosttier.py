"""The host-memory tier of one replica's KV cache: blocks held in CPU memory, below the GPU.

Two kinds of blocks live here, sharing one capacity (``total`` blocks, each a block's
per-GPU shard, so the tier of every GPU of a replica holds the same count):

- a preempted request's KV, swapped out (``swapped`` blocks, pinned until it resumes);
- with ``serving.kv_offload``, prefix-cache entries (``entries``, by content hash,
  least recently stored or used first), written one of two ways
  (``kv_offload.write_policy``):

  - write-back (SGLang HiCache's ``write_back``): an entry comes down when the GPU evicts
    it, and is in at most one tier: loading it to the GPU for a hit takes it out of
    here, and a request that computes a block whose hash is stored here makes the host
    copy redundant;
  - write-through (vLLM's CPU offloading connector, LMCache): a request's full blocks
    are copied here once computed, in the background (its prompt's, and with
    ``outputs`` also those of its output, as vLLM's connector stores every full block
    and LMCache by default the prompt's alone), so an eviction moves nothing; a hit
    loads a copy and the host keeps its own. A block no other request can name (past
    a prompt's hashes) still takes its room until dropped. The least recently used
    entry goes first, a request's head counting as more recent than its tail (vLLM's
    offloading LRU touches a request's blocks last to first). The GPU's own cache may
    be off: the host tier is then the only place a prefix is found again.

When room is needed, stored entries are dropped oldest first; swapped blocks never are
(a swap-out that does not fit is refused, and the request is recomputed instead).
Counts only: which host addresses hold what changes no timing. The owning
:class:`~sim.core.kvmanager.KVCacheManager` decides every move and prices none; the
replica turns the blocks moved into seconds on the host link.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence


class HostTier:
    """Host KV blocks of one replica: ``total`` blocks, of which ``swapped`` hold
    swapped-out requests and ``per_hash`` blocks each of ``entries`` hold prefix entries
    (only when ``keeps_prefixes``: those the GPU evicted, or with ``through`` copies).
    Counters over the run (blocks): ``stored`` written from the GPU, ``loaded`` read back
    to it; ``dropped``: prefix entries lost (dropped from the host, or evicted from the
    GPU with no host room for them)."""

    __slots__ = ("total", "keeps_prefixes", "through", "outputs", "per_hash", "swapped",
                 "entries", "stored", "loaded", "dropped")

    def __init__(self, total_blocks: int, keeps_prefixes: bool = False,
                 through: bool = False, outputs: bool = True) -> None:
        if total_blocks < 0:
            raise ValueError("bad host tier size")
        if through and not keeps_prefixes:
            raise ValueError("a write-through tier keeps prefixes")
        self.total = total_blocks
        self.keeps_prefixes = keeps_prefixes
        self.through = through  # write-through (else write-back); see the module docstring
        self.outputs = outputs  # write-through: output blocks are copied too
        self.per_hash = 1  # blocks per prefix entry, set when prefix caching is enabled
        self.swapped = 0
        self.entries: OrderedDict[int, None] = OrderedDict()
        self.stored = 0
        self.loaded = 0
        self.dropped = 0

    @property
    def free(self) -> int:
        """Blocks holding nothing."""
        return self.total - self.swapped - len(self.entries) * self.per_hash

    @property
    def entry_blocks(self) -> int:
        """Blocks holding prefix entries."""
        return len(self.entries) * self.per_hash

    def match(self, hashes: Sequence[int], start: int, limit: int,
              gpu: Mapping[int, int]) -> int:
        """How many of ``hashes[start:limit]``, from ``start`` on without a gap, are
        stored here and not cached on the GPU (``gpu``: a hit there is shared, not
        loaded; only a write-through tier can hold both)."""
        entries = self.entries
        k = start
        while k < limit and hashes[k] in entries and hashes[k] not in gpu:
            k += 1
        return k - start

    def _make_room(self, blocks: int) -> bool:
        """Drop the oldest entries until ``blocks`` are free; False (nothing dropped) when
        even dropping every entry would not free them."""
        room = self.total - self.swapped - blocks  # blocks entries may keep
        if room < 0:
            return False
        entries, per = self.entries, self.per_hash
        while len(entries) * per > room:
            entries.popitem(last=False)
            self.dropped += 1
        return True

    def put(self, h: int) -> bool:
        """Store the prefix entry ``h`` the GPU just evicted, dropping older ones for room;
        False when the tier keeps no prefixes, or has no room even so (then ``h`` counts
        as dropped: lost)."""
        if not self.keeps_prefixes:
            return False
        if not self._make_room(self.per_hash):
            self.dropped += 1
            return False
        self.entries[h] = None
        self.stored += self.per_hash
        return True

    def evicted(self, h: int) -> int:
        """The GPU evicted entry ``h``; returns the blocks that move down for it now:
        under write-back the entry is stored (:meth:`put`; 0 when it is lost), under
        write-through none (the host copied it when it was computed, or has dropped it)."""
        if self.through or not self.put(h):
            return 0
        return self.per_hash

    def discard(self, h: int) -> None:
        """Write-back: forget ``h`` if stored, the GPU having computed that block again
        (its fresh copy replaces this one; nothing moves)."""
        self.entries.pop(h, None)

    def copy(self, hashes: Sequence[int]) -> None:
        """Write-through: copy the entries ``hashes`` a request just computed, those not
        stored already, dropping the least recently used for room (one that finds none
        even so is not copied), then count the request's ``hashes`` as just used."""
        entries = self.entries
        for h in hashes:
            if h not in entries and self._make_room(self.per_hash):
                entries[h] = None
                self.stored += self.per_hash
        self.touch(hashes)

    def touch(self, hashes: Sequence[int]) -> None:
        """Write-through: a request's entries among ``hashes`` (its blocks in order) were
        just looked up or stored: the most recently used now, its head the most recent."""
        entries = self.entries
        for h in reversed(hashes):
            if h in entries:
                entries.move_to_end(h)

    def take(self, hashes: Sequence[int]) -> None:
        """A hit loads these stored entries to the GPU: under write-back they leave the
        host (an entry is in one tier); under write-through the host keeps them (the
        lookup that found them counted them as used)."""
        if not self.through:
            for h in hashes:
                del self.entries[h]
        self.loaded += len(hashes) * self.per_hash

    def can_swap(self, blocks: int) -> bool:
        """Whether a request's ``blocks`` could be swapped in (dropping entries)."""
        return blocks <= self.total - self.swapped

    def swap_out(self, blocks: int) -> None:
        """Hold a preempted request's ``blocks`` (:meth:`can_swap` said they fit)."""
        if not self._make_room(blocks):
            raise AssertionError(f"host over-allocation: {blocks} blocks with "
                                 f"{self.total - self.swapped} swappable")
        self.swapped += blocks
        self.stored += blocks

    def swap_in(self, blocks: int) -> None:
        """A swapped request's ``blocks`` go back to the GPU."""
        self.swapped -= blocks
        self.loaded += blocks

    def clear(self, swapped: int) -> None:
        """A fault lost the replica: its ``swapped`` blocks and every entry are gone."""
        self.swapped -= swapped
        self.entries.clear()
