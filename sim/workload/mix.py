"""Mixed workloads: named request classes, each with its own lengths, priority and SLO.

A scenario gets classes in one of three ways (``workload.classes``, see docs/scenarios.md):

1. **Shared arrivals, by weight.** ``workload.arrivals`` is one process; each request
   it produces is given a class drawn with probability ``weight / sum(weights)``, then
   each class draws its members' lengths.
2. **Own arrivals per class.** Every class has ``arrivals``; the streams are generated
   one class after the other (declaration order) and merged by time (ties keep class
   order). ``num_requests`` and ``duration_s`` bound the merged stream.
3. **A trace's ``class`` column.** Its labels define the classes; ``workload.classes``
   may then give labelled classes a ``priority`` and an ``slo``, nothing else.

Classes are indexed in declaration order (trace labels not declared follow, sorted).
Per-request draws all come from the one generator passed in, in a fixed order, so a
seed fixes the workload.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from sim.errors import ServesimError
from sim.workload.draw import arrival_times, sample_lengths, workload_arrivals
from sim.workload.requests import ClassConfig, Requests, WorkloadConfig, probabilities


def _priorities(classes: list[ClassConfig | None], klass: np.ndarray) -> np.ndarray | None:
    """Per-request priority from its class (0 where unset); None when no class sets one."""
    if all(c is None or c.priority is None for c in classes):
        return None
    table = np.array([0 if c is None or c.priority is None else c.priority for c in classes],
                     dtype=np.int64)
    return table[klass]


def _class_lengths(cfg: WorkloadConfig, i: int, n: int, rng: np.random.Generator,
                   base_dir: Path | None, source: str, notes: list[str]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` (prompt, output) lengths of class ``i``: its own, else ``workload.lengths``
    (what their file leaves unused goes to ``notes``)."""
    assert cfg.classes is not None
    name, c = list(cfg.classes.items())[i]
    lc = c.lengths if c.lengths is not None else cfg.lengths
    key = f"workload.classes.{name}.lengths" if c.lengths is not None else "workload.lengths"
    assert lc is not None
    return sample_lengths(lc, n, rng, base_dir, source, key, notes)


def draw_by_weight(cfg: WorkloadConfig, n: int, rng: np.random.Generator,
                   base_dir: Path | None, source: str) -> Requests:
    """``n`` requests, each given a class drawn by weight, then its class's lengths
    (tokens); arrival times +inf, for the caller to set."""
    assert cfg.classes is not None
    names = tuple(cfg.classes)
    configs = list(cfg.classes.values())
    p = probabilities([c.weight for c in configs])
    klass = rng.choice(len(names), size=n, p=p).astype(np.int64)
    prompt = np.empty(n, dtype=np.int64)
    output = np.empty(n, dtype=np.int64)
    notes: list[str] = []
    for i in range(len(names)):
        idx = np.flatnonzero(klass == i)
        prompt[idx], output[idx] = _class_lengths(cfg, i, len(idx), rng, base_dir, source,
                                                  notes)
    notes += [f"workload.classes.{names[i]} sends no request: none of the {n:,} was drawn "
              f"for it (its share {p[i]:.3g})"
              for i in np.setdiff1d(np.arange(len(names)), klass)]
    return Requests(np.full(n, np.inf), prompt, output,
                    priority=_priorities(list(configs), klass), klass=klass,
                    class_names=names, notes=tuple(notes))


def build_mixed(cfg: WorkloadConfig, base_dir: Path | None, rng: np.random.Generator,
                source: str) -> Requests:
    """The requests of a generated mixed workload (arrival seconds, token counts, class)."""
    assert cfg.classes is not None
    names = tuple(cfg.classes)
    configs = list(cfg.classes.values())
    if cfg.arrivals is not None:  # one shared process; classes drawn by weight
        t = workload_arrivals(cfg, rng)
        # Times first, then classes and lengths: the draws of a seed stay in this order.
        return dataclasses.replace(draw_by_weight(cfg, len(t), rng, base_dir, source),
                                   arrival_s=t)
    else:  # each class its own process, merged by time
        parts = []
        notes: list[str] = []
        for i, c in enumerate(configs):
            assert c.arrivals is not None
            ti = arrival_times(c.arrivals, cfg.num_requests, cfg.duration_s, rng)
            parts.append((ti, *_class_lengths(cfg, i, len(ti), rng, base_dir, source, notes),
                          np.full(len(ti), i, dtype=np.int64)))
        t, prompt, output, klass = (np.concatenate([p[j] for p in parts]) for j in range(4))
        order = np.argsort(t, kind="stable")[:cfg.num_requests]
        t, prompt, output, klass = t[order], prompt[order], output[order], klass[order]
        for i in np.setdiff1d(np.arange(len(names)), klass):
            start = configs[i].arrivals.start_s
            why = (f"its arrivals start at {start:g} s, at or past workload.duration_s "
                   f"({cfg.duration_s:g} s)" if cfg.duration_s is not None
                   and start >= cfg.duration_s else
                   f"num_requests ({cfg.num_requests:,}) is reached before its first "
                   f"arrival ({float(parts[i][0][0]):g} s)" if len(parts[i][0]) else
                   "its process made no arrival")
            notes.append(f"workload.classes.{names[i]} sends no request: {why}")
    return Requests(t, prompt, output, priority=_priorities(list(configs), klass),
                    klass=klass, class_names=names, notes=tuple(notes))


def trace_classes(cfg: WorkloadConfig, labels: np.ndarray | None, n: int,
                  priority: np.ndarray | None, source: str
                  ) -> tuple[np.ndarray | None, tuple[str, ...], np.ndarray | None]:
    """Class index per request (the first ``n`` rows), class names and priorities of a
    trace with ``labels`` (its ``class`` column, None when it has none)."""
    declared = list(cfg.classes or {})
    if labels is None:
        if declared:
            raise ServesimError("the trace has no class column, so its classes cannot be "
                                "named; remove workload.classes or label the trace's rows",
                                source, "workload.classes")
        return None, (), priority
    found = [str(x) for x in np.unique(labels)]
    for name in declared:
        if name not in found:
            raise ServesimError(f"no trace row has class {name!r}; the trace's classes: "
                                f"{', '.join(map(repr, found))}", source,
                                f"workload.classes.{name}")
    names = tuple(declared + [x for x in found if x not in declared])
    uniq, inverse = np.unique(labels[:n], return_inverse=True)
    index = np.array([names.index(str(u)) for u in uniq], dtype=np.int64)
    klass = index[inverse.reshape(-1)]
    configs = [(cfg.classes or {}).get(x) for x in names]
    prio = _priorities(configs, klass)
    if prio is not None:
        if priority is not None:
            who = next(x for x, c in zip(names, configs, strict=True)
                       if c is not None and c.priority is not None)
            raise ServesimError("the trace has a priority column; remove the class's "
                                "priority", source, f"workload.classes.{who}.priority")
        priority = prio
    return klass, names, priority


def class_slos(cfg: WorkloadConfig, names: tuple[str, ...], ttft_s: float | None,
               tpot_s: float | None) -> list[tuple[float | None, float | None]]:
    """Each class's (TTFT, TPOT) targets in seconds: its own ``slo`` keys, else the
    scenario-wide ``ttft_s`` / ``tpot_s`` (None: no target)."""
    out = []
    for name in names:
        c = (cfg.classes or {}).get(name)
        s = c.slo if c is not None else None
        out.append((s.ttft_s if s is not None and s.ttft_s is not None else ttft_s,
                    s.tpot_s if s is not None and s.tpot_s is not None else tpot_s))
    return out
