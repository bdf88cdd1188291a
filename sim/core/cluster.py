"""The replicas of a run, built from the scenario's pools: one co-located pool, or a
prefill pool and a decode pool joined by a KV hand-off.

Each replica gets its own policy, its own KV-cache manager sized from its GPU's memory
(or ``serving.num_gpu_blocks``, vLLM's override), and the cost model of its pool (per
stage, when ``hardware.pp`` splits it into pipeline stages); each pool gets its own
router, drawn from the run's generator in pool order. A replica of ``hardware.dp``
data-parallel attention ranks is ``dp`` replica objects, each rank with its own policy
and KV cache, stepped together by one :class:`~sim.core.dpgroup.DPGroup`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.config.disagg import pool_memory, pools, transfer_bytes_per_token, transfer_link
from sim.config.speculative import drafter_model
from sim.core.disagg import Handoff
from sim.core.dpgroup import DPGroup
from sim.core.kvmanager import KVCacheManager
from sim.core.replica import Replica
from sim.core.speculation import Speculation, spec_seed_of
from sim.cost.drafter import Drafter, state_bandwidth
from sim.cost.gpus import GPUSpec
from sim.cost.measured import find
from sim.cost.memorybudget import MemoryBudget
from sim.cost.models import CostModel, build_cost, reads_late, unwrapped
from sim.cost.pipeline import StageCost
from sim.cost.profilecost import ProfileCost
from sim.cost.profilefile import load_profile
from sim.cost.roofline import RooflineParams
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.policies.registry import make_policy
from sim.policies.router import ROUTERS

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.config.serving import ServingConfig
    from sim.core.engine import Engine


@dataclass
class Cluster:
    """What :func:`build_cluster` made: every replica in index order, the ones arrivals
    reach (``entry``: the co-located pool or the prefill pool) and their router, the
    decode pool (None unless disaggregated), and each pool's memory summary by role."""

    replicas: list[Replica]
    entry: list[Replica]
    router: Any
    decode_pool: list[Replica] | None
    memory: dict[str, dict[str, Any]]


