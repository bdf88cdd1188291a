"""Run sweep points on the device: one (sharded) layer for operators, the full model for steps.

Each point becomes a callable over preallocated tensors, so only the operator itself
is timed. Successive repeats cycle through a few copies of the layer (and of its KV
cache), as many as the real model has up to a working set of ``ROTATE_BYTES``, so a
small model's weights are not unrealistically cache-hot between repeats; a large
model's layer already overflows any cache on its own. Operator points give entries
cache slots in order of context, so each decode group is one view of the cache; whole
steps give them slots in an order unrelated to context, as a serving loop's slots end
up, so their groups split into runs of consecutive slots as a replay's do (a 4-entry
decode: 2 groups in context order, 4 scattered). Whole steps run eagerly on every
device, as the replay's serving loop runs them (calibrate/replay.py): on CUDA a
decode step's kernel launches are part of what a step costs there, and a profile
fitted on graph replays would price a loop that validation never runs.
A point that runs out of memory is skipped and recorded, and the sweep goes on.
"""

from __future__ import annotations

import dataclasses
import itertools
import zlib
from collections.abc import Callable

import numpy as np
import torch

from calibrate.grids import DENSE_LINEAR, WHOLE_STEP, Point
from calibrate.model import Decoder, DecoderLayer, KVCache, build_decoder, prepare, spread_ids
from calibrate.records import Measurement
from calibrate.timing import Timer, is_oom
from sim.cost.shard import Shard

ROTATE_BYTES = 64e6


def slotted(entries: tuple[tuple[int, int], ...], scatter: bool = False
            ) -> list[tuple[int, int, int]]:
    """(slot, new, ctx): slots assigned in order of context (see module docstring), or
    with ``scatter`` as a serving loop leaves them, slots 0..n-1 in an order unrelated
    to context (a fixed shuffle per batch, so every run times the same layout)."""
    if scatter:
        rng = np.random.default_rng(zlib.crc32(repr(entries).encode()))
        order = [int(i) for i in rng.permutation(len(entries))]
    else:
        order = sorted(range(len(entries)), key=lambda i: entries[i][1])
    slot = {i: s for s, i in enumerate(order)}
    return [(slot[i], n, c) for i, (n, c) in enumerate(entries)]


def _needs(entries: tuple[tuple[int, int], ...]) -> tuple[int, int]:
    return len(entries), max(n + c for n, c in entries)


def step_cache_size(points: list[Point]) -> tuple[int, int] | None:
    """(slots, tokens per slot) of the one KV cache every whole step in ``points`` runs
    on: the most entries of any step by the longest context of any; None without any."""
    needs = [_needs(p.entries) for p in points if p.component == WHOLE_STEP]
    if not needs:
        return None
    return max(n[0] for n in needs), max(n[1] for n in needs)


