"""The ``serving`` section of a scenario (:class:`ServingConfig`): the batching policy and
its limits, and the serving features (prefix caching, speculative decoding, a host KV
tier, async scheduling, streaming, SGLang's receive interval, TensorRT-LLM's batch
waiting)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from sim.config.speculative import SpeculativeConfig
from sim.configtools import (
    bounded,
    resolve_alias,
)
from sim.errors import ServesimError

# The most host memory (GiB) a host tier, a swap space or a node may be given: 1 PiB.
HOST_GIB_MAX = 2**20


@dataclass(frozen=True)
class KVOffloadConfig:
    """A host-memory KV tier (docs/policies.md): ``cpu_gb`` GiB of host memory per GPU
    holding prefix-cache entries and preempted requests' swapped KV (it replaces
    ``swap_space_gib``); blocks move at ``bandwidth_gb_s`` (1e9 bytes/s per GPU, each
    way; default the GPU's host link, PCIe). ``overlap``: an iteration's transfers run
    under its compute (step time = the longer of the two, as SGLang HiCache loads layer
    by layer) instead of before it (added, as vLLM v0 swaps). ``write_policy``: when
    prefix entries reach the host: ``write_back`` when the GPU evicts them (SGLang
    HiCache's write_back; an entry lives in one tier), ``write_through`` as soon as a
    prompt's blocks are computed, copied in the background (vLLM's CPU offloading
    connector and LMCache; the host keeps its copy when a hit loads it, and works even
    with the GPU's own prefix cache off). ``store_outputs`` (write-through): the output's
    full blocks are copied too, as vLLM's connector copies every full block; false:
    the prompt's alone, as LMCache does by default."""

    # At most 1 PiB a GPU, as swap_space_gib: a size past it is a slip, and 1e300 GiB
    # would overflow the tier's block count.
    cpu_gb: float = bounded(ge=0, le=HOST_GIB_MAX)
    bandwidth_gb_s: float | None = bounded(None, gt=0)
    overlap: bool = False
    write_policy: Literal["write_back", "write_through"] = "write_back"
    store_outputs: bool = True

    def __post_init__(self) -> None:
        check_gb_s(self.bandwidth_gb_s, "64, a PCIe 5.0 x16 link")
        if not self.store_outputs and self.write_policy != "write_through":
            raise ServesimError("got false: which blocks are copied as they are computed "
                                "is a write_through setting; write_back stores what the "
                                "GPU evicts", where="store_outputs")


# The link bandwidths a scenario may give (GB/s, 1e9 bytes/s): a host tier's, and a
# disaggregated layout's KV link. The floor is the 1 MB/s an inline GPU's host_bw may
# not go under (sim.config.gpu.RATE_FLOOR): no link is that slow, yet hand-worked cases
# slow a tiny model's 8 KiB blocks to a millisecond each (8 MB/s), so a tighter floor
# such as 0.1 GB/s would refuse them. The ceiling is over ten times the fastest link a
# GPU has (NVLink 5, 900 GB/s each way; NVLink-C2C, 450), and any figure written in
# bytes/s (64e9) lies far above it.
LINK_GB_S = (1e-3, 1e4)


def check_gb_s(bw: float | None, example: str) -> None:
    """Refuse a link bandwidth ``bw`` (GB/s; None: the default) outside
    :data:`LINK_GB_S`: above it, a figure written in bytes/s; below it, a link so slow
    one block's move would overflow the simulated clock. ``example`` names a real one."""
    if bw is not None and not LINK_GB_S[0] <= bw <= LINK_GB_S[1]:
        raise ServesimError(f"got {bw:g}; bandwidth_gb_s is in GB/s of 1e9 bytes/s (for "
                            f"example {example}), from {LINK_GB_S[0]:g} to "
                            f"{LINK_GB_S[1]:g}", where="bandwidth_gb_s")


SWAP_SPACE_GIB = 4.0  # vLLM v0's default --swap-space


# Serving keys that one policy alone reads, each refused under the others: a study that
# runs a scenario under several policies puts them back to their defaults for the rest.
POLICY_KEYS = {"token_budget": "chunked", "long_prefill_token_threshold": "chunked",
               "static_batch_size": "static", "batch_wait_timeout_iters": "orca",
               "batch_wait_max_tokens_ratio": "orca"}


@dataclass(frozen=True)
class ServingConfig:
    """Batching policy and its limits (sequences, tokens per iteration, KV blocks).

    The default policy is ``chunked``, vLLM v1's scheduler. A scenario file that leaves
    ``max_num_seqs`` or ``max_num_batched_tokens`` unset under ``chunked`` gets the values
    ``vllm serve`` picks for the scenario's GPU (:func:`sim.config.vllmdefaults.serving_defaults`);
    the field defaults below are what other policies, and code building this class
    directly, get. ``watermark`` unset is 0 for ``chunked`` (v1's KV manager keeps no
    admission reserve) and 0.01 for the others (vLLM v0's default).
    """

    policy: str = "chunked"
    max_num_seqs: int = bounded(256, ge=1)
    max_num_batched_tokens: int = bounded(8192, ge=1)
    block_size: int = bounded(16, ge=1)
    watermark: float | None = bounded(None, ge=0, lt=1)
    preemption: Literal["recompute", "swap"] = "recompute"
    # vLLM's --num-gpu-blocks-override: KV blocks per replica instead of the memory-derived
    # count (the "GPU blocks" / "KV cache size" a vLLM log prints); num_kv_blocks is an alias.
    num_gpu_blocks: int | None = bounded(None, ge=1)
    num_kv_blocks: int | None = bounded(None, ge=1)
    # Host memory per GPU for swapped KV (GiB), when no kv_offload tier is given; a PiB
    # is beyond any host.
    swap_space_gib: float = bounded(SWAP_SPACE_GIB, ge=0, le=HOST_GIB_MAX)
    # chunked: a per-iteration token budget below max_num_batched_tokens (a Sarathi-style
    # chunk size); unset, the budget is max_num_batched_tokens, as in vLLM v1.
    token_budget: int | None = bounded(None, ge=1)
    # chunked: vLLM's --long-prefill-token-threshold, the most prompt tokens one request
    # computes in an iteration (0: no cap beyond the budget).
    long_prefill_token_threshold: int = bounded(0, ge=0)
    # vLLM's --max-num-partial-prefills; vLLM v1 refuses to start with any value but 1.
    max_num_partial_prefills: int = bounded(1, ge=1)
    # orca: TensorRT-LLM's batch waiting. While decodes run, new prompts are held back up
    # to this many iterations, unless the step's tokens would reach
    # batch_wait_max_tokens_ratio of max_num_batched_tokens (0, 0: no waiting).
    batch_wait_timeout_iters: int = bounded(0, ge=0, le=10_000)
    batch_wait_max_tokens_ratio: float = bounded(0.0, ge=0, le=1)
    # SGLang's --scheduler-recv-interval: new requests are read only once this many decode
    # steps have ended since the last read, or after a step with a prompt in it (1: every
    # iteration, as vLLM does; sim/core/recvgate.py).
    scheduler_recv_interval: int = bounded(1, ge=1, le=10_000)
    static_batch_size: int | None = bounded(None, ge=1)  # static: requests per batch
    priority: bool = False  # admit by (priority class, arrival) instead of arrival
    # Share the KV of equal prompt prefixes (of requests that carry prefix hashes, and a
    # preempted request's own computed blocks). None: vLLM v1's default, on where the
    # policy, preemption and model allow it, what a scenario under policy chunked gets
    # unless it says otherwise; a scenario loads with it resolved to true or false
    # (:meth:`resolved_caching`). False here: what other policies get (vLLM v0's default).
    prefix_caching: bool | None = False
    kv_offload: KVOffloadConfig | None = None  # a host-memory KV tier
    speculative: SpeculativeConfig | None = None  # speculative decoding (docs/policies.md)
    # vLLM's --async-scheduling: the host schedules step n+1 while the device runs step n,
    # so a step costs the longer of its host and device work (sim/cost/overlap.py).
    # Unset: vLLM's own default (on for policy chunked since vLLM 0.14; the module says
    # when it is off); with an SGLang or TensorRT-LLM profile their overlapped loops'
    # one-step intake alone (sim/cost/overlap.py late_intake), which false turns off.
    async_scheduling: bool | None = None
    # Which steps replay CUDA graphs (sim/cost/eager.py): "auto", the serving framework's
    # default; "all"; "decode", decode-only steps (TensorRT-LLM's default); "none", as
    # vLLM's --enforce-eager. A step without graphs costs at least the host's dispatch
    # of its kernels.
    cuda_graphs: Literal["auto", "all", "decode", "none"] = "auto"
    # SGLang's --cuda-graph-max-bs: decode batches of more sequences run without graphs.
    # Unset: SGLang's default under its measured kernels, else no cap.
    cuda_graph_max_bs: int | None = bounded(None, ge=1)
    # vLLM's --max-cudagraph-capture-size: steps of more new tokens run without graphs.
    # Unset: vLLM's default where vLLM serves, min(2 x max_num_seqs x (1 + drafted
    # tokens), 512, max_num_batched_tokens) (sim.cost.eager.vllm_capture_tokens); no cap
    # under SGLang's or TensorRT-LLM's measured kernels.
    cuda_graph_max_tokens: int | None = bounded(None, ge=1)
    # vLLM's --stream-interval: the server sends the first token at once, then the output
    # in chunks of this many tokens (and what is left when the request finishes). Client
    # ITL is one gap a chunk; TTFT, TPOT and E2E do not move (sim/core/streaming.py).
    stream_interval: int = bounded(1, ge=1, le=100_000)
    # Whether the first token goes out at once (vLLM) or waits to fill the first chunk of
    # stream_interval tokens (false: SGLang's --stream-interval, which sends whenever the
    # output's length is a multiple of it, so TTFT includes stream_interval - 1 steps).
    stream_first_token: bool = True
    # vLLM's --disable-hybrid-kv-cache-manager: a model with sliding-window and full
    # layers (gpt-oss) keeps every layer's KV for every token, as if none slid, instead
    # of each request's window pages only (sim.cost.kvpages.hybrid_groups).
    disable_hybrid_kv_cache_manager: bool = False
    # Where a model's Gated DeltaNet (linear-attention) states live: "kv_cache", pages of
    # the KV blocks' pool, the block size raised so a page holds a layer's state (vLLM);
    # "reserved", a pool of their own set aside for the most requests that may run
    # (SGLang, TensorRT-LLM). Unset: reserved under SGLang's or TensorRT-LLM's measured
    # kernels, else vLLM's (sim/config/statepool.py).
    linear_state_pool: Literal["kv_cache", "reserved"] | None = None
    # vLLM's --performance-mode (from 0.17): "throughput" doubles the default
    # max_num_batched_tokens and max_num_seqs where the scenario leaves them unset
    # (sim.config.vllmdefaults.serving_defaults); "interactivity" captures CUDA graphs at
    # finer batch sizes, which is not priced (a note says so); "balanced" changes nothing.
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced"
    # vLLM's --kv-cache-memory-bytes: the KV cache's bytes on each GPU, memory_utilization
    # then not read; loaded as the num_gpu_blocks they hold (sim.config.disagg.
    # kv_bytes_blocks). At most a PiB.
    kv_cache_memory_bytes: int | None = bounded(None, ge=1, le=2**50)
    # The vLLM release whose memory profile sizes the KV cache (sim/cost/vllmmemory.py:
    # 0.11 to 0.26). Unset: the release of the measured profile's kernel tables, else
    # vLLM 0.24.0.
    vllm_version: str | None = None
    # vLLM's --scheduler-reserve-full-isl (from 0.19, on by default): a waiting request
    # is admitted only when blocks for its whole sequence so far fit, not just its first
    # chunk (policy chunked). Unset: on unless vllm_version is a release before 0.19.
    scheduler_reserve_full_isl: bool | None = None

    def __post_init__(self) -> None:
        from sim.policies.registry import POLICIES

        resolve_alias(self, "num_gpu_blocks", "num_kv_blocks")
        if self.vllm_version is not None:
            from sim.cost.vllmmemory import check_version

            try:
                check_version(self.vllm_version)
            except ServesimError as exc:
                raise exc.located(prefix="vllm_version") from None
        if self.cuda_graphs == "none" and self.cuda_graph_max_bs is not None:
            raise ServesimError(f"got {self.cuda_graph_max_bs}, but cuda_graphs is none: no "
                                "decode batch replays a graph; leave one of them out",
                                where="cuda_graph_max_bs")
        if self.cuda_graphs == "none" and self.cuda_graph_max_tokens is not None:
            raise ServesimError(f"got {self.cuda_graph_max_tokens}, but cuda_graphs is none: "
                                "no step replays a graph; leave one of them out",
                                where="cuda_graph_max_tokens")
        if self.policy not in POLICIES:
            raise ServesimError(
                f"unknown policy {self.policy!r}; valid: {', '.join(sorted(POLICIES))}",
                where="policy",
            )
        if self.watermark is None:
            object.__setattr__(self, "watermark", 0.0 if self.policy == "chunked" else 0.01)
        # Swapped KV and evicted prefixes share one host tier only when kv_offload sizes it.
        if self.prefix_caching and (self.policy not in ("continuous", "chunked")
                                    or (self.preemption != "recompute"
                                        and self.kv_offload is None)):
            raise ServesimError(
                f"prefix caching is modelled for policies continuous and chunked with "
                f"preemption recompute (vLLM's automatic prefix caching), or swap with a "
                f"kv_offload tier, not policy {self.policy!r} with preemption "
                f"{self.preemption!r}", where="prefix_caching")
        if self.kv_offload is not None:
            self._check_offload()
        if self.max_num_partial_prefills != 1:
            raise ServesimError(
                f"got {self.max_num_partial_prefills}; vLLM v1 runs only 1 (it refuses to start "
                "with more), and servesim models v1", where="max_num_partial_prefills")
        if self.speculative is not None:
            self._check_speculative(self.speculative)
        if (self.batch_wait_timeout_iters or self.batch_wait_max_tokens_ratio) and \
                self.policy != "orca":
            key = ("batch_wait_timeout_iters" if self.batch_wait_timeout_iters
                   else "batch_wait_max_tokens_ratio")
            raise ServesimError(f"TensorRT-LLM's batch waiting applies to policy orca (its "
                                f"in-flight batching), not {self.policy!r}", where=key)
        if bool(self.batch_wait_timeout_iters) != bool(self.batch_wait_max_tokens_ratio):
            # TensorRT-LLM stops holding prompts once either limit is reached, and a limit
            # of 0 is reached at once: one set alone holds nothing back, there as here.
            key, other = (("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")
                          if self.batch_wait_timeout_iters else
                          ("batch_wait_max_tokens_ratio", "batch_wait_timeout_iters"))
            raise ServesimError(f"got {getattr(self, key)} with {other} 0, which waits "
                                f"never: batch waiting ends when either limit is reached and "
                                f"a 0 limit is reached at once (in TensorRT-LLM too); set "
                                f"{other} above 0 as well, or both to 0", where=key)
        if self.policy == "chunked":
            # A budget below one block could never grow a prefill by a whole block, and
            # one above the per-iteration cap would break that cap.
            if self.chunk_budget < self.block_size:
                # Name the key the budget came from: token_budget when given, else
                # max_num_batched_tokens (a block_size raised past it reads the same).
                key = "token_budget" if self.token_budget is not None else \
                    "max_num_batched_tokens"
                raise ServesimError(f"got {self.chunk_budget}: chunked's per-iteration token "
                                    f"budget must be at least block_size {self.block_size}",
                                    where=key)
            if self.token_budget is not None and self.token_budget > self.max_num_batched_tokens:
                raise ServesimError(f"got {self.token_budget}, must be at most "
                                    f"max_num_batched_tokens {self.max_num_batched_tokens}",
                                    where="token_budget")
        elif self.long_prefill_token_threshold:
            raise ServesimError(f"got {self.long_prefill_token_threshold}; the cap on one "
                                "request's prompt tokens per iteration applies to policy "
                                f"chunked only, not {self.policy!r}",
                                where="long_prefill_token_threshold")
        elif self.token_budget is not None:
            # Another policy never reads it: a chunk size set while comparing policies
            # would do nothing without a word.
            why = ("a chunked pool takes its own, disaggregated.ROLE.token_budget"
                   if self.policy == "disaggregated" else
                   "its iterations are bounded by max_num_batched_tokens")
            raise ServesimError(f"got {self.token_budget}; a per-iteration token budget "
                                f"applies to policy chunked only, not {self.policy!r} "
                                f"({why})", where="token_budget")
        if self.performance_mode != "balanced" and self.policy != "chunked":
            raise ServesimError(f"got {self.performance_mode!r}: vLLM v1's performance mode "
                                f"applies to policy chunked (its scheduler), not "
                                f"{self.policy!r}", where="performance_mode")
        if self.static_batch_size is not None and self.policy != "static":
            raise ServesimError(f"got {self.static_batch_size}; requests per batch apply to "
                                f"policy static only, not {self.policy!r} (max_num_seqs "
                                "bounds the running requests)", where="static_batch_size")

    def resolved_caching(self, linear_layers: int) -> tuple[ServingConfig, tuple[str, ...]]:
        """This config with ``prefix_caching: null`` (vLLM's default) made true where
        caching is modelled (policy continuous or chunked, preemption by recompute or a
        host tier), else false, with a note saying so; itself when it is already true or
        false, or for a model with linear-attention layers (``linear_layers``), whose
        state pool decides it (:func:`sim.config.statepool.resolve_state_pool`). Errors
        name ``serving.KEY``."""
        if self.prefix_caching is not None or linear_layers:
            # A model with linear-attention layers: decided with its state pool
            # (sim/config/statepool.py).
            return self, ()
        on = (self.policy in ("continuous", "chunked")
              and (self.preemption == "recompute" or self.kv_offload is not None))
        try:
            out = dataclasses.replace(self, prefix_caching=on)
        except ServesimError as exc:
            raise exc.located(prefix="serving") from None
        if on:
            return out, ()
        return out, (f"prefix caching (vLLM's default) is off: servesim models it under "
                     f"policies continuous and chunked, preempting by recompute or with a "
                     f"host tier (here: policy {self.policy}, preemption "
                     f"{self.preemption})",)

    @property
    def host_prefixes(self) -> bool:
        """Whether a write-through host tier keeps prompt blocks by content hash (with
        the GPU's own prefix cache on or off, as LMCache does under vLLM)."""
        tier = self.kv_offload
        return tier is not None and tier.write_policy == "write_through"

    @property
    def caches_prefixes(self) -> bool:
        """Whether some tier keeps prompt blocks by content hash: the GPU's prefix cache
        (``prefix_caching``) or a write-through host tier."""
        return bool(self.prefix_caching) or self.host_prefixes

    def _check_offload(self) -> None:
        """A host tier needs something to hold, and is sized by kv_offload alone."""
        if self.policy in ("static", "orca"):
            # They reserve a request's whole KV at admission, so none is ever preempted
            # (swapped), and neither keeps a prefix cache to evict from.
            raise ServesimError(f"policy {self.policy!r} reserves each request's whole KV "
                                f"at admission and never preempts, so a host tier would "
                                f"stay empty; kv_offload is modelled for continuous and "
                                f"chunked", where="kv_offload")
        if self.prefix_caching is False and self.preemption != "swap" \
                and not self.host_prefixes:
            raise ServesimError("the host tier holds prefix-cache entries (prefix_caching: "
                                "true, or kv_offload.write_policy: write_through, which "
                                "keeps prompts on the host with the GPU's cache off) and "
                                "swapped KV (preemption: swap); with none of them it would "
                                "stay empty", where="kv_offload")
        if self.host_prefixes and self.policy not in ("continuous", "chunked"):
            raise ServesimError(f"a write-through host tier keeps prompts for prefix hits, "
                                f"which servesim models under policies continuous and "
                                f"chunked, not {self.policy!r}",
                                where="kv_offload.write_policy")
        if self.swap_space_gib != SWAP_SPACE_GIB:
            raise ServesimError(f"got {self.swap_space_gib} with kv_offload, whose cpu_gb "
                                f"sizes the one host tier swapped KV goes to; give only "
                                f"kv_offload.cpu_gb", where="swap_space_gib")

    def _check_speculative(self, spec: SpeculativeConfig) -> None:
        """Speculation runs under the iteration-level policies, and a chunked or orca
        budget must hold one whole verify (the pending token and every drafted one)."""
        if self.policy not in SPECULATIVE_POLICIES:
            *rest, last = SPECULATIVE_POLICIES
            raise ServesimError(
                f"speculative decoding is modelled for policies "
                f"{', '.join(rest)} and {last}, not {self.policy!r}",
                where="speculative")
        # Chunked and orca count a verify's k + 1 tokens against their per-iteration budget.
        budget = self.iteration_budget
        if budget and budget < spec.num_tokens + 1:
            raise ServesimError(f"got num_tokens {spec.num_tokens}: a verify of "
                                f"{spec.num_tokens + 1} tokens exceeds the token budget "
                                f"{budget}", where="speculative.num_tokens")
        cap = self.long_prefill_token_threshold
        if cap and cap < spec.num_tokens + 1:
            # The decode set verifies k + 1 tokens a sequence, uncapped.
            raise ServesimError(f"got {cap}: below a verify of {spec.num_tokens + 1} tokens "
                                f"(num_tokens {spec.num_tokens} + 1); give at least that",
                                where="long_prefill_token_threshold")

    @property
    def decode_width(self) -> int:
        """Tokens a steady decode computes in one iteration: 1, or with speculation its
        pending token plus the drafted ones."""
        return 1 if self.speculative is None else self.speculative.num_tokens + 1

    @property
    def iteration_budget(self) -> int:
        """The tokens an iteration may compute under this policy, as vLLM v1 and
        TensorRT-LLM schedule them (``chunk_budget`` under chunked,
        ``max_num_batched_tokens`` under orca), 0 for the policies without one."""
        return {"chunked": self.chunk_budget,
                "orca": self.max_num_batched_tokens}.get(self.policy, 0)

    @property
    def chunk_budget(self) -> int:
        """The chunked policy's tokens per iteration: ``token_budget`` if given, else
        ``max_num_batched_tokens`` (vLLM v1)."""
        if self.token_budget is not None:
            return self.token_budget
        return self.max_num_batched_tokens

    @property
    def reserves_full_isl(self) -> bool:
        """Whether admission under ``chunked`` needs the whole sequence's blocks free
        (``scheduler_reserve_full_isl`` resolved by ``vllm_version``)."""
        if self.scheduler_reserve_full_isl is not None:
            return self.scheduler_reserve_full_isl
        from sim.cost.vllmmemory import version_tuple

        return self.vllm_version is None or version_tuple(self.vllm_version) >= (0, 19)

    @property
    def kv_watermark(self) -> float:
        """Share of KV blocks kept free when admitting new work (resolved ``watermark``)."""
        return 0.0 if self.watermark is None else self.watermark


SPECULATIVE_POLICIES = ("continuous", "orca", "chunked")
