"""The shipped measured profiles: which exist, and the one that matches a scenario.

``sim/data/profiles/`` holds profiles built from the public kernel tables
(:mod:`sim.cost.tables.profilebuild`) for every shipped architecture on every GPU the tables
cover, at tensor-parallel degrees 1, 2, 4 and 8 where the model fits, for vLLM and
SGLang. A file's stem says what it is: ``<gpu>-<model>-tp<N>-<framework>``.
Profiles built with expert parallelism add ``-ep<N>`` after the tp (:data:`SHIPPED_EP`),
those of data-parallel attention ranks ``-dp<N>`` before it (:data:`SHIPPED_DP`).
``cost: measured`` picks the one matching the scenario's GPU, model, tp, ep and framework;
a model matches a profile built for a preset of the same architecture (Llama 3.1 8B
runs Llama 3 8B's kernels: only the context length differs).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from sim.cost.dtypes import FP8_WEIGHTS
from sim.cost.gpus import GPUS, weight_only
from sim.cost.presets import MODELS
from sim.cost.profilefile import PROFILE_DIR
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# What `servesim profile ship` builds: one preset per distinct architecture.
SHIPPED_MODELS = ("llama-3-8b", "llama-3-70b", "mistral-7b", "qwen2.5-7b", "qwen2.5-32b",
                  "qwen3-32b")
# Shipped with FP8 weights too (per-tensor scales, KV cache auto), on every GPU whose
# tables time FP8 GEMMs: the architectures of public FP8 releases of Llama 3.1 8B and
# 70B (and Llama 3.3 70B), and of Qwen3-32B, served from its own FP8 weights in the
# public end-to-end runs.
SHIPPED_FP8 = ("llama-3-8b", "llama-3-70b", "qwen3-32b")
# Shipped with NVFP4 weights too (every projection W4A4, KV cache auto), on every GPU with
# FP4 tensor cores whose tables time NVFP4 GEMMs: the architectures of NVIDIA's FP4
# releases of Llama 3.1 8B and 70B (and Llama 3.3 70B) and of Qwen3-32B.
SHIPPED_FP4 = ("llama-3-8b", "llama-3-70b", "qwen3-32b")
# Weight dtypes whose shipped profiles are variants of their own (file stems -<dtype>).
QUANT_VARIANTS = (*FP8_WEIGHTS, "nvfp4")
# Mixtures of experts, on every GPU and tp whose MoE tables measured their shape.
SHIPPED_MOE = ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "minimax-m2.5")
# With expert parallelism (vLLM's --enable-expert-parallel, ep = tp), vLLM only: the
# setups of the public end-to-end rows served so (Qwen3-235B-A22B-FP8 on 2 and 4 H200s)
# and the 8-H200 one docs/models.md sets beside tensor parallelism.
SHIPPED_EP = (("qwen3-235b-a22b-fp8", "h200", 2), ("qwen3-235b-a22b-fp8", "h200", 4),
              ("qwen3-235b-a22b", "h200", 8))
# Data-parallel attention (vLLM's --data-parallel-size N --enable-expert-parallel, one GPU
# a rank: tp 1, ep = N), vLLM only: (model, GPU, dp), beside SHIPPED_EP's layouts.
SHIPPED_DP = (("qwen3-235b-a22b", "h200", 8), ("qwen3-30b-a3b", "h100-sxm", 2),
              ("qwen3-30b-a3b", "h100-sxm", 4), ("deepseek-v3", "h200", 8),
              ("deepseek-v3", "b200", 8))
SHIPPED_FRAMEWORKS = ("vllm", "sglang")
# Latent-attention models (their release's FP8 block-scaled weights), at the tps where
# they fit.
SHIPPED_MLA = ("deepseek-v3", "kimi-k2.5")
# Sparse-attention models (DeepSeek sparse attention; FP8 as released), on every GPU and
# tp whose sparse-attention module tables time their architecture.
SHIPPED_DSA = ("glm-5", "deepseek-v3.2")
# Models with Gated DeltaNet layers (Qwen3.5, bf16 as released), on every GPU and tp whose
# linear-attention tables measured their heads (and MoE tables their experts).
SHIPPED_HYBRID = ("qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b")
SHIPPED_TPS = (1, 2, 4, 8)
# gpt-oss (mxfp4 experts, sliding-window layers) at the tps each is served at, on the
# GPUs of the public end-to-end runs, and the RTX PRO 6000 (120b fits one card): 20b fits
# one GPU with room to spare.
SHIPPED_GPTOSS: dict[str, tuple[int, ...]] = {"gpt-oss-20b": (1, 2),
                                              "gpt-oss-120b": (1, 2, 4, 8)}
SHIPPED_GPTOSS_GPUS = ("h100-sxm", "h200", "b200", "rtx-pro-6000")
_REST = re.compile(r"^(?P<model>.+)-tp(?P<tp>\d+)(?:-dp(?P<dp>\d+))?(?:-ep(?P<ep>\d+))?"
                   r"-(?P<fw>[a-z]+)"
                   r"(?:-(?P<dtype>" + "|".join(QUANT_VARIANTS) + r"))?(?P<kv>-kvfp8)?$")


@dataclass(frozen=True)
class MeasuredConfig:
    """``cost: {measured: {framework: ...}}``: the shipped profile of this framework
    (vLLM by default) for the scenario's GPU, model and tp."""

    framework: Literal["vllm", "sglang"] = "vllm"


