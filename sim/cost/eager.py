"""Steps a server runs without CUDA graphs: the host's kernel dispatch as a floor.

A step replayed from a CUDA graph reaches the GPU in one launch. A step that is not
(every step under vLLM's ``--enforce-eager``; the prefill steps of TensorRT-LLM, which
graphs generation-only iterations, and of SGLang before 0.5.10, which graphed only
decode batches until piecewise graphs became its default; SGLang's decode batches above
its largest captured size; vLLM's steps of more tokens than its largest capture size,
512 by default, which run torch.compile's code unreplayed) is issued op by op from
Python. The GPU runs each kernel as soon as it is issued, so the device work cannot end
before the host has issued all of it: such a step costs its serving-loop host work plus
the *longer* of its device work and the model's dispatch time. A large prefill hides
the dispatch under its kernels; a short prompt, a prompt's last chunk or a small decode
batch is set by it.

Dispatch time is priced per decoder layer from two public measurements, taken as
whole-step times of host-bound steps (the eager step's time is then the host's):

- a dense layer: SGLang's own benchmark of Llama-3-8B at one sequence without CUDA
  graphs, 8.23 ms a decode step with its FlashInfer attention (sgl-project/sglang PR
  1401, September 2024; 7.35 ms graphed): 8.23 / 32 ms a layer;
- a layer of latent attention and routed experts (DeepSeek-V3 and its family): SGLang's
  DeepSeek-V3 forward of one new token, 82.64 ms eager against 23.10 ms graphed
  (sgl-project/sglang PR 12160, October 2025): what is left of 82.64 ms after its three
  dense layers, over its 58 expert layers.

Any other layer (grouped-query attention with experts, Gated DeltaNet, sliding window)
is priced as a dense layer, for want of a measurement: a lower bound where its layer
issues more kernels. vLLM's compiled code without a graph is priced as eager Python: no
public measurement times its dispatch alone (one set of public runs, held out, puts a
small Qwen3's at more; docs/validation.md). How these figures were checked against
public end-to-end runs: docs/models.md.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from sim.cost.shape import StepShape

if TYPE_CHECKING:
    from sim.cost.gpus import GPUSpec
    from sim.cost.specs import ModelSpec

# Seconds of host dispatch a decoder layer takes without CUDA graphs (module doc).
DENSE_LAYER_S = 8.23e-3 / 32
LATENT_EXPERT_LAYER_S = (82.64e-3 - 3 * DENSE_LAYER_S) / 58

# Which steps replay CUDA graphs: "all" (vLLM's default: decode and mixed batches, the
# latter piecewise), "decode" (decode-only steps: TensorRT-LLM; SGLang before 0.5.10),
# "none" (vLLM's --enforce-eager, SGLang's --disable-cuda-graph).
GraphMode = Literal["all", "decode", "none"]
# The most tokens vLLM's default capture sizes reach (vllm/config/vllm.py,
# _set_cudagraph_sizes), whatever max_num_seqs allows.
VLLM_CAPTURE_MAX = 512
# SGLang's first release that graphs prefills by default (piecewise graphs, PR 16331).
SGLANG_PREFILL_GRAPHS = (0, 5, 10)
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def host_seconds(terms: tuple[float, ...], shape: StepShape) -> Any:
    """Serving-loop host seconds of a step of ``shape`` (numbers or arrays) from a cost
    model's ``host_terms()``: (fixed s, s per sequence, s per decode group, group count
    cap)."""
    const, per_seq, per_group, groups = terms
    mn: Any = min if type(shape.seqs) is int else np.minimum
    return const + per_seq * shape.seqs + per_group * mn(shape.decode_seqs, groups)


def dispatch_s(model: ModelSpec) -> float:
    """Seconds the host takes to issue one forward pass of ``model`` op by op: per
    decoder layer, :data:`LATENT_EXPERT_LAYER_S` for a layer with latent attention and
    routed experts, :data:`DENSE_LAYER_S` for any other."""
    if model.kv_lora_rank and model.experts:
        expert_layers = model.layers - model.dense_layers
        return expert_layers * LATENT_EXPERT_LAYER_S + model.dense_layers * DENSE_LAYER_S
    return model.layers * DENSE_LAYER_S


@dataclass(frozen=True)
class Graphs:
    """Which steps of a replica replay CUDA graphs: ``mode`` (see :data:`GraphMode`),
    decode-only steps of at most ``max_decode_seqs`` sequences (0: any number), and
    steps of at most ``max_tokens`` new tokens (vLLM's largest capture size; 0: any)."""

    mode: GraphMode
    max_decode_seqs: int = 0
    max_tokens: int = 0

    @property
    def floored(self) -> bool:
        """Whether any step runs without graphs (else nothing needs pricing)."""
        return self.mode != "all" or self.max_decode_seqs > 0 or self.max_tokens > 0

    @property
    def phrase(self) -> str:
        """What runs without graphs, in a few words (for the cost's source phrase)."""
        if self.mode == "none":
            return "no CUDA graphs (eager steps)"
        eager = [] if self.mode == "all" else ["prefill steps"]
        if self.max_decode_seqs:
            eager.append(f"decode batches over {self.max_decode_seqs}")
        if self.max_tokens:
            eager.append(f"steps over {self.max_tokens} tokens")
        return f"{' and '.join(eager)} without CUDA graphs"

    def graphed(self, shape: StepShape) -> Any:
        """Whether a step of ``shape`` replays a graph (a bool, or an array of them)."""
        if self.mode == "none":
            return False if type(shape.seqs) is int else np.zeros(np.shape(shape.seqs), bool)
        decode = shape.prefill_seqs == 0
        if self.max_decode_seqs:
            decode = decode & (shape.seqs <= self.max_decode_seqs)
        graphed = decode if self.mode == "decode" else decode | (shape.prefill_seqs > 0)
        if self.max_tokens:
            graphed = graphed & (shape.new_tokens <= self.max_tokens)
        return graphed


def vllm_capture_tokens(max_num_seqs: int, max_num_batched_tokens: int,
                        spec_tokens: int = 0) -> int:
    """vLLM's default largest CUDA-graph capture size (tokens): twice the tokens of a
    decode batch of ``max_num_seqs`` sequences, each verifying ``spec_tokens`` drafted
    tokens besides its own, at most 512 and at most ``max_num_batched_tokens``. A step
    of more tokens runs torch.compile's code without a graph."""
    return min(max_num_seqs * (1 + spec_tokens) * 2, VLLM_CAPTURE_MAX, max_num_batched_tokens)


def sglang_decode_cap(gpu: GPUSpec, tp: int) -> int:
    """SGLang's default ``--cuda-graph-max-bs``: the largest decode batch it captures, by
    the GPU's memory (GiB) and tp, as its server arguments tier it."""
    gib = gpu.mem_bytes / 2**30
    if gib < 20:
        return 8
    if gib < 35:
        return 80 if tp >= 4 else 24
    if gib < 60:
        return 160 if tp >= 4 else 32
    if gib < 160:
        return 512 if tp >= 4 else 256
    return 512


def sglang_graphs_prefill(version: str | None, model: ModelSpec) -> bool:
    """Whether an SGLang release graphs prefill steps by default: from 0.5.10 (a nightly
    build from 2026-03-02, when the change merged), except for gpt-oss, for which it
    turns piecewise graphs off. A release that cannot be read (None, a custom build)
    counts as the newest."""
    if model.attention_sinks:
        return False
    return sglang_since(version, SGLANG_PREFILL_GRAPHS, "20260302")


def sglang_since(version: str | None, first: tuple[int, int, int], day: str) -> bool:
    """Whether SGLang build ``version`` has a change first released in ``first`` (major,
    minor, patch) and merged on ``day`` (``YYYYMMDD``): by its release number, else by
    the date a nightly build's name carries; a name with neither (None, a custom build
    such as ``nightly-dev``) counts as the newest."""
    if not version:
        return True
    m = _RELEASE.match(version.strip())
    if m is not None:
        return tuple(int(g) for g in m.groups()) >= first
    found = re.search(r"(20\d{6})", version)
    return found is None or found.group(1) >= day


def default_graphs(framework: str | None, version: str | None, model: ModelSpec,
                   gpu: GPUSpec, tp: int, capture_tokens: int = 0) -> Graphs:
    """The steps ``framework`` (None: vLLM's) replays from graphs by default: vLLM every
    step of at most ``capture_tokens`` tokens (its largest capture size,
    :func:`vllm_capture_tokens`; 0: every step), decode-only ones whole and mixed ones
    piecewise; TensorRT-LLM decode-only steps, however many sequences (InferenceX's
    recipes size ``cuda_graph_config`` to the batch); SGLang decode batches up to
    :func:`sglang_decode_cap`, and prefill steps from 0.5.10."""
    if framework == "trtllm":
        return Graphs("decode")
    if framework == "sglang":
        mode: GraphMode = "all" if sglang_graphs_prefill(version, model) else "decode"
        return Graphs(mode, sglang_decode_cap(gpu, tp))
    return Graphs("all", max_tokens=capture_tokens)


class EagerSteps:
    """``cost`` with the steps ``graphs`` does not replay floored at ``dispatch``
    seconds of device work: such a step costs ``host + max(step − host, dispatch)``,
    where ``host`` is the wrapped model's serving-loop work (``host_terms()``, none
    without it). ``frontend``, ``wake_time``, ``experts_time`` and ``host_terms`` are
    the wrapped model's, so async scheduling's overlap may wrap this one in turn."""

    def __init__(self, cost: Any, graphs: Graphs, dispatch: float):
        self.cost = cost
        self.graphs = graphs
        self.dispatch = float(dispatch)
        self._step = cost.step_time
        # The hot path's test, read once: steps of at most this many tokens (vLLM's
        # capture size; else any) that are graphed whatever their kind.
        self._cap = graphs.max_tokens or sys.maxsize
        self._every = graphs.mode == "all" and not graphs.max_decode_seqs
        const, per_seq, per_group, groups = (cost.host_terms() if hasattr(cost, "host_terms")
                                             else (0.0, 0.0, 0.0, 0.0))
        self._terms = (float(const), float(per_seq), float(per_group), float(groups))
        self.frontend = cost.frontend
        self.wake_time = getattr(cost, "wake_time", None)
        split = getattr(cost, "stage_split", None)
        # A pipeline prices each stage's share of the layers (sim.cost.pipeline).
        self.stage_split = None if split is None else self._stage_split

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase."""
        return f"{self.cost.source}; {self.graphs.phrase}"

    def host_terms(self) -> tuple[float, float, float, float]:
        """The wrapped model's serving-loop host work (see
        :meth:`sim.cost.profilecost.ProfileCost.host_terms`)."""
        return self._terms

    def host_time(self, shape: StepShape) -> Any:
        """Serving-loop host seconds of a step of ``shape`` (numbers or arrays)."""
        return host_seconds(self._terms, shape)

    def experts_time(self, tokens: int) -> float:
        """The wrapped model's (data-parallel attention: the shared experts' seconds)."""
        return float(self.cost.experts_time(tokens))

    def step_time(self, shape: StepShape) -> Any:
        """Seconds one iteration of ``shape`` takes (the class doc)."""
        t = self._step(shape)
        if type(shape.seqs) is int:
            # One step, the hot path of every simulated iteration: Graphs.graphed and
            # host_time written out.
            if shape.new_tokens <= self._cap:
                if self._every:
                    return t
                g = self.graphs
                if shape.prefill_seqs:
                    if g.mode == "all":
                        return t
                elif g.mode != "none" and (not g.max_decode_seqs
                                           or shape.seqs <= g.max_decode_seqs):
                    return t
            const, per_seq, per_group, groups = self._terms
            h = const + per_seq * shape.seqs
            if per_group:
                h += per_group * min(shape.decode_seqs, groups)
            d = t - h
            return h + (d if d > self.dispatch else self.dispatch)
        h = self.host_time(shape)
        return np.where(self.graphs.graphed(shape), t, h + np.maximum(t - h, self.dispatch))

    def step_time_plus(self, shape: StepShape, extra_s: float) -> float:
        """Seconds of one iteration of ``shape`` (Python ints) whose device work runs
        ``extra_s`` seconds longer (a data-parallel rank's shared experts)."""
        t = float(self._step(shape)) + extra_s
        if self.graphs.graphed(shape):
            return t
        h = float(self.host_time(shape))
        return h + max(t - h, self.dispatch)

    def _stage_split(self, shape: StepShape) -> tuple[float, float, float]:
        """The wrapped model's split of a step (layer work, last stage's, shared), the
        layer work floored at the dispatch when the step runs without graphs."""
        layer, last, shared = self.cost.stage_split(shape)
        if self.graphs.graphed(shape):
            return layer, last, shared
        return max(layer, self.dispatch), last, shared


def floored(cost: Any, graphs: Graphs, model: ModelSpec) -> Any:
    """``cost`` with the steps ``graphs`` does not replay floored at ``model``'s dispatch
    (:class:`EagerSteps`); ``cost`` itself where every step replays one."""
    return EagerSteps(cost, graphs, dispatch_s(model)) if graphs.floored else cost
