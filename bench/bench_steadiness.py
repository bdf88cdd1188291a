"""How steady is this device's speed? Decode steps of three model sizes, timed in phases.

Usage::

    .venv/bin/python bench/bench_steadiness.py [--phase-s 15] [--rounds 5] [--device cpu]

A validation compares a real run against a profile measured a minute earlier, so it
can only be as good as the device is steady between the two. This benchmark builds
three Llama-shaped models of two layers (calibrate.model, random weights), whose
weights are about 1.7 MB (a small share of the 32 MB L3 of the 2-core VM, whose cores
have 1 MiB of L2 each), 8 MB (the ``tiny`` preset: a quarter of that L3, which the
host's other tenants share) and 76 MB (streams from memory), and times
a 1-entry decode (context 300) and a 4-entry decode (context 450) on each, one model
at a time in phases of ``--phase-s`` seconds, round after round. For each model and
step it prints the median of every phase and their spread (standard deviation and
range relative to the median of the phases): how far the same step's speed moves
between two windows a few tens of seconds apart, which is what a profile measured
in one window and a replay run in another see.

The figures depend on what else shares the machine (other tenants of a cloud host
share its L3 cache and memory bus): quote them with the date and machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim.cost.presets import MODELS  # noqa: E402
from sim.cost.specs import ModelSpec  # noqa: E402

#: Decode steps timed on every model: label -> [(slot, new tokens, context)].
STEPS: dict[str, list[tuple[int, int, int]]] = {
    "decode b=1 c=300": [(0, 1, 300)],
    "decode b=4 c=450": [(i, 1, 450) for i in range(1, 5)],
}


def variants() -> dict[str, ModelSpec]:
    """The three sizes: name -> spec (two layers each, fp32 on CPU)."""
    tiny = MODELS["tiny"]
    return {
        "small": dataclasses.replace(tiny, name="small", hidden=128, heads=2,
                                        kv_heads=1, intermediate=352, vocab=512),
        "tiny": tiny,
        "memory-sized": dataclasses.replace(tiny, name="memory-sized", hidden=768,
                                            heads=12, kv_heads=4, intermediate=2048,
                                            vocab=8192),
    }


def weight_bytes(spec: ModelSpec) -> int:
    """Bytes of the weights one step reads (layers and LM head; fp32): 4 per parameter."""
    q = spec.heads * spec.head_dim
    kv = 2 * spec.kv_heads * spec.head_dim
    per_layer = spec.hidden * (q + kv) + q * spec.hidden + 3 * spec.hidden * spec.intermediate
    return 4 * (spec.layers * per_layer + spec.vocab * spec.hidden)


def measure(phase_s: float, rounds: int, device: str) -> dict[str, np.ndarray]:
    """Phase medians, seconds: name -> array [round, step]."""
    import torch

    from calibrate.executor import device_executor

    exs = {name: device_executor(spec, device, None, 1, 8, 1024, 16)[0]
           for name, spec in variants().items()}
    out: dict[str, list[list[float]]] = {name: [] for name in exs}
    with torch.inference_mode():
        for _ in range(rounds):
            for name, ex in exs.items():
                # A phase starts with a few untimed steps so the model's data is where
                # its own steps leave it, not where the previous model's left it.
                for _ in range(10):
                    for entries in STEPS.values():
                        ex.step(entries, [1] * len(entries))
                samples: list[list[float]] = []
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < phase_s:
                    samples.append([ex.step(e, [1] * len(e))[1] for e in STEPS.values()])
                out[name].append(list(np.median(np.array(samples), axis=0)))
    return {name: np.array(v) for name, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print one line per model and step."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase-s", type=float, default=15.0, help="seconds per phase")
    ap.add_argument("--rounds", type=int, default=5, help="phases per model")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    a = ap.parse_args(argv)
    if a.phase_s <= 0 or a.rounds < 2:
        ap.error("--phase-s must be > 0 and --rounds at least 2")
    specs = variants()
    res = measure(a.phase_s, a.rounds, a.device)
    print(f"{a.rounds} phases of {a.phase_s:g} s per model, models in turn")
    for name, v in res.items():
        rel = v / np.median(v, axis=0)
        for j, label in enumerate(STEPS):
            print(f"{name:12s} ({weight_bytes(specs[name]) / 1e6:5.1f} MB) {label}: phase "
                  f"medians ms " + " ".join(f"{x * 1e3:.3f}" for x in v[:, j])
                  + f" | sd {rel[:, j].std() * 100:.1f}%, range {rel[:, j].min():.3f}"
                  f"-{rel[:, j].max():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
