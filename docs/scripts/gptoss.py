"""Numbers of docs/models.md's gpt-oss, 4-bit and sliding-window sections.

Re-run from the repository root:  .venv/bin/python docs/scripts/gptoss.py
It prints each table. The MoE comparison reads AIConfigurator's vLLM 0.24.0 MoE tables
(the ``measured`` extra); the rest needs only servesim.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.gpus import GPUS, gemm_peak  # noqa: E402
from sim.cost.memory import memory_budget  # noqa: E402
from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.roofline import RooflineCost, RooflineParams  # noqa: E402
from sim.cost.shape import decode_shape  # noqa: E402
from sim.cost.shard import shard  # noqa: E402
from sim.errors import ServesimError  # noqa: E402

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
    pool against one that counts every layer for every token (vLLM with
    --disable-hybrid-kv-cache-manager)."""
    print("\n| GPU | max_num_seqs | KV blocks | tokens (full layers) | a request's window "
          "blocks | every layer counted: tokens |")
    print("|---|---:|---:|---:|---:|---:|")
    m = MODELS["gpt-oss-120b"]
    for gpu, seqs in (("h100-sxm", 256), ("h100-sxm", 1024), ("h200", 256), ("b200", 256)):
        b = memory_budget(m, GPUS[gpu], 1, 0.9, 16, 8192, seqs)
        f = memory_budget(m, GPUS[gpu], 1, 0.9, 16, 8192, seqs, hybrid=False)
        print(f"| {gpu} | {seqs:,} | {b.blocks:,} | {b.kv_tokens:,} | "
              f"{b.window_request_blocks} | {f.kv_tokens:,} |")


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


def measured_vs_roofline() -> None:
    """gpt-oss-120b on one H200: whole decode steps and prefills priced by the shipped
    measured profile (vLLM 0.24.0) and by the roofline, ms, with the measured profile's
    experts-and-projections and attention terms."""
    from sim.cost.profilefile import load_profile
    from sim.cost.shape import shape_of

    m, p = MODELS["gpt-oss-120b"], RooflineParams()
    meas = load_profile("h200-gpt-oss-120b-tp1-vllm")
    roof = RooflineCost(m, GPUS["h200"], 1, p)
    print("\n| step | measured ms | roofline ms | roofline / measured | measured: linear "
          "| measured: attention |")
    print("|---|---:|---:|---:|---:|---:|")
    shapes = [(f"decode {b} x {ctx:,}", decode_shape(b, b * ctx))
              for b, ctx in ((1, 2048), (16, 2048), (64, 2048), (256, 2048), (64, 16384))]
    shapes += [(f"prefill {n:,}", shape_of([(n, 0)])) for n in (1024, 4096, 8192)]
    for label, shape in shapes:
        t_m, t_r = meas.step_time(shape), roof.step_time(shape)
        parts = meas.breakdown(shape)
        att = parts["decode_attention"] + parts["prefill_attention"]
        print(f"| {label} | {1e3 * t_m:.2f} | {1e3 * t_r:.2f} | {t_r / t_m:.2f} | "
              f"{1e3 * parts['linear']:.2f} | {1e3 * att:.2f} |")


def moe_interpolation() -> None:
    """Held-out error of joining the MoE tables' token counts linearly: every interior
    count predicted from its two neighbours (twice the real spacing), gpt-oss's mxfp4
    rows against the bf16 MoE presets', at tp 1, 2, 4, 8 on H100, H200 and B200."""
    from sim.cost.tables.moetable import moe_times
    from sim.cost.tables.profilebuild import BuildSpec, resolve_version

    print("\n| experts | framework | points | median | p90 | max |")
    print("|---|---|---:|---:|---:|---:|")
    for label, names in (("mxfp4 (gpt-oss)", ("gpt-oss-20b", "gpt-oss-120b")),
                         ("bf16 (Mixtral, Qwen3 MoE)", ("mixtral-8x7b", "qwen3-30b-a3b",
                                                        "qwen3-235b-a22b"))):
        for fw in ("vllm", "sglang"):
            errs: list[float] = []
            for name in names:
                for gpu in ("h100-sxm", "h200", "b200"):
                    for tp in (1, 2, 4, 8):
                        m = MODELS[name]
                        try:
                            v = resolve_version(BuildSpec(m, gpu, fw, tp))
                            t = moe_times(gpu, fw, v, m, tp)
                        except ServesimError:  # not measured there
                            continue
                        x, y = t.tokens, t.seconds
                        for i in range(1, len(x) - 1):
                            w = (x[i] - x[i - 1]) / (x[i + 1] - x[i - 1])
                            errs.append(abs((y[i - 1] * (1 - w) + y[i + 1] * w) / y[i] - 1))
            e = sorted(errs)
            print(f"| {label} | {fw} | {len(e)} | {100 * np.median(e):.1f}% | "
                  f"{100 * np.percentile(e, 90):.1f}% | {100 * max(e):.1f}% |")


def main() -> None:
    sizes()
    moe_layer()
    kv_capacity()
    decode_attention()
    measured_vs_roofline()
    moe_interpolation()


if __name__ == "__main__":
    main()
