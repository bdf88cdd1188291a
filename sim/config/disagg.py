"""The disaggregated layout's configuration: prefill and decode pools, the KV link
between them, and what a scenario's pools resolve to (GPU, tp, memory, serving limits).

The run itself (transfer queues, the hand-off to a decode replica) is
:mod:`sim.core.disagg`; docs/policies.md describes the layout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from sim.config.combinations import check_combinations
from sim.config.gpu import InlineGPU, check_latency_s, gpu_label, resolve_gpu
from sim.config.serving import check_gb_s
from sim.config.sglangpool import as_sglang, sglang_fraction, sglang_release
from sim.config.speculative import draft_memory
from sim.configtools import bounded, resolve_alias
from sim.cost.gpus import GPUS, GPUSpec, check_dtype
from sim.cost.memory import memory_budget, reserve_states
from sim.cost.memorybudget import MemoryBudget
from sim.cost.profilefile import profile_source
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.cost.vllmmemory import DEFAULT_VERSION, MemoryRules, memory_rules, version_tuple
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.config.serving import ServingConfig

RouterName = Literal["round_robin", "least_outstanding", "random", "power_of_two"]

# Nominal figures (GB/s per direction, seconds per transfer) of each link kind:
# NVLink 4 per H100 GPU; one InfiniBand NDR 400 Gb/s NIC; PCIe 5.0 x16.
LINKS: dict[str, tuple[float, float]] = {
    "nvlink": (450.0, 5e-6),
    "infiniband": (50.0, 2e-5),
    "pcie": (64.0, 1e-5),
}


@dataclass(frozen=True)
class LinkConfig:
    """The KV link of each GPU of a prefill replica: a kind's nominal figures, or given
    ones (bandwidth per GPU, per direction)."""

    kind: Literal["nvlink", "infiniband", "pcie"] = "nvlink"
    bandwidth_gb_s: float | None = bounded(None, gt=0)  # 1e9 bytes per second
    latency_s: float | None = bounded(None, ge=0)

    def __post_init__(self) -> None:
        check_gb_s(self.bandwidth_gb_s, "50, a 400 Gb/s InfiniBand port")
        check_latency_s(self.latency_s, "latency_s", "2e-05, InfiniBand")

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        gb = self.bandwidth_gb_s if self.bandwidth_gb_s is not None else LINKS[self.kind][0]
        return gb * 1e9

    @property
    def latency(self) -> float:
        """Seconds from the end of a transfer's send to its arrival."""
        return self.latency_s if self.latency_s is not None else LINKS[self.kind][1]

    def across_nodes(self, net_bw: float, net_latency_s: float) -> LinkConfig:
        """This link when the transfer must leave the node: an NVLink kind's figures are
        replaced by the network's (``net_bw`` bytes/s, seconds); given figures are kept."""
        if self.kind != "nvlink":
            return self
        return LinkConfig("nvlink",
                          net_bw / 1e9 if self.bandwidth_gb_s is None else self.bandwidth_gb_s,
                          net_latency_s if self.latency_s is None else self.latency_s)