class Bench:
    """Builds and times the callable for each point on one device."""

    def __init__(self, shard: Shard, layers: int, max_pos: int, dtype: str,
                 device: torch.device, timer: Timer, step_layers: int | None = None):
        # ``layers``: the model's depth; ``step_layers``: the depth whole steps run at.
        self.d, self.layers, self.max_pos = shard, layers, max_pos
        self.step_layers = step_layers or layers
        self.dtype, self.device, self.timer = dtype, device, timer
        # A mixture of experts' operator copies are all MoE layers; its dense layers, if
        # any, are timed on copies of their own (points of DENSE_LINEAR).
        routed = dataclasses.replace(shard, dense_layers=0)
        per_layer = sum(p.numel() * p.element_size()
                        for p in build_decoder(routed, 1, 1, dtype, torch.device("meta"))
                        .layers[0].parameters())
        self.copies = max(1, min(layers, int(ROTATE_BYTES // max(per_layer, 1))))
        self.one = build_decoder(routed, self.copies, max_pos, dtype, device)
        self.dense: Decoder | None = None
        if shard.experts and shard.dense_layers:
            self.dense = build_decoder(dataclasses.replace(
                shard, experts=0, experts_per_token=0, expert_intermediate=0, shared_experts=0,
                dense_layers=0), self.copies, max_pos, dtype, device)
        self._caches: list[KVCache] | None = None
        self.full: Decoder | None = None
        self._full_caches: list[KVCache] | None = None

    def caches(self, slots: int, capacity: int) -> list[KVCache]:
        """One cache per layer copy, at least (slots, capacity), grown (never shrunk) on demand."""
        cs = self._caches
        if cs is None or cs[0].slots < slots or cs[0].capacity < capacity:
            old = (cs[0].slots, cs[0].capacity) if cs else (0, 0)
            self._caches = None
            self._release()
            cs = self._caches = self.one.caches(max(slots, old[0]), max(capacity, old[1]))
        return cs

    def _full_model(self, slots: int, capacity: int) -> tuple[Decoder, list[KVCache]]:
        """The full-depth model, and its caches grown (never shrunk) to at least
        (slots, capacity)."""
        if self.full is None:
            self.full = build_decoder(self.d, self.step_layers, self.max_pos, self.dtype,
                                      self.device)
        caches = self._full_caches
        if caches is None or caches[0].slots < slots or caches[0].capacity < capacity:
            old = (caches[0].slots, caches[0].capacity) if caches else (0, 0)
            # Whole steps come after the operators: their caches make room for these.
            self._caches = self._full_caches = None
            self._release()
            caches = self.full.caches(max(slots, old[0]), max(capacity, old[1]))
            self._full_caches = caches
        return self.full, caches

    def reserved(self) -> tuple[Decoder, list[KVCache]] | None:
        """The full-depth model and caches :meth:`reserve` built, if it has."""
        if self.full is None or self._full_caches is None:
            return None
        return self.full, self._full_caches

    def _release(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def run(self, point: Point) -> Measurement:
        """Time ``point``; out-of-memory and other failures are recorded, not raised."""
        try:
            fn, graph, wall = self._callable(point)
            return Measurement(point, "ok", self.timer.measure(fn, graph=graph, wall=wall))
        except Exception as exc:  # noqa: BLE001 - a failed point must not end the sweep
            return self.failure(point, exc)

    def failure(self, point: Point, exc: Exception) -> Measurement:
        """Record ``exc`` raised by ``point`` (freeing the operator caches on out-of-memory)."""
        if is_oom(exc):
            self._caches = None
            self._release()
            return Measurement(point, "oom", note="out of memory")
        return Measurement(point, "error", note=f"{type(exc).__name__}: {exc}"[:200])

    def reserve(self, points: list[Point]) -> None:
        """Build the full-depth model and its caches once for every whole step in
        ``points``, so the callables prepared for them share one set of caches (each
        holds the caches it was prepared with; growing them later would keep two)."""
        size = step_cache_size(points)
        if size is not None:
            self._full_model(*size)

    def prepare(self, point: Point) -> Callable[[], object]:
        """A whole step's callable, reusable across rounds; time it by wall clock."""
        if point.component != WHOLE_STEP:
            raise ValueError(f"prepare() is for whole steps, not {point.component!r}")
        entries = slotted(point.entries, scatter=True)
        return self._whole(entries, spread_ids(sum(n for _, n, _ in entries), self.d.vocab))

    def _randn(self, *shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=self.device, dtype=self.one.embed.weight.dtype)

    def _callable(self, point: Point) -> tuple[Callable[[], object], bool, bool]:
        """(fn, use CUDA graph, time by wall clock) for ``point``."""
        entries = slotted(point.entries, scatter=point.component == WHOLE_STEP)
        slots, capacity = _needs(point.entries)
        d = self.d
        turn = itertools.cycle(range(self.copies))
        layers: list[DecoderLayer] = list(self.one.layers)  # type: ignore[arg-type]
        decode_sized = all(n == 1 for _, n, _ in entries)
        batch = prepare(entries, self.device)
        t = batch.tokens
        if point.component in ("linear", DENSE_LINEAR):
            x, attn = self._randn(t, d.hidden), self._randn(t, d.heads * d.head_dim)
            if point.component == DENSE_LINEAR and self.dense is not None:
                layers = list(self.dense.layers)  # type: ignore[arg-type]

            def linear() -> object:
                layer = layers[next(turn)]
                layer.project(x, batch)
                return layer.finish(x, attn)
            # An expert layer reads its per-expert counts on the host: no CUDA graph.
            return linear, t <= 256 and not d.experts, False
        if point.component in ("prefill_attention", "decode_attention"):
            caches = self.caches(slots, capacity)
            q, k, v = (self._randn(t, h, d.head_dim) for h in (d.heads, d.kv_heads, d.kv_heads))

            def attention() -> object:
                i = next(turn)
                return layers[i].attend(q, k, v, caches[i], batch)
            return attention, decode_sized, False
        if point.component == "lm_head":
            h = self._randn(len(entries), d.hidden)
            return (lambda: self.one.head(h)), True, False
        tokens = spread_ids(t, d.vocab)
        if point.component == "step":
            # What a step does besides its layers and head: pack the batch, move token ids
            # to the device, embed them, pick each entry's last row, return ids to the host.
            def step() -> object:
                b = prepare(entries, self.device)
                x = self.one.embed(torch.tensor(tokens, device=self.device))
                return x[b.last, 0].cpu()
            return step, False, True
        if point.component == WHOLE_STEP:
            return self._whole(entries, tokens), False, True
        raise ValueError(f"unknown component {point.component!r}")

    def _whole(self, entries: list[tuple[int, int, int]], tokens: list[int]
               ) -> Callable[[], object]:
        """A full-depth step, run eagerly (see the module docstring), to be timed by wall
        clock from host packing to ids on the host."""
        model, caches = self._full_model(*_needs(tuple((n, c) for _, n, c in entries)))

        def eager() -> object:
            b = prepare(entries, self.device)
            return model(torch.tensor(tokens, device=self.device), caches, b).cpu()
        return eager
