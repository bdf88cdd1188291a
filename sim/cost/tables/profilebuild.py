"""Build a cost profile from public measured kernel tables, for one model on one GPU.

For one tensor-parallel rank of the model the builder takes its real GEMM shapes and
prices every step-time component of :data:`sim.cost.profile.FORMS` from NVIDIA
AIConfigurator's tables (:mod:`sim.cost.tables.kerneltables`):

- ``linear`` (per layer): fused QKV (n = (H + 2·KV)·d / tp, k = h), attention output
  (n = h, k = H·d / tp), fused gate+up (n = 2·I / tp, k = h), down (n = h, k = I / tp)
  from the GEMM table at every measured m (:mod:`sim.cost.tables.gemmtable`), plus the layer's
  memory-bound kernels (two fused residual-add RMSNorms, rotary embedding, the KV-cache
  write, SiLU-and-multiply): 5 launches and their bytes at the bandwidth the same GEMM
  table shows. Kept as knots over new tokens; past the last, the fitted formula.
- ``lm_head``: the LM-head GEMM (n = vocab / tp) on one row per sequence, the final
  norm, the logits all-gather under tp and the sampler's passes over fp32 logits.
- ``allreduce``: two per layer and one for the vocabulary-parallel embedding, of
  new_tokens·h·2 bytes each (:mod:`sim.cost.tables.commtable`), and for a model whose
  query/key norm spans all heads (MiniMax-M2) one more a layer of new_tokens·8 bytes
  (with one more norm kernel in ``linear``); zero at tp = 1.
- ``prefill_attention``: its formula fitted to the prefill table at the rank's heads;
  the tables have no cached prefix, so a chunk's pairs to cached context are priced as
  its own pairs and its cached tokens at the decode table's per-token read.
- ``decode_attention``: the decode table itself, a grid over entries and KV per entry.
- A model with sliding-window layers (gpt-oss) takes both attention terms as the mean
  of its full and sliding layers (:mod:`sim.cost.tables.windowattn`), one with Gated
  DeltaNet layers (Qwen3.5) as the mean of its attention and linear-attention layers,
  projections and token mixing alike (:mod:`sim.cost.tables.gdntable`); a mixture of
  experts its MoE layer from the MoE tables in the experts' own dtype (gpt-oss: mxfp4,
  :mod:`sim.cost.tables.moetable`).
- ``step`` and ``frontend``: not in any table (scheduling, input preparation, the API
  server's per-request work); fitted priors per framework (:mod:`sim.cost.priors`), named
  as such in the profile. ``host``, ``in_situ`` and ``wake`` are zero: the priors hold
  what a server adds around its kernels.

Every component records where its prices came from and its held-out error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.cost.gpus import GPUS, dtype_note
from sim.cost.measured import QUANT_VARIANTS
from sim.cost.presets import MODELS
from sim.cost.priors import Priors, framework_priors
from sim.cost.profile import FORMS
from sim.cost.profilefile import FRAMEWORK_NAMES
from sim.cost.profilekeys import SCHEMA
from sim.cost.shard import ep_note, shard
from sim.cost.specs import ModelSpec, recorded_fields
from sim.cost.tables.kerneltables import (
    FRAMEWORKS,
    TABLE_DTYPES,
    coverage,
    describe_coverage,
    wheel_version,
)
from sim.cost.tables.profilefmt import (
    component_entry,
    err_stats,
    formula_fit,
    knot_lists,
    seqs_shape,
    sig6,
    tokens_shape,
)
from sim.cost.tables.profileparts import (
    attention_components,
    gemm_tables,
    head_and_allreduce,
    linear_stack,
)
from sim.errors import ServesimError

GPU_LABELS = {"a100-80gb": "A100-SXM-80GB", "h100-sxm": "H100-SXM", "h200": "H200-SXM",
              "b200": "B200-SXM", "l40s": "L40S", "gb200": "GB200", "b300": "B300-SXM",
              "gb300": "GB300", "rtx-pro-6000": "RTX-PRO-6000"}
# Tokens up to which a framework runs a step inside a CUDA graph by default (vLLM v1:
# capture sizes to min(2·max_num_seqs, 512); SGLang: cuda_graph_max_bs 256 on 80 GB
# parts; TensorRT-LLM's PyTorch backend: 128): its all-reduces then run graph-captured.
@dataclass(frozen=True)
class BuildSpec:
    """What to build: ``model`` on ``tp`` GPUs of ``gpu`` (servesim names) under
    ``framework`` at table ``version`` (None: the newest); the model's ``dtype`` picks
    the GEMM table of its projections and its ``kv_dtype`` the attention tables."""

    model: ModelSpec
    gpu: str
    framework: str
    tp: int = 1
    version: str | None = None
    ep: int = 1  # expert parallelism (ep = tp, or dp x tp): experts whole, E/ep a GPU
    # How a mixture of experts' router spreads tokens: a name of
    # sim.cost.tables.moetable.ROUTINGS ("auto": the model family's power law).
    routing: str = "auto"
    # Which MoE kernel prices its experts: a name of sim.cost.tables.moetable.MOE_BACKENDS
    # ("auto": the tables' most-measured kernel; "triton": the Triton fused-MoE kernel;
    # "mxfp8": mxfp4 experts with MXFP8 activations).
    moe_backend: str = "auto"
    # Data-parallel attention ranks sharing the experts: the profile is one rank's, its
    # routed experts apart (components.experts, over every rank's tokens).
    dp: int = 1


def resolve_version(spec: BuildSpec) -> str:
    """The table version to build from: the one asked for, or the newest with both
    GEMM and attention tables; an error listing what exists."""
    if spec.framework not in FRAMEWORKS:
        raise ServesimError(f"unknown framework {spec.framework!r}; valid: "
                            f"{', '.join(FRAMEWORKS)}", where="--framework")
    if spec.gpu not in coverage():
        raise ServesimError(f"no tables for GPU {spec.gpu!r}; tables exist for: "
                            f"{describe_coverage()}", where="--gpu")
    have = coverage()[spec.gpu].get(spec.framework, [])
    if not have:
        raise ServesimError(f"no {spec.framework} tables for {spec.gpu}; tables exist for: "
                            f"{describe_coverage()}", where="--framework")
    if spec.version is None:
        return have[-1]
    if spec.version not in have:
        raise ServesimError(f"got {spec.version!r}: no {spec.framework} tables of that "
                            f"version for {spec.gpu}; versions: {', '.join(have)}",
                            where="--version")
    return spec.version


def _check_spec(spec: BuildSpec) -> None:
    """Refuse what the tables cannot build: a dtype they do not time, NVFP4 on a GPU
    without FP4 tensor cores, data-parallel attention for a dense model."""
    m, gpu = spec.model, spec.gpu
    if m.dtype not in TABLE_DTYPES:
        # The model's own dtype where --dtype was not given (tiny is fp32): say so.
        raise ServesimError(f"dtype {m.dtype!r} (of {m.name}, unless --dtype set it) is not "
                            f"built from the tables; built: {', '.join(TABLE_DTYPES)}: give "
                            "one with --dtype", where="--dtype")
    if m.dtype == "nvfp4" and not GPUS[gpu].fp4_flops:
        with_fp4 = ", ".join(g for g in GPUS if GPUS[g].fp4_flops)
        raise ServesimError(f"nvfp4 projections run on FP4 tensor cores, which {gpu} lacks, "
                            f"so its tables time no nvfp4 GEMM (GPUs with them: {with_fp4}); "
                            "cost: roofline prices nvfp4 weights there as weight-only",
                            where="--dtype")
    if spec.dp > 1 and not m.experts:
        raise ServesimError(f"got {spec.dp}, but model {m.name} is dense: data-parallel "
                            "attention ranks share a mixture of experts' experts",
                            where="--dp")


def build_profile(spec: BuildSpec, priors: Priors | None = None) -> dict[str, Any]:
    """The profile of ``spec`` as a plain mapping in schema order (see the module doc)."""
    version = resolve_version(spec)
    m, fw, gpu = spec.model, spec.framework, spec.gpu
    _check_spec(spec)
    rank = shard(m, spec.tp, where="--tp", ep=spec.ep, ep_where="--ep", dp=spec.dp)
    priors = priors if priors is not None else framework_priors(fw)
    notes: list[str] = []
    g = gemm_tables(spec, version, notes)
    gemm_kernel = g.source.kernel
    linear, interp, moe, experts = linear_stack(spec, version, rank, g, notes)
    head, allreduce, comm = head_and_allreduce(spec, version, rank, g, notes)
    attention, pre_kernel, dec_kernel = attention_components(spec, version, rank, g, notes)
    ms, lin_ms = g.source.table.ms, g.lin.ms  # an FP8 table may time other token counts
    lin_fit = formula_fit("linear", lin_ms, linear, tokens_shape)
    head_fit = formula_fit("lm_head", ms, head, seqs_shape)
    comps = {
        "step": {**component_entry("step", {"const_s": priors.step_const_s,
                                   "per_seq_s": priors.step_per_seq_s,
                                   "per_new_token_s": sig6(rank.hidden * 2 / g.bandwidth),
                                   "per_group_s": 0.0, "group_seqs": 0.0}),
                 "fit": {"source": f"prior: {priors.source}; per_new_token_s: the embedding "
                                   "read at the GEMM table's bandwidth"}},
        "linear": {**component_entry("linear", lin_fit["coef"]), **knot_lists(lin_ms, linear),
                   "fit": {"source": f"tables: gemm {g.lin_kernel} ({g.lin_fw} {g.lin_version})"
                                     if g.lin_fw != fw
                                     else f"tables: gemm {g.lin_kernel} ({version})",
                           "interpolation": err_stats(interp),
                           "formula_past_knots": lin_fit["fit"]}},
        **attention,
        "lm_head": {**component_entry("lm_head", head_fit["coef"]), **knot_lists(ms, head),
                    "fit": {"source": f"tables: gemm {gemm_kernel} ({version}); norm and "
                                      "sampler at the table's bandwidth",
                            "formula_past_knots": head_fit["fit"]}},
        "allreduce": allreduce,
        "in_situ": {**component_entry("in_situ", dict.fromkeys(FORMS["in_situ"].coefs, 0.0)),
                    "fit": {"source": "none (kernel tables are timed in place)"}},
        "host": {**component_entry("host", dict.fromkeys(FORMS["host"].coefs, 0.0)),
                 "fit": {"source": "none (in step's prior)"}},
        **({} if experts is None else {"experts": experts}),
        "frontend": {"coef": {"request_s": priors.request_s,
                              "per_prompt_token_s": priors.per_prompt_token_s,
                              "response_s": priors.response_s, "jitter_s": priors.jitter_s},
                     "fit": {"source": f"prior: {priors.source}"}},
    }
    mxfp8 = moe is not None and moe.dtype == "w4a8_mxfp4_mxfp8"
    label = f"{FRAMEWORK_NAMES[fw]} {version} on {GPU_LABELS.get(gpu, gpu)}" + dtype_note(
        m, GPUS[gpu], mxfp8) + ep_note(spec.ep) + (
        f"; data-parallel attention dp={spec.dp}" if spec.dp > 1 else "")
    return {
        "schema": SCHEMA,
        "source": {
            "kind": "measured-kernels", "phrase": f"measured kernels: {label}",
            "tables": f"NVIDIA AIConfigurator kernel tables, aiconfigurator-core "
                      f"{wheel_version()} (Apache-2.0)",
            "framework": fw, "version": version, "gpu": gpu,
            "kernels": {"gemm": gemm_kernel,
                        **({"linear_gemm": g.lin_kernel} if g.lin_kernel != gemm_kernel
                           else {}),
                        **({"moe": moe.kernel} if moe else {}),
                        "prefill_attention": pre_kernel,
                        "decode_attention": dec_kernel, **(comm.sources if comm else {})},
            "derived": {"kernel_floor_s": sig6(g.floor_s), "bandwidth_bytes_s": sig6(g.bandwidth)},
            "not_in_tables": "per-step scheduling, input preparation and host overhead; the "
                             "API server's per-request work (step and frontend priors)",
            "notes": notes,
        },
        "device": {"name": gpu, "reported": g.source.device},
        "dtype": m.dtype,
        "tp": spec.tp,
        **({"ep": spec.ep} if spec.ep > 1 else {}),
        **({"dp": spec.dp} if spec.dp > 1 else {}),
        "model": recorded_fields(m),
        "components": comps,
    }


def profile_name(spec: BuildSpec) -> str:
    """The shipped file stem of ``spec``: ``<gpu>-<model>-tp<N>[-dp<N>][-ep<N>]-<framework>``, then
    ``-<dtype>`` for FP8 or NVFP4 weights and ``-kvfp8`` for an FP8 KV cache."""
    m = spec.model
    base = MODELS.get(m.name)
    # A preset that is FP8 by itself (llama-3.3-70b-fp8) does not repeat it. The suffixes
    # are those sim.cost.measured parses back.
    quant = f"-{m.dtype}" if m.dtype in QUANT_VARIANTS and (base is None or base.dtype != m.dtype) \
        else ""
    kv = "-kvfp8" if m.kv_dtype == "fp8" else ""
    ep = f"-ep{spec.ep}" if spec.ep > 1 else ""
    dp = f"-dp{spec.dp}" if spec.dp > 1 else ""
    return f"{spec.gpu}-{m.name}-tp{spec.tp}{dp}{ep}-{spec.framework}{quant}{kv}"