@dataclass(frozen=True)
class PoolConfig:
    """One pool of identical replicas. Unset keys take the scenario's values:
    ``replicas`` and ``router`` from ``cluster``, ``gpu``, ``tp`` and
    ``memory_utilization`` from ``hardware``, the limits and ``watermark`` from
    ``serving`` (a ``chunked`` pool's unset ones from vLLM v1's defaults for its GPU:
    :func:`sim.config.vllmdefaults.pool_defaults`).
    ``gpu_memory_utilization`` and ``num_kv_blocks`` are accepted aliases of
    ``memory_utilization`` and ``num_gpu_blocks``. ``gpu`` is a table GPU's name or an
    inline GPU (:class:`sim.config.gpu.InlineGPU`)."""

    replicas: int | None = bounded(None, ge=1)
    gpu: str | InlineGPU | None = None
    tp: int | None = bounded(None, ge=1)
    memory_utilization: float | None = bounded(None, gt=0, le=1)
    gpu_memory_utilization: float | None = bounded(None, gt=0, le=1)
    policy: Literal["continuous", "chunked"] = "continuous"
    router: RouterName | None = None
    max_num_seqs: int | None = bounded(None, ge=1)
    max_num_batched_tokens: int | None = bounded(None, ge=1)
    token_budget: int | None = bounded(None, ge=1)
    num_gpu_blocks: int | None = bounded(None, ge=1)
    num_kv_blocks: int | None = bounded(None, ge=1)
    watermark: float | None = bounded(None, ge=0, lt=1)

    def __post_init__(self) -> None:
        resolve_alias(self, "memory_utilization", "gpu_memory_utilization")
        resolve_alias(self, "num_gpu_blocks", "num_kv_blocks")
        if isinstance(self.gpu, str) and self.gpu not in GPUS:
            raise ServesimError(f"unknown gpu {self.gpu!r}; valid: {', '.join(sorted(GPUS))}",
                                where="gpu")


@dataclass(frozen=True)
class DisaggConfig:
    """Prefill pool, decode pool and the link between them (used only by the
    ``disaggregated`` policy)."""

    prefill: PoolConfig = field(default_factory=PoolConfig)
    decode: PoolConfig = field(default_factory=PoolConfig)
    link: LinkConfig = field(default_factory=LinkConfig)

    def pinned(self, key: str) -> str | None:
        """Where both pools set ``key`` (``replicas``, ``gpu`` or ``tp``) themselves, so
        that the scenario's own value (``cluster`` or ``hardware``) reaches neither: the
        two settings, for an error to name; None when either pool takes the scenario's."""
        own = [getattr(self.prefill, key), getattr(self.decode, key)]
        if any(v is None for v in own):
            return None
        shown = [v if isinstance(v, str | int) else v.name for v in own]
        return (f"disaggregated.prefill.{key}: {shown[0]}, "
                f"disaggregated.decode.{key}: {shown[1]}")


