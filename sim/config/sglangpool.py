"""A pool priced by SGLang's measured kernels has its memory sized as SGLang sizes it.

SGLang does not profile a forward pass as vLLM does: it gives its weights and KV pool a
fixed share of each GPU, ``--mem-fraction-static``, and leaves activations and CUDA
graphs the rest (:mod:`sim.cost.sglangmemory`). So where a scenario's measured kernels
are SGLang's (``cost: measured`` with ``measured.framework: sglang``, or a profile file
built from SGLang's tables), its KV cache is that share less the weights: the fraction
is ``hardware.memory_utilization`` when given (read as SGLang's flag), else the default
the kernels' SGLang release derives for the GPU and parallelism.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sim.cost.memorybudget import MemoryBudget
from sim.cost.profilefile import profile_source
from sim.cost.sglangmemory import sglang_static_fraction

if TYPE_CHECKING:
    from sim.config.scenario import Scenario
    from sim.cost.gpus import GPUSpec


def sglang_release(scenario: Scenario, gpu: str) -> str | None:
    """The SGLang release whose kernel tables price ``scenario`` on ``gpu`` (a table GPU's
    name): its shipped SGLang profile's for ``cost: measured`` under SGLang, its profile
    file's where that was built from SGLang's tables; None where the kernels are not
    SGLang's (vLLM's, TensorRT-LLM's, the roofline, a calibration)."""
    cost = scenario.cost
    if cost.measured is not None and cost.measured.framework == "sglang":
        from sim.cost.measured import shipped

        stem = next((r.stem for r in shipped() if r.gpu == gpu and r.framework == "sglang"),
                    None)
        src = None if stem is None else profile_source(stem, None)
        # No SGLang profile on this GPU: cost: measured refuses the scenario, naming them.
        return None if src is None else str(src.get("version") or "")
    if cost.profile is not None:
        base = scenario.base_dir
        src = profile_source(cost.profile, None if base is None else str(base))
        if src is not None and src.get("framework") == "sglang":
            return str(src.get("version") or "")
    return None


def sglang_fraction(scenario: Scenario, release: str, gpu: GPUSpec, tp: int, pp: int = 1,
                    dp: int = 1) -> float:
    """SGLang ``release``'s default ``mem_fraction_static`` for a replica of ``tp`` ×
    ``dp`` GPUs (SGLang's tp_size counts its data-parallel attention ranks) and ``pp``
    stages serving ``scenario``: SGLang's chunked-prefill size for the GPU, the scenario's
    ``cuda_graph_max_bs`` (else SGLang's), its drafting method."""
    sv = scenario.serving
    spec = None if sv.speculative is None else sv.speculative.method
    # SGLang reserves for its graph batch size whether or not it captures graphs; with
    # cuda_graphs none the key is unset (refused beside it) and SGLang's default counts.
    return sglang_static_fraction(release or None, gpu, scenario.model, tp * dp, pp=pp, dp=dp,
                                  graph_bs=sv.cuda_graph_max_bs, speculative=spec)


def as_sglang(budget: MemoryBudget, release: str, given: bool) -> MemoryBudget:
    """``budget`` (whose ``utilization`` is the fraction) as SGLang divides the GPU: its
    weights and KV pool within the fraction, so no activation, non-torch or CUDA-graph
    term comes out of it (they live in the rest)."""
    name = f"SGLang {release}" if release else "SGLang"
    how = "hardware.memory_utilization" if given else "its default"
    return dataclasses.replace(
        budget, activation=0, non_torch=0, cuda_graph=0,
        rules=(f"as {name} sizes it: mem_fraction_static {budget.utilization:g} ({how}) "
               "of the GPU holds weights and KV cache, activations and CUDA graphs the rest"))
