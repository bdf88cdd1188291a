"""One calibration, end to end: sweep operators, fit, time whole steps, write the profile.

The wall-clock budget is split between the operator sweep and the whole-step check;
when it runs out, the sweep stops, the fit uses what was measured, and the profile
says so. Whatever happens, the raw measurements are written first.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from calibrate.calresult import CalibrationConfig, CalibrationResult
from calibrate.executor import ModelExecutor, check_timeable
from calibrate.fitprofile import Measured, fit_profile, run_meta
from calibrate.grids import (
    Point,
    grid_for,
    operator_points,
    whole_step_points,
)
from calibrate.host import LoopTerms, time_loop_terms
from calibrate.model import build_decoder, kv_cache_bytes
from calibrate.output import staging_path, write_csv, write_meta
from calibrate.progress import bar as progress_bar
from calibrate.records import Measurement
from calibrate.rounds import time_in_rounds
from calibrate.sweeps import Bench, step_cache_size
from calibrate.timing import (
    Timer,
    TimingConfig,
    device_info,
    host_memory_available,
    is_oom,
    keep_host_memory,
    pin_cores,
)
from sim.cost.gpus import GPUS, gpu_of_device
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# Share of the budget kept back for timing whole steps after the sweep.
STEP_SHARE = 0.2
# Least share of the budget the host-work and wake timing has, even when the whole
# steps' first round ran to the budget's end (a slow device's does).
LOOP_SHARE = 0.1


def _device(cfg: CalibrationConfig) -> torch.device:
    if cfg.device == "cuda":
        if not torch.cuda.is_available():
            raise ServesimError(f"torch {torch.__version__} sees no CUDA device; "
                                "use --device cpu or run on a machine with an NVIDIA GPU",
                                where="--device")
        return torch.device("cuda", torch.cuda.current_device())
    if cfg.device != "cpu":
        raise ServesimError(f"got {cfg.device!r}, expected cuda or cpu", where="--device")
    return torch.device("cpu")


def _gpu_entry(cfg: CalibrationConfig, device_name: str) -> str | None:
    if cfg.gpu is not None:
        if cfg.gpu not in GPUS:
            raise ServesimError(f"unknown gpu {cfg.gpu!r}; valid: {', '.join(sorted(GPUS))}",
                                where="--gpu")
        return cfg.gpu
    return gpu_of_device(device_name)


def _timing(quick: bool) -> TimingConfig:
    if quick:
        return TimingConfig(warmup=2, min_repeats=7, max_repeats=40, target_s=0.03)
    return TimingConfig(warmup=3, min_repeats=10, max_repeats=100, target_s=0.15)


def _validation_layers(model: ModelSpec, layer_bytes: float, device: torch.device) -> int:
    """Layers the whole steps can run at: all, unless a layer's weights and KV caches
    (``layer_bytes``) crowd out memory."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        room = 0.6 * free
    else:
        room = 4e9  # keep CPU runs modest whatever the host has
    return max(1, min(model.layers, int(room // max(layer_bytes, 1.0))))


# The share of the host's available memory a CPU calibration may plan to take: the rest
# is for the operators' inputs and outputs, the fit, and whatever else the host runs.
HOST_SHARE = 0.8


def check_host_memory(model: ModelSpec, tp: int, dtype: str, step_layers: int,
                      layer_bytes: float, room: float | None) -> None:
    """On a CPU, refuse a model whose two copies (the operators' one-layer model and the
    whole steps' ``step_layers``-deep one, each with its embedding and LM head, the
    latter's layers ``layer_bytes`` each with their KV caches) would not fit the host's
    available memory: building them had run the host out of memory (a traceback, or
    the kernel killing the process) after the budget was long spent. ``room``: the
    host's available bytes (:func:`calibrate.timing.host_memory_available`; None: not
    known, nothing is checked)."""
    if room is None:
        return
    meta = build_decoder(shard(model, tp), 1, 1, dtype, torch.device("meta"))
    whole = sum(p.numel() * p.element_size() for p in meta.parameters())
    layer = sum(p.numel() * p.element_size() for p in meta.layers[0].parameters())
    need = 2 * (whole - layer) + layer + step_layers * layer_bytes
    if need > HOST_SHARE * room:
        raise ServesimError(
            f"{model.name} in {dtype} needs about {need / 2**30:.1f} GiB of host memory to "
            f"calibrate on the CPU (its embedding and LM head twice, and {step_layers + 1} "
            f"layer(s) with their KV caches), more than {HOST_SHARE:.0%} of the "
            f"{room / 2**30:.1f} GiB available; calibrate it on a GPU (--device cuda), or "
            "a smaller model on the CPU")


def _step_layer_bytes(model: ModelSpec, tp: int, step_points: list[Point]) -> float:
    """Bytes one layer of the full-depth model needs for the whole steps: its weights and
    the KV cache :meth:`Bench.reserve` sizes for ``step_points``."""
    d = shard(model, tp, where="--tp")
    slots, capacity = step_cache_size(step_points) or (0, 0)
    # A layer's mean weights: projections (a MoE layer's every expert) and routers.
    weights = (d.stack_params + d.moe_layers * d.hidden * d.experts) / d.layers
    return (weights * model.dtype_bytes
            + kv_cache_bytes(slots, capacity, d.kv_heads, d.head_dim,
                             math.ceil(model.dtype_bytes)))


def _sweep(points: list[Point], bench: Bench, deadline: float, label: str, progress: bool,
           on_point: Callable[[Measurement], None] | None = None) -> tuple[list[Measurement], bool]:
    out: list[Measurement] = []
    bar = progress_bar(len(points), label, progress)
    stopped = False
    try:
        for p in points:
            left = deadline - time.perf_counter()
            if left <= 0:
                stopped = True
                break
            m = bench.run(p)
            out.append(m)
            if on_point:
                on_point(m)
            bar.set_postfix_str(f"phase budget left {max(0.0, left):.0f}s")
            bar.update()
    finally:
        bar.close()
    return out, stopped


def _best(runs: list[list[Measurement]], points: list[Point]) -> list[Measurement]:
    """Merge passes over ``points`` (the first complete or cut short, later ones partial):
    each point keeps its lowest median, and a note lists every pass's median.

    Another process on a shared machine can only slow a point down (it competes for the
    cores' shared cache and memory bandwidth), and its bursts last seconds. A point timed
    in separate passes and credited with its lowest median is therefore the quiet
    machine's figure unless every pass was disturbed.
    """
    out: list[Measurement] = []
    for i, m in enumerate(runs[0]):
        tries = [r[i] for r in runs if i < len(r) and r[i].status == "ok" and r[i].timing]
        if len(tries) > 1:
            best = min(tries, key=lambda r: r.timing.median_s if r.timing else np.inf)
            medians = " ".join(f"{r.timing.median_s:.4g}" for r in tries if r.timing)
            m = dataclasses.replace(best, note=f"pass medians (s): {medians}")
        elif tries:
            m = tries[0]
        out.append(m)
    assert all(m.point == p for m, p in zip(out, points, strict=False))
    return out


def _say(t0: float, text: str) -> None:
    """One line on stdout, as it happens, of where the budget went (seconds since ``t0``):
    a run stopped by a hard time limit writes no profile, but its log shows the phase."""
    print(f"calibrate: {time.perf_counter() - t0:.0f} s: {text}", flush=True)


def _operator_passes(op_points: list[Point], bench: Bench, t0: float, cfg: CalibrationConfig,
                     csv_path: Path) -> tuple[list[Measurement], bool]:
    """Operators in ``cfg.passes`` sweeps: (the best of each point, whether the first
    pass was cut short).

    The first pass may run until 1 − STEP_SHARE of the budget; later passes use what is
    left under the same deadline, and an incomplete one still improves what it reached
    (only the first decides whether the sweep was cut short). Host work, waking and the
    whole steps then have the rest of the budget. A SIGINT during the sweep writes the
    points measured so far to ``csv_path`` before it ends the calibration.
    """
    op_deadline = t0 + cfg.budget_s * (1 - STEP_SHARE)
    op_runs: list[list[Measurement]] = []
    stopped = False
    _say(t0, f"timing {len(op_points)} operator points")
    for k in range(cfg.passes):
        tag = f" (pass {k + 1}/{cfg.passes})" if cfg.passes > 1 else ""
        reached: list[Measurement] = []
        try:
            ops, cut = _sweep(op_points, bench, op_deadline, "operators" + tag, cfg.progress,
                              on_point=reached.append)
        except KeyboardInterrupt:
            kept = _best(op_runs + [reached], op_points) if op_runs or reached else []
            write_csv(csv_path, kept)
            _say(t0, f"interrupted during the operator sweep: {len(kept)} points kept in "
                     f"{csv_path}")
            raise
        op_runs.append(ops)
        stopped = stopped or (cut and k == 0)
        if cut:
            break
    return _best(op_runs, op_points), stopped


def _loop_terms(bench: Bench, model: ModelSpec, cfg: CalibrationConfig, t0: float,
                device: torch.device) -> LoopTerms:
    """Time the serving loop's host work and the price of waking from idle on the
    full-depth model the whole steps run on.

    They run after the whole steps' first round and before the others
    (:func:`calibrate.rounds.time_in_rounds`, ``between``): timed after every round,
    they would find the budget spent whenever the rounds run to the deadline (a large
    model's always do), and the profile would price them at their defaults; timed
    before any, they could leave the whole steps no time. They start only while half
    the whole steps' share of the budget is left (from ``t0``, ``time.perf_counter``
    seconds) and end with the budget, or :data:`LOOP_SHARE` of it after they start,
    whichever is later.
    """
    full = bench.reserved()
    now = time.perf_counter()
    if full is None or now >= t0 + cfg.budget_s * (1 - STEP_SHARE / 2):
        return LoopTerms.unmeasured("budget exhausted")
    window = max(t0 + cfg.budget_s, now + LOOP_SHARE * cfg.budget_s) - now
    _say(t0, f"whole steps' first round timed; host work and waking within {window:.0f} s")
    # Through the replay's own executor: the loop validation runs is the one priced.
    return time_loop_terms(ModelExecutor(*full, device), model.max_context, cfg.quick, cfg.seed,
                           window)


def calibrate(cfg: CalibrationConfig) -> CalibrationResult:
    """Run one calibration and write ``cfg.out`` (profile YAML) and its measurements CSV.
    On CPU the calling thread is bound to ``cfg.threads`` cores meanwhile (see
    :func:`calibrate.timing.pin_cores`) and released after."""
    mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        return _calibrate(cfg)
    finally:
        if mask is not None:
            os.sched_setaffinity(0, mask)


def _calibrate(cfg: CalibrationConfig) -> CalibrationResult:
    t0 = time.perf_counter()
    device = _device(cfg)
    check_timeable(cfg.model, device.type)
    dtype = cfg.dtype or (cfg.model.dtype if device.type == "cuda" else "fp32")
    if dtype not in ("fp32", "fp16", "bf16"):
        raise ServesimError(f"got {dtype!r}, expected bf16, fp16 or fp32", where="--dtype")
    model = dataclasses.replace(cfg.model, dtype=dtype)  # type: ignore[arg-type]
    dims = shard(model, cfg.tp, where="--tp")
    info = device_info(device)
    gpu_key = _gpu_entry(cfg, info["name"]) if device.type == "cuda" or cfg.gpu else None
    if cfg.tp > 1 and gpu_key is None:
        raise ServesimError("tp > 1 needs interconnect figures; name the GPU with --gpu "
                            f"({', '.join(sorted(GPUS))})", where="--tp")
    if device.type == "cpu":
        torch.set_num_threads(cfg.threads)
        info["host_memory_kept"] = keep_host_memory()
        info["pinned_cpus"] = pin_cores(cfg.threads)
    info["threads"] = torch.get_num_threads()
    notes: list[str] = []

    grid = grid_for(device.type, cfg.quick)
    timer = Timer(device, _timing(cfg.quick))
    step_points = whole_step_points(model, grid)
    with torch.inference_mode():
        layer_bytes = _step_layer_bytes(model, cfg.tp, step_points)
        layers = _validation_layers(model, layer_bytes, device)
        if device.type == "cpu":
            check_host_memory(model, cfg.tp, dtype, layers, layer_bytes,
                              host_memory_available())
        try:
            bench = Bench(dims, model.layers, model.max_context, dtype, device, timer, layers)
        except (torch.OutOfMemoryError, MemoryError, RuntimeError) as exc:
            if not is_oom(exc):
                raise
            raise ServesimError(f"out of memory building {model.name} in {dtype} on "
                                f"{device.type}; calibrate a smaller model, or on a larger "
                                "device") from None
        csv_path = staging_path(cfg.out)
        # The settings first, so that whatever the CSV ends up holding can be refitted.
        so_far = Measured(model, info, gpu_key, layers, grid.table_max, [], [], notes=notes)
        write_meta(csv_path, run_meta(cfg, so_far))
        ops, stopped = _operator_passes(operator_points(model, grid, cfg.seed), bench, t0, cfg,
                                        csv_path)
        write_csv(csv_path, ops)  # kept whatever happens next (an interrupt, say)
        so_far.stopped = stopped
        write_meta(csv_path, run_meta(cfg, so_far))
        _say(t0, f"operators timed ({len(ops)} points)")
        if stopped:
            notes.append(f"budget exhausted: operator sweep stopped after {len(ops)} points; "
                         "fitted on what was measured")
        loop: list[LoopTerms] = []  # filled between the whole steps' rounds

        def loop_terms() -> None:
            loop.append(_loop_terms(bench, model, cfg, t0, device))
            write_csv(csv_path, ops + loop[0].measurements)
            _say(t0, "host work and waking timed")
        steps, stopped_steps, interrupted = time_in_rounds(
            step_points, bench, t0 + cfg.budget_s, cfg.rounds, cfg.progress, between=loop_terms)
        _say(t0, f"whole steps timed ({len(steps)} shapes)" + (
            "; interrupted, fitting what was measured (interrupt again to abort)"
            if interrupted else ""))
        if interrupted:
            notes.append(f"interrupted while timing whole steps: fitted on the {len(steps)} "
                         "reached")
        terms = loop[0] if loop else LoopTerms.unmeasured(
            "interrupted" if interrupted else
            "no full-depth model for the whole steps (see their notes)")
        notes += [terms.note] if terms.note else []
    return fit_profile(cfg, Measured(
        model, info, gpu_key, layers, grid.table_max, ops + terms.measurements, steps,
        terms.wake, terms.wake_fit, notes, stopped, stopped_steps, interrupted,
        time.perf_counter() - t0))
