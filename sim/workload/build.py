"""Put a workload's requests together: from a trace, closed-loop clients, request classes
or generated arrivals and lengths (:mod:`sim.workload.requests` describes each).

The one entry point, :func:`build_requests`, is what a run calls; it imports each
builder only when the workload needs it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from sim.configtools import MAX_TIME_S
from sim.errors import ServesimError
from sim.workload.draw import located, sample_lengths, workload_arrivals
from sim.workload.requests import Requests, WorkloadConfig
from sim.workload.stages import cap_note, stage_trace_times, windows


def build_requests(cfg: WorkloadConfig, base_dir: Path | None, rng: np.random.Generator,
                   source: str = "<scenario>", max_context: int | None = None,
                   block_tokens: int | None = None) -> Requests:
    """Materialise the workload's requests (arrays), reading trace files if it names any.
    ``max_context`` (tokens) is the cap a trace's ``truncate: true`` applies, which also
    cuts prefix hashes in blocks of ``block_tokens`` (the KV block size) when the trace
    does not size them. Arrival
    times that are not finite or reach :data:`MAX_TIME_S` are an error naming the key
    that made them (a NaN arrival would never be reached: the run would hang)."""
    try:
        reqs = _build(cfg, base_dir, rng, source, max_context, block_tokens)
    except ServesimError as exc:
        raise exc.located(source) from None  # name the scenario where nothing else is
    if (cfg.concurrency is None or cfg.arrivals is not None) and len(reqs.arrival_s):
        with np.errstate(invalid="ignore"):
            bad = ~(np.abs(reqs.arrival_s) < MAX_TIME_S)
        if bad.any():
            t = float(reqs.arrival_s[int(np.argmax(bad))])
            raise ServesimError(f"arrival times reach {t:.3g} s, expected finite times below "
                                f"{MAX_TIME_S:.0e} s (31 years), where the clock stops "
                                f"resolving a step: {_time_cause(cfg)}", source, _time_key(cfg))
    return reqs


def _time_key(cfg: WorkloadConfig) -> str:
    """The key whose value set the arrival times."""
    if cfg.trace is not None:
        tc = cfg.trace
        return ("workload.stages" if cfg.stages is not None else
                "workload.trace.target_rate" if tc.target_rate is not None else
                "workload.trace.time_scale" if tc.time_scale != 1.0 else "workload.trace")
    return "workload.stages" if cfg.stages is not None else "workload.arrivals"


def _time_cause(cfg: WorkloadConfig) -> str:
    """What to change, in words, for :func:`_time_key`'s key."""
    key = _time_key(cfg)
    if key == "workload.trace":
        return ("the trace's own arrival times are that late (times from an epoch? rebase "
                "them to start near 0)")
    if key == "workload.arrivals" and cfg.arrivals is not None and cfg.arrivals.rate is not None:
        a = cfg.arrivals
        return (f"the arrival rate ({a.rate:g} req/s) is too low or start_s ({a.start_s:g} s) "
                "too late")
    return {"workload.trace.target_rate": "the target rate is too low for the trace",
            "workload.trace.time_scale": "the time scale stretches the trace that far",
            "workload.stages": "a stage's rate or duration is out of range"}.get(
        key, "the arrival rate is too low or start_s too late")


