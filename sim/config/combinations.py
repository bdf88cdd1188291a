"""Which of a scenario's features combine: load-time checks that refuse a combination
servesim does not model (pipeline stages, data-parallel attention ranks, Gated DeltaNet
layers, expert parallelism or a receive interval beside disaggregated pools), each error
naming the key that conflicts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.cost.pipeline import stage_layers
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.config.scenario import Scenario


def check_combinations(scenario: Scenario) -> None:
    """Every check of this module, pipeline first; the pools' own checks follow in
    :func:`sim.config.disagg.check_pools`."""
    check_pipeline(scenario)
    check_data_parallel(scenario)
    check_linear_attention(scenario)
    sv = scenario.serving
    if scenario.hardware.ep > 1 and sv.policy == "disaggregated":
        raise ServesimError(f"got {scenario.hardware.ep} with policy 'disaggregated': expert "
                            "parallelism is modelled for co-located replicas so far; use ep 1",
                            where="hardware.ep")
    recv = sv.scheduler_recv_interval
    if recv > 1 and sv.policy == "disaggregated":
        # The gate counts decode steps between reads; a prefill pool runs none, and the
        # decode pool's intake of transferred requests is not gated: it would change nothing.
        raise ServesimError(f"got {recv} with policy 'disaggregated': SGLang's receive "
                            "interval is modelled for co-located replicas so far; use 1",
                            where="serving.scheduler_recv_interval")


def check_linear_attention(scenario: Scenario) -> None:
    """A model with Gated DeltaNet layers (``linear_layers``) is modelled on co-located
    single-stage replicas without the features whose state handling would differ from
    KV blocks': swapping and a host tier, pipeline stages, data-parallel ranks and
    disaggregated pools (speculative decoding is modelled: each sequence holds 1 + k
    states, :func:`sim.config.disagg.pool_memory`, and a verify writes k more,
    :mod:`sim.cost.drafter`; prefix caching as vLLM's align mode keeps it:
    sim/config/statepool.py). Errors name the key that conflicts."""
    model, sv, hw = scenario.model, scenario.serving, scenario.hardware
    if not model.linear_layers:
        return
    conflicts = ((sv.preemption == "swap", "serving.preemption", "swap preemption"),
                 (sv.kv_offload is not None, "serving.kv_offload", "a host KV tier"),
                 (sv.policy == "disaggregated", "serving.policy", "disaggregated pools"),
                 (hw.pp > 1, "hardware.pp", "pipeline stages"),
                 (hw.dp > 1, "hardware.dp", "data-parallel attention"))
    for clash, key, what in conflicts:
        if clash:
            raise ServesimError(f"model {model.name} has {model.linear_layers} linear-attention "
                                f"(Gated DeltaNet) layers, whose per-sequence state is not "
                                f"modelled with {what} yet", where=key)


def check_pipeline(scenario: Scenario) -> None:
    """``hardware.pp`` > 1 needs at most one stage per layer and a co-located ``chunked``
    pool: pipeline parallelism is modelled as vLLM V1 runs it, with V1's scheduler
    (sim/core/pipeline.py); errors name ``hardware.pp``."""
    pp = scenario.hardware.pp
    if pp == 1:
        return
    try:
        stage_layers(scenario.model.layers, pp)
    except ServesimError as exc:
        raise exc.located(prefix="hardware") from None
    policy = scenario.serving.policy
    if policy != "chunked":
        raise ServesimError(f"got {pp} with policy {policy!r}: pipeline parallelism is "
                            "modelled as vLLM V1 runs it, with policy chunked (V1's "
                            "scheduler)", where="hardware.pp")
    # The pipeline's stages price neither verifies' drafting nor host-tier transfers yet.
    for key in ("speculative", "kv_offload"):
        if getattr(scenario.serving, key) is not None:
            raise ServesimError(f"got {pp} with serving.{key}: a pipeline of stages is "
                                f"modelled without {key.replace('_', ' ')} so far; use pp 1",
                                where="hardware.pp")


def check_data_parallel(scenario: Scenario) -> None:
    """``hardware.dp`` > 1 (data-parallel attention ranks sharing their experts,
    sim/core/dpgroup.py) is modelled for a mixture of experts in a co-located
    single-stage pool priced by the roofline or a profile built for those ranks, without
    speculative decoding, faults or a scheduler recv interval; errors name the key that
    conflicts (a profile built for another dp is refused where the cost is built)."""
    dp = scenario.hardware.dp
    if dp == 1:
        return
    sv, model = scenario.serving, scenario.model
    if not model.experts:
        raise ServesimError(f"got {dp}, but model {model.name} is dense (experts is 0): "
                            "data-parallel attention ranks share a mixture of experts' "
                            "experts; for copies of a dense model use cluster.replicas",
                            where="hardware.dp")
    if sv.policy == "disaggregated":
        raise ServesimError(f"got {dp} with policy 'disaggregated': data-parallel attention "
                            "is modelled for co-located replicas so far; use dp 1",
                            where="hardware.dp")
    if scenario.cost.linear is not None:
        raise ServesimError(f"got {dp} with cost: linear, which prices no experts apart "
                            "from a rank's step; data-parallel ranks share theirs over every "
                            "rank's tokens: use cost: roofline, measured, or a profile built "
                            "with --dp", where="hardware.dp")
    conflicts = ((scenario.hardware.pp > 1, "hardware.pp", "pipeline stages"),
                 (sv.speculative is not None, "serving.speculative", "speculative decoding"),
                 (sv.scheduler_recv_interval > 1, "serving.scheduler_recv_interval",
                  "a scheduler recv interval"),
                 (scenario.faults.active, "faults", "faults"))
    for clash, key, what in conflicts:
        if clash:
            raise ServesimError(f"got {dp} with {key}: data-parallel attention is modelled "
                                f"without {what} so far; use dp 1", where="hardware.dp")
