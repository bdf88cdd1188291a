"""Workloads: the requests a scenario sends, as numpy arrays, generated or read from a trace.

A workload is either a ``trace`` (arrivals and lengths from a file) or ``arrivals``
(poisson, gamma or constant) with ``lengths`` (fixed, uniform, lognormal per side, or
pairs drawn from an empirical file). ``num_requests`` and ``duration_s`` bound it;
whichever is hit first wins. Generation draws from one explicitly passed numpy
Generator, so a seed fixes the workload.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from sim.configtools import bounded
from sim.errors import ServesimError


@dataclass(frozen=True)
class ArrivalsConfig:
    """Generated arrival process; ``rate`` in requests per second, first arrival at ``start_s``."""

    process: Literal["poisson", "gamma", "constant"]
    rate: float = bounded(gt=0)
    cv: float | None = bounded(None, gt=0)
    start_s: float = bounded(0.0, ge=0)

    def __post_init__(self) -> None:
        if self.process == "gamma" and self.cv is None:
            raise ServesimError("gamma arrivals need cv (coefficient of variation)", where="cv")
        if self.process != "gamma" and self.cv is not None:
            raise ServesimError(f"cv applies only to gamma arrivals, not {self.process}",
                                where="cv")


@dataclass(frozen=True)
class DistConfig:
    """A token-length distribution: fixed ``value``; uniform [low, high]; or lognormal
    with ``median`` and log-space ``sigma``, clipped to [min, max] (bounds required)."""

    dist: Literal["fixed", "uniform", "lognormal"]
    value: int | None = bounded(None, ge=1)
    low: int | None = bounded(None, ge=1)
    high: int | None = bounded(None, ge=1)
    median: float | None = bounded(None, gt=0)
    sigma: float | None = bounded(None, ge=0)
    min: int | None = bounded(None, ge=1)
    max: int | None = bounded(None, ge=1)

    def __post_init__(self) -> None:
        needs = {"fixed": ("value",), "uniform": ("low", "high"),
                 "lognormal": ("median", "sigma", "min", "max")}[self.dist]
        for key in ("value", "low", "high", "median", "sigma", "min", "max"):
            given = getattr(self, key) is not None
            if key in needs and not given:
                raise ServesimError(f"{self.dist} lengths need {key}", where=key)
            if key not in needs and given:
                raise ServesimError(
                    f"{key} does not apply to {self.dist}; it takes {', '.join(needs)}", where=key
                )
        if self.dist == "uniform" and self.low > self.high:  # type: ignore[operator]
            raise ServesimError(f"low {self.low} > high {self.high}", where="low")
        if self.dist == "lognormal" and self.min > self.max:  # type: ignore[operator]
            raise ServesimError(f"min {self.min} > max {self.max}", where="min")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` lengths in tokens (int64)."""
        if self.dist == "fixed":
            return np.full(n, self.value, dtype=np.int64)
        if self.dist == "uniform":
            assert self.low is not None and self.high is not None
            return rng.integers(self.low, self.high, size=n, endpoint=True, dtype=np.int64)
        x = rng.lognormal(np.log(self.median), self.sigma, size=n)  # type: ignore[arg-type]
        return np.clip(np.rint(x), self.min, self.max).astype(np.int64)


@dataclass(frozen=True)
class LengthsConfig:
    """Prompt and output lengths: per-side distributions, or (prompt, output) pairs drawn
    with replacement from an ``empirical`` file (a path or a shipped trace name)."""

    prompt: DistConfig | None = None
    output: DistConfig | None = None
    empirical: str | None = None

    def __post_init__(self) -> None:
        if self.empirical is not None:
            if self.prompt is not None or self.output is not None:
                raise ServesimError("give either empirical or prompt/output", where="empirical")
        elif self.prompt is None or self.output is None:
            missing = "prompt" if self.prompt is None else "output"
            raise ServesimError("lengths need both prompt and output, or empirical",
                                where=missing)


@dataclass(frozen=True)
class TraceConfig:
    """Arrivals and lengths replayed from a file; ``time_scale`` multiplies its arrival
    times (0.5 doubles the rate), ``target_rate`` rescales them to that mean req/s."""

    path: str
    format: str | None = None
    time_scale: float = bounded(1.0, gt=0)
    target_rate: float | None = bounded(None, gt=0)
    start_s: float = bounded(0.0, ge=0)
    sort: bool = False

    def __post_init__(self) -> None:
        if self.target_rate is not None and self.time_scale != 1.0:
            raise ServesimError("give time_scale or target_rate, not both", where="target_rate")


