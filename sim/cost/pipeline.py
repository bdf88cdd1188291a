"""Pipeline parallelism's prices: how a replica's layers split into stages, what each
stage of one micro-batch costs, and the activations sent between stages.

A replica of ``tp × pp`` GPUs runs its model as ``pp`` stages of ``tp`` GPUs each. The
layers split as vLLM splits them (:func:`stage_layers`); the first stage also holds the
token embedding and the last the final norm and LM head. A micro-batch passes the stages
in order; each stage's time is its share of the step the cost model prices for the
whole model (:class:`StageCost`) plus, on every stage but the last, sending the batch's
activations to the next stage over the link between them (:func:`stage_links`).

The core's pipeline (:mod:`sim.core.pipeline`) keeps the stages' clocks; this module
only prices. Pure Python: no numpy, no simpy.
"""

from __future__ import annotations

from typing import Any

from sim.cost.gpus import GPUSpec
from sim.cost.shape import StepShape
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


def stage_layers(layers: int, pp: int) -> tuple[int, ...]:
    """Layers of each of ``pp`` stages, as vLLM's ``get_pp_indices`` splits ``layers``:
    ``layers // pp`` each, and the remainder one apiece to the stages just before the
    last, walking towards the first (the last stage already carries the LM head). An
    uneven split is allowed, as in vLLM; ``pp`` above ``layers`` is an error."""
    if not 1 <= pp <= layers:
        raise ServesimError(f"got {pp}: {layers} layers split into at most {layers} stages "
                            "(one layer or more each)", where="pp")
    out = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        out[-i] += 1
    return tuple(out)


def check_layout(gpu: GPUSpec, tp: int, pp: int) -> None:
    """A pipeline's GPUs must make whole nodes' sense: with ``pp`` > 1 each stage's ``tp``
    GPUs share one node of ``gpu.node_gpus`` (tensor parallelism inside a node, stages
    across nodes, as vLLM places them), so ``tp`` must divide the node's GPUs."""
    if pp > 1 and gpu.node_gpus % tp:
        raise ServesimError(
            f"got {pp} stages of tp={tp} GPUs: a pipeline stage's tensor-parallel GPUs must "
            f"share one node of {gpu.node_gpus} {gpu.name} GPUs, so tp must divide "
            f"{gpu.node_gpus} when pp > 1", where="pp")


def stage_links(gpu: GPUSpec, tp: int, pp: int) -> tuple[tuple[float, float], ...]:
    """(bytes/s, seconds) of the link from each stage to the next (``pp - 1`` of them):
    the node's fast link while both stages sit in one node, the network where the
    boundary between them is a node's edge. Stage ``k`` holds GPUs ``k·tp`` to
    ``(k+1)·tp - 1``; each of its GPUs sends to the matching GPU of stage ``k + 1``."""
    out = []
    for k in range(pp - 1):
        across = (k + 1) * tp % gpu.node_gpus == 0
        out.append((gpu.net_bw, gpu.net_latency_s) if across
                   else (gpu.link_bw, gpu.link_latency_s))
    return tuple(out)


def activation_bytes_per_token(model: ModelSpec, tp: int) -> float:
    """Bytes one GPU sends to the next stage per token of a micro-batch: the hidden
    state and the residual (two vectors of ``hidden`` elements at the activations'
    dtype, what vLLM's Llama-family models pass between stages), of which each of the
    ``tp`` GPUs sends its own slice (the receiving stage gathers them)."""
    return 2 * model.hidden * model.act_bytes / tp


class StageCost:
    """Seconds each stage of a ``pp``-stage pipeline spends on one micro-batch.

    From the wrapped cost model's ``stage_split(shape)`` (seconds of the whole step as
    (layers, last stage only, every stage's share)); a model without one (the linear
    model) counts its whole step as layer work. Stage ``k`` of ``n_k`` of the model's
    ``L`` layers costs ``layers·n_k/L + shared/pp``, the last stage adds its own part
    (LM head, sampling), and every stage but the last adds the send of the batch's
    activations: ``latency + new_tokens·bytes_per_token / bandwidth`` over its link.
    So the stages' compute adds up to the whole step; a pipeline only adds the sends.

    ``frontend``, ``source`` and ``wake_time`` are the wrapped model's.
    """

    def __init__(self, cost: Any, model: ModelSpec, gpu: GPUSpec, tp: int, pp: int):
        self.cost = cost
        self.pp = pp
        self.layers = stage_layers(model.layers, pp)
        self.shares = tuple(n / model.layers for n in self.layers)
        self.links = stage_links(gpu, tp, pp)
        self.per_token = activation_bytes_per_token(model, tp)
        # (latency s, seconds per token) of each send, for stage_times.
        self._sends = tuple((lat, self.per_token / bw) for bw, lat in self.links)
        self._split = getattr(cost, "stage_split", None)
        # (share of stage 0, share of stage 1, send latency s, send s per token) when pp
        # is 2, the common case, priced without loops.
        self._two = ((*self.shares, *self._sends[0]) if pp == 2 else None)
        self.frontend = cost.frontend
        self.wake_time = getattr(cost, "wake_time", None)

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase."""
        return f"{self.cost.source}; {self.pp} pipeline stages"

    def transfer_s(self, new_tokens: int, k: int) -> float:
        """Seconds stage ``k`` spends sending ``new_tokens`` tokens' activations on."""
        bw, lat = self.links[k]
        return lat + new_tokens * self.per_token / bw

    def stage_times(self, shape: StepShape) -> list[float]:
        """Seconds stage 0, 1, ... is busy with a micro-batch of ``shape``, sends
        included."""
        if self._split is None:
            layer, last, shared = self.cost.step_time(shape), 0.0, 0.0
        else:
            layer, last, shared = self._split(shape)
        each = shared / self.pp
        new = shape.new_tokens
        if self._two is not None:
            # Two stages, unrolled: the same operations in the same order as below.
            s0, s1, lat, per = self._two
            return [layer * s0 + each + (lat + new * per), layer * s1 + each + last]
        out = [layer * s + each for s in self.shares]
        out[-1] += last
        for k, (lat, per) in enumerate(self._sends):
            out[k] += lat + new * per
        return out

    def step_time(self, shape: StepShape) -> float:
        """Seconds one micro-batch of ``shape`` takes through an empty pipeline."""
        return sum(self.stage_times(shape))
