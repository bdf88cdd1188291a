"""Cross-field rules of a workload section, checked when it is loaded.

Each function takes the whole :class:`~sim.workload.requests.WorkloadConfig` and raises one
:class:`~sim.errors.ServesimError` naming the key (relative to ``workload``). They live
apart from the modules that build the requests, which import the configuration, so that
validating a configuration never imports its builders.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sim.configtools import MAX_TIME_S
from sim.errors import ServesimError

if TYPE_CHECKING:
    from sim.workload.requests import WorkloadConfig

NAME = re.compile(r"[A-Za-z0-9_.-]+")
"""Class names a scenario may declare (they become CSV cells and JSON keys)."""


def check_trace_keys(raw: Any) -> None:
    """A parsed ``workload`` mapping with a trace and ``arrivals`` or ``lengths`` beside
    it, refused before either is built (a partial ``arrivals`` set to change a trace's
    rate would otherwise be reported as missing its process)."""
    if not isinstance(raw, dict) or raw.get("trace") is None:
        return
    for key in ("arrivals", "lengths"):
        if raw.get(key) is not None:
            raise ServesimError(f"a trace brings its own {key}; remove workload.{key} or the "
                                "trace (a trace replays faster or slower with "
                                "workload.trace.time_scale, or at a rate with "
                                "workload.trace.target_rate)", where=f"workload.{key}")


def check_classes(cfg: WorkloadConfig) -> None:
    """Cross-field rules of a workload with ``classes`` (keys relative to ``workload``)."""
    classes = cfg.classes
    assert classes is not None
    if not classes:
        raise ServesimError("got an empty mapping; give at least one class", where="classes")
    for name in classes:
        if not NAME.fullmatch(name):
            raise ServesimError(f"class name {name!r}: use ASCII letters, digits, '_', '.' "
                                "or '-'",
                                where=f"classes.{name}")
    if cfg.priority is not None:
        raise ServesimError("with classes, give each class its own priority "
                            "(workload.classes.NAME.priority)", where="priority")
    if cfg.trace is not None:
        if cfg.arrivals is not None or cfg.lengths is not None:
            raise ServesimError("a trace brings its own arrivals and lengths; remove "
                                "arrivals/lengths or the trace", where="trace")
        for name, c in classes.items():
            for key in ("weight", "arrivals", "lengths"):
                if getattr(c, key) is not None:
                    raise ServesimError("the trace's class column assigns classes and the trace "
                                        "brings arrivals and lengths; a trace class takes only "
                                        "priority and slo", where=f"classes.{name}.{key}")
        return
    own = [n for n, c in classes.items() if c.arrivals is not None]
    if own and cfg.concurrency is not None:
        raise ServesimError("closed-loop clients (workload.concurrency) send when their "
                            "previous request ends; a class cannot have its own arrival "
                            "process: give it a weight", where=f"classes.{own[0]}.arrivals")
    if own:
        bare = [n for n in classes if n not in own]
        if bare:
            raise ServesimError(f"class {own[0]!r} has its own arrivals, so every class needs "
                                "them (or none, to share workload.arrivals by weight)",
                                where=f"classes.{bare[0]}.arrivals")
        if cfg.arrivals is not None:
            raise ServesimError("every class has its own arrivals; remove workload.arrivals "
                                "(or the classes' arrivals, giving weights instead)",
                                where="arrivals")
    else:
        if cfg.arrivals is None and cfg.concurrency is None:
            raise ServesimError("classes without arrivals of their own share workload.arrivals;"
                                " give it (or arrivals in every class)", where="arrivals")
        for name, c in classes.items():
            if c.weight is None:
                share = "workload.arrivals" if cfg.concurrency is None else "the requests"
                raise ServesimError(f"required: the class's share of {share} "
                                    "(relative, > 0)", where=f"classes.{name}.weight")
    for name, c in classes.items():
        if c.lengths is None and cfg.lengths is None:
            raise ServesimError("required here, or a shared workload.lengths",
                                where=f"classes.{name}.lengths")
    if cfg.lengths is not None and all(c.lengths is not None for c in classes.values()):
        raise ServesimError("unused: every class gives its own lengths; remove "
                            "workload.lengths", where="lengths")
    if cfg.num_requests is None and cfg.duration_s is None and cfg.stages is None:
        raise ServesimError("generated arrivals need num_requests, duration_s or stages",
                            where="num_requests")


def check_closed(cfg: WorkloadConfig) -> None:
    """Cross-field rules of a closed-loop workload (keys relative to ``workload``)."""
    n = cfg.concurrency
    if n is None:
        raise ServesimError("think_time_s applies to closed-loop clients; give "
                            "workload.concurrency too", where="think_time_s")
    tc = cfg.trace
    if tc is not None:
        if cfg.arrivals is not None:
            raise ServesimError("the trace's requests go in file order as clients free up; "
                                "remove arrivals (paced clients take generated lengths)",
                                where="arrivals")
        for key, neutral in (("time_scale", 1.0), ("target_rate", None)):
            if getattr(tc, key) != neutral:
                raise ServesimError("a closed loop ignores the trace's arrival times, so "
                                    f"{key} has no effect; remove it", where=f"trace.{key}")
        if cfg.lengths is not None:
            raise ServesimError("the trace brings the lengths; remove lengths or the trace",
                                where="lengths")
        if cfg.priority is not None:
            raise ServesimError("a trace brings its own priority column; remove "
                                "workload.priority", where="priority")
    else:
        if cfg.num_requests is None and cfg.duration_s is None:
            raise ServesimError("closed-loop clients need num_requests (requests sent in all) "
                                "or duration_s (when they stop sending)", where="num_requests")
        if cfg.classes is None and cfg.lengths is None:
            raise ServesimError("closed-loop clients draw their requests' lengths from here "
                                "(or a trace)", where="lengths")
    think = cfg.think_time_s or 0.0
    if cfg.num_requests is not None and cfg.duration_s is None:
        # Each client's k-th request is sent after k - 1 think times at least.
        rounds = -(-cfg.num_requests // n) - 1
        if think * rounds >= MAX_TIME_S:
            raise ServesimError(
                f"got {think:g} s: {n} clients sending {cfg.num_requests} requests wait "
                f"{rounds} think times each, {think * rounds:.3g} s, past the {MAX_TIME_S:g} s "
                "(31 years) a run's clock resolves; lower think_time_s or num_requests, or "
                "give duration_s", where="think_time_s")
    if cfg.classes is not None:
        check_classes(cfg)


def check_prefix_blocks(cfg: WorkloadConfig, block_size: int) -> None:
    """The tokens a prefix hash names, where the workload sets them, a whole number of KV
    blocks of ``block_size`` tokens (the prefix cache splits each hash into blocks); the
    error names the workload's key (full dotted path), not ``serving.block_size``."""
    for key, tokens in (("shared_prefix.block_tokens",
                         cfg.shared_prefix.block_tokens if cfg.shared_prefix else None),
                        ("trace.prefix_block_tokens",
                         cfg.trace.prefix_block_tokens if cfg.trace else None)):
        if tokens is not None and tokens % block_size:
            raise ServesimError(f"got {tokens}: each prefix hash names a whole number of KV "
                                f"blocks, so it must be a multiple of serving.block_size "
                                f"({block_size})", where=f"workload.{key}")
