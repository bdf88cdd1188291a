"""Routers: which replica an arriving request goes to.

Each is a small function-like class with ``pick(replicas) -> index``. Ties go to the
lowest replica index, so results never depend on iteration order of anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class RoundRobin:
    """Replicas in turn: 0, 1, …, n−1, 0, …"""

    def __init__(self, rng: np.random.Generator):
        self._next = 0

    def pick(self, replicas: Sequence[Any]) -> int:
        """Index of the replica for the next request."""
        i = self._next
        self._next = (i + 1) % len(replicas)
        return i


class LeastOutstanding:
    """The replica with the fewest outstanding tokens (unprefilled prompt plus unproduced
    output of the requests it holds)."""

    def __init__(self, rng: np.random.Generator):
        pass

    def pick(self, replicas: Sequence[Any]) -> int:
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

    def pick(self, replicas: Sequence[Any]) -> int:
        """Index of a random replica."""
        return int(self._rng.integers(len(replicas)))


class PowerOfTwo:
    """Power of two choices (Mitzenmacher): two distinct random replicas, the one with
    fewer outstanding tokens wins (the lower index on ties). Nearly as balanced as
    least_outstanding while reading only two replicas' load."""

    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def pick(self, replicas: Sequence[Any]) -> int:
        """Index of the less loaded of two random replicas."""
        n = len(replicas)
        if n == 1:
            return 0
        a, b = (int(x) for x in self._rng.choice(n, size=2, replace=False))
        la, lb = replicas[a].outstanding, replicas[b].outstanding
        if la < lb or (la == lb and a < b):
            return a
        return b


ROUTERS: dict[str, type] = {
    "round_robin": RoundRobin,
    "least_outstanding": LeastOutstanding,
    "random": Random,
    "power_of_two": PowerOfTwo,
}
