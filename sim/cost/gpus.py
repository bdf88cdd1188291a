"""GPU datasheet figures: the GPU table, in SI units (FLOP/s, bytes/s), except the memory
size, which is what the device reports to programs (bytes; see :class:`GPUSpec`), and
which weight dtypes each GPU runs natively.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost.dtypes import FOUR_BIT_WEIGHTS, FP4_WEIGHTS, FP8_WEIGHTS
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


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
    kernels do). ``fp4_flops`` is dense FP4 FLOP/s (NVFP4 on Blackwell), 0 on a GPU
    without FP4 tensor cores (FP4 weights run weight-only there, see
    :func:`dtype_weight_only`).
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
    fp4_flops: float = 0.0

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
# - a100-40gb: 40,536 MiB, "total_memory=40536MB" for an "A100-SXM4-40GB" as printed by
#   PaddlePaddle's get_device_properties() in its own documentation (MiB written "MB", as
#   torch does); nvidia-smi: 40960MiB.
# - h100-sxm: 85,045,477,376 B (81,106 MiB), deviceQuery on H100 80GB HBM3, driver 12.7
#   (same repository, nvsim/H100SXMx8_deviceQuery.py); nvidia-smi: 81559MiB. vLLM's own
#   log on an H100 says "total_gpu_memory 79.22GiB" (vllm-project/vllm PR 10511): the
#   driver's share moves by a few tens of MiB between driver versions.
# - h200: 150,109,880,320 B (143,155.9 MiB), read with torch 2.11 (driver 580.159.04) on
#   an H200 lent to this project, 2026-12-04 (docs/data/h200-2026-12-04); a public
#   vLLM-on-Modal script's torch.cuda.get_device_properties() prints it rounded,
#   "total_memory=143156MB" (torch prints MiB as "MB"); nvidia-smi: 143771MiB.
# - l40s: 47,803,596,800 B (45,589 MiB), deviceQuery, driver 12.4 (thamada/nvidia-smi,
#   nvsim/L40S_deviceQuery.py), the same as torch's "total_memory=45589MB"; nvidia-smi: 46068MiB.
# - b200: 182,642 MiB, torch "total_memory=182642MB" (same script as the H200; another
#   public run shows 182631MB); nvidia-smi: 183359MiB.
# - mi300x: 196,592 MiB, HIP "Total Global Memory (MB) 196592" (thamada/nvidia-smi,
#   package/MI300X_deviceQuery.py), the same as torch's "total_memory=196592MB" on ROCm.
# - h100-pcie: 81,008 MiB, torch "total_memory=81008MB" printed by
#   get_device_properties() on an "NVIDIA H100 PCIe" (torch 2.0.1, in a public script's
#   comments); nvidia-smi: 81559MiB.
# - h100-nvl: 99,861,594,112 B (95,235 MiB), deviceQuery on two "NVIDIA H100 NVL", driver
#   12.4 (thamada/nvidia-smi, gls/H100NVLx2_deviceQuery.py).
# - h20: 97,285 MiB, torch "total_memory=97285MB" on an "NVIDIA H20" (78 SMs), quoted in
#   the comments of several public Triton attention kernels.
# - gb200: no public torch or deviceQuery print found. nvidia-smi shows 189471MiB on
#   GB200 NVL72 trays (several public logs, driver 580); derived with the B200's gap
#   between nvidia-smi and torch (183,359 - 182,642 = 717 MiB, the same Blackwell driver):
#   189,471 - 717 = 188,754 MiB.
# - b300: nvidia-smi shows 275040MiB on an "NVIDIA B300 SXM6 AC" (driver 580; a public
#   B300 characterisation's spec card, and the memory AIConfigurator's b300_sxm.yaml
#   records); no torch print found, so derived as the GB200's: 275,040 - 717 = 274,323 MiB.
# - gb300: nvidia-smi shows 284208MiB (AIConfigurator's gb300.yaml, the tables' own system
#   file: the full part, no memory controller fused off); derived as the GB200's:
#   284,208 - 717 = 283,491 MiB.
# - mi325x: no public print found; derived as the MI300X's: 256 GiB of HBM3E less the
#   16 MiB the MI300X reports under its 192 GiB (196,608 - 196,592): 262,128 MiB.
# - l4: 23,570,219,008 B (22,478 MiB), deviceQuery on an "NVIDIA L4", driver 12.4
#   (thamada/nvidia-smi, gls/L4_deviceQuery.py); nvidia-smi: 23034MiB.
# - a10g: 22,587 MiB, torch "total_memory=22587MB" on an "NVIDIA A10G" (80 SMs) in a
#   public issue's environment print; nvidia-smi: 23028MiB on the A10.
# - rtx-pro-6000: 97,250 MiB, torch "total_memory=97250MB" printed by
#   get_device_properties() on an "NVIDIA RTX PRO 6000 Blackwell Server Edition" (188 SMs,
#   torch 2.7.1) in a public install script's comments; nvidia-smi: 97887MiB (the figure
#   AIConfigurator's rtx_pro_6000_server.yaml records).
#
# flops, fp8_flops and fp4_flops are dense (without sparsity; datasheets halve their
# sparse headline figures): H100 SXM and H200 1,979 TFLOP/s FP8, L40S 733, B200 4,500
# FP8 and 9,000 FP4 (HGX B200: 72 / 144 PFLOPS FP8 / FP4 with sparsity for 8 GPUs),
# MI300X 2,615; A100 has no FP8 tensor cores.
# - h100-pcie (H100 datasheet, PCIe column: 1,513 BF16 and 3,026 FP8 with sparsity):
#   756.5 TFLOP/s BF16, 1,513 FP8, HBM2e 2.0 TB/s.
# - h100-nvl (H100 NVL column: 1,671 BF16 and 3,341 FP8 with sparsity): 835.5 BF16,
#   1,670.5 FP8, HBM3 3.9 TB/s, 94 GB.
# - h20 (HGX H20 product brief): 148 BF16, 296 FP8, HBM3 4.0 TB/s, 96 GB, NVLink
#   900 GB/s.
# - gb200 (GB200 NVL72 datasheet, per rack of 72 GPUs, with sparsity: 360 PF BF16, 720 PF
#   FP8, 1,440 PF FP4; HBM3E 576 TB/s): per GPU dense 2,500 BF16, 5,000 FP8, 10,000 FP4,
#   8 TB/s. NVLink 5: 1.8 TB/s per GPU both ways (900 GB/s each), all 72 GPUs of the rack
#   in one NVLink domain. Host link: NVLink-C2C to its Grace, 900 GB/s both ways.
# - b300 (HGX B300 / Blackwell Ultra datasheet: 36 PF BF16 and 72 PF FP8 with sparsity per
#   8 GPUs, FP4 14 PF dense per GPU; 288 GB HBM3E, 62 TB/s per 8 GPUs): per GPU dense 2,250
#   BF16, 4,500 FP8, 14,000 FP4, 7.75 TB/s. NVLink 5 as the B200's.
# - gb300 (GB300 NVL72 / Blackwell Ultra datasheet, per GPU, dense): 2,500 BF16, 5,000 FP8,
#   15,000 FP4, 8 TB/s (576 TB/s for the rack's 72); links as the GB200's.
# - mi325x (AMD Instinct MI325X datasheet): 1,307.4 BF16, 2,614.9 FP8 (dense), HBM3E
#   6 TB/s, 256 GB; Infinity Fabric as the MI300X's (896 GB/s peer to peer); no FP4.
# - l4 (L4 datasheet): 121 BF16 and 242.5 FP8 (242 / 485 with sparsity), GDDR6 300 GB/s,
#   24 GB, PCIe Gen4 x16 (64 GB/s both ways), no NVLink.
# - a100-40gb (A100 datasheet, 40GB SXM column): 312 TFLOP/s BF16 dense as the 80GB part,
#   HBM2 1,555 GB/s, NVLink 600 GB/s both ways; no FP8 tensor cores.
# - a10g: NVIDIA publishes no A10G datasheet; 600 GB/s GDDR6 and 24 GB as the A10's, and
#   70 TFLOP/s BF16 tensor (the A10's is 125) from Baseten's A10 vs A10G comparison.
#   No FP8 tensor cores (Ampere): FP8 weights run weight-only there.
# - rtx-pro-6000 (RTX PRO 6000 Blackwell, GB202, 188 SMs; the Server and Workstation
#   Editions share the memory): 4,000 FP4 TOPS with sparsity, so 2,000 dense FP4, 1,000
#   FP8 and 500 BF16 (each wider dtype half the rate, as on every Blackwell part above);
#   96 GB GDDR7 on a 512-bit bus at 28 Gbps, 1,792 GB/s. A device named "... Max-Q
#   Workstation Edition" matches it too, though that 300 W part runs at lower clocks.
#
# node_gpus: 8 per HGX/DGX (SXM) board or MI300X platform; 8 per typical L40S PCIe server,
# where the "fast" link is PCIe 4.0 x16 (no NVLink). net_bw: one 400 Gb/s InfiniBand NDR
# or RoCE NIC per GPU (50e9 B/s) on H100, H200, B200 and MI300X systems; one 200 Gb/s HDR
# NIC per GPU on DGX A100 (25e9 B/s); about 100 Gb/s per GPU (12.5e9 B/s) on an L40S
# server with a 200 Gb/s NIC per two GPUs. 20 µs per all-reduce step across the network.
# - h100-pcie: 8 per PCIe server, PCIe Gen5 x16 (64 GB/s each way) between GPUs; the
#   network as the L40S server's (no reference system).
# - h100-nvl: NVLink bridges join the cards in pairs only (600 GB/s both ways, 300 each),
#   so node_gpus is the pair; a ring over more GPUs crosses PCIe and is priced at the
#   network's figure, as the L40S server's (no reference system).
# - a100-40gb: 8 per DGX A100 (its first, 320 GB version) or HGX A100 board, NVLink
#   300 GB/s each way, a 200 Gb/s HDR NIC per GPU, as the 80GB part.
# - h20: 8 per HGX H20 board, NVLink 450 GB/s each way, a 400 Gb/s NIC per GPU.
# - gb200: the NVL72 rack's 72 GPUs share NVLink 5 (900 GB/s each way); a 400 Gb/s
#   ConnectX-7 NIC per GPU (4 per 4-GPU compute tray). host_bw is NVLink-C2C (450 GB/s
#   each way), which a host KV tier in Grace memory uses instead of PCIe.
# - mi325x: 8 per platform, as the MI300X.
# - b300: 8 per HGX B300 board, a ConnectX-8 800 Gb/s NIC per GPU (100e9 B/s). The GPU's
#   own PCIe link is Gen 6, but DGX B300's Xeon 6776P hosts are Gen 5, which is what a
#   public B300 characterisation measured: host_bw as the B200's.
# - gb300: one NVL72 NVLink domain as the GB200's, NVLink-C2C to its Grace, a ConnectX-8
#   800 Gb/s NIC per GPU (100e9 B/s).
# - l4: 8 per Google Cloud g2-standard-96 (PCIe Gen4, 100 Gb/s for the machine:
#   12.5e9 / 8 per GPU).
# - a10g: 8 per AWS g5.48xlarge (PCIe Gen4, 100 Gb/s for the instance: 12.5e9 / 8 per
#   GPU).
# - rtx-pro-6000: 8 per RTX PRO server (the Server Edition has no NVLink: PCIe Gen5 x16,
#   64 GB/s each way, between GPUs and to the host); a 400 Gb/s NIC per GPU (50e9 B/s),
#   the figure AIConfigurator's system file uses for its collection host.
GPUS: dict[str, GPUSpec] = {
    "a100-80gb": GPUSpec("a100-80gb", 312e12, 2.039e12, 85_100_068_864, 300e9, 8e-6, 32e9,
                         8, 25e9, 20e-6),
    "h100-sxm": GPUSpec("h100-sxm", 989e12, 3.35e12, 85_045_477_376, 450e9, 8e-6, 64e9,
                        8, 50e9, 20e-6, 1979e12),
    "h200": GPUSpec("h200", 989e12, 4.8e12, 150_109_880_320, 450e9, 8e-6, 64e9, 8, 50e9, 20e-6,
                    1979e12),
    "l40s": GPUSpec("l40s", 362e12, 0.864e12, 47_803_596_800, 32e9, 20e-6, 32e9,
                    8, 12.5e9, 20e-6, 733e12),
    "b200": GPUSpec("b200", 2250e12, 8.0e12, 182_642 * _MIB, 900e9, 6e-6, 64e9, 8, 50e9, 20e-6,
                    4500e12, fp4_flops=9000e12),
    "mi300x": GPUSpec("mi300x", 1307e12, 5.3e12, 196_592 * _MIB, 448e9, 10e-6, 64e9,
                      8, 50e9, 20e-6, 2615e12),
    "h100-pcie": GPUSpec("h100-pcie", 756.5e12, 2.0e12, 81_008 * _MIB, 64e9, 20e-6, 64e9,
                         8, 12.5e9, 20e-6, 1513e12),
    "h100-nvl": GPUSpec("h100-nvl", 835.5e12, 3.9e12, 99_861_594_112, 300e9, 8e-6, 64e9,
                        2, 12.5e9, 20e-6, 1670.5e12),
    "h20": GPUSpec("h20", 148e12, 4.0e12, 97_285 * _MIB, 450e9, 8e-6, 64e9, 8, 50e9, 20e-6,
                   296e12),
    "gb200": GPUSpec("gb200", 2500e12, 8.0e12, 188_754 * _MIB, 900e9, 6e-6, 450e9,
                     72, 50e9, 20e-6, 5000e12, fp4_flops=10000e12),
    "b300": GPUSpec("b300", 2250e12, 7.75e12, 274_323 * _MIB, 900e9, 6e-6, 64e9, 8, 100e9,
                    20e-6, 4500e12, fp4_flops=14000e12),
    "gb300": GPUSpec("gb300", 2500e12, 8.0e12, 283_491 * _MIB, 900e9, 6e-6, 450e9,
                     72, 100e9, 20e-6, 5000e12, fp4_flops=15000e12),
    "mi325x": GPUSpec("mi325x", 1307.4e12, 6.0e12, 262_128 * _MIB, 448e9, 10e-6, 64e9,
                      8, 50e9, 20e-6, 2614.9e12),
    "l4": GPUSpec("l4", 121e12, 0.3e12, 23_570_219_008, 32e9, 20e-6, 32e9, 8, 1.5625e9, 20e-6,
                  242.5e12),
    "a10g": GPUSpec("a10g", 70e12, 0.6e12, 22_587 * _MIB, 32e9, 20e-6, 32e9, 8, 1.5625e9,
                    20e-6),
    "a100-40gb": GPUSpec("a100-40gb", 312e12, 1.555e12, 40_536 * _MIB, 300e9, 8e-6, 32e9,
                         8, 25e9, 20e-6),
    "rtx-pro-6000": GPUSpec("rtx-pro-6000", 500e12, 1.792e12, 97_250 * _MIB, 64e9, 20e-6,
                            64e9, 8, 50e9, 20e-6, 1000e12, fp4_flops=2000e12),
}


# Host (CPU) memory installed in one node of node_gpus GPUs, GiB: the default ceiling of a
# host KV tier (serving.kv_offload.cpu_gb x GPUs on the node; hardware.host_memory_gb
# overrides it). A DIMM "TB" is a binary one (32 x 64 GB DIMMs = 2048 GiB).
# - a100-80gb, h100-sxm, h200, b200: 2 TB of system memory in NVIDIA's DGX A100 (640 GB),
#   DGX H100, DGX H200 and DGX B200 user guides (B200: 32 DIMMs, upgradable to 4 TB).
# - b300: 2 TB assumed, as the DGX B200 (8-GPU HGX B300 servers carry 2 to 4 TB).
# - gb300: as the GB200 NVL72 rack, a Grace per two GPUs (17,280 GiB for 72); assumed the
#   same 480 GB a Grace.
# - mi300x: no vendor reference system; 2 TB assumed, as the 8-GPU HGX-class servers above.
# - l40s: no reference system either; 1 TB assumed for a typical 8-GPU PCIe server.
# - h100-pcie: 1 TB assumed, as the L40S server; h100-nvl: a quarter of that per NVLink
#   pair (its node), 256 GiB. h20, mi325x: 2 TB assumed, as the HGX-class servers above.
# - gb200: 480 GB of LPDDR5X per Grace CPU (GB200 NVL72 datasheet), one Grace per two
#   GPUs: 36 x 480 = 17,280 GiB per 72-GPU rack (a GPU's own Grace holds 240 GiB of it).
# - l4: 384 GB on a g2-standard-96; a10g: 768 GiB on a g5.48xlarge (cloud machine pages).
# - a100-40gb: 1 TB in the DGX A100 320 GB system (its user guide; the 640 GB one has 2).
# - rtx-pro-6000: no reference system; 1 TB assumed, as the L40S server.
# The operating system and the serving process need some of it; set host_memory_gb to
# what a tier may really take.
NODE_HOST_MEMORY_GIB: dict[str, float] = {
    "a100-80gb": 2048.0, "h100-sxm": 2048.0, "h200": 2048.0, "b200": 2048.0,
    "mi300x": 2048.0, "l40s": 1024.0, "h100-pcie": 1024.0, "h100-nvl": 256.0, "h20": 2048.0,
    "gb200": 17280.0, "mi325x": 2048.0, "l4": 384.0, "a10g": 768.0, "b300": 2048.0,
    "gb300": 17280.0, "a100-40gb": 1024.0, "rtx-pro-6000": 1024.0,
}


def weight_only(model: ModelSpec, gpu: GPUSpec) -> bool:
    """Whether ``model``'s FP8 weights run weight-only on ``gpu``: dequantised to bf16 for
    each GEMM, at bf16 FLOP/s, because the GPU has no FP8 tensor cores; or its 4-bit
    weights (projections' or experts'), by :func:`dtype_weight_only`."""
    if model.dtype in FP8_WEIGHTS and not gpu.fp8_flops:
        return True
    return any(dtype_weight_only(d, gpu) for d in (model.dtype, model.expert_dtype,
                                                   model.qkv_dtype)
               if d in FOUR_BIT_WEIGHTS)


def dtype_weight_only(dtype: str, gpu: GPUSpec) -> bool:
    """Whether GEMMs on weights of ``dtype`` run weight-only on ``gpu`` (the packed weights
    read, dequantised and multiplied at bf16 FLOP/s).

    int4 always does (vLLM's GPTQ/AWQ Marlin kernels are w4a16). So does mxfp4: vLLM runs
    gpt-oss's mxfp4 experts with bf16 activations on every GPU, a Triton kernel on Hopper
    and FlashInfer's TRT-LLM "mxfp4_bf16" kernel on Blackwell (the kernel sources of
    AIConfigurator's vLLM 0.24.0 MoE tables on H200 and B200), not on FP4 tensor cores.
    nvfp4 (W4A4) runs on FP4 tensor cores where the GPU has them and weight-only through
    Marlin elsewhere (``is_fp4_marlin_supported``: compute capability 8.0, every NVIDIA
    GPU here); FP8 weight-only where the GPU has no FP8 tensor cores."""
    if dtype in ("int4", "mxfp4"):
        return True
    if dtype == "nvfp4":
        return not gpu.fp4_flops
    return dtype in FP8_WEIGHTS and not gpu.fp8_flops



def check_dtype(model: ModelSpec, gpu: GPUSpec) -> None:
    """Refuse a weight dtype vLLM cannot run on ``gpu`` at all: NVFP4 on the AMD MI300X.
    vLLM runs NVFP4 checkpoints (ModelOpt, compressed-tensors) on NVIDIA GPUs only, natively
    on Blackwell and through Marlin from compute capability 8.0; its ROCm platform lists
    neither quantisation among those it supports (MXFP4, GPTQ and AWQ it does list)."""
    for key in ("dtype", "expert_dtype", "qkv_dtype"):
        if getattr(model, key) == "nvfp4" and gpu.name.startswith("mi"):
            raise ServesimError(
                f"got 'nvfp4': {gpu.name} has no FP4 tensor cores and vLLM's weight-only FP4 "
                "(Marlin) kernels are CUDA-only; use mxfp4, int4 or fp8 weights there, or an "
                "NVIDIA GPU", where=f"model.{key}")


def dtype_note(model: ModelSpec, gpu: GPUSpec, mxfp8_experts: bool = False) -> str:
    """What a cost source adds about the model's dtypes: FP8 weights (weight-only on a GPU
    without FP8 tensor cores), query/key/value projections kept at a dtype of their own,
    and an FP8 KV cache; empty for a plain 16-bit model.
    ``mxfp8_experts``: mxfp4 experts run with MXFP8 activations (a framework's measured
    MoE kernel on Blackwell), not weight-only."""
    parts = []
    if model.dtype in FP8_WEIGHTS:
        parts.append(f"{model.dtype} weights, weight-only on {gpu.name} (no FP8 tensor cores)"
                     if weight_only(model, gpu) else f"{model.dtype} weights")
    parts += four_bit_notes(model, gpu, mxfp8_experts)
    if model.own_qkv_dtype:
        parts.append(f"{model.own_qkv_dtype} query/key/value projections")
    if model.kv_dtype == "fp8":
        parts.append("fp8 KV cache")
    return f"; {', '.join(parts)}" if parts else ""


def four_bit_notes(model: ModelSpec, gpu: GPUSpec, mxfp8_experts: bool = False) -> list[str]:
    """How ``model``'s 4-bit projections and experts run on ``gpu``, one phrase each:
    on FP4 tensor cores, or weight-only (4-bit weights read, bf16 FLOP/s), or for mxfp4
    experts with MXFP8 activations where ``mxfp8_experts``; the experts' FP8 too where
    they differ from the projections'."""
    out = []
    for what, dtype in (("weights", model.dtype), ("experts", model.expert_dtype)):
        if dtype in FP8_WEIGHTS and what == "experts":
            out.append(f"{dtype} experts" + (f", weight-only on {gpu.name} (no FP8 tensor "
                                             "cores)" if not gpu.fp8_flops else ""))
        if dtype not in FOUR_BIT_WEIGHTS:
            continue
        if dtype == "mxfp4" and what == "experts" and mxfp8_experts:
            out.append("mxfp4 experts, mxfp8 activations (w4a8)")
        elif dtype in ("int4", "mxfp4"):
            out.append(f"{dtype} {what}, weight-only (w4a16)")

        elif dtype_weight_only(dtype, gpu):
            out.append(f"{dtype} {what}, weight-only on {gpu.name} (no FP4 tensor cores)")
        else:
            out.append(f"{dtype} {what} on FP4 tensor cores")
    return out


