"""Weight, KV-cache and state dtypes, and the bytes a weight of each takes.

Pure Python, as every module of a model's description (:mod:`sim.cost.specs`), so
sim/ and calibrate/ alike can import it.
"""

from __future__ import annotations

import math
from typing import Literal

Dtype = Literal["fp32", "fp16", "bf16", "fp8", "fp8-block", "mxfp4", "nvfp4", "int4"]
KVDtype = Literal["auto", "fp8"]
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "fp8-block": 1}
# 4-bit weights, in bits per weight with their scales counted (a weight takes a fraction
# of a byte, so these dtypes are kept apart from DTYPE_BYTES, whose whole-byte figures
# every older profile and digest was computed with):
# - mxfp4 (OCP Microscaling FP4, gpt-oss's experts): 4-bit E2M1 values and one 8-bit
#   power-of-two scale per block of 32: 4 + 8/32 = 4.25 bits.
# - nvfp4 (NVIDIA FP4, ModelOpt and compressed-tensors checkpoints): E2M1 values, one
#   FP8 E4M3 scale per block of 16 and one fp32 scale per tensor: 4 + 8/16 = 4.5 bits
#   (the per-tensor scale is a few bytes a matrix and is not counted).
# - int4 (GPTQ/AWQ, vLLM's w4a16): 4-bit integers and one 16-bit scale per group of 128
#   input channels: 4 + 16/128 = 4.125 bits. AWQ's 4-bit zero points (4/128 more) and
#   smaller groups (group_size 32 or 64) are not counted: under 1% of the weights' bytes
#   for the first, up to 0.4 bits a weight for the second.
FOUR_BIT_WEIGHTS: dict[str, float] = {"mxfp4": 4.25, "nvfp4": 4.5, "int4": 4.125}
FP4_WEIGHTS = ("mxfp4", "nvfp4")
# Weight dtypes of quantised checkpoints: FP8 with one scale per tensor (or per output
# channel), and FP8 with one scale per 128 x 128 block (DeepSeek's and Qwen's FP8
# releases). Only the projections are quantised; embeddings, the LM head and norms keep
# 16 bits, and activations run in bf16 between the GEMMs.
FP8_WEIGHTS = ("fp8", "fp8-block")
# Dtypes of a Gated DeltaNet layer's recurrent state: fp32 as Qwen3.5's config sets it
# (mamba_ssm_dtype) and vLLM and SGLang keep it by default, or bf16 as a server may be
# told (vLLM's --mamba-ssm-cache-dtype, SGLang's --mamba-ssm-dtype).
StateDtype = Literal["fp32", "bf16"]
# Dtypes a checkpoint's routed experts may have apart from its other projections ("":
# the projections' own): gpt-oss keeps attention in bf16 and its experts in mxfp4.
ExpertDtype = Literal["", "bf16", "fp16", "fp8", "fp8-block", "mxfp4", "nvfp4", "int4"]


def weight_bytes_per(dtype: str) -> float:
    """Bytes one weight of ``dtype`` takes with its scales (a whole number of bytes for
    the 8-, 16- and 32-bit dtypes, a fraction for the 4-bit ones)."""
    if dtype in DTYPE_BYTES:
        return DTYPE_BYTES[dtype]
    return FOUR_BIT_WEIGHTS[dtype] / 8


# Elements of a sparse-attention indexer key that share one fp32 scale in its FP8 cache.
INDEX_SCALE_BLOCK = 128
# The ModelSpec fields (and config.json keys) of DeepSeek sparse attention's indexer.
SPARSE_FIELDS = ("index_topk", "index_n_heads", "index_head_dim")


def packed_bytes(elements: int, per: float) -> int:
    """Bytes of ``elements`` weights at ``per`` bytes each, rounded up to a whole byte
    (exact for whole-byte dtypes; 4-bit ones pack two values a byte)."""
    return math.ceil(elements * per)
