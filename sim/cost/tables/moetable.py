"""A mixture-of-experts layer's measured time, from the public MoE tables.

AIConfigurator's ``moe_perf.parquet`` times a whole fused MoE layer (router top-k
excluded or not, as the framework's kernel does it; token permutation, the two grouped
expert GEMMs, the activation and the weighted sum) per framework and GPU, at 1 ... 8,192
tokens, for the shapes of the MoE models the collection targets (hidden size, expert
width, experts per token, experts), at each tensor- and expert-parallel split and three
routing distributions: ``balanced`` (every expert gets the same share of tokens: the
uniform routing servesim's roofline assumes) and two power laws.

servesim uses the rows whose shape is exactly the model's (no interpolation across
shapes: a model the tables did not measure is an error listing the shapes they did),
at ``moe_tp_size`` = tp and ``moe_ep_size`` = 1 (vLLM's default: every GPU holds a
slice of every expert), the routing of :func:`family_routing` unless asked otherwise
(the nearest distribution measured where a collection lacks it), the experts' dtype
(``expert_dtype``, else the weights'), and the kernel with most rows.

Why a power law by default: a trained router does not spread a batch's tokens evenly.
A few experts take a large share, so a prefill's grouped GEMM waits on its busiest
experts (slower than balanced from a few hundred tokens on), while a small decode batch
touches fewer distinct experts than uniform routing would (faster). The tables'
publisher prices serving with exactly these rows: AIConfigurator 0.12.0's model classes
take the power law of exponent 1.01 for DeepSeek's family and 1.2 for the other
mixtures of experts (Mixtral, Qwen3-MoE, gpt-oss); servesim follows that split rather
than choosing a routing by its end-to-end errors.

4-bit experts take the tables' rows named for how the framework runs them: ``nvfp4``,
``int4_wo``, and for mxfp4 experts (gpt-oss) ``w4a16_mxfp4`` (bf16 activations) except
where the framework quantises the activations to MXFP8 (:func:`table_moe_dtype`). Under
expert parallelism (vLLM's ``--enable-expert-parallel``, ep = tp) the rows at
``moe_tp_size`` = 1 and ``moe_ep_size`` = ep: one GPU's E/ep whole experts, fed every
token of the step (each GPU holds them all after attention's all-reduce). Between
measured token counts the time is joined linearly; past the last it grows in proportion.

The kernel is the one with most rows at the build's version, unless a build asks for a
MoE backend by name (:data:`MOE_BACKENDS`): ``triton`` takes the Triton fused-MoE kernel
(vLLM's ``fused_moe``, which ``--moe-backend triton`` or ``VLLM_USE_FLASHINFER_MOE_FP8=0``
select; SGLang's ``fused_moe_triton``), from the newest of the framework's MoE tables up
to the build's version that timed it for the model's shape and split, the note naming
that version when it is not the build's own. vLLM 0.24.0's B200 tables, for one, time
block-scaled FP8 experts only with FlashInfer's TensorRT-LLM kernels, 1.2 to 1.8 times
faster than the Triton kernel its 0.22.0 tables time. ``mxfp8`` takes mxfp4 experts'
``w4a8_mxfp4_mxfp8`` rows (MXFP8 activations: vLLM's
``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``), from the framework's tables as ``triton``
does, else from SGLang's on the same GPU (:data:`DONORS`), the note saying so.
``trtllm-gen`` takes FlashInfer's TensorRT-LLM MoE kernel the same way (:data:`DONORS`):
what TensorRT-LLM runs under ``moe_config.backend: TRTLLM`` on Blackwell, which its own
B200 tables time for block-scaled FP8 experts only with DeepGEMM (2.7 times slower at 4
tokens on 8 GPUs for DeepSeek-V3's layer).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from sim.cost.gpus import GPUS
from sim.cost.specs import ModelSpec
from sim.cost.tables.attntables import default_kernel
from sim.cost.tables.kerneltables import TABLE_DTYPES, Table, load_table, version_key, versions
from sim.errors import ServesimError

# The tables' routing distributions, from uniform to most skewed.
DISTRIBUTIONS = ("balanced", "power_law_1.01", "power_law_1.2")
# What a build may ask for: a distribution, or ``auto`` (:func:`family_routing`).
ROUTINGS = ("auto", *DISTRIBUTIONS)
# The MoE tables' dtype for each servesim expert dtype. mxfp4 experts run with bf16
# activations unless table_moe_dtype says otherwise.
MOE_DTYPES = {**TABLE_DTYPES, "mxfp4": "w4a16_mxfp4", "nvfp4": "nvfp4", "int4": "int4_wo"}
# Frameworks that run mxfp4 experts with MXFP8 activations on Blackwell (FP4 tensor
# cores): TensorRT-LLM (its gpt-oss support matrix: mxfp8 activations on Blackwell with
# its CUTLASS and TRTLLM MoE backends, bf16 on Hopper) and SGLang (the default
# --flashinfer-mxfp4-moe-precision quantises the hidden states to MXFP8 before
# FlashInfer's TRT-LLM-gen kernel). vLLM keeps bf16 activations there by default
# (FlashInfer's "mxfp4_bf16" kernel, the kernel its B200 tables time).
MXFP8_FRAMEWORKS = frozenset({"trtllm", "sglang"})
# MoE kernels a build may ask for by name ("auto": the table's most-measured kernel).
MOE_BACKENDS = ("auto", "triton", "mxfp8", "trtllm-gen")
# Backends a framework's own tables may lack, and whose tables time them instead, both
# FlashInfer's packaging of TensorRT-LLM's MoE kernels: ``mxfp8`` (MXFP8 activations:
# SGLang's default on Blackwell; vLLM runs the same kernel under
# VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1) and ``trtllm-gen`` (TensorRT-LLM's
# ``moe_config.backend: TRTLLM``; SGLang's Blackwell tables time it as
# ``sglang_flashinfer_trtllm_moe``, TensorRT-LLM's own B200 tables only DeepGEMM for
# block-scaled FP8 experts). The kernel's own time does not depend on which server calls
# it: at gpt-oss-120b's shape on B200, SGLang 0.5.14's and vLLM 0.24.0's tables time its
# bf16-activation variant within 4% of each other at 1-8,192 tokens.
DONORS = {"mxfp8": "sglang", "trtllm-gen": "sglang"}


def table_moe_dtype(dtype: str, framework: str, gpu: str) -> str | None:
    """The MoE tables' ``moe_dtype`` for experts of servesim dtype ``dtype`` as
    ``framework`` runs them on ``gpu`` (None: no tables for it): ``w4a8_mxfp4_mxfp8`` for
    mxfp4 experts under :data:`MXFP8_FRAMEWORKS` on a GPU with FP4 tensor cores, else
    :data:`MOE_DTYPES`'s."""
    if dtype == "mxfp4" and framework in MXFP8_FRAMEWORKS and GPUS[gpu].fp4_flops:
        return "w4a8_mxfp4_mxfp8"
    return MOE_DTYPES.get(dtype)


