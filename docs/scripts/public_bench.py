"""Public `vllm bench serve` runs against servesim: the table of docs/validation.md,
"Public vllm bench serve runs".

Each run below is a published benchmark of a plain vLLM server with the random dataset
(fixed prompt and output lengths, every prompt sent at once): its setup and its measured
median TTFT, median TPOT and duration, as its page gives them (source in each entry).
Each is simulated with the shipped measured profile, vLLM v1's scheduler with prefix
caching on (vLLM's default: a preempted request takes back its computed blocks) and the
run's own settings, its prompts as that many clients sending one request each; the KV
cache sized as the run's vLLM release sizes it (`serving.vllm_version`, which also runs
a release before 0.14 without async scheduling) where servesim models that release, else
from the block count the run's own server log printed (and without async scheduling),
else (0.10.2, whose logs are not published) as the nearest modelled release, 0.11.0.
Nothing was fitted to these runs.

A second table holds closed-loop runs (``--max-concurrency`` clients, each sending its
next request when the last one ends), simulated as that many clients. A third holds a
tiny model's runs on one H100 (Poisson arrivals, and every prompt at once), simulated
with a profile built from the same kernel tables (which needs the ``measured`` extra).

Usage: python docs/scripts/public_bench.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GPUSTACK = "github.com/gpustack/gpustack docs/performance-lab"
DENNIS = "github.com/dennislee22/vLLM-benchmarking README"

# (label, source, vLLM release, model preset, GPU, tp, prompt and output tokens (the
# run's totals over its requests), requests, memory utilization (None: vLLM's default),
# max_num_batched_tokens (None: the default), KV blocks of 16 tokens from the run's log
# (None: sized by the release), measured median TTFT ms, median TPOT ms, duration s).
RUNS: list[tuple[Any, ...]] = [
    ("Qwen3-32B 4000/200", f"{GPUSTACK}/qwen3-32b/h100.md", "0.11.0", "qwen3-32b",
     "h100-sxm", 1, 3996, 200, 500, None, None, None, 483375.28, 62.08, 976.29),
    ("Qwen3-32B 2000/100", f"{GPUSTACK}/qwen3-32b/h100.md", "0.11.0", "qwen3-32b",
     "h100-sxm", 1, 1996, 100, 500, None, None, None, 164148.38, 84.24, 328.04),
    ("Qwen3-235B-A22B 32000/100", f"{GPUSTACK}/qwen3-235b-a22b/h100.md", "0.11.0",
     "qwen3-235b-a22b", "h100-sxm", 8, 32000, 82, 100, None, None, None, 70737.29, 134.49,
     141.6),
    ("DeepSeek-R1 4000/200", f"{GPUSTACK}/deepseek-r1/h200.md", "0.11.0", "deepseek-r1",
     "h200", 8, 3995, 200, 500, None, None, None, 61952.74, 177.37, 132.68),
    # Qwen2-7B-Instruct (Qwen2.5-7B's architecture) on one A100 80GB, vLLM 0.10.1.1,
    # 2,048 batched tokens; its log: 24.83 GiB of KV, 464,848 tokens, at 0.5 of memory,
    # 5.01 GiB and 93,872 tokens at 0.25.
    ("Qwen2-7B 1024/1024, 10", DENNIS, None, "qwen2.5-7b", "a100-80gb", 1, 1024, 1024, 10,
     0.5, 2048, 29053, 511.95, 13.45, 14.3),
    ("Qwen2-7B 1024/1024, 50", DENNIS, None, "qwen2.5-7b", "a100-80gb", 1, 1020, 1022, 50,
     0.5, 2048, 29053, 2490.45, 18.57, 21.7),
    ("Qwen2-7B 1024/1024, 100", DENNIS, None, "qwen2.5-7b", "a100-80gb", 1, 1021, 1016, 100,
     0.5, 2048, 29053, 3896.62, 25.36, 30.31),
    ("Qwen2-7B 1024/1024, 100, small cache", DENNIS, None, "qwen2.5-7b", "a100-80gb", 1,
     1021, 1016, 100, 0.25, 2048, 5867, 4105.02, 24.73, 47.81),
    ("Qwen2-7B 1024/1024, 200, small cache", DENNIS, None, "qwen2.5-7b", "a100-80gb", 1,
     1020, 1000, 200, 0.25, 2048, 5867, 30624.81, 26.43, 97.25),
    ("Qwen2-7B 1024/1024, 500, small cache", DENNIS, None, "qwen2.5-7b", "a100-80gb", 1,
     1021, 1003, 500, 0.25, 2048, 5867, 88718.78, 26.23, 231.04),
    # gpt-oss-120b on one H100 under vLLM 0.10.2 with --max-model-len 32768; the random
    # dataset's outputs end at EOS, so the output length is the runs' mean (67,205
    # tokens over 500 requests, 9,877 over 100).
    ("gpt-oss-120b 4000/134", f"{GPUSTACK}/gpt-oss-120b/h100.md", "0.10.2",
     {"preset": "gpt-oss-120b", "max_context": 32768}, "h100-sxm", 1, 3998, 134, 500, None,
     None, None, 73023.24, 32.02, 145.04),
    ("gpt-oss-120b 32000/99", f"{GPUSTACK}/gpt-oss-120b/h100.md", "0.10.2",
     {"preset": "gpt-oss-120b", "max_context": 32768}, "h100-sxm", 1, 32000, 99, 100, None,
     None, None, 99439.56, 23.69, 198.92),
]
# Releases servesim does not model, sized as the nearest one that it does.
SIZED_AS = {"0.10.2": "0.11.0"}

# A public report of closed-loop `vllm bench serve`-style runs (its metric names) of
# Qwen2.5-7B-Instruct on one L40S 48GB under vLLM 0.30.0, random prompts of fixed
# lengths, --max-model-len 8192, --gpu-memory-utilization 0.90, temperature 0, one run
# each. It is a GitHub markdown page titled "Findings" (sections E1-E4); the stored
# copy read for this table does not name its repository. Its prompt counts are not
# given. Left out: its E4 run with prefix caching on, whose shared prefix was warmed
# before the run (not a plain server).
L40S_FINDINGS = "a public 'Findings' page: Qwen2.5-7B-Instruct, 1x L40S, vLLM 0.30.0"
# (label, prompt tokens, output tokens, clients, prefix caching, measured median TTFT
# ms, median TPOT ms, requests/s).
CLIENT_RUNS: list[tuple[str, int, int, int, bool, float, float, float]] = [
    ("E1 512/128, 1 client", 512, 128, 1, True, 53.4, 20.12, 0.383),
    ("E1 512/128, 4 clients", 512, 128, 4, True, 163.7, 21.03, 1.408),
    ("E1 512/128, 8 clients", 512, 128, 8, True, 226.7, 21.53, 2.603),
    ("E1 512/128, 16 clients", 512, 128, 16, True, 365.4, 22.91, 4.435),
    ("E2 512/64, 4 clients", 512, 64, 4, True, 135.2, 21.44, 2.687),
    ("E2 4096/64, 4 clients", 4096, 64, 4, True, 791.4, 28.32, 1.547),
    ("E3 512/64, 4 clients", 512, 64, 4, True, 153.6, 21.42, 2.676),
    ("E3 512/512, 4 clients", 512, 512, 4, True, 158.3, 21.10, 0.365),
    ("E4 2048/64, 4 clients, no prefix cache", 2048, 64, 4, False, 464.0, 23.43, 2.039),
]
# Requests a client sends in the simulation (the report does not give its counts):
# enough that the first wave, every client starting at once, is a small share.
REQUESTS_PER_CLIENT = 40

# Qwen3-0.6B (bf16) on one H100 80GB HBM3 under vLLM 0.19.0, `vllm serve
# --gpu-memory-utilization 0.5 --max-model-len 2048`, `vllm bench serve` random dataset,
# 512 prompt and 128 output tokens, 500 prompts, after a 100-prompt warm-up, seeds 42, 99
# and 7: github.com/ovg-project/kvcached, benchmarks/bench_layout (sweep_results, runs
# "A_vanilla_inf" and "F_vanilla_r16", plain vLLM without kvcached).
KVCACHED = "github.com/ovg-project/kvcached benchmarks/bench_layout/sweep_results"
# The model's shape (its config.json's figures).
QWEN3_06B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
             "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "vocab_size": 151936, "max_position_embeddings": 40960,
             "rope_theta": 1000000, "rms_norm_eps": 1e-06, "tie_word_embeddings": True,
             "attention_bias": False, "hidden_act": "silu", "torch_dtype": "bfloat16"}
# (label, request rate (None: every prompt at once), per seed 42, 99, 7: (median TTFT
# ms, median TPOT ms, median ITL ms, p99 ITL ms, requests/s)).
TINY_RUNS: list[tuple[str, float | None, list[tuple[float, float, float, float, float]]]] = [
    ("Poisson 16 req/s", 16.0, [(36.03, 2.399, 2.032, 12.69, 15.879),
                                (35.63, 2.394, 2.048, 12.80, 15.870),
                                (35.87, 2.383, 2.034, 12.76, 15.853)]),
    ("500 prompts at once", None, [(2869.8, 5.713, 4.515, 26.15, 92.595),
                                   (2833.6, 5.851, 4.758, 25.04, 96.988),
                                   (2968.3, 5.068, 4.355, 24.00, 95.162)]),
]


def client_scenario(run: tuple[Any, ...]) -> dict[str, Any]:
    """The scenario of one closed-loop L40S run: vLLM's defaults for a 48 GB GPU (2,048
    batched tokens, 256 sequences), its memory sized as vLLM 0.24.0 sizes it (0.30 is
    outside the modelled releases; the cache holds every client's request either way)
    and async scheduling, vLLM's default since 0.14."""
    label, isl, osl, clients, caching = run[:5]
    return {"name": label, "model": {"preset": "qwen2.5-7b", "max_context": 8192},
            "cost": "measured",
            "hardware": {"gpu": "l40s", "tp": 1, "memory_utilization": 0.9},
            "serving": {"policy": "chunked", "prefix_caching": caching,
                        "vllm_version": "0.24.0"},
            "workload": {"concurrency": clients,
                         "num_requests": REQUESTS_PER_CLIENT * clients,
                         "lengths": {"prompt": {"dist": "fixed", "value": isl},
                                     "output": {"dist": "fixed", "value": osl}}}}


def scenario(run: tuple[Any, ...], release: str | None) -> dict[str, Any]:
    """The scenario of one run, its memory sized as ``release`` (or the log's blocks)."""
    (label, _, _, model, gpu, tp, isl, osl, n, util, tokens, blocks, *_) = run
    serving: dict[str, Any] = {"policy": "chunked", "prefix_caching": True}
    if release is not None:
        serving["vllm_version"] = release
    else:
        # 0.10.1.1, outside the modelled releases: its loop without async scheduling
        # (vLLM's default from 0.14) and its admission on a first chunk (the whole
        # sequence's gate came in 0.19), as a release named before 0.14 runs.
        serving["async_scheduling"] = False
        serving["scheduler_reserve_full_isl"] = False
    if tokens is not None:
        serving["max_num_batched_tokens"] = tokens
    if blocks is not None:
        serving["num_gpu_blocks"] = blocks
    return {"name": label, "model": model, "cost": "measured",
            "hardware": {"gpu": gpu, "tp": tp,
                         **({"memory_utilization": util} if util is not None else {})},
            "serving": serving,
            "workload": {"concurrency": n, "num_requests": n,
                         "lengths": {"prompt": {"dist": "fixed", "value": isl},
                                     "output": {"dist": "fixed", "value": osl}}}}


def tiny_scenario(run: tuple[Any, ...], config: Path, profile: Path,
                  seed: int) -> dict[str, Any]:
    """One tiny-model run: vLLM 0.19's defaults for an 80 GB GPU (its CUDA graphs too:
    steps of up to 512 tokens), memory sized as 0.19 sizes it, the prompts Poisson at the
    run's rate or all sent at once."""
    label, rate = run[:2]
    load: dict[str, Any] = ({"arrivals": {"process": "poisson", "rate": rate}}
                            if rate is not None else {"concurrency": 500})
    return {"name": label, "model": {"hf_config": str(config), "max_context": 2048},
            "cost": {"profile": str(profile)},
            "hardware": {"gpu": "h100-sxm", "tp": 1, "memory_utilization": 0.5},
            "serving": {"policy": "chunked", "prefix_caching": True,
                        "vllm_version": "0.19.0"},
            "workload": {"num_requests": 500, "seed": seed, **load,
                         "lengths": {"prompt": {"dist": "fixed", "value": 512},
                                     "output": {"dist": "fixed", "value": 128}}}}


def tiny_table() -> None:
    """The third table: Qwen3-0.6B on one H100, each seed simulated."""
    import json
    import tempfile

    from sim.cli import main as cli
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    print(f"\nA tiny model on one H100 ({KVCACHED}):\n")
    with tempfile.TemporaryDirectory() as tmp:
        config, profile = Path(tmp) / "config.json", Path(tmp) / "profile.yaml"
        config.write_text(json.dumps(QWEN3_06B))
        if cli(["profile", "build", "--gpu", "h100-sxm", "--framework", "vllm",
                "--hf-config", str(config), "--tp", "1", "--out", str(profile)]) != 0:
            print("(not built: the profile builder needs the measured extra)")
            return
        print("| run | seed | TTFT p50 ms: measured / simulated | TPOT p50 ms "
              "| ITL p50 ms | ITL p99 ms | requests/s |")
        print("|---|---:|---|---|---|---|---|")
        for run in TINY_RUNS:
            for seed, meas in zip((42, 99, 7), run[2], strict=True):
                s = summarize(simulate(from_dict(
                    tiny_scenario(run, config, profile, seed), "<public bench>")))
                lat = s["latency_s"]
                sim = (lat["ttft"]["p50"] * 1e3, lat["tpot"]["p50"] * 1e3,
                       lat["itl"]["p50"] * 1e3, lat["itl"]["p99"] * 1e3,
                       s["throughput"]["requests_per_s"])
                cells = " | ".join(f"{m:,.{d}f} / {x:,.{d}f} ({x / m - 1:+.0%})"
                                   for m, x, d in zip(meas, sim, (1, 2, 2, 1, 1), strict=True))
                print(f"| {run[0]} | {seed} | {cells} |", flush=True)


def main() -> None:
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    print("| run | vLLM | sized as | GPUs | TTFT p50 ms: measured / simulated | TPOT p50 ms "
          "| duration s | KV blocks | preemptions |")
    print("|---|---|---|---|---|---|---|---:|---:|")
    for run in RUNS:
        label, _, version, _, gpu, tp = run[:6]
        ttft, tpot, dur = run[-3:]
        # The run's own release, and for the Qwen3-32B runs the default release too.
        releases = [SIZED_AS.get(version, version)] + (
            ["0.24.0"] if label.startswith("Qwen3-32B") else [])
        for release in releases:
            res = simulate(from_dict(scenario(run, release), "<public bench>"))
            s = summarize(res)
            lat = s["latency_s"]
            t, p = lat["ttft"]["p50"] * 1e3, lat["tpot"]["p50"] * 1e3
            span = float(np.nanmax(res.finish))  # every request is sent at 0
            sized = f"vLLM {release}" if release else "the log's blocks"
            print(f"| {label} | {version or '0.10.1.1'} | {sized} | {tp}× {gpu} "
                  f"| {ttft:,.0f} / {t:,.0f} ({t / ttft - 1:+.0%}) "
                  f"| {tpot:.1f} / {p:.1f} ({p / tpot - 1:+.0%}) "
                  f"| {dur:,.0f} / {span:,.0f} | {s['kv']['blocks_per_replica'][0]:,} "
                  f"| {s['preemptions']:,} |", flush=True)

    print(f"\nClosed-loop clients ({L40S_FINDINGS}):\n")
    print("| run | TTFT p50 ms: measured / simulated | TPOT p50 ms | requests/s |")
    print("|---|---|---|---|")
    for run in CLIENT_RUNS:
        ttft, tpot, rate = run[-3:]
        s = summarize(simulate(from_dict(client_scenario(run), "<public bench>")))
        lat = s["latency_s"]
        t, p = lat["ttft"]["p50"] * 1e3, lat["tpot"]["p50"] * 1e3
        r = s["throughput"]["requests_per_s"]
        print(f"| {run[0]} | {ttft:,.1f} / {t:,.1f} ({t / ttft - 1:+.0%}) "
              f"| {tpot:.2f} / {p:.2f} ({p / tpot - 1:+.0%}) "
              f"| {rate:.3f} / {r:.3f} ({r / rate - 1:+.0%}) |", flush=True)

    tiny_table()


if __name__ == "__main__":
    main()