@dataclass(frozen=True)
class Pool:
    """A resolved pool: everything the engine needs to build its replicas. ``gpu`` is
    the GPU's name (a table key, or an inline GPU's name) and ``gpu_spec`` its figures."""

    role: Literal["both", "prefill", "decode"]
    replicas: int
    gpu: str
    tp: int
    memory_utilization: float
    serving: ServingConfig
    router: str
    gpu_spec: GPUSpec
    pp: int = 1  # pipeline stages per replica (co-located pool only)
    ep: int = 1  # expert parallelism (co-located pool only): E/ep whole experts a GPU
    dp: int = 1  # data-parallel attention ranks a replica (co-located pool only)
    # How vLLM's profile sizes this pool's KV cache (sim.cost.vllmmemory); None: the
    # default release's rules.
    memory_rules: MemoryRules | None = None
    # SGLang's kernels price the pool: (their release, whether memory_utilization was
    # given), and its memory is divided as SGLang does (sim.config.sglangpool).
    sglang: tuple[str, bool] | None = None

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica: tp × pp × dp."""
        return self.tp * self.pp * self.dp


def memory_version(scenario: Scenario, gpu: str) -> str:
    """The vLLM release whose memory profile sizes a pool of ``gpu`` (a table GPU's name):
    ``serving.vllm_version`` when given, else that of the vLLM kernel tables of the GPU's
    shipped vLLM profiles (one release a GPU) or of the scenario's profile file, else
    :data:`~sim.cost.vllmmemory.DEFAULT_VERSION` (the roofline, a calibrated profile,
    SGLang's or TensorRT-LLM's tables)."""
    given = scenario.serving.vllm_version
    if given is not None:
        return given
    cost = scenario.cost
    if cost.measured is not None and cost.measured.framework == "vllm":
        from sim.cost.measured import shipped

        stem = next((r.stem for r in shipped() if r.gpu == gpu and r.framework == "vllm"),
                    None)
        found = None if stem is None else _profile_version(stem, None)
    elif cost.profile is not None:
        base = scenario.base_dir
        found = _profile_version(cost.profile, None if base is None else str(base))
    else:
        found = None
    return found or DEFAULT_VERSION


def profile_vllm_source(ref: str, base_dir: str | None) -> dict[str, Any] | None:
    """The ``source`` section of a profile file built from vLLM's kernel tables
    (:func:`sim.cost.profilefile.profile_source`; None: not vLLM's, or a file it cannot
    read: loading the cost model says what is wrong with it). Shared: read, never change."""
    src = profile_source(ref, base_dir)
    return src if src is not None and src.get("framework") == "vllm" else None


def _profile_version(ref: str, base_dir: str | None) -> str | None:
    """The vLLM version a profile file's kernel tables came from (None: not vLLM's, a
    version whose memory profile servesim does not model, or an unreadable file)."""
    from sim.cost.vllmmemory import modelled_release

    src = profile_vllm_source(ref, base_dir)
    return None if src is None else modelled_release(str(src.get("version")))


def _memory(scenario: Scenario, choice: str | InlineGPU, utilization: float | None, tp: int,
            pp: int = 1, dp: int = 1) -> tuple[float, MemoryRules, tuple[str, bool] | None]:
    """A pool's memory utilization (the release's default unless one is given), its
    vLLM release's rules, and (release, given) where SGLang's kernels price it, whose
    default share is SGLang's mem_fraction_static (:mod:`sim.config.sglangpool`)."""
    spec, gpu = scenario.serving.speculative, gpu_label(choice)
    rules = memory_rules(memory_version(scenario, gpu), scenario.model,
                         None if spec is None else spec.method)
    release = sglang_release(scenario, gpu)
    if release is None:
        return (rules.utilization if utilization is None else utilization), rules, None
    if utilization is None:
        return (sglang_fraction(scenario, release, resolve_gpu(choice), tp, pp, dp), rules,
                (release, False))
    return utilization, rules, (release, True)


def pools(scenario: Scenario) -> list[Pool]:
    """The scenario's pools: one co-located pool, or prefill then decode pools."""
    hw, sv, cl = scenario.hardware, scenario.serving, scenario.cluster
    if sv.policy != "disaggregated":
        util, rules, sg = _memory(scenario, hw.gpu, hw.memory_utilization, hw.tp, hw.pp,
                                  hw.dp)
        return [Pool("both", cl.replicas, gpu_label(hw.gpu), hw.tp, util, sv,
                     cl.router, resolve_gpu(hw.gpu), hw.pp, hw.ep, hw.dp, rules, sg)]
    out = []
    for role in ("prefill", "decode"):
        pc: PoolConfig = getattr(scenario.disaggregated, role)
        limits = {k: getattr(pc, k) for k in ("max_num_seqs", "max_num_batched_tokens",
                                               "token_budget", "num_gpu_blocks", "watermark")
                  if getattr(pc, k) is not None}
        try:
            serving = dataclasses.replace(sv, policy=pc.policy, **limits)
        except ServesimError as exc:
            raise exc.located(prefix=f"disaggregated.{role}") from None
        choice = pc.gpu or hw.gpu
        util, rules, sg = _memory(scenario, choice,
                                  pc.memory_utilization or hw.memory_utilization, pc.tp or hw.tp)
        out.append(Pool(role, pc.replicas or cl.replicas, gpu_label(choice), pc.tp or hw.tp,
                        util, serving, pc.router or cl.router, resolve_gpu(choice),
                        memory_rules=rules, sglang=sg))
    return out