def is_backend(kernel: str, backend: str) -> bool:
    """Whether the tables' kernel source ``kernel`` is MoE backend ``backend``'s (vLLM's
    ``fused_moe`` is its Triton kernel; ``mxfp8`` is a dtype's rows, whatever their
    kernel; ``trtllm-gen`` is FlashInfer's TensorRT-LLM MoE as vLLM and SGLang name
    it, and TensorRT-LLM's own ``moe_torch_flow_min_latency``: AIConfigurator's collector
    gives that name to the rows it times in the TRTLLM backend's min-latency mode, its
    trtllm-gen kernels)."""
    if backend in ("auto", "mxfp8"):
        return True
    if backend == "trtllm-gen":
        return "flashinfer_trtllm" in kernel or kernel == "moe_torch_flow_min_latency"
    return "triton" in kernel or kernel == "vllm_fused_moe"


@dataclass(frozen=True)
class MoeTimes:
    """One MoE layer's measured seconds at ``tokens`` (increasing); ``kernel`` the
    kernel source, ``dtype`` the tables' ``moe_dtype`` read, ``note`` what was
    selected."""

    tokens: np.ndarray
    seconds: np.ndarray
    kernel: str
    dtype: str
    note: str

    def at(self, m: np.ndarray) -> np.ndarray:
        """Seconds at token counts ``m``: linear between measured counts, in proportion
        past the last, the first count's time below it."""
        m = np.asarray(m, dtype=float)
        inside = np.interp(m, self.tokens, self.seconds)
        last_t, last_s = float(self.tokens[-1]), float(self.seconds[-1])
        return np.where(m > last_t, last_s * m / last_t, inside)


