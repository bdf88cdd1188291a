"""Model architectures and GPU datasheet figures: the one table both sim/ and calibrate/ use.

Pure Python (no numpy, no simpy, no torch) so every part of servesim can import it.
Model figures are the public ``config.json`` values of each family; GPU figures are
vendor datasheet numbers (dense, no sparsity), in SI units: FLOP/s, bytes/s, except the
memory size, which is what the device reports to programs (bytes; see :class:`GPUSpec`).
:func:`shard` gives the per-GPU dimensions of a tensor-parallel shard, for the simulator's
KV capacity, cost and transfers and for calibration alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from sim.configtools import bounded
from sim.errors import ServesimError

Dtype = Literal["fp32", "fp16", "bf16", "fp8", "fp8-block"]
KVDtype = Literal["auto", "fp8"]
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8-block": 1}
# Weight dtypes of quantised checkpoints: FP8 with one scale per tensor (or per output
# channel), and FP8 with one scale per 128 x 128 block (DeepSeek's and Qwen's FP8
# releases). Only the projections are quantised; embeddings, the LM head and norms keep
# 16 bits, and activations run in bf16 between the GEMMs.
FP8_WEIGHTS = ("fp8", "fp8-block")


class _Projections:
    """Projection-weight counts (elements) of a model's layers, from the dimensions a
    :class:`ModelSpec` (whole model) and a :class:`Shard` (one GPU's share) both have:
    the same arithmetic serves both."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    experts: int
    shared_experts: int
    expert_intermediate: int
    dense_layers: int

    @property
    def attention_params_per_layer(self) -> int:
        """Weights of one layer's QKV and output projections."""
        qkv = self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim
        return qkv + self.heads * self.head_dim * self.hidden

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one dense layer's QKV, output and SwiGLU projections."""
        return self.attention_params_per_layer + 3 * self.hidden * self.intermediate

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (the rest are dense)."""
        return self.layers - self.dense_layers if self.experts else 0

    @property
    def expert_params(self) -> int:
        """Weights of one expert's SwiGLU."""
        return 3 * self.hidden * self.expert_intermediate

    @property
    def stack_params(self) -> int:
        """Projection weights of every layer: attention, dense MLPs, and in each MoE layer
        every routed and shared expert (the router is not a projection)."""
        if not self.experts:
            return self.layers * self.linear_params_per_layer
        return (self.layers * self.attention_params_per_layer
                + self.dense_layers * 3 * self.hidden * self.intermediate
                + self.moe_layers * (self.experts + self.shared_experts) * self.expert_params)


@dataclass(frozen=True)
class ModelSpec(_Projections):
    """A Llama-family decoder: dimensions in elements, ``max_context`` in tokens.

    ``dtype`` is the projections' weight dtype: bf16, fp16 or fp32 for a plain
    checkpoint, ``fp8`` or ``fp8-block`` (see :data:`FP8_WEIGHTS`) for an FP8 one, whose
    embeddings, LM head, norms and activations stay in bf16. ``kv_dtype`` is the KV
    cache's, named as vLLM's ``--kv-cache-dtype``: ``auto`` (the activations' dtype) or
    ``fp8`` (one byte an element).

    Mixture-of-experts: ``experts`` routed experts per MoE layer (0: a dense model), of
    which each token uses ``experts_per_token``, each a SwiGLU of width
    ``expert_intermediate``; ``shared_experts`` more of that width every token uses; the
    first ``dense_layers`` layers keep a dense SwiGLU of width ``intermediate``."""

    layers: int = bounded(ge=1)
    hidden: int = bounded(ge=1)
    heads: int = bounded(ge=1)
    kv_heads: int = bounded(ge=1)
    head_dim: int = bounded(ge=1)
    intermediate: int = bounded(ge=1)
    vocab: int = bounded(ge=1)
    dtype: Dtype = "bf16"
    kv_dtype: KVDtype = "auto"
    max_context: int = bounded(8192, ge=1)
    rope_theta: float = bounded(10000.0, gt=0)
    qkv_bias: bool = False
    tie_embeddings: bool = False
    name: str = "custom"
    experts: int = bounded(0, ge=0)
    experts_per_token: int = bounded(0, ge=0)
    expert_intermediate: int = bounded(0, ge=0)
    shared_experts: int = bounded(0, ge=0)
    dense_layers: int = bounded(0, ge=0)

    def __post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise ServesimError(
                f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}",
                where="kv_heads",
            )
        if not self.experts:
            for key in ("experts_per_token", "expert_intermediate", "shared_experts",
                        "dense_layers"):
                if getattr(self, key):
                    raise ServesimError(f"got {getattr(self, key)} for a dense model "
                                        f"(experts is 0); set experts too", where=key)
            return
        if not 1 <= self.experts_per_token <= self.experts:
            raise ServesimError(f"got {self.experts_per_token}, must be 1 to experts "
                                f"({self.experts})", where="experts_per_token")
        if self.expert_intermediate < 1:
            raise ServesimError("required for a mixture-of-experts model (experts > 0), "
                                "at least 1", where="expert_intermediate")
        if self.dense_layers >= self.layers:
            raise ServesimError(f"got {self.dense_layers}, must be below layers "
                                f"({self.layers})", where="dense_layers")

    @property
    def moe(self) -> bool:
        """Whether the model has mixture-of-experts layers."""
        return self.experts > 0

    @property
    def dtype_bytes(self) -> int:
        """Bytes per projection weight (the weights' dtype)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def act_dtype(self) -> str:
        """The activations' dtype: the weights' for fp32 and fp16 models, bf16 otherwise
        (FP8 checkpoints compute between GEMMs in bf16)."""
        return self.dtype if self.dtype in ("fp32", "fp16") else "bf16"

    @property
    def act_bytes(self) -> int:
        """Bytes per activation element (also the embedding, LM head and norm weights)."""
        return DTYPE_BYTES[self.act_dtype]

    @property
    def kv_dtype_bytes(self) -> int:
        """Bytes per KV-cache element: one for an fp8 cache, else the activations'."""
        return 1 if self.kv_dtype == "fp8" else self.act_bytes

    @property
    def router_params(self) -> int:
        """Weights of every MoE layer's router, hidden x experts each (elements)."""
        return self.moe_layers * self.hidden * self.experts

    @property
    def active_params(self) -> int:
        """Weights one token uses (elements): as :attr:`params`, with only
        ``experts_per_token`` routed experts (and the shared ones) of each MoE layer."""
        idle = self.moe_layers * (self.experts - self.experts_per_token) * self.expert_params
        return self.params - idle

    @property
    def embedding_params(self) -> int:
        """Weights of the token embedding (elements)."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All weights (elements): layers' projections and routers, embedding and, unless
        tied, the LM head."""
        head = 0 if self.tie_embeddings else self.embedding_params
        return self.stack_params + self.router_params + self.embedding_params + head

    @property
    def weight_bytes(self) -> int:
        """Bytes of all projection and embedding weights, whole model: projections at
        ``dtype``, embedding and LM head at the activations' dtype (per-GPU figures, with
        norms and tensor-parallel sharding, come from :func:`shard`)."""
        linear = self.stack_params
        return linear * self.dtype_bytes + (self.params - linear) * self.act_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies over all layers, whole model: 2·L·kv·d·b,
        b from ``kv_dtype`` (per GPU: :attr:`Shard.kv_bytes_per_token`)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_dtype_bytes


