"""One replica's KV-cache manager: every change to its block counts goes through here.

Modelled on vLLM's: a scheduler asks :meth:`KVCacheManager.can_allocate` or calls
:meth:`~KVCacheManager.allocate_slots` for a request's new tokens (None on a shortage,
nothing changed), :meth:`~KVCacheManager.free` when it finishes or is preempted,
:meth:`~KVCacheManager.swap_out` / ``swap_in`` to move its KV to host memory and back,
``computed_tokens`` / ``cache_blocks`` for the prefix cache (what a request publishes to
it: :mod:`sim.core.kvpublish`). Nothing else changes a count.

Blocks are counted, not named: block identity changes no timing. A request's share is
kept on it (``blocks``: the blocks its tokens span, prefix-cache entries and a
sliding-window model's window pages (:meth:`KVCacheManager.window_share`) included;
``cached``: the leading prefix entries it references; ``swapped``: blocks of it in host
memory), written only here. Guarantees: 0 <= ``used`` <= ``total``; an allocation that
keeps the watermark leaves at least ``watermark`` blocks available
(:attr:`~KVCacheManager.admit_low_water` records the fewest it left).

Host memory is one more tier below the GPU (:class:`~sim.core.hosttier.HostTier`, owned
here): it holds swapped KV and, with ``serving.kv_offload``, prefix entries a later hit
loads back: those the GPU evicts (write-back), or copies of blocks once computed
(write-through, also under a GPU whose own cache is off: ``retain`` false). Blocks moved
for evictions and hits accumulate in :attr:`~KVCacheManager.pending_io` for the replica
to price; write-through's background copies are not priced.

Imports no SimPy: ``calibrate.replay`` runs the same manager on a device machine.
"""

from __future__ import annotations

from sim.core.hosttier import HostTier
from sim.core.kvpublish import PrefixPublishing
from sim.core.prefix import NO_HIT, PrefixCache, PrefixHit, own_keys
from sim.core.request import Request
from sim.cost.kvpages import blocks_for, window_share

__all__ = ["NO_HIT", "KVCacheManager", "PrefixHit"]


