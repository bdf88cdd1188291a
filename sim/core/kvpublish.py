"""The publishing side of the KV-cache manager: what a request's computed blocks add to
the prefix cache, after an iteration (:meth:`PrefixPublishing.cache_computed`) or when it
is preempted (:meth:`PrefixPublishing.preempt`), and a Gated DeltaNet model's state
snapshots. A mixin of :class:`sim.core.kvmanager.KVCacheManager`, which owns the counts
it changes; apart only to keep each module to one concern.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.core.hosttier import HostTier
from sim.core.prefix import PrefixCache, own_keys
from sim.core.request import Request


class PrefixPublishing:
    """Prefix-cache publishing of :class:`~sim.core.kvmanager.KVCacheManager` (its
    ``prefix``, ``host``, ``used`` and ``total``, and its eviction and freeing)."""

    # No __slots__ here: the manager's own list them all (an empty one would forbid the
    # writes below to its counts in a type checker's eyes).
    prefix: PrefixCache | None
    host: HostTier
    used: int
    total: int

    @property
    def available(self) -> int:
        """Free blocks plus evictable ones (the manager's)."""
        raise NotImplementedError

    def _evict(self, num_blocks: int) -> None:
        raise NotImplementedError

    def free(self, r: Request, copy: bool = True) -> int:
        """Return ``r``'s blocks (the manager's)."""
        raise NotImplementedError

    def cache_blocks(self, r: Request) -> None:
        """After ``r``'s prefill: its full prompt blocks join the prefix cache (or, when
        another request cached the same content meanwhile, it shares that entry and its
        own copy is freed)."""
        pc = self.prefix
        assert pc is not None and r.hashes is not None
        self._publish(r, min(len(r.hashes), r.prompt // pc.hash_tokens))

    def cache_scheduled(self, r: Request, tokens: int) -> None:
        """vLLM v1 caches a request's full prompt blocks as it schedules them (its
        KV-cache manager's ``allocate_slots``), before the step computes them: a request
        admitted later in the same pass, or in a later step while ``r`` is part-way
        through its prompt, hits them. ``r``'s entries within its first ``tokens`` tokens
        (its computed tokens once the step ends) join the cache now. Without a GPU cache
        (a host tier alone), for a Gated DeltaNet model's cache (whose states are kept
        where a step ends) and with a write-through host tier (which copies computed
        blocks), blocks are published after the step instead (:meth:`cache_computed`)."""
        pc = self.prefix
        if pc is None or not pc.retain or r.hashes is None or pc.state_pages or \
                self.host.through:
            return
        full = min(len(r.hashes), min(tokens, r.prompt) // pc.hash_tokens)
        if full > r.cached:
            self._publish(r, full)

    def cache_computed(self, entries: Iterable[Request]) -> None:
        """After an iteration: the requests among ``entries`` whose prompts are now
        computed whole cache their prompt blocks (:meth:`cache_blocks`), whether or not
        the iteration emitted their token: a resumed request's recomputed prompt is
        cached before its next decode, which may run in a decode set."""
        pc = self.prefix
        grid = pc.hash_tokens if pc is not None and pc.state_pages else 0
        for r in entries:
            if grid and 0 < r.computed <= r.prompt and not r.computed % grid:
                self._keep_state(r, r.computed // grid)
            if r.hashes is not None and r.computed >= r.prompt:
                self.cache_blocks(r)

    def _keep_state(self, r: Request, k: int) -> None:
        """``r``'s prefill step ended on the block grid, after its ``k``-th block: keep the
        states there, a snapshot a later hit may resume from (vLLM's align mode keeps the
        state where a step ends on a block boundary), unless no room is left for it. A
        block past ``r``'s prefix hashes gets a key of its own (:func:`own_keys`, as
        :meth:`preempt` gives them), as vLLM hashes every block: no other request names
        it, but ``r`` finds it again if it is preempted."""
        pc = self.prefix
        assert pc is not None
        need = pc.state_pages
        have = len(r.hashes or ())
        if k > have:
            r.hashes = (r.hashes or ()) + own_keys(r, have, k)
        h = r.hashes[k - 1]  # type: ignore[index]
        if pc.has_state(h):
            pc.touch_state(h)
        elif self.available >= need:
            if need > self.total - self.used:
                self._evict(need)
            self.used += need
            pc.add_state(h)

    def preempt(self, r: Request) -> int:
        """Free ``r``, preempted to be recomputed later; returns the blocks it spanned.

        With prefix caching its computed full blocks are cached first, as vLLM's
        cache keeps every full block it computed (hashed by content) until an
        allocation evicts it: when ``r`` is admitted again, :meth:`computed_tokens` finds
        those still cached and its prefill resumes after them. Blocks whose content
        ``r``'s prefix hashes do not name (its generated tokens, or a prompt without
        hashes) get hashes of their own, unique to ``r``: no other request shares them.
        A Gated DeltaNet model's request whose last step ended on the block grid leaves
        its states there as a snapshot: vLLM frees that state page with its hash, so the
        resumed request starts after the block (its pages change hands, not counts)."""
        pc = self.prefix
        if pc is not None:
            full = r.computed // pc.hash_tokens
            have = 0 if r.hashes is None else len(r.hashes)
            if full > have:
                r.hashes = (r.hashes or ()) + own_keys(r, have, full)
            if full > r.cached:
                self._publish(r, full)
            if pc.state_pages and full and not r.computed % pc.hash_tokens:
                h = r.hashes[full - 1]  # type: ignore[index]
                if not pc.has_state(h):
                    pc.add_state(h)
                    r.blocks -= pc.state_pages  # the cache's now, still used
        return self.free(r)

    def _publish(self, r: Request, full: int) -> None:
        """Cache ``r``'s first ``full`` entries (those after the ones it references)."""
        pc, host = self.prefix, self.host
        assert pc is not None and r.hashes is not None
        if pc.retain:
            entries = host.entries
            for k in range(r.cached, full):
                if not pc.publish(r.hashes[k]):
                    self.used -= pc.per_hash
                elif entries and not host.through:
                    host.discard(r.hashes[k])  # the GPU's fresh copy replaces it
        if host.through and full > r.cached:  # outputs' own blocks only if it keeps them
            host.copy(r.hashes[:full if host.outputs else min(full, r.prompt // pc.hash_tokens)])
        if full > r.cached:
            r.cached = full

    def _copy_rest(self, r: Request) -> None:
        """Write-through, as ``r`` leaves the GPU: copy its full blocks past its prompt's
        hashes (outputs' if the tier stores them) under keys of ``r``'s own (as
        :meth:`preempt` gives them), which no other request names but take host room."""
        pc = self.prefix
        if pc is not None:
            tokens = r.computed if self.host.outputs else min(r.computed, r.prompt)
            self.host.copy(own_keys(r, len(r.hashes or ()), tokens // pc.hash_tokens))