# Fields added after profiles and scenario digests were first written: recorded and
# hashed only when they differ from a plain 16-bit dense model's (DENSE), so files and
# digests of such models stay what they were.
NEWER_FIELDS = ("kv_dtype", "experts", "experts_per_token", "expert_intermediate",
                "shared_experts", "dense_layers")
DENSE = ModelSpec(layers=1, hidden=1, heads=1, kv_heads=1, head_dim=1, intermediate=1, vocab=1)


def recorded_fields(model: ModelSpec) -> dict[str, Any]:
    """``model``'s fields as profiles record and digests hash them: every field, those of
    :data:`NEWER_FIELDS` only when they differ from :data:`DENSE`'s."""
    fields = dataclasses.asdict(model)
    for key in NEWER_FIELDS:
        if fields[key] == getattr(DENSE, key):
            fields.pop(key)
    return fields

# vLLM pads the vocabulary of its embedding and LM head to a multiple of this before
# splitting it over the tensor-parallel GPUs (VocabParallelEmbedding's padding size).
VOCAB_PADDING = 64


@dataclass(frozen=True)
class Shard(_Projections):
    """Per-GPU dimensions (elements) of one tensor-parallel shard of a model, as vLLM
    splits it (Megatron style): query heads, MLP width and the padded vocabulary divided
    by ``tp``; KV heads divided, or replicated when there are fewer than ``tp`` of them;
    hidden size, layer count and norms whole on every GPU."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    qkv_bias: bool
    rope_theta: float
    tp: int = 1
    layers: int = 1
    dtype_bytes: int = 2
    tie_embeddings: bool = False
    act_bytes: int = 2
    kv_bytes: int = 2
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0  # this GPU's share of each expert's width
    shared_experts: int = 0
    dense_layers: int = 0

    @property
    def params(self) -> int:
        """All weights (elements) one GPU holds: its share of every projection, QKV bias,
        embedding and LM head (vocab-parallel), plus the replicated RMSNorm weights and
        MoE routers."""
        bias = (self.heads + 2 * self.kv_heads) * self.head_dim if self.qkv_bias else 0
        norms = 2 * self.hidden
        tables = (1 if self.tie_embeddings else 2) * self.vocab * self.hidden
        router = self.moe_layers * self.hidden * self.experts
        return self.stack_params + self.layers * (bias + norms) + router + tables + self.hidden

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights one GPU holds: projections at ``dtype_bytes``, QKV bias,
        norms, routers, embedding and LM head at ``act_bytes``."""
        linear = self.stack_params
        return linear * self.dtype_bytes + (self.params - linear) * self.act_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token occupies on one GPU, all layers: 2·L·kv_heads·d·b with
        this GPU's (possibly replicated) KV heads and b = ``kv_bytes``."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_bytes


