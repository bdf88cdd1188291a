"""Timing discipline: warm-up excluded, repeats, medians and spread, every sample kept.

On CUDA each repeat is bracketed by CUDA events, and decode-sized work can be
captured once in a CUDA graph and replayed, so launch overhead that a serving engine
would also remove with graphs does not dominate. On CPU the caller pins
``torch.set_num_threads(1)`` (see DESIGN.md), so all the work runs on the calling
thread, and each repeat is timed by that thread's CPU clock (``time.thread_time``):
it is the wall time of the work less any time the scheduler gave other processes.
On a shared 2-core machine that removes the preemption tail (measured: p90 of a
1.6 ms matmul pair 5.7 ms by wall clock, 1.7 ms by thread clock, medians equal).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from calibrate.records import Timing

# glibc mallopt parameters: M_TRIM_THRESHOLD, M_MMAP_THRESHOLD (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_MAX = 32 * 2**20      # glibc's ceiling for the mmap threshold on 64-bit hosts
_TRIM_NEVER = 2**30


def host_memory_available() -> float | None:
    """Bytes of host memory a new allocation can take now (Linux's ``MemAvailable``), None
    where the system does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return None


def keep_host_memory() -> bool:
    """Make glibc keep freed memory for reuse (as a caching allocator would); True if set.

    By default glibc serves blocks over a (moving) threshold with fresh ``mmap`` pages
    and returns freed heap tops to the system, so a step's large temporaries (a prefill's
    activations and scores) may fault in new pages on every call, or not, depending on
    what ran before: measured on ``tiny``/CPU, a 1000-token prefill took 63.8 ms with
    3252 page faults a step and 56.9 ms with 27, and the same step varied between runs.
    Calibration and replay on CPU both call this, so neither pays faults a server with
    a caching allocator (PyTorch's on GPU, tcmalloc/jemalloc on CPU) would not.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_MAX)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                          _TRIM_NEVER))


def pin_cores(n: int) -> list[int] | None:
    """Bind the calling thread (and threads it starts later) to ``n`` of the CPUs it may
    use, the highest-numbered; the CPUs chosen, or None where the OS has no affinity call.

    Left free to migrate, a thread that runs small steps lands on another core now and
    then and finds its caches cold: measured on ``tiny``/CPU, one thread, the same
    1-entry decode step had a median of 0.87 to 1.62 ms depending on the process (five
    processes), and 0.93 to 1.10 ms in six processes each bound to one core. Serving
    engines on CPU bind their threads for the same reason. Calibration and replay on CPU
    both call this.
    """
    if not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-max(1, min(n, len(allowed))):]
    os.sched_setaffinity(0, chosen)
    return chosen


@dataclass(frozen=True)
class TimingConfig:
    """How hard to time one point: warm-up calls, and repeats bounded by count and seconds."""

    warmup: int = 2
    min_repeats: int = 5
    max_repeats: int = 50
    target_s: float = 0.05  # aim to spend about this long on a point's repeats


def is_oom(exc: BaseException) -> bool:
    """True when ``exc`` is the device (or host) running out of memory: CUDA's "out of
    memory", or the CPU allocator's "can't allocate memory"."""
    if isinstance(exc, torch.OutOfMemoryError | MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text
                                              or "can't allocate memory" in text)


class Timer:
    """Times callables on one device following :class:`TimingConfig`."""

    def __init__(self, device: torch.device, config: TimingConfig):
        self.device = device
        self.config = config
        self.cuda = device.type == "cuda"

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def capture(self, fn: Callable[[], object]) -> tuple[Callable[[], object], object] | None:
        """Capture ``fn`` in a CUDA graph: (replay, fn's output, refreshed by each replay).

        None when not on CUDA or when ``fn`` cannot be captured; callers then run eagerly.
        """
        if not self.cuda:
            return None
        try:
            # Warm up on a side stream first, as graph capture requires.
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(max(1, self.config.warmup)):
                    fn()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fn()
            graph.replay()
            self._sync()
            return graph.replay, out
        except Exception:  # noqa: BLE001 - any capture failure just means "time eagerly"
            self._sync()
            return None

    def measure(self, fn: Callable[[], object], graph: bool = False, wall: bool = False) -> Timing:
        """Time ``fn`` after warm-up.

        ``graph`` asks for CUDA-graph replay where it can be captured; ``wall`` times by
        ``perf_counter`` even on CUDA (for work that includes host packing and a sync).
        On CPU every repeat is timed by the thread's CPU clock (see the module docstring).
        """
        cfg = self.config
        for _ in range(cfg.warmup):
            fn()
        self._sync()
        run, used_graph = fn, False
        if graph:
            captured = self.capture(fn)
            if captured is not None:
                run, used_graph = captured[0], True
        first = self._once(run, wall)
        repeats = int(min(cfg.max_repeats, max(cfg.min_repeats, cfg.target_s / max(first, 1e-7))))
        samples = [first] + [self._once(run, wall) for _ in range(repeats - 1)]
        return Timing(tuple(samples), used_graph)

    def take(self, fn: Callable[[], object], n: int, wall: bool, warmup: int = 0
             ) -> list[float]:
        """``n`` timed calls of ``fn`` after ``warmup`` untimed ones (clocks as in
        :meth:`measure`); seconds."""
        for _ in range(warmup):
            fn()
        self._sync()
        return [self._once(fn, wall) for _ in range(n)]

    def _once(self, run: Callable[[], object], wall: bool) -> float:
        if self.cuda and not wall:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        clock = time.perf_counter if self.cuda else time.thread_time
        t0 = clock()
        run()
        return clock() - t0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_info(device: torch.device) -> dict[str, Any]:
    """Device type and name, torch and CUDA versions (recorded in the profile)."""
    cuda = device.type == "cuda"
    return {
        "type": device.type,
        "name": torch.cuda.get_device_name(device) if cuda else _cpu_name(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda if cuda else None,
    }
