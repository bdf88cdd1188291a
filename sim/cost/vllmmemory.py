"""How a vLLM release profiles memory before it sizes the KV cache: the rules that set
the terms :func:`sim.cost.memory.memory_budget` subtracts.

vLLM's V1 engine sizes the cache as ``total × gpu_memory_utilization`` less the weights,
the torch peak of one profiling pass and the non-torch memory that pass added, and (in
some releases) an estimate of the CUDA graphs' memory. What each of those holds changed
from release to release (read from each release's ``vllm/v1/worker/gpu_worker.py``,
``gpu_model_runner.py``, ``gpu/model_runner.py``, ``config/vllm.py``, ``config/cache.py``
and ``envs.py``, 0.11.0 to 0.26.0):

- **Where NCCL's buffers go.** From 0.11 (vLLM PR 25359) the tensor-parallel group is set
  up before the baseline snapshot, so its communicators and the custom all-reduce's
  buffers sit outside the budget; only what the profiling pass adds on top is charged.
- **The default utilization**: 0.9 up to 0.19, 0.92 from 0.22 (``CacheConfig``).
- **Which model runner profiles the model.** Model Runner V2 is the default from 0.22 for
  some architectures (0.22: Qwen3 dense models, unquantised; 0.23: also Llama and
  Mistral; 0.24: Llama, Mistral, Qwen3, whatever their weights; 0.25 and 0.26: every
  model without experts, but no hybrid one; the lists also name a few mixtures of experts,
  DeepSeek-V2's, Qwen2-MoE's and Granite-MoE's, which servesim has no preset of and prices
  as the V1 runner's), unless a feature it lacks is on: speculative decoding other than
  EAGLE or MTP (n-gram, a draft model). The V1 runner serves the rest.
- **The sampler's share of the peak.** The profiling pass samples one token for each of
  S = min(max_num_seqs, max_num_batched_tokens) sequences over the whole vocabulary. V1
  runner, 0.11 to 0.16: top-k/top-p by a full sort of the logits, about 39 bytes a logit
  (the fit of :data:`sim.cost.memory.SAMPLER_BYTES_PER_LOGIT`); from 0.17 a Triton
  top-k/top-p kernel (vLLM PR 33538) and FlashInfer's sampler, about 14 bytes a logit
  (bf16 logits, an fp32 copy, masked logits and probabilities). V2 runner: its profiling
  pass samples greedily and skips top-k/top-p and log-probabilities (a comment in its
  ``_dummy_sampler_run`` says so), leaving the bf16 logits and, up to 0.25, the fp32 copy
  its sampler always makes (``apply_sampling_params``), 6 bytes a logit; 0.26 works in
  place: 2, and with tensor parallelism the vocabulary-parallel all-gather's local shard,
  gather buffer and reshaped copy, 4 + 2/tp. (Both runners profile the layers with
  attention skipped, but its projections' tensors still stand: the layers' peak is the
  same formula for both.)
- **CUDA graphs.** The estimate is subtracted by default from 0.21
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``; opt-in in 0.18 and 0.19, absent before);
  Model Runner V2's ``profile_cudagraph_memory`` returns 0 up to 0.28, so a V2 model is
  charged none. Before 0.18 the graphs are captured after the cache is sized, inside the
  1 − utilization headroom.

Releases after 0.26 change the accounting itself (0.27 charges all memory consumed since
the snapshot, V2's persistent sampler tables among it; 0.34 sizes the cache after graph
capture), and releases before 0.11 charge NCCL's buffers; neither is modelled: a version
outside 0.11 to 0.26 is refused. No wheel of 0.20 or 0.21 was read: they take 0.19's
rules, with the graph estimate on from 0.21 (0.22's log says "default since v0.21.0").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# The release whose rules apply when nothing says which: the vLLM of the public kernel
# tables' newest profiles (the shipped profiles of every GPU but the A100).
DEFAULT_VERSION = "0.24.0"
FIRST, LAST = (0, 11), (0, 26)


@dataclass(frozen=True)
class MemoryRules:
    """What one vLLM ``version`` charges before the KV cache, for one model."""

    version: str
    utilization: float  # default gpu_memory_utilization
    v2_runner: bool  # Model Runner V2 profiles this model (greedy sampler, no graph estimate)
    graph_estimate: bool  # a CUDA-graph estimate is subtracted before the KV cache

    def sampler_bytes_per_logit(self, tp: int) -> float:
        """Bytes a logit of the profiling sampler pass holds at its peak on one GPU."""
        v = version_tuple(self.version)
        if self.v2_runner:
            if v < (0, 26):
                return 6.0  # the bf16 logits and the sampler's fp32 copy
            return 2.0 if tp == 1 else 4.0 + 2.0 / tp
        return 39.0 if v < (0, 17) else 14.0

    @property
    def group_ratio(self) -> float:
        """How far apart (a ratio) a hybrid model's full and sliding layer counts may be
        for the hybrid KV-cache manager to group them by the larger count (0: never)."""
        v = version_tuple(self.version)
        return 0.0 if v < (0, 12) else 1.25 if v < (0, 18) else 1.5

    @property
    def phrase(self) -> str:
        """The rules in words, for a summary."""
        runner = "Model Runner V2" if self.v2_runner else "the V1 model runner"
        return f"as vLLM {self.version} sizes it ({runner})"


# A release name: major.minor[.patch], then a suffix glued on (``rc1``) and any number of
# parts each after a separator (``.post1``, ``+g8a8fc94``, ``-build``). Each repeated part
# must start with its separator, which its characters cannot be, so the match never
# backtracks over ways to split a run of characters (a free separator made a 30-character
# near-miss take minutes). Numbers have no leading zero, as releases are written.
RELEASE = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)(?:\.\d+)?(?:[A-Za-z]\w*)?(?:[.+\-]\w+)*")


def version_tuple(text: str) -> tuple[int, int]:
    """(major, minor) of a release name such as ``0.24.0``, ``0.12.0rc1`` or
    ``0.25.1.dev16+g8a8fc94.cu128``."""
    m = RELEASE.fullmatch(text.strip())
    if m is None:
        raise ServesimError(f"got {text!r}, expected a vLLM release such as 0.24.0")
    return int(m.group(1)), int(m.group(2))


def check_version(text: str) -> str:
    """``text`` if it names a release whose memory profile servesim models; a clear error
    otherwise."""
    v = version_tuple(text)
    if not FIRST <= v <= LAST:
        raise ServesimError(
            f"got {text!r}: servesim sizes the KV cache as vLLM 0.11 to 0.26 do (from 0.27 "
            "vLLM charges all memory consumed since its start-up snapshot, and before 0.11 "
            "NCCL's buffers; neither is modelled); give a release in that range, or "
            "serving.num_gpu_blocks from your server's log; a release is a quoted string, "
            "e.g. \"0.24.0\"")
    return text.strip()


def modelled_release(version: str) -> str | None:
    """``version`` when it names a release whose memory profile servesim models, else
    None (a public run's recorded release, which may be anything)."""
    try:
        return check_version(version)
    except ServesimError:
        return None


def _dense_family(model: ModelSpec) -> str:
    """The architecture of a model without experts as vLLM's runner choice reads it:
    ``qwen3`` or ``llama`` (Llama and Mistral), both a plain decoder without biases,
    layer-wide norms, sinks, latent or linear attention, told apart by the
    preset's name (Qwen3's per-head query/key norms are not a field of the model); or
    ``other``. A custom model of that shape counts as Llama."""
    if (model.experts or model.linear_layers or model.kv_lora_rank or model.qkv_bias
            or model.layer_qk_norm or model.attention_sinks):
        return "other"
    return "qwen3" if model.name.startswith("qwen3") else "llama"


# Speculative methods Model Runner V2 runs (0.22 to 0.26); another falls back to V1.
V2_SPECULATIVE = frozenset(("eagle", "mtp"))


def uses_v2_runner(version: str, model: ModelSpec, speculative: str | None = None) -> bool:
    """Whether ``version`` profiles ``model`` with Model Runner V2 by default (the module
    docstring), with the ``speculative`` method (None: none); quantised means weights
    other than bf16 or fp16."""
    v = version_tuple(version)
    if v < (0, 22) or (speculative is not None and speculative not in V2_SPECULATIVE):
        return False
    family = _dense_family(model)
    quantised = model.dtype not in ("bf16", "fp16")
    if v == (0, 22):
        return family == "qwen3" and not quantised
    if v == (0, 23):
        return family in ("qwen3", "llama") and not quantised
    if v == (0, 24):
        return family in ("qwen3", "llama")
    return not model.experts and not model.linear_layers  # 0.25, 0.26: no hybrid


def memory_rules(version: str, model: ModelSpec, speculative: str | None = None
                 ) -> MemoryRules:
    """The rules of vLLM ``version`` (0.11 to 0.26) for ``model``, with the
    ``speculative`` method (None: none)."""
    v = version_tuple(check_version(version))
    v2 = uses_v2_runner(version, model, speculative)
    return MemoryRules(version=version, utilization=0.92 if v >= (0, 22) else 0.9,
                       v2_runner=v2, graph_estimate=v >= (0, 21) and not v2)
