"""Sweep grids: which batch shapes each component is timed at.

A point is a list of (new_tokens, context_before) entries, the same description the
simulator's :class:`sim.cost.shape.StepShape` is built from, so every measurement row
carries the exact shape the fit and the profile evaluate. Grids are scaled to the
device (a 2-core CPU times a tiny model; a GPU times an 8B model's layer) and to the
model's context limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sim.cost.specs import ModelSpec

Entries = tuple[tuple[int, int], ...]

# Components timed on their own, and the whole-model steps that check their sum.
OPERATORS = ("step", "linear", "prefill_attention", "decode_attention", "lm_head")
WHOLE_STEP = "whole_step"
# A mixture of experts with dense layers: its linear points run on an expert layer, and
# these, at the same counts, on a dense one; the fit prices the layers' mean of the two.
DENSE_LINEAR = "linear_dense"


@dataclass(frozen=True)
class Point:
    """One sweep point: a component and the batch it is timed on."""

    component: str
    entries: Entries
    label: str


@dataclass(frozen=True)
class GridConfig:
    """Sizes of the sweep (tokens, sequences) before capping by the model's context."""

    tokens: tuple[int, ...]            # linear stack: new tokens per step
    chunks: tuple[int, ...]            # prefill attention: chunk lengths
    prefill_contexts: tuple[int, ...]  # ... and context already cached before the chunk
    batches: tuple[int, ...]           # decode attention: sequences
    decode_contexts: tuple[int, ...]   # ... and their (uniform) context
    mixed: int                         # off-grid decode batches (random size and context)
    head_seqs: tuple[int, ...]         # LM head and sampling: sequences
    scale: int                         # whole steps: multiplier on the base mixes
    long: tuple[tuple[int, int], ...] = ()  # prefill attention: (chunk, context) past the grid
    # Linear stack and LM head are also timed at every count 1..table_max (tokens,
    # sequences), kept as a measured table (a component's table_s at table_at:
    # sim.cost.profilefile): small matrix products are not a smooth function of their rows
    # (CPU: multiples of four fastest).
    table_max: int = 0


# Long prompts (up to the model's context) are served too, and a block-tiled causal kernel
# gets cheaper per pair past one key block, so prefill attention and the linear stack
# are also timed at a few chunks well past the cross grid (capped by the context).
CPU_LONG = ((2048, 0), (3072, 0))
CPU_QUICK = GridConfig(
    tokens=(1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024),
    chunks=(16, 32, 64, 128, 256, 512), prefill_contexts=(0, 128, 512, 1024, 2048),
    batches=(1, 2, 4, 8, 16, 32, 64), decode_contexts=(32, 128, 512, 1024, 2048), mixed=6,
    head_seqs=(1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256), scale=1, long=CPU_LONG,
    table_max=32,
)
CPU_FULL = GridConfig(
    tokens=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512,
            1024, 2048),
    chunks=(16, 32, 64, 128, 256, 512), prefill_contexts=(0, 128, 256, 512, 1024, 2048),
    batches=(1, 2, 4, 8, 16, 24, 32, 48, 64), decode_contexts=(32, 128, 256, 512, 1024, 2048),
    mixed=10, head_seqs=(1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256), scale=1,
    long=CPU_LONG, table_max=32,
)
GPU_QUICK = GridConfig(
    tokens=(1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192),
    chunks=(128, 512, 1024, 2048, 4096), prefill_contexts=(0, 2048, 4096),
    batches=(1, 8, 32, 64, 128, 256), decode_contexts=(256, 1024, 4096), mixed=4,
    head_seqs=(1, 8, 24, 32, 48, 64, 128, 256, 512), scale=4, table_max=16,
)
GPU_FULL = GridConfig(
    tokens=(1, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
            4096, 6144, 8192),
    chunks=(64, 128, 256, 512, 1024, 2048, 4096, 8192), prefill_contexts=(0, 1024, 2048, 4096),
    batches=(1, 4, 8, 16, 32, 64, 128, 192, 256), decode_contexts=(128, 512, 1024, 2048, 4096),
    mixed=8, head_seqs=(1, 4, 16, 32, 48, 64, 96, 128, 256, 512), scale=4, table_max=16,
)


def grid_for(device: str, quick: bool) -> GridConfig:
    """The grid for a device type (``cpu`` or ``cuda``) and mode."""
    if device == "cpu":
        return CPU_QUICK if quick else CPU_FULL
    return GPU_QUICK if quick else GPU_FULL


def _spread(points: list[Point]) -> list[Point]:
    """Reorder so that any prefix covers the range (bit-reversed order), for early stops."""
    n = len(points)
    if n < 3:
        return points
    bits = max(1, (n - 1).bit_length())
    order = sorted(range(1 << bits), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))
    return [points[i] for i in order if i < n]


