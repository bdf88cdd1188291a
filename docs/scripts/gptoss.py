"""Numbers of docs/models.md's gpt-oss, 4-bit and sliding-window sections.

Re-run from the repository root:  .venv/bin/python docs/scripts/gptoss.py
It prints each table. The MoE comparison reads AIConfigurator's vLLM 0.24.0 MoE tables
(the ``measured`` extra); the rest needs only servesim.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.memory import memory_budget  # noqa: E402
from sim.cost.models import RooflineCost, RooflineParams, gemm_peak  # noqa: E402
from sim.cost.shape import decode_shape  # noqa: E402
from sim.cost.specs import GPUS, MODELS, shard  # noqa: E402

GIB = 2**30
TOKENS = (1, 16, 64, 256, 1024, 4096, 8192)


def sizes() -> None:
    """Parameters, parameters a token uses (without the embedding lookup, as OpenAI's
    card counts them), checkpoint bytes and KV bytes of the gpt-oss presets."""
    print("| model | parameters (B) | active, card's count (B) | weights (GiB) | KV KiB/token |")
    print("|---|---:|---:|---:|---:|")
    for name in ("gpt-oss-20b", "gpt-oss-120b"):
        m = MODELS[name]
        print(f"| {name} | {m.params / 1e9:.2f} | "
              f"{(m.active_params - m.embedding_params) / 1e9:.2f} | "
              f"{m.weight_bytes / GIB:.2f} | {m.kv_bytes_per_token / 1024:.0f} |")


def moe_layer() -> None:
    """One gpt-oss-120b MoE layer (tp 1, balanced routing): the roofline's experts term
    against the tables' w4a16_mxfp4 rows, ms."""
    import pyarrow.parquet as pq

    from sim.cost.tables.kerneltables import systems_dir

    m, p = MODELS["gpt-oss-120b"], RooflineParams()
    d = shard(m, 1)
    print("\n| GPU | tokens | table ms | roofline ms | kernel |")
    print("|---|---:|---:|---:|---|")
    for folder, name in (("h200_sxm", "h200"), ("b200_sxm", "b200")):
        path = systems_dir() / "data" / folder / "moe" / "vllm" / "0.24.0" / "moe_perf.parquet"
        t = pq.read_table(path).to_pandas()
        rows = t[(t.moe_dtype == "w4a16_mxfp4") & (t.hidden_size == 2880)
                 & (t.inter_size == 2880) & (t.num_experts == 128) & (t.topk == 4)
                 & (t.moe_tp_size == 1) & (t.moe_ep_size == 1)
                 & (t.distribution == "balanced")]
        gpu = GPUS[name]
        flops = gemm_peak("mxfp4", gpu)[0] * p.moe_flops_efficiency
        bw = gpu.mem_bw * p.bandwidth_efficiency
        for n in TOKENS:
            got = rows[rows.num_tokens == n]
            if not len(got):
                continue
            touched = m.experts * (1 - (1 - m.experts_per_token / m.experts) ** n)
            flop_s = 2 * n * m.experts_per_token * d.expert_params / flops
            mem_s = touched * d.expert_params * m.expert_dtype_bytes / bw
            kernel = got.kernel_source.iloc[0].split("_")[2]
            print(f"| {name} | {n} | {got.latency.median():.3f} | "
                  f"{1e3 * max(flop_s, mem_s):.3f} | {kernel} |")


def kv_capacity() -> None:
    """KV tokens of gpt-oss-120b on one GPU (0.9, 8,192 batched tokens): the hybrid
    budget against one that counts every layer for every token."""
    print("\n| GPU | max_num_seqs | windows set aside GiB | KV tokens | every layer counted |")
    print("|---|---:|---:|---:|---:|")
    m = MODELS["gpt-oss-120b"]
    flat = dataclasses.replace(m, sliding_window=0, sliding_layers=0)
    for gpu, seqs in (("h100-sxm", 256), ("h100-sxm", 1024), ("h200", 256), ("b200", 256)):
        b = memory_budget(m, GPUS[gpu], 1, 0.9, 16, 8192, seqs)
        f = memory_budget(flat, GPUS[gpu], 1, 0.9, 16, 8192, seqs)
        print(f"| {gpu} | {seqs} | {b.sliding / GIB:.2f} | {b.kv_tokens} | {f.kv_tokens} |")


def decode_attention() -> None:
    """gpt-oss-120b decode step on one H200, 64 sequences: attention ms with and without
    its sliding windows, by context."""
    m, p = MODELS["gpt-oss-120b"], RooflineParams()
    flat = dataclasses.replace(m, sliding_window=0, sliding_layers=0)
    print("\n| cached tokens | attention ms | without windows | whole step ms |")
    print("|---:|---:|---:|---:|")
    for ctx in (128, 2048, 16384, 65536):
        shape = decode_shape(64, 64 * ctx)
        win = RooflineCost(m, GPUS["h200"], 1, p)
        print(f"| {ctx} | {1e3 * win.parts(shape)['attention']:.3f} | "
              f"{1e3 * RooflineCost(flat, GPUS['h200'], 1, p).parts(shape)['attention']:.3f}"
              f" | {1e3 * win.step_time(shape):.3f} |")


def main() -> None:
    sizes()
    moe_layer()
    kv_capacity()
    decode_attention()


if __name__ == "__main__":
    main()
