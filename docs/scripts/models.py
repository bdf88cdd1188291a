"""Numbers and plots of docs/models.md: what a mixture of experts and FP8 weights cost.

Re-run from the repository root:  .venv/bin/python docs/scripts/models.py
It prints each table and writes docs/img/models_*.png. Every price comes from the
shipped measured profiles (vLLM 0.24.0 kernel tables) unless a table says roofline.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.config.scenario import from_dict  # noqa: E402
from sim.core.engine import build_cost, simulate  # noqa: E402
from sim.cost.gpus import GPUS  # noqa: E402
from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.roofline import RooflineCost, RooflineParams  # noqa: E402
from sim.cost.shape import decode_shape, shape_of  # noqa: E402
from sim.report.summary import summarize  # noqa: E402

IMG = ROOT / "docs" / "img"
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def scenario(model: Any, gpu: str, tp: int, rate: float = 1.0, n: int = 200,
             prompt: int = 1024, output: int = 128, cost: str = "measured") -> Any:
    """``model`` on ``tp`` GPUs of ``gpu``, priced by ``cost`` (the shipped measured
    profile unless told), vLLM v1's scheduler, Poisson arrivals of fixed-length
    requests."""
    return from_dict({"model": model, "hardware": {"gpu": gpu, "tp": tp}, "cost": cost,
                      "vllm": {},
                      "workload": {"arrivals": {"process": "poisson", "rate": rate},
                                   "num_requests": n, "seed": 1,
                                   "lengths": {"prompt": {"dist": "fixed", "value": prompt},
                                               "output": {"dist": "fixed", "value": output}}}})


def sizes() -> list[dict[str, Any]]:
    """Every MoE and FP8 preset: parameters, parameters a token uses, bytes."""
    rows = []
    for name in ("mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-235b-a22b-fp8",
                 "llama-3.3-70b-fp8", "llama-3.1-70b", "deepseek-v3", "kimi-k2.5",
                 "minimax-m2.5", "qwen3.5-397b-a17b", "glm-5", "deepseek-v3.2"):
        m = MODELS[name]
        rows.append({"model": name, "params_b": m.params / 1e9,
                     "active_b": m.active_params / 1e9, "weights_gb": m.weight_bytes / 1e9,
                     "kv_kib_per_token": m.kv_bytes_per_token / 1024})
    return rows


def decode_curves() -> dict[str, list[float]]:
    """Decode step time (ms) against batch size at 1,024 cached tokens a sequence:
    Mixtral-8x7B (12.9B used per token, 46.7B in all) against Llama-3-70B (70.6B), both
    on 4 H100s, and Mixtral priced by the roofline."""
    out: dict[str, list[float]] = {}
    for label, model, kind in (("mixtral-8x7b (measured)", "mixtral-8x7b", "measured"),
                               ("mixtral-8x7b (roofline)", "mixtral-8x7b", "roofline"),
                               ("llama-3-70b (measured)", "llama-3-70b", "measured")):
        sc = scenario(model, "h100-sxm", 4)
        cost = build_cost(sc) if kind == "measured" else RooflineCost(
            sc.model, GPUS["h100-sxm"], 4, RooflineParams())
        out[label] = [cost.step_time(decode_shape(b, b * 1024)) * 1e3 for b in BATCHES]
    return out


def qwen235_parts() -> dict[str, float]:
    """One decode step of Qwen3-235B-A22B on 8 H200s, 64 sequences at 2,048 cached
    tokens, by roofline component (ms)."""
    cost = RooflineCost(MODELS["qwen3-235b-a22b"], GPUS["h200"], 8, RooflineParams())
    return {k: float(v) * 1e3 for k, v in cost.parts(decode_shape(64, 64 * 2048)).items()}


def deepseek_parts() -> dict[str, dict[str, float]]:
    """One decode step of DeepSeek-V3 on 8 H200s by roofline component (ms): one
    sequence at 2,048 cached tokens, and 64 of them (as Qwen3-235B-A22B's above)."""
    cost = RooflineCost(MODELS["deepseek-v3"], GPUS["h200"], 8, RooflineParams())
    return {f"{b} x 2,048": {k: float(v) * 1e3 for k, v in
                             cost.parts(decode_shape(b, b * 2048)).items()} for b in (1, 64)}


def deepseek_measured_parts() -> dict[str, dict[str, float]]:
    """The same two steps priced by the shipped measured profiles of DeepSeek-V3 on 8
    H200s (vLLM and SGLang), by profile component (ms; components that are zero left
    out)."""
    from sim.cost.profilefile import load_profile

    out: dict[str, dict[str, float]] = {}
    for fw in ("vllm", "sglang"):
        cost = load_profile(f"h200-deepseek-v3-tp8-{fw}")
        for b in (1, 64):
            parts = cost.breakdown(decode_shape(b, b * 2048))
            out[f"{fw}, {b} x 2,048"] = {k: float(v) * 1e3 for k, v in parts.items()}
    return out


def glm5_sparse() -> dict[str, list[float]]:
    """GLM-5 on 8 H200s: attention's share of a decode step (ms) of 32 sequences at 2k to
    128k cached tokens each, by the roofline with its sparse attention and with the same
    latent attention dense (no indexer), and the whole step by the shipped SGLang
    profile; then prefill steps of one 1,024-, 2,048-, 4,096- and 8,192-token prompt
    (ms) by that profile, its sparse-path term apart."""
    from sim.cost.profilefile import load_profile

    glm5 = MODELS["glm-5"]
    dense = dataclasses.replace(glm5, index_topk=0, index_n_heads=0, index_head_dim=0,
                                name="glm-5-dense")
    sparse_rf = RooflineCost(glm5, GPUS["h200"], 8, RooflineParams())
    dense_rf = RooflineCost(dense, GPUS["h200"], 8, RooflineParams())
    measured = load_profile("h200-glm-5-tp8-sglang")
    out: dict[str, list[float]] = {"roofline attention, sparse": [],
                                   "roofline attention, dense MLA": [],
                                   "measured step (SGLang)": []}
    for ctx in GLM5_CONTEXTS:
        shape = decode_shape(32, 32 * ctx)
        out["roofline attention, sparse"].append(float(sparse_rf.parts(shape)["attention"]))
        out["roofline attention, dense MLA"].append(float(dense_rf.parts(shape)["attention"]))
        out["measured step (SGLang)"].append(float(measured.step_time(shape)))
    for n in (1024, 2048, 4096, 8192):
        parts = measured.breakdown(shape_of([(n, 0)]))
        out.setdefault("prefill step", []).append(float(sum(parts.values())))
        out.setdefault("of which sparse path", []).append(float(parts["sparse_prefill"]))
    return {k: [x * 1e3 for x in v] for k, v in out.items()}


GLM5_CONTEXTS = (2048, 8192, 32768, 131072)


def qwen235_layouts() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Qwen3-235B-A22B on 8 H200s under tp 8 and under ep 8: decode steps at 1, 16, 64 and
    256 sequences of 2,048 cached tokens (the roofline, the same for both, and each
    shipped vLLM profile, synchronous), and prefill steps of 512, 2,048 and 8,192 tokens
    by the profiles (ms)."""
    from sim.cost.profilefile import load_profile

    m = MODELS["qwen3-235b-a22b"]
    roof = RooflineCost(m, GPUS["h200"], 8, RooflineParams())
    decode = {"roofline": [float(roof.step_time(decode_shape(b, b * 2048))) * 1e3
                           for b in (1, 16, 64, 256)]}
    prefill = {}
    for label, stem in (("tp 8", "h200-qwen3-235b-a22b-tp8-vllm"),
                        ("ep 8", "h200-qwen3-235b-a22b-tp8-ep8-vllm")):
        cost = load_profile(stem)
        decode[label] = [float(cost.step_time(decode_shape(b, b * 2048))) * 1e3
                         for b in (1, 16, 64, 256)]
        prefill[label] = [float(cost.step_time(shape_of([(n, 0)]))) * 1e3
                          for n in (512, 2048, 8192)]
    return decode, prefill


def deepseek_memory() -> dict[str, float]:
    """DeepSeek-V3 on 8 H200s at vLLM's defaults: per-GPU GiB and the replica's KV tokens."""
    from sim.cost.memory import memory_budget

    return memory_budget(MODELS["deepseek-v3"], GPUS["h200"], 8, 0.9, 16, 8192,
                         256).fitted().summary()


def fp8_runs() -> list[dict[str, Any]]:
    """Llama-3.1-8B on one H100 in bf16 and FP8 weights: a long prefill's price and a
    light-load run's TTFT and TPOT (1,024-token prompts, 128 outputs, 4 req/s)."""
    rows = []
    for dtype in ("bf16", "fp8"):
        sc = scenario({"preset": "llama-3.1-8b", "dtype": dtype}, "h100-sxm", 1, rate=4.0)
        s = summarize(simulate(sc))
        cost = build_cost(sc)
        rows.append({"dtype": dtype, "prefill_8192_ms": cost.step_time(shape_of([(8192, 0)]))
                     * 1e3, "ttft_p50_ms": s["latency_s"]["ttft"]["p50"] * 1e3,
                     "tpot_p50_ms": s["latency_s"]["tpot"]["p50"] * 1e3,
                     "source": cost.source})
    return rows


def fp4_steps() -> dict[str, list[tuple[float, float]]]:
    """Llama-3.1-70B on two B200s in bf16, FP8 and NVFP4 weights: (measured, roofline)
    ms of an 8,192-token prefill, a decode of one sequence and of 64 at 1,024 tokens."""
    shapes = (shape_of([(8192, 0)]), decode_shape(1, 1024), decode_shape(64, 1024))
    out = {}
    for dtype in ("bf16", "fp8", "nvfp4"):
        costs = [build_cost(scenario({"preset": "llama-3.1-70b", "dtype": dtype}, "b200", 2,
                                     cost=cost)) for cost in ("measured", "roofline")]
        out[dtype] = [(costs[0].step_time(x) * 1e3, costs[1].step_time(x) * 1e3)
                      for x in shapes]
    return out


def plot(curves: dict[str, list[float]]) -> None:
    """docs/img/models_moe_decode.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.report.plots import save_png

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for label, ys in curves.items():
        ax.plot(BATCHES, ys, marker="o", linestyle="--" if "roofline" in label else "-",
                label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(BATCHES, [str(b) for b in BATCHES])
    ax.set_xlabel("sequences decoding (1,024 cached tokens each)")
    ax.set_ylabel("decode step (ms)")
    ax.set_title("A mixture of experts reads more of its weights as the batch grows\n"
                 "4 x H100, vLLM 0.24.0 kernel tables")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_png(fig, IMG / "models_moe_decode.png")
    plt.close(fig)


def main() -> None:
    print("| model | parameters (B) | used per token (B) | weights (GB) | KV KiB/token |")
    print("|---|---:|---:|---:|---:|")
    for r in sizes():
        print(f"| {r['model']} | {r['params_b']:.1f} | {r['active_b']:.1f} | "
              f"{r['weights_gb']:.1f} | {r['kv_kib_per_token']:.0f} |")
    curves = decode_curves()
    print("\n| sequences | " + " | ".join(curves) + " |")
    print("|---:|" + "---:|" * len(curves))
    for i, b in enumerate(BATCHES):
        print(f"| {b} | " + " | ".join(f"{v[i]:.2f}" for v in curves.values()) + " |")
    parts = qwen235_parts()
    print("\n| component | ms |\n|---|---:|")
    for k, v in parts.items():
        print(f"| {k} | {v:.2f} |")
    print(f"| whole step | {sum(parts.values()):.2f} |")
    dec, pre = qwen235_layouts()
    print("\n| sequences | roofline, tp 8 and ep 8 | measured, tp 8 | measured, ep 8 |")
    print("|---:|---:|---:|---:|")
    for i, b in enumerate((1, 16, 64, 256)):
        print(f"| {b} | " + " | ".join(f"{v[i]:.2f}" for v in dec.values()) + " |")
    print("prefill 512, 2,048, 8,192 tokens: " + "; ".join(
        f"{k} " + ", ".join(f"{x:.2f}" for x in v) for k, v in pre.items()))
    ds = deepseek_parts()
    print("\n| component | " + " | ".join(ds) + " |\n|---|" + "---:|" * len(ds))
    for k in next(iter(ds.values())):
        print(f"| {k} | " + " | ".join(f"{v[k]:.2f}" for v in ds.values()) + " |")
    print("| whole step | " + " | ".join(f"{sum(v.values()):.2f}" for v in ds.values()) + " |")
    dm = deepseek_measured_parts()
    keys = [k for k in next(iter(dm.values())) if any(v[k] > 0 for v in dm.values())]
    print("\n| component | " + " | ".join(dm) + " |\n|---|" + "---:|" * len(dm))
    for k in keys:
        print(f"| {k} | " + " | ".join(f"{v[k]:.2f}" for v in dm.values()) + " |")
    print("| whole step | " + " | ".join(f"{sum(v.values()):.2f}" for v in dm.values()) + " |")
    print(deepseek_memory())
    glm = glm5_sparse()
    print("\n| 32 sequences of | " + " | ".join(f"{c:,}" for c in GLM5_CONTEXTS) + " |")
    print("|---|" + "---:|" * len(GLM5_CONTEXTS))
    for k in ("roofline attention, sparse", "roofline attention, dense MLA",
              "measured step (SGLang)"):
        print(f"| {k} | " + " | ".join(f"{x:.2f}" for x in glm[k]) + " |")
    print("GLM-5 prefill of 1,024, 2,048, 4,096, 8,192 tokens (ms): " + ", ".join(
        f"{a:.1f} ({b:.1f} sparse path)" for a, b in zip(glm["prefill step"],
                                                      glm["of which sparse path"], strict=True)))
    print("\n| weights | 8,192-token prefill ms | TTFT p50 ms | TPOT p50 ms | cost source |")
    print("|---|---:|---:|---:|---|")
    for r in fp8_runs():
        print(f"| {r['dtype']} | {r['prefill_8192_ms']:.1f} | {r['ttft_p50_ms']:.1f} | "
              f"{r['tpot_p50_ms']:.2f} | {r['source']} |")
    print("\n| weights | prefill of 8,192 tokens | decode, 1 sequence at 1,024 | "
          "decode, 64 at 1,024 |\n|---|---:|---:|---:|")
    for dtype, cells in fp4_steps().items():
        print(f"| {dtype} | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in cells) + " |")
    plot(curves)
    print(f"\nwrote {IMG / 'models_moe_decode.png'}")


if __name__ == "__main__":
    main()
