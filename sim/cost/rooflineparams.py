"""The roofline's knobs (:class:`RooflineParams`: efficiencies, kernel floors, step
overheads, the frontend) with their fitted defaults, and the kernel counts its layers
launch (:mod:`sim.cost.roofline` prices steps with them).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.configtools import bounded
from sim.cost.frontend import Frontend

# The roofline's defaults are fitted, never guessed:
# - efficiencies and kernel floors on NVIDIA AIConfigurator's kernel tables of every GPU
#   they cover (`servesim profile fit-roofline`, "fitted on all"; each GPU's error with
#   it left out of the fit is in docs/cost-model.md);
# - step overheads and the frontend: vLLM's priors, fitted on public end-to-end runs
#   (sim/data/priors.yaml, `servesim validate --silicon --fit-priors`).
# tests/test_roofline_fit.py checks both against a fresh fit.
VLLM_FRONTEND = Frontend(request_s=0.00638164)


@dataclass(frozen=True)
class RooflineParams:
    """User-tunable knobs of the roofline model: efficiencies (fractions of the GPU's
    datasheet peak), kernel floors and overheads (seconds)."""

    flops_efficiency: float = bounded(0.686, gt=0, le=1)
    bandwidth_efficiency: float = bounded(0.815, gt=0, le=1)
    attention_flops_efficiency: float = bounded(0.418, gt=0, le=1)
    fp8_flops_efficiency: float = bounded(0.523, gt=0, le=1)
    moe_flops_efficiency: float = bounded(0.398, gt=0, le=1)
    step_overhead_s: float = bounded(0.00101736, ge=0)
    per_seq_overhead_s: float = bounded(5.18994e-05, ge=0)
    kernel_floor_s: float = bounded(5.09e-6, ge=0)
    attention_floor_s: float = bounded(1.174e-5, ge=0)
    frontend: Frontend = VLLM_FRONTEND


# Kernels a layer's projections launch (QKV, output, gate+up, down): each costs at
# least the kernel floor, however small its work.
LINEAR_KERNELS = 4
# Latent attention (MLA) launches five projection GEMMs where a Llama layer launches
# two (QKV, output): vLLM's fused q_a + kv_a projection, q_b, the two per-head products
# with kv_b's halves that absorb it in decode (W_UK before attention, W_UV after), output.
MLA_KERNELS = 5
# DeepSeek sparse attention's indexer adds its three projections (wq_b, wk,
# weights_proj), the key's norm and cache write, the logits and the top-k: 6 kernels.
DSA_KERNELS = 6
# A mixture-of-experts MLP instead launches its router GEMM, top-k, the token
# permutation, two grouped expert GEMMs and the weighted sum (6; a shared expert's two
# GEMMs more), beside the layer's QKV and output GEMMs.
MOE_KERNELS = 6
# Tokens per chunk of the chunked Gated DeltaNet kernels (flash-linear-attention's
# chunk_gated_delta_rule, which vLLM and SGLang run for prefill).
GDN_CHUNK = 64