def family_routing(model: ModelSpec) -> str:
    """The routing skew the tables' publisher prices ``model``'s family with: the power
    law of exponent 1.01 for DeepSeek's (latent attention), 1.2 for the others."""
    return "power_law_1.01" if model.mla else "power_law_1.2"


def routing_order(want: str) -> list[str]:
    """``want`` first, then the other distributions by how near their skew is (the
    less skewed first on a tie)."""
    i = DISTRIBUTIONS.index(want)
    return sorted(DISTRIBUTIONS, key=lambda d: (abs(DISTRIBUTIONS.index(d) - i),
                                                DISTRIBUTIONS.index(d)))


@lru_cache(maxsize=16)
def moe_table(gpu: str, framework: str, version: str) -> Table:
    """The MoE table of ``gpu`` under ``framework`` at ``version``, read once per process."""
    return load_table(gpu, "moe", framework, version, "moe_perf")


def moe_times(gpu: str, framework: str, version: str, model: ModelSpec, tp: int,
              ep: int = 1, routing: str = "auto", backend: str = "auto") -> MoeTimes:
    """The MoE layer of ``model`` on one of ``tp`` GPUs, experts split over ``ep`` of them
    whole when ``ep`` > 1, tokens routed as ``routing`` (one of :data:`ROUTINGS`), run by
    MoE ``backend`` (one of :data:`MOE_BACKENDS`; see the module doc)."""
    if routing not in ROUTINGS:
        raise ServesimError(f"unknown routing {routing!r}; valid: {', '.join(ROUTINGS)}",
                            where="--routing")
    if backend not in MOE_BACKENDS:
        raise ServesimError(f"unknown MoE backend {backend!r}; valid: "
                            f"{', '.join(MOE_BACKENDS)}", where="--moe-backend")
    dtype = model.expert_dtype or model.dtype
    want = table_moe_dtype(dtype, framework, gpu)
    if backend == "mxfp8":
        if dtype != "mxfp4":
            raise ServesimError(f"got 'mxfp8' for {dtype} experts: MXFP8 activations are a "
                                "kernel for mxfp4 experts", where="--moe-backend")
        want = "w4a8_mxfp4_mxfp8"
    if want is None:
        raise ServesimError(f"no MoE tables for {dtype} experts; built: "
                            f"{', '.join(MOE_DTYPES)}", where="--dtype")
    if backend == "auto":
        times = _moe_times(moe_table(gpu, framework, version), model, tp, ep, routing, backend,
                           want)
        assert times is not None  # the most-measured kernel is always there
        return times
    older = [v for v in versions(gpu, "moe", framework) if version_key(v) <= version_key(version)]
    tried = [(framework, v) for v in reversed(older or [version])]
    donor = DONORS.get(backend)
    if donor is not None and framework != donor:
        tried += [(donor, v) for v in reversed(versions(gpu, "moe", donor))]
    for fw, v in tried:
        try:
            times = _moe_times(moe_table(gpu, fw, v), model, tp, ep, routing, backend, want)
        except ServesimError:
            continue  # this version did not time the shape or split at all
        if times is None:
            continue
        if fw != framework:
            lacking = f"{want} rows" if backend == "mxfp8" else f"{backend} kernel"
            times = replace(times, note=f"{times.note} (the {fw} {v} tables': {framework}'s "
                                        f"up to {version} time no {lacking} for it)")
        elif v != version:
            times = replace(times, note=f"{times.note} (the {framework} {v} tables': those "
                                        f"of {version} time no {backend} kernel for it)")
        return times
    also = f" or the {donor} tables" if len(tried) > len(older or [version]) else ""
    raise ServesimError(f"no {backend} MoE kernel for {model.name} at tp {tp}, expert "
                        f"parallelism {ep} in the {framework} tables on {gpu} up to "
                        f"{version} ({', '.join(older) or 'none'}){also}",
                        where="--moe-backend")