def host_tier(sv: ServingConfig, block_bytes: int, host_bw: float) -> tuple[int, float]:
    """(blocks, bytes/s) of a replica's host tier: ``kv_offload``'s size and bandwidth,
    or without it vLLM v0's swap space over the GPU's host link (``host_bw``, bytes/s).
    Blocks are per-GPU shards of ``block_bytes`` bytes, as ``cpu_gb`` is GiB per GPU."""
    tier = sv.kv_offload
    if tier is None:
        return int(sv.swap_space_gib * 2**30 // block_bytes), host_bw
    bw = host_bw if tier.bandwidth_gb_s is None else tier.bandwidth_gb_s * 1e9
    return int(tier.cpu_gb * 2**30 // block_bytes), bw


def pool_blocks(sv: ServingConfig, budget: MemoryBudget) -> int:
    """KV blocks of each replica: those its memory holds, or vLLM's
    --num-gpu-blocks-override (``num_gpu_blocks``), pages of its pool, of which a block
    of a model with sliding-window or Gated DeltaNet layers takes one a full-attention
    group."""
    if sv.num_gpu_blocks is None:
        return budget.fitted().blocks
    return max(1, sv.num_gpu_blocks // budget.groups_per_block)


def pool_kv(sv: ServingConfig, budget: MemoryBudget) -> tuple[int, dict[str, Any]]:
    """(KV blocks of each replica, the memory summary a run reports for its pool):
    :func:`pool_blocks` and :meth:`~sim.cost.memorybudget.MemoryBudget.summary` of them."""
    blocks = pool_blocks(sv, budget)
    if sv.num_gpu_blocks and budget.state_seqs:
        # The override leaves max_num_seqs as given: that many sequences hold states.
        per_seq = budget.linear_state // budget.state_seqs
        budget = dataclasses.replace(budget, linear_state=per_seq * sv.max_num_seqs,
                                     state_seqs=sv.max_num_seqs)
    return blocks, budget.summary(blocks if sv.num_gpu_blocks else None)


def build_cluster(engine: Engine, scenario: Scenario, cost: CostModel,
                  rng: np.random.Generator) -> Cluster:
    """Build the replicas of every pool, their routers and, for a disaggregated
    scenario, the hand-off from the prefill replicas to the decode pool. ``cost``
    prices the co-located pool; other pools price with their own GPU and tp."""
    model, the_pools = scenario.model, pools(scenario)
    replicas: list[Replica] = []
    by_role: dict[str, list[Replica]] = {}
    routers: dict[str, Any] = {}
    memory: dict[str, dict[str, Any]] = {}
    for pool in the_pools:
        sv = pool.serving
        budget = pool_memory(model, pool)
        if budget.state_seqs and budget.state_seqs < sv.max_num_seqs and sv.num_gpu_blocks is None:
            # No more sequences run than have a linear-attention state set aside (a
            # num_gpu_blocks override sizes the KV pool alone; max_num_seqs then caps).
            sv = dataclasses.replace(sv, max_num_seqs=budget.state_seqs)
        blocks, memory[pool.role] = pool_kv(sv, budget)
        watermark = int(sv.kv_watermark * blocks)
        pool_cost = cost if pool.role == "both" else build_cost(scenario, pool.gpu_spec, pool.tp,
                                                                 pool.serving)
        spec = speculation(scenario, pool.gpu_spec, pool.tp, pool_cost)
        # An overlapped loop reads a request reaching a busy replica an iteration late.
        overlapped = reads_late(scenario, pool_cost)
        if pool.pp > 1:
            # A replica of pp stages prices each stage of a micro-batch (sim/core/pipeline.py).
            pool_cost = StageCost(pool_cost, model, pool.gpu_spec, pool.tp, pool.pp)
        # Swapping moves each GPU's KV shard over its own PCIe link to host memory.
        swap_blocks, host_bw = host_tier(sv, budget.block_bytes, pool.gpu_spec.host_bw)
        tier = sv.kv_offload
        members = [
            Replica(len(replicas) + i, engine, make_policy(sv), pool_cost,
                    KVCacheManager(blocks, sv.block_size, watermark, swap_blocks,
                                   tier is not None, budget.window_blocks, budget.window_groups,
                                   pool.role == "prefill", sv.host_prefixes,
                                   tier is None or tier.store_outputs, budget.state_blocks,
                                   budget.snapshot_blocks),
                    sv, pool.role, budget.block_bytes / host_bw, spec, grouped=pool.dp > 1,
                    async_sched=overlapped)
            for i in range(pool.replicas * pool.dp)
        ]
        for g in range(0, len(members) if pool.dp > 1 else 0, pool.dp):
            DPGroup(engine, members[g:g + pool.dp], pool_cost)
        for rep in members:
            rep.stats.block_bytes, rep.stats.token_limit = budget.block_bytes, sv.iteration_budget
        replicas += members
        by_role[pool.role] = members
        routers[pool.role] = ROUTERS[pool.router](rng)
    entry = by_role.get("both") or by_role["prefill"]
    decode_pool = by_role.get("decode")
    if decode_pool is not None:
        prefill, decode = the_pools
        handoff = Handoff(decode_pool, routers["decode"],
                          transfer_link(scenario, prefill, decode), len(entry),
                          transfer_bytes_per_token(model, prefill, decode))
        for rep in entry:
            rep.handoff = handoff
    return Cluster(replicas, entry, routers.get("both") or routers["prefill"], decode_pool,
                   memory)


def draft_profile(target: ProfileCost, draft: ModelSpec, gpu: GPUSpec,
                  tp: int) -> ProfileCost | None:
    """A draft model's shipped measured profile on the target's GPU, tp and framework,
    without per-step host work (the target's engine step pays it), when the target is
    priced by measured kernels and one ships; else None (the roofline drafts)."""
    src = target.meta.get("source")
    if not isinstance(src, dict) or src.get("kind") != "measured-kernels":
        return None
    try:
        stem = find(draft, gpu.name, tp, str(src.get("framework")))
    except ServesimError:
        return None
    prof = load_profile(stem)
    return prof.head(prof.model.layers) if isinstance(prof, ProfileCost) else None


def speculation(scenario: Scenario, gpu: GPUSpec, tp: int,
                cost: CostModel | None = None) -> Speculation | None:
    """The scenario's speculative decoding on ``tp`` GPUs of type ``gpu`` (None
    without), its draws from the workload seed's fifth child. Its drafter: an EAGLE or
    MTP head from ``cost``, the pool's own, when that is a profile (measured kernels or
    a calibration: the target's layers and LM head); a draft model from its own shipped
    profile (:func:`draft_profile`); else the roofline (the scenario's parameters when
    its cost is a roofline), as for the head of a target with Gated DeltaNet layers,
    whose verify's extra state writes the drafter prices too (at the bandwidth of
    ``cost``: :func:`sim.cost.drafter.state_bandwidth`)."""
    spec = scenario.serving.speculative
    if spec is None:
        return None
    params = scenario.cost.roofline or RooflineParams()
    head, head_from, why = None, "its layers and LM head from the profile", ""
    base = unwrapped(cost)  # under async scheduling's overlap and the eager floor
    model = scenario.model
    draft = drafter_model(spec, model)
    profile = base if isinstance(base, ProfileCost) else None
    if profile is not None and spec.method in ("eagle", "mtp"):
        if model.linear_layers:
            # The profile's layer is the mean of Gated DeltaNet and attention layers; the
            # head is full attention (sim.cost.drafter).
            why = ("the profile's mean layer averages the target's Gated DeltaNet and "
                   "attention layers; the head is full attention")
        else:
            head = profile.head(spec.head_layers)
    elif profile is not None and draft is not None:
        head, head_from = draft_profile(profile, draft, gpu, tp), "from its own shipped profile"
    state = shard(model, tp).linear_state_bytes if model.linear_layers else 0
    drafter = Drafter(draft, spec.num_tokens, gpu, tp, params, head, head_from, state,
                      state_bandwidth(profile, gpu, params), why)
    return Speculation(spec, drafter, np.random.default_rng(spec_seed_of(scenario)))