def _build(cfg: WorkloadConfig, base_dir: Path | None, rng: np.random.Generator,
           source: str, max_context: int | None, block_tokens: int | None) -> Requests:
    """:func:`build_requests` without its check of the arrival times."""
    from sim.workload import traces  # lazy: only trace workloads need the loaders

    if cfg.trace is not None:
        from sim.workload.mix import trace_classes
        from sim.workload.tracetools import apply_transforms, skip_rows

        tc = cfg.trace
        try:
            tr = traces.load_trace(traces.find_trace(tc.path, base_dir), tc.format,
                                   sort=tc.sort, rng=rng, hash_block_tokens=block_tokens,
                                   **tc.load_options())
            spec = tc.transforms(max_context, block_tokens)
            # target_rate applies to the window replayed (below), not the whole trace.
            windowed = tc.target_rate is not None and tr.arrival_s is not None
            if windowed:
                spec = dataclasses.replace(spec, target_rate_rps=None)
            tr, changes = apply_transforms(tr, spec, rng)
            if tc.start_row:
                tr, skipped = skip_rows(tr, tc.start_row)
                changes = [*changes, skipped]
        except ServesimError as exc:
            # A transformation's (or start_row's) error names its key under the section;
            # one inside the trace file keeps the file and line it names.
            raise located(exc, source, "workload.trace") from None
        notes = [f"{tr.source}: dropped {n} rows ({why})" for why, n in tr.dropped.items()]
        notes += [f"{tr.source}: {n} rows carry {name}, which servesim does not read (each "
                  "row is one request at its timestamp)" for name, n in tr.unused.items()]
        if tc.prefix_block_tokens is not None and tr.prefix_hashes is None:
            notes.append(f"workload.trace.prefix_block_tokens: {tr.source} has no prefix "
                         "hashes for it to size")
        notes += [str(c) for c in changes]
        staged = None
        if cfg.concurrency is not None:
            from sim.workload.closedloop import unsent

            t = unsent(len(tr.prompt_tokens), notes)
        elif tr.arrival_s is None:
            raise ServesimError(f"{tc.path} has lengths only; use lengths: {{empirical: ...}} "
                                "with generated arrivals", source, "workload.trace.path")
        elif cfg.stages is not None:
            raw = np.asarray(tr.arrival_s, dtype=np.float64)
            staged = windows(cfg.stages, float(raw[0]) if len(raw) else 0.0)
            t = stage_trace_times(raw, cfg.stages, staged, source)
            notes.append(f"replayed in {len(cfg.stages)} stages: the first {len(t)} requests, "
                         "their gaps scaled to each stage's rate")
        else:
            t = np.asarray(tr.arrival_s, dtype=np.float64)
            if windowed:
                t = _rate_window(t, cfg, source, notes)
        n = _rows_replayed(t, cfg, windowed or cfg.stages is not None, notes)
        prio = None if tr.priority is None else np.asarray(tr.priority[:n], dtype=np.int64)
        klass, names, prio = trace_classes(cfg, tr.klass, n, prio, source)
        hashes = None if tr.prefix_hashes is None else tuple(tr.prefix_hashes[:n])
        return Requests(t[:n].copy(), tr.prompt_tokens[:n].astype(np.int64),
                        tr.output_tokens[:n].astype(np.int64), tuple(notes), prio, klass, names,
                        hashes, tr.prefix_block_tokens if hashes is not None else None, staged,
                        "hash_ids" if tr.fmt == "mooncake" else "prefix_hash_ids")

    if cfg.concurrency is not None:
        from sim.workload.closedloop import closed_requests, first_chunk

        return closed_requests(cfg, first_chunk(cfg), base_dir, rng, source)
    if cfg.classes is not None:
        from sim.workload.mix import build_mixed

        reqs = build_mixed(cfg, base_dir, rng, source)
    else:
        assert cfg.arrivals is not None and cfg.lengths is not None
        t = workload_arrivals(cfg, rng)
        unused: list[str] = []
        prompt, output = sample_lengths(cfg.lengths, len(t), rng, base_dir, source,
                                        "workload.lengths", unused)
        prio = None if cfg.priority is None else cfg.priority.sample(len(t), rng)
        reqs = Requests(t, prompt, output, priority=prio, notes=tuple(unused))
    if cfg.stages is not None:
        assert cfg.arrivals is not None
        spans = windows(cfg.stages, cfg.arrivals.start_s)
        # The cap cuts the stages short silently otherwise: its stage reports show why.
        capped = cap_note(cfg.num_requests, reqs.arrival_s, spans)
        reqs = dataclasses.replace(reqs, stage_windows=spans,
                                   notes=reqs.notes + ((capped,) if capped else ()))
    if cfg.shared_prefix is not None:
        # Drawn last, so adding a shared prefix leaves every other draw unchanged.
        reqs = cfg.shared_prefix.apply(reqs, rng)
    return reqs


def _rows_replayed(t: np.ndarray, cfg: WorkloadConfig, told: bool, notes: list[str]) -> int:
    """How many of a trace's rows (arrival times ``t``, s) a run replays: those arriving
    before ``duration_s`` (open loop), at most ``num_requests``. A cut, or a
    ``num_requests`` the rows fall short of, is said in ``notes``, so that part of a trace
    is never mistaken for all of it; ``told``: a rate window's or the stages' own note
    already says which rows were taken."""
    n = len(t)
    why = ""
    if cfg.duration_s is not None and cfg.concurrency is None:
        n = int(np.searchsorted(t, cfg.duration_s, side="left"))
        why = f"those arriving before duration_s = {cfg.duration_s:g} s"
    if cfg.num_requests is not None and cfg.num_requests < n:
        n = cfg.num_requests
        why = f"num_requests = {n}"
    if n < len(t):
        notes.append(f"replayed the first {n} of {len(t)} rows ({why})")
    elif cfg.num_requests is not None and cfg.num_requests > n and not told:
        notes.append(f"num_requests = {cfg.num_requests}, but the trace holds {n} rows to "
                     f"replay: all {n} replayed")
    return n


def _rate_window(t: np.ndarray, cfg: WorkloadConfig, source: str, notes: list[str]) -> np.ndarray:
    """Arrival times (s) of the trace window a run replays at ``workload.trace.target_rate``
    (:func:`sim.workload.tracetools.rate_window`), bounded by ``duration_s`` and
    ``num_requests``; its note appended to ``notes``."""
    from sim.workload.tracetools import rate_window

    assert cfg.trace is not None and cfg.trace.target_rate is not None
    try:
        t, change = rate_window(t, cfg.trace.target_rate, cfg.duration_s, cfg.num_requests)
    except ServesimError as exc:
        raise located(exc, source, "workload.trace.target_rate") from None
    notes.append(str(change))
    return t
