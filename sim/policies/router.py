"""Routers: which replica an arriving request goes to.

Each is a small function-like class with ``pick(replicas, hashes) -> index``, where
``hashes`` are the request's prefix-block ids (or None; only ``prefix_affinity`` reads
them). Ties go to the lowest replica index, so results never depend on iteration order
of anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class RoundRobin:
    """Replicas in turn: 0, 1, …, n−1, 0, …"""

    def __init__(self, rng: np.random.Generator):
        self._next = 0

    def pick(self, replicas: Sequence[Any], hashes: Sequence[int] | None = None) -> int:
        """Index of the replica for the next request."""
        i = self._next
        self._next = (i + 1) % len(replicas)
        return i


class LeastOutstanding:
    """The replica with the fewest outstanding tokens (unprefilled prompt plus unproduced
    output of the requests it holds)."""

    def __init__(self, rng: np.random.Generator):
        pass

    def pick(self, replicas: Sequence[Any], hashes: Sequence[int] | None = None) -> int:
        """Index of the least-loaded replica (lowest index on ties)."""
        best, best_load = 0, replicas[0].outstanding
        for i in range(1, len(replicas)):
            load = replicas[i].outstanding
            if load < best_load:
                best, best_load = i, load
        return best


class Random:
    """A uniformly random replica, from the run's seeded generator."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def pick(self, replicas: Sequence[Any], hashes: Sequence[int] | None = None) -> int:
        """Index of a random replica."""
        return int(self._rng.integers(len(replicas)))


class PowerOfTwo:
    """Power of two choices (Mitzenmacher): two distinct random replicas, the one with
    fewer outstanding tokens wins (the lower index on ties). Nearly as balanced as
    least_outstanding while reading only two replicas' load."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def pick(self, replicas: Sequence[Any], hashes: Sequence[int] | None = None) -> int:
        """Index of the less loaded of two random replicas."""
        n = len(replicas)
        if n == 1:
            return 0
        a, b = (int(x) for x in self._rng.choice(n, size=2, replace=False))
        la, lb = replicas[a].outstanding, replicas[b].outstanding
        if la < lb or (la == lb and a < b):
            return a
        return b


class PrefixAffinity:
    """The replica whose prefix cache holds the longest leading run of the request's
    prefix blocks; among equals (or without hashes), the fewest outstanding tokens, then
    the lowest index. Keeps requests that share a system prompt where it is cached."""

    def __init__(self, rng: np.random.Generator):
        pass

    def pick(self, replicas: Sequence[Any], hashes: Sequence[int] | None = None) -> int:
        """Index of the replica with the longest cached prefix, then the least loaded."""
        best, best_key = 0, None
        for i, rep in enumerate(replicas):
            pc = rep.prefix
            hit = pc.match(hashes, 1 << 62)[0] if pc is not None and hashes is not None else 0
            key = (-hit, rep.outstanding)
            if best_key is None or key < best_key:
                best, best_key = i, key
        return best


ROUTERS: dict[str, type] = {
    "round_robin": RoundRobin,
    "least_outstanding": LeastOutstanding,
    "random": Random,
    "power_of_two": PowerOfTwo,
    "prefix_affinity": PrefixAffinity,
}