class KVCacheManager(PrefixPublishing):
    """Free, used, cached and swapped KV blocks of one replica.

    ``total_blocks`` blocks of ``block_size`` tokens; ``watermark_blocks`` kept free when
    admitting (vLLM's watermark) so a fresh prompt does not force running requests out
    at once; ``swap_blocks``: the host tier's size (blocks) for swapped KV and, with
    ``offload`` (``serving.kv_offload``), prefix entries (``write_through``,
    ``store_outputs``: how they are written, :mod:`sim.core.hosttier`); ``state_blocks``:
    the blocks a running request's Gated DeltaNet states take from the pool, as vLLM
    pages them (0: none, or set aside beforehand), ``snapshot_blocks`` one state's, kept
    by the prefix cache where a step ends on the block grid. With prefix caching on
    (:meth:`enable_prefix_caching`) no freed block is forgotten until an allocation
    needs it: entries no request references and freed requests' runs count as
    available and are evicted least recently freed first.
    """

    __slots__ = ("total", "block_size", "watermark", "used", "host", "prefix",
                 "admit_low_water", "pending_io", "window", "window_groups", "prompt_only",
                 "states", "fixed", "snapshot", "shares")

    def __init__(self, total_blocks: int, block_size: int, watermark_blocks: int = 0,
                 swap_blocks: int = 0, offload: bool = False, window_blocks: int = 0,
                 window_groups: tuple[int, int] = (1, 1), prompt_only: bool = False,
                 write_through: bool = False, store_outputs: bool = True,
                 state_blocks: int = 0, snapshot_blocks: int = 0) -> None:
        if (total_blocks < 1 or block_size < 1 or swap_blocks < 0 or window_blocks < 0
                or state_blocks < 0 or snapshot_blocks < 0
                or not 0 <= watermark_blocks <= total_blocks or min(window_groups) < 1):
            raise ValueError("bad KV cache sizes")
        self.total = total_blocks
        self.block_size = block_size
        self.watermark = watermark_blocks
        # A model with sliding-window and full layers (sim.cost.kvpages.hybrid_groups):
        # a block holds the full layers' KV of block_size tokens, and a request's
        # sliding layers hold at most ``window`` pages of the same pool, each page
        # window_groups[0] / window_groups[1] of a block (see window_share).
        self.window = window_blocks
        self.window_groups = window_groups
        # A Gated DeltaNet model's states under vLLM: pages of this pool a running request
        # holds whatever its length, as its window's (window_of).
        self.states = state_blocks
        self.fixed = bool(window_blocks or state_blocks)
        self.snapshot = snapshot_blocks  # one state's blocks, kept by the prefix cache
        # A disaggregated prefill replica: its requests hold their prompts' KV only.
        self.prompt_only = prompt_only
        self.used = 0  # blocks held by requests or kept by the prefix cache
        self.host = HostTier(swap_blocks, offload, write_through, store_outputs)
        # Blocks of prefix entries moved between the tiers since the replica last priced
        # an iteration (stores of evicted entries and loads of hits).
        self.pending_io = 0
        self.prefix: PrefixCache | None = None
        # Whether requests carry prefix hashes another request may hit (the engine sets
        # it): only then is caching blocks as they are scheduled worth a look.
        self.shares = False
        # The fewest available blocks an allocation keeping the watermark left behind.
        self.admit_low_water = total_blocks

    def enable_prefix_caching(self, hash_tokens: int, retain: bool = True,
                              drop_last: bool = False) -> PrefixCache:
        """Keep prompt blocks by content hash, each hash naming ``hash_tokens`` tokens (a
        multiple of the block size); returns the cache (the router reads it). ``retain``
        false: the GPU keeps none, a write-through host tier holding them alone (the
        engine's choice; a request's ``cached`` then counts its entries on the host).
        ``drop_last``: an EAGLE or MTP drafter's hits give up their last block."""
        self.prefix = PrefixCache(hash_tokens, self.block_size, retain, self.snapshot, drop_last)
        self.host.per_hash = self.prefix.per_hash
        return self.prefix

    # -- queries ----------------------------------------------------------------------
    @property
    def swap_free(self) -> int:
        """Host blocks a swap-out could take (stored prefix entries give way to it)."""
        return self.host.total - self.host.swapped

    @property
    def num_free(self) -> int:
        """Blocks held by no request and no cached entry."""
        return self.total - self.used

    @property
    def in_use(self) -> int:
        """Blocks requests hold: cached entries no request references are free for the
        taking and not counted (vLLM's KV-cache usage counts them free too)."""
        pc = self.prefix
        return self.used - pc.evictable if pc is not None else self.used

    @property
    def available(self) -> int:
        """Free blocks plus blocks of unreferenced cached entries (evictable)."""
        pc = self.prefix
        return self.total - self.used + (pc.evictable if pc is not None else 0)

    def can_allocate(self, num_blocks: int, keep_watermark: bool = False) -> bool:
        """Whether ``num_blocks`` more blocks fit (leaving the watermark free if asked)."""
        return self.available - num_blocks >= (self.watermark if keep_watermark else 0)

    def can_ever_hold(self, tokens: int) -> bool:
        """Whether one request spanning ``tokens`` tokens could ever be admitted: its
        blocks (its window's among them) fit the cache less the watermark."""
        n = blocks_for(tokens, self.block_size)
        return n + self.window_share(n) + self.states <= self.total - self.watermark

    def window_share(self, blocks: int) -> int:
        """Blocks the sliding-window layers of a request whose full layers span
        ``blocks`` blocks at most hold: 0 without such layers.

        vLLM's SlidingWindowManager keeps a request's pages from the last W tokens on,
        ceil(W / block_size) + 1 at most, and frees those behind; a request shorter than
        its window keeps a page a block. servesim charges that peak, for its whole
        life's length, from first allocation to last: exact while it decodes past the
        window, a few blocks early before, leaving out the pages a prefill chunk holds
        for one step beyond the window (at most the step's token budget in all)."""
        if not self.window:
            return 0
        return window_share(self.window, self.window_groups, blocks)

    def spans(self, r: Request, tokens: int) -> int:
        """Blocks ``r`` holds once its first ``tokens`` tokens have slots: a block of
        every ``block_size`` tokens, plus its window's share and states (:meth:`window_of`)."""
        n = -(-tokens // self.block_size)
        if self.fixed:
            n += self.window_of(r)
        return n

    def window_of(self, r: Request) -> int:
        """``r``'s blocks that do not grow with its tokens: its window share
        (:meth:`window_share`; 0 without sliding layers) of its whole life's tokens, or of
        its prompt's on a replica that only prefills (what :meth:`can_ever_hold` is asked
        for), and its recurrent states' (``states``). They stay put while ``r`` decodes."""
        if not self.window:
            return self.states
        life = r.prompt if self.prompt_only else r.prompt + r.output - 1
        return self.window_share(-(-life // self.block_size)) + self.states

    def blocks_needed(self, r: Request, num_tokens: int) -> int:
        """Blocks ``r`` must take for ``num_tokens`` tokens past those it has computed
        (0 or less when the blocks it holds cover them): the count
        :meth:`allocate_slots` takes without a prefix hit."""
        n = -(-(r.computed + num_tokens) // self.block_size) - r.blocks
        if self.fixed:
            n += self.window_of(r)
        return n

    def computed_tokens(self, r: Request) -> PrefixHit:
        """The leading tokens of ``r``'s next prefill already cached (never its last, whose
        logits are needed): on the GPU, then on in the host tier; :data:`NO_HIT` without
        caching, or for a request whose KV is partly present (swapped, or sent over)."""
        pc = self.prefix
        if pc is None or r.hashes is None or r.computed:
            return NO_HIT
        k, unref = pc.match(r.hashes, r.prompt + r.generated) if pc.retain else (0, 0)
        if self.host.through:  # a lookup counts as a use, as vLLM's connector's does
            self.host.touch(r.hashes)
        if self.host.entries:
            j = self.host.match(r.hashes, k, pc.limit(r.hashes, r.prompt + r.generated),
                                pc.refs)
            if j:
                return PrefixHit((k + j) * pc.hash_tokens, unref, j * pc.hash_tokens)
        return PrefixHit(k * pc.hash_tokens, unref)

    # -- allocation -------------------------------------------------------------------
    def allocate_slots(self, r: Request, num_new_tokens: int, hit: PrefixHit = NO_HIT,
                       lookahead_tokens: int = 0, keep_watermark: bool = False,
                       full_sequence_must_fit: bool = False) -> int | None:
        """Give ``r`` the blocks its next ``num_new_tokens`` tokens (after ``hit.tokens``
        taken from the prefix cache, see :meth:`computed_tokens`) and ``lookahead_tokens``
        more need; returns the blocks newly taken (0 when it already holds them), or None
        when they do not fit (leaving the watermark free if asked), changing nothing.
        Blocks of a hit's host part are among those taken: they are loaded into them.
        ``full_sequence_must_fit``: None unless the blocks of ``r``'s whole sequence so far
        (prompt and output) would fit too, vLLM's admission gate from 0.19
        (``--scheduler-reserve-full-isl``)."""
        cached = hit.tokens
        need = self.blocks_needed(r, cached + num_new_tokens + lookahead_tokens)
        if cached:
            need -= (cached - hit.loaded) // self.block_size
        elif need <= 0 and not keep_watermark:
            return 0  # the common decode that stays inside its last block
        pc = self.prefix
        free = self.total - self.used
        avail = free + pc.evictable - hit.pinned if pc is not None else free
        low = self.watermark if keep_watermark else 0
        if avail - need < low:
            return None
        if full_sequence_must_fit:
            whole = self.blocks_needed(r, r.prompt + r.generated - r.computed)
            if cached:
                whole -= (cached - hit.loaded) // self.block_size
            if avail - whole < low:
                return None
        if cached:
            assert pc is not None and r.hashes is not None
            k = (cached - hit.loaded) // pc.hash_tokens
            pc.acquire(r.hashes[:k])  # before allocating, so they are not evicted
            if pc.state_pages:
                pc.touch_state(r.hashes[k - 1])
            if self.host.through:  # vLLM copies GPU hits the host lacks too
                self.host.copy(r.hashes[:k])
            r.cached = k
            r.blocks += k * pc.per_hash
            if hit.loaded:
                self._load(r, k, hit.loaded // pc.hash_tokens)
        if need > 0:
            if need > free:
                self._evict(need)
            self.used += need
            r.blocks += need
        if keep_watermark and avail - need < self.admit_low_water:
            self.admit_low_water = avail - need
        return need if need > 0 else 0

    def _load(self, r: Request, k: int, j: int) -> None:
        """Load ``r``'s host-tier entries ``k`` to ``k + j`` into blocks the caller takes
        now, as GPU cache entries it references (with the GPU's cache on)."""
        pc = self.prefix
        assert pc is not None and r.hashes is not None
        loaded = r.hashes[k:k + j]
        # Out of the host before any eviction below could push GPU entries into it.
        self.host.take(loaded)
        if pc.retain:
            for h in loaded:
                pc.publish(h)
        r.cached = k + j
        self.pending_io += j * pc.per_hash

    def allocate_blocks(self, num_blocks: int) -> bool:
        """Take ``num_blocks`` blocks for requests whose own counts are brought up to date
        later (:meth:`settle`; a :class:`sim.core.decodeset.DecodeSet`'s members), evicting
        cached entries if need be; False when they do not fit, changing nothing."""
        if num_blocks > self.total - self.used:
            if num_blocks > self.available:
                return False
            self._evict(num_blocks)
        self.used += num_blocks
        return True

    def settle(self, r: Request, tokens: int) -> None:
        """Record that ``r`` spans the blocks of its first ``tokens`` tokens (and its
        window's), taken for it in bulk by :meth:`allocate_blocks`."""
        r.blocks = self.spans(r, tokens)

    def _evict(self, num_blocks: int) -> None:
        """Evict least recently freed cached entries and runs' blocks until ``num_blocks``
        blocks are free; those keyed go down to the host tier when it keeps prefixes."""
        pc, host = self.prefix, self.host
        assert pc is not None
        while self.total - self.used < num_blocks and pc.lru:
            gone, n = pc.evict_oldest(num_blocks - self.total + self.used)
            self.used -= n
            for h in gone if host.keeps_prefixes else ():
                self.pending_io += host.evicted(h)
        if self.total - self.used < num_blocks:
            raise AssertionError(f"KV over-allocation: {num_blocks} blocks with "
                                 f"{self.total - self.used} free")

    # -- release ----------------------------------------------------------------------
    def free(self, r: Request, copy: bool = True) -> int:
        """Return ``r``'s own blocks and drop its references to cached entries (which
        stay cached); returns the blocks it spanned. With prefix caching its own blocks
        stay too where it matters, retired as a run the LRU order reaches before its
        entries (:meth:`PrefixCache.retire`). ``copy`` false (a swap-out): its KV left
        whole, so no write-through copy (:meth:`_copy_rest`) and no run."""
        n = own = r.blocks
        pc, host = self.prefix, self.host
        if copy and host.through:
            self._copy_rest(r)
        if pc is not None and not pc.retain:
            pc = None  # the GPU keeps nothing
        if pc is not None and r.cached:
            own -= r.cached * pc.per_hash
        if own < 0 or own > self.used:
            raise AssertionError(f"KV double free: freeing {own} of {self.used} used")
        kept = False
        if pc is not None and copy and own:
            keys: tuple[int, ...] = ()
            if host.keeps_prefixes and not host.through:  # write-back stores runs' blocks
                # past r's hashes (a hashed block it did not publish may be an entry)
                keys = own_keys(r, max(r.cached, len(r.hashes or ())), min(
                    r.computed // pc.hash_tokens, r.cached + own // pc.per_hash))
            kept = pc.retire(own, keys)
        if not kept:
            self.used -= own
        if pc is not None and r.cached:  # after its run: a request's tail goes first
            pc.release(r.hashes[:r.cached])  # type: ignore[index]
        r.cached = 0
        r.blocks = 0
        return n

    # -- swapping ---------------------------------------------------------------------
    def swap_out(self, r: Request) -> bool:
        """Preempt ``r`` by moving its KV to host memory: its GPU blocks are freed and
        ``r.swapped`` holds their count. False when the host has no room (nothing
        changed: the caller frees it for recompute)."""
        n = r.blocks
        if not self.host.can_swap(n):
            return False
        self.free(r, copy=False)  # its KV goes to the host whole: no copies besides
        r.swapped = n
        self.host.swap_out(n)
        return True

    def swap_in(self, r: Request) -> int:
        """``r`` (just given its GPU blocks back) leaves host memory; returns the blocks
        that move over PCIe."""
        n = r.swapped
        self.host.swap_in(n)
        r.swapped = 0
        return n

    def reset(self, lost: list[Request]) -> None:
        """Drop every block and cached entry (a fault emptied the GPU); ``lost`` are the
        requests held, whose host copies are dropped too, with the host's entries."""
        self.host.clear(sum(r.swapped for r in lost))
        if self.prefix is not None:
            self.prefix.clear()
        self.used = 0
        self.pending_io = 0