# ModelSpec fields no kernel's time depends on (architecture() leaves them out).
UNTIMED = ("name", "max_context", "rope_theta")


def architecture(model: ModelSpec) -> tuple[object, ...]:
    """What a model's kernels depend on: every dimension but its name, context length
    and rotary base."""
    moe = (model.experts, model.experts_per_token, model.expert_intermediate,
           model.shared_experts, model.dense_layers) if model.experts else ()
    # Only when set, so the existing profiles' architectures stay what they were.
    newer = (model.expert_dtype, model.sliding_window, model.sliding_layers,
             model.attention_sinks)
    mla = (model.kv_lora_rank, model.q_lora_rank, model.qk_rope_head_dim,
           model.qk_nope_head_dim, model.v_head_dim) if model.mla else ()
    # Only when sparse, so latent-attention profiles' architectures stay what they were.
    dsa = (model.index_topk, model.index_n_heads, model.index_head_dim) if model.sparse else ()
    gdn = (model.linear_layers, model.linear_key_heads, model.linear_value_heads,
           model.linear_key_dim, model.linear_value_dim, model.linear_conv,
           model.attn_output_gate) if model.linear_layers else ()
    return (model.layers, model.hidden, model.heads, model.kv_heads, model.head_dim,
            model.intermediate, model.vocab, model.dtype, model.kv_dtype, model.qkv_bias,
            model.tie_embeddings, *moe, *(newer if any(newer) else ()), *mla, *dsa, *gdn,
            *((model.own_qkv_dtype,) if model.own_qkv_dtype else ()))



@dataclass(frozen=True)
class Shipped:
    """One shipped measured profile, parsed from its file stem."""

    stem: str
    gpu: str
    model: str
    tp: int
    framework: str
    dtype: str = ""  # the weights' dtype where the stem names one (else the preset's)
    kv_dtype: str = "auto"
    ep: int = 1  # expert parallelism (``-ep<N>`` in the stem)
    dp: int = 1  # data-parallel attention ranks (``-dp<N>``)

    @property
    def spec(self) -> ModelSpec:
        """The model this profile was built for: the preset, with the stem's dtypes."""
        base = MODELS[self.model]
        return dataclasses.replace(base, dtype=self.dtype or base.dtype,  # type: ignore[arg-type]
                                   kv_dtype=self.kv_dtype)  # type: ignore[arg-type]


@lru_cache(maxsize=1)
def shipped() -> tuple[Shipped, ...]:
    """Every shipped profile whose stem names a preset, GPU, tp and framework (the
    folder is package data: read once per process)."""
    out = []
    # GPU names contain dashes too (h100-sxm): the longest known one the stem starts with.
    gpus = sorted(GPUS, key=len, reverse=True)
    for path in sorted(PROFILE_DIR.glob("*.yaml")) if PROFILE_DIR.is_dir() else []:
        gpu = next((g for g in gpus if path.stem.startswith(g + "-")), None)
        m = _REST.match(path.stem[len(gpu) + 1:]) if gpu else None
        if gpu and m and m["model"] in MODELS:
            out.append(Shipped(path.stem, gpu, m["model"], int(m["tp"]), m["fw"],
                               m["dtype"] or "", "fp8" if m["kv"] else "auto",
                               int(m["ep"] or 1), int(m["dp"] or 1)))
    return tuple(out)


def _changed_fields(model: ModelSpec) -> str:
    """How ``model`` differs from the preset of its name ("" when it is none, or equal):
    ``dtype int4 (the preset's bf16), layers 7 (32)``."""
    base = MODELS.get(model.name)
    if base is None or base == model:
        return ""
    diff = [(f.name, getattr(model, f.name), getattr(base, f.name))
            for f in dataclasses.fields(model) if getattr(model, f.name) != getattr(base, f.name)]
    return ", ".join(f"{k} {v!r} (the preset's {b!r})" for k, v, b in diff)


