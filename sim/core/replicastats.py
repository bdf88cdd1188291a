"""Per-replica totals a run reports: iterations, busy time, batch sizes, KV use,
preemptions, prefix-cache and speculative-decoding counts (summed by :mod:`sim.report.metrics`)."""

from __future__ import annotations

from sim.core.hosttier import HostTier


class ReplicaStats:
    """Per-replica totals over the run (counts, seconds, block-seconds); ``kv_total`` is the
    replica's KV capacity in blocks and ``role`` its pool (both, prefill or decode)."""

    __slots__ = ("iterations", "busy_s", "batch_seqs", "batch_tokens", "kv_block_s", "kv_peak",
                 "preemptions", "kv_total", "role", "prefix_query_tokens", "prefix_hit_tokens",
                 "prefix_evictions", "block_bytes", "host_total", "host_hit_tokens",
                 "host_io_s", "host_stored", "host_loaded", "host_dropped", "spec_verifies",
                 "spec_tokens", "until", "until_used", "resumed_query_tokens",
                 "resumed_hit_tokens", "token_limit", "over_budget", "swapped_out")

    def __init__(self, kv_total: int = 0, role: str = "both") -> None:
        self.kv_total = kv_total
        self.role = role
        self.prefix_query_tokens = 0  # tokens of prefills admitted with prefix caching on
        self.prefix_hit_tokens = 0  # of which found in the prefix cache (either tier)
        self.prefix_evictions = 0  # cached prefix entries evicted for space
        # The same two counts of requests admitted again after a preemption (kept out of
        # the two above, as vLLM keeps them out of its hit rate).
        self.resumed_query_tokens = 0
        self.resumed_hit_tokens = 0
        # The host tier (sim/core/hosttier.py): its size and the bytes of one block's
        # per-GPU shard; hit tokens loaded from it; seconds iterations spent moving
        # blocks over the host link; blocks stored to and loaded from it, and entries
        # dropped from it (copied from the tier when the run ends).
        self.block_bytes = 0
        self.host_total = 0
        self.host_hit_tokens = 0
        self.host_io_s = 0.0
        self.host_stored = 0
        self.host_loaded = 0
        self.host_dropped = 0
        self.spec_verifies = 0  # speculative verifies run (one per sequence and iteration)
        self.spec_tokens = 0  # tokens those emitted
        # The policy's tokens an iteration (0: none), and the iterations that computed more:
        # every running sequence decodes (or verifies k + 1 tokens) each iteration, where
        # vLLM's and TensorRT-LLM's schedulers would leave those past the budget out.
        self.token_limit = 0
        self.over_budget = 0
        self.iterations = 0
        self.busy_s = 0.0
        self.batch_seqs = 0
        self.batch_tokens = 0
        self.kv_block_s = 0.0
        self.kv_peak = 0
        self.preemptions = 0
        self.swapped_out = 0  # of those, preemptions whose KV went to host memory
        # When the last iteration booked ahead of its end ends (s), and the KV blocks it
        # held: a horizon that falls inside it counts only the part before (clip).
        self.until = 0.0
        self.until_used = 0

    def count_prefix(self, query: int, hit: int, loaded: int, resumed: bool) -> None:
        """Count one admission with prefix caching on: ``query`` tokens to prefill, ``hit``
        of them found cached (``loaded`` from the host tier). A request admitted again
        after a preemption counts apart (``resumed``), as vLLM (from 0.14) keeps such
        queries and hits out of its prefix-cache hit rate."""
        if resumed:
            self.resumed_query_tokens += query
            self.resumed_hit_tokens += hit
        else:
            self.prefix_query_tokens += query
            self.prefix_hit_tokens += hit
            self.host_hit_tokens += loaded

    def book(self, dt: float, seqs: int, tokens: int, used: int, until: float = 0.0) -> None:
        """Count one iteration of ``dt`` seconds over ``seqs`` sequences computing
        ``tokens`` tokens with ``used`` KV blocks held; ``until`` is when it ends (s)
        where it is booked as it starts (0 where booked once it ran)."""
        self.until = until
        self.until_used = used
        self.iterations += 1
        self.busy_s += dt
        self.batch_seqs += seqs
        self.batch_tokens += tokens
        if self.token_limit and tokens > self.token_limit:
            self.over_budget += 1
        self.kv_block_s += used * dt
        if used > self.kv_peak:
            self.kv_peak = used

    def record_host(self, host: HostTier) -> None:
        """Copy the host tier's size and counters (blocks) at the end of the run."""
        self.host_total = host.total
        self.host_stored, self.host_loaded, self.host_dropped = (host.stored, host.loaded,
                                                                 host.dropped)

    def cut_short(self, cut: float, used: int) -> None:
        """The iteration just booked ended ``cut`` seconds early (a fault), holding
        ``used`` KV blocks: only the part that ran was busy."""
        self.busy_s -= cut
        self.kv_block_s -= used * cut
        self.until -= cut

    def clip(self, end: float) -> None:
        """The run stopped at ``end`` seconds (a horizon), perhaps inside the iteration
        booked last: count only its part before ``end`` as busy."""
        if self.until > end:
            self.cut_short(self.until - end, self.until_used)