def shard(spec: ModelSpec, tp: int, where: str = "tp") -> Shard:
    """Split ``spec`` over ``tp`` GPUs by vLLM's rules; an impossible split is a
    :class:`ServesimError` at key ``where`` naming the dimension and ``tp``.

    Query heads and the MLP width must divide by ``tp``; so must each expert's width in a
    mixture of experts, whose experts vLLM splits like dense MLPs (every GPU holds a
    slice of every expert; expert parallelism is not modelled). KV heads are split when they
    divide by ``tp`` and replicated when ``tp`` divides by them (each GPU then keeps one
    head, so ``tp / kv_heads`` GPUs hold copies of the same head); any other ratio is an
    error. The vocabulary is padded up to a multiple of :data:`VOCAB_PADDING` and split."""
    if tp < 1:
        raise ServesimError(f"got {tp}, must be at least 1", where=where)
    if spec.heads % tp:
        raise ServesimError(f"the model's {spec.heads} query heads do not split over tp={tp} "
                            f"(tp must divide the heads)", where=where)
    if spec.intermediate % tp and (not spec.experts or spec.dense_layers):
        raise ServesimError(f"the model's MLP width intermediate={spec.intermediate} does not "
                            f"split over tp={tp}", where=where)
    if spec.experts and spec.expert_intermediate % tp:
        raise ServesimError(f"the model's expert width expert_intermediate="
                            f"{spec.expert_intermediate} does not split over tp={tp}",
                            where=where)
    if spec.kv_heads % tp == 0:
        kv = spec.kv_heads // tp
    elif tp % spec.kv_heads == 0:
        kv = 1  # replicated: each GPU keeps a copy of one KV head
    else:
        raise ServesimError(f"the model's {spec.kv_heads} KV heads neither split over nor "
                            f"replicate evenly across tp={tp}", where=where)
    padded = -(-spec.vocab // VOCAB_PADDING) * VOCAB_PADDING
    return Shard(hidden=spec.hidden, heads=spec.heads // tp, kv_heads=kv,
                 head_dim=spec.head_dim, intermediate=spec.intermediate // tp,
                 vocab=-(-padded // tp), qkv_bias=spec.qkv_bias, rope_theta=spec.rope_theta,
                 tp=tp, layers=spec.layers, dtype_bytes=spec.dtype_bytes,
                 tie_embeddings=spec.tie_embeddings, act_bytes=spec.act_bytes,
                 kv_bytes=spec.kv_dtype_bytes, experts=spec.experts,
                 experts_per_token=spec.experts_per_token,
                 expert_intermediate=spec.expert_intermediate // tp,
                 shared_experts=spec.shared_experts, dense_layers=spec.dense_layers)


def _llama(**kw: object) -> ModelSpec:
    return ModelSpec(**kw)  # type: ignore[arg-type]


MODELS: dict[str, ModelSpec] = {
    "llama-3-8b": _llama(name="llama-3-8b", layers=32, hidden=4096, heads=32, kv_heads=8,
                         head_dim=128, intermediate=14336, vocab=128256, max_context=8192,
                         rope_theta=500000.0),
    "llama-3-70b": _llama(name="llama-3-70b", layers=80, hidden=8192, heads=64, kv_heads=8,
                          head_dim=128, intermediate=28672, vocab=128256, max_context=8192,
                          rope_theta=500000.0),
    # Qwen3's attention is wider than its residual stream (64 heads x 128 > 5120).
    "qwen3-32b": _llama(name="qwen3-32b", layers=64, hidden=5120, heads=64, kv_heads=8,
                        head_dim=128, intermediate=25600, vocab=151936, max_context=40960,
                        rope_theta=1000000.0),
    "mistral-7b": _llama(name="mistral-7b", layers=32, hidden=4096, heads=32, kv_heads=8,
                         head_dim=128, intermediate=14336, vocab=32768, max_context=32768,
                         rope_theta=1000000.0),
    "qwen2.5-7b": _llama(name="qwen2.5-7b", layers=28, hidden=3584, heads=28, kv_heads=4,
                         head_dim=128, intermediate=18944, vocab=152064, max_context=32768,
                         rope_theta=1000000.0, qkv_bias=True),
    "qwen2.5-32b": _llama(name="qwen2.5-32b", layers=64, hidden=5120, heads=40, kv_heads=8,
                          head_dim=128, intermediate=27648, vocab=152064, max_context=32768,
                          rope_theta=1000000.0, qkv_bias=True),
    # Small enough to calibrate and replay on a 2-core CPU in seconds.
    "tiny": _llama(name="tiny", layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64,
                   intermediate=704, vocab=2048, dtype="fp32", max_context=4096),
}
# Llama 3.1 differs from Llama 3 only in its context length (rope scaling to 128k).
MODELS.update({f"llama-3.1-{size}": dataclasses.replace(
    MODELS[f"llama-3-{size}"], name=f"llama-3.1-{size}", max_context=131072)
    for size in ("8b", "70b")})
# Mixtures of experts (config.json of each release). Mixtral's intermediate_size is its
# experts' width; Qwen3's MoE releases have no dense layer (decoder_sparse_step 1, no
# mlp_only_layers), so their dense width is never used.
MODELS.update({
    "mixtral-8x7b": _llama(name="mixtral-8x7b", layers=32, hidden=4096, heads=32, kv_heads=8,
                           head_dim=128, intermediate=14336, vocab=32000, max_context=32768,
                           rope_theta=1000000.0, experts=8, experts_per_token=2,
                           expert_intermediate=14336),
    "qwen3-30b-a3b": _llama(name="qwen3-30b-a3b", layers=48, hidden=2048, heads=32,
                            kv_heads=4, head_dim=128, intermediate=6144, vocab=151936,
                            max_context=40960, rope_theta=1000000.0, experts=128,
                            experts_per_token=8, expert_intermediate=768),
    "qwen3-235b-a22b": _llama(name="qwen3-235b-a22b", layers=94, hidden=4096, heads=64,
                              kv_heads=4, head_dim=128, intermediate=12288, vocab=151936,
                              max_context=40960, rope_theta=1000000.0, experts=128,
                              experts_per_token=8, expert_intermediate=1536),
})
# The tiny model's mixture-of-experts twin, for calibrating and replaying a MoE layer on
# a 2-core CPU: 8 experts, 2 a token, each half tiny's MLP width, so a token computes
# what a tiny token does while a layer holds four times its MLP weights (no public
# release; a test shape like tiny).
MODELS["tiny-moe"] = dataclasses.replace(MODELS["tiny"], name="tiny-moe", experts=8,
                                         experts_per_token=2, expert_intermediate=352)
# Qwen's own FP8 release of Qwen3-235B-A22B: 128 x 128 block scales.
MODELS["qwen3-235b-a22b-fp8"] = dataclasses.replace(
    MODELS["qwen3-235b-a22b"], name="qwen3-235b-a22b-fp8", dtype="fp8-block")
# Llama 3.3 70B has Llama 3.1 70B's shape; its FP8 release quantises the projections'
# weights (per-tensor scales) and keeps the KV cache in bf16 unless the server says fp8.
MODELS["llama-3.3-70b-fp8"] = dataclasses.replace(MODELS["llama-3.1-70b"],
                                                  name="llama-3.3-70b-fp8", dtype="fp8")


@dataclass(frozen=True)
class GPUSpec:
    """Figures of one accelerator, in SI units.

    ``flops`` is dense bf16/fp16 FLOP/s and ``mem_bw`` HBM bytes/s (datasheets).
    ``mem_bytes`` is the memory the device *reports* to programs, in bytes: CUDA's
    ``cudaMemGetInfo`` total, which PyTorch returns as ``torch.cuda.mem_get_info()[1]`` and
    ``get_device_properties().total_memory`` and which vLLM multiplies by
    ``gpu_memory_utilization``. It is less than the marketing figure (80 GB) and less than
    nvidia-smi's "Total" column, which also counts what the driver keeps for itself.
    ``fp8_flops`` is dense FP8 FLOP/s, 0 on a GPU without FP8 tensor cores (A100: FP8
    weights there run weight-only, dequantised to bf16 for each GEMM, as vLLM's Marlin
    kernels do).
    ``link_bw`` is per-GPU, per-direction bytes/s of the fast link inside a node (NVLink,
    Infinity Fabric, or PCIe where there is none) and ``link_latency_s`` the fixed cost of
    one all-reduce over it; ``node_gpus`` GPUs share that link. ``net_bw`` and
    ``net_latency_s`` are the same for the network between nodes (per GPU: each GPU has
    its own NIC or a share of one). ``host_bw`` is per-direction bytes/s to host memory
    (PCIe), used for swapping.
    """

    name: str
    flops: float
    mem_bw: float
    mem_bytes: int
    link_bw: float
    link_latency_s: float
    host_bw: float
    node_gpus: int
    net_bw: float
    net_latency_s: float
    fp8_flops: float = 0.0

    def tp_link(self, tp: int) -> tuple[float, float]:
        """(bytes/s, seconds) of the slowest link a ring of ``tp`` GPUs crosses: the node's
        fast link while the ring fits in one node, the inter-node network beyond."""
        if tp <= self.node_gpus:
            return self.link_bw, self.link_latency_s
        return self.net_bw, self.net_latency_s


_MIB = 2**20

# mem_bytes, as the device reports it (see GPUSpec). Sources, newest driver we found:
# - a100-80gb: 85,100,068,864 B (81,158 MiB), CUDA deviceQuery on A100-SXM4-80GB, driver
#   12.5 (github.com/thamada/nvidia-smi, gls/A100SXMx4_deviceQuery.py); nvidia-smi: 81920MiB.
# - h100-sxm: 85,045,477,376 B (81,106 MiB), deviceQuery on H100 80GB HBM3, driver 12.7
#   (same repository, nvsim/H100SXMx8_deviceQuery.py); nvidia-smi: 81559MiB. vLLM's own
#   log on an H100 says "total_gpu_memory 79.22GiB" (vllm-project/vllm PR 10511): the
#   driver's share moves by a few tens of MiB between driver versions.
# - h200: 143,156 MiB, torch.cuda.get_device_properties() "total_memory=143156MB" (torch
#   prints MiB as "MB") in a public vLLM-on-Modal script; nvidia-smi: 143771MiB.
# - l40s: 47,803,596,800 B (45,589 MiB), deviceQuery, driver 12.4 (thamada/nvidia-smi,
#   nvsim/L40S_deviceQuery.py), the same as torch's "total_memory=45589MB"; nvidia-smi: 46068MiB.
# - b200: 182,642 MiB, torch "total_memory=182642MB" (same script as the H200; another
#   public run shows 182631MB); nvidia-smi: 183359MiB.
# - mi300x: 196,592 MiB, HIP "Total Global Memory (MB) 196592" (thamada/nvidia-smi,
#   package/MI300X_deviceQuery.py), the same as torch's "total_memory=196592MB" on ROCm.
#
# fp8_flops (dense, without sparsity; datasheets): H100 SXM and H200 1,979 TFLOP/s, L40S
# 733, B200 4,500 (HGX B200), MI300X 2,615; A100 has no FP8 tensor cores.
#
# node_gpus: 8 per HGX/DGX (SXM) board or MI300X platform; 8 per typical L40S PCIe server,
# where the "fast" link is PCIe 4.0 x16 (no NVLink). net_bw: one 400 Gb/s InfiniBand NDR
# or RoCE NIC per GPU (50e9 B/s) on H100, H200, B200 and MI300X systems; one 200 Gb/s HDR
# NIC per GPU on DGX A100 (25e9 B/s); about 100 Gb/s per GPU (12.5e9 B/s) on an L40S
# server with a 200 Gb/s NIC per two GPUs. 20 µs per all-reduce step across the network.
GPUS: dict[str, GPUSpec] = {
    "a100-80gb": GPUSpec("a100-80gb", 312e12, 2.039e12, 85_100_068_864, 300e9, 8e-6, 32e9,
                         8, 25e9, 20e-6),
    "h100-sxm": GPUSpec("h100-sxm", 989e12, 3.35e12, 85_045_477_376, 450e9, 8e-6, 64e9,
                        8, 50e9, 20e-6, 1979e12),
    "h200": GPUSpec("h200", 989e12, 4.8e12, 143_156 * _MIB, 450e9, 8e-6, 64e9, 8, 50e9, 20e-6,
                    1979e12),
    "l40s": GPUSpec("l40s", 362e12, 0.864e12, 47_803_596_800, 32e9, 20e-6, 32e9,
                    8, 12.5e9, 20e-6, 733e12),
    "b200": GPUSpec("b200", 2250e12, 8.0e12, 182_642 * _MIB, 900e9, 6e-6, 64e9, 8, 50e9, 20e-6,
                    4500e12),
    "mi300x": GPUSpec("mi300x", 1307e12, 5.3e12, 196_592 * _MIB, 448e9, 10e-6, 64e9,
                      8, 50e9, 20e-6, 2615e12),
}


# Host (CPU) memory installed in one node of node_gpus GPUs, GiB: the default ceiling of a
# host KV tier (serving.kv_offload.cpu_gb x GPUs on the node; hardware.host_memory_gb
# overrides it). A DIMM "TB" is a binary one (32 x 64 GB DIMMs = 2048 GiB).
# - a100-80gb, h100-sxm, h200, b200: 2 TB of system memory in NVIDIA's DGX A100 (640 GB),
#   DGX H100, DGX H200 and DGX B200 user guides (B200: 32 DIMMs, upgradable to 4 TB).
# - mi300x: no vendor reference system; 2 TB assumed, as the 8-GPU HGX-class servers above.
# - l40s: no reference system either; 1 TB assumed for a typical 8-GPU PCIe server.
# The operating system and the serving process need some of it; set host_memory_gb to
# what a tier may really take.
NODE_HOST_MEMORY_GIB: dict[str, float] = {
    "a100-80gb": 2048.0, "h100-sxm": 2048.0, "h200": 2048.0, "b200": 2048.0,
    "mi300x": 2048.0, "l40s": 1024.0,
}


def weight_only(model: ModelSpec, gpu: GPUSpec) -> bool:
    """Whether ``model``'s FP8 weights run weight-only on ``gpu``: dequantised to bf16 for
    each GEMM, at bf16 FLOP/s, because the GPU has no FP8 tensor cores."""
    return model.dtype in FP8_WEIGHTS and not gpu.fp8_flops


def model_preset(name: str) -> ModelSpec:
    """The preset called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ServesimError(
            f"unknown model preset {name!r}; valid: {', '.join(sorted(MODELS))}"
        ) from None


def gpu(name: str) -> GPUSpec:
    """The GPU called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return GPUS[name]
    except KeyError:
        raise ServesimError(f"unknown gpu {name!r}; valid: {', '.join(sorted(GPUS))}") from None