def find(model: ModelSpec, gpu: str, tp: int, framework: str, ep: int = 1,
         dp: int = 1) -> str:
    """The stem of the shipped profile for ``model`` on ``tp`` GPUs of ``gpu`` under
    ``framework``, with expert parallelism ``ep`` over ``dp`` data-parallel attention
    ranks; an error listing what exists when none matches."""
    arch = architecture(model)
    same = [s for s in shipped() if architecture(s.spec) == arch]
    for s in same:
        if (s.gpu, s.tp, s.framework, s.ep, s.dp) == (gpu, tp, framework, ep, dp):
            return s.stem
    if ep > 1:
        have_ep = sorted(f"{s.framework} tp {s.tp}" + (f" dp {s.dp}" if s.dp > 1 else "")
                         + f" ep {s.ep}" for s in same if s.gpu == gpu and s.ep > 1)
        ranks = f" over {dp} data-parallel ranks" if dp > 1 else ""
        build = "--dp --ep" if dp > 1 else "--ep"
        raise ServesimError(f"no measured profile for {model.name} at tp={tp} with expert "
                            f"parallelism ep={ep}{ranks} under {framework} on {gpu}; shipped "
                            f"with expert parallelism there: {', '.join(have_ep) or 'none'} "
                            f"(build one with `servesim profile build {build}` and set cost: "
                            "{profile: FILE}, or use cost: roofline)", where="cost.measured")
    same = [s for s in same if s.ep == 1]
    if not same:
        changed = _changed_fields(model)
        quantised = model.dtype in QUANT_VARIANTS or model.kv_dtype != "auto"
        if changed and not quantised:  # (FP8 and FP4 variants: which ship, below)
            raise ServesimError(f"no measured profile for {model.name} with {changed}: the "
                                f"shipped {model.name} profiles price the preset as given; "
                                "build one for this variant with `servesim profile build`, or "
                                "use cost: roofline", where="cost.measured")
        names = sorted({s.model for s in shipped()})
        dtypes = "" if not quantised else (
            f" with {model.dtype} weights"
            + (f", {model.own_qkv_dtype} query/key/value projections"
               if model.own_qkv_dtype else "")
            + f" and KV cache {model.kv_dtype}: FP8 profiles ship "
            f"for {', '.join(SHIPPED_FP8)} (fp8 weights, KV cache auto) on GPUs with FP8 "
            f"tensor cores, NVFP4 ones for {', '.join(SHIPPED_FP4)} (nvfp4 weights, KV cache "
            f"auto) on GPUs with FP4 tensor cores")
        raise ServesimError(f"no measured profile for model {model.name}{dtypes}"
                            f"{'; ' if dtypes else ': '}measured "
                            f"profiles cover {', '.join(names) or 'nothing'} (or the same "
                            f"architectures); build one with `servesim profile build`, or "
                            "use cost: roofline", where="cost.measured")
    tps: dict[str, list[int]] = {}
    for s in same:
        if s.gpu == gpu:
            tps.setdefault(s.framework, []).append(s.tp)
    if model.dtype in QUANT_VARIANTS and weight_only(model, GPUS[gpu]):
        bits = "FP4" if model.dtype == "nvfp4" else "FP8"
        raise ServesimError(f"no measured profile for {model.name} with {model.dtype} weights "
                            f"on {gpu}: it has no {bits} tensor cores and the tables time no "
                            f"{bits} GEMM there; cost: roofline prices its {bits} weights as "
                            "weight-only", where="cost.measured")
    here = "; ".join(f"{fw} tp {', '.join(map(str, sorted(v)))}" for fw, v in sorted(
        tps.items(), key=lambda kv: SHIPPED_FRAMEWORKS.index(kv[0])
        if kv[0] in SHIPPED_FRAMEWORKS else len(SHIPPED_FRAMEWORKS)))
    gpus = sorted({s.gpu for s in same})
    have = f"shipped on {gpu}: {here}" if here else f"GPUs with one: {', '.join(gpus)}"
    from sim.cost.tables.kerneltables import BUILD_ONLY_DIRS

    if gpu in BUILD_ONLY_DIRS and not here:
        # The public tables time this GPU though no profile ships for it: say how to build.
        have += (f"; the public kernel tables time {gpu}: build a profile with `servesim "
                 f"profile build --gpu {gpu} --model {model.name} --tp {tp} --framework "
                 f"{framework} --out FILE` (the measured extra) and set cost: "
                 "{profile: FILE}")
    raise ServesimError(f"no measured profile for {model.name} at tp={tp} under {framework} "
                        f"on {gpu}; {have}; or use cost: roofline", where="cost.measured")
