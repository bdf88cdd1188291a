"""Numbers of docs/models.md, "Gated DeltaNet layers (Qwen3.5)".

Re-run from the repository root:  .venv/bin/python docs/scripts/qwen35.py
It prints three markdown tables: the Qwen3.5 presets' sizes; one GPU's memory for
Qwen3.5-397B-A17B on 8 B200s under vLLM's memory model, the states set aside (SGLang's
layout) and paged from the KV pool (vLLM's); and a decode step's parts from
the shipped measured profile (vLLM 0.24.0 on B200, tp 8) at growing context: the
device's kernels and the host's work (the step prior, which vLLM's async scheduling
overlaps with the device); and prefix caching of Qwen3.5-27B as vLLM's align mode keeps
it, simulated on one H200 (the roofline).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.cost.gpus import GPUS  # noqa: E402
from sim.cost.kvpages import state_block_size  # noqa: E402
from sim.cost.measured import find  # noqa: E402
from sim.cost.memory import memory_budget  # noqa: E402
from sim.cost.memorybudget import GIB  # noqa: E402
from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.profilefile import load_profile  # noqa: E402
from sim.cost.shape import decode_shape  # noqa: E402
from sim.cost.shard import shard  # noqa: E402

NAMES = ("qwen3.5-27b", "qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b")
BIG = "qwen3.5-397b-a17b"


def sizes() -> None:
    print("| model | layers (Gated DeltaNet) | parameters (B) | used per token (B) "
          "| weights (GB) | KV KiB/token | state MiB/sequence |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in NAMES:
        m = MODELS[name]
        print(f"| {name} | {m.layers} ({m.linear_layers}) | {m.params / 1e9:.1f} "
              f"| {m.active_params / 1e9:.1f} | {m.weight_bytes / 1e9:.1f} "
              f"| {m.kv_bytes_per_token / 1024:.0f} | {m.linear_state_bytes / 2**20:.1f} |")


def memory() -> None:
    m = MODELS[BIG]
    size = state_block_size(m, 8, 32)  # heads of 256 on a B200: 32-token alignment
    print("\n| states | max_num_seqs | block tokens | weights GiB | states set aside GiB "
          "| KV GiB | KV blocks | KV tokens | blocks a request's states take |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for pool, seqs in (("set aside (SGLang)", 256), ("set aside (SGLang)", 1024),
                       ("pages of the pool (vLLM)", 1024)):
        shared = pool.endswith("(vLLM)")
        b = memory_budget(m, GPUS["b200"], 8, 0.9, size if shared else 16, 8192, seqs,
                          shared_states=shared)
        print(f"| {pool} | {seqs} | {b.block_size} | {b.weights / GIB:.2f} "
              f"| {b.linear_state / GIB:.2f} | {b.kv / GIB:.2f} | {b.blocks:,} "
              f"| {b.kv_tokens:,} | {b.state_blocks} |")
    print(f"\nstate MiB a sequence, one GPU: {shard(m, 8).linear_state_bytes / 2**20:.2f}")


# (sequences, context a sequence): every point fits the 2.3 to 4.0 M tokens of KV above.
POINTS = ((1, 2048), (1, 32768), (1, 131072), (16, 2048), (16, 32768), (16, 131072),
          (64, 2048), (64, 32768))


def decode() -> None:
    prof = load_profile(find(MODELS[BIG], "b200", 8, "vllm"))
    print("\n| sequences | context a sequence | device ms | projections and experts "
          "| attention and Gated DeltaNet | all-reduce | LM head | host ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for seqs, ctx in POINTS:
        p = {k: float(v) * 1e3 for k, v in
             prof.breakdown(decode_shape(seqs, seqs * ctx)).items()}
        device = p["linear"] + p["decode_attention"] + p["allreduce"] + p["lm_head"]
        print(f"| {seqs} | {ctx:,} | {device:.2f} | {p['linear']:.2f} "
              f"| {p['decode_attention']:.2f} | {p['allreduce']:.2f} | {p['lm_head']:.2f} "
              f"| {p['step'] + p['host']:.2f} |")


def caching() -> None:
    """Prefix caching of Qwen3.5-27B on one H200 under vLLM's align mode: 8 groups of
    requests sharing their first 4,096 tokens, prompts of 4,500 to 6,000, at 2 requests/s."""
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    print("\n| prefix caching | max_num_batched_tokens | prompt tokens hit | TTFT p50 ms "
          "| TTFT p90 ms | evictions |")
    print("|---|---:|---:|---:|---:|---:|")
    for on, budget in ((False, 8192), (True, 8192), (True, 2048)):
        raw = {"name": "qwen35-cache", "model": "qwen3.5-27b", "cost": "roofline",
               "hardware": {"gpu": "h200", "tp": 1},
               "serving": {"policy": "chunked", "prefix_caching": on,
                           "max_num_batched_tokens": budget},
               "workload": {"arrivals": {"process": "poisson", "rate": 2.0},
                            "num_requests": 600, "seed": 0,
                            "shared_prefix": {"tokens": 4096, "groups": 8, "block_tokens": 16},
                            "lengths": {"prompt": {"dist": "uniform", "low": 4500,
                                                   "high": 6000},
                                        "output": {"dist": "fixed", "value": 200}}}}
        s = summarize(simulate(from_dict(raw)))
        pc = s.get("prefix_cache") or {}
        ttft = s["latency_s"]["ttft"]
        print(f"| {'on' if on else 'off'} | {budget:,} | {pc.get('hit_rate', 0.0):.1%} "
              f"| {ttft['p50'] * 1e3:.1f} | {ttft['p90'] * 1e3:.1f} "
              f"| {pc.get('evictions', 0):,} |")


if __name__ == "__main__":
    sizes()
    memory()
    decode()
    caching()
