"""The calibration model on a real device as the replay loop's executor
(:mod:`calibrate.replay`): built at full depth with a KV cache of one slot per running
request, warmed up, and stepped in wall-clock time; and the check that refuses a model
this torch model cannot time, before anything is built.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from calibrate.model import Decoder, KVCache, build_decoder, kv_cache_bytes, prepare, spread_ids
from calibrate.replay import Entry, ReplayResult, WallClock, run_loop
from calibrate.timing import is_oom
from sim.cost.dtypes import FP8_WEIGHTS
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


class ModelExecutor:
    """The calibration model at full depth with a per-slot KV cache, on ``device``.

    A step is timed by wall clock from packing the batch to the sampled ids on the host
    (``.tolist()`` synchronises a CUDA device), the span a profile's components model.
    """

    def __init__(self, model: Decoder, caches: list[KVCache], device: torch.device):
        self.model, self.caches, self.device = model, caches, device
        self.slots, self.capacity = caches[0].slots, caches[0].capacity

    @classmethod
    def build(cls, spec: ModelSpec, device: torch.device, dtype: str, slots: int,
              capacity: int, seed: int = 0) -> ModelExecutor:
        """A fresh model of ``spec`` with caches for ``slots`` sequences of ``capacity``
        tokens; running out of memory is a one-line error saying what to lower."""
        kv_bytes = spec.layers * kv_cache_bytes(slots, capacity, spec.kv_heads, spec.head_dim,
                                                4 if dtype == "fp32" else 2)
        try:
            model = build_decoder(shard(spec, 1), spec.layers, capacity, dtype, device, seed)
            return cls(model, model.caches(slots, capacity), device)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if not is_oom(exc):
                raise
            raise ServesimError(
                f"out of memory building {spec.name} with a KV cache of {slots} slots x "
                f"{capacity} tokens ({kv_bytes / 2**30:.1f} GiB); lower --max-num-seqs or "
                "--max-len") from None

    def step(self, entries: list[Entry], tokens: list[int]) -> tuple[list[int], float]:
        """Run one packed step; (next id per entry, seconds)."""
        t0 = time.perf_counter()
        batch = prepare(entries, self.device)
        ids = self.model(torch.tensor(tokens, device=self.device), self.caches, batch)
        out: list[int] = ids.tolist()
        return out, time.perf_counter() - t0

    def warm_up(self, max_prefill: int, repeats: int = 2) -> None:
        """Run prefill, decode and mixed steps of a few sizes so no replayed step is a
        first call (allocator growth, kernel selection, lazy initialisation)."""
        cap = min(max_prefill, self.capacity - 1)
        sizes = sorted({max(2, min(cap, s)) for s in (16, 128, 512, cap)})
        decodes = sorted({1, max(1, self.slots // 4), self.slots})
        # Every position stays below the cache length: a cache sized for short requests
        # (a trace of short ones, or a small --max-len) has fewer rows than 64 + slots.
        last = self.capacity - 1
        mid = min(64, self.capacity // 2)
        shapes: list[list[Entry]] = [[(0, s, 0)] for s in sizes]
        shapes += [[(i, 1, min(64 + i, last)) for i in range(b)] for b in decodes]
        shapes += [[(0, max(1, min(cap, 64, self.capacity - mid)), mid)]
                   + [(i, 1, mid) for i in range(1, min(8, self.slots))]]
        for _ in range(repeats):
            for entries in shapes:
                self.step(entries, spread_ids(sum(k for _, k, _ in entries),
                                              self.model.d.vocab))


def check_timeable(spec: ModelSpec, device: str = "cuda") -> None:
    """Refuse a model whose FP8 weights or KV cache this torch model cannot run on a
    ``device`` of that type (``cuda`` or ``cpu``): one error naming the key, saying why
    and how such a model is priced instead."""
    if spec.mla:
        raise ServesimError(
            "calibrate's torch model has no latent-attention (MLA) layer; MLA costs come "
            "from the roofline (cost: roofline) or the public kernel tables",
            where="model.kv_lora_rank")
    if spec.linear_layers:
        raise ServesimError(
            "calibrate's torch model has no linear-attention (Gated DeltaNet) layer; such "
            "models (Qwen3.5) are priced by the roofline (cost: roofline) or the public "
            "kernel tables (cost: measured)", where="model.linear_layers")
    if spec.sliding_layers or spec.attention_sinks:
        key = "model.sliding_layers" if spec.sliding_layers else "model.attention_sinks"
        raise ServesimError(
            "calibrate's torch model has no sliding-window attention or attention sinks; "
            "such models (gpt-oss) are priced by the roofline (cost: roofline)", where=key)
    if spec.expert_dtype and spec.expert_dtype not in ("fp32", "fp16", "bf16"):
        raise ServesimError(
            f"got {spec.expert_dtype}: calibrate's torch model runs experts in bf16, fp16 or "
            "fp32 only; 4-bit and FP8 experts are priced by the roofline or the public "
            "kernel tables", where="model.expert_dtype")
    fp8 = [(k, v) for k, v in (("dtype", spec.dtype), ("kv_dtype", spec.kv_dtype))
           if v in FP8_WEIGHTS]
    if fp8 and device == "cpu":
        key, value = fp8[0]
        raise ServesimError(
            f"got {value}: FP8 cannot be timed on a CPU, which has no FP8 arithmetic (torch "
            f"would emulate it, at a speed that says nothing of FP8 serving), and "
            f"calibrate's torch model has no FP8 path on CUDA either; FP8 costs come from "
            f"the public kernel tables: `servesim profile build --dtype fp8` (or --kv-dtype "
            f"fp8)", where=f"model.{key}")
    if spec.dtype not in ("fp32", "fp16", "bf16") or spec.kv_dtype != "auto":
        raise ServesimError(
            f"calibrate times bf16, fp16 and fp32 models with a KV cache of the same dtype; "
            f"this one has {spec.dtype} weights and a {spec.kv_dtype} KV cache. FP8 costs come "
            f"from the public kernel tables: `servesim profile build --dtype fp8` (or "
            f"--kv-dtype fp8)", where="model.dtype")


def device_executor(spec: ModelSpec, device: str, dtype: str | None, threads: int,
                    slots: int, capacity: int, max_prefill: int, seed: int = 0,
                    log: Callable[[str], None] | None = None) -> tuple[ModelExecutor, dict]:
    """Build and warm up the model for ``slots`` sequences of up to ``capacity`` tokens;
    (executor, facts for the record: device, dtype, threads, cache size)."""
    from calibrate.timing import device_info

    check_timeable(spec, device)
    if device == "cuda" and not torch.cuda.is_available():
        raise ServesimError("torch sees no CUDA device; use --device cpu", where="--device")
    if device not in ("cuda", "cpu"):
        raise ServesimError(f"got {device!r}, expected cuda or cpu", where="--device")
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else \
        torch.device("cpu")
    kept = None
    pinned = None
    if dev.type == "cpu":
        from calibrate.timing import keep_host_memory, pin_cores

        torch.set_num_threads(threads)
        kept = keep_host_memory()
        pinned = pin_cores(threads)  # the process stays bound (as calibration times it)
    dtype = dtype or (spec.dtype if dev.type == "cuda" else "fp32")
    t0 = time.perf_counter()
    with torch.inference_mode():
        ex = ModelExecutor.build(spec, dev, dtype, slots, capacity, seed)
        ex.warm_up(max_prefill)
    if log:
        log(f"model built and warmed up in {time.perf_counter() - t0:.1f} s "
            f"({slots} slots x {capacity} tokens)")
    info = {**device_info(dev), "threads": torch.get_num_threads(), "dtype": dtype,
            "kv_slots": slots, "slot_capacity": capacity}
    if kept is not None:
        info["host_memory_kept"] = kept
        info["pinned_cpus"] = pinned
    return ex, info


def replay_on_device(spec: ModelSpec, arrival_s: np.ndarray, prompt: np.ndarray,
                     output: np.ndarray, serving: Any, device: str, dtype: str | None,
                     threads: int = 1, seed: int = 0, log: Callable[[str], None] | None = None,
                     executor: tuple[ModelExecutor, dict] | None = None
                     ) -> tuple[ReplayResult, dict]:
    """Replay these requests in wall-clock time on the model (built for them unless an
    ``executor`` from :func:`device_executor` is given); (result, facts for the record)."""
    if executor is None:
        capacity = int(min(spec.max_context, max(int((prompt + output).max()), 2)))
        executor = device_executor(spec, device, dtype, threads, serving.max_num_seqs,
                                   capacity, int(prompt.max()), seed, log)
    ex, info = executor
    with torch.inference_mode():
        res = run_loop(arrival_s, prompt, output, serving, spec.max_context, ex, WallClock(),
                       vocab=spec.vocab, interruptible=True)
    return res, info
