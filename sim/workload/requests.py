"""Workloads: the requests a scenario sends, as numpy arrays, generated or read from a trace.

A workload is either a ``trace`` (arrivals and lengths from a file) or ``arrivals``
(poisson, gamma or constant) with ``lengths`` (fixed, uniform, lognormal per side, or
pairs drawn from an empirical file). ``num_requests`` and ``duration_s`` bound it;
whichever is hit first wins. Generation draws from one explicitly passed numpy
Generator, so a seed fixes the workload.

``classes`` makes a mixed workload: named request classes, each with its own lengths,
priority and SLO, sharing ``arrivals`` by weight or each with its own arrival process
(or, with a trace, labelled by its ``class`` column). :mod:`sim.workload.checks` checks
them, :mod:`sim.workload.mix` draws them and :mod:`sim.workload.build` puts every kind of workload
together; requests then carry their class index in ``Requests.klass``. This module holds
the configurations and :class:`Requests`; :mod:`sim.workload.draw` draws arrival times
and lengths.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from sim.configtools import MAX_TIME_S, bounded, check_slo_seconds
from sim.errors import ServesimError
from sim.workload.checks import check_classes, check_closed
from sim.workload.stages import StageConfig, check_stages

# The largest log-space sigma of lognormal lengths (e**5: 148x per standard deviation).
MAX_SIGMA = 5.0

# Arrival times are held below MAX_TIME_S (sim.configtools), as the engine's clock is
# (sim.core.runchecks).


@dataclass(frozen=True)
class ArrivalsConfig:
    """Generated arrival process; ``rate`` in requests per second (required unless
    ``workload.stages`` gives one per stage), first arrival at ``start_s``."""

    process: Literal["poisson", "gamma", "constant"]
    rate: float | None = bounded(None, gt=0)
    # Past 1000 the gamma shape (1/cv^2) is below 1e-6: nearly all gaps zero.
    cv: float | None = bounded(None, gt=0, le=1000)
    start_s: float = bounded(0.0, ge=0, le=MAX_TIME_S)

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
        if self.dist == "lognormal":
            self._check_lognormal()

    def _check_lognormal(self) -> None:
        """A median inside [min, max] and a sigma that keeps most draws off the bounds:
        outside either, the clip at min and max would make nearly every length a bound."""
        lo, hi, med = self.min, self.max, self.median
        assert lo is not None and hi is not None and med is not None
        if lo > hi:
            raise ServesimError(f"min {lo} > max {hi}", where="min")
        if not lo <= med <= hi:
            raise ServesimError(f"got {med:g}, outside [min, max] = [{lo}, {hi}]: lengths "
                                f"are clipped to that range, so nearly every one would be "
                                f"{lo if med < lo else hi}; give a median in it", where="median")
        if self.sigma is not None and self.sigma > MAX_SIGMA:
            raise ServesimError(f"got {self.sigma:g}, must be at most {MAX_SIGMA:g} (log-space: "
                                f"a sigma of {MAX_SIGMA:g} already spreads a length "
                                f"{math.exp(MAX_SIGMA):.0f}x either side of the median in one "
                                "standard deviation; past it most draws clip to min or max)",
                                where="sigma")

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
    """Arrivals and lengths replayed from a file, transformed in this fixed order:
    ``window_s`` [start, end) → ``sample_fraction``/``sample_n`` → ``repeat`` →
    ``time_scale`` (multiplies arrival times: 0.5 doubles the rate) or ``target_rate``
    (req/s) → ``truncate`` (cap prompt + output at the model's context; counted).
    ``start_row`` then skips that many rows of the transformed trace, so the replay starts
    at its ``start_row``-th request (0-based; arrivals shifted back to the trace's first
    arrival time): how a sweep gives each replication its own stretch of the trace.
    ``model``/``log_type`` filter BurstGPT rows; ``spread`` spreads Mooncake buckets."""

    path: str
    format: str | None = None
    sort: bool = False
    model: str | None = None
    log_type: str | None = None
    spread: bool = False
    window_s: tuple[float, ...] | None = None
    sample_fraction: float | None = bounded(None, gt=0, le=1)
    sample_n: int | None = bounded(None, ge=1)
    repeat: int = bounded(1, ge=1)
    time_scale: float = bounded(1.0, gt=0)
    target_rate: float | None = bounded(None, gt=0)
    truncate: bool = False
    start_row: int = bounded(0, ge=0)
    # Tokens per hashed block of the trace's prefix hashes (servesim and mooncake formats);
    # None: the format's own (Mooncake's hash_ids: 512; a prefix_hash_ids column: the KV
    # block size).
    prefix_block_tokens: int | None = bounded(None, ge=1)

    def __post_init__(self) -> None:
        if self.target_rate is not None and self.time_scale != 1.0:
            raise ServesimError("give time_scale or target_rate, not both", where="target_rate")
        self.transforms(None)  # validates window and sampling keys now, at load

    def transforms(self, max_context: int | None, block_tokens: int | None = None) -> Any:
        """The :class:`sim.workload.tracetools.TraceTransforms` these keys describe;
        ``block_tokens`` sizes prefix-hash blocks when the trace does not."""
        from sim.workload.tracetools import TraceTransforms

        return TraceTransforms(
            window_s=self.window_s, sample_fraction=self.sample_fraction,
            sample_n=self.sample_n, repeat=self.repeat,
            time_scale=None if self.time_scale == 1.0 else self.time_scale,
            target_rate_rps=self.target_rate,
            max_context=max_context if self.truncate else None,
            hash_block_tokens=block_tokens,
        )

    def load_options(self) -> dict[str, Any]:
        """Format options passed to :func:`sim.workload.traces.load_trace`."""
        opts: dict[str, Any] = {}
        if self.model is not None:
            opts["model"] = self.model
        if self.log_type is not None:
            opts["log_type"] = self.log_type
        if self.spread:
            opts["spread"] = True
        if self.prefix_block_tokens is not None:
            opts["prefix_block_tokens"] = self.prefix_block_tokens
        return opts


@dataclass(frozen=True)
class PriorityConfig:
    """Priority classes drawn per generated request: ``classes`` (lower is served first
    when ``serving.priority`` is on) with relative ``weights`` (default equal)."""

    classes: tuple[int, ...]
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if not self.classes:
            raise ServesimError("give at least one priority class", where="classes")
        # A class listed twice would silently add its weights together (or, without
        # weights, double its share): most likely a typo for another class.
        seen: set[int] = set()
        for c in self.classes:
            if c in seen:
                raise ServesimError(f"got {list(self.classes)}: class {c} is listed twice; "
                                    "give each priority class once (its share in weights)",
                                    where="classes")
            seen.add(c)
        if self.weights is not None:
            if len(self.weights) != len(self.classes):
                raise ServesimError(f"{len(self.weights)} weights for {len(self.classes)} "
                                    "classes; give one weight per class", where="weights")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ServesimError(f"got {list(self.weights)}, weights must be >= 0 with a "
                                    "positive sum", where="weights")

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` priority classes (int64)."""
        p = None if self.weights is None else probabilities(self.weights)
        return rng.choice(np.asarray(self.classes, dtype=np.int64), size=n, p=p)


def probabilities(weights: Any) -> np.ndarray:
    """Relative weights (finite, >= 0, a positive sum) as probabilities summing to 1,
    also where the weights' sum overflows (two weights of 1e308)."""
    w = np.asarray(weights, dtype=float)
    with np.errstate(over="ignore"):
        total = w.sum()
    if not np.isfinite(total):
        w = w / w.max()
        total = w.sum()
    return w / total


@dataclass(frozen=True)
class ClassSLO:
    """A class's own latency targets (seconds); a key left out falls back to the
    scenario's ``slo`` section."""

    ttft_s: float | None = bounded(None, gt=0)
    tpot_s: float | None = bounded(None, gt=0)

    def __post_init__(self) -> None:
        check_slo_seconds(self)


@dataclass(frozen=True)
class ClassConfig:
    """One request class of a mixed workload. ``weight`` (relative, > 0) is its share of a
    shared ``workload.arrivals``; ``arrivals`` instead gives it its own process. ``lengths``
    default to ``workload.lengths``; ``priority`` (lower is served first when
    ``serving.priority`` is on) defaults to 0; ``slo`` overrides the scenario's targets."""

    weight: float | None = bounded(None, gt=0)
    arrivals: ArrivalsConfig | None = None
    lengths: LengthsConfig | None = None
    priority: int | None = None
    slo: ClassSLO | None = None

    def __post_init__(self) -> None:
        if self.weight is not None and self.arrivals is not None:
            raise ServesimError("give weight (a share of workload.arrivals) or arrivals (the "
                                "class's own process), not both", where="weight")


@dataclass(frozen=True)
class WorkloadConfig:
    """What requests arrive: a trace, or generated arrivals with lengths; or what
    ``concurrency`` closed-loop clients send, ``think_time_s`` apart
    (sim/workload/closedloop.py)."""

    trace: TraceConfig | None = None
    arrivals: ArrivalsConfig | None = None
    lengths: LengthsConfig | None = None
    num_requests: int | None = bounded(None, ge=1)
    duration_s: float | None = bounded(None, gt=0, le=MAX_TIME_S)
    seed: int = bounded(0, ge=0)  # numpy seeds are non-negative
    priority: PriorityConfig | None = None
    classes: dict[str, ClassConfig] | None = None
    shared_prefix: SharedPrefixConfig | None = None
    concurrency: int | None = bounded(None, ge=1)
    think_time_s: float | None = bounded(None, ge=0, lt=MAX_TIME_S)
    stages: tuple[StageConfig, ...] | None = None

    def __post_init__(self) -> None:
        check_stages(self)
        if self.trace is not None and self.shared_prefix is not None:
            # True of a trace with hash columns and of one without (not read yet here).
            raise ServesimError("applies to generated workloads; a trace's shared prefixes "
                                "come from its own hash_ids or prefix_hash_ids column (a "
                                "trace without one shares none); remove shared_prefix",
                                where="shared_prefix")
        if self.concurrency is not None or self.think_time_s is not None:
            check_closed(self)
            return
        if self.classes is not None:
            check_classes(self)
            return
        if self.trace is not None:
            if self.priority is not None:
                raise ServesimError("a trace brings its own priority column; remove "
                                    "workload.priority", where="priority")
            if self.arrivals is not None or self.lengths is not None:
                raise ServesimError("a trace brings its own arrivals and lengths; remove "
                                    "arrivals/lengths or the trace", where="trace")
        else:
            if self.arrivals is None or self.lengths is None:
                raise ServesimError("give a trace, or both arrivals and lengths",
                                    where="arrivals" if self.arrivals is None else "lengths")
            if self.num_requests is None and self.duration_s is None and self.stages is None:
                raise ServesimError("generated arrivals need num_requests, duration_s or "
                                    "stages", where="num_requests")


@dataclass(frozen=True)
class SharedPrefixConfig:
    """Generated requests share a leading prompt prefix (a system prompt, few-shot
    examples): each request belongs to one of ``groups`` (drawn uniformly, seeded) whose
    first ``tokens`` prompt tokens are identical, named in blocks of ``block_tokens``."""

    # 2**24 tokens is past every model's context: a longer prefix changes nothing.
    tokens: int = bounded(ge=1, le=2**24)
    # Each group's block names start at group << 32: 2**31 groups keep them in int64.
    groups: int = bounded(1, ge=1, le=2**31 - 1)
    block_tokens: int = bounded(16, ge=1)

    def __post_init__(self) -> None:
        # A prefix shorter than one block names no whole block, so no request would
        # share anything: refused rather than run as if the section were absent.
        if self.block_tokens > self.tokens:
            raise ServesimError(f"got {self.block_tokens}, more than tokens ({self.tokens}): "
                                "only whole blocks are hashed, so no request would share "
                                f"any; give at most {self.tokens}, or more tokens",
                                where="block_tokens")

    @property
    def shared_tokens(self) -> int:
        """Prompt tokens a full-length prompt shares with its group: the whole blocks of
        ``block_tokens`` inside the first ``tokens`` (vLLM hashes full blocks only)."""
        return self.tokens // self.block_tokens * self.block_tokens

    def apply(self, reqs: Requests, rng: np.random.Generator) -> Requests:
        """``reqs`` with per-request prefix hashes (prompts shorter than the prefix use
        what they cover)."""
        import dataclasses

        group = rng.integers(0, self.groups, size=len(reqs))
        per = self.tokens // self.block_tokens
        # Only the groups drawn get a chain: many more groups than requests cost nothing.
        chains = {g: np.arange(per, dtype=np.int64) + (g << 32)
                  for g in np.unique(group).tolist()}
        # A prompt shorter than the prefix shares the whole blocks it covers, no more.
        cover = np.minimum(reqs.prompt_tokens // self.block_tokens, per).tolist()
        hashes = tuple(chains[g] if n == per else chains[g][:n]
                       for g, n in zip(group.tolist(), cover, strict=True))
        return dataclasses.replace(reqs, prefix_hashes=hashes,
                                   prefix_block_tokens=self.block_tokens)


@dataclass(frozen=True)
class Requests:
    """The requests of one run, sorted by arrival; ids are positions in these arrays.
    ``notes`` say what loading changed or dropped (reported in the summary).
    ``klass[i]`` indexes ``class_names`` for a mixed workload (None otherwise)."""

    arrival_s: np.ndarray  # float64 seconds
    prompt_tokens: np.ndarray  # int64
    output_tokens: np.ndarray  # int64
    notes: tuple[str, ...] = ()
    priority: np.ndarray | None = None  # int64 class per request, lower is served first
    klass: np.ndarray | None = None  # int64 index into class_names
    class_names: tuple[str, ...] = ()
    # Prefix caching: per request, the ids of its leading prompt blocks of
    # prefix_block_tokens tokens each (equal ids mean equal content).
    prefix_hashes: tuple[np.ndarray, ...] | None = None
    prefix_block_tokens: int | None = None
    # workload.stages: each stage's [start, end) in seconds (None: one unstaged load).
    stage_windows: tuple[tuple[float, float], ...] | None = None
    # The trace column the hashes came from, so an error names what the user wrote.
    hash_column: str = "prefix_hash_ids"

    def __len__(self) -> int:
        return len(self.arrival_s)


