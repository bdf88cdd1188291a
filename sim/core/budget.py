"""What a run will cost this machine, estimated before it starts: peak memory and time.

The number of requests is read off the scenario without building them: ``num_requests``,
the arrival rates times ``duration_s`` (or the stages), or a trace's row count times its
``repeat`` and sampling. Peak resident memory is then a fitted line, a fixed part plus
so many bytes per request and per replica (``bench/bench_memory.py`` measures them;
docs/performance.md keeps the fit), taken at its worst case: a run so overloaded that
every request waits in a queue at once. A run whose estimate is over the memory this
machine has free (``MemAvailable`` in ``/proc/meminfo``; elsewhere nothing is checked)
is refused with the figures, unless forced. Time is requests over a conservative
simulation speed; it is only printed.
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from pathlib import Path

from sim.config.scenario import Scenario
from sim.errors import ServesimError

# Fitted by bench/bench_memory.py (docs/performance.md, "Memory estimate"), rounded up.
# Measured: 72 MiB + 618 B per request, 30.2 kB per replica; the margins leave room for
# plots (matplotlib), prefix hashes and request classes, which the bench leaves out.
BASE_BYTES = 128 * 2**20  # interpreter, numpy, simpy, the cost model, the outputs' writer
BYTES_PER_REQUEST = 1000  # a queued Request, its result row and its requests.csv line
BYTES_PER_REPLICA = 40_000  # a replica's policy, KV manager, decode set and totals
# A trace row held while the trace is transformed: every repeated copy is built before
# num_requests keeps the first rows. 56 B measured at the peak of a 12-million-row repeat
# of a CSV with a class column; prefix hashes (an array a row) take more.
BYTES_PER_TRACE_ROW = 200
# Simulated requests per wall-second of the bench's overloaded run on a busy machine
# (the slow end; docs/performance.md's unloaded runs do 25k to 49k).
REQUESTS_PER_S = 2_000.0
# Poisson counts above rate x span by more than this many standard deviations are
# vanishingly rare; the estimate allows for them.
SIGMAS = 6.0


@dataclass(frozen=True)
class Estimate:
    """A run's expected size: requests, replicas, peak bytes and wall seconds."""

    requests: float
    replicas: int
    peak_bytes: float
    seconds: float
    trace_rows: float = 0.0  # rows a trace workload builds before num_requests applies


def _trace_rows(path: Path) -> int:
    """Lines in a trace file (an upper bound on its rows), gzip read through."""
    count = 0
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            count += block.count(b"\n")
    return count + 1


def _with_margin(mean: float) -> float:
    return mean + SIGMAS * math.sqrt(mean) + 16 if math.isfinite(mean) else math.inf


def expected_requests(sc: Scenario) -> float:
    """An upper estimate of the requests ``sc`` builds (inf when unbounded)."""
    wl = sc.workload
    cap = math.inf if wl.num_requests is None else float(wl.num_requests)
    if wl.trace is not None:
        from sim.workload.traces import find_trace

        t = wl.trace
        try:
            rows = float(_trace_rows(find_trace(t.path, sc.base_dir)))
        except (ServesimError, OSError, EOFError):
            return min(cap, 0.0) if math.isfinite(cap) else 0.0  # loading will say why
        if t.sample_n is not None:
            rows = min(rows, float(t.sample_n))
        if t.sample_fraction is not None:
            rows *= t.sample_fraction
        return min(cap, rows * t.repeat)
    if wl.concurrency is not None:
        # Every client holds a request's state at once and more are drawn as they end,
        # up to num_requests: clients past it never send.
        return cap if math.isfinite(cap) else float(wl.concurrency)
    rates = [a.rate for a in ([wl.arrivals] if wl.arrivals is not None else [])
             + [c.arrivals for c in (wl.classes or {}).values() if c.arrivals is not None]
             if a.rate is not None]
    if wl.stages is not None:
        mean = sum(s.rate * s.duration_s for s in wl.stages)
    elif wl.duration_s is not None:
        mean = sum(rates) * wl.duration_s
    else:
        # Each stream is cut at num_requests, then the merge is.
        return cap * max(1, len(rates))
    return min(cap * max(1, len(rates)), _with_margin(mean))


def trace_rows(sc: Scenario) -> float:
    """Rows a trace workload builds (its rows after sampling, times ``repeat``) before
    ``num_requests`` keeps the first; 0 without a trace or when it cannot be read."""
    t = sc.workload.trace
    if t is None:
        return 0.0
    from sim.workload.traces import find_trace

    try:
        rows = float(_trace_rows(find_trace(t.path, sc.base_dir)))
    except (ServesimError, OSError, EOFError):
        return 0.0  # loading will say why
    if t.sample_n is not None:
        rows = min(rows, float(t.sample_n))
    if t.sample_fraction is not None:
        rows *= t.sample_fraction
    return rows * t.repeat