def hybrid_kv(pool: Pool) -> bool:
    """Whether ``pool``'s vLLM keeps its hybrid KV-cache manager (a sliding-window model's
    windows apart from its full layers' KV): unless turned off, and, in a pool of a
    disaggregated layout (whose KV moves through a KV connector), only from vLLM 0.22,
    which keeps it for connectors that support it (NIXL's); up to 0.19 any connector
    turned it off (config/vllm.py; 0.20 and 0.21 were not read)."""
    if pool.serving.disable_hybrid_kv_cache_manager:
        return False
    if pool.role == "both" or pool.memory_rules is None:
        return True
    return version_tuple(pool.memory_rules.version) >= (0, 22)


def pool_memory(model: ModelSpec, pool: Pool) -> MemoryBudget:
    """One GPU's memory terms and the KV blocks of each replica of ``pool``
    (:func:`sim.cost.memory.memory_budget`)."""
    sv = pool.serving
    budget = memory_budget(model, pool.gpu_spec, pool.tp, pool.memory_utilization,
                           sv.block_size, sv.max_num_batched_tokens, sv.max_num_seqs, pool.pp,
                           pool.ep, pool.dp, pool.memory_rules, hybrid=hybrid_kv(pool),
                           shared_states=sv.linear_state_pool == "kv_cache",
                           graphs=sv.cuda_graphs != "none")
    if pool.sglang is not None:
        budget = as_sglang(budget, *pool.sglang)
    if sv.speculative is None:
        return budget
    # The drafter's weights load beside the target's, and its KV shares the target's
    # blocks (vLLM sizes one block pool over both models' layers).
    weights, kv_per_token = draft_memory(sv.speculative, model, pool.tp)
    spec = sv.speculative
    drafter = (f"serving.speculative.draft_model {spec.draft_model}" if spec.draft_model
               else f"serving.speculative.method {spec.method}")
    budget = dataclasses.replace(budget, weights=budget.weights + weights,
                                 block_bytes=budget.block_bytes + kv_per_token * sv.block_size,
                                 draft_weights=weights, drafter=drafter)
    if not model.linear_layers:
        return budget
    # A verify keeps a Gated DeltaNet state for each of its k + 1 positions: pages of the
    # pool (vLLM's mamba spec's speculative blocks), or set aside from what the drafter's
    # weights leave.
    if budget.state_groups[0]:
        return dataclasses.replace(budget, state_copies=1 + sv.speculative.num_tokens)
    return reserve_states(budget, shard(model, pool.tp).linear_state_bytes, sv.max_num_seqs,
                          1 + sv.speculative.num_tokens)


def check_pools(scenario: Scenario) -> None:
    """Load-time checks of every pool: its tp shards the model, the model fits its GPUs
    (unless ``num_gpu_blocks`` is given). Errors name the key: ``hardware.tp`` or
    ``disaggregated.ROLE.tp``, ``hardware`` or ``disaggregated.ROLE``; first, that the
    scenario's features combine (:func:`sim.config.combinations.check_combinations`)."""
    check_combinations(scenario)
    for pool in pools(scenario):
        pc = getattr(scenario.disaggregated, pool.role, None)
        prefix = "hardware" if pc is None else f"disaggregated.{pool.role}"
        tp_key = f"{prefix}.tp" if pc is None or pc.tp is not None else "hardware.tp"
        shard(scenario.model, pool.tp, where=tp_key, ep=pool.ep, ep_where="hardware.ep",
              dp=pool.dp)
        check_dtype(scenario.model, pool.gpu_spec)

        if pool.serving.num_gpu_blocks is None:
            try:
                pool_memory(scenario.model, pool).fitted()
            except ServesimError as exc:
                raise ServesimError(exc.message, where=prefix) from None
        else:
            blocks_override_note(scenario, pool)  # raises where the blocks cannot fit