def gemm_peak(dtype: str, gpu: GPUSpec) -> tuple[float, bool]:
    """(FLOP/s, low precision) a GEMM on ``dtype`` weights runs at on ``gpu``: the FP8 or
    FP4 peak where it has tensor cores for them, else the bf16 one (16-bit weights, and
    weight-only FP8/FP4/int4, which dequantise to bf16)."""
    if dtype_weight_only(dtype, gpu) or dtype not in FP8_WEIGHTS + FP4_WEIGHTS:
        return gpu.flops, False
    return (gpu.fp4_flops if dtype in FP4_WEIGHTS else gpu.fp8_flops), True


def gpu_of_device(device_name: str) -> str | None:
    """The GPU table's name for the device a driver reports (``torch.cuda.get_device_name``:
    "NVIDIA H100 80GB HBM3" is h100-sxm); None for a device the table lacks."""
    lowered = "-".join(device_name.lower().split())  # "nvidia-h100-80gb-hbm3"

    def named(part: str) -> bool:
        # A Grace-Blackwell superchip's GPU ("NVIDIA GB300") is not its B-series namesake
        # (b300): other memory and links. Only a "gb" entry names it. Nor is a name that
        # goes on in digits the part's ("NVIDIA L40" is not l4: twice its memory).
        at = lowered.find(part)
        end = at + len(part)
        return (at >= 0 and (part.startswith("g") or not lowered[:at].endswith("g"))
                and not lowered[end:end + 1].isdigit())

    # The most specific name first: "NVIDIA H100 NVL" is h100-nvl, "NVIDIA GB200" gb200
    # (not b200), "NVIDIA L40S" l40s (not l4); then within a family the entry whose size
    # the name gives ("NVIDIA A100-SXM4-40GB" is a100-40gb: half the memory of a100-80gb),
    # else the family's first entry (h100-sxm).
    for key in sorted(GPUS, key=len, reverse=True):
        if named(key):
            return key
    # A family is the name's first word ("h100" of h100-sxm), but an RTX PRO part's is its
    # whole name: "NVIDIA GeForce RTX 4090" and "RTX PRO 4500" are not an RTX PRO 6000.
    family = [key for key in GPUS
              if named(key if key.startswith("rtx-") else key.split("-")[0])]
    sized = [key for key in family if "-" in key and key.split("-", 1)[1] in lowered]
    if sized:
        return sized[0]
    return family[0] if family else None


def gpu(name: str) -> GPUSpec:
    """The GPU called ``name``; an unknown name is an error listing the valid ones."""
    try:
        return GPUS[name]
    except KeyError:
        raise ServesimError(f"unknown gpu {name!r}; valid: {', '.join(sorted(GPUS))}") from None
