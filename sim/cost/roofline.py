"""The analytic roofline cost model (:class:`RooflineCost`; its knobs,
:class:`sim.cost.rooflineparams.RooflineParams`) and the notes a cost source adds about
dtypes and expert parallelism.

Linear layers and attention are each bounded by the slower of FLOP time and memory
time, at efficiencies fitted on public kernel tables; tensor parallelism shards both
(one GPU's shard) and adds two ring all-reduces per layer. Every price accepts numpy
arrays in the shape's fields and then returns an array.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.cost.gpus import GPUSpec, check_dtype, dtype_note, gemm_peak
from sim.cost.rooflineparams import (
    DSA_KERNELS,
    GDN_CHUNK,
    LINEAR_KERNELS,
    MLA_KERNELS,
    MOE_KERNELS,
    RooflineParams,
)
from sim.cost.shape import StepShape
from sim.cost.shard import QK_NORM_BYTES, Shard, ep_note, qk_norm_allreduces, shard
from sim.cost.specs import ModelSpec


class RooflineCost:
    """Analytic step time for ``model`` on ``tp`` GPUs of type ``gpu``.

    Per step (all terms in seconds; FLOPs and bytes are one GPU's, from
    :func:`sim.cost.shard.shard`: P_lin its projection weights, H its query heads, V its
    padded vocabulary share, kv_bytes_per_token its KV bytes, replicated KV heads counted):
    linear = max(2·P_lin·new / (F·e_f), P_lin·b / (B·e_b));
    attention = max(4·L·H·d·pairs / (F·e_a), kv_bytes_per_token·kv_tokens / (B·e_b));
    lm head = max(2·V·h·seqs / (F·e_f), V·h·b / (B·e_b));
    all-reduce = 2·L·(latency + 2·(tp−1)/tp · new·h·b / link_bw) when tp > 1, on the
    slowest link of the ring: the node's fast link, or the network when tp exceeds the
    node's GPUs (:meth:`sim.cost.gpus.GPUSpec.tp_link`); a model that normalises
    queries and keys over all heads (``layer_qk_norm``) adds one more a layer, of 8 bytes
    a token, and the norm's split into two kernels;
    plus step and per-sequence overheads (scheduling, sampling, kernel launches), and
    the time a kernel takes however little it does: ``kernel_floor_s`` per GEMM (4
    projections a layer, the LM head) and ``attention_floor_s`` per attention call.

    A mixture-of-experts layer's FLOPs are its attention's plus ``experts_per_token``
    experts' per token (and shared experts', and the router's); its bytes are those of
    the experts the step touches: under uniform routing E·(1 − (1 − k/E)^new) of its E
    experts, so one decode reads k experts and a long prefill all of them.

    FP8 and FP4 weights (projections' or experts') run at the GPU's FP8 or FP4 peak times
    the FP8 efficiency (no public table times FP4 GEMMs on enough GPUs to fit their own),
    or weight-only at bf16 FLOP/s (:func:`sim.cost.gpus.dtype_weight_only`); their bytes
    are the packed ones, scales counted.

    Sliding-window layers (``sliding_layers`` of L, window W) attend to at most W keys a
    query: their pairs are min(prefill pairs, W·prefill tokens) + min(decode KV, W·decodes)
    and their KV reads min(context, W·seqs) + new. Both are upper bounds, exact when every
    sequence's context is past the window or none is (the shape has sums, not each
    sequence's context).

    Latent attention (MLA) prices each prefill pair at its expanded heads' FLOPs, each
    decode's cached token at the absorbed form's (latent-wide keys and values), and each
    cached token a prefill chunk attends to at kv_b's up-projection; its reads are the
    cached latents. DeepSeek sparse attention (``index_topk`` = K) caps those pairs and
    decode reads as a window of K does (min(pairs, K·tokens), min(decode KV, K·decodes)),
    and adds its indexer, which scores every pair, 2·H_i·d_i FLOPs each over its
    ``index_n_heads`` x ``index_head_dim`` (whole on every GPU; at the FP8 peak where the
    GPU has one, as its FP8 logits kernel runs), and reads every cached token's indexer key
    (:attr:`sim.cost.specs.ModelSpec.index_key_bytes`).

    Expert parallelism (``ep`` = tp > 1, :func:`sim.cost.shard.expert_shard`): a GPU
    holds E/ep whole experts, so it reads (E/ep)·(1 − (1 − k/E)^new) of them and runs
    the new·k/ep token-expert pairs routed to it on average, times ``ep_imbalance`` for
    the busiest GPU, which sets the step (1: balanced). Every GPU already holds every
    token after attention's all-reduce, so nothing is dispatched: vLLM with one
    data-parallel rank combines the experts' outputs with the same all-reduce as under
    tensor parallelism (its all-to-all kernels serve data-parallel attention only).

    Gated DeltaNet layers (``linear_layers`` of L; Qwen3.5) have no KV cache and no
    pairs: each new token costs 6·dk·dv FLOPs a value head (the recurrence's products
    with the head's dk x dv state), a prefill token 2·C·(dk + dv) more (the chunked
    kernel's in-chunk products, C = 64), at attention's efficiency; each sequence of the
    step reads and writes its state (:attr:`sim.cost.shard.Shard.linear_state_bytes`)
    once. The layers' projections are in P_lin; the attention terms count the
    attention layers only.

    Data-parallel attention (``dp`` > 1 ranks of ``tp`` GPUs, ``ep`` = dp × tp,
    :mod:`sim.core.dpgroup`): :meth:`step_time` prices one rank's own work, everything
    but the routed experts, and :meth:`experts_time` the experts over every rank's
    tokens, which reach them by an all-gather of their hidden states over the dp × tp
    GPUs and leave by a reduce-scatter (vLLM's default all-to-all backend for data
    parallelism), each ``latency + (G−1)/G · tokens·h·b / link_bw`` a MoE layer.
    """

    def __init__(self, model: ModelSpec, gpu: GPUSpec, tp: int, params: RooflineParams,
                 ep: int = 1, ep_imbalance: float = 1.0, dp: int = 1):
        check_dtype(model, gpu)
        self.model, self.gpu, self.tp, self.params = model, gpu, tp, params
        self.ep, self.ep_imbalance, self.dp = ep, ep_imbalance, dp
        self.frontend = params.frontend
        m, p = model, params
        d = shard(model, tp, ep=ep, dp=dp)
        b = m.act_bytes
        flops = gpu.flops * p.flops_efficiency
        # FP8 projections run at the FP8 peak where the GPU has FP8 tensor cores; elsewhere
        # weight-only: FP8 bytes read, bf16 FLOP/s.
        peak, low = gemm_peak(m.dtype, gpu)
        lin_flops = peak * p.fp8_flops_efficiency if low else flops
        # Query/key/value projections a checkpoint keeps at a dtype of their own: their
        # FLOPs at that dtype's peak, their bytes at its width (0 when they are ``dtype``).
        qkv = d.attention_layers * d.qkv_params_per_layer if m.own_qkv_dtype else 0
        qkv_peak, qkv_low = gemm_peak(m.qkv_dtype or m.dtype, gpu)
        qkv_flop_s = 2 * qkv / (qkv_peak * p.fp8_flops_efficiency if qkv_low else flops)
        attn_flops = gpu.flops * p.attention_flops_efficiency
        bw = gpu.mem_bw * p.bandwidth_efficiency
        qkv_mem_s = qkv * m.qkv_dtype_bytes / bw
        head = d.vocab * m.hidden
        attn_kernels = MLA_KERNELS + DSA_KERNELS * m.sparse if m.mla else 2
        # Seconds per unit of each shape quantity, precomputed so a step costs a few flops.
        self._moe_q: float | None = None
        if m.experts:
            kernels = self._moe_terms(d, flops, lin_flops, qkv, qkv_flop_s, qkv_mem_s, bw,
                                      attn_kernels)
        else:
            lin = d.stack_params
            self._lin_flop_s = 2 * (lin - qkv) / lin_flops + qkv_flop_s
            self._lin_mem_s = (lin - qkv) * m.dtype_bytes / bw + qkv_mem_s
            kernels = m.layers * (LINEAR_KERNELS - 2 + attn_kernels)
        self._head_flop_s = 2 * head / flops
        self._head_mem_s = head * b / bw
        self._attn_flop_s = 4 * m.attention_layers * d.heads * m.head_dim / attn_flops
        kernels += self._attention_terms(d, attn_flops, lin_flops, bw)

        # Queries and keys normalised over all heads wait for one more all-reduce a layer
        # under tp (each token's two sums of squares, fp32), between two norm kernels.
        qk_norm = qk_norm_allreduces(m, tp)
        kernels += qk_norm * m.layers
        self._lin_floor_s = kernels * p.kernel_floor_s
        self._attn_floor_s = (m.layers + m.linear_layers) * p.attention_floor_s
        if tp > 1:
            link_bw, link_s = gpu.tp_link(tp)
            self._ar_fixed_s = (2 + qk_norm) * m.layers * link_s
            self._ar_token_s = (m.layers * 2 * (tp - 1) / tp
                                * (2 * m.hidden * b + qk_norm * QK_NORM_BYTES) / link_bw)
        else:
            self._ar_fixed_s = self._ar_token_s = 0.0

    def _moe_terms(self, d: Shard, flops: float, lin_flops: float, qkv: int,
                   qkv_flop_s: float, qkv_mem_s: float, bw: float, attn_kernels: int) -> int:
        """A mixture of experts' linear-stack terms (the class docstring), from one GPU's
        shard ``d``, the dense and projection FLOP/s, the query/key/value projections
        kept at a dtype of their own (``qkv`` weights, their seconds per token and per
        step) and the bandwidth (bytes/s); the kernels the layers launch."""
        m, p, gpu, ep, dp = self.model, self.params, self.gpu, self.ep, self.dp
        b = m.act_bytes
        # Always read: attention, dense MLPs, shared experts, routers (bf16). Per token:
        # those FLOPs and its experts_per_token routed experts'. Routed experts' weights
        # are read once for each expert the step's tokens touch (below).
        always = (d.mixer_params
                  + m.dense_layers * 3 * m.hidden * d.intermediate
                  + d.moe_layers * d.shared_experts * d.shared_expert_params)
        router = d.moe_layers * m.hidden * m.experts
        routed: float = d.moe_layers * m.experts_per_token * d.expert_params
        if ep > 1:  # whole experts, a 1/ep share of the pairs (the busiest GPU's)
            routed = routed * self.ep_imbalance / ep
        # Grouped expert GEMMs reach a smaller share of the peak than dense ones.
        moe_flops = gemm_peak(m.expert_dtype or m.dtype, gpu)[0] * p.moe_flops_efficiency
        self._exp_flop_s = 2 * routed / moe_flops
        self._lin_flop_s = (2 * (always - qkv) / lin_flops + qkv_flop_s
                            + 2 * router / flops
                            + (self._exp_flop_s if dp == 1 else 0.0))
        if m.expert_dtype_bytes == m.dtype_bytes:
            self._lin_mem_s = ((always - qkv) * m.dtype_bytes + router * b) / bw
        else:
            # Shared experts are read at the experts' dtype, the rest at the weights'.
            shared = d.moe_layers * d.shared_experts * d.shared_expert_params
            self._lin_mem_s = ((always - shared - qkv) * m.dtype_bytes
                               + shared * m.expert_dtype_bytes + router * b) / bw
        self._lin_mem_s += qkv_mem_s
        self._moe_mem_s = (d.moe_layers * d.experts * d.expert_params
                           * m.expert_dtype_bytes / bw)
        # Uniform routing: a token leaves a given expert out with probability 1 - k/E,
        # so n tokens touch E·(1 - (1 - k/E)^n) distinct experts on average.
        self._moe_q = 1.0 - m.experts_per_token / m.experts
        # Data-parallel ranks: dispatch (all-gather) and combine (reduce-scatter) of
        # every rank's tokens over the dp x tp GPUs, a MoE layer each.
        self._dc_fixed_s = self._dc_token_s = 0.0
        if dp > 1:
            group = dp * self.tp
            link_bw, link_s = gpu.tp_link(group)
            self._dc_fixed_s = 2 * d.moe_layers * link_s
            self._dc_token_s = (2 * d.moe_layers * (group - 1) / group * m.hidden * b
                                / link_bw)
        return (d.layers * attn_kernels + d.dense_layers * 2
                + d.moe_layers * (MOE_KERNELS + 2 * bool(d.shared_experts)))

    def _attention_terms(self, d: Shard, attn_flops: float, lin_flops: float,
                         bw: float) -> int:
        """The attention terms a model's own kind of layer adds (the class docstring):
        Gated DeltaNet, latent attention, sparse attention and sliding windows, from one
        GPU's shard ``d``, the attention and projection FLOP/s and the bandwidth
        (bytes/s); the kernels they add."""
        m, p, gpu = self.model, self.params, self.gpu
        kernels = 0
        # Gated DeltaNet layers: FLOPs per new token (the recurrence's three products with
        # each value head's state, and the chunked form's in-chunk products for prefill
        # tokens), and every sequence's state read and written once a step.
        self._gdn: tuple[float, float, float] | None = None
        if m.linear_layers:
            dk, dv = m.linear_key_dim, m.linear_value_dim
            heads = d.linear_layers * d.linear_value_heads
            self._gdn = (6 * heads * dk * dv / attn_flops,
                         2 * heads * GDN_CHUNK * (dk + dv) / attn_flops,
                         2 * d.linear_state_bytes / bw)
            # Three projection GEMMs where attention has two; a convolution beside the
            # recurrence's kernel.
            kernels += d.linear_layers
        # MLA: seconds per prefill pair, per decode's cached token, per prefill's context
        # token (the latent's up-projection) — see the class docstring.
        self._mla: tuple[float, float, float] | None = None
        if m.mla:
            n, rho, v, r = m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim, m.kv_lora_rank
            self._mla = (2 * m.layers * d.heads * (n + rho + v) / attn_flops,
                         2 * m.layers * d.heads * (r + rho + r) / attn_flops,
                         2 * m.layers * r * d.heads * (n + v) / lin_flops)
        self._kv_mem_s = d.kv_bytes_per_token / bw
        # Sparse attention: (top-k, indexer seconds per scored pair, seconds per latent
        # read, seconds per indexer key read).
        self._dsa: tuple[float, float, float, float] | None = None
        if m.sparse:
            index_s = m.layers * d.index_key_bytes / bw
            # Its logits multiply FP8 queries by the FP8 key cache: the FP8 peak where
            # the GPU has one.
            index_peak = gemm_peak("fp8", gpu)[0] * p.attention_flops_efficiency
            self._dsa = (float(m.index_topk),
                         2 * m.layers * m.index_n_heads * m.index_head_dim / index_peak,
                         self._kv_mem_s - index_s, index_s)
        self._window = m.sliding_window
        if self._window:
            # Full layers' attention as above, sliding ones' on window-capped pairs and
            # reads (_terms).
            layer_flop_s = 4 * d.heads * m.head_dim / attn_flops
            layer_mem_s = d.kv_bytes_per_token // m.layers / bw
            self._attn_flop_s = layer_flop_s * m.full_layers
            self._kv_mem_s = layer_mem_s * m.full_layers
            self._swa_flop_s = layer_flop_s * m.sliding_layers
            self._swa_mem_s = layer_mem_s * m.sliding_layers
        return kernels

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase (and how FP8 weights run)."""
        dp = f"; data-parallel attention dp={self.dp}" if self.dp > 1 else ""
        return "analytic roofline (efficiencies fitted on public kernel tables)" + dtype_note(
            self.model, self.gpu) + ep_note(self.ep, self.ep_imbalance) + dp

    def _terms(self, shape: StepShape, mx: Any) -> tuple[Any, Any, Any, Any, Any]:
        """(linear, attention, LM head, all-reduce, overhead) seconds of ``shape``."""
        new = shape.new_tokens
        pairs = shape.prefill_pairs + shape.decode_kv
        kv_tokens = shape.context_tokens + new
        p = self.params
        if self._moe_q is None or self.dp > 1:  # a data-parallel rank's experts: apart
            linear = mx(self._lin_flop_s * new, self._lin_mem_s) + self._lin_floor_s
        else:
            touched = 1.0 - self._moe_q ** new  # share of each layer's experts read
            linear = (mx(self._lin_flop_s * new, self._lin_mem_s + self._moe_mem_s * touched)
                      + self._lin_floor_s)
        if self._window:
            attention = self._window_attention(shape, mx)
        elif self._dsa is not None:
            attention = self._sparse_attention(shape, mx)
        elif self._mla is not None:
            pre_s, dec_s, up_s = self._mla
            # Context a prefill chunk attends to: all cached tokens less the decodes'.
            chunk_ctx = shape.context_tokens - shape.decode_kv + shape.decode_seqs
            attn_s = pre_s * shape.prefill_pairs + dec_s * shape.decode_kv + up_s * chunk_ctx
            attention = mx(attn_s, self._kv_mem_s * kv_tokens)
        elif self._gdn is not None:
            tok_s, chunk_s, state_s = self._gdn
            attention = mx(self._attn_flop_s * pairs + tok_s * new
                           + chunk_s * shape.prefill_tokens,
                           self._kv_mem_s * kv_tokens + state_s * shape.seqs)
        else:
            attention = mx(self._attn_flop_s * pairs, self._kv_mem_s * kv_tokens)
        return (linear,
                attention + self._attn_floor_s,
                mx(self._head_flop_s * shape.seqs, self._head_mem_s) + p.kernel_floor_s,
                self._ar_fixed_s + self._ar_token_s * new,
                p.step_overhead_s + p.per_seq_overhead_s * shape.seqs)

    def step_time_plus(self, shape: StepShape, extra_s: float) -> float:
        """Seconds of one iteration of ``shape`` (Python ints) whose device work runs
        ``extra_s`` seconds longer: a data-parallel rank's step with the shared experts."""
        return self.step_time(shape) + extra_s

    def experts_time(self, tokens: int) -> float:
        """Seconds of the routed experts of every MoE layer for ``tokens`` new tokens of
        all data-parallel ranks together (``dp`` > 1): their FLOPs and the weights of
        the experts those tokens touch, the slower of the two, plus their dispatch and
        combine (the class docstring)."""
        assert self._moe_q is not None and self.dp > 1, "experts apart: dp > 1 MoE only"
        touched = 1.0 - self._moe_q ** tokens
        return (max(self._exp_flop_s * tokens, self._moe_mem_s * touched)
                + self._dc_fixed_s + self._dc_token_s * tokens)

    def _sparse_attention(self, shape: StepShape, mx: Any) -> Any:
        """Attention seconds (without its floor) of DeepSeek sparse attention: MLA on the
        top-k pairs and decode reads, the indexer on every pair and cached key (the class
        docstring). The caps are upper bounds, as a sliding window's."""
        assert self._mla is not None and self._dsa is not None
        pre_s, dec_s, up_s = self._mla
        topk, index_s, latent_s, key_s = self._dsa
        mn: Any = min if mx is max else np.minimum
        chunk_ctx = shape.context_tokens - shape.decode_kv + shape.decode_seqs
        kv_tokens = shape.context_tokens + shape.new_tokens
        picked = mn(shape.decode_kv, topk * shape.decode_seqs)
        flop_s = (pre_s * mn(shape.prefill_pairs, topk * shape.prefill_tokens)
                  + dec_s * picked + up_s * chunk_ctx
                  + index_s * (shape.prefill_pairs + shape.decode_kv))
        return mx(flop_s, latent_s * (kv_tokens - shape.decode_kv + picked)
                  + key_s * kv_tokens)

    def _window_attention(self, shape: StepShape, mx: Any) -> Any:
        """Attention seconds (without its floor) of a model with sliding-window layers:
        full layers on every pair and KV token, sliding ones on window-capped counts."""
        w, new = self._window, shape.new_tokens
        mn: Any = min if mx is max else np.minimum
        pairs = shape.prefill_pairs + shape.decode_kv
        kv_tokens = shape.context_tokens + new
        win_pairs = (mn(shape.prefill_pairs, w * shape.prefill_tokens)
                     + mn(shape.decode_kv, w * shape.decode_seqs))
        win_kv = mn(shape.context_tokens, w * shape.seqs) + new
        return mx(self._attn_flop_s * pairs + self._swa_flop_s * win_pairs,
                  self._kv_mem_s * kv_tokens + self._swa_mem_s * win_kv)

    def parts(self, shape: StepShape) -> dict[str, Any]:
        """Seconds of each term for ``shape`` (numbers or arrays): ``linear``,
        ``attention``, ``lm_head``, ``allreduce``, ``overhead``."""
        mx: Any = max if type(shape.new_tokens) is int else np.maximum
        return dict(zip(("linear", "attention", "lm_head", "allreduce", "overhead"),
                        self._terms(shape, mx), strict=True))

    def stage_split(self, shape: StepShape) -> tuple[float, float, float]:
        """Seconds of one step of ``shape`` (Python ints) as a pipeline divides them
        (:class:`sim.cost.pipeline.StageCost`): the layers' work (projections,
        attention, all-reduces), the last stage's own (LM head) and the per-step
        overheads every stage's worker shares."""
        a, b, c, d, e = self._terms(shape, max)
        return a + b + d, c, e

    def host_terms(self) -> tuple[float, float, float, float]:
        """The serving loop's host work within a step (what async scheduling overlaps,
        :mod:`sim.cost.overlap`) as (fixed s, s per sequence, s per decode group, group
        count cap): the step and per-sequence overheads."""
        return self.params.step_overhead_s, self.params.per_seq_overhead_s, 0.0, 0.0

    def step_time(self, shape: StepShape) -> Any:
        """Seconds for one iteration of ``shape``."""
        # One step (Python ints) is priced with Python floats: the same operations in the
        # same order as on arrays, so bit-equal, and without numpy's per-call overhead.
        if type(shape.new_tokens) is int:
            a, b, c, d, e = self._terms(shape, max)
            return a + b + c + d + e
        a, b, c, d, e = self._terms(shape, np.maximum)
        t = a + b + c + d + e
        return float(t) if np.ndim(t) == 0 else t