@dataclass(frozen=True)
class WorkloadConfig:
    """What requests arrive: a trace, or generated arrivals with lengths."""

    trace: TraceConfig | None = None
    arrivals: ArrivalsConfig | None = None
    lengths: LengthsConfig | None = None
    num_requests: int | None = bounded(None, ge=1)
    duration_s: float | None = bounded(None, gt=0)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.trace is not None:
            if self.arrivals is not None or self.lengths is not None:
                raise ServesimError("a trace brings its own arrivals and lengths; remove "
                                    "arrivals/lengths or the trace", where="trace")
        else:
            if self.arrivals is None or self.lengths is None:
                raise ServesimError("give a trace, or both arrivals and lengths",
                                    where="arrivals" if self.arrivals is None else "lengths")
            if self.num_requests is None and self.duration_s is None:
                raise ServesimError("generated arrivals need num_requests or duration_s",
                                    where="num_requests")


@dataclass(frozen=True)
class Requests:
    """The requests of one run, sorted by arrival; ids are positions in these arrays."""

    arrival_s: np.ndarray  # float64 seconds
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.arrival_s)


def _arrival_times(cfg: ArrivalsConfig, n_max: int | None, horizon: float | None,
                   rng: np.random.Generator) -> np.ndarray:
    """Arrival times in seconds: first at start_s, then gaps from the process."""
    def gaps(k: int) -> np.ndarray:
        if cfg.process == "poisson":
            return rng.exponential(1.0 / cfg.rate, size=k)
        if cfg.process == "gamma":
            shape = 1.0 / cfg.cv**2  # type: ignore[operator]
            return rng.gamma(shape, 1.0 / (cfg.rate * shape), size=k)
        return np.full(k, 1.0 / cfg.rate)

    if n_max is not None:
        t = cfg.start_s + np.concatenate(([0.0], np.cumsum(gaps(n_max - 1))))
        return t[t < horizon] if horizon is not None else t
    assert horizon is not None
    chunks, t0, chunk = [], cfg.start_s, max(16, int(cfg.rate * (horizon - cfg.start_s) * 1.2))
    first = True
    while t0 < horizon:
        g = gaps(chunk)
        if first:
            g[0], first = 0.0, False
        t = t0 + np.cumsum(g)
        chunks.append(t[t < horizon])
        t0 = float(t[-1])
    return np.concatenate(chunks) if chunks else np.empty(0)


def build_requests(cfg: WorkloadConfig, base_dir: Path | None, rng: np.random.Generator,
                   source: str = "<scenario>") -> Requests:
    """Materialise the workload's requests (arrays), reading trace files if it names any."""
    from sim import traces  # lazy: only trace workloads need the loaders

    if cfg.trace is not None:
        tc = cfg.trace
        try:
            tr = traces.load_trace(traces.find_trace(tc.path, base_dir), tc.format, sort=tc.sort,
                                   rng=rng)
        except ServesimError as exc:
            raise exc.located(source, "workload.trace") from None
        if tr.arrival_s is None:
            raise ServesimError(f"{tc.path} has lengths only; use lengths: {{empirical: ...}} "
                                "with generated arrivals", source, "workload.trace.path")
        t = np.asarray(tr.arrival_s, dtype=np.float64)
        prompt, output = tr.prompt_tokens, tr.output_tokens
        keep = t >= tc.start_s
        t, prompt, output = t[keep] - tc.start_s, prompt[keep], output[keep]
        if tc.target_rate is not None and len(t) > 1 and t[-1] > t[0]:
            t = t * ((len(t) / (t[-1] - t[0])) / tc.target_rate)
        else:
            t = t * tc.time_scale
        if cfg.duration_s is not None:
            keep = t < cfg.duration_s
            t, prompt, output = t[keep], prompt[keep], output[keep]
        n = len(t) if cfg.num_requests is None else min(cfg.num_requests, len(t))
        return Requests(t[:n].copy(), prompt[:n].astype(np.int64), output[:n].astype(np.int64))

    assert cfg.arrivals is not None and cfg.lengths is not None
    t = _arrival_times(cfg.arrivals, cfg.num_requests, cfg.duration_s, rng)
    n = len(t)
    lc = cfg.lengths
    if lc.empirical is not None:
        try:
            tr = traces.load_trace(traces.find_trace(lc.empirical, base_dir))
        except ServesimError as exc:
            raise exc.located(source, "workload.lengths.empirical") from None
        idx = rng.integers(0, len(tr.prompt_tokens), size=n)
        prompt = np.asarray(tr.prompt_tokens, dtype=np.int64)[idx]
        output = np.asarray(tr.output_tokens, dtype=np.int64)[idx]
    else:
        assert lc.prompt is not None and lc.output is not None
        prompt = lc.prompt.sample(n, rng)
        output = lc.output.sample(n, rng)
    return Requests(t, prompt, output)