def replicas_of(sc: Scenario) -> int:
    """Replicas the run builds (both pools of a disaggregated cluster)."""
    from sim.config.disagg import pools

    return sum(p.replicas for p in pools(sc))


def estimate(sc: Scenario) -> Estimate:
    """The run's expected requests, replicas, peak memory (bytes) and time (s)."""
    n = expected_requests(sc)
    reps = replicas_of(sc)
    rows = trace_rows(sc)
    peak = BASE_BYTES + n * BYTES_PER_REQUEST + reps * BYTES_PER_REPLICA
    # The transformed trace is freed before the run; the larger of the two peaks counts.
    peak = max(peak, BASE_BYTES + rows * BYTES_PER_TRACE_ROW)
    return Estimate(n, reps, peak, n / REQUESTS_PER_S, rows)


def available_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Memory the kernel says new work may use (MemAvailable, bytes); None off Linux."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(b: float) -> str:
    if not math.isfinite(b):
        return "unbounded"
    # Past a petabyte the figure is a sign of a runaway setting, not a size to read.
    return f"{b / 2**30:.1f} GiB" if b < 2**50 else f"{b / 2**30:.3g} GiB"


def check(sc: Scenario, force: bool, free: int | None = None) -> Estimate:
    """Refuse (one line naming the figures and ``--force``) a run whose estimated peak
    memory is over ``free`` bytes (default: :func:`available_bytes`); else its estimate."""
    est = estimate(sc)
    free = available_bytes() if free is None else free
    if force or free is None or est.peak_bytes <= free:
        return est
    rows_bytes = BASE_BYTES + est.trace_rows * BYTES_PER_TRACE_ROW
    if rows_bytes == est.peak_bytes and est.trace_rows:
        raise _repeat_error(sc, est, free)
    if not math.isfinite(est.requests):
        n = "unbounded"
    else:  # past 10^15 the figure is a runaway setting's: a short form reads better
        n = f"{est.requests:,.0f}" if est.requests < 1e15 else f"{est.requests:.3g}"
    req_bytes, reps_bytes = est.requests * BYTES_PER_REQUEST, est.replicas * BYTES_PER_REPLICA
    raise ServesimError(
        f"this run needs about {_gib(est.peak_bytes)} of memory ({n} requests x "
        f"{BYTES_PER_REQUEST} B + {est.replicas:,} replicas x {BYTES_PER_REPLICA} B + "
        f"{BASE_BYTES // 2**20} MiB) and this machine has {_gib(free)} available; make "
        "the workload smaller (num_requests, duration_s, rate, trace repeat), or pass "
        "--force to run it anyway", sc.source,
        _replica_key(sc) if reps_bytes > max(req_bytes, BASE_BYTES) else "workload")


def _replica_key(sc: Scenario) -> str:
    """The key that sets the most replicas: a disaggregated pool's own count where it
    gives one (the pool of more replicas), else ``cluster.replicas``."""
    from sim.config.disagg import pools

    if sc.serving.policy != "disaggregated":
        return "cluster.replicas"
    pool = max(pools(sc), key=lambda p: p.replicas)
    own = getattr(sc.disaggregated, pool.role).replicas
    return f"disaggregated.{pool.role}.replicas" if own is not None else "cluster.replicas"


def _repeat_error(sc: Scenario, est: Estimate, free: int) -> ServesimError:
    """The refusal of a run whose trace rows, repeated in full before ``num_requests``
    applies, would not fit in ``free`` bytes: it names ``workload.trace.repeat``, its
    value and the copies the run needs."""
    t = sc.workload.trace
    assert t is not None
    rows = est.trace_rows / t.repeat
    cap = sc.workload.num_requests
    copies = 0 if cap is None or rows <= 0 else math.ceil((cap + t.start_row) / rows)
    need = (f"; num_requests ({cap:,}) needs {copies:,} cop{'y' if copies == 1 else 'ies'}"
            if copies else "")
    return ServesimError(
        f"got {t.repeat:,}: the trace is built in full before num_requests applies, about "
        f"{rows:,.0f} rows x {t.repeat:,} = {est.trace_rows:,.0f} rows x "
        f"{BYTES_PER_TRACE_ROW} B + {BASE_BYTES // 2**20} MiB = {_gib(est.peak_bytes)}, and "
        f"this machine has {_gib(free)} available{need}; lower repeat, or pass --force to "
        "run it anyway", sc.source, "workload.trace.repeat")
