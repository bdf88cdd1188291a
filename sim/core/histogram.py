"""A mergeable log-bucketed histogram for per-token statistics in bounded memory.

Inter-token latencies number one per output token: tens of millions in a large run.
Keeping them all would cost gigabytes, so they go into logarithmic buckets whose
width bounds the relative error of any quantile read back: with ``rel_accuracy``
a, every reported quantile q̂ of a positive value q satisfies |q̂ − q| ≤ a·q.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sim.core.request import Request

_MIN_VALUE = 1e-9  # seconds; smaller positive values share the lowest bucket
_CHUNK = 65536  # values per buffered batch


class LogHistogram:
    """Counts of positive values (seconds) in buckets of ratio γ = (1 + a) / (1 − a)."""

    def __init__(self, rel_accuracy: float = 0.005, max_value: float = 1e6):
        if not 0 < rel_accuracy < 1:
            raise ValueError("rel_accuracy must be in (0, 1)")
        self.rel_accuracy = rel_accuracy
        self._gamma = (1 + rel_accuracy) / (1 - rel_accuracy)
        self._log_gamma = math.log(self._gamma)
        self._offset = math.floor(math.log(_MIN_VALUE) / self._log_gamma)
        size = math.ceil(math.log(max_value) / self._log_gamma) - self._offset + 2
        self.counts = np.zeros(size, dtype=np.int64)
        self.zeros = 0
        self.total = 0
        self.sum = 0.0
        self.max = 0.0
        self._buffer: list[float] = []
        # Repeated values (one gap shared by every sequence of a decode iteration) are
        # buffered once with their count: a large run has hundreds of millions of gaps.
        self._rep_values: list[float] = []
        self._rep_counts: list[int] = []

    def add(self, value: float) -> None:
        """Record one value (seconds, >= 0)."""
        self._buffer.append(value)
        if len(self._buffer) >= _CHUNK:
            self._flush_whole(self._buffer, None)

    def extend(self, values: list[float]) -> None:
        """Record several values (seconds, >= 0); cheap: they are buffered."""
        buf = self._buffer
        buf.extend(values)
        if len(buf) >= _CHUNK:
            self._flush_whole(buf, None)

    def add_repeated(self, value: float, count: int) -> None:
        """Record ``value`` (seconds, >= 0) ``count`` times."""
        self._rep_values.append(value)
        self._rep_counts.append(count)
        if len(self._rep_values) >= _CHUNK:
            self._flush_whole(self._rep_values, self._rep_counts)

    def add_gaps(self, fresh: list[Request], since: float, now: float, n: int) -> None:
        """Record the inter-token gaps of a decode iteration of ``n`` sequences that
        ended at ``now`` (s): each of ``fresh`` from its own last token, the other
        ``n - len(fresh)`` from ``since`` (s), the end of the iteration before. The
        values land as :meth:`extend` then :meth:`add_repeated` would put them, in one
        call, as it runs every iteration."""
        if fresh:
            buf = self._buffer
            buf.extend([now - r.last_token for r in fresh])
            if len(buf) >= _CHUNK:
                self._flush_whole(buf, None)
            n -= len(fresh)
        if n > 0:
            values = self._rep_values
            values.append(now - since)
            self._rep_counts.append(n)
            if len(values) >= _CHUNK:
                self._flush_whole(values, self._rep_counts)

    def _flush_whole(self, values: list[float], counts: list[int] | None) -> None:
        # Whole chunks only: the running sum then depends on the sequence of values,
        # not on how callers grouped them, so equal runs give equal means to the bit.
        whole = len(values) - len(values) % _CHUNK
        for i in range(0, whole, _CHUNK):
            self.add_many(np.array(values[i:i + _CHUNK]),
                          None if counts is None else np.array(counts[i:i + _CHUNK]))
        del values[:whole]
        if counts is not None:
            del counts[:whole]

    def add_many(self, values: np.ndarray, counts: np.ndarray | None = None) -> None:
        """Record an array of values (seconds, >= 0), each ``counts`` times (default once)."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return
        w = None if counts is None else np.asarray(counts, dtype=np.int64)
        if w is not None:
            keep = w > 0
            v, w = v[keep], w[keep]
            if v.size == 0:
                return
        zero = v <= 0.0
        pos = v[~zero]
        # Gaps priced out of range sum to inf; the run is refused once it ends (as below),
        # so numpy's overflow warning would only print its internals before that error.
        with np.errstate(over="ignore"):
            if w is None:
                self.zeros += int(zero.sum())
                self.total += int(v.size)
                self.sum += float(v.sum())
            else:
                self.zeros += int(w[zero].sum())
                self.total += int(w.sum())
                self.sum += float((v * w).sum())
        self.max = max(self.max, float(v.max()))
        if pos.size:
            # An infinite gap (a step priced at inf) casts to a junk bucket, clipped below;
            # the run is refused once it ends (sim.core.runchecks.CLOCK_LIMIT_S).
            with np.errstate(invalid="ignore"):
                idx = np.ceil(np.log(np.maximum(pos, _MIN_VALUE))
                              / self._log_gamma).astype(np.int64)
            idx = np.clip(idx - self._offset, 0, len(self.counts) - 1)
            self.counts += np.bincount(idx, weights=None if w is None else w[~zero],
                                       minlength=len(self.counts)).astype(np.int64)

    def flush(self) -> None:
        """Move buffered values into the buckets."""
        if self._buffer:
            buf, self._buffer = self._buffer, []
            self.add_many(np.array(buf))
        if self._rep_values:
            vals, cnts = self._rep_values, self._rep_counts
            self._rep_values, self._rep_counts = [], []
            self.add_many(np.array(vals), np.array(cnts))

    def merge(self, other: LogHistogram) -> None:
        """Add ``other``'s counts (same accuracy) into this histogram."""
        if other.rel_accuracy != self.rel_accuracy or len(other.counts) != len(self.counts):
            raise ValueError("histograms differ in accuracy")
        other.flush()
        self.flush()
        self.counts += other.counts
        self.zeros += other.zeros
        self.total += other.total
        self.sum += other.sum
        self.max = max(self.max, other.max)

    @property
    def mean(self) -> float:
        """Exact mean of the recorded values (nan when empty)."""
        self.flush()
        return self.sum / self.total if self.total else math.nan

    def quantile(self, q: float) -> float:
        """The q-quantile (0 <= q <= 1) within the relative accuracy; nan when empty."""
        self.flush()
        if self.total == 0:
            return math.nan
        rank = q * (self.total - 1)
        if rank < self.zeros:
            return 0.0
        cum = np.cumsum(self.counts)
        i = int(np.searchsorted(cum, rank - self.zeros, side="right"))
        i = min(i, len(self.counts) - 1)
        # Bucket i holds (γ^(k−1), γ^k]; this point is within a of every value there.
        k = i + self._offset
        return min(2.0 * self._gamma**k / (self._gamma + 1.0), self.max)