def _moe_times(table: Table, model: ModelSpec, tp: int, ep: int, routing: str,
               backend: str, want: str) -> MoeTimes | None:
    """:func:`moe_times` from one version's ``table``, at its ``moe_dtype`` ``want``:
    None when ``backend`` names a kernel the table did not time for this shape and split
    (errors for what it lacks whatever the kernel)."""
    want_routing = family_routing(model) if routing == "auto" else routing
    rows = table.where(hidden_size=model.hidden, inter_size=model.expert_intermediate,
                       topk=model.experts_per_token, num_experts=model.experts)
    if not len(rows):
        c = table.columns
        have = sorted(set(zip(c["hidden_size"].tolist(), c["inter_size"].tolist(),
                              c["topk"].tolist(), c["num_experts"].tolist(), strict=True)))
        raise ServesimError(
            f"{table.path}: no MoE rows for hidden {model.hidden}, expert width "
            f"{model.expert_intermediate}, {model.experts_per_token} of {model.experts} "
            f"experts; measured (hidden, width, top-k, experts): "
            f"{', '.join(map(str, have))}")
    typed = rows.where(moe_dtype=want)
    if not len(typed):
        raise ServesimError(f"{table.path}: no {want} MoE rows for this shape; dtypes: "
                            f"{', '.join(rows.values('moe_dtype'))}")
    moe_tp = tp if ep == 1 else tp // ep
    at_split = typed.where(moe_tp_size=moe_tp, moe_ep_size=ep)
    if not len(at_split):
        if ep > 1:
            eps = typed.where(moe_tp_size=moe_tp).values("moe_ep_size")
            raise ServesimError(f"{table.path}: no {want} MoE rows at expert parallelism "
                                f"{ep} (expert tp {moe_tp}); ep measured: "
                                f"{', '.join(map(str, eps))}", where="--ep")
        tps = typed.where(moe_ep_size=1).values("moe_tp_size")
        raise ServesimError(f"{table.path}: no {want} MoE rows at tp={tp} (expert "
                            f"parallelism 1); tp measured: {', '.join(map(str, tps))}",
                            where="--tp")
    chosen = next((d for d in routing_order(want_routing)
                   if len(at_split.where(distribution=d))), None)
    if chosen is None:
        raise ServesimError(f"{table.path}: no {want} MoE rows under a known routing at "
                            f"tp={tp}; distributions: "
                            f"{', '.join(map(str, at_split.values('distribution')))}")
    split = at_split.where(distribution=chosen)
    kernel = default_kernel(split)
    if not is_backend(kernel, backend):
        # The backend's kernel with the most rows, as default_kernel picks among all.
        fits = [k for k in split.values("kernel_source") if is_backend(k, backend)]
        if not fits:
            return None
        kernel = max(fits, key=lambda k: len(split.where(kernel_source=k)))
    one = split.where(kernel_source=kernel)
    tokens, inverse = np.unique(one.columns["num_tokens"], return_inverse=True)
    secs = np.zeros(len(tokens))
    # A count measured more than once: its median.
    for i in range(len(tokens)):
        secs[i] = float(np.median(np.asarray(one.columns["latency"])[inverse == i])) / 1e3
    stand_in = "" if chosen == want_routing else f" ({want_routing} not measured here)"
    note = (f"MoE layer: {kernel}, {want}, {chosen} routing{stand_in}, tp {moe_tp}, expert "
            f"parallelism {ep}, measured at {int(tokens[0])}-{int(tokens[-1])} tokens")
    return MoeTimes(tokens.astype(float), secs, kernel, want, note)
