"""What drafting costs in a speculative decoding iteration: a pure function of the
verifying sequences and the tokens they hold in the KV cache.

The target's verify is priced by the scenario's own cost model, from the iteration's
step shape (each verifying sequence an entry of k + 1 new tokens after its context).
Drafting is priced here, as ``k`` sequential decode steps of the drafter over the same
sequences, by the roofline (:class:`sim.cost.roofline.RooflineCost`) of the drafter's
model on the replica's GPUs:

- ``draft``: the draft model itself, on the same GPU type and tp as the target (vLLM
  runs a draft model with the target's tensor parallelism);
- ``eagle`` / ``mtp``: the target's shape cut to the head's decoder layers, with the
  target's LM head: an EAGLE head is one decoder layer (Li et al., EAGLE, ICML 2024), a
  DeepSeek-V3 MTP module one transformer block (DeepSeek-V3 report, section 2.2), and
  both produce each drafted token's logits through the shared output head;
- ``ngram``: prompt lookup on the host, no model: free.

A draft step pays its kernels (with the roofline's kernel floors) but none of the
roofline's host overheads, per step or per sequence: those (scheduling, input
preparation, output processing) belong to the engine step and the target's price pays
them once, while the drafted tokens are chosen on the device. Draft step i (0-based)
attends to the sequences' context plus the i tokens drafted before it; the roofline of
a decode step is affine in the context (its attention is bound by the KV read at every
context, and nothing else reads it), so the k steps cost exactly k steps at the mean
context, and one price serves them all. Being affine, that price is kept per batch size
as its value at no context and its slope (seconds per context token).

When the target is priced by a profile (measured kernels or a calibration) an EAGLE or
MTP head is priced from that profile instead (``head``: the target's shard cut to the
head's layers, :meth:`sim.cost.profilecost.ProfileCost.head`), its LM head the
profile's own; a draft model under a measured profile, by the draft's own shipped
profile on the same GPU, tp and framework when one ships. A profile's decode attention
is not affine in the context (measured grids, a spill knee), so each of the k draft
steps is priced at its own context. A profile's layer is the mean of the target's
layers, though, and a target with Gated DeltaNet layers (Qwen3.5, Qwen3-Next) has a
head of full-attention layers: its mean layer would stand for neither, so such a head
is priced by the roofline under any cost model.

Gated DeltaNet layers add one more price a verifying sequence, whatever the method
(n-gram lookup's too): the verify writes the layers' state after each of its k + 1
positions (so that a rejection can go back to the last accepted one), where the
target's price of the step, a decode's, reads the state once and writes it once. The
k extra writes, ``k × state bytes`` a GPU at the GPU memory bandwidth of the target's
cost model (the roofline's, or a measured profile's), are
:attr:`Drafter.verify_state_s` a verifying sequence, added to the drafting price.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from sim.cost.gpus import GPUSpec
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape
from sim.cost.specs import ModelSpec

if TYPE_CHECKING:
    from sim.cost.profilecost import ProfileCost


class Drafter:
    """Seconds the drafting of one iteration takes: ``k`` decode steps of ``model``
    (None: no model drafts) on ``tp`` GPUs of type ``gpu``, by the roofline, or by
    ``head`` (a profile of the target cut to the head's layers) when given; plus, for a
    target with Gated DeltaNet layers, the verify's ``k`` extra state writes of
    ``state_bytes`` (one GPU's, one state) a verifying sequence at ``state_bw``
    bytes/s. ``roofline_why``: why a head is priced by the roofline under a profile,
    for :attr:`source` ("" when it is not)."""

    def __init__(self, model: ModelSpec | None, k: int, gpu: GPUSpec, tp: int,
                 params: RooflineParams, head: ProfileCost | None = None,
                 head_from: str = "its layers and LM head from the profile",
                 state_bytes: int = 0, state_bw: float = 0.0, roofline_why: str = ""):
        self.k = k
        self.model = model
        self.head = None if model is None else head
        self.head_from = head_from  # how ``head`` was made, for :attr:`source`
        self.roofline_why = roofline_why
        self.state_bytes, self.state_bw = state_bytes, state_bw
        # Seconds a verifying sequence's k state writes beyond a decode's take.
        self.verify_state_s = k * state_bytes / state_bw if state_bytes else 0.0
        # Nothing to price: n-gram lookup on a model without Gated DeltaNet layers.
        self.free = model is None and not self.verify_state_s
        self._cost = None if model is None or self.head is not None else RooflineCost(
            model, gpu, tp, dataclasses.replace(params, step_overhead_s=0.0,
                                                per_seq_overhead_s=0.0))
        # Per batch size: one draft step's seconds at no context, per context token, and
        # the mean context the k steps add, seqs·(k − 1)/2 (see the module docstring).
        self.lines: dict[int, tuple[float, float, float]] = {}

    @property
    def source(self) -> str:
        """Where the drafting price comes from, in one phrase."""
        return self._draft_source + self._state_source

    @property
    def _draft_source(self) -> str:
        """The drafting steps' part of :attr:`source`."""
        if self.model is None:
            return "n-gram drafting, free"
        if self.head is not None:
            return (f"drafting: {self.k} decode steps of {self.model.name} a verify, "
                    f"{self.head_from} ({self.head.source})")
        why = f" ({self.roofline_why})" if self.roofline_why else ""
        return f"drafting: {self.k} roofline decode steps of {self.model.name} a verify{why}"

    @property
    def _state_source(self) -> str:
        """The verify's extra Gated DeltaNet state writes' part of :attr:`source`."""
        if not self.verify_state_s:
            return ""
        return (f"; and {self.k} Gated DeltaNet state writes a verifying sequence beyond a "
                f"decode's ({self.state_bytes / 2**20:.2f} MiB each a GPU at "
                f"{self.state_bw / 1e9:.0f} GB/s)")

    def step_time(self, seqs: int, context_tokens: int) -> float:
        """Seconds to draft ``k`` tokens for each of ``seqs`` sequences holding
        ``context_tokens`` tokens in the KV cache between them, with their verify's
        extra state writes (:meth:`verify_state_time`; 0 when none verifies)."""
        return self.draft_time(seqs, context_tokens) + self.verify_state_time(seqs)

    def verify_state_time(self, seqs: int) -> float:
        """Seconds ``seqs`` verifying sequences' Gated DeltaNet state writes take beyond a
        decode's: ``k`` states of :attr:`state_bytes` each at :attr:`state_bw` (0 for a
        model without those layers)."""
        return seqs * self.verify_state_s

    def draft_time(self, seqs: int, context_tokens: int) -> float:
        """Seconds of the ``k`` draft steps alone for ``seqs`` sequences holding
        ``context_tokens`` tokens between them (0 when no model drafts)."""
        if self.head is not None:
            return self.head_time(seqs, context_tokens)
        if self._cost is None or not seqs:
            return 0.0
        line = self.lines.get(seqs)
        if line is None:
            line = self.line(seqs)
        return self.k * (line[0] + line[1] * (context_tokens + line[2]))

    def head_time(self, seqs: int, context_tokens: int) -> float:
        """Seconds of the ``k`` draft steps priced by the profile's head, each at its own
        context: step i's sequences hold ``context_tokens`` plus i tokens each (0 when
        none drafts)."""
        head = self.head
        if head is None or not seqs:
            return 0.0
        return head.decode_run(seqs, context_tokens, self.k)

    def line(self, seqs: int) -> tuple[float, float, float]:
        """One draft step of ``seqs`` sequences: (seconds at no context, seconds per
        context token, from two prices a million tokens apart), and the mean context in
        tokens the k steps add to the sequences' own; kept for the next call."""
        assert self._cost is not None
        far = 1_000_000
        at = [float(self._cost.step_time(StepShape(seqs, seqs, c, 0, 0, 0, c + seqs)))
              for c in (0, far)]
        line = self.lines[seqs] = (at[0], (at[1] - at[0]) / far, seqs * (self.k - 1) / 2)
        return line


def state_bandwidth(profile: ProfileCost | None, gpu: GPUSpec, params: RooflineParams) -> float:
    """Bytes/s at which the target's cost model moves GPU memory, for the verify's state
    writes: a measured profile's (its tables' weight-bound GEMM bandwidth, the
    ``bandwidth_bytes_s`` it records as derived), else the roofline's (the GPU's
    bandwidth times ``params.bandwidth_efficiency``)."""
    src = None if profile is None else profile.meta.get("source")
    derived = src.get("derived") if isinstance(src, dict) else None
    if isinstance(derived, dict) and isinstance(derived.get("bandwidth_bytes_s"), int | float):
        return float(derived["bandwidth_bytes_s"])
    return gpu.mem_bw * params.bandwidth_efficiency