def _around(rng: np.random.Generator, b: int, c: int, cap: int) -> Entries:
    """``b`` decode entries with contexts drawn uniformly from [c/4, 7c/4] (one: exactly c).

    A serving batch's contexts are spread (sequences joined at different times), and the
    spread sets how many length groups decode attention runs, so every decode batch the
    calibration times, operator or whole step, is spread alike.
    """
    if b == 1:
        return ((1, c),)
    ctx = rng.integers(max(1, c // 4), min(cap - 1, c + 3 * c // 4) + 1, size=b)
    return tuple((1, int(x)) for x in sorted(ctx))


def operator_points(spec: ModelSpec, g: GridConfig, seed: int = 0) -> list[Point]:
    """All operator sweep points, interleaved across components (range-first order)."""
    cap = spec.max_context
    per: dict[str, list[Point]] = {c: [] for c in OPERATORS}
    table = tuple(range(1, g.table_max + 1))
    # Past the table, each count is moved off its round number by a seeded offset below
    # a quarter of it: kernels tile rows, so round counts are their fastest (tiny/CPU,
    # one layer: 96 rows 1.81 ms, 99 rows 1.91; 288 rows 4.99 ms, 291 rows 5.23), and
    # prompts are not round. A line through round counts alone prices prompts low.
    off = np.random.default_rng(seed + 1)
    beyond = {min(n + int(off.integers(0, max(1, n // 4))), cap)
              for n in g.tokens if n > g.table_max}
    per["linear"] = [Point("linear", ((n, 0),), f"n={n}")
                     for n in sorted({*table, *beyond}) if n <= cap]
    if spec.experts and spec.dense_layers:
        per[DENSE_LINEAR] = [Point(DENSE_LINEAR, p.entries, p.label) for p in per["linear"]]
    for n in g.chunks:
        for c in g.prefill_contexts:
            if n + c <= cap:
                per["prefill_attention"].append(
                    Point("prefill_attention", ((n, c),), f"n={n} c={c}"))
    for n, c in g.long:
        if n + c <= cap:
            per["prefill_attention"].append(Point("prefill_attention", ((n, c),), f"n={n} c={c}"))
    # Several prefills in one step, so per-sequence costs are identifiable.
    small, mid = g.chunks[0], g.chunks[len(g.chunks) // 2]
    for k in (2, 4):
        per["prefill_attention"].append(
            Point("prefill_attention", ((small, 0),) * k, f"{k}x n={small}"))
        if mid + g.prefill_contexts[1] <= cap:
            per["prefill_attention"].append(
                Point("prefill_attention", ((mid, g.prefill_contexts[1]),) * k,
                      f"{k}x n={mid} c={g.prefill_contexts[1]}"))
    # Decode contexts are spread around each nominal one (as in real serving, where no two
    # sequences share a length), so the grouping and padding of mixed lengths is measured.
    rng = np.random.default_rng(seed)
    for b in g.batches:
        for c in g.decode_contexts:
            if c < cap:
                per["decode_attention"].append(Point(
                    "decode_attention", _around(rng, b, c, cap), f"b={b} c~{c}"))
    # Off-grid batches: random sizes and nominal contexts within the grid's range.
    lo, hi = min(g.decode_contexts), min(max(g.decode_contexts), cap - 1)
    for _ in range(g.mixed):
        b = int(rng.integers(2, max(g.batches) + 1))
        c = int(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        per["decode_attention"].append(Point("decode_attention", _around(rng, b, c, cap),
                                             f"b={b} c~{c}"))
    per["lm_head"] = [Point("lm_head", ((1, 0),) * s, f"seqs={s}")
                      for s in sorted({*table, *g.head_seqs})]
    for s in g.head_seqs:
        per["step"].append(Point("step", _around(rng, s, 128, cap), f"decode seqs={s}"))
        if s > 2:
            c = int(np.exp(rng.uniform(np.log(lo), np.log(hi))))
            per["step"].append(Point("step", _around(rng, s, c, cap), f"decode seqs={s} c~{c}"))
    for n in g.chunks:
        per["step"].append(Point("step", ((n, 0),), f"prefill n={n}"))
        per["step"].append(Point("step", ((n, 0),) + _around(rng, 8, 64, cap),
                                 f"prefill n={n} + 8 decodes"))
    spread = {c: _spread(p) for c, p in per.items()}
    return list(_interleave(spread))


def _interleave(per: dict[str, list[Point]]) -> Iterator[Point]:
    longest = max(len(p) for p in per.values())
    for i in range(longest):
        for pts in per.values():
            if i < len(pts):
                yield pts[i]


def whole_step_points(spec: ModelSpec, g: GridConfig, seed: int = 1) -> list[Point]:
    """Whole-model steps (prefill-only, decode-only and mixed) that check the fitted sum.

    They differ from every operator point, so agreement is a genuine out-of-sample test.
    """
    s = g.scale
    cap = spec.max_context - 1
    rng = np.random.default_rng(seed)

    def around(b: int, c: int) -> Entries:
        return _around(rng, b, min(c * s, cap), spec.max_context)

    def prompt(n: int, r: int) -> int:
        # Whole prompts are not round numbers, and matrix kernels are fastest at round
        # row counts: prompt lengths here leave remainders 0-3 modulo 4 in turn.
        return min(n * s + r, cap)

    mixes: list[tuple[str, Entries]] = [
        ("decode b=2 c~96", around(2, 96)),
        ("decode b=6 c~1500", around(6, 1500)),
        ("decode b=12 c~300", around(12, 300)),
        ("decode b=24 c~800", around(24, 800)),
        ("decode b=48 c~700", around(48, 700)),
        ("decode b=64 c~200", around(64, 200)),
        (f"prefill n={prompt(100, 1)}", ((prompt(100, 1), 0),)),
        (f"prefill n={prompt(320, 2)}", ((prompt(320, 2), 0),)),
        # Prefill-first batching (continuous) runs prompts alone, short to near the
        # context limit: their in-step cost is measured over that whole range.
        (f"prefill n={prompt(64, 0)}", ((prompt(64, 0), 0),)),
        (f"prefill n={prompt(200, 3)}", ((prompt(200, 3), 0),)),
        (f"prefill n={prompt(600, 1)}", ((prompt(600, 1), 0),)),
        (f"prefill n={prompt(2000, 2)}", ((prompt(2000, 2), 0),)),
        (f"prefill n={prompt(3800, 0)}", ((prompt(3800, 0), 0),)),
        # Chunks are cut by a token budget, usually a round number.
        ("prefill chunk n=200 c=600", ((200 * s, min(600 * s, cap - 200 * s)),)),
        (f"prefill 2x n={prompt(150, 1)}", ((prompt(150, 1), 0),) * 2),
        (f"prefill 3x n={prompt(48, 3)}", ((prompt(48, 3), 0),) * 3),
        (f"mixed n={prompt(160, 1)} + 20 decodes", ((prompt(160, 1), 0),) + around(20, 600)),
        ("mixed chunk n=48 c=300 + 40 decodes", ((48 * s, 300 * s),) + around(40, 400)),
        (f"mixed n={prompt(400, 3)} + 6 decodes", ((prompt(400, 3), 0),) + around(6, 900)),
        ("mixed 2 chunks + 10 decodes",
         ((64 * s, 128 * s), (96 * s, 0)) + around(10, 450)),
        ("mixed chunk n=32 c=1500 + 24 decodes", ((32 * s, 1500 * s),) + around(24, 600)),
        ("decode b=4 c~400", around(4, 400)),
        # Below saturation a server mostly decodes a handful of sequences.
        ("decode b=1 c=300", around(1, 300)),
        ("decode b=1 c=1200", around(1, 1200)),
        ("decode b=2 c~600", around(2, 600)),
        ("decode b=3 c~1000", around(3, 1000)),
        ("decode b=5 c~1500", around(5, 1500)),
        ("decode b=8 c~400", around(8, 400)),
        # Small batches' times depend on how their contexts group; a second draw of each.
        ("decode b=2 c~250", around(2, 250)),
        ("decode b=3 c~500", around(3, 500)),
        ("decode b=4 c~1000", around(4, 1000)),
        ("decode b=6 c~300", around(6, 300)),
        # More of the steps that dominate serving below saturation, across contexts:
        # each small step's time moves with what ran before it, so many of them pin
        # the in-situ term better than a few.
        ("decode b=1 c=60", around(1, 60)),
        ("decode b=1 c=2500", around(1, 2500)),
        ("decode b=2 c~2000", around(2, 2000)),
        ("decode b=3 c~150", around(3, 150)),
        ("decode b=4 c~2200", around(4, 2200)),
        ("decode b=5 c~200", around(5, 200)),
        ("decode b=7 c~700", around(7, 700)),
        ("decode b=8 c~1500", around(8, 1500)),
        (f"prefill n={prompt(1100, 3)}", ((prompt(1100, 3), 0),)),
        ("decode b=32 c~1200", around(32, 1200)),
        (f"mixed n={prompt(96, 2)} + 32 decodes", ((prompt(96, 2), 0),) + around(32, 300)),
        ("mixed chunk n=128 c=1024 + 12 decodes", ((128 * s, 1024 * s),) + around(12, 1000)),
    ]
    # Capping at the context limit can make two steps one shape: time it once.
    seen: set[Entries] = set()
    points = []
    for label, e in mixes:
        if all(n + c <= spec.max_context for n, c in e) and e not in seen:
            seen.add(e)
            points.append(Point(WHOLE_STEP, e, label))
    return points
