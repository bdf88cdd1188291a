"""Paths of speculating requests through a decode set, worked out ahead in bulk.

A member of :class:`sim.core.specset.SpecDecodeSet` adds its whole path to the set's
per-tick sums when it joins: the tokens each of its verifies emits and the KV blocks it
holds at each. Working a path out costs about ten numpy calls whatever its length, so
done request by request it would be most of a speculating request's cost. Most joins
are a request's first (just past its prefill: its first token out, its context its
prompt, its next draw its first), and those paths depend only on the request's lengths,
its draws and the block size, all known when it is routed. So when a request is routed
and no plan covers it, :func:`plan` works out the first paths of the next ``PLAN``
requests in id order (the order they are routed in, unless some are turned away or
arrive out of order), against the draws they would take: where each one's draws end
found one by one, the rest in one set of numpy calls. Each routed request whose id and
first draw match its row takes it (:class:`sim.core.speculation.Speculation`). A request
whose path was not planned, or that joins later (after a preemption), works its path
out alone (:func:`path`); both give the same numbers.

A path is packed one int64 per tick, as the set keeps its sums: tokens emitted in the
low 32 bits, blocks held in the bits above (:data:`SHIFT`). The last verify may bring
more tokens than the request owes; that surplus (``over``) is left in the packed path
and taken off by the set when that tick ends.
"""

from __future__ import annotations

import numpy as np

PLAN = 256  # requests one plan covers at most
SHIFT = 32  # packed sums: tokens below this bit, blocks from it
LOW = (1 << SHIFT) - 1


Path = tuple[np.ndarray, int, int, int, int, int, int]
"""One member's path, as ``(packed, start, ticks, over, last, off, block_size)``:
``packed[start:start + ticks]`` holds (tokens, blocks) for each of its ``ticks``
verifies; ``over``: tokens its last verify brings past what it owes; ``last``: blocks
it holds at its last verify; ``off``: the running sum of its draws before its first
verify; ``block_size``: the blocks' size (tokens). A plain tuple: one is read per join."""


def _blocks(tokens: np.ndarray, block_size: int) -> np.ndarray:
    """Blocks of ``tokens`` (already offset to round up), in place."""
    if block_size & (block_size - 1) == 0:
        tokens >>= block_size.bit_length() - 1  # a power of two: a shift, cheaper
    else:
        tokens //= block_size
    return tokens


def path(tokens: np.ndarray, sums: np.ndarray, v: int, computed: int, owed: int,
         blocks: int, q: int, block_size: int) -> Path:
    """The path of a member whose next draw is ``tokens[v]`` (``sums``: running sums
    from 0), with ``computed`` tokens in the KV cache, ``owed`` output tokens still to
    emit and ``blocks`` KV blocks held; each verify takes ``q`` slots past its context
    and keeps at least the blocks held before (rejected drafts' slots stay with it)."""
    off = sums.item(v)
    # One past its last verify: the first draw whose running sum reaches what it owes.
    y = int(sums.searchsorted(off + owed))
    over = sums.item(y) - off - owed
    held = _blocks(sums[v:y] + (computed + q + block_size - 1 - off), block_size)
    if blocks > (computed + q + block_size - 1) // block_size:
        np.maximum(held, blocks, out=held)
    last = held.item(-1)
    held <<= SHIFT
    held += tokens[v:y]
    return held, 0, y - v, over, last, off, block_size


class Plan:
    """First paths of consecutive routed requests (see the module docstring): row ``i``
    is for request ``ids[i]``, whose draws run from ``firsts[i]`` of the chunk to one
    before ``ends[i]``."""

    __slots__ = ("ids", "firsts", "ends", "rows", "next")

    def __init__(self, ids: list[int], firsts: list[int], ends: list[int],
                 rows: list[Path | None]):
        self.ids = ids
        self.firsts = firsts
        self.ends = ends
        self.rows = rows
        self.next = 0  # the row the next routed request should match

    def take(self, rid: int, first: int) -> tuple[bool, Path | None]:
        """(whether request ``rid``, its first draw at ``first``, is the next row, its
        path then: None for a request that never decodes)."""
        i = self.next
        if i >= len(self.ids) or self.ids[i] != rid or self.firsts[i] != first:
            return False, None
        self.next = i + 1
        return True, self.rows[i]


def plan(tokens: np.ndarray, sums: np.ndarray, first: int, ids: np.ndarray,
         prompts: np.ndarray, outputs: np.ndarray, q: int, block_size: int) -> Plan:
    """The first paths of requests ``ids`` (their ``prompts`` and ``outputs`` in
    tokens), routed in that order and taking draws from ``first`` on, each as many as
    its ``output - 1`` tokens need, as far as the chunk reaches (a request fits when
    ``output - 1`` draws from its first would: see :mod:`sim.core.speculation`): each
    joins with its prompt computed, its first token out and its prompt's blocks.

    Where each request's draws end depends on the one before, so those ends are found
    one by one; the packed sums are then worked out over all their draws at once with
    contiguous numpy operations, each request's path a slice."""
    size = len(tokens)
    find = sums.searchsorted
    starts: list[int] = []
    ends: list[int] = []
    at = first
    for n in np.maximum(outputs - 1, 0).tolist():
        if at + n > size:
            break
        starts.append(at)
        if n:
            at = int(find(sums.item(at) + n))
        ends.append(at)
    fit = len(starts)
    a, ys = np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)
    off = sums[a]
    ticks = ys - a
    # Blocks at each draw's verify, for the request that takes the draw.
    base = prompts[:fit] + (q + block_size - 1) - off
    held = _blocks(sums[first:at] + np.repeat(base, ticks), block_size)
    some = ticks > 0
    lasts = np.zeros(fit, dtype=np.int64)
    lasts[some] = held[(ys - 1 - first)[some]]
    held <<= SHIFT
    held += tokens[first:at]
    over = sums[ys] - off - np.maximum(outputs[:fit] - 1, 0)
    rows: list[Path | None] = [
        (held, s - first, t, o, last, f, block_size) if t else None
        for s, t, o, last, f in zip(starts, ticks.tolist(), over.tolist(), lasts.tolist(),
                                    off.tolist(), strict=True)]
    return Plan(ids[:fit].tolist(), starts, ends, rows)