def kv_bytes_blocks(scenario: Scenario) -> Scenario:
    """``scenario`` with ``serving.kv_cache_memory_bytes`` (vLLM's --kv-cache-memory-bytes)
    turned into the ``num_gpu_blocks`` those bytes hold on each GPU, as vLLM sizes its
    cache from them without reading ``gpu_memory_utilization``, and a note saying so;
    ``scenario`` itself without the key. Given with ``num_gpu_blocks``, under a
    disaggregated layout, or too small for one block: an error naming the key."""
    sv = scenario.serving
    size = sv.kv_cache_memory_bytes
    if size is None:
        return scenario
    key = "serving.kv_cache_memory_bytes"
    if sv.num_gpu_blocks is not None:
        raise ServesimError(f"got {size:,} beside serving.num_gpu_blocks "
                            f"{sv.num_gpu_blocks:,}: each sets the KV cache's size; give one",
                            where=key)
    if sv.policy == "disaggregated":
        raise ServesimError(f"got {size:,} under policy disaggregated: size each pool's "
                            "cache with disaggregated.ROLE.num_gpu_blocks", where=key)
    (pool,) = pools(scenario)
    try:
        budget = pool_memory(scenario.model, pool)
    except ServesimError as exc:  # a tp the model does not split over
        raise exc.located(prefix="hardware") from None
    # One block of vLLM's pool on one GPU: a page of each layer of one group.
    page = budget.block_bytes // budget.groups_per_block
    blocks = size // page
    if blocks < 1:
        raise ServesimError(f"got {size:,} bytes, under one KV block ({page:,} bytes on "
                            f"each GPU for model {scenario.model.name})", where=key)
    # Bytes no GPU holds beside the weights are refused here, in the bytes given.
    budget.override(max(1, blocks // budget.groups_per_block), key, pool.serving.max_num_seqs,
                    given_bytes=size)
    note = (f"{key}: {size:,} bytes a GPU hold {blocks:,} KV blocks of {page:,} bytes "
            "(vLLM sizes its cache from them and does not read gpu_memory_utilization), "
            "run as serving.num_gpu_blocks")
    return dataclasses.replace(scenario,
                               serving=dataclasses.replace(sv, num_gpu_blocks=blocks),
                               notes=scenario.notes + (note,))


def blocks_override_note(scenario: Scenario, pool: Pool) -> str | None:
    """``pool``'s ``num_gpu_blocks`` against its GPU's memory
    (:meth:`sim.cost.memorybudget.MemoryBudget.override`): an error naming the key where they
    cannot fit the GPU, a note where they pass the utilization budget; None without the
    key or where they fit the budget."""
    n = pool.serving.num_gpu_blocks
    if n is None:
        return None
    pc = getattr(scenario.disaggregated, pool.role, None)
    key = ("serving.num_gpu_blocks" if pc is None or pc.num_gpu_blocks is None
           else f"disaggregated.{pool.role}.num_gpu_blocks")
    budget = pool_memory(scenario.model, pool)
    # The manager's blocks hold every full-attention group (sim.core.cluster.pool_blocks).
    # With the states set aside, every sequence that may run holds its states beside the
    # blocks (the override does not cap the running sequences: sim.core.cluster); paged
    # from the pool (vLLM's way), they are among the blocks.
    return budget.override(max(1, n // budget.groups_per_block), key, pool.serving.max_num_seqs)


def transfer_link(scenario: Scenario, prefill: Pool, decode: Pool) -> LinkConfig:
    """The per-GPU KV link between the pools: the scenario's, or the network's figures
    when a pool's tp is more than one node's GPUs (no NVLink spans nodes)."""
    link = scenario.disaggregated.link
    for pool in (prefill, decode):
        g = pool.gpu_spec
        if pool.tp > g.node_gpus:
            link = link.across_nodes(g.net_bw, g.net_latency_s)
    return link


def transfer_bytes_per_token(model: ModelSpec, prefill: Pool, decode: Pool) -> int:
    """KV bytes per prompt token one GPU link carries: every prefill GPU sends its shard
    while every decode GPU receives its own, in parallel, so the larger per-GPU share
    (:attr:`sim.cost.shard.Shard.kv_bytes_per_token`) sets the time."""
    return max(shard(model, prefill.tp).kv_bytes_per_token,
               shard(model, decode.tp).kv_bytes_per_token)
